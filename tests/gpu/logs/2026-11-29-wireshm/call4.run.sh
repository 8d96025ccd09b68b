#!/bin/bash
# wirebig: TCP at 65 MiB chunks (window of answers: 2) — REPLYs held in pairs (--hold 2), or
# three chunks unanswered at any size (PEER_KV_WINDOW_MIN=3, peer_bench.w3); 16.25 MiB and 1 MiB
# as controls (neither changes what they do but --hold 2 at 1 MiB)
set -u
D=${D:-.carry/wirebig}
B=${B:-210}
O=${OUT:-/tmp/wb_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="--poll-us 0|--hold 2|@peer_bench.w3|@peer_bench.w3 --hold 2" PARTS=rounds \
    CFGS="${CFGS:-tcp 68157520 32|tcp 17039440 64|sm,tcp 68157520 32}" \
    timeout $((B + 25)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/wb "$B"
date -u +"%T end"
tar -C $O -czf $O/wb.tgz wb && rm -rf $O/wb
