#!/bin/bash
# gemm8's first device call (issue 23's batch-8 goal): the small-T projection kernel
# (gpu/gemm_small.cuh) checked (gpu_op_gemm_small and the batched-decode tests, both builds), its
# variants timed against cuBLAS per Llama-3-8B projection (gpu/bench/gemm_decode.cu), then dense
# decode at batch 1..16 x 1K with gemm_small=0 (cuBLAS: main's path), 8 and 16, interleaved.
# Carried: .carry/gemm8/{gpu.tar.xz (gpu/bench/check_pack.sh), bench_gpu, gemm_decode, run.sh}.
set -u
C=.carry/gemm8
OUT=${OUT:?}
L=$OUT/l
mkdir -p $L
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$L/stamps.log"; }
rm -rf build && tar -xJf $C/gpu.tar.xz && cp $C/bench_gpu build/ && sh tools/testdata.sh >/dev/null 2>&1
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$L/gpu.txt" 2>&1
stamp unpacked
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1 &
mp=$!
timeout 45 $C/gemm_decode 2,4,8,12,16 4200 small > "$L/gemm_small.md" 2> "$L/gemm_small.err"
stamp "gemm_decode small rc=$?"
cut -c1-400 "$L/gemm_small.md"
timeout ${TTIME:-90} build/tandem-tests ${TESTS:-gpu_op_gemm gpu_tuning gpu_shape_hd128_batched gpu_decode gpu_paged gpu_tls} >"$L/tests.log" 2>&1
echo "rc=$?" >>"$L/tests.log"
stamp "tests: $(grep -c '^ok' "$L/tests.log") ok, $(grep -c '^not ok' "$L/tests.log") not ok, $(grep rc= "$L/tests.log")"
grep -h "^not ok\|gemm_small" "$L"/tests.log | head -20
wait $mp
stamp "mkmodel rc=$?"
bench() { # name env...
    local name=$1; shift
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-190} ] && { stamp "skip $name: past ${BUDGET_S:-190} s"; return; }
    env "$@" timeout 60 build/bench_gpu --model /tmp/l3g --batch ${BATCH:-1,2,4,8,16} --batch-ctx 1024 \
        --steps 32 > "$L/batch_$name.jsonl" 2> "$L/batch_$name.err"
    stamp "bench $name rc=$?"
    grep '"bench":"batch' "$L/batch_$name.jsonl" | cut -c1-120
}
bench cublas TANDEM_GPU_TUNE=gemm_small=0
bench small8 TANDEM_GPU_TUNE=gemm_small=8
bench small16 TANDEM_GPU_TUNE=gemm_small=16
bench cublas2 TANDEM_GPU_TUNE=gemm_small=0
bench small8b TANDEM_GPU_TUNE=gemm_small=8
stamp done
tar -C $OUT -czf $OUT/gemm8a.tgz l && rm -rf $L
