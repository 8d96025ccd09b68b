/* scheduler/accel_registry.c — device names to backends.
 *
 *   cpu            the reference backend (always present)
 *   cuda[:N]       the CUDA backend, a plugin (libtandem_cuda.so) loaded with dlopen so that the
 *                  same binary runs on machines without CUDA; missing plugin or GPU -> NOT_FOUND
 *   fpga-emu[:N]   an emulated U280 card (fpga/emu, through the XRT C API)
 *   fpga[:N]       a real U280 through XRT (libxrt_coreutil.so.2)
 */
#include "scheduler/accel_impl.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef accel_dev *(*accel_open_fn)(int index, const model *m, const accel_opts *o, char *err,
                                    size_t errlen);

/* Directory of the running binary (for plugins installed beside it). */
static void exe_dir(char *out, size_t n)
{
    char buf[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (k <= 0) {
        snprintf(out, n, ".");
        return;
    }
    buf[k] = 0;
    char *slash = strrchr(buf, '/');
    if (slash) *slash = 0;
    snprintf(out, n, "%s", buf);
}

static accel_dev *cuda_open(int index, const model *m, const accel_opts *o, char *err,
                            size_t errlen)
{
    char path[PATH_MAX + 32], dir[PATH_MAX];
    void *h = NULL;
    if (o && o->lib_path) {
        h = dlopen(o->lib_path, RTLD_NOW | RTLD_LOCAL);
        snprintf(path, sizeof path, "%s", o->lib_path);
    } else {
        exe_dir(dir, sizeof dir);
        const char *cands[] = {"%s/libtandem_cuda.so", "%s/../lib/tandem/libtandem_cuda.so"};
        for (size_t i = 0; i < 2 && !h; i++) {
            snprintf(path, sizeof path, cands[i], dir);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!h) {
        snprintf(err, errlen, "cuda: cannot load the CUDA backend (%s): %s", path, dlerror());
        return NULL;
    }
    accel_open_fn fn = (accel_open_fn)dlsym(h, "gpu_accel_open");
    if (!fn) {
        snprintf(err, errlen, "cuda: %s has no gpu_accel_open", path);
        dlclose(h);
        return NULL;
    }
    /* The plugin stays loaded for the life of the process (devices may outlive this call). */
    return fn(index, m, o, err, errlen);
}

static const struct {
    const char *kind;
    accel_open_fn open;
} backends[] = {
    {"cpu", cpu_accel_open},
    {"cuda", cuda_open},
    {"fpga-emu", fpga_emu_accel_open},
    {"fpga", fpga_accel_open},
};

accel_dev *accel_open(const char *name, const model *m, const accel_opts *opts, char *err,
                      size_t errlen)
{
    accel_opts defaults = {0};
    if (!opts) opts = &defaults;
    char kind[32];
    int index = 0;
    const char *colon = strchr(name, ':');
    size_t klen = colon ? (size_t)(colon - name) : strlen(name);
    if (klen == 0 || klen >= sizeof kind) {
        snprintf(err, errlen, "bad device name '%s'", name);
        return NULL;
    }
    memcpy(kind, name, klen);
    kind[klen] = 0;
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || v < 0 || v > 255) {
            snprintf(err, errlen, "bad device index in '%s'", name);
            return NULL;
        }
        index = (int)v;
    }
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].kind, kind) == 0) return backends[i].open(index, m, opts, err, errlen);
    snprintf(err, errlen, "unknown device '%s' (known: cpu, cuda[:N], fpga-emu[:N], fpga[:N])", name);
    return NULL;
}
