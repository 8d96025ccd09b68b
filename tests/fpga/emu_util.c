#include "tests/fpga/emu_util.h"
#include "tests/test.h"
#include <stdio.h>
#include <stdlib.h>

const char *t_emu_path(void)
{
    static char path[512];
    const char *b = getenv("BUILD");
    snprintf(path, sizeof path, "%s/libxrt_emu.so", b && *b ? b : "build");
    return path;
}

fpga_xrt *t_emu_load(void)
{
    char err[512];
    fpga_xrt *x = fpga_xrt_new(t_emu_path(), err, sizeof err);
    if (!x) t_fail(__FILE__, __LINE__, "%s (run make first)", err);
    else if (!fpga_xrt_is_emulator(x)) t_fail(__FILE__, __LINE__, "%s is not the emulator", t_emu_path());
    return x;
}

int t_emu_kernel(fpga_xrt *x, xrtDeviceHandle d, const char *name, xrtKernelHandle *k)
{
    xuid_t uuid;
    int rc = fpga_xrt_xclbin_uuid(x, d, uuid);
    if (rc) return rc;
    return fpga_xrt_kernel_open(x, d, uuid, name, 0, k);
}

int t_emu_gather(fpga_xrt *x, xrtKernelHandle k, xrtBufferHandle src, xrtBufferHandle dst,
                 uint64_t src_off, uint64_t dst_off, uint64_t n, unsigned timeout_ms,
                 fpga_emu_run_stats *stats)
{
    xrtRunHandle r;
    int rc = fpga_xrt_run_open(x, k, &r);
    if (rc) return rc;
    if (!(rc = fpga_xrt_run_set_bo(x, r, 0, src)) && !(rc = fpga_xrt_run_set_bo(x, r, 1, dst)) &&
        !(rc = fpga_xrt_run_set_u64(x, r, 2, src_off)) &&
        !(rc = fpga_xrt_run_set_u64(x, r, 3, dst_off)) && !(rc = fpga_xrt_run_set_u64(x, r, 4, n)) &&
        !(rc = fpga_xrt_run_start(x, r)))
        rc = fpga_xrt_run_wait(x, r, timeout_ms, NULL);
    if (!rc && stats) rc = fpga_xrt_emu_run_stats(x, r, stats);
    fpga_xrt_run_close(x, r);
    return rc;
}

const char *t_emu_xclbin_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}
