#!/bin/bash
# pool2 call 1 (one device call, the H200 machine's host CPUs; the GPU unused): two emulated
# cards stepping at once (fpga_decode_bench --check-cards 2) on a 2-layer LLaMA2-7B (W8A8, 535 MB
# of weights a step), the emulator's pool before (one job at a time: the second card's kernel on
# its own worker) and after (several jobs at once), in turns, three times, 16 steps each.
set -u
D=${D:-.carry/pool2}
O=${OUT:-/tmp/pool_out}
date -u +"%T start"
nproc; cat /proc/loadavg
W=$(mktemp -d)
tar -C $W -xJf $D/pack.tar.xz
export LD_LIBRARY_PATH=$W/pk/rt TANDEM_CACHE_DIR=$W/cache
mkdir -p $W/old $O/pool
cp $W/pk/bin/fpga_decode_bench $W/old/
cp $D/old/libxrt_emu.so $W/old/
$W/pk/bin/mkmodel --out $W/l7b2 --preset llama2-7b --layers 2 > /dev/null
date -u +"%T model made"
for k in 1 2 3; do
    for v in old new; do
        B=$W/pk/bin/fpga_decode_bench
        [ $v = old ] && B=$W/old/fpga_decode_bench
        timeout 200 $B --check $W/l7b2 --check-only --check-bits 8 --check-steps 16 --prompt 0 \
            --check-cards 2 > $O/pool/$v.$k.txt 2>&1
        date -u +"%T $v turn $k done"
        cat /proc/loadavg
    done
done
tar -C $O -czf $O/pool.tgz pool
rm -rf $O/pool $W
