#!/bin/bash
# flexq call 2: the sums pass with per-thread diagonal partials (3 CTAs/SM): FlexPrefill's GPU
# tests (both last-q forms against the CPU) and flexchunk with the A/B against the WMMA form.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
C=.carry/flexq
rm -rf build && tar -xJf $C/gpu.tar.xz && cp $C/flex_gpu_bench build/
stamp unpacked
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$OUT/gpu.txt" 2>&1
timeout 60 build/tandem-tests gpu_flex gpu_xattn_prefill gpu_paged >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log"
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok\|FAIL\|jaccard\|# unit" "$OUT/tests.log" | head -20
timeout 40 build/flex_gpu_bench --lib build/libtandem_cuda_test.so --threads 16 --reps 5 --kinds structured \
    --chunk-rows 128 flexchunk 32768,65536,131072 >"$OUT/flexchunk.md" 2>"$OUT/flexchunk.err"; echo "rc=$?" >>"$OUT/flexchunk.err"
stamp "flexchunk done"
sed -n '/### Summary/,$p' "$OUT/flexchunk.md"
grep "lastq_mma\|^last-q form" "$OUT/flexchunk.md"
tail -2 "$OUT/flexchunk.err"
stamp end
