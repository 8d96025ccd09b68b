#!/bin/bash
# gemm8's second device call: the small-T projection kernel with its per-shape variant and the
# gate/up + SwiGLU fusion (gpu/gemm_small.cuh). Tests (gpu_op_gemm* incl. gemm_small / gemm_swiglu,
# the batched-decode, decode, paged and AsyncTLS tests), the kernel's variants per Llama-3-8B
# projection (gpu/bench/gemm_decode.cu), then A/B in one build, interleaved: gemm_small=0 (cuBLAS
# for every T > 1: main's path) against the default gemm_small=8 (and 16): dense decode at batch
# 1..16 x 1K, and AsyncTLS (bench_gpu --tls 32768,130000 --tls-batch 1,8: issue 23's ratio);
# profile=1 splits of batch 8 last, if time is left.
# Carried: .carry/gemm8/{gpu.tar.xz (gpu/bench/check_pack.sh), bench_gpu, gemm_decode, run2.sh}.
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
timeout 45 $C/gemm_decode 2,4,8,16 4200 small > "$L/gemm_small.md" 2> "$L/gemm_small.err"
stamp "gemm_decode small rc=$?"
cut -c1-420 "$L/gemm_small.md"
timeout ${TTIME:-85} build/tandem-tests ${TESTS:-gpu_op_gemm gpu_tuning gpu_shape_hd128_batched gpu_decode gpu_paged gpu_tls} >"$L/tests.log" 2>&1
echo "rc=$?" >>"$L/tests.log"
stamp "tests: $(grep -c '^ok' "$L/tests.log") ok, $(grep -c '^not ok' "$L/tests.log") not ok, $(grep rc= "$L/tests.log")"
grep -h "^not ok\|gemm_s\|batched vs" "$L"/tests.log | head -20
wait $mp
stamp "mkmodel rc=$?"
left() { [ $(($(date +%s) - t0)) -le ${BUDGET_S:-215} ] || { stamp "skip $1: past ${BUDGET_S:-215} s"; return 1; }; }
batch() { # name env...
    local name=$1; shift
    left $name || return
    env "$@" timeout 40 build/bench_gpu --model /tmp/l3g --batch 1,2,4,8,16 --batch-ctx 1024 \
        --steps 32 > "$L/batch_$name.jsonl" 2> "$L/batch_$name.err"
    stamp "batch $name rc=$?"
    grep '"bench":"batch' "$L/batch_$name.jsonl" | cut -c1-100
}
tls() { # name env...
    local name=$1; shift
    left $name || return
    env "$@" timeout 60 build/bench_gpu --model /tmp/l3g --tls 32768,130000 --tls-batch 1,8 --tls-budget 1024 \
        --tls-blocks 128 --steps 24 > "$L/tls_$name.jsonl" 2> "$L/tls_$name.err"
    stamp "tls $name rc=$?"
    grep '"bench":"tls"' "$L/tls_$name.jsonl" | cut -c1-60,118-150,340-400
}
batch cublas TANDEM_GPU_TUNE=gemm_small=0
batch small8 TANDEM_GPU_TUNE=gemm_small=8
tls cublas TANDEM_GPU_TUNE=gemm_small=0
tls small8 TANDEM_GPU_TUNE=gemm_small=8
batch small16 TANDEM_GPU_TUNE=gemm_small=16
batch cublas2 TANDEM_GPU_TUNE=gemm_small=0
batch small8b TANDEM_GPU_TUNE=gemm_small=8
tls cublas2 TANDEM_GPU_TUNE=gemm_small=0
tls small8b TANDEM_GPU_TUNE=gemm_small=8
prof() { # name env...
    local name=$1; shift
    left prof_$name || return
    env "$@" timeout 30 build/bench_gpu --model /tmp/l3g --batch 8 --batch-ctx 1024 --steps 16 \
        > "$L/prof_$name.jsonl" 2> "$L/prof_$name.err"
    stamp "prof $name rc=$?"
}
prof cublas TANDEM_GPU_TUNE=gemm_small=0,profile=1
prof small8 TANDEM_GPU_TUNE=gemm_small=8,profile=1
stamp done
tar -C $OUT -czf $OUT/gemm8b.tgz l && rm -rf $L
