#!/bin/bash
# emuatt call 1: the emulated decode step after a 4K and a 32K hand-over onto fpga-emu:0, main
# ca8e2e6 (before: a tile's q.k sums side by side, each K row gathered per query head) against
# the branch (after: the tile's K converted once to floats, element-major, by an SSE2 16x16 byte
# transpose, the rows' sums a vector), both unpaced (the emulator's own speed), on the bench
# model with one query head a KV head (HHEADS 8) and with four (HHEADS 32, Llama-3-8B's), in
# turns, twice. PORTABLE builds (bench/peer_quiet_pack.sh).
set -u
D=${D:-.carry/ea}
O=${OUT:-/tmp/ea_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
date -u +"%T start"
nproc; cat /proc/loadavg
for h in 8 32; do
    for k in 1 2; do
        for p in before after; do
            HHEADS=$h PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:5 32768:2" HPOLLS=0 HTIMEOUT=150 \
                timeout 170 bash $D/peer_quiet_run.sh $D/$p.tar.xz $O/ea/h$h.$p.$k 160
            date -u +"%T h$h $p $k done"
            tar -C $O -czf $O/ea.tgz.part ea && mv $O/ea.tgz.part $O/ea.tgz # what is done so far
        done
    done
done
rm -rf $O/ea
