#!/bin/sh
# A lending node's drain, with real daemons on loopback: node B lends an emulated U280
# (peer_devices = fpga-emu:0); node A serves the clients on its CPU, decodes on B's card, and
# slows its steps (step_delay_ms 20) so that a stream lasts seconds. Before, B's drain counted only
# its own requests: drained, it still took A's new sequences, and SIGTERM made it exit at once,
# cutting the streams it decoded for A (A moved them to its CPU and prefilled them again).
#   drain_lent_counted   /admin/drain on B while A streams on B's card: the reply's "lent" is 1,
#                        as /admin/status's lent_sequences and tandem_peer_lent_sequences are
#   drain_no_new_on_b    once A's heartbeat has seen B drain (B's card shows no free memory in
#                        A's /admin/status), a new request on A decodes on A's CPU, not placed on
#                        B's card (B refused no sequence: none was asked for)
#   drain_stream_on_b    the stream that ran during it ends with every token, decoded on B's
#                        card, moves 0
#   drain_resume         /admin/resume on B: A places on B's card again
#   drain_sigterm_waits  SIGTERM on B while A streams on its card: B stays up until the stream
#                        is done, then exits 0 ("drained", lent_seqs=0); the stream ends decoded
#                        on B with moves 0, and A saw no failed call, lost device or moved request
#   drain_timeout_cuts   the same with B's drain_timeout 1 s and a stream longer than that: B
#                        exits 3 at the timeout, saying it cut a lent sequence; A's stream still
#                        completes, moved to A's CPU
. tests/e2e/lib/serve.sh
. tests/e2e/lib/peers.sh
export TANDEM_CACHE_DIR="$T/cache"
KEY=e2e-peer-key-0123456789
NAMES="drain_lent_counted drain_no_new_on_b drain_stream_on_b drain_resume drain_sigterm_waits drain_timeout_cuts"
emu_ready "$NAMES" || exit 0

BPID=
trap '[ -n "$BPID" ] && kill -KILL "$BPID" 2>/dev/null; serve_cleanup' EXIT
node_a() {
    serve_start --devices cpu --node-name nodeA --peers "127.0.0.1:$BPORT" --peer-key "$KEY" --step-delay-ms 20
}
# stream N TOKENS: a stream of TOKENS tokens on A in the background (body $T/s.N, headers
# $T/s.N.h), its pid in SPID
stream() {
    curl -s -N -o "$T/s.$1" -D "$T/s.$1.h" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":$2,\"stream\":true,\"ignore_eos\":true,\"stream_options\":{\"include_usage\":true}}" \
        "$API/v1/completions" &
    SPID=$!
}
# ended N TOKENS DECODE MOVES: stream N gave TOKENS tokens, and its last chunk's tandem extension
# says decode=DECODE and MOVES moves
ended() {
    _t=$(grep '^data: {' "$T/s.$1" | sed 's/^data: //' | jq -s -c 'map(select(.usage != null)) | last
        | {n: .usage.completion_tokens, d: .tandem.devices, m: .tandem.moves}')
    echo "$_t" | jq -e --argjson n "$2" --arg d "$3" --argjson m "$4" \
        '.n == $n and (.d | test("decode=" + $d + "(;|$)")) and .m == $m' >/dev/null ||
        { echo "# stream $1: $_t" >&2; return 1; }
}
# wait_lent URL N: until that node's /admin/status says lent_sequences N (10 s at most)
wait_lent() {
    i=0
    while [ $i -lt 200 ]; do
        [ "$(curl -s "$1/admin/status" | jq -r .lent_sequences)" = "$2" ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}
# b_free_on_a ZERO: until A's /admin/status shows B's card with no free memory (ZERO 1) or some
# (ZERO 0): what A's heartbeat took from B (10 s at most)
b_free_on_a() {
    i=0
    while [ $i -lt 200 ]; do
        curl -s "$ADMIN/admin/status" | jq -e --argjson z "$1" \
            '.devices[] | select(.name == "nodeB/fpga-emu:0") | (.mem_free == 0) == ($z == 1)' >/dev/null && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

# ---------------------------------------------------------------- admin drain, resume
node_b 1 || { fail drain_start "node B did not start: $(tail -n 3 $T/b.1 $T/b.1.out)"; exit 0; }
node_a || { fail drain_start "node A did not start"; exit 0; }
stream 1 200
wait_lent "$BADMIN" 1 || echo "# B never held A's sequence" >&2
curl -s -X POST "$BADMIN/admin/drain" >"$T/drain.json"
check drain_lent_counted sh -c "jq -e '.draining and .lent == 1' $T/drain.json >/dev/null &&
    curl -s $BADMIN/admin/status | jq -e '.state == \"draining\" and .lent_sequences == 1' >/dev/null &&
    curl -s $BADMIN/metrics | grep -q '^tandem_peer_lent_sequences 1\$' || { cat $T/drain.json >&2; exit 1; }"
b_free_on_a 1 || echo "# A never saw B's card full" >&2
code=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":5}')
check drain_no_new_on_b sh -c "[ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=cpu' $T/hdr &&
    ! grep -q event=peer_seq_refused $BLOG"
wait $SPID
check drain_stream_on_b ended 1 200 nodeB/fpga-emu:0 0
curl -s -X POST "$BADMIN/admin/resume" >/dev/null
b_free_on_a 0 || echo "# A never saw B's card free again" >&2
code=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":5}')
check drain_resume sh -c "[ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=nodeB/fpga-emu:0' $T/hdr"

# ---------------------------------------------------------------- SIGTERM waits for A's stream
stream 2 150
wait_lent "$BADMIN" 1 || echo "# B never held A's sequence" >&2
kill -TERM $BPID
sleep 1 # before, B was gone within ~100 ms
alive=0
kill -0 $BPID 2>/dev/null && alive=1
wait $BPID
brc=$?
BPID=
wait $SPID
e=0
ended 2 150 nodeB/fpga-emu:0 0 && e=1
check drain_sigterm_waits sh -c "[ $alive = 1 ] && [ $brc = 0 ] && [ $e = 1 ] &&
    grep -q 'event=shutdown reason=drained exit=0 in_flight=0 lent_seqs=0' $BLOG &&
    ! grep -Eq 'event=(peer_call_failed|peer_device_lost|request_moved)' $LOG ||
    { echo '# alive $alive rc $brc' >&2; grep -E 'event=(drain|shutdown)' $BLOG >&2; exit 1; }"
serve_stop

# ---------------------------------------------------------------- drain_timeout cuts it
node_b 2 --drain-timeout 1 || { fail drain_timeout_cuts "node B did not start again"; exit 0; }
node_a || { fail drain_timeout_cuts "node A did not start again"; exit 0; }
stream 3 300
wait_lent "$BADMIN" 1 || echo "# B never held A's sequence" >&2
kill -TERM $BPID
wait $BPID
brc=$?
BPID=
wait $SPID
e=0
ended 3 300 cpu 1 && e=1
check drain_timeout_cuts sh -c "[ $brc = 3 ] && [ $e = 1 ] &&
    grep -q 'event=shutdown reason=\"drain timeout: lent sequences cut (their nodes move them)\" exit=3 in_flight=0 lent_seqs=1' $BLOG ||
    { echo '# rc $brc' >&2; grep -E 'event=(drain|shutdown)' $BLOG >&2; exit 1; }"
serve_stop
