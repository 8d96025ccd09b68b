#!/bin/sh
# tandem serve, every error row of proto's table as a client sees it: status, OpenAI error JSON
# ({"error":{"message","type","param","code"}}), and the headers that go with some rows
# (Allow, Retry-After). Also: context_length_exceeded on a stream is a JSON 400 before any SSE
# byte, no bad input ever gets a 500, and a device's fault gets 500 device_error.
. tests/e2e/lib/serve.sh

# err NAME WANT_STATUS WANT_CODE PATH BODY: checks status, code and the error object's shape.
err() {
    name=$1
    want=$2
    code=$3
    path=$4
    body=$5
    got=$(post "$path" "$body")
    if [ "$got" = "$want" ] && jq -e --arg c "$code" '.error.code == $c and (.error.message|length) > 0 and (.error.type|length) > 0 and has("error") and (.error|has("param"))' "$T/body" >/dev/null 2>&1; then
        ok "$name"
    else
        fail "$name" "status $got (want $want), body $(head -c 300 "$T/body")"
    fi
}

serve_start --max-body-bytes 4096 || { fail errors_start "daemon did not start"; exit 0; }

err err_invalid_json 400 invalid_json /v1/completions '{"prompt": "a",'
err err_not_object 400 invalid_json /v1/completions '["prompt"]'
err err_duplicate_key 400 invalid_json /v1/completions '{"prompt":"a","max_tokens":2,"max_tokens":3}'
deep=$(python3 -c 'print("{\"prompt\":\"a\",\"x\":" + "["*1000 + "]"*1000 + "}")')
err err_deep_nesting 400 invalid_json /v1/completions "$deep"
err err_type 400 invalid_type /v1/completions '{"prompt":"a","max_tokens":"5"}'
err err_range 400 invalid_value /v1/completions '{"prompt":"a","temperature":3}'
err err_missing 400 missing_required_parameter /v1/chat/completions '{"model":"stories260K"}'
err err_unsupported 400 unsupported_parameter /v1/completions '{"prompt":"a","suffix":"b"}'
err err_bad_token_id 400 invalid_value /v1/completions '{"prompt":[1,99999]}'
ids=$(python3 -c 'print(",".join(["403"]*500))')
err err_context_length 400 context_length_exceeded /v1/completions "{\"prompt\":[1,$ids],\"max_tokens\":100}"
err err_context_length_chat 400 context_length_exceeded /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":600}'
# on a stream: a JSON 400, not an event stream
code=$(post /v1/completions "{\"prompt\":[1,$ids],\"max_tokens\":100,\"stream\":true}")
check err_context_length_stream_before_sse sh -c "[ $code = 400 ] && grep -qi '^content-type: application/json' $T/hdr && ! grep -q '^data:' $T/body"
check err_context_length_param [ "$(jqb '.error.param')" = prompt ]
err err_unknown_model 404 model_not_found /v1/completions '{"model":"gpt-4","prompt":"a"}'
err err_unknown_route 404 unknown_url /v1/embeddings '{"input":"a"}'
code=$(get "$API/v1/completions")
check err_method_get_on_post [ "$code" = 405 ]
check err_method_allow grep -qi '^allow: POST' "$T/hdr"
check err_method_code [ "$(jqb '.error.code')" = method_not_allowed ]
code=$(post /health '{}')
check err_method_post_on_health [ "$code" = 405 ]
big=$(python3 -c 'import json; print(json.dumps({"prompt": "x" * 5000}))')
err err_body_too_large 413 request_too_large /v1/completions "$big"
# chunked body over the limit (no Content-Length)
code=$(printf '%s' "$big" | curl -s -o "$T/body" -w '%{http_code}' -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @- "$API/v1/completions")
check err_body_too_large_chunked [ "$code" = 413 ]
# conflicting framing headers (request smuggling): 400 and the connection closes
python3 - "$API" >"$T/smuggle" <<'PY'
import socket, sys
host, port = sys.argv[1].split("//")[1].split(":")
for req in [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n{\"prompt\":1}\r\n0\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\nContent-Length: 14\r\n\r\n{\"prompt\":\"a\"}"]:
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(req)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    print(data.split(b"\r\n")[0].decode())
PY
check err_smuggling_cl_te [ "$(sed -n 1p "$T/smuggle")" = "HTTP/1.1 400 Bad Request" ]
check err_smuggling_two_cl [ "$(sed -n 2p "$T/smuggle")" = "HTTP/1.1 400 Bad Request" ]

# draining: 503 for new requests and /ready, back after /admin/resume
curl -s -X POST "$ADMIN/admin/drain" >/dev/null
err err_draining 503 draining /v1/completions '{"prompt":"a","max_tokens":1}'
check err_ready_draining [ "$(get "$API/ready")" = 503 ]
curl -s -X POST "$ADMIN/admin/resume" >/dev/null
check err_resumed [ "$(post /v1/completions '{"prompt":"a","max_tokens":1}')" = 200 ]
check err_no_500 sh -c "! grep -q 'status=500' $LOG"
serve_stop

# queue full: one sequence at a time, no waiting room, a slow device (step_delay_ms)
serve_start --max-running 1 --max-waiting 0 --step-delay-ms 150 || { fail errors_start_queue "daemon did not start"; exit 0; }
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":6}' "$API/v1/completions" &
bg=$!
sleep 0.3
err err_queue_full 429 queue_full /v1/completions '{"prompt":"Once","max_tokens":1}'
check err_retry_after grep -qi '^retry-after: 1' "$T/hdr"
wait $bg
check err_queue_frees [ "$(post /v1/completions '{"prompt":"Once","max_tokens":1}')" = 200 ]
serve_stop
check err_exit_zero [ "$RC" = 0 ]

# a device's fault that no other device can take over: the device's own status (an accel code,
# one of the three disjoint ranges of scheduler/sched.h's one error space) reaches the client as
# 500 device_error, neither the request's deadline (504) nor "not ready" (503), and the log
# names it. One emulated card that prefills and decodes alone (TANDEM_EMU_FAULT: it disappears
# inside the first request; U is the number of runs its open makes, as serve_kv_integrity.sh
# finds it).
export TANDEM_CACHE_DIR="$T/cache"
if emu_ready "err_device_fault err_device_fault_message err_device_fault_logged"; then
    U=$(emu_upload_runs)
    if TANDEM_EMU_FAULT="card=0,run=$((U + 30)),kind=gone" serve_start --devices fpga-emu:0 --fpga-prefill 1; then
        err err_device_fault 500 device_error /v1/completions '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}'
        check err_device_fault_message grep -q 'fpga-emu:0 failed (device failed)' "$T/body"
        check err_device_fault_logged grep -q 'event=request_failed .* error="device failed"' "$LOG"
        serve_stop
    else
        fail err_device_fault "daemon did not start"
    fi
fi
