#!/bin/sh
# CPU decode at batch 1 on stories260K: tandem's CPU backend vs llama2.c's run.c, same machine.
#   bench/cpu_vs_llama2c.sh LLAMA2C_CHECKOUT LLAMA2C_MODEL_DIR [TOKENS] [RUNS]
# LLAMA2C_MODEL_DIR holds stories260K.bin and tok512.bin (../shared/models/stories260K/llama2c).
# run.c is built with -O3 -march=native from an unmodified checkout, except that its "stop at
# BOS" line is removed in a temporary copy so that both programs generate exactly TOKENS tokens
# from BOS (greedy). Both run single-threaded (run.c has no threads without OpenMP; tandem is
# given --threads 1). Best of RUNS for each: other load on the machine only slows a run down.
set -e
L2C=${1:?llama2.c checkout}
MD=${2:?directory with stories260K.bin and tok512.bin}
N=${3:-256}
RUNS=${4:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's/if (next == 1) { break; }/(void)0;/' "$L2C/run.c" > "$tmp/run.c"
grep -q 'next == 1' "$tmp/run.c" && { echo "could not remove run.c's BOS stop" >&2; exit 1; }
gcc -O3 -march=native -o "$tmp/run" "$tmp/run.c" -lm
best_l2c=0; best_t=0
for i in $(seq "$RUNS"); do
    r=$("$tmp/run" "$MD/stories260K.bin" -z "$MD/tok512.bin" -t 0 -n "$N" 2>&1 | sed -n 's/.*achieved tok\/s: \([0-9.]*\).*/\1/p')
    t=$(build/tandem bench --model models/stories260K --threads 1 --tokens "$N" --repeat 1 --json | sed -n 's/.*"decode_tok_s":\([0-9.]*\).*/\1/p')
    best_l2c=$(echo "$r $best_l2c" | awk '{print ($1 > $2) ? $1 : $2}')
    best_t=$(echo "$t $best_t" | awk '{print ($1 > $2) ? $1 : $2}')
done
echo "stories260K decode, batch 1, $N tokens from BOS, best of $RUNS, single thread"
echo "  llama2.c run.c (-O3 -march=native): $best_l2c tokens/s"
echo "  tandem cpu backend:                 $best_t tokens/s"
