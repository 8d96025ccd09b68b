#!/bin/bash
# wirelast: issue 26's link goal and hand-over on the session's final code (main + the parked
# buffers), every chunk size the daemon ships on both transports, then the hand-over at 4K and 32K
set -u
D=${D:-.carry/wirelast}
B=${B:-300}
O=${OUT:-/tmp/wl_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="--poll-us 0" PARTS="rounds handover" HANDOVER="4096:3 32768:2" HPOLLS=0 HANDOVER_AT=1 HANDOVER_NEED=120 \
    CFGS="${CFGS:-tcp 1048576 350|sm,tcp 1048576 350|tcp 8519760 128|sm,tcp 8519760 128|tcp 17039440 64|sm,tcp 17039440 64|tcp 68157520 32|sm,tcp 68157520 32}" \
    timeout $((B + 30)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/wl "$B"
date -u +"%T end"
tar -C $O -czf $O/wl.tgz wl && rm -rf $O/wl
