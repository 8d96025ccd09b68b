#!/bin/bash
# gpu/bench/tls_run.sh — issue 23's device session in one call: AsyncTLS's GPU tests, then the
# Llama-3-8B-shaped decode benchmark, dense vs two-level sparse, at each context of $CTX and each
# batch of $BATCH (bench_gpu --tls: one prompt prefilled per context, the batch as forks of it).
# Run from the repository root on the GPU machine with build/ (and rt/) carried from
# gpu/bench/prebuild.sh (or this helper's smaller set: build/tandem-tests, bench_gpu, mkmodel,
# libtandem_cuda.so, libtandem_cuda_test.so):   OUT=dir gpu/bench/tls_run.sh
#   PHASES   subset of "tests bench offload" (default "tests bench")
#   TESTS    the test-name filters (default gpu_tls gpu_paged)
#   CTX      contexts (default 32768,65536,130000)   BATCH  batches (default 1,8)
#   BUDGET   token budget (default 1024)   BLOCKS  block budget (default 128)   STEPS (32)
#   OCTX     the offload phase's context (default 98304; bench_gpu --tls-offload: the largest
#            batches dense / AsyncTLS from the pool / offloaded to host memory / both, and what
#            the offload's transfers cost over PCIe), OSTEPS its timed steps (default 16),
#            OMODES which of them (default dense,pool_sparse,offloaded,mixed,pcie), OEXTRA more
#            bench_gpu options (--tls-host-margin GiB: what the host pool leaves of MemAvailable)
#   B        the build directory (default build: another plugin's, to compare, beside its bench_gpu)
# Logs: $OUT/run.log (everything), tests.log, bench.jsonl, offload.jsonl.
set -u
OUT=${OUT:-/tmp/tandem-out}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
PHASES=${PHASES:-tests bench}
TESTS=${TESTS:-gpu_tls gpu_paged}
CTX=${CTX:-32768,65536,130000}
BATCH=${BATCH:-1,8}
. gpu/bench/session.sh
B=${B:-build}
[ -d "$B/rt" ] && export LD_LIBRARY_PATH=$PWD/$B/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BINS="$B/bench_gpu $B/mkmodel $B/libtandem_cuda.so"
free -g; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null
has tests && BINS="$BINS $B/tandem-tests $B/libtandem_cuda_test.so"
. gpu/bench/libpath.sh
missing
mk=
if [ ! -f "$MODEL8B/config.json" ] && { has bench || has offload; }; then
    stamp "mkmodel llama3-8b -> $MODEL8B (beside the tests)"
    timeout 300 $B/mkmodel --preset llama3-8b --out "$MODEL8B" > "$OUT/mkmodel.log" 2>&1 &
    mk=$!
fi
if has tests; then
    stamp "tests: $TESTS"
    # shellcheck disable=SC2086
    BUILD=$B timeout ${TTIME:-400} $B/tandem-tests $TESTS > "$OUT/tests.log" 2>&1
    echo "tests exit $?"
    tail -30 "$OUT/tests.log"
fi
[ -n "$mk" ] && { wait $mk; echo "mkmodel exit $?"; }
if has bench; then
    mkmodel8b "$B"
    stamp "bench: --tls $CTX --tls-batch $BATCH"
    timeout 420 $B/bench_gpu --model "$MODEL8B" --tls "$CTX" --tls-batch "$BATCH" \
        --tls-budget "${BUDGET:-1024}" --tls-blocks "${BLOCKS:-128}" --steps "${STEPS:-32}" \
        | tee "$OUT/bench.jsonl"
    echo "bench exit ${PIPESTATUS[0]}"
fi
if has offload; then
    mkmodel8b "$B"
    stamp "offload: --tls-offload ${OCTX:-98304}"
    timeout ${OTIME:-400} $B/bench_gpu --model "$MODEL8B" --tls-offload "${OCTX:-98304}" \
        --tls-budget "${BUDGET:-1024}" --tls-blocks "${BLOCKS:-128}" --steps "${OSTEPS:-16}" \
        --tls-offload-modes "${OMODES:-dense,pool_sparse,offloaded,mixed,pcie}" ${OEXTRA:-} \
        | tee "$OUT/offload.jsonl"
    echo "offload exit ${PIPESTATUS[0]}"
    free -g
fi
stamp "done"
