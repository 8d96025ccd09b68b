#!/bin/bash
# tlslat2's device call (issue 23): the staggered rows' next-step launch (tls_next_k) off the
# critical path. The gpu_tls / gpu_layer_split / gpu_paged tests on this branch's pack (its
# default: TANDEM_TLS_NEXT=side, TANDEM_TLS_NEXT_PER=2), the staggered-selection tests again in
# the two other combinations, then the Llama-3-8B decode benchmark (bench_gpu --tls, dense /
# exact / staggered, and the layer alone) with main add9a1c's plugin and this branch's, and this
# branch's with the A/B variables set, interleaved (main, new, ..., main2, new2):
#   end2    TANDEM_TLS_NEXT=end2 TANDEM_TLS_NEXT_PER=1: main's launch after the layers twice
#           (the second writes the same sets): end2 - end = what the launch costs in the step
#   endper2 TANDEM_TLS_NEXT=end  with the new kernel (two CTAs per SM): its speed alone
#   side1   TANDEM_TLS_NEXT_PER=1: the side stream with main's kernel
#   end     TANDEM_TLS_NEXT=end  TANDEM_TLS_NEXT_PER=1: main's form from this build
#   sidehi  TANDEM_TLS_NEXT_PRIO=hi: the side stream at the highest priority
# (later ones skipped past BUDGET_S seconds)
# Carried: .carry/tlslat2/{gpu.tar.xz (gpu/bench/check_pack.sh of this branch), bench_gpu (this
# branch, stripped), main.tar.xz (main add9a1c's bench_gpu, libtandem_cuda.so,
# libtandem_cuda_test.so), run.sh}.
set -u
C=.carry/tlslat2
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
    TANDEM_TLS_NEXT=end timeout 40 build/tandem-tests gpu_tls_stagger >"$L/tests_end.log" 2>&1
    echo "rc=$?" >>"$L/tests_end.log"
    TANDEM_TLS_NEXT_PER=1 timeout 40 build/tandem-tests gpu_tls_stagger >"$L/tests_side1.log" 2>&1
    echo "rc=$?" >>"$L/tests_side1.log"
) &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1
wait $tp
for f in tests tests_end tests_side1; do
    stamp "$f: $(grep -c '^ok' "$L/$f.log") ok, $(grep -c '^not ok' "$L/$f.log") not ok, $(grep rc= "$L/$f.log")"
done
grep -h "^not ok\|FAIL" "$L"/tests*.log | head
CTX=${CTX:-130000,32768}
bench() { # name dir batches env...
    local name=$1 dir=$2 bat=$3; shift 3
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-185} ] && { stamp "skip $name: past ${BUDGET_S:-185} s"; return; }
    env "$@" timeout 100 $dir/bench_gpu --model /tmp/l3g --tls $CTX --tls-batch $bat --tls-budget 1024 \
        --tls-blocks 128 --steps ${STEPS:-24} > "$L/bench_$name.jsonl" 2> "$L/bench_$name.err"
    stamp "bench $name rc=$?"
    grep '"bench":"tls"' "$L/bench_$name.jsonl" | cut -c1-60,160-230,330-420
}
bench main build-main 1,8 X=1
bench new build 1,8 X=1
bench end2 build 1,8 TANDEM_TLS_NEXT=end2 TANDEM_TLS_NEXT_PER=1
bench endper2 build 1,8 TANDEM_TLS_NEXT=end
bench side1 build 1,8 TANDEM_TLS_NEXT_PER=1
bench main2 build-main 1,8 X=1
bench new2 build 1,8 X=1
bench end build 1,8 TANDEM_TLS_NEXT=end TANDEM_TLS_NEXT_PER=1
bench sidehi build 1,8 TANDEM_TLS_NEXT_PRIO=hi
stamp done
tar -C $OUT -czf $OUT/tlslat2.tgz l && rm -rf $L
