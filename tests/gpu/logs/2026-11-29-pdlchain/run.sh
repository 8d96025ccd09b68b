#!/bin/bash
# pdlchain's device call: RMSNorm and the rope/KV write in the decode chain's PDL (gpu/kernels.cu).
# Tests of this branch's pack first (mkmodel's Llama-3-8B-shaped weights written meanwhile), then
# interleaved A/B: main's bench_gpu + plugin (bm/) against this branch's (build/), and two
# variants of this branch's plugin with gate/up + SwiGLU on 8 warps per tile (gu8x2: 2 chunks,
# gu8x4: 4 chunks per lane and round; the default is 4 warps x 2), each in its own folder beside
# a copy of bench_gpu (the plugin is found beside the executable).
# Carried: .carry/pdlchain/{gpu.tar.xz (gpu/bench/check_pack.sh), ex.tar.xz, run.sh}.
set -u
C=.carry/pdlchain
OUT=${OUT:?}
L=$OUT/l
mkdir -p $L
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$L/stamps.log"; }
rm -rf build ex && tar -xJf $C/gpu.tar.xz && mkdir ex && tar -C ex -xJf $C/ex.tar.xz && cp ex/bench_gpu build/
sh tools/testdata.sh >/dev/null 2>&1
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$L/gpu.txt" 2>&1
for v in gu8x2 gu8x4; do
    mkdir -p b_$v
    for f in build/*; do ln -s $PWD/$f b_$v/; done
    rm b_$v/bench_gpu b_$v/libtandem_cuda.so b_$v/libtandem_cuda_test.so
    cp build/bench_gpu build/libtandem_cuda_test.so b_$v/ && cp ex/alt/$v.so b_$v/libtandem_cuda.so
done
stamp unpacked
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1 &
mp=$!
timeout 45 build/tandem-tests batched gpu_op_rmsnorm gpu_op_rope gpu_op_gemm gpu_decode_argmax_batch3 >"$L/tests1.log" 2>&1
echo "rc=$?" >>"$L/tests1.log"
stamp "tests1: $(grep -c '^ok' "$L/tests1.log") ok, $(grep -c '^not ok' "$L/tests1.log") not ok, $(grep rc= "$L/tests1.log")"
grep -h "^not ok\|batched vs\|differ" "$L"/tests1.log | head -20
tl=$((100 - ($(date +%s) - t0))); [ $tl -lt 20 ] && tl=20
timeout $tl build/tandem-tests gpu_shape_hd128_gqa gpu_shape_hd128_no gpu_shape_hd128_unf gpu_shape_hd128_mma8 gpu_shape_hd128_wgmma gpu_shape_q gpu_shape_r gpu_shape_t gpu_shape_hd128_big gpu_paged gpu_layer gpu_decode gpu_tls gpu_xattn_prefill gpu_flex >"$L/tests2.log" 2>&1
echo "rc=$?" >>"$L/tests2.log"
stamp "tests2: $(grep -c '^ok' "$L/tests2.log") ok, $(grep -c '^not ok' "$L/tests2.log") not ok, $(grep rc= "$L/tests2.log")"
grep -h "^not ok" "$L"/tests2.log | head -20
wait $mp
stamp "mkmodel rc=$?"
left() { [ $(($(date +%s) - t0)) -le ${BUDGET_S:-228} ] || { stamp "skip $1: past ${BUDGET_S:-228} s"; return 1; }; }
batch() { # name dir
    left batch_$1 || return
    timeout 25 $2/bench_gpu --model /tmp/l3g --batch 1,2,4,8 --batch-ctx 1024 --steps 32 \
        > "$L/batch_$1.jsonl" 2> "$L/batch_$1.err"
    stamp "batch $1 rc=$?"
    grep '"bench":"batch' "$L/batch_$1.jsonl" | cut -c1-100
}
tls() { # name dir
    left tls_$1 || return
    timeout 30 $2/bench_gpu --model /tmp/l3g --tls 32768 --tls-batch 8 --tls-budget 1024 \
        --tls-blocks 128 --steps 24 > "$L/tls_$1.jsonl" 2> "$L/tls_$1.err"
    stamp "tls $1 rc=$?"
    grep '"bench":"tls"' "$L/tls_$1.jsonl" | cut -c1-60,118-150,340-400
}
alt_tests() { # variant
    left tests_$1 || return
    BUILD=b_$1 timeout 20 build/tandem-tests gpu_op_gemm_swiglu gpu_shape_hd128_batched_decode >"$L/tests_$1.log" 2>&1
    echo "rc=$?" >>"$L/tests_$1.log"
    stamp "tests $1: $(grep -c '^ok' "$L/tests_$1.log") ok, $(grep -c '^not ok' "$L/tests_$1.log") not ok, $(grep rc= "$L/tests_$1.log")"
}
batch main ex/bm
batch pdl build
batch gu8x2 b_gu8x2
batch gu8x4 b_gu8x4
tls main ex/bm
tls pdl build
batch main2 ex/bm
batch pdl2 build
batch gu8x2b b_gu8x2
alt_tests gu8x2
tls main2 ex/bm
tls pdl2 build
alt_tests gu8x4
tls gu8x2 b_gu8x2
stamp done
tar -C $OUT -czf $OUT/pdlchain.tgz l && rm -rf $L
