#!/bin/bash
# the lead's final check (2 x H200 call): every gpu_ test of main's PORTABLE build (mkmodel's
# Llama-3-8B shape written beside them), the daemon on two GPUs (tests/e2e/serve_gpus.sh, where
# curl is), then issue 23's ratios: bench_gpu --tls twice and the small dense batches once
set -u
C=.carry/check
OUT=${OUT:?}
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
rm -rf build && tar -xJf $C/gpu.tar.xz && cp $C/bench_gpu build/ && sh tools/testdata.sh >/dev/null 2>&1
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt PATH=$PWD/build/rt:$PATH
stamp unpacked
(timeout 250 build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log") &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$OUT/mkmodel.log" 2>&1
stamp "mkmodel rc=$?"
wait $tp
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok" "$OUT/tests.log" | head
{ command -v curl; command -v python3; } > "$OUT/tools.txt" 2>&1
if command -v curl >/dev/null; then
    timeout 90 sh tests/e2e/serve_gpus.sh > "$OUT/serve_gpus.log" 2>&1
    stamp "serve_gpus rc=$?: $(grep -c '^ok' "$OUT/serve_gpus.log") ok, $(grep -c '^not ok' "$OUT/serve_gpus.log") not ok"
fi
bench() { # name args...
    local name=$1; shift
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-300} ] && { stamp "skip $name"; return; }
    timeout 60 build/bench_gpu --model /tmp/l3g "$@" > "$OUT/bench_$name.jsonl" 2> "$OUT/bench_$name.err"
    stamp "bench $name rc=$?"
}
bench tls1 --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24
bench batch --batch 1,2,4,8 --batch-ctx 1024 --steps 32
bench tls2 --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24
stamp done
cd "$OUT" && tar -czf logs.tgz --remove-files *.log *.jsonl *.err *.txt 2>/dev/null
ls "$OUT"
