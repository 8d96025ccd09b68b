#!/bin/bash
# imppar call 1: the hand-over onto an emulated card (fpga-emu:0) at 4K and 32K tokens, the bench
# model with Llama-3-8B's attention (32 query heads on 8 KV heads, HHEADS=32), unpaced, with every
# kernel on its card's worker (TANDEM_EMU_THREADS=1: the code before emupar, mvpar and this
# change, bit for bit) and with the node's 16 cores (the decode step's KV heads and matrix
# products, the import's kv_scatter slots and kv_check layers on the emulator's threads), in
# turns, twice. PORTABLE build of the branch (bench/peer_quiet_pack.sh).
set -u
D=${D:-.carry/ip1}
O=${OUT:-/tmp/ip_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
date -u +"%T start"
nproc; cat /proc/loadavg
for k in 1 2; do
    for t in 1 16; do
        TANDEM_EMU_THREADS=$t HHEADS=32 PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 \
            HTIMEOUT=150 timeout 170 bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/ip/t$t.$k 160
        date -u +"%T threads $t turn $k done"
        cat /proc/loadavg
        tar -C $O -czf $O/ip.tgz.part ip && mv $O/ip.tgz.part $O/ip.tgz # what is done so far
    done
done
rm -rf $O/ip
