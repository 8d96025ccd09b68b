#!/bin/bash
# the lead's final check: gpu_ tests, the 96K offload with the staggered selection, TLS decode sample
set -u
C=.carry/check
OUT=${OUT:?}
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
rm -rf build && tar -xJf $C/gpu.tar.xz && cp $C/bench_gpu build/ && sh tools/testdata.sh
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
stamp unpacked
( timeout 300 build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log" ) &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$OUT/mkmodel.log" 2>&1
wait $tp
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok" "$OUT/tests.log" | head
timeout 170 build/bench_gpu --model /tmp/l3g --tls-offload 98304 --tls-budget 1024 --tls-blocks 128 --steps 16 \
  --tls-host-margin 8 --tls-offload-modes dense,mixed-vary,mixed-vary-stagger,mixed-stagger > "$OUT/offload.jsonl" 2> "$OUT/offload.err"
stamp "offload rc=$?"
cut -c1-400 "$OUT/offload.jsonl"
timeout 120 build/bench_gpu --model /tmp/l3g --tls 130000,32768 --tls-batch 1,8 --tls-budget 1024 --tls-blocks 128 --steps 24 \
  > "$OUT/tls.jsonl" 2> "$OUT/tls.err"
stamp "tls rc=$?"
grep -v tls_kernels "$OUT/tls.jsonl" | cut -c1-400
