#!/bin/bash
# lead's final check on the H200: main's gpu code (both plugins), then the TBT during a 130K prefill
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
rm -rf build && tar -xJf .carry/lead/gpu.tar.xz
stamp unpacked
export BUILD=build
( export LD_LIBRARY_PATH=$PWD/build/rt
  timeout 300 build/tandem-tests gpu_ _cuda > "$OUT/tests.log" 2>&1; echo "rc=$?" >> "$OUT/tests.log" ) &
tp=$!
( build/mkmodel --out /tmp/l3g --preset llama3-8b > "$OUT/mkmodel.log" 2>&1; echo "mkmodel rc $?" >> "$OUT/mkmodel.log" )
wait $tp
stamp "tests: $(grep -c '^ok' $OUT/tests.log) ok, $(grep -c '^not ok' $OUT/tests.log) not ok"
grep "^not ok\|FAIL" "$OUT/tests.log" | head -20
OUT=$OUT/tbt B=build M=/tmp/l3g MODE_TIMEOUT=${MT:-90} WARM=4 MODES="${MODES:-dense trishape xattention flexprefill}" \
    timeout 420 bash gpu/bench/tbt_sparse.sh > "$OUT/tbt_run.log" 2>&1
stamp "tbt done"
cat "$OUT/tbt/tbt.jsonl" 2>/dev/null | cut -c1-600
grep -c "" "$OUT/tbt/daemon.log" 2>/dev/null
