#!/bin/bash
# quick two-GPU check: gpu_two_devices, and tandem generate on cuda:0 vs cuda:1 (stories260K)
set -u
C=.carry/check
OUT=${OUT:?}
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
rm -rf build && tar -xJf $C/gpu.tar.xz && sh tools/testdata.sh >/dev/null 2>&1
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
timeout 120 build/tandem-tests gpu_two > "$OUT/tests.log" 2>&1; echo "rc=$?" >> "$OUT/tests.log"
for dv in cuda:0 cuda:1; do
  timeout 60 build/tandem generate --device $dv --prompt "Once upon a time" --max-tokens 48 --temperature 0 > "$OUT/gen.${dv/:/}.txt" 2> "$OUT/gen.${dv/:/}.err"
  echo "rc=$?" >> "$OUT/gen.${dv/:/}.err"
done
cmp "$OUT/gen.cuda0.txt" "$OUT/gen.cuda1.txt" && echo "generate: same text" >> "$OUT/tests.log" || echo "generate: texts differ" >> "$OUT/tests.log"
tail -5 "$OUT/tests.log"
