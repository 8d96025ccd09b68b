/* tests/fpga/emu_util.h — helpers for tests that drive the emulated card. They go through
 * fpga/xrt_load.c and the dlopen()ed build/libxrt_emu.so, exactly as the daemon does. */
#ifndef TANDEM_TESTS_EMU_UTIL_H
#define TANDEM_TESTS_EMU_UTIL_H
#include "fpga/xrt_load.h"

/* $BUILD/libxrt_emu.so (BUILD defaults to "build"). */
const char *t_emu_path(void);
/* Loads the emulator; on failure records a test failure and returns NULL. */
fpga_xrt *t_emu_load(void);
/* Opens kernel `name` of the xclbin loaded on d. */
int t_emu_kernel(fpga_xrt *x, xrtDeviceHandle d, const char *name, xrtKernelHandle *k);
/* One kv_gather run: n bytes from src+src_off to dst+dst_off; returns the wait's status.
 * stats (may be NULL) gets the emulator's run stats on success. */
int t_emu_gather(fpga_xrt *x, xrtKernelHandle k, xrtBufferHandle src, xrtBufferHandle dst,
                 uint64_t src_off, uint64_t dst_off, uint64_t n, unsigned timeout_ms,
                 fpga_emu_run_stats *stats);
/* Writes an xclbin description into the test's temporary directory; returns its path. */
const char *t_emu_xclbin_file(const char *name, const char *text);

#endif
