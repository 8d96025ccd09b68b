#!/bin/bash
# gpu/bench/run_all.sh — issue 5's whole device session in one call: the GPU tests, tandem eval on
# stories260K, the hardware ceilings (limits.cu), a Llama-3-8B-shaped random checkpoint, our
# benchmarks, torch SDPA's attention rate and the Hugging Face transformers peer; a table last.
#
# Run from the repository root on the GPU machine:  OUT=dir gpu/bench/run_all.sh
#   PHASES   subset of "tests eval limits gemm bench ablation profile sparse sdpa peer" (default:
#            all, in order)
#   MODEL8B  where the random Llama-3-8B checkpoint goes (default /tmp/llama3-8b; ~16 GB)
#   SWITCHES the ablation's engine settings, one run each (gpu/tuning.h keys; default: the six
#            below)
# Binaries: build/ as carried (built on the development machine with PORTABLE=1) when they load
# here, else built here with make. peer/ holds limits.cu and hf_peer.py (not part of the repo).
# Logs (8 files, the most a device call returns): $OUT/run.log (everything: the profile and the
# sparse prefill too), tests.log, eval.jsonl, limits.txt (with the sustained GEMM shapes),
# bench.jsonl, sdpa.txt, hf_peer.txt, summary.md.
set -u
OUT=${OUT:-/tmp/tandem-out}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
PHASES=${PHASES:-tests eval limits gemm bench ablation profile sparse sdpa peer}
ORIG_LDP=${LD_LIBRARY_PATH-}
. gpu/bench/session.sh

# ---- binaries
BINS="build/tandem build/tandem-tests build/bench_gpu build/mkmodel build/libtandem_cuda.so build/libtandem_cuda_f16.so build/libtandem_cuda_test.so build/libtandem_cuda_f16_test.so"
. gpu/bench/libpath.sh
if [ -n "$(missing)" ] || [ ! -x build/tandem-tests ]; then
    missing
    stamp "building here"
    make -j16 $BINS > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}"

# ---- correctness
if has tests; then
    stamp "GPU tests"
    TANDEM_TEST_TIMEOUT=300 timeout 420 build/tandem-tests gpu_ > "$OUT/tests.log" 2>&1
    grep -E "^(ok|not ok)|FAIL|max \|diff|worst|# unit" "$OUT/tests.log"
fi
if has eval; then
    stamp "tandem eval (stories260K)"
    G=tests/data/golden/stories260K
    # each in the build --gpu-dtype auto takes (stories260K: fp16, tiny-llama2-mha: bf16) and in
    # the other one (gpu/h16.cuh)
    for dt in auto bf16; do
        for args in "--mode prefill" "--mode decode" "--mode kv --kv-from cuda --kv int8" \
                    "--mode kv --kv-from cpu --kv int8" "--mode kv --kv-from cuda --kv int4"; do
            timeout 120 build/tandem eval --model models/stories260K --device cuda \
                --gpu-dtype $dt --golden $G $args | tee -a "$OUT/eval.jsonl"
        done
    done
    for dt in auto fp16; do
        timeout 120 build/tandem eval --model models/tiny-llama2-mha --device cuda \
            --gpu-dtype $dt --golden tests/data/golden/tiny-llama2-mha --mode prefill \
            | tee -a "$OUT/eval.jsonl"
    done
fi

# ---- ceilings
if has limits; then
    stamp "limits"
    L=peer/limits
    [ -x $L ] || { nvcc -O3 -arch=sm_90 -o /tmp/limits peer/limits.cu -lcublas && L=/tmp/limits; }
    timeout 120 $L | tee "$OUT/limits.txt"
fi

if has gemm && [ -x build/gemm_shapes ]; then
    # the prefill projections' shapes, sustained (~1 s each), with the SM clock and power sampled:
    # under a long GEMM the GPU holds its power cap by lowering the clock
    stamp "gemm shapes (sustained) + clocks"
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active \
        --format=csv,noheader -lms 250 > /tmp/tandem-clocks.csv & SMI=$!
    timeout 120 build/gemm_shapes 8192 | tee -a "$OUT/limits.txt"
    kill $SMI 2>/dev/null
    awk -F', ' '$3+0 > 300 {n++; c+=$2; p+=$3} END {if (n) printf "under load: %d samples, mean SM clock %.0f MHz, mean power %.0f W\n", n, c/n, p/n}' \
        /tmp/tandem-clocks.csv | tee -a "$OUT/limits.txt"
fi

# ---- benchmarks (Llama-3-8B shape, random bf16 weights)
if has bench; then
    [ -f "$MODEL8B/config.json" ] || { mkmodel8b build; du -sh "$MODEL8B"; }
    stamp "bench_gpu"
    timeout 400 build/bench_gpu --model "$MODEL8B" --prefill 1024,4096,16384,32768 \
        --decode-ctx 1024,8192 --batch 1,8,32 --export 4096,32768 \
        --attention 1024,4096,16384,32768 --reps 3 --steps 64 | tee "$OUT/bench.jsonl"
    # the same prefills reaching an idle GPU (1 s idle before each), as the limits phase's
    # burst GEMM ceiling is measured: the summary's "after idle" columns
    stamp "bench_gpu --idle 1000"
    timeout 200 build/bench_gpu --model "$MODEL8B" --prefill 1024,4096,16384,32768 --reps 3 \
        --idle 1000 | grep '"prefill"' | tee -a "$OUT/bench.jsonl"
fi
if has ablation && [ -f "$MODEL8B/config.json" ]; then
    # the engine's comparison settings (gpu/tuning.h), one at a time: what each piece buys
    for sw in ${SWITCHES:-attn=mma4 decode_attn=two fused=0 pdl=0 graphs=0 gemv=0}; do
        stamp "ablation $sw"
        TANDEM_GPU_TUNE=$sw timeout 200 build/bench_gpu --model "$MODEL8B" --prefill 4096,32768 \
            --decode-ctx 1024 --batch 8 --reps 3 --steps 32 | sed "s/^{/{\"switch\":\"$sw\",/" \
            | tee -a "$OUT/bench.jsonl"
    done
fi
if has profile && [ -f "$MODEL8B/config.json" ]; then
    # where the time goes: every op timed with events (decode then runs without graphs)
    stamp "profile"
    TANDEM_GPU_TUNE=profile=1 timeout 200 build/bench_gpu --model "$MODEL8B" --prefill 4096,32768 \
        --decode-ctx 1024 --reps 2 --steps 16 2>&1 | grep -E "profile|prefill|decode" \
        | sed "s/^{/{\"switch\":\"profile=1\",/" | tee -a "$OUT/bench.jsonl"
fi
if has sparse && [ -f "$MODEL8B/config.json" ]; then
    # FlexPrefill end to end (issue 8): tau 0 and budgets capped at 3 % force structured-like
    # density on the random-weight model (BENCHMARKS.md says why)
    stamp "sparse prefill end to end"
    timeout 300 build/bench_gpu --model "$MODEL8B" --prefill 32768,65536,131072 --sparse 0.9 \
        --tau 0 --sparse-max 0.03 --warm once --reps 1 # (in run.log: $OUT holds at most 8 files)
fi
if has sdpa; then
    stamp "torch SDPA attention rate"
    LD_LIBRARY_PATH=$ORIG_LDP timeout 120 python3 gpu/bench/sdpa_rate.py | tee "$OUT/sdpa.txt"
fi
if has peer; then
    stamp "transformers peer"
    LD_LIBRARY_PATH=$ORIG_LDP PYTHONUNBUFFERED=1 timeout 400 python3 peer/hf_peer.py llama3-8b \
        | tee "$OUT/hf_peer.txt"
fi

stamp "summary"
if [ -f "$MODEL8B/config.json" ]; then
    LD_LIBRARY_PATH=$ORIG_LDP python3 gpu/bench/summary.py "$OUT" "$MODEL8B" | tee "$OUT/summary.md"
fi
grep -E "^not ok" "$OUT/tests.log" 2>/dev/null
cat "$OUT/eval.jsonl" 2>/dev/null
stamp "done"
