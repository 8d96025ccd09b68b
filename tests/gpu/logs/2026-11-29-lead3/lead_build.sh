#!/bin/sh
# lead's final GPU check build: run from a worktree root. Writes .gpu/ (build/ + rt/) and a tarball.
set -eu
B=build/p
J=2
T="$B/libtandem.a $B/tandem $B/mkmodel $B/libtandem_cuda.so $B/libtandem_cuda_f16.so $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $B/obj/gpu/tuning.o $B/obj/gpu/curve.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done)"
make -j$J CC="ccache cc" PORTABLE=1 BUILD=$B $T >/dev/null
CFLAGS="-O3 -g -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter -I."
LIBS="$(pkg-config --libs jansson libcrypto libpcre2-8) -lm -ldl -pthread"
D=.gpu
rm -rf $D; mkdir -p $B/gpulist $D/build/portable/rt
grep -ho '^TEST(gpu_[a-z0-9_]*)' tests/gpu/*.c | sed 's/^TEST(\(.*\))/X(\1)/' > $B/gpulist/test_list.h
cc $CFLAGS -I$B/gpulist -c tests/main.c -o $B/gpulist/main.o
cc -rdynamic -o $D/build/tandem-tests $B/gpulist/main.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o \
    $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done) $B/libtandem.a $B/obj/gpu/tuning.o $B/obj/gpu/curve.o $LIBS \
    $(pkg-config --libs icu-uc 2>/dev/null) -luv -lsystemd -lucp -luct -lucs -lucm
cp $B/libtandem_cuda.so $B/libtandem_cuda_f16.so $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $D/build/
cp $B/tandem $B/mkmodel $B/libtandem_cuda.so $B/libtandem_cuda_f16.so $D/build/portable/
[ -f $B/libxrt_emu.so ] && cp $B/libxrt_emu.so $D/build/portable/ || true
for lib in $(ldd $D/build/tandem-tests $D/build/portable/tandem $D/build/portable/mkmodel 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $(basename $lib) in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s*|libstdc++*|libcu*|libtandem*) ;;
    *) cp -L $lib $D/build/portable/rt/ ;;
    esac
done
cp /usr/bin/jq $D/build/portable/rt/ 2>/dev/null || true
du -sh $D
