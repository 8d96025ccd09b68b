#!/bin/bash
# tlslat's device call (issue 23): the gpu_tls tests on this branch's pack, then the Llama-3-8B
# decode benchmark (bench_gpu --tls, dense / exact / staggered, and the layer alone) with main's
# plugin and this branch's, and this branch's with a new path switched off (A/B in one call).
# This is the third call's script (run3/, the landed code). The two calls before ran the same
# steps on earlier code, with one more A/B: run1/ (a level-2 threshold path, TANDEM_TLS_THR)
# ran main, new, nothr (TANDEM_TLS_THR=0, 1,8), noearly, nocl2, main2, new2; run2/ (the attention
# one round ahead and 8 level-2 candidates a thread in clusters of 2, TANDEM_TLS_PIPE) ran the
# selection tests again with TANDEM_TLS_PIPE=0, then main, new, nopipe (8), noearly, nocl2,
# main2, new2. Both paths lost and were removed (BENCHMARKS.md).
# Carried: .carry/tlslat/{gpu.tar.xz (gpu/bench/check_pack.sh of this branch), bench_gpu (this
# branch), main.tar.xz (main 90c0121's bench_gpu, libtandem_cuda.so, libtandem_cuda_test.so)}.
set -u
C=.carry/tlslat
OUT=${OUT:?}
L=$OUT/l
mkdir -p $L
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$L/stamps.log"; }
rm -rf build build-main && tar -xJf $C/gpu.tar.xz && cp $C/bench_gpu build/ && sh tools/testdata.sh >/dev/null 2>&1
mkdir -p build-main && tar -xJf $C/main.tar.xz -C build-main && ln -s ../build/rt build-main/rt
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$L/gpu.txt" 2>&1
stamp unpacked
( timeout ${TTIME:-200} build/tandem-tests ${TESTS:-gpu_tls gpu_layer_split} >"$L/tests.log" 2>&1; echo "rc=$?" >>"$L/tests.log" ) &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1
wait $tp
stamp "tests: $(grep -c '^ok' "$L/tests.log") ok, $(grep -c '^not ok' "$L/tests.log") not ok"
grep "^not ok\|FAIL\|rc=" "$L/tests.log" | head
CTX=${CTX:-130000,32768}
bench() { # name dir env... -- batches
    local name=$1 dir=$2 bat=$3; shift 3
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-470} ] && { stamp "skip $name: past ${BUDGET_S:-470} s"; return; }
    env "$@" timeout 100 $dir/bench_gpu --model /tmp/l3g --tls $CTX --tls-batch $bat --tls-budget 1024 \
        --tls-blocks 128 --steps ${STEPS:-24} > "$L/bench_$name.jsonl" 2> "$L/bench_$name.err"
    stamp "bench $name rc=$?"
    grep '"bench":"tls"' "$L/bench_$name.jsonl" | cut -c1-60,160-230,330-420
}
bench main build-main 1,8 X=1
bench new build 1,8 X=1
bench nocl2 build 8 TANDEM_TLS_CL2=0
bench noearly build 1 TANDEM_TLS_EARLY=0
bench main2 build-main 1,8 X=1
bench new2 build 1,8 X=1
for f in $L/bench_new.jsonl; do grep tls_kernels $f | cut -c1-2000; done
stamp done
tar -C $OUT -czf $OUT/tlslat.tgz l && rm -rf $L
