#!/bin/bash
# wirecrc call 5: the hand-over at 4K and 32K tokens to daemon B's CPU, main 547a0db (before)
# and the import spread over the device's threads (after: cpu/backend.c), whole packs taking turns (B's import is
# the dequantize, in B's tandem; A's local import too, in peer_handover)
set -u
D=${D:-.carry/q5}
O=${OUT:-/tmp/q5_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
for k in ${TURNS:-1 2}; do
    for p in ${PACKS:-before after}; do
        PARTS=handover HANDOVER="${HANDOVER:-4096:3 32768:2}" HPOLLS=0 \
            timeout ${PART_S:-200} bash $D/peer_quiet_run.sh $D/$p.tar.xz $O/q5/$p.$k 100
        date -u +"%T $p $k done"
    done
done
tar -C $O -czf $O/q5.tgz q5 && rm -rf $O/q5
