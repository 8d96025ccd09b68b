#!/bin/sh
# The card's kernels (fpga/kernels/*.c) as an HLS flow reads them: each compiled with
# __SYNTHESIS__ defined (the plain loops instead of the emulator's threads, the accounting calls
# compiled to nothing, no SSE), warnings as errors. The emulator runs the other side of every
# #ifdef; without this nothing would notice the HLS side no longer compiles. What Vitis HLS itself
# accepts (its pragmas, its restrictions on pointers) is not checked here: no HLS tool on this
# machine. Then a kernel broken on that side only is caught (a check that cannot fail proves
# nothing).
CC=${CC:-cc}
FLAGS="-std=c11 -D_GNU_SOURCE -D__SYNTHESIS__ -I. -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter -Wno-unknown-pragmas"
T=$(mktemp -d /tmp/tandem-hls.XXXXXX)
trap 'rm -rf "$T"' EXIT
n=0
bad=""
for f in fpga/kernels/*.c; do
    n=$((n + 1))
    $CC $FLAGS "$f" >"$T/out" 2>&1 || bad="$bad $f: $(grep -m1 'error' "$T/out")"
done
if [ -z "$bad" ]; then echo "ok hls_kernels_compile # $n kernels, $CC -D__SYNTHESIS__ -Werror"
else echo "not ok hls_kernels_compile #$bad"; fi

# a kernel with a variable only its emulator side uses: caught
mkdir -p "$T/fpga/kernels"
cat >"$T/fpga/kernels/k.c" <<'K'
#include <stdint.h>
void k(uint32_t *out, uint32_t n)
{
    uint32_t only_emu = n * 2;
#ifndef __SYNTHESIS__
    out[0] = only_emu;
#endif
}
K
if $CC $FLAGS "$T/fpga/kernels/k.c" >/dev/null 2>&1; then echo "not ok hls_check_catches_a_broken_kernel"
else echo "ok hls_check_catches_a_broken_kernel"; fi
