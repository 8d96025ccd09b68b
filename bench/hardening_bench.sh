#!/bin/sh
# The API under abuse, on loopback: a slowloris run and a 10x overload run, each reporting what
# real clients got, the daemon's memory and its log volume.
#
#   bench/hardening_bench.sh [slowloris seconds (default 60)] [overload seconds (default 30)]
#
# 1. Slowloris (Debian's slowhttptest -H: 1,000 connections, each sending a header line every
#    10 s) from 127.0.0.1, while a real client on 127.0.0.2 asks for a completion every 50 ms:
#    its answers (status counts) and latency p50/p99. Twice: with the default per-address limit
#    (128: the attacker holds at most that many), and with no per-address limit and 256
#    connections in all (the attack could take every slot; the receive deadline and the eviction
#    of the slowest sender must keep the real client answered).
# 2. Overload: wrk with 128 connections against a daemon that runs 4 sequences and queues 8 —
#    10x and more what it can serve: the status codes seen (only 200/429/503 allowed), the RSS
#    before and after, and the log's size (refusals are rate-limited to a line a second).
#
# Prints markdown. Machine, date and command go into BENCHMARKS.md with it.
set -e
SLOW=${1:-60}
OVER=${2:-30}
BUILD=${BUILD:-build}
T=$(mktemp -d /tmp/tandem-hard.XXXXXX)
PID=
trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT
command -v slowhttptest >/dev/null || { echo "slowhttptest missing (apt-get install slowhttptest)"; exit 1; }
command -v wrk >/dev/null || { echo "wrk missing (apt-get install wrk)"; exit 1; }

start() {
    : >"$T/log"
    "$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --log-file "$T/log" --devices cpu --threads 1 "$@" &
    PID=$!
    i=0
    until grep -q 'event=ready' "$T/log" 2>/dev/null || [ $i -gt 400 ]; do sleep 0.05; i=$((i+1)); done
    PORT=$(sed -n 's/.*listener=api .*port=\([0-9]*\).*/\1/p' "$T/log" | head -1)
    [ -n "$PORT" ] || { echo "the daemon did not start"; cat "$T/log"; exit 1; }
}
stop() { kill -TERM $PID; wait $PID || true; PID=; }
rss_kb() { awk '/^VmRSS/ {print $2}' /proc/$PID/status; }

# real client: one completion every 50 ms from 127.0.0.2 for $1 seconds -> "code seconds" lines
real_client() {
    end=$(($(date +%s) + $1))
    while [ "$(date +%s)" -lt "$end" ]; do
        curl -s -o /dev/null -m 10 --interface 127.0.0.2 -w '%{http_code} %{time_total}\n' \
            -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","max_tokens":4,"temperature":0}' \
            "http://127.0.0.1:$PORT/v1/completions" || echo "000 10"
        sleep 0.05
    done
}
summary() { # file -> "n, codes, p50 ms, p99 ms"
    n=$(wc -l <"$1")
    codes=$(awk '{c[$1]++} END {for (k in c) printf "%s:%d ", k, c[k]}' "$1")
    p50=$(awk '{print $2*1000}' "$1" | sort -n | awk '{a[NR]=$1} END {i=int(NR*0.50+0.5); if (i<1) i=1; printf "%.1f", a[i]}')
    p99=$(awk '{print $2*1000}' "$1" | sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99+0.5); if (i<1) i=1; printf "%.1f", a[i]}')
    echo "$n | $codes| $p50 | $p99"
}

echo "### Slowloris ($SLOW s of slowhttptest -H -c 1000 -i 10 -r 200 from 127.0.0.1; a real client on 127.0.0.2)"
echo
echo "| daemon limits | real requests | statuses | p50 ms | p99 ms | slowloris connections held at the end | RSS before / after MiB |"
echo "|---|---|---|---|---|---|---|"
for limits in "--max-connections 1024 --max-connections-per-ip 128" "--max-connections 256 --max-connections-per-ip 0"; do
    # shellcheck disable=SC2086
    start $limits
    r0=$(rss_kb)
    slowhttptest -H -c 1000 -i 10 -r 200 -l "$SLOW" -t GET -u "http://127.0.0.1:$PORT/health" -x 24 -p 3 \
        >"$T/slow.out" 2>&1 &
    SPID=$!
    sleep 3
    real_client $((SLOW - 6)) >"$T/real"
    held=$(ss -Htn state established "( dport = :$PORT )" src 127.0.0.1 | wc -l)
    wait $SPID || true
    r1=$(rss_kb)
    echo "| \`$limits\` | $(summary "$T/real") | $held | $((r0 / 1024)) / $((r1 / 1024)) |"
    stop
done
echo
echo "### Overload ($OVER s of wrk -c 128 on POST /v1/completions, max_tokens 16; --max-running 4 --max-waiting 8)"
echo
start --max-running 4 --max-waiting 8
r0=$(rss_kb)
l0=$(wc -c <"$T/log")
cat >"$T/codes.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"prompt":"Once upon a time","max_tokens":16,"temperature":0}'
wrk.headers["Content-Type"] = "application/json"
local counts = {}
local threads = {}
setup = function(t) table.insert(threads, t) end
init = function() codes = {} end
response = function(status) codes[status] = (codes[status] or 0) + 1 end
done = function()
  for _, t in ipairs(threads) do
    local c = t:get("codes")
    for k, v in pairs(c) do counts[k] = (counts[k] or 0) + v end
  end
  for k, v in pairs(counts) do io.write(string.format("status %d %d\n", k, v)) end
end
EOF
wrk -t 2 -c 128 -d "${OVER}s" -s "$T/codes.lua" "http://127.0.0.1:$PORT/v1/completions" >"$T/wrk.out" 2>&1
r1=$(rss_kb)
sleep 1
r2=$(rss_kb)
l1=$(wc -c <"$T/log")
codes=$(awk '/^status/ {printf "%s:%s ", $2, $3}' "$T/wrk.out")
bad=$(awk '/^status/ && $2 != 200 && $2 != 429 && $2 != 503 {n += $3} END {print n+0}' "$T/wrk.out")
rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$T/wrk.out")
lines=$(wc -l <"$T/log")
echo "| requests/s | statuses | other statuses | RSS before / after / 1 s later MiB | log bytes written | log lines |"
echo "|---|---|---|---|---|---|"
echo "| $rps | $codes| $bad | $((r0 / 1024)) / $((r1 / 1024)) / $((r2 / 1024)) | $((l1 - l0)) | $lines |"
stop
