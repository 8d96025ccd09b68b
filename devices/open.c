/* devices/open.c — device names to backends, and what each backend is handed (devices.h). */
#include "devices/devices.h"
#include "cpu/backend.h"
#include "cpu/calib.h"
#include "devices/exe_dir.h"
#include "devices/name.h"
#include "fpga/backend.h"
#include "fpga/kernels/dec_layout.h"
#include "gpu/plugin.h"
#include "plugin_abi.h" /* $(BUILD)/: GPU_PLUGIN_ABI */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef accel_dev *(*open_fn)(int index, const model *m, const accel_opts *o, char *err,
                              size_t errlen);

/* ---------------------------------------------------------------- fpga: calibrates on the CPU */

/* The card's matrices in the reference's projection order: the callback's `mat` passes through. */
_Static_assert((int)CPU_CALIB_QKV == (int)FPGA_DEC_QKV && (int)CPU_CALIB_O == (int)FPGA_DEC_O &&
                   (int)CPU_CALIB_GU == (int)FPGA_DEC_GU && (int)CPU_CALIB_D == (int)FPGA_DEC_D &&
                   (int)CPU_CALIB_LM == (int)FPGA_DEC_LM,
               "cpu/calib.h's projection order is fpga/kernels/dec_layout.h's");

static const fpga_calib_ref cpu_calib = {cpu_calib_ids, cpu_calib_run};

const struct fpga_calib_ref *devices_fpga_calib(void)
{
    return &cpu_calib;
}

static accel_dev *fpga_emu_open(int index, const model *m, const accel_opts *o, char *err,
                                size_t errlen)
{
    return fpga_emu_accel_open(index, m, o, &cpu_calib, err, errlen);
}

static accel_dev *fpga_open(int index, const model *m, const accel_opts *o, char *err,
                            size_t errlen)
{
    return fpga_accel_open(index, m, o, &cpu_calib, err, errlen);
}

/* ---------------------------------------------------------------- cuda: a plugin */

static accel_dev *cuda_open(int index, const model *m, const accel_opts *o, char *err,
                            size_t errlen)
{
    char path[PATH_MAX + 64], dir[PATH_MAX];
    if (o->lib_path) {
        snprintf(path, sizeof path, "%s", o->lib_path);
    } else {
        devices_exe_dir(dir, sizeof dir);
        int st = devices_cuda_plugin_find(dir, m, o->gpu_half, path, sizeof path, err, errlen);
        if (st < 0) return NULL;
        if (st == 1) fprintf(stderr, "tandem: warning: %s\n", err);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cuda: cannot load the CUDA backend (%s): %s", path, dlerror());
        return NULL;
    }
    const char *abi = (const char *)dlsym(h, GPU_PLUGIN_ABI_SYMBOL);
    if (!abi || strncmp(abi, GPU_PLUGIN_ABI, sizeof GPU_PLUGIN_ABI) != 0) {
        snprintf(err, errlen,
                 "cuda: %s was built from another source tree than this binary (interface %s, "
                 "this binary's %s): rebuild both with make",
                 path, abi ? abi : "unstamped", GPU_PLUGIN_ABI);
        dlclose(h);
        return NULL;
    }
    gpu_plugin_open_fn fn = (gpu_plugin_open_fn)dlsym(h, GPU_PLUGIN_OPEN_SYMBOL);
    if (!fn) {
        snprintf(err, errlen, "cuda: %s has no %s (a plugin built from another tree?)", path,
                 GPU_PLUGIN_OPEN_SYMBOL);
        dlclose(h);
        return NULL;
    }
    /* The plugin stays loaded for the life of the process (devices may outlive this call). */
    const gpu_plugin_host host = {0};
    return fn(index, m, o, &host, err, errlen);
}

/* ---------------------------------------------------------------- names */

static const struct {
    const char *kind;
    open_fn open;
} backends[] = {
    {"cpu", cpu_accel_open},
    {"cuda", cuda_open},
    {"fpga-emu", fpga_emu_open},
    {"fpga", fpga_open},
};

int devices_parse_name(const char *name, char *kind, size_t kindlen, int *index, char *err,
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

accel_dev *devices_open(const char *name, const model *m, const accel_opts *opts, char *err,
                        size_t errlen)
{
    accel_opts o = {0};
    if (opts) o = *opts;
    char kind[32], emu[PATH_MAX + 64];
    int index;
    if (devices_parse_name(name, kind, sizeof kind, &index, err, errlen)) return NULL;
    /* every subcommand finds the emulator the same way, in a build tree and once installed */
    if (!strcmp(kind, "fpga-emu") && !o.lib_path) {
        devices_lib_find(DEVICES_EMU_LIB, emu, sizeof emu);
        o.lib_path = emu;
    }
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].kind, kind) == 0) return backends[i].open(index, m, &o, err, errlen);
    snprintf(err, errlen, "unknown device '%s' (known: cpu, cuda[:N], fpga-emu[:N], fpga[:N])", name);
    return NULL;
}
