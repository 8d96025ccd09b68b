#!/bin/bash
# wireshm call 2: a window of two sends over shared memory (the buffer the node just read is the
# next one written) against the code before, with and without each chunk written before its send
set -u
D=${D:-.carry/wireshm2}
B=${B:-225}
O=${OUT:-/tmp/ws2_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="--sm-sends 0|--poll-us 0|--sm-sends 0 --write 2|--write 2|--buffers 1" PARTS=rounds \
    CFGS="${CFGS:-sm,tcp 17039440 64|sm,tcp 8519760 128|sm,tcp 1048576 350}" \
    timeout $((B + 25)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/ws2 "$B"
date -u +"%T end"
tar -C $O -czf $O/ws2.tgz ws2 && rm -rf $O/ws2
