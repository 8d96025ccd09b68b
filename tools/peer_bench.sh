#!/bin/sh
# tools/peer_bench.sh — the peer link's numbers for BENCHMARKS.md (run from the repository root
# after make): (1) tandem's link (build/peer_bench) against ucx_perftest's stream bandwidth on
# the same UCX transport, TCP and shared memory, at the sizes of real KV layer chunks; (2) a
# request decoded on another daemon's emulated card against the same card in the same daemon,
# TTFT and time between tokens from the daemons' own /metrics (stories260K, 40 streamed requests
# of 64 tokens, one at a time).
BUILD=${BUILD:-build}
SIZES=${SIZES:-1048576,8388608,67108864}
set -e
# shared memory: tandem's link asks for sm,tcp (its client-server connection needs tcp to
# connect; UCX's log says which transport the endpoint got: UCX_LOG_LEVEL=info, ep_cfg lines);
# ucx_perftest exchanges worker addresses itself and gets shared memory with sm,self
for tls in tcp sm,tcp; do
    echo "== UCX_TLS=$tls"
    UCX_TLS=$tls UCX_LOG_LEVEL=info "$BUILD/peer_bench" --sizes "$SIZES" 2>&1 |
        awk '/ep_cfg\[1\]:/ && !e {sub(/.*ep_cfg\[1\]: */, ""); print "# tandem link endpoint: " $0; e=1}
             /^(# peer_bench|kv |logits )/ {print}' 
    ptls=$tls
    [ "$tls" = sm,tcp ] && ptls=sm,self
    for t in stream_bw tag_bw; do
        for s in $(echo "$SIZES" | tr ',' ' '); do
            port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
            UCX_TLS=$ptls ucx_perftest -p $port >/dev/null 2>&1 &
            srv=$!
            sleep 1
            n=$((s >= 8388608 ? 100 : 1000))
            bw=$(UCX_TLS=$ptls ucx_perftest 127.0.0.1 -p $port -t $t -s "$s" -n $n -w 10 -f 2>/dev/null |
                awk '/^ *[0-9]/ {v=$6} END {print v}')
            wait $srv 2>/dev/null || true
            echo "ucx_perftest $t UCX_TLS=$ptls $s bytes: $bw MB/s (overall)"
        done
    done
done

echo "== remote vs local decode (stories260K, fpga-emu:0 at the timing model's pace)"
T=$(mktemp -d)
pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR="$T/cache"
start() { # NAME ARGS...: starts a daemon, waits for ready
    n=$1
    shift
    "$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --log-file "$T/$n.log" "$@" >/dev/null 2>&1 &
    pids="$pids $!"
    i=0
    while [ $i -lt 600 ] && ! grep -q event=ready "$T/$n.log" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
}
port_of() { sed -n "s/.*listener=$2 .*port=\([0-9]*\).*/\1/p" "$T/$1.log" | head -1; }
K=bench-peer-key-0123456789
start B --devices cpu --node-name nodeB --kv-listen 127.0.0.1:0 --peer-devices fpga-emu:0 --peer-key $K
start A --devices cpu --node-name nodeA --peers 127.0.0.1:$(port_of B peers) --peer-key $K
start L --devices cpu,fpga-emu:0
# per request, from the client's side of the stream (tools/peer_bench_client.py): time to the
# first token (sampled from the prefill's logits on the prefill device, before any hand-over),
# the gap between the first and the second token (the hand-over: the KV's last chunks land on
# the card, then its first step), and the mean gap after that (one decode step each)
for n in A L; do
    api=http://127.0.0.1:$(port_of $n api)
    label="local card (one daemon, cpu + fpga-emu:0)"
    [ $n = A ] && label="remote card (A prefills, B's fpga-emu:0 decodes over UCX)"
    python3 tools/peer_bench_client.py "$api" 40 64 "$label"
    grep -o 'event=request .* decode=[^ ]*' "$T/$n.log" | sed 's/.* decode=/  decoded on: /' | sort | uniq -c
done
