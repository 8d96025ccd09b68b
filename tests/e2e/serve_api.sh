#!/bin/sh
# tandem serve, happy paths with curl: probes, /v1/models, the golden greedy text of every
# stories260K reference (tests/data/golden: transformers' float64 greedy decode) through both
# prompt forms, chat, streaming (SSE framing, [DONE], include_usage), n choices, logprobs in
# OpenAI's shapes, stop strings, and the x-tandem-devices header.
. tests/e2e/lib/serve.sh

serve_start || { fail serve_api_start "daemon did not start"; exit 0; }

check api_health [ "$(get "$API/health")" = 200 ]
check api_ready [ "$(get "$API/ready")" = 200 ]
check api_models sh -c "[ \"\$(curl -s $API/v1/models | jq -r '.data[0].id')\" = stories260K ]"

# Golden greedy text: max_tokens = len(greedy_ids), temperature 0.
for g in tests/data/golden/stories260K/*.json; do
    name=$(basename "$g" .json)
    n=$(jq '.greedy_ids | length' "$g")
    want=$(golden_completion "$g")
    body=$(jq -c --argjson n "$n" '{model: "stories260K", prompt: .text, max_tokens: $n, temperature: 0}' "$g")
    code=$(post /v1/completions "$body")
    got=$(jqb '.choices[0].text')
    if [ "$code" = 200 ] && [ "$got" = "$want" ]; then ok "api_golden_text_$name"; else
        fail "api_golden_text_$name" "status $code, got: $(head -c 200 "$T/body")"; fi
    # the same prompt as token ids (the golden ids include bos)
    body=$(jq -c --argjson n "$n" '{prompt: .ids, max_tokens: $n, temperature: 0}' "$g")
    code=$(post /v1/completions "$body")
    got=$(jqb '.choices[0].text')
    if [ "$code" = 200 ] && [ "$got" = "$want" ]; then ok "api_golden_ids_$name"; else
        fail "api_golden_ids_$name" "status $code, got: $(head -c 200 "$T/body")"; fi
done
g=tests/data/golden/stories260K/once.json
n=$(jq '.greedy_ids | length' "$g")
post /v1/completions "$(jq -c --argjson n "$n" '{prompt: .text, max_tokens: $n, temperature: 0}' "$g")" >/dev/null
check api_usage [ "$(jqb '.usage.prompt_tokens'),$(jqb '.usage.completion_tokens'),$(jqb '.usage.total_tokens')" = "5,$n,$((5 + n))" ]
check api_finish_length [ "$(jqb '.choices[0].finish_reason')" = length ]
check api_object_id sh -c "jq -e '.object == \"text_completion\" and (.id|startswith(\"cmpl-\")) and (.created > 0)' $T/body >/dev/null"
check api_devices_header grep -qi '^x-tandem-devices: prefill=cpu; decode=cpu' "$T/hdr"

# Streaming: the concatenated deltas equal the whole text; [DONE] closes; usage chunk last.
body='{"prompt":"Once upon a time","max_tokens":24,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}'
curl -s -N -D "$T/shdr" -H 'Content-Type: application/json' -d "$body" "$API/v1/completions" >"$T/sse"
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' >/dev/null
whole=$(jqb '.choices[0].text')
streamed=$(grep '^data: {' "$T/sse" | sed 's/^data: //' | jq -j 'select(.choices|length>0) | .choices[0].text')
check api_stream_text [ "$streamed" = "$whole" ]
check api_stream_done [ "$(tail -n 2 "$T/sse" | head -n 1)" = "data: [DONE]" ]
check api_stream_usage sh -c "grep '^data: {' $T/sse | tail -n 1 | sed 's/^data: //' | jq -e '.choices == [] and .usage.completion_tokens == 24' >/dev/null"
check api_stream_content_type grep -qi '^content-type: text/event-stream' "$T/shdr"
check api_stream_devices grep -qi '^x-tandem-devices: prefill=cpu; decode=cpu' "$T/shdr"
check api_stream_finish sh -c "grep '^data: {' $T/sse | sed 's/^data: //' | jq -s -e '[.[] | .choices[]? | .finish_reason | select(. != null)] == [\"length\"]' >/dev/null"

# Chat: non-streamed and streamed agree; the role comes first in the stream.
chat='{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":20,"temperature":0}'
check api_chat_status [ "$(post /v1/chat/completions "$chat")" = 200 ]
ctext=$(jqb '.choices[0].message.content')
check api_chat_shape sh -c "jq -e '.object == \"chat.completion\" and .choices[0].message.role == \"assistant\" and (.id|startswith(\"chatcmpl-\"))' $T/body >/dev/null"
chat_s=$(echo "$chat" | jq -c '. + {stream: true}')
curl -s -N -H 'Content-Type: application/json' -d "$chat_s" "$API/v1/chat/completions" >"$T/csse"
cstream=$(grep '^data: {' "$T/csse" | sed 's/^data: //' | jq -j '.choices[0].delta.content // ""')
check api_chat_stream_text [ "$cstream" = "$ctext" ]
check api_chat_stream_role sh -c "grep '^data: {' $T/csse | head -n 1 | sed 's/^data: //' | jq -e '.object == \"chat.completion.chunk\" and .choices[0].delta.role == \"assistant\"' >/dev/null"
check api_chat_stream_done grep -q '^data: \[DONE\]$' "$T/csse"
# The fallback template joins contents after bos: same tokens as the text prompt.
check api_chat_equals_completion [ "$ctext" = "$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":20,"temperature":0}' >/dev/null; jqb '.choices[0].text')" ]

# n choices: indices 0..n-1, greedy choices identical, usage sums the choices.
post /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"n":3}' >/dev/null
check api_n_choices sh -c "jq -e '[.choices[].index] == [0,1,2] and (.choices|map(.text)|unique|length) == 1 and .usage.completion_tokens == 24' $T/body >/dev/null"
# seeded sampling is reproducible
post /v1/completions '{"prompt":"Once upon a time","max_tokens":16,"temperature":1,"seed":42,"n":2}' >/dev/null
s1=$(jq -c '[.choices[].text]' "$T/body")
post /v1/completions '{"prompt":"Once upon a time","max_tokens":16,"temperature":1,"seed":42,"n":2}' >/dev/null
check api_seed_reproducible [ "$s1" = "$(jq -c '[.choices[].text]' "$T/body")" ]

# logprobs: completions (legacy shape) and chat (content list), greedy token = top alternative.
post /v1/completions '{"prompt":"Once upon a time","max_tokens":5,"temperature":0,"logprobs":3}' >/dev/null
check api_logprobs_completions sh -c "jq -e '.choices[0].logprobs as \$l | (\$l.tokens|length) == 5 and (\$l.token_logprobs|length) == 5 and (\$l.top_logprobs|length) == 5 and (\$l.text_offset|length) == 5 and (\$l.top_logprobs[0]|length) == 3 and (\$l.token_logprobs[0] <= 0) and (\$l.top_logprobs[0][\$l.tokens[0]] == \$l.token_logprobs[0])' $T/body >/dev/null"
check api_logprobs_tokens_concat [ "$(jq -j '.choices[0].logprobs.tokens[]' "$T/body" | sed 's/^ //')" = "$(jqb '.choices[0].text')" ]
# text_offset: each token's place in the text, also while a stop string's prefix holds the text
# back (" on a" could start "on a x": offsets were the text sent so far, [0,3,3,12,13])
post /v1/completions '{"prompt":"Once","max_tokens":5,"temperature":0,"logprobs":0,"stop":["on a x"]}' >/dev/null
check api_logprobs_offsets_while_held sh -c "jq -e '.choices[0].logprobs as \$l | \$l.text_offset == ([0] + [foreach \$l.tokens[] as \$t (0; . + (\$t | utf8bytelength))] | .[:-1]) and (\$l.text_offset | length) == 5' $T/body >/dev/null"
# and where the text drops the first token's space (an empty prompt: "Once upon", not " Once
# upon"): each offset points at its token's text, the first one's space left out
post /v1/completions '{"prompt":"","max_tokens":4,"temperature":0,"logprobs":0}' >/dev/null
check api_logprobs_offsets_first_space_dropped sh -c "jq -e '.choices[0] as \$c | \$c.logprobs as \$l | [range(\$l.tokens | length) as \$i | \$l.tokens[\$i] as \$t | \$l.text_offset[\$i] as \$o | (\$c.text[\$o:\$o + (\$t | length)] == \$t) or ((\$t | startswith(\" \")) and \$c.text[\$o:\$o + (\$t | length) - 1] == \$t[1:])] | all and (\$c.text | startswith(\" \") | not)' $T/body >/dev/null"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4,"temperature":0,"logprobs":true,"top_logprobs":2}' >/dev/null
check api_logprobs_chat sh -c "jq -e '.choices[0].logprobs.content as \$c | (\$c|length) == 4 and (\$c[0].top_logprobs|length) == 2 and (\$c[0].bytes|type) == \"array\" and \$c[0].top_logprobs[0].token == \$c[0].token' $T/body >/dev/null"
curl -s -N -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":1,"stream":true}' "$API/v1/chat/completions" >"$T/lsse"
check api_logprobs_chat_stream sh -c "grep '^data: {' $T/lsse | sed 's/^data: //' | jq -s -e '[.[] | .choices[0].logprobs.content[]?] | length == 3' >/dev/null"

# stop strings: the text ends before the stop, finish_reason stop.
post /v1/completions '{"prompt":"Once upon a time","max_tokens":64,"temperature":0,"stop":["Lily"]}' >/dev/null
check api_stop_string sh -c "jq -e '.choices[0].finish_reason == \"stop\" and .choices[0].text == \", there was a little girl named \"' $T/body >/dev/null"

# bodies over 16 KiB are prepared on a thread-pool thread: same answers
pad=$(python3 -c 'print(" " * 20000)')
post /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0}$pad" >/dev/null
big=$(jqb '.choices[0].text')
post /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}' >/dev/null
check api_large_body_same_text [ "$big" = "$(jqb '.choices[0].text')" ]
long=$(python3 -c 'import json; print(json.dumps({"prompt": "Once upon a time " * 1500, "max_tokens": 4}))')
check api_large_prompt_context [ "$(post /v1/completions "$long")" = 400 ]
check api_large_prompt_code [ "$(jqb '.error.code')" = context_length_exceeded ]

serve_stop
check api_exit_zero [ "$RC" = 0 ]
check api_request_log grep -q 'event=request id=cmpl-.* status=200 .*prefill=cpu decode=cpu' "$LOG"

# keep-alive comments while a (slow) prefill runs: the headers went out at placement
serve_start --step-delay-ms 400 --sse-keepalive 0.1 || { fail api_keepalive_start "daemon did not start"; exit 0; }
curl -s -N -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":1,"stream":true}' "$API/v1/completions" >"$T/ka"
check api_sse_keepalive grep -q '^: keep-alive$' "$T/ka"
check api_sse_keepalive_then_done grep -q '^data: \[DONE\]$' "$T/ka"
serve_stop
