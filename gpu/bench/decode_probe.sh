#!/bin/bash
# gpu/bench/decode_probe.sh — one device call for decode work: the gpu_ tests, then the chain trace
# (chain_trace=1, gpu/chain_trace.cu) and the decode time at each context for each setting, on the
# Llama-3-8B-shaped random checkpoint. Run from the repository root on the GPU machine with the
# binaries of gpu/bench/prebuild.sh in build/ and rt/:
#   OUT=dir [CTXS="1024 8192"] [SWITCHES="default pdl=0+fused=0"] [TESTS=0] [ROUNDS=1]
#   gpu/bench/decode_probe.sh
# A setting joins engine settings (gpu/tuning.h keys, key=value) and bench_gpu options
# (--name=value) with '+', e.g. decode_cluster=0+--logits=pageable; "default" is none. The lab
# plugin's variants (gpu/bench/, make gpu-lab) run with LAB=1 (build/lab/bench_gpu beside
# build/lab/libtandem_cuda.so). ROUNDS: the whole sweep again (units drift: compare settings within
# one round and across rounds).
# Writes $OUT/tests.log and $OUT/probe.txt (one "== ctx C setting" block per run).
set -u
OUT=${OUT:-/tmp/tandem-out}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
BENCH=build/bench_gpu
[ "${LAB:-0}" = 1 ] && BENCH=build/lab/bench_gpu
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/rt:${LD_LIBRARY_PATH-}
if [ ! -f "$MODEL8B/config.json" ]; then
    (build/mkmodel --preset llama3-8b --out "$MODEL8B" > /tmp/mkmodel.log 2>&1) & MK=$!
fi
if [ "${TESTS:-1}" != 0 ]; then
    sh tools/testdata.sh # build/data/: the test data the gpu_ tests read
    TANDEM_TEST_TIMEOUT=60 timeout 200 build/tandem-tests gpu_ > "$OUT/tests.log" 2>&1
    tail -1 "$OUT/tests.log"; grep -E "^not ok" "$OUT/tests.log"
fi
[ -n "${MK-}" ] && wait $MK
for round in $(seq 1 "${ROUNDS:-1}"); do
for ctx in ${CTXS:-1024 8192}; do
    for sw in ${SWITCHES:-default}; do
        echo "== round $round ctx $ctx $sw"
        tune=chain_trace=1 args=()
        IFS=+ read -ra parts <<< "$sw"
        for p in "${parts[@]}"; do
            case "$p" in
            --*=*) args+=("${p%%=*}" "${p#*=}") ;;
            default) ;;
            *) tune="$tune,$p" ;;
            esac
        done
        TANDEM_GPU_TUNE=$tune timeout 100 $BENCH --model "$MODEL8B" \
            --decode-ctx $ctx --steps 64 --reps 1 "${args[@]}" 2>&1 |
            grep -E '"decode"|chain trace|decode step'
    done
done
done 2>&1 | tee "$OUT/probe.txt"
