#!/bin/sh
# The prefix cache on a synthetic multi-turn chat trace (BENCHMARKS.md, "KV store"): the daemon
# on the CPU with stories260K; bench/chat_trace.py runs C conversations of T turns at once, each
# turn resending the whole conversation (a shared system text of S words, user texts of U words,
# replies of R tokens), first with every request opting out of prefix caching, then with it.
# Prints the hit rate and TTFT p50/p99 of both. Usage: bench/kv_chat_bench.sh [C T S U R]
# SPARSE='{"mode":"xattention",...}' sends that sparse_prefill with every request (sparse KV is
# cached under its parameters: scheduler/sched_pcache.h).
set -e
BUILD=${BUILD:-build}
C=${1:-64} TT=${2:-4} S=${3:-150} U=${4:-12} R=${5:-16}
. tests/e2e/lib/serve.sh
serve_start --max-running 64 --max-waiting 1024
for mode in --no-cache ""; do
    python3 bench/chat_trace.py --api "$API" --conversations "$C" --turns "$TT" --system-words "$S" \
        --user-words "$U" --reply-tokens "$R" $mode ${SPARSE:+--sparse "$SPARSE"} |
        jq -c --arg m "${mode:-cached}" '{mode: $m, completed, errors: (.errors | length), hit_rate, prompt_tokens, cached_tokens, ttft_p50_ms, ttft_p99_ms, prefill_density_mean, wall_s}'
done
serve_stop
