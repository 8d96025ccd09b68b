#!/bin/sh
# after lead_build.sh: one flat build/ for the device (BUILD=build): tests, daemon, plugins, rt/
set -eu
B=build/p
make -j2 CC="ccache cc" PORTABLE=1 BUILD=$B $B/libxrt_emu.so >/dev/null
D=.gpu/pack
rm -rf .gpu/pack; mkdir -p $D/build/rt
cp .gpu/build/tandem-tests $D/build/
cp $B/tandem $B/mkmodel $B/libxrt_emu.so $B/libtandem_cuda.so $B/libtandem_cuda_f16.so \
   $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $D/build/
cp .gpu/build/portable/rt/* $D/build/rt/
ln -s . $D/build/portable
mkdir -p /work/main/.carry/lead
rm -f /work/main/.carry/lead/*
tar -C $D -cJf /work/main/.carry/lead/gpu.tar.xz build
cp /work/wt/final.sh /work/main/.carry/lead/
ls -la /work/main/.carry/lead
