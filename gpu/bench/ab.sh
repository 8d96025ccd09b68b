#!/bin/bash
# gpu/bench/ab.sh A B — two builds of the CUDA backend against each other in one device call: the
# headline benchmark (bench_gpu on the random Llama-3-8B checkpoint: prefill 1K-32K back to back,
# decode after 1K and 8K, batches of 1, 8 and 32) of A, then B, then A, then B (ROUNDS rounds,
# default 2: alternating, so that a unit's drift shows as a difference between rounds and not
# between builds). A and B are folders each holding a bench_gpu and the plugin it loads
# (libtandem_cuda.so beside it), e.g. a build of the commit before a change and one after.
# Run from the repository root on the GPU machine, after run_all.sh or with build/mkmodel there:
#   OUT=dir gpu/bench/ab.sh old new        then  python3 gpu/bench/ab.py $OUT/ab.jsonl old new
# Appends to $OUT/ab.jsonl bench_gpu's lines with "build" and "round" added.
set -u
A=${1:?usage: ab.sh A_DIR B_DIR}
B=${2:?usage: ab.sh A_DIR B_DIR}
OUT=${OUT:-/tmp/tandem-out}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
mkdir -p "$OUT"
BINS="$A/bench_gpu $A/libtandem_cuda.so $B/bench_gpu $B/libtandem_cuda.so build/mkmodel"
. gpu/bench/libpath.sh
missing
if [ ! -f "$MODEL8B/config.json" ]; then
    timeout 300 build/mkmodel --preset llama3-8b --out "$MODEL8B" || exit 1
fi
for round in $(seq 1 "${ROUNDS:-2}"); do
    for dir in "$A" "$B"; do
        echo "== ab round $round: $dir ($(date -u +%T))"
        timeout 240 "$dir/bench_gpu" --model "$MODEL8B" --prefill 1024,4096,16384,32768 \
            --decode-ctx 1024,8192 --batch 1,8,32 --reps 3 --steps 64 \
            | sed "s|^{|{\"build\":\"$dir\",\"round\":$round,|" | tee -a "$OUT/ab.jsonl"
    done
done
