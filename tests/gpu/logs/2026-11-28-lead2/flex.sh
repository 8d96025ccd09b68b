#!/bin/bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf build && tar -xJf .carry/lead/gpu.tar.xz
build/mkmodel --out /tmp/l3g --preset llama3-8b > "$OUT/mkmodel.log" 2>&1
OUT=$OUT/tbt B=build M=/tmp/l3g MODE_TIMEOUT=120 WARM=4 MODES="flexprefill" \
    timeout 300 bash gpu/bench/tbt_sparse.sh > "$OUT/tbt_run.log" 2>&1
cat "$OUT/tbt/tbt.jsonl"; cat "$OUT/tbt/stamps.log"
