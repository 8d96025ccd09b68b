#!/bin/bash
# tbtp99 call 1: the TBT bench with the scheduler trace (TRACE=1), xattention trishape dense
set -u
C=.carry/tbtp99
cp $C/tbt_during_prefill.py $C/tbt_trace.py bench/ && cp $C/tbt_sparse.sh gpu/bench/
rm -rf build && tar -xJf $C/gpu.tar.xz
L=$OUT/l; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv >$L/gpu_q.txt 2>&1
OUT=$L B=build M=/tmp/l3g MODE_TIMEOUT=${MT:-60} WARM=${WARM:-4} TRACE=1 MODES="${MODES:-xattention trishape dense}" \
    timeout ${TT:-200} bash gpu/bench/tbt_sparse.sh >$L/tbt_run.log 2>&1
G=""; for f in $L/gaps_*.json; do G="$G --gaps $f"; done
python3 bench/tbt_trace.py --trace $L/sched_trace.0 $G >$L/analysis.jsonl 2>&1
cat $L/stamps.log $L/tbt.jsonl; cut -c1-1500 $L/analysis.jsonl
tar -C $OUT -czf $OUT/call.tgz l && rm -rf $L
tar -tzvf $OUT/call.tgz
