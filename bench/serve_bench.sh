#!/bin/sh
# Benchmark of `tandem serve` on loopback with wrk: requests/s and latency p50/p99 for /health
# and for a short completion at 1, 8 and 64 concurrent connections; then the same completion
# driven through the scheduler in-process (build/sched_bench, no HTTP) at the same concurrency,
# so that the difference is the daemon's added latency (HTTP, JSON, tokenization, the loop).
#
#   bench/serve_bench.sh [seconds per point (default 5)] [max_tokens (default 8)]
#
# THREADS (default 1) sets the CPU backend's threads for both: its pool spins while waiting for
# its workers, so on a small machine where wrk, the loop and the pool share the cores, more
# threads measure CPU oversubscription rather than the daemon.
#
# Prints markdown tables. Machine, date and command go into the report with it. The daemon's own
# share comes from its request log: wall time (body -> submitted, last token -> answer handed to
# the HTTP layer), which on a small shared machine includes time the loop thread waits for a CPU,
# and the loop thread's CPU time for the same two sections.
set -e
DUR=${1:-5}
MAXTOK=${2:-8}
BUILD=${BUILD:-build}
THREADS=${THREADS:-1}
T=$(mktemp -d /tmp/tandem-bench.XXXXXX)
trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT
"$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --log-file "$T/log" \
    --devices cpu --max-waiting 1024 --max-running 64 --threads "$THREADS" &
PID=$!
i=0
until grep -q 'event=listening listener=admin' "$T/log" 2>/dev/null || [ $i -gt 200 ]; do sleep 0.05; i=$((i+1)); done
PORT=$(sed -n 's/.*listener=api .*port=\([0-9]*\).*/\1/p' "$T/log" | head -1)
[ -n "$PORT" ] || { echo "the daemon did not start"; exit 1; }
URL=http://127.0.0.1:$PORT
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ready")" = 200 ]; do sleep 0.05; done
BODY=$(printf '{"prompt":"Once upon a time","max_tokens":%d,"temperature":0}' "$MAXTOK")
export BODY

# wrk's --latency block: "50%  1.23ms" ... -> milliseconds
ms() { awk -v p="$1" '$1 == p { v=$2; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
        if (u == "us") v/=1000; else if (u == "s") v*=1000; else if (u == "m") v*=60000; print v }' "$2"; }
rps() { sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$1"; }

echo "| target | connections | requests/s | p50 ms | p99 ms |"
echo "|---|---|---|---|---|"
for c in 1 8 64; do
    wrk -t $([ $c -lt 2 ] && echo 1 || echo 2) -c $c -d ${DUR}s --latency "$URL/health" >"$T/h$c"
    echo "| GET /health | $c | $(rps "$T/h$c") | $(ms 50% "$T/h$c") | $(ms 99% "$T/h$c") |"
done
for c in 1 8 64; do
    wrk -t $([ $c -lt 2 ] && echo 1 || echo 2) -c $c -d ${DUR}s --latency -s bench/post.lua "$URL/v1/completions" >"$T/p$c"
    grep -q 'non-200: 0' "$T/p$c" || { echo "non-200 answers at $c connections:"; cat "$T/p$c"; }
    echo "| POST /v1/completions (max_tokens $MAXTOK) | $c | $(rps "$T/p$c") | $(ms 50% "$T/p$c") | $(ms 99% "$T/p$c") |"
    # the daemon's own time per request, from its request log (daemon_us: parse + template +
    # tokenize + submit, and last token -> response on the socket)
    cp "$T/log" "$T/log.$c"
done
kill -TERM $PID; wait $PID || true
echo
echo "| daemon's own share per completion (request log) | connections | wall p50 ms | wall p99 ms | loop CPU p50 ms | loop CPU p99 ms |"
echo "|---|---|---|---|---|---|"
# pct FILE P: the P-th percentile (nearest rank) of a sorted column, in ms
pct() { n=$(wc -l <"$1"); [ "$n" -gt 0 ] || { echo -; return; }
        sed -n "$(( (n * $2 + 99) / 100 ))p" "$1" | awk '{printf "%.3f", $1/1000}'; }
prev=0
for c in 1 8 64; do
    tail -n +$((prev + 1)) "$T/log.$c" | grep 'event=request ' >"$T/req.$c"
    prev=$(wc -l <"$T/log.$c")
    sed -n 's/.* daemon_us=\([0-9]*\) .*/\1/p' "$T/req.$c" | sort -n >"$T/own.$c"
    sed -n 's/.* cpu_us=\([0-9]*\) .*/\1/p' "$T/req.$c" | sort -n >"$T/cpu.$c"
    echo "| POST /v1/completions | $c | $(pct "$T/own.$c" 50) | $(pct "$T/own.$c" 99) | $(pct "$T/cpu.$c" 50) | $(pct "$T/cpu.$c" 99) |"
done
echo
if [ -x "$BUILD/sched_bench" ]; then
    for c in 1 8 64; do
        "$BUILD/sched_bench" --clients $c --seconds "$DUR" --max-tokens "$MAXTOK" --prompt "Once upon a time" \
            --threads "$THREADS" --max-running 64 >"$T/s$c"
        read -r r p50 p99 <"$T/s$c"
        echo "| scheduler in-process (no HTTP) | $c | $r | $p50 | $p99 |"
    done
fi
