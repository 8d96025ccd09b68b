#!/bin/bash
# splitk's device call: tests of the key split, the chunk-attention kernel bench, the TBT run
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
rm -rf build && tar -xJf .carry/splitk/gpu.tar.xz
stamp unpacked
export BUILD=build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
( export LD_LIBRARY_PATH=$PWD/build/rt
  timeout 200 build/tandem-tests gpu_op_attention gpu_paged_split gpu_paged_hd128 gpu_flex_prefill_every \
      gpu_xattn_prefill gpu_flex_prefill_chunked gpu_tuning > "$OUT/tests.log" 2>&1; echo "rc=$?" >> "$OUT/tests.log" ) &
tp=$!
( build/mkmodel --out /tmp/l3g --preset llama3-8b > "$OUT/mkmodel.log" 2>&1; echo "mkmodel rc $?" >> "$OUT/mkmodel.log" )
wait $tp
stamp "tests: $(grep -c '^ok' $OUT/tests.log) ok, $(grep -c '^not ok' $OUT/tests.log) not ok"
LD_LIBRARY_PATH=$PWD/build/rt timeout 90 build/flex_gpu_bench --lib build/libtandem_cuda_test.so --reps 7 \
    chunk 32768,65536,131072 > "$OUT/kernel_chunk.md" 2> "$OUT/kernel_chunk.err"
stamp "kernel bench rc $?"
OUT=$OUT/tbt B=build M=/tmp/l3g MODE_TIMEOUT=${MT:-60} WARM=4 MODES="${MODES:-dense xattention flexprefill}" \
    timeout ${TBT_S:-300} bash gpu/bench/tbt_sparse.sh > "$OUT/tbt_run.log" 2>&1
stamp "tbt done"
cat "$OUT/kernel_chunk.md"
cat "$OUT/tbt/tbt.jsonl" 2>/dev/null | cut -c1-700
