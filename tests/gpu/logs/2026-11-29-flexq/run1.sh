#!/bin/bash
# flexq call 1: every gpu_ test (FlexPrefill's index against the CPU in both last-q forms among
# them) while mkmodel runs, flexchunk with the A/B of the two last-q forms, then the TBT run for
# FlexPrefill (gpu/bench/tbt_sparse.sh, as gpu/bench/check_run.sh runs it). Logs in $OUT.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
C=.carry/flexq
rm -rf build && tar -xJf $C/gpu.tar.xz && cp $C/flex_gpu_bench build/
stamp unpacked
export BUILD=build
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$OUT/gpu.txt" 2>&1
( build/mkmodel --out /tmp/l3g --preset llama3-8b >"$OUT/mkmodel.log" 2>&1; echo "mkmodel rc $?" >>"$OUT/mkmodel.log" ) &
mp=$!
( export LD_LIBRARY_PATH=$PWD/build/rt
  timeout 170 build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log" )
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok\|differs\|last-q form" "$OUT/tests.log" | head -20
( export LD_LIBRARY_PATH=$PWD/build/rt
  timeout 80 build/flex_gpu_bench --lib build/libtandem_cuda_test.so --threads 16 --reps 5 --kinds structured \
      --chunk-rows 128 flexchunk 32768,65536,131072 >"$OUT/flexchunk.md" 2>"$OUT/flexchunk.err"; echo "rc=$?" >>"$OUT/flexchunk.err" )
stamp "flexchunk done"
sed -n '/### Summary/,$p' "$OUT/flexchunk.md"
grep "^last-q form" "$OUT/flexchunk.md"
tail -2 "$OUT/flexchunk.err"
wait $mp
stamp "mkmodel: $(tail -1 "$OUT/mkmodel.log")"
left=$((292 - ($(date +%s) - t0)))
OUT=$OUT/tbt B=build M=/tmp/l3g MODE_TIMEOUT=90 WARM=4 MODES=flexprefill \
    timeout $left bash gpu/bench/tbt_sparse.sh >"$OUT/tbt_run.log" 2>&1
stamp "tbt done"
cut -c1-1200 "$OUT/tbt/tbt.jsonl" 2>/dev/null
gzip -f "$OUT/tbt/daemon.log" 2>/dev/null
stamp end
