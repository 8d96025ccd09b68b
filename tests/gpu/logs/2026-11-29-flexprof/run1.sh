#!/bin/bash
# flexprof's device call: FlexPrefill per chunk, kernel by kernel (flex_gpu_bench flexchunk)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf build && tar -xJf .carry/flexprof/gpu.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv,noheader > "$OUT/gpu.txt" 2>&1
date -u >> "$OUT/gpu.txt"
LD_LIBRARY_PATH=$PWD/build/rt timeout 300 build/flex_gpu_bench --lib build/libtandem_cuda_test.so --threads 16 --reps 7 \
    --kinds structured --chunk-rows 128,256,512 flexchunk 32768,65536,131072 > "$OUT/flexchunk.md" 2> "$OUT/flexchunk.err"
echo "rc $?" >> "$OUT/flexchunk.err"
cat "$OUT/gpu.txt" "$OUT/flexchunk.err"; tail -c 6000 "$OUT/flexchunk.md"
