#!/bin/sh
# flexprof's build + pack (run from the worktree root): the PORTABLE build's flex_gpu_bench, the
# CUDA plugin and its test library, and the libraries flex_gpu_bench needs, into
# /work/main/.carry/flexprof/gpu.tar.xz (run1.sh unpacks it on the device)
set -eu
B=build/p
TMPDIR=${TMPDIR:-/tmp} make -j2 CC="ccache cc" PORTABLE=1 BUILD=$B $B/flex_gpu_bench $B/libtandem_cuda_test.so
D=${PACK:-/tmp/flexprof-pack}
rm -rf $D; mkdir -p $D/build/rt
cp $B/flex_gpu_bench $B/libtandem_cuda.so $B/libtandem_cuda_test.so $D/build/
for lib in $(ldd $B/flex_gpu_bench | awk '/=>/ {print $3}' | sort -u); do
    case $(basename $lib) in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s*|libstdc++*|libcu*|libtandem*) ;;
    *) cp -L $lib $D/build/rt/ ;;
    esac
done
mkdir -p /work/main/.carry/flexprof
rm -f /work/main/.carry/flexprof/*
tar -C $D -cJf /work/main/.carry/flexprof/gpu.tar.xz build
cp tests/gpu/logs/2026-11-29-flexprof/run1.sh /work/main/.carry/flexprof/
