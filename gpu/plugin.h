/* gpu/plugin.h — the CUDA plugin's entry point, as the composition root (devices/open.c) calls
 * it after dlopen.
 *
 * The plugin takes nothing from the host's backends: what it needs beyond the accel wrappers it
 * implements (scheduler/accel.h) and model/ comes in gpu_plugin_host at open (nothing today: a
 * sparse request reaches it settled, scheduler/accel.h's accel_sparse, so it needs none of the
 * host's rules), so that it never binds to the host binary's symbols.
 *
 * A plugin built from another tree than the host is refused before any call: both are stamped with
 * GPU_PLUGIN_ABI (build/plugin_abi.h, a hash of the headers that define the structs and functions
 * they share, written by the Makefile), the plugin exports its stamp as GPU_PLUGIN_ABI_SYMBOL and
 * the host compares it with its own (a plugin without the symbol predates the stamp: refused). */
#ifndef TANDEM_GPU_PLUGIN_H
#define TANDEM_GPU_PLUGIN_H
#include "scheduler/accel.h"

typedef struct gpu_plugin_host {
    int reserved; /* 0 */
} gpu_plugin_host;

/* The two symbols the composition root looks up in libtandem_cuda*.so: the stamp, then the opener. */
#define GPU_PLUGIN_ABI_SYMBOL "gpu_plugin_abi"
extern const char gpu_plugin_abi[]; /* the plugin's GPU_PLUGIN_ABI, NUL-terminated */
#define GPU_PLUGIN_OPEN_SYMBOL "gpu_plugin_open"
typedef accel_dev *(*gpu_plugin_open_fn)(int index, const model *m, const accel_opts *o,
                                         const gpu_plugin_host *host, char *err, size_t errlen);
/* Opens CUDA device `index` for m (which must outlive it). NULL with a message in err. */
accel_dev *gpu_plugin_open(int index, const model *m, const accel_opts *o,
                           const gpu_plugin_host *host, char *err, size_t errlen);

#endif
