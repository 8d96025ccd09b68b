#!/bin/bash
# emucrc call 4: the hand-over at 4K and 32K tokens onto an emulated card, main db9a98a (before:
# one kv_scatter run per 128-position block) and the branch (after: one run per piece, the block
# table in staging slot 0), both cards paced to the U280 timing model (TANDEM_EMU_PACE=1: B's
# --fpga-emu-pace follows it), in turns, twice; then the branch unpaced, twice
set -u
D=${D:-.carry/e4}
O=${OUT:-/tmp/e4_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
date -u +"%T start"
nproc; cat /proc/loadavg
for k in 1 2; do
    for p in before after; do
        TANDEM_EMU_PACE=1 PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 HTIMEOUT=120 \
            timeout 130 bash $D/peer_quiet_run.sh $D/$p.tar.xz $O/e4/paced.$p.$k 100
        date -u +"%T paced $p $k done"
    done
    PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 HTIMEOUT=120 \
        timeout 130 bash $D/peer_quiet_run.sh $D/after.tar.xz $O/e4/after.$k 100
    date -u +"%T after $k done"
done
tar -C $O -czf $O/e4.tgz e4 && rm -rf $O/e4
