/* tools/bench_gpu/tls.h — bench_gpu's AsyncTLS modes (tools/bench_gpu/tls.c). */
#ifndef TANDEM_TOOLS_BENCH_GPU_TLS_H
#define TANDEM_TOOLS_BENCH_GPU_TLS_H
#include "model/ckpt/model.h"
#include "scheduler/accel.h"
#include <stddef.h>

/* --tls: one context, every batch of the list; 0 or -1. */
int bg_tls_run(accel_dev *d, const model *m, int ctx, const long *batch, int nbatch, int steps,
               int budget, int blocks);
/* What the host can pin: MemAvailable, or less under a memory cgroup (KiB). */
long bg_host_avail_kb(void);
/* --tls-offload: the largest batches at ctx tokens of context, per mode of the list; 0 or -1. */
int bg_tls_off_run(accel_dev *d, const model *m, int ctx, int steps, int budget, int blocks,
                   long dense_blocks, const char *modes, double *new_blocks);
/* An evenly spread channel file for m written to $TMPDIR (its path in path); 0 or -1. */
int bg_tls_channels(const model *m, char *path, size_t n);

#endif
