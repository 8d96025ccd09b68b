#!/bin/bash
# kvdec device call 2: the GPU tests on this branch's plugins, then main's plugin (old) against
# this branch's (new) on the batched decode curve and batch-1 decode at 1K / 8K, alternately, and
# the new settings one at a time at batch 256.
set -u
exec > >(tee -a $OUT/bench.log) 2>&1
t0=$(date +%s); st() { echo "== [$(($(date +%s)-t0))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; date -u
tar -C /tmp -xJf .carry/kvdec/base.tar.xz && tar -C /tmp -xJf .carry/kvdec/new.tar.xz
mkdir -p build && cp -r /tmp/kn/build/. build/
export LD_LIBRARY_PATH=/tmp/kb/rt:${LD_LIBRARY_PATH-}
(/tmp/kb/mkmodel --preset llama3-8b --out /tmp/l3 > /tmp/mk.log 2>&1; echo mkmodel rc $?) &
MK=$!
st "GPU tests (new)"
TANDEM_TEST_TIMEOUT=90 timeout 150 build/tandem-tests gpu_op gpu_shape gpu_tuning gpu_paged gpu_decode gpu_tls > $OUT/tests.log 2>&1
tail -1 $OUT/tests.log; grep -E "^not ok|FAIL" $OUT/tests.log; grep -E "batch of|batched vs single" $OUT/tests.log
wait $MK; tail -1 /tmp/mk.log
mkdir -p /tmp/old /tmp/new
cp /tmp/kb/bench_gpu /tmp/kb/libtandem_cuda.so /tmp/old/
cp build/bench_gpu build/libtandem_cuda.so /tmp/new/
B() { echo "-- $1 ${2:-} ${@:3}"; TANDEM_GPU_TUNE=${2:-} /tmp/$1/bench_gpu --model /tmp/l3 "${@:3}" 2>&1 | grep -E '"decode"|"batch"|profile: decode' | sed "s/^/$1 ${2:-default} /"; }
FULL="--decode-ctx 1024,8192 --batch 32,64,128,256 --batch-ctx 1024 --steps 32 --reps 1"
B256="--batch 256 --batch-ctx 1024 --steps 32 --reps 1"
st "round 1"; B old "" $FULL; B new "" $FULL
st "settings at 256"
B new decode_rows=0 $B256; B new logits_chunks=1 $B256
st "round 2 at 256"; B old "" $B256; B new "" $B256
st done
