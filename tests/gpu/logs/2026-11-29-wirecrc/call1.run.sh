#!/bin/bash
# wirecrc call 1: TCP at 65 and 16.25 MiB — is the node's CRC what the sender waits for?
# --tcp-handoff 1 (a chunk over tcp lanes handed on: its CRC split between the thread that
# received it and kv_rx), --crc 0 (no CRC), --rx-one 1 --buffers 1 (perftest's pattern)
set -u
D=${D:-.carry/q1}
B=${B:-200}
O=${OUT:-/tmp/q1_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="${ARGS:---poll-us 0|--tcp-handoff 1|--crc 0|--rx-one 1 --buffers 1}" PARTS=rounds \
    CFGS="${CFGS:-tcp 68157520 32|tcp 17039440 64}" \
    timeout $((B + 25)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/q1 "$B"
date -u +"%T end"
tar -C $O -czf $O/q1.tgz q1 && rm -rf $O/q1
