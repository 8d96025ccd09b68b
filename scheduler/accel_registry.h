/* scheduler/accel_registry.h — what the registry (accel_registry.c, the one module that knows
 * every device by name) answers besides accel_open(): whether a named device is on this machine,
 * and where the libraries it loads live (scheduler/exe_dir.h: beside the binary in a build tree,
 * <prefix>/lib/tandem once installed). */
#ifndef TANDEM_ACCEL_REGISTRY_H
#define TANDEM_ACCEL_REGISTRY_H
#include <stddef.h>

/* The card emulator, loaded by accel_open("fpga-emu...") in place of XRT when the caller's
 * accel_opts.lib_path is NULL. */
#define ACCEL_EMU_LIB "libxrt_emu.so"

/* Whether the device `name` ("cpu", "cuda:1", "fpga:0", ...) exists on this machine, without
 * opening it or loading a model:
 *   1  present, or not decidable before opening (cpu, fpga-emu, an unknown or malformed name:
 *      accel_open then says what is wrong)
 *   0  absent, with the reason in why: cuda:N without an NVIDIA driver (libcuda.so.1) or with
 *      fewer than N+1 GPUs visible; fpga:N without XRT (libxrt_coreutil.so.2) or without card N.
 * A device that is present and then fails to open is accel_open's error, not an absence: the
 * daemon skips absent devices with a warning (the same configuration runs with or without a GPU
 * or a card) and refuses to start on a broken one. Any thread; may take milliseconds (it
 * initializes the CUDA driver or opens and closes the card through XRT). */
int accel_present(const char *name, char *why, size_t whylen);

#endif
