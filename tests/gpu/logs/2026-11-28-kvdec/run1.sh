#!/bin/bash
# kvdec device call 1: where a batched decode step's time goes on main's plugin
set -u
O=$OUT/run1.log
exec > >(tee -a $O) 2>&1
t0=$(date +%s); st() { echo "== [$(($(date +%s)-t0))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; date -u
tar -C /tmp -xJf .carry/kvdec/base.tar.xz
export LD_LIBRARY_PATH=/tmp/kb/rt:${LD_LIBRARY_PATH-}
(/tmp/kb/mkmodel --preset llama3-8b --out /tmp/l3 > /tmp/mk.log 2>&1; echo mkmodel rc $?) &
MK=$!
st gemm_decode
/tmp/kb/gemm_decode 32,64,128,256 4200 | tee $OUT/gemm_decode.md
wait $MK; tail -2 /tmp/mk.log
for B in 256 64; do
  st "profile batch $B"
  TANDEM_GPU_TUNE=profile=1 /tmp/kb/bench_gpu --model /tmp/l3 --batch $B --batch-ctx 1024 --steps 8 --reps 1 2>&1 | grep -E 'batch|profile: decode'
done
st "graphs batch 32,64,128,256"
/tmp/kb/bench_gpu --model /tmp/l3 --batch 32,64,128,256 --batch-ctx 1024 --steps 16 --reps 1 2>&1 | grep -E '"batch"'
st "graphs batch 256 decode_mma=0"
TANDEM_GPU_TUNE=decode_mma=0 /tmp/kb/bench_gpu --model /tmp/l3 --batch 256 --batch-ctx 1024 --steps 16 --reps 1 2>&1 | grep -E '"batch"'
st done
