#!/bin/sh
# after lead_build.sh: one flat build/ for the device (BUILD=build): tests, daemon, plugins, rt/
set -eu
B=build/p
make -j2 CC="ccache cc" PORTABLE=1 BUILD=$B $B/libxrt_emu.so >/dev/null
D=.gpu/pack
rm -rf .gpu/pack; mkdir -p $D/build/rt
cp .gpu/build/tandem-tests $D/build/
cp $B/tandem $B/mkmodel $B/flex_gpu_bench $B/libxrt_emu.so $B/libtandem_cuda.so $B/libtandem_cuda_f16.so \
   $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $D/build/
cp .gpu/build/portable/rt/* $D/build/rt/
ln -s . $D/build/portable
mkdir -p /work/main/.carry/splitk
rm -f /work/main/.carry/splitk/*
tar -C $D -cJf /work/main/.carry/splitk/gpu.tar.xz build
cp /work/wt/splitk-tmp/carry/run1.sh /work/wt/splitk-tmp/carry/run2.sh /work/main/.carry/splitk/
ls -la /work/main/.carry/splitk
