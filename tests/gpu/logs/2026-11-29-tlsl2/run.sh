#!/bin/bash
# tlsl2's device call (2026-11-29): level 2 of the one-kernel AsyncTLS layer, its scoring and its
# top-k (issue 23). Tests gpu_tls / gpu_layer_split / gpu_paged on this branch's pack with every
# TANDEM_TLS_L2 bit on (the default), then the selection tests again with bits 8 + 16 only (the
# gather with the old histograms and scoring); then bench_gpu --tls with main's plugin and this
# branch's under TANDEM_TLS_L2 settings, interleaved. Later ones skipped past BUDGET_S.
# TANDEM_TLS_L2 bits (gpu/tls_kernels.cu): 1 label words in one 16-byte load, 2 eight candidates
# a thread, 4 codes to floats without I2F, 8 the top-k's gather of a small bucket, 16 the
# group-averaged query before level 1, 32 the histograms without __match_any_sync.
# Carried: .carry/tlsl2/{gpu.tar.xz (gpu/bench/check_pack.sh), bench_gpu (stripped),
# main.tar.xz (main's bench_gpu, libtandem_cuda.so, libtandem_cuda_test.so), run.sh}.
set -u
C=.carry/tlsl2
OUT=${OUT:?}
L=/tmp/tlsl2-l/l
rm -rf $L && mkdir -p $L
save() { tar -C /tmp/tlsl2-l -czf $OUT/tlsl2.tgz.part l && mv $OUT/tlsl2.tgz.part $OUT/tlsl2.tgz; }
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$L/stamps.log"; }
rm -rf build build-main && tar -xJf $C/gpu.tar.xz && cp $C/bench_gpu build/ && sh tools/testdata.sh >/dev/null 2>&1
mkdir -p build-main && tar -xJf $C/main.tar.xz -C build-main && ln -s ../build/rt build-main/rt
export BUILD=build LD_LIBRARY_PATH=$PWD/build/rt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$L/gpu.txt" 2>&1
stamp unpacked
(
    timeout ${TTIME:-100} build/tandem-tests ${TESTS:-gpu_tls gpu_layer_split gpu_paged} >"$L/tests.log" 2>&1
    echo "rc=$?" >>"$L/tests.log"
    TANDEM_TLS_L2=24 timeout 40 build/tandem-tests gpu_tls_select gpu_tls_stagger_equals >"$L/tests_l2_24.log" 2>&1
    echo "rc=$?" >>"$L/tests_l2_24.log"
) &
tp=$!
build/mkmodel --out /tmp/l3g --preset llama3-8b >"$L/mkmodel.log" 2>&1
stamp mkmodel
wait $tp
for f in tests tests_l2_24; do
    stamp "$f: $(grep -c '^ok' "$L/$f.log") ok, $(grep -c '^not ok' "$L/$f.log") not ok, $(grep rc= "$L/$f.log")"
done
grep -h "^not ok\|FAIL" "$L"/tests*.log | head
save
# a branch whose tests timed out (a hang) runs no bench of its own: each would time out too
hung=0
grep -q "rc=124" "$L/tests.log" && hung=1
bench() { # name dir env...
    local name=$1 dir=$2; shift 2
    [ $(($(date +%s) - t0)) -gt ${BUDGET_S:-262} ] && { stamp "skip $name: past ${BUDGET_S:-262} s"; return; }
    [ $hung = 1 ] && [ $dir = build ] && { stamp "skip $name: the branch's tests hung"; return; }
    env "$@" timeout 60 $dir/bench_gpu --model /tmp/l3g --tls ${CTX:-130000,32768} --tls-batch 1,8 \
        --tls-budget 1024 --tls-blocks 128 --steps ${STEPS:-24} > "$L/bench_$name.jsonl" 2> "$L/bench_$name.err"
    stamp "bench $name rc=$? $*"
    grep '"bench":"tls"' "$L/bench_$name.jsonl" | cut -c1-60,330-420
    save
}
bench main build-main X=1
bench all build TANDEM_TLS_L2=63
bench off build TANDEM_TLS_L2=0
bench score build TANDEM_TLS_L2=7
bench topk build TANDEM_TLS_L2=56
bench main2 build-main X=1
bench all2 build TANDEM_TLS_L2=63
bench v16 build TANDEM_TLS_L2=1
bench noi2f build TANDEM_TLS_L2=4
bench nopeel build TANDEM_TLS_L2=24
bench c8 build TANDEM_TLS_L2=2
stamp done
save
