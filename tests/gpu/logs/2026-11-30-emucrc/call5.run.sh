#!/bin/bash
# emucrc call 5: the emulated decode step after a 4K and a 32K hand-over, main 483e797 (before:
# the V accumulation vectorized, q.k one row after another) and the branch (after: a tile's q.k
# sums side by side), both unpaced (the emulator's own speed), in turns, twice
set -u
D=${D:-.carry/e5}
O=${OUT:-/tmp/e5_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
date -u +"%T start"
nproc; cat /proc/loadavg
for k in 1 2; do
    for p in before after; do
        PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:5 32768:2" HPOLLS=0 HTIMEOUT=120 \
            timeout 130 bash $D/peer_quiet_run.sh $D/$p.tar.xz $O/e5/$p.$k 100
        date -u +"%T $p $k done"
    done
done
tar -C $O -czf $O/e5.tgz e5 && rm -rf $O/e5
