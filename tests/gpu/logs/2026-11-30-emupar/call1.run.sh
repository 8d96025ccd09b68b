#!/bin/bash
# emupar call 1: the emulated decode step after a 4K and a 32K hand-over onto fpga-emu:0 with
# the decode step's KV heads on the emulator's threads (the branch at 60453bc; every thread the
# node has, 16) against the same pack with TANDEM_EMU_THREADS=1 (every kernel on its card's
# worker: the code before, bit for bit), unpaced, on the bench model with one query head a KV
# head (HHEADS 8) and with four (32), in turns, twice. PORTABLE build (bench/peer_quiet_pack.sh).
set -u
D=${D:-.carry/ep}
O=${OUT:-/tmp/ep_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
date -u +"%T start"
nproc; cat /proc/loadavg
for h in 32 8; do
    for k in 1 2; do
        for t in 1 16; do
            TANDEM_EMU_THREADS=$t HHEADS=$h PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:5 32768:2" HPOLLS=0 \
                HTIMEOUT=150 timeout 170 bash $D/peer_quiet_run.sh $D/after.tar.xz $O/ep/h$h.t$t.$k 160
            date -u +"%T h$h threads $t $k done"
            tar -C $O -czf $O/ep.tgz.part ep && mv $O/ep.tgz.part $O/ep.tgz # what is done so far
        done
    done
done
rm -rf $O/ep
