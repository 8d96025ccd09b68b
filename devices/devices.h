/* devices/devices.h — the composition root: the one module that knows every device by name.
 *
 *   cpu            the reference backend (cpu/backend.h), always present
 *   cuda[:N]       the CUDA backend, a plugin loaded with dlopen so that the same binary runs on
 *                  machines without CUDA (gpu/plugin.h); missing plugin or GPU -> NOT_FOUND. Two
 *                  builds of it: libtandem_cuda.so (bf16) and libtandem_cuda_f16.so (fp16),
 *                  picked by accel_opts.gpu_half and the checkpoint's dtype (scheduler/accel.h)
 *   fpga-emu[:N]   an emulated U280 card (fpga/emu, through the XRT C API): build/libxrt_emu.so,
 *                  or <prefix>/lib/tandem/libxrt_emu.so once installed, unless opts->lib_path
 *   fpga[:N]       a real U280 through XRT (libxrt_coreutil.so.2)
 *   NODE/DEVICE    a device another daemon lends over UCX (peer/peer.h; devices_open_remote)
 *
 * Everything else sees devices through scheduler/accel.h only: the scheduler drives the
 * accel_dev handles this module opens, and no backend opens, includes or calls another. What a
 * backend needs of another is handed in here: a card's weight image calibrates on the CPU
 * reference (fpga/calib.h), and the CUDA plugin gets FlexPrefill's shared rules through its
 * open call (sparse/flex.h), not from the host binary's symbols.
 *
 * Callers: the daemon (daemon/serve.c's device list, the subcommands), the tools and the tests.
 * Threads: any; devices_open returns a device driven by one thread at a time (accel.h). */
#ifndef TANDEM_DEVICES_H
#define TANDEM_DEVICES_H
#include "scheduler/accel.h"
#include <stddef.h>

/* The card emulator's file name, found beside the binary or in ../lib/tandem (devices/exe_dir.h)
 * when the caller's accel_opts.lib_path is NULL. */
#define DEVICES_EMU_LIB "libxrt_emu.so"

/* Opens a device by name for model m (which must outlive the device) and loads the weights.
 * Returns NULL with a message in err when the device does not exist or cannot load the model;
 * an unknown or malformed name says which names exist. opts may be NULL (defaults). */
accel_dev *devices_open(const char *name, const model *m, const accel_opts *opts, char *err,
                        size_t errlen);

/* Device i of a peer node (peer/peer.h: peer_node_connect) as a device of this process, named
 * "NODE/DEVICE": the remote backend, whose calls go to that node over UCX. NULL with a message
 * in err when the node cannot be reached or the name does not fit. */
struct peer_node;
accel_dev *devices_open_remote(struct peer_node *n, int i, const model *m, const accel_opts *o,
                               char *err, size_t errlen);

/* Whether the device `name` ("cpu", "cuda:1", "fpga:0", ...) exists on this machine, without
 * opening it or loading a model:
 *   1  present, or not decidable before opening (cpu, fpga-emu, an unknown or malformed name:
 *      devices_open then says what is wrong)
 *   0  absent, with the reason in why: cuda:N without an NVIDIA driver (libcuda.so.1) or with
 *      fewer than N+1 GPUs visible; fpga:N without XRT (libxrt_coreutil.so.2) or without card N.
 * A device that is present and then fails to open is devices_open's error, not an absence: the
 * daemon skips absent devices with a warning (the same configuration runs with or without a GPU
 * or a card) and refuses to start on a broken one. Any thread; may take milliseconds (it
 * initializes the CUDA driver or opens and closes the card through XRT). */
int devices_present(const char *name, char *why, size_t whylen);

/* File name (no directory) of the cuda plugin that serves m under h: "libtandem_cuda.so" (bf16)
 * or "libtandem_cuda_f16.so" (fp16). A static string. Pure; any thread. */
const char *devices_cuda_plugin(const model *m, enum accel_gpu_half h);
/* Finds the cuda plugin for m under h in exe_dir, then exe_dir/../lib/tandem, and writes its path.
 * Returns 0 when the chosen plugin is there; 1 when h is AUTO, the fp16 plugin is missing and
 * the bf16 one is there: path is the bf16 one and err holds a one-line warning (an older or
 * partial install keeps working, at bf16's precision); ACCEL_ERR_NOT_FOUND with a message in
 * err otherwise. An explicit F16 never falls back: the message names the missing file and says
 * that --gpu-dtype bf16 uses the bf16 build. devices_open("cuda...") calls it with the binary's
 * directory (and prints the warning to stderr); exposed for tests. */
int devices_cuda_plugin_find(const char *exe_dir, const model *m, enum accel_gpu_half h,
                             char *path, size_t pathlen, char *err, size_t errlen);

/* The float reference a card's weight image calibrates on (the CPU backend's, cpu/calib.h), as
 * devices_open hands it to the FPGA backend: for tests and tools that build images themselves
 * (fpga/image_cache.h). A static table. */
struct fpga_calib_ref;
const struct fpga_calib_ref *devices_fpga_calib(void);

#endif
