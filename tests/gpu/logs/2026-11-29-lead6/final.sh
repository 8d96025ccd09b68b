#!/bin/bash
# the lead's final check (H200 call): wiretcp8's link rounds on the quiet host first (nothing else
# running), then every gpu_ test of main's PORTABLE build
set -u
C=.carry/check
OUT=${OUT:?}
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
if [ -s .carry/wiretcp8.cmd ]; then
    stamp "link rounds"
    bash -c "$(cat .carry/wiretcp8.cmd)" > "$OUT/w8.log" 2>&1
    stamp "link rounds rc=$?"
fi
rm -rf build && tar -xJf $C/gpu.tar.xz && sh tools/testdata.sh
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
stamp unpacked
timeout 250 build/tandem-tests gpu_ >"$OUT/tests.log" 2>&1; echo "rc=$?" >>"$OUT/tests.log"
stamp "tests: $(grep -c '^ok' "$OUT/tests.log") ok, $(grep -c '^not ok' "$OUT/tests.log") not ok"
grep "^not ok" "$OUT/tests.log" | head
