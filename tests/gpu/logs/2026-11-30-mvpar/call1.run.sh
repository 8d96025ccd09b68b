#!/bin/bash
# mvpar call 1 (one device call, the H200 machine's host CPUs; the GPU unused):
#  A. TCP at 1 MiB chunks, issue 26's open number: the default against the node's CRC on its
#     receiving thread with three kv_rx slots (`--crc-on node`: wiretcp9 tried it with two only),
#     and with three receives ahead, beside ucx_perftest tag_bw, interleaved rounds;
#  B. the emulated card's decode step of a 2-layer LLaMA2-7B (W8A8; 535 MB of weights a step)
#     with every kernel on the card's worker (TANDEM_EMU_THREADS=1: the code before, bit for bit)
#     and with the node's 16 cores (the matrix products' 32 channel engines on the emulator's
#     threads, fpga/kernels/dec_mat.h), in turns, twice.
# PORTABLE build packed by bench/peer_quiet_pack.sh (EXTRA: fpga_decode_bench).
set -u
D=${D:-.carry/mv1}
O=${OUT:-/tmp/mv_out}
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
nproc; cat /proc/loadavg
ARGS="--warm 1|--crc-on node|--crc-on node --rx-ahead 3" PARTS=rounds CFGS="tcp 1048576 350" \
    timeout 200 bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/mv/tcp 180
date -u +"%T rounds done"
tar -C $O -czf $O/mv.tgz.part mv && mv $O/mv.tgz.part $O/mv.tgz
W=$(mktemp -d)
tar -C $W -xJf $D/pack.tar.xz
export LD_LIBRARY_PATH=$W/pk/rt TANDEM_CACHE_DIR=$W/cache
mkdir -p $O/mv/dec
$W/pk/bin/mkmodel --out $W/l7b2 --preset llama2-7b --layers 2 > /dev/null
date -u +"%T model made"
for k in 1 2; do
    for t in 1 16; do
        TANDEM_EMU_THREADS=$t timeout 200 $W/pk/bin/fpga_decode_bench --check $W/l7b2 --check-only \
            --check-bits 8 --check-steps 16 --prompt 0 > $O/mv/dec/t$t.$k.txt 2>&1
        date -u +"%T threads $t turn $k done"
        cat /proc/loadavg
        tar -C $O -czf $O/mv.tgz.part mv && mv $O/mv.tgz.part $O/mv.tgz
    done
done
rm -rf $O/mv $W
