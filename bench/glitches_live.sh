#!/bin/sh
# The live daemon under streaming load: throughput and TTFT / TPOT p50 and p99 at 1, 8 and 32
# concurrent clients (tools/serve_load: closed loop, a new connection per request, greedy,
# stories260K golden prompts, MAXTOK tokens each), for each device set in SETS, with the
# emulated cards paced by the timing model. Also where the decodes went (x-tandem-devices).
#
#   bench/glitches_live.sh [max_tokens (default 64)] [requests per client (default 8)]
#   SETS="cpu,fpga-emu:0,fpga-emu:1 cpu"   device lists to compare (space-separated)
#
# Prints a markdown table. stories260K decodes in about 0.05 ms on the CPU and 0.45 ms on a
# paced card (its modeled U280 time), so on this model the cards are the slower decoders: the
# numbers measure the dispatch and the daemon, not a real model's speed.
set -e
MAXTOK=${1:-64}
PER=${2:-8}
BUILD=${BUILD:-build}
SETS=${SETS:-"cpu,fpga-emu:0,fpga-emu:1 cpu"}
[ -x "$BUILD/serve_load" ] || make -s "$BUILD/serve_load" >/dev/null
T=$(mktemp -d /tmp/tandem-live.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR=${TANDEM_CACHE_DIR:-$T/cache} TANDEM_EMU_PACE=1
echo "| devices | clients | requests | tok/s | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | decodes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for devs in $SETS; do
    "$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --log-file "$T/log.$devs" \
        --devices "$devs" --max-waiting 1024 --max-running 32 &
    PID=$!
    i=0
    until grep -q 'event=ready' "$T/log.$devs" 2>/dev/null || ! kill -0 $PID 2>/dev/null || [ $i -gt 1200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    PORT=$(sed -n 's/.*listener=api .*port=\([0-9]*\).*/\1/p' "$T/log.$devs" | head -1)
    if [ -z "$PORT" ] || ! grep -q 'event=ready' "$T/log.$devs"; then
        echo "| $devs | the daemon did not start: $(grep 'event=load_failed' "$T/log.$devs" | grep -o 'msg="[^"]*"' | head -1) |"
        kill $PID 2>/dev/null || true
        wait $PID 2>/dev/null || true
        PID=
        continue
    fi
    for c in 1 8 32; do
        line=$("$BUILD/serve_load" --port "$PORT" --clients $c --requests $((c * PER)) \
            --max-tokens "$MAXTOK" --golden tests/data/golden/stories260K)
        echo "$line" | awk -v d="$devs" '{
            for (i = 1; i < NF; i++) v[$i] = $(i + 1);
            dec = ""; for (i = 1; i <= NF; i++) if ($i == "decode") for (j = i + 1; j <= NF; j++) dec = dec " " $j;
            printf "| %s | %s | %s | %.0f | %.1f | %.2f | %.2f | %.3f | %.3f |%s |\n", d, v["clients"],
                v["ok"], v["tok_per_s"], v["req_per_s"], v["ttft_p50_ms"], v["ttft_p99_ms"],
                v["tpot_p50_ms"], v["tpot_p99_ms"], dec }'
    done
    kill $PID
    wait $PID 2>/dev/null || true
    PID=
done
