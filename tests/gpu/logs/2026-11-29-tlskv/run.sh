#!/bin/bash
# .carry/tlskv/run.sh RUN — helper tlskv's device call (issue 23: host mappings for the offload).
# Unpacks the carried PORTABLE build as tlsb/, then: the machine; gpu_tls + gpu_paged tests; the
# host-mapping microbenchmark (bench_gpu --tls-hostmap 8); the 96K offload benchmark with the host
# pool as each of $CONFIGS (TANDEM_TLS_HPOOL/TANDEM_TLS_HLAYOUT), each its own bench_gpu process.
# Logs in $OUT/RUN, packed as $OUT/tlskv-RUN.tar.
set -u
RUN=${1:-run1}
L=/tmp/tlskv-logs/$RUN
mkdir -p "$L"
DEADLINE=${DEADLINE:-300} # seconds from the start: a phase that would pass it is skipped or cut
exec > >(tee -a "$L/run.log") 2>&1
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar -C /tmp/tlskv-logs -cf "$OUT/tlskv-$RUN.tmp" "$RUN" && mv "$OUT/tlskv-$RUN.tmp" "$OUT/tlskv-$RUN.tar"; }
left() { echo $(( DEADLINE - ($(date +%s) - t0) )); }
trap pack EXIT
stamp machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current --format=csv
echo "kernel $(uname -r), $(nproc) cores, $(grep MemTotal /proc/meminfo)"; date -u
echo "cmdline: $(cat /proc/cmdline)"
echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
echo "iommu: $(ls /sys/class/iommu 2>/dev/null | tr '\n' ' ') groups $(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l)"
grep -i "hugepages\|MemAvailable" /proc/meminfo
rm -rf tlsb && tar -xJf .carry/tlskv/pack.tar.xz
B=tlsb
export LD_LIBRARY_PATH=$PWD/$B/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M=/tmp/llama3-8b
stamp "mkmodel (beside the tests)"
timeout 200 $B/mkmodel --preset llama3-8b --out $M > "$L/mkmodel.log" 2>&1 &
mk=$!
if [ -n "${TESTS:-gpu_tls gpu_paged}" ]; then
    stamp "tests: ${TESTS:-gpu_tls gpu_paged}"
    BUILD=$B timeout ${TTIME:-150} $B/tandem-tests ${TESTS:-gpu_tls gpu_paged} > "$L/tests.log" 2>&1
    echo "tests exit $?"
    grep -v "^  tls form" "$L/tests.log" | tail -40
fi
pack
wait $mk; echo "mkmodel exit $?"
if [ "${HOSTMAP:-8}" != 0 ]; then
    stamp "hostmap ${HOSTMAP:-8} GiB"
    timeout ${HTIME:-90} $B/bench_gpu --model $M --tls-hostmap ${HOSTMAP:-8} --tls-budget 1024 | tee "$L/hostmap.jsonl"
    echo "hostmap exit ${PIPESTATUS[0]}"
    pack
fi
i=0
for cfg in ${CONFIGS:-register:far:dense,mixed-vary,mixed,offloaded-vary vmm:near:mixed-vary,mixed,offloaded-vary vmm:far:mixed-vary,mixed,offloaded-vary register:near:mixed-vary,mixed,offloaded-vary}; do
    i=$((i + 1))
    kind=${cfg%%:*}; rest=${cfg#*:}; lay=${rest%%:*}; modes=${rest#*:}
    lim=$(left); [ "$lim" -gt "${OTIME:-100}" ] && lim=${OTIME:-100}
    if [ "$lim" -lt 45 ]; then stamp "offload $i ($cfg): skipped, ${lim}s left"; continue; fi
    stamp "offload $i: TANDEM_TLS_HPOOL=$kind TANDEM_TLS_HLAYOUT=$lay modes $modes (limit ${lim}s)"
    TANDEM_TLS_HPOOL=$kind TANDEM_TLS_HLAYOUT=$lay timeout $lim $B/bench_gpu --model $M \
        --tls-offload 98304 --tls-budget 1024 --tls-blocks 128 --steps 16 --tls-host-margin 8 \
        --tls-offload-modes "$modes" | tee "$L/offload-$i-$kind-$lay.jsonl"
    echo "offload $i exit ${PIPESTATUS[0]}"
    pack
done
free -g
stamp done
