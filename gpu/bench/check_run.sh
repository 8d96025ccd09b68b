#!/bin/bash
# gpu/bench/check_run.sh TARBALL — the final GPU check on the lent machine (gpu/bench/check_pack.sh
# makes TARBALL; run from the repository root). Logs in $OUT, packed at the end into $OUT/logs.tgz
# with stamps.log beside it (the device tool brings back at most 8 files). PARTS picks, in order:
#   tests   every gpu_ test (both plugins where a test says so) within TEST_S seconds (330: the
#           suite ran past 250 on 2026-11-29); the benches' Llama-3-8B shape (mkmodel) is written
#           beside them
#   two     the daemon on two devices of one kind (tests/e2e/serve_two_devices.sh: two GPUs where
#           cuda:1 runs); needs curl on the machine
#   tls     issue 23's decode ratios: bench_gpu --tls 130000,32768 --tls-batch 1,8, twice
#   batch   dense decode at 1K of context, batches 1, 2, 4, 8
#   tbt     the time between tokens of 4 decode streams while a 130K prompt prefills, per mode
#           (gpu/bench/tbt_sparse.sh; MODES: dense trishape xattention flexprefill; MT: seconds a
#           long prompt may take, 90; TRACE=1: the scheduler's trace and the client's gaps too,
#           and bench/tbt_trace.py's account of them in tbt/analysis.jsonl)
# Default PARTS="tests tbt" (what this script ran before). BUDGET_S (330 after the tests): no
# bench starts past it. The lead's final call of 2026-11-29 was PARTS="tests two tls batch".
set -u
TARBALL=${1:?usage: check_run.sh TARBALL}
OUT=${OUT:-/tmp/out}
PARTS=${PARTS:-tests tbt}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
rm -rf build && tar -xJf "$TARBALL"
sh tools/testdata.sh >/dev/null # build/data/: the Llama-3 tokenizer gpu_tls_offload_sched reads
stamp "unpacked; parts: $PARTS"
export BUILD=build PATH=$PWD/build/rt:$PATH # jq is packed in rt/
tp=
if has tests; then
    ( export LD_LIBRARY_PATH=$PWD/build/rt
      timeout "${TEST_S:-330}" build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log" ) &
    tp=$!
fi
if has tls || has batch || has tbt; then # the benches' model (~16 GB, ~40 s), beside the tests
    ( export LD_LIBRARY_PATH=$PWD/build/rt
      build/mkmodel --out /tmp/l3g --preset llama3-8b >"$OUT/mkmodel.log" 2>&1; echo "mkmodel rc $?" >>"$OUT/mkmodel.log" )
fi
if [ -n "$tp" ]; then
    wait $tp
    stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok ($(tail -n 1 "$OUT/tests.log"))"
    grep "^not ok\|FAIL" "$OUT/tests.log" | head -20
fi
t1=$(date +%s)
left() { [ $(($(date +%s) - t1)) -le "${BUDGET_S:-330}" ]; }
if has two; then
    if command -v curl >/dev/null; then
        LD_LIBRARY_PATH=$PWD/build/rt timeout 120 sh tests/e2e/serve_two_devices.sh >"$OUT/two.log" 2>&1
        stamp "two devices rc=$?: $(grep -c '^ok' "$OUT/two.log") ok, $(grep -c '^not ok' "$OUT/two.log") not ok"
    else
        stamp "two devices: no curl here"
    fi
fi
bench() { # name args...: bench_gpu (packed beside tandem) on the Llama-3-8B shape
    local name=$1
    shift
    left || { stamp "skip $name: past BUDGET_S"; return; }
    LD_LIBRARY_PATH=$PWD/build/rt timeout 90 build/bench_gpu --model /tmp/l3g "$@" >"$OUT/bench_$name.jsonl" 2>"$OUT/bench_$name.err"
    stamp "bench $name rc=$?"
}
if has tls; then
    bench tls1 --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24
    bench tls2 --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24
fi
has batch && bench batch --batch 1,2,4,8 --batch-ctx 1024 --steps 32
if has tbt; then
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
fi
stamp done
cp "$OUT/stamps.log" "$OUT/stamps.txt"
(cd "$OUT" && tar -czf logs.tgz --exclude=logs.tgz --exclude=stamps.txt --remove-files -- * 2>/dev/null)
ls "$OUT"
