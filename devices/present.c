/* devices/present.c — whether a named device is on this machine, before opening it
 * (devices_present, devices.h): an absent device is skipped, a broken one is an error. */
#include "devices/devices.h"
#include "devices/name.h"
#include "fpga/xrt_load.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The CUDA driver API's entry points the probe needs (cuda.h: CUresult is an int enum,
 * CUDA_ERROR_NO_DEVICE = 100). Asking the driver, not the plugin, keeps the answer the same
 * whether or not this binary was built with CUDA, and honours CUDA_VISIBLE_DEVICES. */
#define CU_ERROR_NO_DEVICE 100
typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_count_fn)(int *count);

static int cuda_present(int index, char *why, size_t whylen)
{
    /* The driver stays loaded (the plugin loads it again anyway; unloading it is not safe). */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, whylen, "no NVIDIA driver on this machine (libcuda.so.1 not found)");
        return 0;
    }
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
    if (!init || !count) return 1; /* an odd driver: let the open say what is wrong */
    int n = 0, st = init(0);
    if (st == CU_ERROR_NO_DEVICE) {
        snprintf(why, whylen, "the NVIDIA driver sees no GPU");
        return 0;
    }
    if (st != 0 || count(&n) != 0) return 1; /* a GPU whose driver fails: an error, not absence */
    if (index >= n) {
        snprintf(why, whylen, "%d GPU(s) visible, no cuda:%d", n, index);
        return 0;
    }
    return 1;
}

static int fpga_present(int index, char *why, size_t whylen)
{
    /* XRT missing is an absent card; XRT there but unusable (a missing symbol) is the open's
     * error. The library stays loaded (fpga_xrt_new loads it RTLD_NODELETE anyway). */
    if (!dlopen(FPGA_XRT_DEFAULT_LIB, RTLD_LAZY | RTLD_LOCAL)) {
        snprintf(why, whylen, "no XRT on this machine (%s not found)", FPGA_XRT_DEFAULT_LIB);
        return 0;
    }
    char err[256];
    fpga_xrt *x = fpga_xrt_new(NULL, err, sizeof err);
    if (!x) return 1;
    xrtDeviceHandle dev;
    int present = fpga_xrt_device_open(x, (unsigned)index, &dev) == 0;
    if (present) fpga_xrt_device_close(x, dev);
    else snprintf(why, whylen, "no card %d: %s", index, fpga_xrt_error());
    fpga_xrt_free(x);
    return present;
}

int devices_present(const char *name, char *why, size_t whylen)
{
    char kind[32];
    int index;
    snprintf(why, whylen, "present");
    if (devices_parse_name(name, kind, sizeof kind, &index, why, whylen)) return 1;
    if (!strcmp(kind, "cuda")) return cuda_present(index, why, whylen);
    if (!strcmp(kind, "fpga")) return fpga_present(index, why, whylen);
    snprintf(why, whylen, "present");
    return 1;
}
