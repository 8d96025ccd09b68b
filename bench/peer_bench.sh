#!/bin/sh
# bench/peer_bench.sh — the peer link's numbers for BENCHMARKS.md (run from the repository root
# after make; PARTS="link handover decode" picks sections):
#   link      tandem's link (build/peer_bench) at KV chunk sizes, the KV on the stream endpoint
#             and as tagged messages on the endpoint made from the other side's worker address,
#             pipelined as the remote backend sends it, against ucx_perftest's stream_bw and
#             tag_bw on the same UCX_TLS, each size back to back: tcp, and sm,tcp (shared memory
#             between the two processes; the stream's connection needs tcp)
#   handover  the hand-over of a 4K and a 32K-token sequence to another daemon's device, run
#             through the remote backend (build/peer_handover), against the same device in the
#             same process: a model of Llama-3-8B's KV shape (32 layers, 8 KV heads x 128, a
#             128K vocabulary; small matrices elsewhere, so that it loads in seconds), made by
#             build/mkmodel; daemon B lends its CPU; KV over shared memory (peer_transport
#             auto) and over the TCP stream (stream)
#   decode    a request decoded on another daemon's emulated card against the same card in the
#             same daemon, TTFT and time between tokens (stories260K, 40 streamed requests of
#             64 tokens, one at a time)
BUILD=${BUILD:-build}
SIZES=${SIZES:-1048576,8388608,67108864}
TOKENS=${TOKENS:-4096,32768}
PARTS=${PARTS:-link handover decode}
set -e
T=$(mktemp -d)
pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$T"' EXIT
export TANDEM_CACHE_DIR="$T/cache"
K=bench-peer-key-0123456789

perftest() { # TLS TEST SIZE: ucx_perftest's bandwidth (MB/s, overall) between two processes
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
    UCX_TLS=$1 ucx_perftest -p $port >/dev/null 2>&1 &
    srv=$!
    sleep 1
    n=$(($3 >= 8388608 ? 100 : 1000))
    UCX_TLS=$1 ucx_perftest 127.0.0.1 -p $port -t $2 -s "$3" -n $n -w 10 -f 2>/dev/null |
        awk '/^ *[0-9]/ {v=$6} END {print v}'
    wait $srv 2>/dev/null || true
}

case " $PARTS " in *" link "*)
# per size, tandem's two paths and ucx_perftest's two tests back to back, so that each ratio
# compares runs of the same minute on a machine whose load moves; 1000 chunks at 1 MiB (a
# second a pass), 20 at the larger sizes; PEER_WINDOW=1 sends one chunk at a time (request and
# answer, as before pipelining)
for tls in tcp sm,tcp; do
    echo "== UCX_TLS=$tls"
    for s in $(echo "$SIZES" | tr ',' ' '); do
        reps=$((s >= 8388608 ? 20 : 1000))
        for path in stream tag; do
            UCX_TLS=$tls "$BUILD/peer_bench" --sizes "$s" --logits 0 --reps $reps --path $path \
                ${PEER_WINDOW:+--window $PEER_WINDOW} 2>&1 | grep -E '^(# peer_bench|kv )' | sed "s/^/$path: /"
        done
        for t in stream_bw tag_bw; do
            echo "ucx_perftest $t UCX_TLS=$tls $s bytes: $(perftest $tls $t $s) MB/s (overall)"
        done
    done
    UCX_TLS=$tls "$BUILD/peer_bench" --sizes 0 --logits 2048,524288 --path tag 2>&1 | grep -E '^logits '
done
esac

start() { # NAME ARGS...: starts a daemon, waits for ready (10 min: a model's first load)
    n=$1
    shift
    "$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --log-file "$T/$n.log" "$@" >/dev/null 2>&1 &
    pids="$pids $!"
    i=0
    while [ $i -lt 12000 ] && ! grep -q event=ready "$T/$n.log" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
}
port_of() { sed -n "s/.*listener=$2 .*port=\([0-9]*\).*/\1/p" "$T/$1.log" | head -1; }

case " $PARTS " in *" handover "*)
echo "== hand-over of ${TOKENS} tokens (Llama-3-8B's KV shape), remote vs local, B lends cpu"
M=$T/kv8b
"$BUILD/mkmodel" --out "$M" --layers 32 --kv-heads 8 --head-dim 128 --heads 8 --hidden 256 \
    --intermediate 512 --vocab 128256 --max-pos 40960 >/dev/null
gzip -dc tests/data/tokenizer/llama3/tokenizer.json.gz >"$M/tokenizer.json"
for tr in auto stream; do
    # a fresh B each time: its CPU keeps the memory of a 32K sequence's KV (8 GiB) once grown
    start H$tr --model "$M" --devices cpu --node-name nodeB --kv-listen 127.0.0.1:0 --peer-devices cpu --peer-key $K
    # a CPU importing one 32K layer (64 MiB int8 -> 256 MiB float32) can take longer than the
    # 8 s a remote call may take by default on this loaded machine
    TANDEM_PEER_CALL_TIMEOUT_S=${CALL_TIMEOUT:-120} "$BUILD/peer_handover" --model "$M" --peer 127.0.0.1:$(port_of H$tr peers) --key $K --device cpu \
        --tokens "$TOKENS" --reps 3 --transport $tr
    kill $(sed -n 's/.*event=start .*pid=\([0-9]*\).*/\1/p' "$T/H$tr.log") 2>/dev/null || true
    sleep 2
done
esac

case " $PARTS " in *" decode "*)
echo "== remote vs local decode (stories260K, fpga-emu:0 at the timing model's pace)"
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
esac
