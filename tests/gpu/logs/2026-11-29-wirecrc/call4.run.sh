#!/bin/bash
# wirecrc call 4: the hand-over at 4K and 32K tokens to daemon B's CPU, main (before: de039a1)
# and the vectorized dequantize with the CPU pool's arenas reserved (after: cpu/kv_quant.c, cpu/kv_cache.c), whole packs taking turns (B's import is
# the dequantize, in B's tandem; A's local import too, in peer_handover)
set -u
D=${D:-.carry/q4}
O=${OUT:-/tmp/q4_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
for k in ${TURNS:-1 2}; do
    for p in ${PACKS:-before after}; do
        PARTS=handover HANDOVER="${HANDOVER:-4096:3 32768:2}" HPOLLS=0 \
            timeout ${PART_S:-200} bash $D/peer_quiet_run.sh $D/$p.tar.xz $O/q4/$p.$k 100
        date -u +"%T $p $k done"
    done
done
tar -C $O -czf $O/q4.tgz q4 && rm -rf $O/q4
