#!/bin/sh
# gpu/bench/prebuild.sh DEST — builds on the development machine what gpu/bench/run_all.sh runs
# on the lent GPU machine, whose CUDA image has no -dev packages for our C dependencies:
#   DEST/build/  tandem (eval only), tandem-tests (the gpu_ tests only), bench_gpu, mkmodel,
#                flex_gpu_bench, libtandem_cuda.so (+ _f16), the test libraries beside them
#                (libtandem_cuda_test.so, libtandem_cuda_f16_test.so), gemm_shapes, gemm_decode, gemv_bw, and
#                lab/ (the lab plugin, make gpu-lab, with a bench_gpu beside it) — PORTABLE=1 (no
#                -march=native: another CPU runs them), and linked without the tokenizer, so the
#                ICU libraries are not needed there
#   DEST/rt/     the shared libraries they need beyond glibc and CUDA (used there only if missing)
#   DEST/peer/limits  limits.cu built for sm_90 (when DEST/peer/limits.cu exists)
set -eu
DEST=${1:?usage: prebuild.sh DEST}
B=${PREBUILD_DIR:-/tmp/tandem-prebuild}
J=${JOBS:-2}
make -j$J PORTABLE=1 BUILD=$B $B/libtandem.a $B/bench_gpu $B/mkmodel $B/flex_gpu_bench $B/libtandem_cuda.so $B/libtandem_cuda_f16.so \
    $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $B/lab/libtandem_cuda.so $B/obj/gpu/tuning.o $B/obj/gpu/curve.o \
    $B/obj/daemon/main.o $B/obj/daemon/cmd_eval.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o \
    $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done) >/dev/null
CFLAGS="-O3 -g -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter -I."
LIBS="$(pkg-config --libs jansson libcrypto libpcre2-8) -lm -ldl -pthread"
mkdir -p $B/gpulist "$DEST/build" "$DEST/rt"
grep -ho '^TEST(gpu_[a-z0-9_]*)' tests/gpu/*.c | sed 's/^TEST(\(.*\))/X(\1)/' > $B/gpulist/test_list.h
cc $CFLAGS -I$B/gpulist -c tests/main.c -o $B/gpulist/main.o
cc -rdynamic -o "$DEST/build/tandem-tests" $B/gpulist/main.o $B/obj/tests/util.o \
    $B/obj/tests/ref_forward.o $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done) \
    $B/libtandem.a $B/obj/gpu/tuning.o $B/obj/gpu/curve.o $LIBS
cc -rdynamic -o "$DEST/build/tandem" $B/obj/daemon/main.o $B/obj/daemon/cmd_eval.o $B/libtandem.a $LIBS
cp $B/bench_gpu $B/mkmodel $B/flex_gpu_bench $B/libtandem_cuda.so $B/libtandem_cuda_f16.so \
    $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so "$DEST/build/"
mkdir -p "$DEST/build/lab"
cp $B/lab/libtandem_cuda.so $B/bench_gpu "$DEST/build/lab/"
for lib in $(ldd "$DEST"/build/* 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $(basename $lib) in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s*|libstdc++*|libcu*|libtandem*) ;;
    *) cp -L $lib "$DEST/rt/" ;;
    esac
done
nvcc -O3 -I. -gencode=arch=compute_90,code=sm_90 -o "$DEST/build/gemm_shapes" gpu/bench/gemm_shapes.cu \
    -lcublasLt -lcublas -Xlinker -rpath=/usr/local/cuda/lib64
nvcc -O3 -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a -o "$DEST/build/gemv_bw" gpu/bench/gemv_bw.cu
nvcc -O3 -I. -gencode=arch=compute_90,code=sm_90 -o "$DEST/build/gemm_decode" gpu/bench/gemm_decode.cu \
    -lcublasLt -lcublas -Xlinker -rpath=/usr/local/cuda/lib64
if [ -f "$DEST/peer/limits.cu" ]; then
    nvcc -O3 -gencode=arch=compute_90,code=sm_90 -o "$DEST/peer/limits" "$DEST/peer/limits.cu" \
        -lcublas -Xlinker -rpath=/usr/local/cuda/lib64
fi
ls -la "$DEST/build" "$DEST/rt"
