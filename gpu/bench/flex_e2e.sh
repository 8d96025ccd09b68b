#!/bin/bash
# gpu/bench/flex_e2e.sh — issue 8's GPU side in one device call (about 4 minutes on an H200):
# FlexPrefill wired into the CUDA prefill, its tests, and its benchmarks.
#
# Run from the repository root on the GPU machine:  OUT=dir gpu/bench/flex_e2e.sh
# Binaries come prebuilt (gpu/bench/prebuild.sh: the device image lacks our -dev packages).
#   1 machine      nvidia-smi, driver, clocks
#   2 tests        build/tandem-tests gpu_ (every GPU test: the new sparse ones and the old ones)
#      (in the background meanwhile: mkmodel --preset llama3-8b into $MODEL8B, random bf16 weights)
#   3 kernels      flex_gpu_bench on synthetic Llama-3-8B-shaped Q/K/V (cpu/flex_synth.h):
#                  index / block-sparse / dense attention times at 32K, 64K, 128K, gamma 0.8-0.95
#   4 end to end   bench_gpu on the 8B checkpoint: dense TTFT and FlexPrefill TTFT at 32K, 64K,
#                  128K: the defaults (gamma 0.9, tau 0.1: the density a random model gives, whose
#                  heads all come out query-aware), and vertical-slash heads only (tau 0) with
#                  budgets capped at 3% of the prompt per pattern (~9% density on the same
#                  model), with the 4- and 8-warp sparse kernels
#   5 profile      per-op times (TANDEM_GPU_TUNE=profile=1) of one dense and one sparse 32K prefill:
#                  the GEMM time per layer that the composed TTFT uses
# Logs in $OUT: run.log (everything), tests.log, kernels.md, e2e.jsonl, profile.txt.
#   PHASES  subset of "tests kernels e2e vs8 defaults profile" (default: all)
#   KINDS, GAMMAS  flex_gpu_bench's synthetic kinds and gammas (structured,mixed; 0.8,0.9,0.95)
set -u
PHASES=${PHASES:-tests kernels e2e vs8 defaults profile}
KINDS=${KINDS:-structured,mixed}
GAMMAS=${GAMMAS:-0.8,0.9,0.95}
OUT=${OUT:-/tmp/flex-e2e}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
. gpu/bench/session.sh

# shared libraries: CUDA's outside the plugin's rpath, jansson/libcrypto from rt/ (as run_all.sh)
BINS="build/tandem-tests build/bench_gpu build/mkmodel build/flex_gpu_bench build/libtandem_cuda.so build/libtandem_cuda_test.so"
. gpu/bench/libpath.sh
missing
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}"

if [ ! -f "$MODEL8B/config.json" ]; then
    (timeout 200 build/mkmodel --preset llama3-8b --out "$MODEL8B" > "$OUT/mkmodel.log" 2>&1;
     echo "mkmodel rc $?" >> "$OUT/mkmodel.log") &
    MK=$!
else
    MK=
fi

if has tests; then
    stamp "GPU tests"
    TANDEM_TEST_TIMEOUT=120 timeout 150 build/tandem-tests gpu_ > "$OUT/tests.log" 2>&1
    grep -E "^(ok|not ok)|FAIL|worst|max \|diff|density|block-sparse|vs the dense|identical|export:|# unit" "$OUT/tests.log"
fi

if has kernels; then
    stamp "kernels: flex_gpu_bench (synthetic Q/K/V)"
    timeout 110 build/flex_gpu_bench --lib build/libtandem_cuda_test.so --threads "$(nproc)" --reps 3 \
        --kinds "$KINDS" --gammas "$GAMMAS" bench 32768,65536,131072 | tee "$OUT/kernels.md"
fi

if [ -n "$MK" ]; then
    stamp "waiting for mkmodel"
    wait $MK
    cat "$OUT/mkmodel.log"
fi
if [ -f "$MODEL8B/config.json" ]; then
    if has defaults; then
        stamp "end to end: dense and FlexPrefill defaults (Llama-3-8B shape, random weights)"
        timeout 120 build/bench_gpu --model "$MODEL8B" --prefill 32768,65536,131072 --sparse 0.9 \
            --warm once --reps 1 | tee -a "$OUT/e2e.jsonl"
    elif has e2e; then
        stamp "end to end: dense (Llama-3-8B shape, random weights)"
        timeout 60 build/bench_gpu --model "$MODEL8B" --prefill 32768,65536,131072 --warm once \
            --reps 1 | tee -a "$OUT/e2e.jsonl"
    fi
    if has e2e; then
        stamp "end to end: vertical-slash heads only (tau 0), budgets capped at 3% of the prompt"
        timeout 60 build/bench_gpu --model "$MODEL8B" --prefill 32768,65536,131072 --sparse 0.9 \
            --tau 0 --sparse-max 0.03 --sparse-only --warm once --reps 1 | tee -a "$OUT/e2e.jsonl"
    fi
    if has vs8; then
        stamp "the same with the 4- and 8-warp sparse kernel at every length"
        for w in mma4 mma8; do
            TANDEM_GPU_TUNE=sparse_attn=$w timeout 60 build/bench_gpu --model "$MODEL8B" \
                --prefill 32768,65536,131072 --sparse 0.9 --tau 0 --sparse-max 0.03 --sparse-only \
                --warm once --reps 1 | sed "s/^{/{\"switch\":\"sparse_attn=$w\",/" \
                | tee -a "$OUT/e2e.jsonl"
        done
    fi
    if has profile; then
        stamp "profile: dense and sparse (tau 0, 3%) 32K"
        TANDEM_GPU_TUNE=profile=1 timeout 40 build/bench_gpu --model "$MODEL8B" --prefill 32768 --reps 1 \
            --warm once 2>&1 | grep -E "profile|prefill" | tee "$OUT/profile.txt"
        TANDEM_GPU_TUNE=profile=1 timeout 40 build/bench_gpu --model "$MODEL8B" --prefill 32768 --reps 1 \
            --warm once --sparse 0.9 --tau 0 --sparse-max 0.03 --sparse-only 2>&1 \
            | grep -E "profile|prefill" | tee -a "$OUT/profile.txt"
    fi
fi
grep -E "^not ok" "$OUT/tests.log" 2>/dev/null
stamp "done"
