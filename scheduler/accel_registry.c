/* scheduler/accel_registry.c — device names to backends.
 *
 *   cpu            the reference backend (always present)
 *   cuda[:N]       the CUDA backend, a plugin loaded with dlopen so that the same binary runs on
 *                  machines without CUDA; missing plugin or GPU -> NOT_FOUND. Two builds of it:
 *                  libtandem_cuda.so (bf16) and libtandem_cuda_f16.so (fp16), picked by
 *                  accel_opts.gpu_half and the checkpoint's dtype (accel.h)
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
    const char *fmts[] = {"%s/%s", "%s/../lib/tandem/%s"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, n, fmts[i], dir, name);
        if (access(path, F_OK) == 0) return 1;
    }
    return 0;
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
        exe_dir(dir, sizeof dir);
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
