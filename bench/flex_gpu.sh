#!/bin/bash
# bench/flex_gpu.sh — the FlexPrefill GPU path on a lent GPU machine, in one command (issue 8).
#
#   bench/flex_gpu.sh [STEP ...]   from the repository root (default: all steps; the build
#                                  always runs); results go to $OUT (default /tmp/flex_out)
#
# The whole run is planned to end within FLEX_DEADLINE seconds (570: one device command may run
# 600): each step gets at most its own cap and what is left; a step that cannot start in time
# says so.
# Needs: the binaries gpu/bench/prebuild.sh builds on the development machine (build/
# libtandem_cuda.so, flex_gpu_bench, tandem-tests: the device image lacks the daemon's -dev
# packages, and the plugin's block-sparse attention is the engine's prefill kernel, so the
# FlexPrefill kernels no longer build alone), python3 with torch + triton, and the official
# FlexPrefill module at .gpuwork-flex/flex_prefill_attention.py (a git-ignored copy of
# bytedance/FlexPrefill:flex_prefill/ops/flex_prefill_attention.py; never committed) for steps 4
# and 6. Steps, each bounded by a timeout so that one failure leaves the others' results:
#   1 build      checks the prebuilt binaries load (ldd), -Xptxas -v is in prebuild's log
#   2 tests      the gpu_flex tests (tests/gpu/test_flex_gpu.c: GPU vs CPU sets, bf16 attention
#                vs the float reference; tests/gpu/test_flex_prefill.c: the wired prefill)
#   3 check      GPU index == CPU index on Llama-3-8B-shaped prompts, 4K-16K (per-head Jaccard)
#   4 official   the official get_active_blocks on the same bf16 Q/K: per-head Jaccard of ours
#   5 bench      index / sparse / dense attention times at 32K, 64K, 128K, gamma 0.8/0.9/0.95
#   6 official   the official code's times and torch SDPA (dense causal) at 32K, 64K, 128K
# Files in $OUT (at most 8): build.log tests.log check.md official_jaccard.md bench.md
# official_time.md summary.md
set -u
OUT=${OUT:-/tmp/flex_out}
WORK=${FLEX_WORK:-/tmp/flexwork}
B=build
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
T=$(nproc)
DEADLINE=${FLEX_DEADLINE:-570}
STEPS=" ${*:-2 3 4 5 6} "
step() { echo "== $*" | tee -a "$OUT/summary.md"; }
want() { case "$STEPS" in *" $1 "*) return 0 ;; esac; return 1; }
# seconds for a step: min(cap, time left before the deadline - 10), or 0 when under 20 remain
budget() {
    local left=$((DEADLINE - SECONDS - 10))
    [ "$left" -lt 20 ] && { echo 0; return; }
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
have_official() { [ -f .gpuwork-flex/flex_prefill_attention.py ] || [ -f .gpuwork/flex_prefill_attention.py ] || [ -n "${FLEX_OFFICIAL:-}" ]; }
late() { echo "skipped: not enough time left (${SECONDS}s of $DEADLINE used)" | tee -a "$OUT/summary.md"; }

step "1 build ($(date -u +%FT%TZ))"
{
    nvidia-smi -L
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} >"$OUT/build.log" 2>&1
ok=1
for f in $B/libtandem_cuda.so $B/libtandem_cuda_test.so $B/flex_gpu_bench $B/tandem-tests; do
    [ -f "$f" ] || { echo "missing $f: run gpu/bench/prebuild.sh on the development machine"; ok=0; }
done
if [ -d rt ] && ldd $B/flex_gpu_bench $B/tandem-tests 2>&1 | grep -q "libjansson.*not found\|libcrypto.*not found"; then
    export LD_LIBRARY_PATH="$PWD/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
ldd $B/libtandem_cuda.so $B/flex_gpu_bench $B/tandem-tests 2>&1 | grep "not found" >>"$OUT/build.log" &&
    ok=0
step "build: $([ $ok = 1 ] && echo ok || echo FAILED, see build.log)"

if want 2; then
    step "2 tests"
    t=$(budget 90)
    if [ "$t" -gt 0 ]; then
        BUILD=$B timeout "$t" "$B/tandem-tests" gpu_flex >"$OUT/tests.log" 2>&1
        tail -1 "$OUT/tests.log" | tee -a "$OUT/summary.md"
    else late; fi
fi

if want 3 || want 4; then
    step "3 check: GPU index vs CPU index"
    t=$(budget 120)
    if [ "$t" -gt 0 ]; then
        timeout "$t" "$B/flex_gpu_bench" --lib "$B/libtandem_cuda_test.so" --threads "$T" check \
            "$WORK/cmp" >"$OUT/check.md" 2>"$WORK/check.err"
        echo "rc $?; heads that differ: $(wc -l <"$WORK/check.err")" | tee -a "$OUT/summary.md"
        head -40 "$WORK/check.err" >>"$OUT/check.md"
    else late; fi
fi

if want 4; then
    step "4 official get_active_blocks vs ours"
    t=$(budget 120)
    if ! have_official; then
        echo "skipped: .gpuwork-flex/flex_prefill_attention.py missing" | tee -a "$OUT/summary.md"
    elif [ "$t" -gt 0 ]; then
        timeout "$t" python3 bench/flex_official.py jaccard "$WORK/cmp" >"$OUT/official_jaccard.md" 2>&1
        grep -E "^mean over" "$OUT/official_jaccard.md" | tee -a "$OUT/summary.md"
    else late; fi
fi

if want 5; then
    step "5 bench: ours at 32K / 64K / 128K"
    t=$(budget 200)
    if [ "$t" -gt 0 ]; then
        timeout "$t" "$B/flex_gpu_bench" --lib "$B/libtandem_cuda_test.so" --threads "$T" bench \
            32768,65536,131072 >"$OUT/bench.md" 2>&1
        echo "rc $?" | tee -a "$OUT/summary.md"
    else late; fi
fi

if want 6; then
    step "6 official timings and dense SDPA"
    if ! have_official; then
        echo "skipped: .gpuwork-flex/flex_prefill_attention.py missing" | tee -a "$OUT/summary.md"
    else
        dirs=""
        for n in 32768 65536 131072; do
            "$B/flex_gpu_bench" --threads "$T" dump "$WORK/dump$n" $n structured && dirs="$dirs $WORK/dump$n"
        done
        t=$(budget 200)
        if [ "$t" -gt 0 ]; then
            timeout "$t" python3 bench/flex_official.py time $dirs >"$OUT/official_time.md" 2>&1
            echo "rc $?" | tee -a "$OUT/summary.md"
        else late; fi
    fi
fi
step "done ($(date -u +%FT%TZ))"
