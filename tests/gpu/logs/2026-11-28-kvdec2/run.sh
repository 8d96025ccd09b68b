#!/bin/bash
# kvdec device call (2026-11-28, issue 20): the GPU tests of accel_decode_argmax and of the batched
# decode path it touches (both builds), then the batch curve with full logits ("batch") and with the
# greedy tokens picked on the device ("batch_argmax") alternately, size by size, in one process.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/bench.log") 2>&1
t0=$(date +%s); st() { echo "== [$(($(date +%s)-t0))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; date -u
rm -rf build && tar -xJf .carry/kvdec/new.tar.xz
export LD_LIBRARY_PATH=$PWD/build/rt:${LD_LIBRARY_PATH-} BUILD=build
(build/mkmodel --preset llama3-8b --out /tmp/l3 > /tmp/mk.log 2>&1; echo "mkmodel rc $?") &
MK=$!
st "GPU tests"
TANDEM_TEST_TIMEOUT=90 timeout 150 build/tandem-tests gpu_argmax gpu_decode_argmax gpu_tuning \
    gpu_shape_hd128_big_batch gpu_shape_hd128_batched conf_decode_argmax_cuda conf_batched_decode_cuda \
    > "$OUT/tests.log" 2>&1
echo "tests rc $?"; tail -1 "$OUT/tests.log"; grep -E "^not ok|FAIL" "$OUT/tests.log" | head -20
grep -E "decode_argmax|batch of|batched vs|on cuda" "$OUT/tests.log"
wait $MK; tail -2 /tmp/mk.log
B() { echo "-- tune '${1}' ${*:2}"; TANDEM_GPU_TUNE=$1 build/bench_gpu --model /tmp/l3 "${@:2}" 2>&1 | grep -E '"decode|"batch|bench_gpu|error' | sed "s/^/[${1:-default}] /"; }
st "round 1"
B "" --decode-ctx 1024,8192 --batch 32,64,128,256 --batch-ctx 1024 --steps 32 --argmax --reps 1
st "round 2 at 256"
B "" --batch 256 --batch-ctx 1024 --steps 32 --argmax --reps 1
st "argmax=0 at 256 (declined: every row copied, the host's argmax inside the timing)"
B argmax=0 --batch 256 --batch-ctx 1024 --steps 32 --argmax --reps 1
st done
