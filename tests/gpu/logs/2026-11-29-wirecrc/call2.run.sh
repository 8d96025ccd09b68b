#!/bin/bash
# wirecrc call 2: every TCP chunk size with the node's and the sender's workers polling 0 and
# 1000 us; then the 4K hand-over over shared memory, main against a window of sends as wide as
# the window of answers (peer_handover.s8: -DPEER_KV_SM_SENDS=8), taking turns
set -u
D=${D:-.carry/q2}
B=${B:-240}
O=${OUT:-/tmp/q2_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="${ARGS:---poll-us 0|--poll-us 1000}" PARTS="rounds handover" HANDOVER="${HANDOVER:-4096:3}" HPOLLS=0 \
    HBINS="peer_handover peer_handover.s8" HBIN_TURNS=${HBIN_TURNS:-2} HANDOVER_AT=${HANDOVER_AT:-3} HANDOVER_NEED=${HANDOVER_NEED:-80} \
    CFGS="${CFGS:-tcp 68157520 32|tcp 17039440 64|tcp 8519760 128|tcp 1048576 350}" \
    timeout $((B + 40)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/q2 "$B"
date -u +"%T end"
tar -C $O -czf $O/q2.tgz q2 && rm -rf $O/q2
