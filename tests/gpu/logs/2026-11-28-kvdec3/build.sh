#!/bin/sh
# kvdec3: the device build (PORTABLE=1, build/p) + gemm_decode, packed into
# /work/main/.carry/kvdec/new.tar.xz with run.sh beside it
set -eu
cd /work/wt/kvdec
export TMPDIR=/work/wt/.kvdec-tmp
B=build/p
T="$B/libtandem.a $B/bench_gpu $B/mkmodel $B/libtandem_cuda.so $B/libtandem_cuda_f16.so $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $B/obj/gpu/tuning.o $B/obj/gpu/curve.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o $B/obj/tests/accel/test_conformance.o $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done)"
make -j2 CC="ccache cc" PORTABLE=1 BUILD=$B $T >/dev/null
CFLAGS="-O3 -g -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter -I."
LIBS="$(pkg-config --libs jansson libcrypto libpcre2-8) -lm -ldl -pthread"
D=$TMPDIR/pack
rm -rf $D; mkdir -p $B/gpulist $D/build/rt
{ grep -ho '^TEST(gpu_[a-z0-9_]*)' tests/gpu/*.c; grep -ho '^TEST(conf_[a-z0-9_]*_cuda)' tests/accel/test_conformance.c; } | sed 's/^TEST(\(.*\))/X(\1)/' > $B/gpulist/test_list.h
cc $CFLAGS -I$B/gpulist -c tests/main.c -o $B/gpulist/main.o
cc -rdynamic -o $D/build/tandem-tests $B/gpulist/main.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o \
    $B/obj/tests/accel/test_conformance.o \
    $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done) $B/libtandem.a $B/obj/gpu/tuning.o $B/obj/gpu/curve.o $LIBS \
    $(pkg-config --libs icu-uc 2>/dev/null) -luv -lsystemd -lucp -luct -lucs -lucm
nvcc -O3 -I. -gencode=arch=compute_90,code=sm_90 -o $D/build/gemm_decode gpu/bench/gemm_decode.cu -lcublasLt -lcublas
cp $B/bench_gpu $B/mkmodel $B/libtandem_cuda.so $B/libtandem_cuda_f16.so $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $D/build/
for lib in $(ldd $D/build/tandem-tests $D/build/bench_gpu $D/build/mkmodel 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $(basename $lib) in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s*|libstdc++*|libcu*|libtandem*) ;;
    *) cp -L $lib $D/build/rt/ ;;
    esac
done
mkdir -p /work/main/.carry/kvdec
rm -f /work/main/.carry/kvdec/*
tar -C $D -cJf /work/main/.carry/kvdec/new.tar.xz build
cp tests/gpu/logs/2026-11-28-kvdec3/run.sh /work/main/.carry/kvdec/
ls -la /work/main/.carry/kvdec; du -sh $D
