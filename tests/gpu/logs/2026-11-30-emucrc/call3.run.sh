#!/bin/bash
# emucrc call 3: the hand-over at 4K and 32K tokens onto an emulated card, the branch (the
# emulator's CRC, and the calibration default by cost: no TANDEM_FPGA_QUANT here), both cards
# unpaced (daemon B with --fpga-emu-pace 0: call 2's unpaced rows had B paced, the daemon's
# default) and both paced (TANDEM_EMU_PACE=1), in turns, twice
set -u
D=${D:-.carry/e3}
O=${OUT:-/tmp/e3_out}
export UCX_TCP_CM_REUSEADDR=y
export TANDEM_CACHE_DIR=$(mktemp -d)
date -u +"%T start"
nproc; cat /proc/loadavg
for k in 1 2; do
    PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 HTIMEOUT=120 \
        timeout 130 bash $D/peer_quiet_run.sh $D/after.tar.xz $O/e3/after.$k 100
    date -u +"%T after $k done"
    TANDEM_EMU_PACE=1 PARTS=handover HDEV=fpga-emu:0 HANDOVER="4096:3 32768:2" HPOLLS=0 HTIMEOUT=120 \
        timeout 130 bash $D/peer_quiet_run.sh $D/after.tar.xz $O/e3/paced.$k 100
    date -u +"%T paced $k done"
done
tar -C $O -czf $O/e3.tgz e3 && rm -rf $O/e3
