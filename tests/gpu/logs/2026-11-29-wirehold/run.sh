#!/bin/bash
# wirehold's one device call (from the repository root): the node's held REPLYs sized to the
# sender's window at the chunk's size (issue 26), on the quiet host. Interleaved rounds of main's
# peer_bench (9692938, PORTABLE: the "before" column, REPLYs held until 4 at every size), the
# branch's (h/wirehold: held until peer_kv_reply_hold of the chunk's size; --poll-us 0 is its
# default, named because peer_quiet_run.sh's ARGS drops an empty set) and ucx_perftest tag_bw, at
# 17,039,440-byte messages (a GPU prefill's 32K-prompt layer chunk: 3 in the window, hold 1) over
# tcp and sm,tcp, 16 MiB (4 in the window, hold 2), 8 MiB and 1 MiB over tcp (hold 4 both: as
# before, checked for no loss). Variables (for a local rehearsal): D (this folder), B (seconds for
# peer_quiet_run.sh), CFGS.
set -u
D=${D:-.carry/wirehold}
B=${B:-185}
O=${OUT:-/tmp/wh_out}
export UCX_TCP_CM_REUSEADDR=y # the daemon's one UCX setting (peer/link.c), every process's
date -u +"%T start"
ARGS="--poll-us 0" PARTS=rounds \
    CFGS="${CFGS:-tcp 17039440 64|sm,tcp 17039440 64|tcp 16777216 64|tcp 8388608 128|tcp 1048576 350}" \
    timeout $((B + 20)) bash $D/peer_quiet_run.sh $D/pack.tar.xz $O/wh "$B"
date -u +"%T end"
tar -C $O -czf $O/wh.tgz wh && rm -rf $O/wh
