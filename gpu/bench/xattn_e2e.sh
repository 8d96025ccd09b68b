#!/bin/bash
# gpu/bench/xattn_e2e.sh — issue 22's GPU side in one device call: the tests of XAttention's and
# Tri-shape's GPU paths, `tandem sparse-index --device cuda` against the recorded official
# XAttention outputs, the three methods' kernels side by side on synthetic Llama-3-8B-shaped Q/K/V
# (flex_gpu_bench methods), and end to end on `mkmodel --preset llama3-8b` (random weights):
# dense, FlexPrefill, XAttention and Tri-shape TTFT, density and the last position's KL vs dense.
# Binaries prebuilt (gpu/bench/prebuild.sh, or the targets it names) in build/.
#   PHASES  tests, index, kernels, e2e (default: all)
#   SIZES   kernel and end-to-end prompt lengths (32768,65536,131072)
#   KINDS   flex_gpu_bench's synthetic kinds (structured,mixed)
set -u
OUT=${OUT:-/tmp/xattn-out}
PHASES=${PHASES:-tests index kernels e2e}
SIZES=${SIZES:-32768,65536,131072}
KINDS=${KINDS:-structured,mixed}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
. gpu/bench/session.sh
BINS="build/tandem-tests build/tandem build/bench_gpu build/mkmodel build/flex_gpu_bench build/libtandem_cuda.so build/libtandem_cuda_test.so"
. gpu/bench/libpath.sh
missing

MK=
if has e2e && [ ! -f "$MODEL8B/config.json" ]; then
    (timeout 200 build/mkmodel --preset llama3-8b --out "$MODEL8B" > "$OUT/mkmodel.log" 2>&1;
     echo "mkmodel rc $?" >> "$OUT/mkmodel.log") &
    MK=$!
fi

if has tests; then
    stamp "GPU tests (xattn, trishape, flex)"
    # (the bf16 plugin's tests: the fp16 build is not carried)
    TANDEM_TEST_TIMEOUT=150 timeout 200 build/tandem-tests gpu_xattn gpu_trishape gpu_flex_index \
        gpu_flex_attention gpu_flex_cut gpu_flex_prefill_reports gpu_flex_prefill_kv_export \
        gpu_flex_prefill_last_row gpu_paged_sparse gpu_paged_hd128 > "$OUT/tests.log" 2>&1
    grep -E "^(ok|not ok)|FAIL|case |max \|diff|density|# unit" "$OUT/tests.log"
fi

if has index; then
    stamp "tandem sparse-index --device cuda vs the recorded official xattn_estimate"
    DEVICE=cuda BUILD=build timeout 200 sh tests/e2e/sparse_index.sh 2>&1 | tee "$OUT/sparse_index.log"
fi

if has kernels; then
    stamp "kernels: flex_gpu_bench methods (synthetic Q/K/V)"
    timeout ${KERNEL_TIMEOUT:-240} build/flex_gpu_bench --lib build/libtandem_cuda_test.so --threads "$(nproc)" --reps 3 \
        --kinds "$KINDS" --gammas 0.9 --xthr "${XTHR:-0.8,0.9,0.95}" --xstride "${XSTRIDE:-8,16}" \
        --recent "${RECENT:-1920,8192}" methods "$SIZES" | tee "$OUT/kernels.md"
fi

if [ -n "$MK" ]; then
    stamp "waiting for mkmodel"
    wait $MK
    cat "$OUT/mkmodel.log"
fi
if has e2e && [ -f "$MODEL8B/config.json" ]; then
    stamp "end to end: dense, FlexPrefill (gamma 0.9 tau 0.1 min_budget 1024), XAttention (stride 8), Tri-shape (start 128)"
    timeout ${E2E_TIMEOUT:-300} build/bench_gpu --model "$MODEL8B" --prefill "$SIZES" --warm once --reps 1 \
        --sparse-mode flexprefill,xattention,trishape --sparse 0.9 \
        --xattention-threshold "${E2E_XTHR:-0.8,0.5}" --xattention-stride 8 \
        --tri-recent "${E2E_RECENT:-1920}" | tee -a "$OUT/e2e.jsonl"
fi
grep -E "^not ok" "$OUT/tests.log" 2>/dev/null
stamp "done"
