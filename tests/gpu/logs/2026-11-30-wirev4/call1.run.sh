#!/bin/bash
# wirev4 call 1 (one device call, the H200 machine's host CPUs; the GPU unused): the peer link
# after peer protocol 4 (each tagged KV chunk carries its connection's 32-byte token, checked in
# constant time before the chunk is used) against main before it, interleaved rounds beside
# ucx_perftest tag_bw, over TCP and shared memory at 1 MiB chunks (issue 26's link goal).
set -u
D=${D:-.carry/wirev4}
O=${OUT:-/tmp/wirev4_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
nproc; cat /proc/loadavg
ARGS="--warm 1" PARTS=rounds CFGS="tcp 1048576 350|sm,tcp 1048576 350" \
    timeout 250 bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/w4 230
date -u +"%T rounds done"
cat /proc/loadavg
tar -C $O -czf $O/w4.tgz w4 && rm -rf $O/w4
