#!/bin/bash
# xattn helper, device call 2 (2026-11-28): the warp-specialized XAttention estimate with key
# splits — its tests on the H200, then flex_gpu_bench methods at 128K (strides 8 and 16).
set -u
R=.carry/xattn
t0=$(date +%s)
st() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a $OUT/stamps.log; }
tar -C $R -xJf $R/pack2.tar.xz || exit 1
B=$R/pb2
export LD_LIBRARY_PATH=$PWD/$B/rt
st unpacked
BUILD=$B TANDEM_TEST_TIMEOUT=40 timeout 45 $B/tandem-tests gpu_xattn > $OUT/tests.log 2>&1
rc=$?
echo "tests rc $rc" >> $OUT/tests.log
grep -E "^(ok|not ok)|case |FAIL|# unit|rc " $OUT/tests.log
st tests
[ $rc -eq 0 ] || exit 1
timeout 45 $B/flex_gpu_bench --lib $B/libtandem_cuda_test.so --threads 16 --reps 3 --kinds structured \
  --gammas 0.9 --xthr 0.8 --xstride 8,16 --recent 1920 methods 131072 > $OUT/kernels.md 2>&1
echo "bench rc $?" >> $OUT/kernels.md
cat $OUT/kernels.md
st done
