#!/bin/bash
# tlsatt's device call (issue 23, the one-kernel AsyncTLS layer's attention phase and CTA merge):
# the gpu_tls / gpu_layer_split / gpu_paged tests on this branch's pack, then bench_gpu --tls
# (dense / exact / staggered, the layer alone with its phase lines) with main abd5739's plugin
# and this branch's, interleaved (main, new, main2, new2). Later ones skipped past BUDGET_S.
# Carried: .carry/tlsatt/{gpu.tar.xz (gpu/bench/check_pack.sh), bench_gpu (stripped), main.tar.xz
# (main's bench_gpu and libtandem_cuda.so, PORTABLE, stripped), run.sh}.
set -u
C=.carry/tlsatt
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
(
    timeout ${TTIME:-120} build/tandem-tests ${TESTS:-gpu_tls gpu_layer_split gpu_paged} >"$L/tests.log" 2>&1
    echo "rc=$?" >>"$L/tests.log"
) &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1
wait $tp
stamp "tests: $(grep -c '^ok' "$L/tests.log") ok, $(grep -c '^not ok' "$L/tests.log") not ok, $(grep rc= "$L/tests.log")"
grep -h "^not ok\|FAIL" "$L"/tests*.log | head
bench() { # name dir contexts batches env...
    local name=$1 dir=$2 ctx=$3 bat=$4; shift 4
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-260} ] && { stamp "skip $name: past ${BUDGET_S:-260} s"; return; }
    env "$@" timeout 100 $dir/bench_gpu --model /tmp/l3g --tls $ctx --tls-batch $bat --tls-budget 1024 \
        --tls-blocks 128 --steps ${STEPS:-24} > "$L/bench_$name.jsonl" 2> "$L/bench_$name.err"
    stamp "bench $name rc=$?"
    grep '"bench":"tls"' "$L/bench_$name.jsonl" | cut -c1-60,160-230,330-420
}
CTX=${CTX:-130000,32768}
bench main build-main $CTX 1,8 X=1
bench new build $CTX 1,8 X=1
bench main2 build-main $CTX 1,8 X=1
bench new2 build $CTX 1,8 X=1
stamp done
tar -C $OUT -czf $OUT/tlsatt.tgz l && rm -rf $L
