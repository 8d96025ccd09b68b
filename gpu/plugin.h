/* gpu/plugin.h — the CUDA plugin's entry point, as the composition root (devices/open.c) calls
 * it after dlopen.
 *
 * The plugin takes nothing from the host's backends: what it needs beyond the accel wrappers it
 * implements (scheduler/accel.h) and model/ comes in gpu_plugin_host at open — today FlexPrefill's
 * shared rules (sparse/flex.h), which it would otherwise have bound to the host binary's symbols.
 * The plugin copies the table at open.
 *
 * A plugin built from another tree than the host fails to load by name (the symbol carries the
 * contract), not by a call with the wrong arguments. */
#ifndef TANDEM_GPU_PLUGIN_H
#define TANDEM_GPU_PLUGIN_H
#include "scheduler/accel.h"
#include "sparse/flex.h"

typedef struct gpu_plugin_host {
    const sparse_flex_fns *flex; /* FlexPrefill's parameters and dense rule */
} gpu_plugin_host;

/* The one symbol the composition root looks up in libtandem_cuda*.so. */
#define GPU_PLUGIN_OPEN_SYMBOL "gpu_plugin_open"
typedef accel_dev *(*gpu_plugin_open_fn)(int index, const model *m, const accel_opts *o,
                                         const gpu_plugin_host *host, char *err, size_t errlen);
/* Opens CUDA device `index` for m (which must outlive it). NULL with a message in err. */
accel_dev *gpu_plugin_open(int index, const model *m, const accel_opts *o,
                           const gpu_plugin_host *host, char *err, size_t errlen);

#endif
