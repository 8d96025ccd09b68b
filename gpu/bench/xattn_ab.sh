#!/bin/bash
# gpu/bench/xattn_ab.sh — XAttention's estimate before / after a change, in one device call: the
# new build's tests (XAttention, Tri-shape, FlexPrefill's CSR path), then for each build the three
# methods' kernels side by side (flex_gpu_bench methods: index ms vs dense attention ms) and the
# end-to-end TTFT (bench_gpu --sparse-mode, Llama-3-8B shape, random weights), the builds
# alternating so that both see the same machine.
#   NEW, OLD  build directories (prebuilt binaries as gpu/bench/xattn_e2e.sh wants them); OLD
#             may be empty (only NEW is measured)
#   PHASES    tests kernels e2e (default: all)
#   SIZES     kernel prompt lengths (32768,65536,131072); E2E_SIZES (131072)
#   KINDS     flex_gpu_bench's synthetic kinds (structured); XTHR (0.8), XSTRIDE (8,16),
#             RECENT (1920); E2E_MODES (flexprefill,xattention,trishape)
set -u
OUT=${OUT:-/tmp/xattn-ab}
NEW=${NEW:-build}
OLD=${OLD:-}
PHASES=${PHASES:-tests kernels e2e}
SIZES=${SIZES:-32768,65536,131072}
E2E_SIZES=${E2E_SIZES:-131072}
KINDS=${KINDS:-structured}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
. gpu/bench/session.sh
BINS="$NEW/tandem-tests $NEW/bench_gpu $NEW/mkmodel $NEW/flex_gpu_bench $NEW/libtandem_cuda.so"
. gpu/bench/libpath.sh
missing

MK=
if has e2e && [ ! -f "$MODEL8B/config.json" ]; then
    (timeout 200 $NEW/mkmodel --preset llama3-8b --out "$MODEL8B" > "$OUT/mkmodel.log" 2>&1;
     echo "mkmodel rc $?" >> "$OUT/mkmodel.log") &
    MK=$!
fi

if has tests; then
    stamp "tests ($NEW)"
    BUILD=$NEW TANDEM_TEST_TIMEOUT=150 timeout ${TEST_TIMEOUT:-200} $NEW/tandem-tests gpu_xattn gpu_trishape \
        gpu_flex_index gpu_flex_prefill_reports gpu_flex_prefill_chunked > "$OUT/tests.log" 2>&1
    echo "tests rc $?"
    grep -E "^(ok|not ok)|FAIL|case |max \|diff|# unit" "$OUT/tests.log"
fi

kern() { # build tag
    stamp "kernels: $1 ($2)"
    timeout ${KERNEL_TIMEOUT:-150} $1/flex_gpu_bench --lib $1/libtandem_cuda_test.so --threads "$(nproc)" \
        --reps 3 --kinds "$KINDS" --gammas 0.9 --xthr "${XTHR:-0.8}" --xstride "${XSTRIDE:-8,16}" \
        --recent "${RECENT:-1920}" methods "$SIZES" | tee "$OUT/kernels_$2.md"
}
if has kernels; then
    kern "$NEW" new
    [ -n "$OLD" ] && kern "$OLD" old
fi

if [ -n "$MK" ]; then
    stamp "waiting for mkmodel"
    wait $MK
    cat "$OUT/mkmodel.log"
fi
e2e() { # build tag
    stamp "end to end: $1 ($2)"
    timeout ${E2E_TIMEOUT:-150} $1/bench_gpu --model "$MODEL8B" --prefill "$E2E_SIZES" --warm once --reps 1 \
        --sparse-mode "${E2E_MODES:-flexprefill,xattention,trishape}" --sparse 0.9 \
        --xattention-threshold "${E2E_XTHR:-0.8}" --xattention-stride "${E2E_XSTRIDE:-8}" \
        --tri-recent "${E2E_RECENT:-1920}" | tee -a "$OUT/e2e_$2.jsonl"
}
if has e2e && [ -f "$MODEL8B/config.json" ]; then
    e2e "$NEW" new
    [ -n "$OLD" ] && e2e "$OLD" old
fi
grep -E "^not ok" "$OUT/tests.log" 2>/dev/null
stamp "done"
