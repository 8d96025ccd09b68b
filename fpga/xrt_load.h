/* fpga/xrt_load.h — the XRT C API, loaded at run time, behind tandem-style wrappers.
 *
 * fpga_xrt_new() dlopen()s an XRT library (libxrt_coreutil.so.2 by default, or a path from the
 * configuration, e.g. build/libxrt_emu.so for the emulator) and resolves every function of
 * fpga/xrt/xrt_api.h into a table; a missing library or symbol is a clean error, so the daemon
 * builds and starts on machines without XRT. Nothing is linked against XRT at build time.
 *
 * Each wrapper calls one XRT function and turns XRT's error style (NULL / -1 / ABORT + errno,
 * errno sometimes negative, sometimes untouched) into an ACCEL_* status (scheduler/accel.h):
 *   ACCEL_ERR_NOMEM      ENOMEM, ENOSPC: the bank or the host is out of memory
 *   ACCEL_ERR_INVALID    EINVAL, E2BIG, ERANGE, EFBIG, EBADF, ENOENT: a bad argument or handle
 *                        (a BO larger than its bank, a wrong bank, an unknown kernel)
 *   ACCEL_ERR_TIMEOUT    a run not finished within the wait's timeout (it is still in flight)
 *   ACCEL_ERR_DEVICE     everything else: ENODEV, EIO, a run that ended in ERROR or ABORT
 *   ACCEL_ERR_UNSUPPORTED an emulator extension called on real XRT
 * and records a one-line message, readable with fpga_xrt_error() on the same thread until its
 * next failing wrapper call.
 *
 * Ownership: handles returned through out-parameters belong to the caller, who closes them with
 * the matching *_close / *_free wrapper. The table (fpga_xrt) must outlive every handle.
 * Threads: the table is immutable after fpga_xrt_new(); wrappers may be called from any thread,
 * with XRT's own rules for each handle (a run handle is driven by one thread at a time). */
#ifndef TANDEM_FPGA_XRT_LOAD_H
#define TANDEM_FPGA_XRT_LOAD_H
#include "fpga/xrt/emu_api.h"
#include "fpga/xrt/xrt_api.h"
#include "scheduler/accel.h"
#include <stddef.h>
#include <stdint.h>

#define FPGA_XRT_DEFAULT_LIB "libxrt_coreutil.so.2"

typedef struct fpga_xrt fpga_xrt;

/* Loads lib_path (NULL: FPGA_XRT_DEFAULT_LIB). Returns NULL with a message in err when the
 * library or one of the XRT functions is missing. The caller owns the result. */
fpga_xrt *fpga_xrt_new(const char *lib_path, char *err, size_t errlen);
/* Drops the table (the library itself stays loaded: RTLD_NODELETE); every handle must be
 * closed before. NULL is a no-op. */
void fpga_xrt_free(fpga_xrt *x);
/* 1 when the library is the tandem emulator (it exports the fpga_emu_* extensions). */
int fpga_xrt_is_emulator(const fpga_xrt *x);
const char *fpga_xrt_path(const fpga_xrt *x);
/* Message of this thread's last failed fpga_xrt_* call. */
const char *fpga_xrt_error(void);

/* devices */
int fpga_xrt_device_open(fpga_xrt *x, unsigned index, xrtDeviceHandle *out);
int fpga_xrt_device_open_bdf(fpga_xrt *x, const char *bdf, xrtDeviceHandle *out);
int fpga_xrt_device_close(fpga_xrt *x, xrtDeviceHandle d);
int fpga_xrt_load_xclbin_file(fpga_xrt *x, xrtDeviceHandle d, const char *path);
int fpga_xrt_xclbin_uuid(fpga_xrt *x, xrtDeviceHandle d, xuid_t out);

/* kernels: `exclusive` selects xrtPLKernelOpenExclusive */
int fpga_xrt_kernel_open(fpga_xrt *x, xrtDeviceHandle d, const xuid_t uuid, const char *name,
                         int exclusive, xrtKernelHandle *out);
int fpga_xrt_kernel_close(fpga_xrt *x, xrtKernelHandle k);
/* Memory group a global argument is connected to (what fpga_xrt_bo_alloc takes). */
int fpga_xrt_kernel_group(fpga_xrt *x, xrtKernelHandle k, int argno, uint32_t *group);

/* buffer objects */
int fpga_xrt_bo_alloc(fpga_xrt *x, xrtDeviceHandle d, size_t size, uint32_t flags, uint32_t group,
                      xrtBufferHandle *out);
/* userptr must be 4 KiB aligned and outlive the BO. */
int fpga_xrt_bo_alloc_userptr(fpga_xrt *x, xrtDeviceHandle d, void *userptr, size_t size,
                              uint32_t flags, uint32_t group, xrtBufferHandle *out);
int fpga_xrt_bo_free(fpga_xrt *x, xrtBufferHandle b);
int fpga_xrt_bo_size(fpga_xrt *x, xrtBufferHandle b, size_t *size);
int fpga_xrt_bo_address(fpga_xrt *x, xrtBufferHandle b, uint64_t *addr);
/* host copy only: nothing reaches the card before fpga_xrt_bo_sync(TO_DEVICE) */
int fpga_xrt_bo_write(fpga_xrt *x, xrtBufferHandle b, const void *src, size_t n, size_t off);
int fpga_xrt_bo_read(fpga_xrt *x, xrtBufferHandle b, void *dst, size_t n, size_t off);
int fpga_xrt_bo_map(fpga_xrt *x, xrtBufferHandle b, void **host);
int fpga_xrt_bo_sync(fpga_xrt *x, xrtBufferHandle b, enum xclBOSyncDirection dir, size_t n,
                     size_t off);

/* runs: each scalar setter passes its value at exactly its width (see xrt_api.h) */
int fpga_xrt_run_open(fpga_xrt *x, xrtKernelHandle k, xrtRunHandle *out);
int fpga_xrt_run_set_bo(fpga_xrt *x, xrtRunHandle r, int argno, xrtBufferHandle b);
int fpga_xrt_run_set_u32(fpga_xrt *x, xrtRunHandle r, int argno, uint32_t v);
int fpga_xrt_run_set_u64(fpga_xrt *x, xrtRunHandle r, int argno, uint64_t v);
int fpga_xrt_run_start(fpga_xrt *x, xrtRunHandle r);
/* Waits up to timeout_ms (0: forever). ACCEL_OK when COMPLETED; ACCEL_ERR_TIMEOUT when still in
 * flight; ACCEL_ERR_DEVICE when it ended in ERROR/ABORT. *state (may be NULL) gets the state. */
int fpga_xrt_run_wait(fpga_xrt *x, xrtRunHandle r, unsigned timeout_ms, enum ert_cmd_state *state);
enum ert_cmd_state fpga_xrt_run_state(fpga_xrt *x, xrtRunHandle r);
int fpga_xrt_run_close(fpga_xrt *x, xrtRunHandle r);

/* emulator extensions (fpga/xrt/emu_api.h); ACCEL_ERR_UNSUPPORTED on real XRT */
int fpga_xrt_emu_run_stats(fpga_xrt *x, xrtRunHandle r, fpga_emu_run_stats *out);
int fpga_xrt_emu_card_stats(fpga_xrt *x, xrtDeviceHandle d, fpga_emu_card_stats *out);
int fpga_xrt_emu_set_pace(fpga_xrt *x, xrtDeviceHandle d, int on);
/* 0 on real XRT */
uint64_t fpga_xrt_emu_model_sync_ns(fpga_xrt *x, uint64_t bytes);

const char *fpga_xrt_state_name(enum ert_cmd_state s);

#endif
