# tests/e2e/lib/peers.sh — what the peer tests of `tandem serve` (serve_peers.sh,
# serve_peers_drain.sh) share; sourced after tests/e2e/lib/serve.sh, with KEY (the fleet's
# peer_key) set.
#
#   node_b N [flags]   starts node B: CPU for its own requests, lending fpga-emu:0 on
#                      --kv-listen 127.0.0.1:${BLISTEN:-0} as node ${B:-nodeB}, its log $T/b.N;
#                      waits for event=ready (20 s at most) and sets BPID, BLOG, BPORT (its peer
#                      port) and BADMIN (its admin URL); 0 once it is ready
#   wait_ready LOG PID TRIES
#                      waits (TRIES x 50 ms at most) for event=ready in LOG while PID lives
wait_ready() {
    _peers_i=0
    while [ $_peers_i -lt "$3" ] && ! grep -q "event=ready" "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do
        sleep 0.05
        _peers_i=$((_peers_i + 1))
    done
}

node_b() {
    BLOG=$T/b.$1
    shift
    "$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --node-name "${B:-nodeB}" \
        --kv-listen "127.0.0.1:${BLISTEN:-0}" --peer-devices fpga-emu:0 --peer-key "$KEY" --log-file "$BLOG" "$@" \
        >"$BLOG.out" 2>&1 &
    BPID=$!
    wait_ready "$BLOG" $BPID 400
    BPORT=$(sed -n 's/.*event=listening listener=peers .*port=\([0-9]*\).*/\1/p' "$BLOG" | head -1)
    BADMIN=http://127.0.0.1:$(sed -n 's/.*event=listening listener=admin .*port=\([0-9]*\).*/\1/p' "$BLOG" | head -1)
    [ -n "$BPORT" ] && grep -q "event=ready" "$BLOG"
}
