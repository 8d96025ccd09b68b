#!/bin/bash
# pcall call 1 (one device call, the H200 machine's host CPUs; the GPU unused): node B running its
# peers' device calls on a thread of each device (h/lead 24cd81a) against on its loop (main
# cb3d15a), in turns: bench/peer_bench.sh's decode part (stories260K, 40 streamed requests of 64
# tokens: node A prefills, node B's fpga-emu:0 decodes over UCX, beside one daemon's own card)
# and its hand-over part at 4K tokens (the Llama-3-8B KV shape onto B's CPU, shared memory and
# the TCP stream: the stream's KV frames now go through kv_rx).
set -u
D=${D:-.carry/pcall}
O=${OUT:-/tmp/pcall_out}
date -u +"%T start"
nproc; cat /proc/loadavg
W=$(mktemp -d)
tar -C $W -xJf $D/pack.tar.xz
export LD_LIBRARY_PATH=$W/pk/rt UCX_TCP_CM_REUSEADDR=y
mkdir -p $W/new $W/old $O/pc
ln -s "$PWD/models" $W/models # the bundled stories260K, found beside the binaries' folder
for f in tandem libxrt_emu.so peer_handover; do cp $W/pk/bin/$f $W/new/; cp $W/pk/bin/$f.old $W/old/$f; done
cp $W/pk/bin/mkmodel $W/new/; cp $W/pk/bin/mkmodel $W/old/
for k in ${TURNS:-1 2}; do
    for v in old new; do
        P=${PARTS_OF_TURN:-decode handover}; [ $k != 1 ] && P=decode
        BUILD=$W/$v PARTS="$P" TOKENS=4096 timeout -s KILL ${RUN_TIMEOUT:-200} sh bench/peer_bench.sh > $O/pc/$v.$k.txt 2>&1
        date -u +"%T $v turn $k done"; cat /proc/loadavg
        tar -C $O -czf $O/pc.tgz.part pc && mv $O/pc.tgz.part $O/pc.tgz
    done
done
rm -rf $O/pc $W
