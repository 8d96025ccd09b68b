/* devices/cuda_plugin.c — which build of the CUDA plugin serves a model, and where it is
 * (devices_cuda_plugin, devices_cuda_plugin_find: devices.h). */
#include "devices/devices.h"
#include "devices/exe_dir.h"
#include <stdio.h>

static const char *const cuda_plugin_bf16 = "libtandem_cuda.so";
static const char *const cuda_plugin_f16 = "libtandem_cuda_f16.so";

const char *devices_cuda_plugin(const model *m, enum accel_gpu_half h)
{
    return accel_gpu_half_resolve(m, h) == ACCEL_GPU_HALF_F16 ? cuda_plugin_f16 : cuda_plugin_bf16;
}

/* Writes dir/name or dir/../lib/tandem/name, whichever exists first, into path: 1, else 0. */
static int plugin_in(const char *dir, const char *name, char *path, size_t n)
{
    return devices_lib_find_in(dir, name, path, n) == 0;
}

int devices_cuda_plugin_find(const char *dir, const model *m, enum accel_gpu_half h, char *path,
                             size_t pathlen, char *err, size_t errlen)
{
    const char *name = devices_cuda_plugin(m, h);
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
                 name, dir, dir, model_dtype_name(accel_ckpt_dtype(m)), path);
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
