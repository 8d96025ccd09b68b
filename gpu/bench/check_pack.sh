#!/bin/sh
# gpu/bench/check_pack.sh DEST — the final GPU check's build, on the development machine: every
# gpu_ test in one tandem-tests, the daemon, mkmodel, bench_gpu, both plugins and their test
# libraries and the emulated XRT library, PORTABLE=1, in one flat build/ (with rt/: the shared libraries the GPU
# image lacks), packed as DEST/gpu.tar.xz beside a copy of gpu/bench/check_run.sh. Carry DEST
# (under the working tree, ignored) and run `bash DEST/check_run.sh DEST/gpu.tar.xz` there.
# (gpu/bench/prebuild.sh builds more: the bench tools and the lab plugin, for run_all.sh.)
set -eu
DEST=${1:?usage: check_pack.sh DEST}
B=${CHECK_BUILD_DIR:-build/p}
J=${JOBS:-2}
make -j$J PORTABLE=1 BUILD=$B $B/libtandem.a $B/tandem $B/mkmodel $B/bench_gpu $B/libxrt_emu.so $B/libtandem_cuda.so \
    $B/libtandem_cuda_f16.so $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $B/obj/gpu/tuning.o \
    $B/obj/gpu/curve.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o $B/obj/tests/layer_split.o \
    $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done) >/dev/null
CFLAGS="-O3 -g -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter -I."
LIBS="$(pkg-config --libs jansson libcrypto libpcre2-8) -lm -ldl -pthread"
P=$B/check
rm -rf $P
mkdir -p $P/build/rt $B/gpulist
grep -ho '^TEST(gpu_[a-z0-9_]*)' tests/gpu/*.c | sed 's/^TEST(\(.*\))/X(\1)/' >$B/gpulist/test_list.h
cc $CFLAGS -I$B/gpulist -c tests/main.c -o $B/gpulist/main.o
cc -rdynamic -o $P/build/tandem-tests $B/gpulist/main.o $B/obj/tests/util.o $B/obj/tests/ref_forward.o $B/obj/tests/layer_split.o \
    $(for f in tests/gpu/*.c; do echo $B/obj/${f%.c}.o; done) $B/libtandem.a $B/obj/gpu/tuning.o \
    $B/obj/gpu/curve.o $LIBS $(pkg-config --libs icu-uc 2>/dev/null) -luv -lsystemd -lucp -luct -lucs -lucm
cp $B/tandem $B/mkmodel $B/bench_gpu $B/libxrt_emu.so $B/libtandem_cuda.so $B/libtandem_cuda_f16.so \
    $B/libtandem_cuda_test.so $B/libtandem_cuda_f16_test.so $P/build/
for lib in $(ldd $P/build/tandem-tests $P/build/tandem $P/build/mkmodel $P/build/bench_gpu 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $(basename $lib) in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s*|libstdc++*|libcu*|libtandem*) ;;
    *) cp -L $lib $P/build/rt/ ;;
    esac
done
cp /usr/bin/jq $P/build/rt/ 2>/dev/null || true
# without their debug sections: the device tool takes the tracked files (~25 MB) and the carry
# together under 64 MiB, and the pack is ~2.4 MB smaller stripped (debug info is for this machine)
for f in $P/build/tandem $P/build/tandem-tests $P/build/mkmodel $P/build/bench_gpu $P/build/*.so; do
    strip --strip-debug "$f"
done
ln -s . $P/build/portable
mkdir -p "$DEST"
tar -C $P -cJf "$DEST/gpu.tar.xz" build
cp gpu/bench/check_run.sh "$DEST/"
ls -la "$DEST"
