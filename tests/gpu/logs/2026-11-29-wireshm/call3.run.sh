#!/bin/bash
# wireshm call 3: issue 26's link goal on the branch's code at every chunk size the daemon ships,
# both transports: peer_bench's default (the daemon's path) against ucx_perftest tag_bw
set -u
D=${D:-.carry/wireshm3}
B=${B:-270}
O=${OUT:-/tmp/ws3_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="--poll-us 0" PARTS=rounds \
    CFGS="${CFGS:-tcp 1048576 350|sm,tcp 1048576 350|tcp 8519760 128|sm,tcp 8519760 128|tcp 17039440 64|sm,tcp 17039440 64|tcp 68157520 32|sm,tcp 68157520 32}" \
    timeout $((B + 25)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/ws3 "$B"
date -u +"%T end"
tar -C $O -czf $O/ws3.tgz ws3 && rm -rf $O/ws3
