/* scheduler/accel_registry.c — device names to backends.
 *
 *   cpu            the reference backend (always present)
 *   cuda[:N]       the CUDA backend, a plugin loaded with dlopen so that the same binary runs on
 *                  machines without CUDA; missing plugin or GPU -> NOT_FOUND. Two builds of it:
 *                  libtandem_cuda.so (bf16) and libtandem_cuda_f16.so (fp16), picked by
 *                  accel_opts.gpu_half and the checkpoint's dtype (accel.h)
 *   fpga-emu[:N]   an emulated U280 card (fpga/emu, through the XRT C API): build/libxrt_emu.so,
 *                  or <prefix>/lib/tandem/libxrt_emu.so once installed, unless opts->lib_path
 *   fpga[:N]       a real U280 through XRT (libxrt_coreutil.so.2)
 *
 * accel_present() (accel_registry.h) tells an absent device from a broken one. */
#include "scheduler/accel_registry.h"
#include "fpga/xrt_load.h"
#include "scheduler/accel_impl.h"
#include "scheduler/exe_dir.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef accel_dev *(*accel_open_fn)(int index, const model *m, const accel_opts *o, char *err,
                                    size_t errlen);

static const char *const cuda_plugin_bf16 = "libtandem_cuda.so";
static const char *const cuda_plugin_f16 = "libtandem_cuda_f16.so";

/* The checkpoint's dtype: the projections hold nearly all the weights (embed when no layers). */
static enum model_dtype ckpt_dtype(const model *m)
{
    return m->cfg.n_layers > 0 && m->layers ? m->layers[0].wq.dtype : m->embed.dtype;
}

enum accel_gpu_half accel_gpu_half_resolve(const model *m, enum accel_gpu_half h)
{
    if (h != ACCEL_GPU_HALF_AUTO) return h;
    if (!m) return ACCEL_GPU_HALF_BF16;
    return ckpt_dtype(m) == MODEL_DTYPE_BF16 ? ACCEL_GPU_HALF_BF16 : ACCEL_GPU_HALF_F16;
}

const char *accel_cuda_plugin(const model *m, enum accel_gpu_half h)
{
    return accel_gpu_half_resolve(m, h) == ACCEL_GPU_HALF_F16 ? cuda_plugin_f16 : cuda_plugin_bf16;
}

int accel_gpu_half_parse(const char *s, enum accel_gpu_half *out)
{
    static const enum accel_gpu_half all[] = {ACCEL_GPU_HALF_AUTO, ACCEL_GPU_HALF_BF16,
                                              ACCEL_GPU_HALF_F16};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, accel_gpu_half_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

const char *accel_gpu_half_name(enum accel_gpu_half h)
{
    switch (h) {
    case ACCEL_GPU_HALF_AUTO: return "auto";
    case ACCEL_GPU_HALF_BF16: return "bf16";
    case ACCEL_GPU_HALF_F16: return "fp16";
    }
    return "?";
}

/* Writes dir/name or dir/../lib/tandem/name, whichever exists first, into path: 1, else 0. */
static int plugin_in(const char *dir, const char *name, char *path, size_t n)
{
    return accel_lib_find_in(dir, name, path, n) == 0;
}

int accel_cuda_plugin_find(const char *dir, const model *m, enum accel_gpu_half h, char *path,
                           size_t pathlen, char *err, size_t errlen)
{
    const char *name = accel_cuda_plugin(m, h);
    if (plugin_in(dir, name, path, pathlen)) return 0;
    if (name == cuda_plugin_f16 && plugin_in(dir, cuda_plugin_bf16, path, pathlen)) {
        /* An explicit fp16 is the user's choice: never replace it behind their back. AUTO only
         * meant "the better one": an install without the fp16 build still serves, in bf16. */
        if (h == ACCEL_GPU_HALF_F16) {
            snprintf(err, errlen,
                     "cuda: %s (the fp16 build of the CUDA backend) is not in %s or "
                     "%s/../lib/tandem; --gpu-dtype bf16 (gpu_dtype = bf16 in a config) uses the "
                     "bf16 build, %s, which is there",
                     name, dir, dir, path);
            return ACCEL_ERR_NOT_FOUND;
        }
        snprintf(err, errlen,
                 "cuda: %s is not in %s or %s/../lib/tandem; this %s checkpoint runs on the bf16 "
                 "build, %s (3 fewer mantissa bits than fp16)",
                 name, dir, dir, model_dtype_name(ckpt_dtype(m)), path);
        return 1;
    }
    /* AUTO would have taken either build: say that neither is there */
    char nor[64] = "";
    if (h == ACCEL_GPU_HALF_AUTO && name == cuda_plugin_f16)
        snprintf(nor, sizeof nor, " (nor %s)", cuda_plugin_bf16);
    snprintf(err, errlen, "cuda: cannot load the CUDA backend: %s%s is not in %s or %s/../lib/tandem",
             name, nor, dir, dir);
    return ACCEL_ERR_NOT_FOUND;
}

static accel_dev *cuda_open(int index, const model *m, const accel_opts *o, char *err,
                            size_t errlen)
{
    char path[PATH_MAX + 64], dir[PATH_MAX];
    if (o->lib_path) {
        snprintf(path, sizeof path, "%s", o->lib_path);
    } else {
        accel_exe_dir(dir, sizeof dir);
        int st = accel_cuda_plugin_find(dir, m, o->gpu_half, path, sizeof path, err, errlen);
        if (st < 0) return NULL;
        if (st == 1) fprintf(stderr, "tandem: warning: %s\n", err);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
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

/* "kind[:N]" -> kind, index: 0, or -1 with a message in err. */
static int parse_name(const char *name, char *kind, size_t kindlen, int *index, char *err,
                      size_t errlen)
{
    *index = 0;
    const char *colon = strchr(name, ':');
    size_t klen = colon ? (size_t)(colon - name) : strlen(name);
    if (klen == 0 || klen >= kindlen) {
        snprintf(err, errlen, "bad device name '%s'", name);
        return -1;
    }
    memcpy(kind, name, klen);
    kind[klen] = 0;
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || v < 0 || v > 255) {
            snprintf(err, errlen, "bad device index in '%s'", name);
            return -1;
        }
        *index = (int)v;
    }
    return 0;
}

accel_dev *accel_open(const char *name, const model *m, const accel_opts *opts, char *err,
                      size_t errlen)
{
    accel_opts o = {0};
    if (opts) o = *opts;
    char kind[32], emu[PATH_MAX + 64];
    int index;
    if (parse_name(name, kind, sizeof kind, &index, err, errlen)) return NULL;
    /* every subcommand finds the emulator the same way, in a build tree and once installed */
    if (!strcmp(kind, "fpga-emu") && !o.lib_path) {
        accel_lib_find(ACCEL_EMU_LIB, emu, sizeof emu);
        o.lib_path = emu;
    }
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].kind, kind) == 0) return backends[i].open(index, m, &o, err, errlen);
    snprintf(err, errlen, "unknown device '%s' (known: cpu, cuda[:N], fpga-emu[:N], fpga[:N])", name);
    return NULL;
}

/* ---------------------------------------------------------------- presence */

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

int accel_present(const char *name, char *why, size_t whylen)
{
    char kind[32];
    int index;
    snprintf(why, whylen, "present");
    if (parse_name(name, kind, sizeof kind, &index, why, whylen)) return 1;
    if (!strcmp(kind, "cuda")) return cuda_present(index, why, whylen);
    if (!strcmp(kind, "fpga")) return fpga_present(index, why, whylen);
    snprintf(why, whylen, "present");
    return 1;
}
