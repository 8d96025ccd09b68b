#!/bin/bash
# gpu/bench/tbt_sparse.sh — issue 22 on the GPU machine: the time between tokens of 4 streams
# decoding on cuda:0 while one ~128K-token prompt prefills (bench/tbt_during_prefill.py), for dense
# prefill and each sparse method, through the daemon (chunked prefill, --tbt-budget-ms 50, its
# default), Llama-3-8B shape (mkmodel --preset llama3-8b, random bf16 weights) with the Llama-3
# tokenizer. Prebuilt binaries: bench/sched_gpu.sh --prebuild (build/portable, with rt/) plus
# build/portable/mkmodel. OUT=dir TOKENS=130000 gpu/bench/tbt_sparse.sh; logs in $OUT.
set -u
OUT=${OUT:-/tmp/tbt_sparse}
TOKENS=${TOKENS:-130000}
mkdir -p "$OUT"
B=build/portable
export LD_LIBRARY_PATH=$PWD/$B/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M=/tmp/l3g
[ -d $M ] || $B/mkmodel --out $M --preset llama3-8b >"$OUT/mkmodel.log" 2>&1 || { cat "$OUT/mkmodel.log"; exit 1; }
cp tests/data/tokenizer/llama3/tokenizer.json $M/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
$B/tandem serve --model $M --devices cuda:0 --port 18080 --admin-port 18090 --tbt-budget-ms 50 \
    >"$OUT/daemon.log" 2>&1 &
pid=$!
for i in $(seq 1 300); do
    curl -sf localhost:18090/ready >/dev/null 2>&1 && break
    sleep 1
done
for mode in ${MODES:-dense xattention trishape flexprefill}; do
    python3 bench/tbt_during_prefill.py --api http://127.0.0.1:18080 --tokens "$TOKENS" \
        --streams "${STREAMS:-4}" --mode $mode | tee -a "$OUT/tbt.jsonl"
done
kill -TERM $pid; wait $pid
echo "exit $?" >>"$OUT/daemon.log"
