/* devices/exe_dir.h — where the running binary is, and the files installed beside it: the one
 * "where is my executable" of the project (devices/open.c finds the CUDA plugin and the card
 * emulator with it, the subcommands the bundled model, the GPU benchmark its plugin).
 *
 * Layouts it knows, for a binary in DIR:
 *   DIR/NAME                   a build tree (build/tandem beside build/libxrt_emu.so)
 *   DIR/../lib/tandem/NAME     an install (PREFIX/bin/tandem, PREFIX/lib/tandem/libxrt_emu.so)
 * Threads: any; nothing here keeps state. */
#ifndef TANDEM_DEVICES_EXE_DIR_H
#define TANDEM_DEVICES_EXE_DIR_H
#include <stddef.h>

/* The directory of the running binary (/proc/self/exe, symlinks resolved) into out. Returns 0,
 * or -1 with out = "." when it cannot be read (or does not fit). */
int devices_exe_dir(char *out, size_t n);

/* Finds the library NAME beside a binary in dir: dir/NAME, then dir/../lib/tandem/NAME. Returns
 * 0 with the path in path, or -1 with path = dir/NAME (the first place looked, for messages). */
int devices_lib_find_in(const char *dir, const char *name, char *path, size_t n);
/* The same for the running binary's directory. */
int devices_lib_find(const char *name, char *path, size_t n);

#endif
