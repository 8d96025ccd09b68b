#!/bin/bash
# gpu/bench/tbt_sparse.sh — issue 22 on the GPU machine: the time between tokens of 4 streams
# decoding on cuda:0 while one ~128K-token prompt prefills (bench/tbt_during_prefill.py), for dense
# prefill and each sparse method, through the daemon (chunked prefill, --tbt-budget-ms 50, its
# default), Llama-3-8B shape (mkmodel --preset llama3-8b, random bf16 weights; made once, kept in
# $M) with the Llama-3 tokenizer.
#   B       the binaries: tandem, mkmodel, libtandem_cuda.so (default build/portable, as
#           bench/sched_gpu.sh --prebuild makes them, with rt/ for the libraries the GPU image
#           lacks)
#   M       the model's folder (/tmp/l3g); MKMODEL its mkmodel options (--preset llama3-8b)
#   DEV     the device (cuda:0); TOKENS the long prompt (130000); STREAMS (4); MODES (dense
#           xattention trishape flexprefill); WARM seconds of decoding before the long prompt
#           (4); MODE_TIMEOUT seconds the long prompt may take (300; past it, what was seen so
#           far is reported, "finished": false)
#   TRACE   1: the daemon's worker logs every decode step and prefill call (TANDEM_SCHED_TRACE,
#           $OUT/sched_trace.0) and the client every gap ($OUT/gaps_<mode>.json);
#           bench/tbt_trace.py tells from them where each long gap went
# OUT=dir gpu/bench/tbt_sparse.sh; logs in $OUT (tbt.jsonl: one line per mode; daemon.log).
# The same script runs on the CPU with a small model (DEV=cpu M=... MKMODEL="..." TOKENS=4096):
# that is how it was checked before a device call.
set -u
OUT=${OUT:-/tmp/tbt_sparse}
TOKENS=${TOKENS:-130000}
B=${B:-build/portable}
M=${M:-/tmp/l3g}
DEV=${DEV:-cuda:0}
PORT=${PORT:-18080}
APORT=${APORT:-18090}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0))s] $*" | tee -a "$OUT/stamps.log"; }
[ -d "$B/rt" ] && export LD_LIBRARY_PATH=$PWD/$B/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -f "$M/config.json" ]; then
    stamp "mkmodel ${MKMODEL:---preset llama3-8b}"
    # shellcheck disable=SC2086
    $B/mkmodel --out "$M" ${MKMODEL:---preset llama3-8b} >"$OUT/mkmodel.log" 2>&1 ||
        { cat "$OUT/mkmodel.log"; exit 1; }
fi
gzip -dc tests/data/tokenizer/llama3/tokenizer.json.gz >"$M/tokenizer.json"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
stamp "daemon"
[ "${TRACE:-0}" = 1 ] && export TANDEM_SCHED_TRACE=$OUT/sched_trace
$B/tandem serve --model "$M" --devices "$DEV" --port "$PORT" --admin-port "$APORT" \
    --tbt-budget-ms "${TBT_BUDGET_MS:-50}" >"$OUT/daemon.log" 2>&1 &
pid=$!
for i in $(seq 1 "${READY_S:-300}"); do
    curl -sf "localhost:$APORT/ready" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || break
    sleep 1
done
stamp "ready"
for mode in ${MODES:-dense xattention trishape flexprefill}; do
    timeout $((${MODE_TIMEOUT:-300} + 30)) python3 bench/tbt_during_prefill.py --api "http://127.0.0.1:$PORT" \
        --admin "http://127.0.0.1:$APORT" --tokens "$TOKENS" --streams "${STREAMS:-4}" \
        --warm "${WARM:-4}" --max-wait "${MODE_TIMEOUT:-300}" --mode "$mode" \
        ${TRACE:+--gaps "$OUT/gaps_$mode.json"} | tee -a "$OUT/tbt.jsonl"
    stamp "$mode done"
done
kill -TERM $pid
wait $pid
echo "exit $?" >>"$OUT/daemon.log"
stamp "done"
