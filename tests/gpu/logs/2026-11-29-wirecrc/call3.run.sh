#!/bin/bash
# wirecrc call 3: the hand-over at 4K and 32K tokens to daemon B's CPU, main (before: de039a1)
# and the vectorized dequantize (after: cpu/kv_quant.c), whole packs taking turns (B's import is
# the dequantize, in B's tandem; A's local import too, in peer_handover)
set -u
D=${D:-.carry/q3}
O=${OUT:-/tmp/q3_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
for k in ${TURNS:-1 2}; do
    for p in ${PACKS:-before after}; do
        PARTS=handover HANDOVER="${HANDOVER:-4096:3 32768:2}" HPOLLS=0 \
            timeout ${PART_S:-200} bash $D/peer_quiet_run.sh $D/$p.tar.xz $O/q3/$p.$k 100
        date -u +"%T $p $k done"
    done
done
tar -C $O -czf $O/q3.tgz q3 && rm -rf $O/q3
