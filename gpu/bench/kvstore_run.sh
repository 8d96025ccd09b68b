#!/bin/bash
# gpu/bench/kvstore_run.sh — issue 20's GPU session in one call: the KV store's tests (the paged
# contract with the export of held KV and the sparse workspace admitted from the pool, the
# conformance and paged suites on cuda, the export/import, sparse-prefill and AsyncTLS tests that
# read or write the cache), then the Llama-3-8B-shaped prefix-cache TTFT (bench_gpu --prefix:
# cold, device hit, host-tier hit), once with the host-tier loads overlapped with the prefill (the
# default) and once copied before it (load_overlap=0), alternating.
# Run from the repository root on the GPU machine with build/ carried (gpu/bench/prebuild.sh, or
# the smaller set build/tandem-tests, bench_gpu, mkmodel, libtandem_cuda.so, libtandem_cuda_test.so):
#   OUT=dir gpu/bench/kvstore_run.sh
#   PHASES  subset of "tests bench" (default both)   TESTS  test-name filters (TESTS_NOVMM: run
#           again with TANDEM_GPU_NO_VMM=1, the pool as one cudaMalloc)
#   PREFIX  bench_gpu --prefix list (default 4096:3968,8192:8064)   REPS (7)   ROUNDS (1)
# Logs: $OUT/run.log (everything), tests.log, tests_novmm.log, bench.jsonl.
set -u
OUT=${OUT:-/tmp/tandem-out}
MODEL8B=${MODEL8B:-/tmp/llama3-8b}
PHASES=${PHASES:-tests bench}
TESTS=${TESTS:-gpu_paged gpu_kv_export gpu_flex_prefill gpu_xattn_prefill gpu_golden_stories260k_logits_bf16 gpu_golden_tiny_llama2 gpu_tls_engine gpu_tuning _cuda}
TESTS_NOVMM=${TESTS_NOVMM:-gpu_flex_prefill_every gpu_xattn_prefill_every gpu_paged_hd128 gpu_paged_sparse_scattered}
PREFIX=${PREFIX:-4096:3968,8192:8064}
. gpu/bench/session.sh
BINS="build/tandem-tests build/bench_gpu build/mkmodel build/libtandem_cuda.so build/libtandem_cuda_test.so"
. gpu/bench/libpath.sh
missing
if has tests; then
    stamp "tests: $TESTS"
    BUILD=build timeout 300 build/tandem-tests $TESTS > "$OUT/tests.log" 2>&1
    echo "tests exit $?"
    grep -E "^not ok|FAIL|^# " "$OUT/tests.log" | tail -30
    # the pool without VMM (one cudaMalloc): the sparse workspace then comes from cudaMalloc
    stamp "tests without VMM: $TESTS_NOVMM"
    TANDEM_GPU_NO_VMM=1 BUILD=build timeout 120 build/tandem-tests $TESTS_NOVMM > "$OUT/tests_novmm.log" 2>&1
    echo "tests exit $?"
    grep -E "^not ok|FAIL|^# " "$OUT/tests_novmm.log" | tail -10
fi
if has bench; then
    mkmodel8b build
    for r in $(seq 1 "${ROUNDS:-1}"); do
        for tune in load_overlap=1 load_overlap=0; do
            stamp "bench round $r $tune: --prefix $PREFIX"
            TANDEM_GPU_TUNE=$tune timeout 200 build/bench_gpu --model "$MODEL8B" --prefix "$PREFIX" \
                --reps "${REPS:-7}" | sed "s/^{/{\"tune\":\"$tune\",/" | tee -a "$OUT/bench.jsonl"
            echo "bench exit ${PIPESTATUS[0]}"
        done
    done
fi
stamp "done"
