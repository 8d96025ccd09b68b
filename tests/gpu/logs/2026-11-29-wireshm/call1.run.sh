#!/bin/bash
# wireshm call 1: where the shared-memory gap at 8.1 and 16.25 MiB goes (issue 26)
set -u
D=${D:-.carry/wireshm}
B=${B:-200}
O=${OUT:-/tmp/ws_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="--poll-us 0|--rx-threads 1|--buffers 1 --rx-same 1|--buffers 1|--rx-same 1|UCX_CMA_SEG_SIZE=64M|--poll-us 1000" \
PERFTEST_ENVS="UCX_CMA_SEG_SIZE=64M" PARTS=rounds \
    CFGS="${CFGS:-sm,tcp 17039440 64|sm,tcp 8519760 128}" \
    timeout $((B + 25)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/ws "$B"
date -u +"%T end"
tar -C $O -czf $O/ws.tgz ws && rm -rf $O/ws
