#!/bin/bash
# bench/sched_gpu.sh — issue 7 on the GPU machine: GLITCHES' dispatch with the GPU as the prefill
# device, emulated cards decoding, the GPU decoding when the cards are busy, end to end; then the
# live daemon's throughput and latency with the GPU.
#
# 1. On the development machine (its CUDA toolkit builds the plugin; the GPU machine's image has
#    no -dev packages for the daemon's libraries):
#        bench/sched_gpu.sh --prebuild
#    builds build/portable/ (PORTABLE=1: no -march=native): tandem, libxrt_emu.so, serve_load,
#    libtandem_cuda.so, and rt/ with the shared libraries beyond glibc and CUDA they need, plus
#    jq (the e2e checks use it; the GPU image has none). With the repository (~36 MB) it is over
#    the device call's 64 MiB, so carry it compressed (ICU's data is most of it):
#        tar -C build -cJf build/portable.tar.xz portable      (~16 MB)
#    and start the device command with: tar -C build -xJf build/portable.tar.xz &&
#    export PATH=$PWD/build/portable/rt:$PATH &&
# 2. On the GPU machine, from the repository root, carrying build/portable:
#        OUT=dir bench/sched_gpu.sh
#    Logs in $OUT: run.log (everything), glitches_cuda.log (tests/e2e/serve_glitches.sh with
#    GLITCHES_PREFILL=cuda:0: 32 concurrent streams, text per decode device — a card's against
#    `tandem generate --device fpga-emu:N --prefill-device cuda:0`, the GPU's against `tandem
#    generate --device cuda:0` —, placements on cards and GPU fallback in the metrics, a card gone
#    mid-decode, a hung run), glitches_cpu.log (the same with the CPU, for comparison),
#    live.md (bench/glitches_live.sh: tok/s, TTFT/TPOT p50/p99 at 1/8/32 clients for
#    cuda:0 + 2 cards, cuda:0 alone, cpu + 2 cards), daemon logs of every run.
# Exit status: 0 when every e2e check passed.
set -u
if [ "${1-}" = --prebuild ]; then
    B=build/portable
    make -j"${JOBS:-2}" PORTABLE=1 BUILD=$B $B/tandem $B/libxrt_emu.so $B/serve_load \
        $B/libtandem_cuda.so >/dev/null || exit 1
    mkdir -p $B/rt
    for lib in $(ldd $B/tandem $B/libxrt_emu.so $B/serve_load $B/libtandem_cuda.so | awk '/=>/ {print $3}' | sort -u); do
        case $(basename "$lib") in
        libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libgcc_s* | libstdc++* | libcu*) ;;
        *) cp -L "$lib" $B/rt/ ;;
        esac
    done
    cp /usr/bin/jq $B/rt/ 2>/dev/null &&
        for lib in $(ldd /usr/bin/jq | awk '/=>/ {print $3}'); do
            case $(basename "$lib") in libc.so* | libm.so*) ;; *) cp -L "$lib" $B/rt/ ;; esac
        done
    rm -rf $B/obj $B/*.a $B/*.d
    du -sh $B
    ls -la $B $B/rt
    exit 0
fi

OUT=${OUT:-/tmp/tandem-sched-gpu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*"; }
BIN=build/portable
[ -x $BIN/tandem ] || BIN=build
export BUILD=$BIN TANDEM=$BIN/tandem

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
echo "kernel $(uname -r), $(nproc) cores, $(grep MemTotal /proc/meminfo)"
date -u
git log --oneline -1 2>/dev/null

# shared libraries the image lacks come from $BIN/rt; the CUDA ones from wherever they are
missing() { ldd $BIN/tandem $BIN/libtandem_cuda.so $BIN/libxrt_emu.so $BIN/serve_load 2>&1 | grep "not found" | sort -u; }
if [ -n "$(missing)" ] && [ -d $BIN/rt ]; then
    export LD_LIBRARY_PATH="$PWD/$BIN/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for lib in libcublas.so.13 libcudart.so.13 libcublasLt.so.13 libcublas.so.12 libcudart.so.12 libcublasLt.so.12; do
    if missing | grep -q "$lib"; then
        p=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
        [ -n "$p" ] && export LD_LIBRARY_PATH="$(dirname "$p")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}"
missing
command -v jq >/dev/null || { echo "jq is missing: the e2e checks need it"; exit 1; }

stamp "the GPU serves alone (generate)"
timeout 120 $TANDEM generate --device cuda:0 --ids 1,403,407,261,378 --max-tokens 24 --temperature 0
timeout 120 $TANDEM generate --device fpga-emu:0 --prefill-device cuda:0 --ids 1,403,407,261,378 \
    --max-tokens 24 --temperature 0

stamp "e2e: cuda:0 prefill + 3 emulated cards + GPU fallback"
GLITCHES_PREFILL=cuda:0 timeout 600 sh tests/e2e/serve_glitches.sh 2>&1 | tee "$OUT/glitches_cuda.log"
stamp "e2e: the same with the CPU"
timeout 600 sh tests/e2e/serve_glitches.sh 2>&1 | tee "$OUT/glitches_cpu.log"

stamp "live daemon: 1/8/32 clients"
SETS="cuda:0,fpga-emu:0,fpga-emu:1 cuda:0 cpu,fpga-emu:0,fpga-emu:1" timeout 600 \
    bench/glitches_live.sh 64 8 2>&1 | tee "$OUT/live.md"

stamp "done"
! grep -q '^not ok' "$OUT"/glitches_*.log
