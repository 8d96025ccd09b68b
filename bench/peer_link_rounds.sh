#!/bin/sh
# bench/peer_link_rounds.sh N TLS SIZE BIN... — the peer link against ucx_perftest in interleaved
# rounds (BENCHMARKS.md): on a shared, loaded machine a ratio holds only between runs of the same
# minute, so each round runs every given peer_bench binary (tools/peer_bench.c: KV chunks of SIZE
# bytes as tagged messages, as the remote backend sends them; e.g. one built from main and one
# from a branch) and then `ucx_perftest -t tag_bw` on the same UCX_TLS, back to back. One line a
# round: the load average, each binary's MiB/s, perftest's MB/s (of 2^20 bytes). REPS chunks a
# pass (default 1000; peer_bench prints the median of 3 passes after a warm-up one). A BIN may
# carry arguments of its own, as one word: "build/peer_bench --poll-us 1000". PERFTEST names the
# ucx_perftest to run (default: the one on PATH). TIMEOUT: seconds one binary's run may take
# (default 600; past it the round prints "fail" for it). LOG (optional): a file each binary's
# whole output is appended to (peer_bench's stage clocks: its "# sender" and "# node" lines).
# PERFTEST_ENVS (optional): '|'-separated sets of environment words ("UCX_TCP_SNDBUF=4m
# UCX_TCP_RCVBUF=4m|UCX_RNDV_THRESH=4m"): each adds a perftest column after the plain one, both
# of its processes run with those UCX settings (a knob tried on our link is tried on perftest's).
# A BIN may start with `env K=V ...` to run peer_bench with such settings.
#   sh bench/peer_link_rounds.sh 10 sm,tcp 1048576 build/peer_bench
N=$1
TLS=$2
S=$3
shift 3
REPS=${REPS:-1000}
PERFTEST=${PERFTEST:-ucx_perftest}
TIMEOUT=${TIMEOUT:-600}
perftest() { # [ENV_WORDS...]
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
    UCX_TLS=$TLS env "$@" $PERFTEST -p $port >/dev/null 2>&1 &
    srv=$!
    sleep 0.5
    UCX_TLS=$TLS timeout "$TIMEOUT" env "$@" $PERFTEST 127.0.0.1 -p $port -t tag_bw -s "$S" -n "$REPS" -w 10 -f 2>/dev/null |
        awk '/^ *[0-9]/ {v=$6} END {printf "%.0f", v}'
    kill $srv 2>/dev/null
    wait $srv 2>/dev/null || true
}
echo "# load, $* (MiB/s), ucx_perftest tag_bw (MB/s)${PERFTEST_ENVS:+, then with $PERFTEST_ENVS}; UCX_TLS=$TLS, $S-byte chunks, $REPS a pass"
r=0
while [ $r -lt "$N" ]; do
    line=$(cut -d' ' -f1 /proc/loadavg)
    for b in "$@"; do
        out=$(UCX_TLS=$TLS timeout "$TIMEOUT" $b --sizes "$S" --logits 0 --reps "$REPS" --path tag 2>&1)
        [ -n "${LOG:-}" ] && printf "## %s round %s: UCX_TLS=%s %s\n%s\n" "$(date -u +%T)" "$r" "$TLS" "$b" "$out" >>"$LOG"
        v=$(echo "$out" | sed -n 's/^kv [0-9]* bytes: \([0-9]*\) MiB.*/\1/p')
        line="$line ${v:-fail}"
    done
    line="$line $(perftest)"
    if [ -n "${PERFTEST_ENVS:-}" ]; then
        set -f
        oifs=$IFS
        IFS='|'
        for e in $PERFTEST_ENVS; do
            IFS=$oifs
            line="$line $(perftest $e)"
        done
        IFS=$oifs
        set +f
    fi
    echo "$line"
    r=$((r + 1))
done
