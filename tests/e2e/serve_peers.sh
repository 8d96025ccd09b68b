#!/bin/sh
# Prefill on one node, decode on another (peer/peer.h), with real daemons on loopback: node B
# lends an emulated U280 (peer_devices = fpga-emu:0) over UCX; node A serves the clients on its
# CPU and lists B as a peer. Checked with curl and the logs:
#   peers_placed      a request through A is prefilled on A and decoded on B's card
#                     (x-tandem-devices: prefill=cpu; decode=$B/fpga-emu:0); B's node_name has
#                     63 characters, the most a node name has (a DNS label: a pod named for a
#                     46-character Deployment), so its card is named in 74 (version 4 of the peer
#                     protocol held 31: B did not start)
#   peers_text        its text at temperature 0 equals one node's with the same split
#                     (tandem generate --prefill-device cpu --device fpga-emu:0)
#   peers_stream      a streamed one too, token for token
#   peers_shm         on one host the KV goes by shared memory: A's endpoint made from B's
#                     worker address got UCX's sysv/posix/cma lanes (A's log), KV as tagged messages
#   peers_transport_* peer_transport = stream keeps the KV on the TCP stream, UCX_TLS=tcp gives the
#                     address endpoint TCP lanes; the text is the same either way
#   peers_no_strays   none of those nodes' tagged KV chunks is taken by B for a stray message
#                     (event=peer_stray_tag: a serial outside a connection's window, issue 26)
#   peers_wrong_key   a node with another peer_key is refused by B (logged there) and starts
#                     without B's devices (logged, not fatal)
#   peers_corrupt_*   a KV chunk corrupted on the wire (TANDEM_PEER_FAULT on A) is detected by
#                     B (CRC, logged), the request moves and completes with the CPU's text, A
#                     counts the corrupt chunk and marks the remote card
#   peers_sender_killed*   A killed (SIGKILL) with a KV chunk in flight (announced, its bytes
#                     held back: TANDEM_PEER_FAULT kv_stall): B frees the sequence it held for A
#                     (logged), stays up, and its card's free memory, as the next A sees it, is
#                     what it was before
#   peers_receiver_killed  B killed with a KV chunk in flight: the request is re-placed on A's CPU
#                     and completes with the CPU's text, A stays ready with nothing running, the
#                     next request works
#   peers_kill_*      B killed (SIGKILL) while it decodes a stream: the stream completes with
#                     every token (moved to A's CPU), A notices B gone and stays ready
#   peers_reconnect   B restarted on the same port: A reconnects by itself (backoff), B's card is
#                     placed on again and decodes a request with the same text as before
#   peers3_*          three nodes, B and C lending a card each: two streams at once decode one
#                     on B and one on C; C killed mid-stream loses nothing; B's text is one node's;
#                     all three poll UCX after activity (peer_poll_us 500: the same outcomes as
#                     the nodes above, which sleep at once)
#   peers3_late_*     C is started after A (A's peer_wait 0): A starts without it (peer_down,
#                     /admin/status "joining"), and once C is up it joins within seconds
#                     (peer_joined, peer_device_added, "up" with 1 device); C's card then decodes
#   peers_name_*      a lending node whose lent device's name passes 63 characters, or whose
#                     node_name passes 63, stops at start-up (exit 2, the limit named); before,
#                     the first started and every peer refused its device, and the second was cut
. tests/e2e/lib/serve.sh
. tests/e2e/lib/peers.sh
export TANDEM_CACHE_DIR="$T/cache"
KEY=e2e-peer-key-0123456789

# node B's name: a pod's of a 46-character Deployment (<Deployment>-<hash of 10>-<5>), 63 characters
B=tandem-decode-pool-eu-west-1a-inference-fleet2-7d9f8b6c5d-x2k4z

# name_refused NAME NODE_NAME WANT [DEVICES]: B's start-up with that name lending DEVICES
# (fpga-emu:0) stops with exit 2 and WANT
name_refused() {
    timeout 20 "$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --node-name "$2" \
        --kv-listen 127.0.0.1:0 --peer-devices "${4:-fpga-emu:0}" --peer-key "$KEY" >"$T/name.out" 2>&1
    _rc=$?
    check "$1" sh -c "[ $_rc = 2 ] && grep -q '$3' $T/name.out || { echo '# rc $_rc' >&2; sed 's/^/# /' $T/name.out >&2; exit 1; }"
}
name_refused peers_name_lent_too_long "$B" "is a device name of 64 characters" \
    fpga-emu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:0
name_refused peers_name_over_63 "${B}9" "is 64 characters: at most 63"
emu_ready "peers_placed peers_text peers_stream peers_shm peers_transport_stream peers_transport_tcp peers_no_strays peers_wrong_key peers_sender_killed peers_sender_killed_no_leak peers_receiver_killed peers_corrupt_detected peers_corrupt_text peers_corrupt_marked peers_kill_complete peers_kill_noticed peers_reconnect peers3_late_down peers3_late_joined peers3_spread peers3_kill_c_loses_nothing peers3_text_b" || exit 0

BPID=
node_b_stop() { [ -n "$BPID" ] && kill -TERM "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null; BPID=; }
C3PID=
trap 'node_b_stop; [ -n "$C3PID" ] && kill -KILL $C3PID 2>/dev/null; serve_cleanup' EXIT

PROMPT="Once upon a time"
"$TANDEM" generate --prefill-device cpu --device fpga-emu:0 --prompt "$PROMPT" --max-tokens 40 \
    --temperature 0 2>/dev/null >"$T/ref.split"
"$TANDEM" generate --device cpu --prompt "$PROMPT" --max-tokens 40 --temperature 0 2>/dev/null >"$T/ref.cpu"

# ---------------------------------------------------------------- placed, text, stream
# B's loop on two receiving threads (peer_rx_threads 2; auto gives 1 on a small machine): chunks
# over shared memory are handed between them, chunks over TCP (peers_transport_tcp) stay on theirs
node_b 1 --peer-rx-threads 2 || { fail peers_start "node B did not start: $(tail -n 3 $T/b.1 $T/b.1.out)"; exit 0; }
serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" --peer-key "$KEY" ||
    { fail peers_start "node A did not start"; exit 0; }
code=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0}")
check peers_placed sh -c "[ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=$B/fpga-emu:0' $T/hdr"
jqb '.choices[0].text' | head -c -1 >"$T/got.remote"
# tandem generate prints the text and a newline
printf '%s\n' "$(cat "$T/got.remote")" >"$T/got.remote.nl"
check peers_text cmp -s "$T/got.remote.nl" "$T/ref.split"
curl -s -N -o "$T/s.1" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0,\"stream\":true}" "$API/v1/completions"
grep '^data: {' "$T/s.1" | sed 's/^data: //' | jq -j '.choices[0].text // ""' >"$T/got.stream"
check peers_stream cmp -s "$T/got.stream" "$T/got.remote"
check peers_shm grep -Eq "event=peer_device_opened device=$B/fpga-emu:0 kv_transport=\"[a-z,]*(sysv|posix|cma)" "$LOG"
serve_stop
for how in stream tcp; do
    if [ $how = stream ]; then
        serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" --peer-key "$KEY" --peer-transport stream
        want='kv_transport="tcp stream"'
    else
        export UCX_TLS=tcp # this daemon's UCX only: B still offers shared memory in its address
        serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" --peer-key "$KEY"
        unset UCX_TLS
        want='kv_transport="tcp"'
    fi
    code=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0}")
    jqb '.choices[0].text' | head -c -1 >"$T/got.$how"
    check peers_transport_$how sh -c "[ $code = 200 ] && grep -q 'event=peer_device_opened device=$B/fpga-emu:0 $want' $LOG && cmp -s $T/got.$how $T/got.remote"
    serve_stop
done
# KV over shared memory and over TCP lanes, three node A's come and gone: not one of their tagged
# chunks was taken for a stray (peer/server_stray.c)
check peers_no_strays sh -c "grep -q 'event=peer_closed peer=nodeA' $BLOG && ! grep -q 'event=peer_stray_tag' $BLOG"
serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" --peer-key "$KEY" ||
    { fail peers_start "node A did not start"; exit 0; }

# ---------------------------------------------------------------- wrong key
APID=$PID
ALOG=$LOG
"$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --node-name intruder \
    --peers "127.0.0.1:$BPORT" --peer-key "not-the-fleet-key-123" --peer-wait 2 --log-file "$T/c.log" \
    >"$T/c.out" 2>&1 &
CPID=$!
wait_ready "$T/c.log" $CPID 200
check peers_wrong_key sh -c "grep -q 'event=peer_skipped .*peer_key' $T/c.log && grep -q 'event=ready' $T/c.log && grep -q 'event=peer_refused .*peer=intruder reason=\"authentication failed' $BLOG && ! grep -q '$B/' $T/c.log"
kill -TERM $CPID 2>/dev/null
wait $CPID 2>/dev/null
serve_stop

# ---------------------------------------------------------------- the sending node killed with KV in flight
# (TANDEM_PEER_FAULT kv_stall: while $T/stall exists, A announces a chunk and holds its bytes
# back, so that B waits for them with the request's sequence made on its card)
TANDEM_PEER_FAULT="kv_stall=$T/stall" serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" \
    --peer-key "$KEY" || { fail peers_stall_start "node A did not start"; exit 0; }
mem_b() { curl -s "$ADMIN/admin/status" | jq --arg d "$B/fpga-emu:0" '.devices[] | select(.name == $d) | .mem_free'; }
mem0=$(mem_b)
touch "$T/stall"
curl -s -o /dev/null -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0}" "$API/v1/completions" &
CURL=$!
wait_log() { # PATTERN FILE: up to 5 s
    i=0
    while [ $i -lt 100 ] && ! grep -q "$1" "$2" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
}
wait_log "event=peer_fault_injected device=$B/fpga-emu:0 kind=kv_stall" "$LOG"
kill -KILL "$PID"
wait "$PID" 2>/dev/null
PID=
wait $CURL
rm -f "$T/stall"
wait_log 'event=peer_closed peer=nodeA' "$BLOG"
check peers_sender_killed sh -c "grep -q 'event=peer_fault_injected device=$B/fpga-emu:0 kind=kv_stall' $LOG && grep -Eq 'event=peer_closed peer=nodeA .*seqs_freed=1 reason=\"(connection closed|peer connection failed)\"' $BLOG && kill -0 $BPID"

# ---------------------------------------------------------------- corrupt chunk on the wire
TANDEM_PEER_FAULT=kv_bitflip=2 serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" \
    --peer-key "$KEY" || { fail peers_corrupt_start "node A did not start"; exit 0; }
# the killed sender's sequence was freed on B: its card's memory is whole again as a new node sees it
mem1=$(mem_b)
check peers_sender_killed_no_leak sh -c "[ -n '$mem0' ] && [ '$mem0' != null ] && [ '$mem1' = '$mem0' ]"
code=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0}")
jqb '.choices[0].text' >"$T/got.corrupt"
check peers_corrupt_detected sh -c "[ $code = 200 ] && grep -q 'event=peer_kv_corrupt peer=nodeA .*status=\"KV chunk checksum' $BLOG && grep -q 'event=request_moved .*from=$B/fpga-emu:0 status=\"corrupt data\"' $LOG"
check peers_corrupt_text cmp -s "$T/got.corrupt" "$T/ref.cpu"
curl -s "$ADMIN/metrics" >"$T/metrics"
check peers_corrupt_marked sh -c "grep -Eq '^tandem_device_kv_corrupt_total\{device=\"$B/fpga-emu:0\",kind=\"fpga\"\} 1' $T/metrics && grep -Eq '^tandem[:_]device_health\{device=\"$B/fpga-emu:0\",kind=\"fpga\",state=\"degraded\"\} 1' $T/metrics"
serve_stop

# ---------------------------------------------------------------- node B killed mid-decode
TANDEM_PEER_FAULT="kv_stall=$T/stall" serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" \
    --peer-key "$KEY" --step-delay-ms 40 || { fail peers_kill_start "node A did not start"; exit 0; }
curl -s -N -D "$T/sh.k" -o "$T/s.k" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":100,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
    "$API/v1/completions" &
CURL=$!
i=0
while [ $i -lt 200 ] && [ "$(cat "$T/s.k" 2>/dev/null | grep -c '^data: {')" -lt 10 ]; do
    sleep 0.05
    i=$((i + 1))
done
kill -KILL "$BPID"
wait "$BPID" 2>/dev/null
BPID=
wait $CURL
grep '^data: {' "$T/s.k" | tail -n 1 | sed 's/^data: //' >"$T/last.k"
check peers_kill_complete sh -c "grep -qi '^x-tandem-devices: prefill=cpu; decode=$B/fpga-emu:0' $T/sh.k && grep -q '^data: \[DONE\]' $T/s.k && jq -e '.usage.completion_tokens == 100 and .tandem.moves == 1 and (.tandem.devices | test(\"moved_from=$B/fpga-emu:0\"))' $T/last.k >/dev/null"
sleep 1
check peers_kill_noticed sh -c "grep -q 'event=peer_lost peer=$B\|event=peer_call_failed device=$B/fpga-emu:0' $LOG && [ \$(curl -s -o /dev/null -w '%{http_code}' $ADMIN/ready) = 200 ]"
# B comes back on the same port: A, which was never restarted, uses its card again
BLISTEN=$BPORT node_b 2 || fail peers_reconnect "node B did not restart on port $BPORT: $(tail -n 3 $T/b.2 $T/b.2.out)"
i=0
while [ $i -lt 300 ] && ! grep -q "event=peer_reconnected peer=$B" "$LOG"; do sleep 0.05; i=$((i + 1)); done
code=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0}")
jqb '.choices[0].text' | head -c -1 >"$T/got.reconnect"
check peers_reconnect sh -c "grep -q 'event=peer_reconnected peer=$B' $LOG && [ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=$B/fpga-emu:0' $T/hdr && cmp -s $T/got.reconnect $T/got.remote"
# the receiving node (B) killed with KV in flight: B waits for a held-back chunk's bytes when it
# dies; the request is re-placed on A and completes with the CPU's text, A stays ready with
# nothing left running, and the next request works
touch "$T/stall"
curl -s -D "$T/sh.rk" -o "$T/rk.json" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0}" "$API/v1/completions" &
CURL=$!
wait_log "event=peer_fault_injected device=$B/fpga-emu:0 kind=kv_stall" "$LOG"
kill -KILL "$BPID"
wait "$BPID" 2>/dev/null
BPID=
rm -f "$T/stall"
wait $CURL
jq -r '.choices[0].text' "$T/rk.json" >"$T/got.rk"
curl -s "$ADMIN/admin/status" >"$T/st.rk"
code=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":8,\"temperature\":0}")
check peers_receiver_killed sh -c "grep -q 'event=peer_fault_injected device=$B/fpga-emu:0 kind=kv_stall' $LOG && grep -q '^HTTP/1.1 200' $T/sh.rk && cmp -s $T/got.rk $T/ref.cpu && jq -e '.queue.running == 0 and .queue.waiting == 0' $T/st.rk >/dev/null && [ \$(curl -s -o /dev/null -w '%{http_code}' $ADMIN/ready) = 200 ] && [ $code = 200 ] && jq -e '.usage.completion_tokens == 8' $T/body >/dev/null"
serve_stop

# ---------------------------------------------------------------- three nodes: A, and B and C lending cards
# (the issue's acceptance: requests through A decode on B or C, texts equal one node's, killing C
# mid-stream loses nothing); C starts after A and joins it
node_b 3 --peer-poll-us 500 || { fail peers3_start "node B did not start"; exit 0; }
B3PORT=$BPORT
B3PID=$BPID
CLOG=$T/c3.log
C3PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$B3PORT,127.0.0.1:$C3PORT" --peer-key "$KEY" \
    --peer-wait 0 --step-delay-ms 40 --peer-poll-us 500 || { fail peers3_start "node A did not start"; exit 0; }
curl -s "$ADMIN/admin/status" >"$T/st3.0"
check peers3_late_down sh -c "grep -q 'event=peer_down addr=127.0.0.1:$C3PORT' $LOG && jq -e '[.peers[] | select(.addr == \"127.0.0.1:$C3PORT\" and .state == \"joining\" and .devices == 0)] | length == 1' $T/st3.0 >/dev/null && jq -e '[.peers[] | select(.name == \"$B\" and .state == \"up\" and .devices == 1)] | length == 1' $T/st3.0 >/dev/null"
"$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --node-name nodeC \
    --kv-listen 127.0.0.1:$C3PORT --peer-devices fpga-emu:0 --peer-key "$KEY" --peer-poll-us 500 --log-file "$CLOG" >/dev/null 2>&1 &
C3PID=$!
t_c=$(date +%s.%N)
# joined: A opened C's card and the card warmed up (A's backoff: a try at most every 8 s)
i=0
while [ $i -lt 300 ] && ! curl -s "$ADMIN/admin/status" | jq -e '.devices[] | select(.name == "nodeC/fpga-emu:0" and .warm)' >/dev/null 2>&1; do
    sleep 0.05
    i=$((i + 1))
done
echo "# C joined A $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t_c }") s after it was started" >&2
curl -s "$ADMIN/admin/status" >"$T/st3.1"
check peers3_late_joined sh -c "grep -q 'event=peer_joined peer=nodeC addr=127.0.0.1:$C3PORT devices=1' $LOG && grep -q 'event=peer_device_added peer=nodeC device=nodeC/fpga-emu:0' $LOG && jq -e '[.peers[] | select(.name == \"nodeC\" and .state == \"up\" and .devices == 1)] | length == 1' $T/st3.1 >/dev/null"
# two streams at once: each card decodes one sequence at a time, so one goes to B, one to C
for k in 1 2; do
    curl -s -N -D "$T/sh3.$k" -o "$T/s3.$k" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":100,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
        "$API/v1/completions" &
    eval "P3_$k=\$!"
done
i=0
while [ $i -lt 200 ] && [ "$(cat "$T/s3.1" "$T/s3.2" 2>/dev/null | grep -c '^data: {')" -lt 20 ]; do
    sleep 0.05
    i=$((i + 1))
done
kill -KILL "$C3PID"
wait "$C3PID" 2>/dev/null
wait "$P3_1"
wait "$P3_2"
check peers3_spread sh -c "cat $T/sh3.1 $T/sh3.2 | grep -i '^x-tandem-devices' | grep -q 'decode=$B/fpga-emu:0' && cat $T/sh3.1 $T/sh3.2 | grep -i '^x-tandem-devices' | grep -q 'decode=nodeC/fpga-emu:0'"
ok3=0
for k in 1 2; do
    grep '^data: {' "$T/s3.$k" | tail -n 1 | sed 's/^data: //' >"$T/last3.$k"
    if grep -q '^data: \[DONE\]' "$T/s3.$k" && jq -e '.usage.completion_tokens == 100' "$T/last3.$k" >/dev/null; then ok3=$((ok3 + 1)); fi
done
check peers3_kill_c_loses_nothing sh -c "[ $ok3 = 2 ] && grep -q 'moved_from=nodeC/fpga-emu:0' $T/last3.1 $T/last3.2"
# B's stream was never moved: its text is the one-node split's (first 40 tokens compared)
for k in 1 2; do
    if grep -qi "^x-tandem-devices: .*decode=$B/" "$T/sh3.$k"; then
        grep '^data: {' "$T/s3.$k" | sed 's/^data: //' | jq -j '.choices[0].text // ""' >"$T/got3.b"
    fi
done
check peers3_text_b sh -c "head -c \$(wc -c <$T/got.remote) $T/got3.b | cmp -s - $T/got.remote"
serve_stop
kill -TERM "$B3PID" 2>/dev/null
wait "$B3PID" 2>/dev/null
BPID=
