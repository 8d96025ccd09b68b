#!/bin/bash
# splitk's second device call: the chunk-attention kernel bench (split vs unsplit)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf build && tar -xJf .carry/splitk/gpu.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
LD_LIBRARY_PATH=$PWD/build/rt timeout 100 build/flex_gpu_bench --lib build/libtandem_cuda_test.so --reps 7 \
    --chunk-rows 128,256,384,640 chunk 32768,65536,131072 > "$OUT/kernel_chunk.md" 2> "$OUT/kernel_chunk.err"
echo "rc $?" >> "$OUT/kernel_chunk.err"
cat "$OUT/kernel_chunk.md" "$OUT/kernel_chunk.err"
