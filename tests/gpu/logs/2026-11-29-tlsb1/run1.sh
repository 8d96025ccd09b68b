#!/bin/bash
# tlsb1's device call (issue 23, AsyncTLS at batch 1): the gpu_tls / gpu_layer_split / gpu_paged
# tests on this branch's pack, then bench_gpu --tls (dense / exact / staggered, the layer alone)
# with main 2b6e9ba's plugin and this branch's, interleaved (main, new, ..., main2, new2). The new
# runs carry BENCH_TLS_AB rounds (tools/bench_gpu/tls.c: every setting in turn in one prefill):
#   base                  the branch's defaults (gate/up L2 request 16 MB, merged CTA merge,
#                         level-2 labels into L2 before the wait)
#   TANDEM_TLS_L2PF=MB    the gate/up rows requested into L2 during a single-token sparse layer
#   TANDEM_TLS_MERGE=0    the CTA merge one head at a time (main's)
#   TANDEM_TLS_L2C=0      no L2 request of a staggered row's level-2 labels before the PDL wait
# then the chain trace (TANDEM_GPU_TUNE=chain_trace=1) at 32K batch 1 with and without the gate/up
# request, and (OFF=1) batch 8 with one offloaded row at 32K in clusters of 2 (form 6) and with
# TANDEM_TLS_CL2=0 (the three kernels and their row cache). Later ones skipped past BUDGET_S.
# Carried: .carry/tlsb1/{gpu.tar.xz (gpu/bench/check_pack.sh), bench_gpu (stripped), main.tar.xz
# (main's bench_gpu, libtandem_cuda.so, libtandem_cuda_test.so), run.sh}.
set -u
C=.carry/tlsb1
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
    timeout ${TTIME:-90} build/tandem-tests ${TESTS:-gpu_tls gpu_layer_split gpu_paged} >"$L/tests.log" 2>&1
    echo "rc=$?" >>"$L/tests.log"
) &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1
wait $tp
stamp "tests: $(grep -c '^ok' "$L/tests.log") ok, $(grep -c '^not ok' "$L/tests.log") not ok, $(grep rc= "$L/tests.log")"
grep -h "^not ok\|FAIL" "$L"/tests*.log | head
AB=${AB:-base;TANDEM_TLS_L2PF=0;TANDEM_TLS_L2PF=8;TANDEM_TLS_L2PF=24;TANDEM_TLS_MERGE=0;TANDEM_TLS_L2C=0;TANDEM_TLS_L2PF=0,TANDEM_TLS_MERGE=0,TANDEM_TLS_L2C=0}
bench() { # name dir contexts batches env...
    local name=$1 dir=$2 ctx=$3 bat=$4; shift 4
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-200} ] && { stamp "skip $name: past ${BUDGET_S:-200} s"; return; }
    env "$@" timeout 100 $dir/bench_gpu --model /tmp/l3g --tls $ctx --tls-batch $bat --tls-budget 1024 \
        --tls-blocks 128 --steps ${STEPS:-24} > "$L/bench_$name.jsonl" 2> "$L/bench_$name.err"
    stamp "bench $name rc=$?"
    grep '"bench":"tls"' "$L/bench_$name.jsonl" | cut -c1-60,160-230,330-420
    grep '"bench":"tls_ab"' "$L/bench_$name.jsonl" | cut -c1-200
}
offb() { # name env...
    local name=$1; shift
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-200} ] && { stamp "skip $name: past ${BUDGET_S:-200} s"; return; }
    local av=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
    env "$@" timeout 90 build/bench_gpu --model /tmp/l3g --tls-offload 32768 --tls-budget 1024 --tls-blocks 128 \
        --steps 16 --tls-host-margin $((av - 16)) --tls-offload-modes one8-vary,one8-vary-stagger \
        > "$L/off_$name.jsonl" 2> "$L/off_$name.err"
    stamp "offload $name rc=$?"
    grep '"bench":"tls_offload"' "$L/off_$name.jsonl" | cut -c1-220
}
CTX=${CTX:-130000,32768}
bench main build-main $CTX 1,8 X=1
bench new build $CTX 1,8 BENCH_TLS_AB="$AB"
bench chain build 32768 1 TANDEM_GPU_TUNE=chain_trace=1
bench chain0 build 32768 1 TANDEM_GPU_TUNE=chain_trace=1 TANDEM_TLS_L2PF=0
[ "${OFF:-1}" = 1 ] && { offb cl2 X=1; offb nocl2 TANDEM_TLS_CL2=0; }
bench main2 build-main $CTX 1,8 X=1
bench new2 build $CTX 1,8 X=1
stamp done
tar -C $OUT -czf $OUT/tlsb1.tgz l && rm -rf $L
