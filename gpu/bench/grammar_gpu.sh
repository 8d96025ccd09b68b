#!/bin/bash
# gpu/bench/grammar_gpu.sh — issue 24 on the GPU machine: decode ms/token at batch 1 with and
# without a grammar (bench/grammar_tpot.py) through the daemon on cuda:0, Llama-3-8B shape
# (mkmodel --preset llama3-8b, random bf16 weights) with the Llama-3 tokenizer (128,256-entry
# vocabulary: tests/data/tokenizer/llama3). Prebuilt binaries: bench/sched_gpu.sh --prebuild
# (build/portable, with rt/), plus build/portable/mkmodel; carried as build/portable.tar.xz.
# OUT=dir gpu/bench/grammar_gpu.sh; logs in $OUT.
set -u
OUT=${OUT:-/tmp/grammar_gpu}
mkdir -p "$OUT"
B=build/portable
export LD_LIBRARY_PATH=$PWD/$B/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M=/tmp/l3g
[ -d $M ] || $B/mkmodel --out $M --preset llama3-8b >"$OUT/mkmodel.log" 2>&1 || { cat "$OUT/mkmodel.log"; exit 1; }
gzip -dc tests/data/tokenizer/llama3/tokenizer.json.gz >$M/tokenizer.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
$B/tandem serve --model $M --devices cuda:0 --port 18080 --admin-port 18090 >"$OUT/daemon.log" 2>&1 &
pid=$!
for i in $(seq 1 300); do
    curl -sf localhost:18090/ready >/dev/null 2>&1 && break
    sleep 1
done
curl -s localhost:18090/ready; echo
python3 bench/grammar_tpot.py --api http://127.0.0.1:18080 --reps "${REPS:-5}" --max-tokens "${MAXTOK:-128}" | tee "$OUT/tpot.jsonl"
kill -TERM $pid; wait $pid
echo "exit $?" >>"$OUT/daemon.log"
