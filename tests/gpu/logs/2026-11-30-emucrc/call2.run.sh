#!/bin/bash
# emucrc call 2: the hand-over at 4K and 32K tokens onto an emulated card (fpga-emu:0: B's in
# daemon B, A's own in peer_handover), main 589cb1c (before) and the branch (after: the
# emulator's CRC on the crc32 instruction, kv_check a line at a time, the host's chunk check
# vectorized), whole packs taking turns; "after" also paced to the card's timing model
set -u
D=${D:-.carry/e1}
O=${OUT:-/tmp/e1_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
# the weight image without calibration: a calibrated build of this 128K-vocabulary model takes
# minutes on one core (weights do not change what a hand-over moves or costs)
export TANDEM_FPGA_QUANT=calib=0
date -u +"%T start"
nproc; cat /proc/loadavg
t0=$(date +%s)
for k in ${TURNS:-1 2}; do
    [ $k -gt 1 ] && [ $(($(date +%s) - t0)) -gt 250 ] && break # a second turn only if it fits the call
    PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:1" HPOLLS=0 HTIMEOUT=240 \
        timeout 200 bash $D/peer_quiet_run.sh $D/before.tar.xz $O/e1/before.$k 100
    date -u +"%T before $k done"
    PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 HTIMEOUT=120 \
        timeout 100 bash $D/peer_quiet_run.sh $D/after.tar.xz $O/e1/after.$k 100
    date -u +"%T after $k done"
    TANDEM_EMU_PACE=1 PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 HTIMEOUT=120 \
        timeout 100 bash $D/peer_quiet_run.sh $D/after.tar.xz $O/e1/paced.$k 100
    date -u +"%T paced $k done"
done
tar -C $O -czf $O/e1.tgz e1 && rm -rf $O/e1
