#!/bin/bash
# the lead's final check (H200 call): every gpu_ test of main's PORTABLE build (mkmodel's
# Llama-3-8B shape written beside them), then where issue 23's ratios stand on final main:
# bench_gpu --tls twice and the small dense batches once, nothing else running
set -u
C=.carry/check
OUT=${OUT:?}
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
rm -rf build && tar -xJf $C/gpu.tar.xz && cp $C/bench_gpu build/ && sh tools/testdata.sh >/dev/null 2>&1
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
stamp unpacked
(timeout 250 build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log") &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$OUT/mkmodel.log" 2>&1
stamp "mkmodel rc=$?"
wait $tp
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok" "$OUT/tests.log" | head
b=0
bench() { # name args...
    local name=$1; shift
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-285} ] && { stamp "skip $name"; return; }
    timeout 60 build/bench_gpu --model /tmp/l3g "$@" > "$OUT/bench_$name.jsonl" 2> "$OUT/bench_$name.err"
    stamp "bench $name rc=$?"
}
bench tls1 --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24
bench batch --batch 1,2,4,8 --batch-ctx 1024 --steps 32
bench tls2 --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24
stamp done
