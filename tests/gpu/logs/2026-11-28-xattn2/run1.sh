#!/bin/bash
# xattn helper, device call 1 (2026-11-28): ncu on XAttention's estimate (128K, stride 16), then the
# TBT of 4 GPU decodes while a 130K prompt prefills (gpu/bench/tbt_sparse.sh), dense and each method.
set -u
R=.carry/xattn
t0=$(date +%s)
st() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a $OUT/stamps.log; }
tar -C $R -xJf $R/pack.tar.xz || exit 1
B=$R/pb
export LD_LIBRARY_PATH=$PWD/$B/rt
st unpacked
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
nproc >> $OUT/gpu.txt
(s=$(date +%s); $B/mkmodel --out /tmp/l3g --preset llama3-8b > $OUT/mkmodel.log 2>&1; echo "mkmodel rc $? $(( $(date +%s) - s ))s" >> $OUT/mkmodel.log) &
MK=$!
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
st "ncu: $NCU"
timeout ${NCU_S:-110} $NCU --clock-control none --kernel-name regex:xattn -c 3 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats -o /tmp/x16 \
  $B/flex_gpu_bench --lib $B/libtandem_cuda_test.so --threads 16 --reps 1 --kinds structured \
  --gammas 0.9 --xthr 0.8 --xstride 16 --recent 1920 methods 131072 > $OUT/ncu_run.txt 2>&1
echo "ncu rc $?" >> $OUT/ncu_run.txt
$NCU -i /tmp/x16.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
$NCU -i /tmp/x16.ncu-rep --page raw > /tmp/raw.txt 2>&1; grep -E "^ +[a-z]|xattn" /tmp/raw.txt | grep -E "xattn|stall|dram__|lts__t_(sector|bytes|request)|tensor|gmma|issue|inst_executed_pipe|l1tex__t_(bytes|sector)|sm__throughput|duration|registers|shared" > $OUT/ncu_raw.txt
st "ncu done"
wait $MK
st "mkmodel: $(tail -1 $OUT/mkmodel.log)"
OUT=$OUT B=$B M=/tmp/l3g MODE_TIMEOUT=${MODE_TIMEOUT:-70} WARM=4 bash gpu/bench/tbt_sparse.sh
st "all done"
