#!/bin/bash
# wirefinal's one device call (from the repository root): issue 26's link goal on today's main
# (abd5739, PORTABLE peer_bench packed with bench/peer_quiet_pack.sh) on the quiet host, at the
# chunk sizes the daemon ships: interleaved rounds of main's peer_bench with the daemon's defaults
# (--poll-us 0 is peer_bench's default, named because peer_quiet_run.sh's ARGS drops an empty
# set) and ucx_perftest tag_bw, over UCX_TLS=tcp and sm,tcp, at 1 MiB (a CPU prefill's 512-token
# layer chunk), 8 MiB (a GPU prefill's 4K layer chunk), 16 MiB (a GPU prefill's 32K layer chunk:
# passes of 8192 tokens) and 64 MiB (peer_handover's and a sparse prefill's 32K layer chunk),
# plus the hand-over at 4K and 32K tokens (daemon B's CPU, shared memory) after the first round.
# Variables (for a local rehearsal): D (this folder), B (seconds for peer_quiet_run.sh),
# CFGS, HANDOVER.
set -u
D=${D:-.carry/wirefinal}
B=${B:-275}
O=${OUT:-/tmp/wf_out}
export UCX_TCP_CM_REUSEADDR=y # the daemon's one UCX setting (peer/link.c), every process's
date -u +"%T start"
ARGS="--poll-us 0" PARTS="rounds handover" HANDOVER="${HANDOVER:-4096:3 32768:2}" HPOLLS=0 HANDOVER_AT=1 \
    HANDOVER_NEED=${NEED:-120} \
    CFGS="${CFGS:-tcp 1048576 350|sm,tcp 1048576 350|tcp 8388608 128|sm,tcp 8388608 128|tcp 16777216 64|sm,tcp 16777216 64|tcp 67108864 32|sm,tcp 67108864 32}" \
    timeout $((B + 20)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/wf "$B"
date -u +"%T end"
tar -C $O -czf $O/wf.tgz wf && rm -rf $O/wf
