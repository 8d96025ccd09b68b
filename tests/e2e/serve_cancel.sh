#!/bin/sh
# tandem serve: a client that disconnects cancels its request, and its sequence slot and KV are
# free within a second — streamed, non-streamed, and while still waiting in the queue.
. tests/e2e/lib/serve.sh

serve_start --max-running 1 --step-delay-ms 50 || { fail cancel_start "daemon did not start"; exit 0; }

running() { curl -s "$ADMIN/metrics" | sed -n 's/^tandem_num_requests_running \([0-9]*\)$/\1/p'; }
waiting() { curl -s "$ADMIN/metrics" | sed -n 's/^tandem_num_requests_waiting \([0-9]*\)$/\1/p'; }
kv_used() { curl -s "$ADMIN/metrics" | sed -n 's/^tandem_device_memory_used_bytes{device="cpu",kind="cpu"} \([0-9]*\)$/\1/p'; }

# free_within NAME: after the client was killed, running and KV go to 0 within 1 s.
free_within() {
    i=0
    while [ $i -lt 20 ]; do
        [ "$(running)" = 0 ] && [ "$(waiting)" = 0 ] && [ "$(kv_used)" = 0 ] && { ok "$1"; return; }
        sleep 0.05
        i=$((i + 1))
    done
    fail "$1" "running=$(running) waiting=$(waiting) kv=$(kv_used) after 1 s"
}

for mode in stream whole; do
    s=false
    [ $mode = stream ] && s=true
    # 400 tokens at >= 50 ms a step would take 20 s: only a cancel ends it early.
    curl -s -N -o "$T/out.$mode" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,\"stream\":$s}" "$API/v1/completions" &
    c=$!
    i=0
    while [ "$(running)" != 1 ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i + 1)); done
    check "cancel_${mode}_was_running" [ "$(running)" = 1 ]
    # the worker reserves the KV when it starts the request (after its step delay)
    i=0
    while [ "$(kv_used)" = 0 ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i + 1)); done
    check "cancel_${mode}_holds_kv" [ "$(kv_used)" -gt 0 ]
    sleep 0.2
    kill -KILL $c
    wait $c 2>/dev/null
    free_within "cancel_${mode}_frees_slot"
done

# a waiting request whose client leaves is dropped from the queue
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":400}' "$API/v1/completions" &
c1=$!
sleep 0.3
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":2}' "$API/v1/completions" &
c2=$!
sleep 0.3
check cancel_queued_was_waiting [ "$(waiting)" = 1 ]
kill -KILL $c2
wait $c2 2>/dev/null
i=0
while [ "$(waiting)" != 0 ] && [ $i -lt 20 ]; do sleep 0.05; i=$((i + 1)); done
check cancel_queued_dropped [ "$(waiting)" = 0 ]
kill -KILL $c1
wait $c1 2>/dev/null
free_within cancel_first_frees_slot
check cancel_logged grep -q 'error=client_closed' "$LOG"
# the daemon still serves
check cancel_then_serves [ "$(post /v1/completions '{"prompt":"a","max_tokens":2}')" = 200 ]
serve_stop
check cancel_exit_zero [ "$RC" = 0 ]
