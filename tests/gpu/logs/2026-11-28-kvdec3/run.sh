#!/bin/bash
# kvdec3 device call (2026-11-28, issue 20): the GPU tests of the tuned GEMMs (every cuBLASLt
# candidate against a float64 reference; batched vs single decode with gemm_tune=force / 0 / the
# default), then the decode projections alone (gemm_decode: cublasGemmEx vs the heuristic's
# candidates at T = 32..256, and a sweep of every algorithm id's configurations at T = 256), then
# the batch curve with gemm_tune on (log: each pick printed) and off, alternately, with the SM
# clock and power sampled.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
t0=$(date +%s); st() { echo "== [$(($(date +%s)-t0))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv; date -u
rm -rf build && tar -xJf .carry/kvdec/new.tar.xz
export LD_LIBRARY_PATH=$PWD/build/rt:${LD_LIBRARY_PATH-} BUILD=build
(build/mkmodel --preset llama3-8b --out /tmp/l3 > /tmp/mk.log 2>&1; echo "mkmodel rc $?") &
MK=$!
st "GPU tests"
TANDEM_TEST_TIMEOUT=90 timeout 170 build/tandem-tests gpu_op_gemm gpu_tuning gpu_shape gpu_decode gpu_paged \
    gpu_golden gpu_argmax conf_batched_decode_cuda conf_decode_argmax_cuda > "$OUT/tests.log" 2>&1
echo "tests rc $?"; tail -1 "$OUT/tests.log"; grep -E "^not ok|FAIL" "$OUT/tests.log" | head -20
grep -E "cuBLASLt candidates|batch of|batched vs" "$OUT/tests.log"
st "gemm_decode"
timeout 120 build/gemm_decode 32,64,128,256 4200 256 > "$OUT/gemm_decode.md" 2>&1; echo "gemm_decode rc $?"
cat "$OUT/gemm_decode.md"
wait $MK; tail -2 /tmp/mk.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
SMI=$!
B() { echo "-- tune '${1}' ${*:2}"; TANDEM_GPU_TUNE=$1 build/bench_gpu --model /tmp/l3 "${@:2}" 2>&1 | grep -E '"decode|"batch|bench_gpu|error|gemm_tune' | sed "s/^/[${1:-default}] /"; }
st "round 1, gemm_tune=log"
B gemm_tune=log --decode-ctx 1024,8192 --batch 32,64,128,256 --batch-ctx 1024 --steps 32 --argmax --reps 1
st "round 1, gemm_tune=0"
B gemm_tune=0 --decode-ctx 1024,8192 --batch 32,64,128,256 --batch-ctx 1024 --steps 32 --argmax --reps 1
if [ $(($(date +%s)-t0)) -lt 200 ]; then
    st "round 2 at 256"
    B gemm_tune=1 --batch 256 --batch-ctx 1024 --steps 32 --argmax --reps 1
    B gemm_tune=0 --batch 256 --batch-ctx 1024 --steps 32 --argmax --reps 1
fi
kill $SMI
st done
