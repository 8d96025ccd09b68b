#!/bin/bash
# wiretcp9's one device call (from the repository root): the TCP link's interleaved rounds on the
# quiet host (1 MiB chunks, 350 a pass), columns: main's peer_bench (packed as peer_bench.before),
# the branch's with the sender's two buffers alone (--rx-tight 0), the node's two slots alone
# (--tx-tight 0), both (the default, named), both with the node's CRC on its receiving thread
# (--crc-on node), and ucx_perftest tag_bw in every round.
set -u
D=.carry/wiretcp9
# the daemon's one UCX setting (peer/link.c: the connection manager's SO_REUSEADDR), given to
# every process of the rounds, perftest's included, so that both run with the same settings
export UCX_TCP_CM_REUSEADDR=y
date -u +"%T start"
ARGS="--rx-tight 0|--tx-tight 0|--tx-tight 1|--crc-on node" PARTS=rounds CFGS="tcp 1048576 350" \
    timeout 150 bash $D/peer_quiet_run.sh $D/pack.tar.xz $OUT/w9 135
date -u +"%T end"
tar -C $OUT -czf $OUT/w9.tgz w9 && rm -rf $OUT/w9
