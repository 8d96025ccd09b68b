#!/bin/bash
# gpu/bench/check_run.sh TARBALL — the final GPU check on the lent machine (gpu/bench/check_pack.sh
# makes TARBALL): every gpu_ test (both plugins where a test says so), then the time between
# tokens of 4 decode streams while a 130K prompt prefills, per mode (gpu/bench/tbt_sparse.sh on
# the Llama-3-8B shape). Logs in $OUT. MODES (dense trishape xattention flexprefill), MT: seconds
# a long prompt may take (90); TRACE=1: the scheduler's trace and the client's gaps too, and
# bench/tbt_trace.py's account of them ($OUT/tbt/analysis.jsonl: where each long gap went).
set -u
TARBALL=${1:?usage: check_run.sh TARBALL}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
rm -rf build && tar -xJf "$TARBALL"
sh tools/testdata.sh # build/data/: the Llama-3 tokenizer gpu_tls_offload_sched reads
stamp unpacked
export BUILD=build
( export LD_LIBRARY_PATH=$PWD/build/rt
  timeout 300 build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log" ) &
tp=$!
( build/mkmodel --out /tmp/l3g --preset llama3-8b >"$OUT/mkmodel.log" 2>&1; echo "mkmodel rc $?" >>"$OUT/mkmodel.log" )
wait $tp
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok\|FAIL" "$OUT/tests.log" | head -20
OUT=$OUT/tbt B=build M=/tmp/l3g MODE_TIMEOUT=${MT:-90} WARM=4 MODES="${MODES:-dense trishape xattention flexprefill}" \
    timeout 420 bash gpu/bench/tbt_sparse.sh >"$OUT/tbt_run.log" 2>&1
stamp "tbt done"
cut -c1-600 "$OUT/tbt/tbt.jsonl" 2>/dev/null
if [ "${TRACE:-0}" = 1 ]; then
    G=""; for f in "$OUT"/tbt/gaps_*.json; do G="$G --gaps $f"; done
    # shellcheck disable=SC2086
    python3 bench/tbt_trace.py --trace "$OUT/tbt/sched_trace.0" $G >"$OUT/tbt/analysis.jsonl" 2>&1
    cut -c1-900 "$OUT/tbt/analysis.jsonl"
fi
