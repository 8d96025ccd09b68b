/* cpu/backend.h — the CPU device behind scheduler/accel.h: the reference forward pass, threaded.
 *
 * Opened by name ("cpu") through the composition root (devices/devices.h); declared here for it
 * and for tests that wrap a CPU device. There is one CPU device: index must be 0. o->threads
 * picks the pool's size (0: every online core); the KV budget is o->mem_limit, else half of
 * physical memory. Capabilities: PREFILL | DECODE | KV_EXPORT | KV_IMPORT. NULL, with a message
 * in err, when the model cannot be served (head_dim above 1024, out of memory). */
#ifndef TANDEM_CPU_BACKEND_H
#define TANDEM_CPU_BACKEND_H
#include "scheduler/accel.h"

accel_dev *cpu_accel_open(int index, const model *m, const accel_opts *o, char *err, size_t errlen);

/* KV blocks (cpu/kv_cache.h) referenced by at least one live sequence of this CPU device: for
 * tests and accounting (0 once every sequence is freed). Any thread. */
int cpu_accel_kv_blocks_in_use(accel_dev *d);
/* 1 when the device's block pool is reserved address space (cpu/kv_cache.h, "Memory plan"), 0
 * when it grows by copying (a budget past physical memory): for tests. */
int cpu_accel_kv_reserved(accel_dev *d);
/* AsyncTLS sparse decode (accel_opts.decode_sparse): keys the decode steps attended and keys
 * they would have attended densely, summed over steps, layers and KV heads since open (both 0
 * when it is off). Any thread (atomics). */
void cpu_accel_tls_stats(accel_dev *d, int64_t *keys_read, int64_t *keys_total);

#endif
