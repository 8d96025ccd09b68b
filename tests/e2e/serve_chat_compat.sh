#!/bin/sh
# What real OpenAI clients send and expect that the API audit (audapi) found tandem broke on,
# with curl against the chat templates we ship (tiny-llama2-mha: random weights, so any text that
# matters is forced with the "grammar" extension):
#   - history echoed back with null keys / empty tool_calls (Llama-3.1, Hermes-3 raised);
#   - the developer role (Mistral raised); a tool without a description or parameters (Hermes-3
#     raised); the deprecated functions API (ignored: no call came back);
#   - arguments as a JSON string reach the template as the object (/apply-template shows it);
#   - Hermes <tool_call> after text with tool_choice auto: the stream gives the same content,
#     calls and finish_reason as the whole response (the stream lost the call);
#   - a constrained call cut by max_tokens: content null, not grammar markup; refusal null;
#   - context errors in OpenAI's words; GET /v1/models/{id} with a percent-encoded "/"; the
#     models' created is the daemon's start; /v1/completions with max_tokens 0 scores the prompt.
. tests/e2e/lib/serve.sh
# jqt FILTER: the last body passes FILTER
jqt() { jq -e "$1" "$T/body" >/dev/null; }

TOOLS='"tools":[{"type":"function","function":{"name":"get_weather","description":"The weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"]}}}]'
NULLS='{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello there!","tool_calls":null,"function_call":null,"refusal":null,"audio":null,"annotations":null,"name":null},{"role":"user","content":"bye"}],"max_tokens":3'
EMPTY='{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello there!","tool_calls":[]},{"role":"user","content":"bye"}],"max_tokens":3'

# --- Llama-3.1
serve_start --model models/tiny-llama2-mha --chat-template tests/data/chat_templates/llama-3.1-instruct.jinja ||
    { fail compat_llama31_start "daemon did not start"; exit 0; }
check compat_llama31_null_keys [ "$(post /v1/chat/completions "$NULLS}")" = 200 ]
check compat_llama31_empty_tool_calls [ "$(post /v1/chat/completions "$EMPTY}")" = 200 ]
check compat_llama31_null_keys_with_tools [ "$(post /v1/chat/completions "$NULLS,$TOOLS}")" = 200 ]
# arguments as OpenAI sends them (a string) render as the object they hold
post /apply-template '{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"20C"}],'"$TOOLS"'}' >/dev/null
check compat_llama31_arguments_object sh -c "jq -r .prompt '$T/body' | grep -qF '\"parameters\": {\"city\": \"Paris\"}'"
# developer renders as system
post /apply-template '{"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":"hi"}]}' >/dev/null
dev=$(jqb .prompt)
post /apply-template '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}' >/dev/null
check compat_llama31_developer_is_system [ "$dev" = "$(jqb .prompt)" ]
# a constrained call cut short: no markup as content (vLLM: content null, no calls)
post /v1/chat/completions '{"messages":[{"role":"user","content":"weather?"}],'"$TOOLS"',"tool_choice":"required","max_tokens":4}' >/dev/null
check compat_required_cut_content_null jqt '.choices[0].finish_reason == "length" and .choices[0].message.content == null and (.choices[0].message | has("tool_calls") | not)'
check compat_refusal_null jqt '.choices[0].message | has("refusal") and .refusal == null'
# a chat stream's first chunk only says who speaks (OpenAI, vLLM): content "", logprobs [] when
# asked; the text starts in the next one (openai-node counted a first chunk's logprobs twice)
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"logprobs":true}' >/dev/null
sed -n 's/^data: \({.*\)$/\1/p' "$T/body" | head -n 2 >"$T/first2"
check compat_stream_role_chunk sh -c "head -n 1 '$T/first2' | jq -e '.choices[0].delta == {\"role\": \"assistant\", \"content\": \"\"} and .choices[0].logprobs.content == []' >/dev/null &&
    tail -n 1 '$T/first2' | jq -e '(.choices[0].delta | has(\"role\") | not) and (.choices[0].logprobs.content | length) >= 1' >/dev/null"
# OpenAI's wording of a context error (LiteLLM matches its first sentence); the code is kept
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4000}' >/dev/null
check compat_context_wording jqt '.error.code == "context_length_exceeded" and (.error.message | test("^This model.s maximum context length is [0-9]+ tokens. However, you requested [0-9]+ tokens \\([0-9]+ in the messages, 4000 in the completion\\)"))'
# completions' max_tokens 0 (OpenAI's minimum): with echo and logprobs it scores the prompt
post /v1/completions '{"prompt":"Once upon a time","max_tokens":0,"echo":true,"logprobs":1}' >/dev/null
check compat_completions_max_tokens_0 jqt '.choices[0].text == "Once upon a time" and .choices[0].finish_reason == "length" and .usage.completion_tokens == 0 and (.choices[0].logprobs.tokens | length) == .usage.prompt_tokens and .choices[0].logprobs.token_logprobs[0] == null and (.choices[0].logprobs.token_logprobs[1:] | all(. <= 0))'
check compat_chat_max_tokens_0_refused [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}')" = 400 ]
serve_stop

# --- Mistral v0.3: developer, OpenAI-style ids in turn 2, and ours are 9 alphanumerics
serve_start --model models/tiny-llama2-mha --chat-template tests/data/chat_templates/mistral-7b-instruct-v0.3.jinja \
    --served-model-name meta-llama/Tiny-1B ||
    { fail compat_mistral_start "daemon did not start"; exit 0; }
check compat_mistral_developer [ "$(post /v1/chat/completions '{"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":"hi"}],"max_tokens":3}')" = 200 ]
check compat_mistral_null_keys [ "$(post /v1/chat/completions "$NULLS}")" = 200 ]
post /v1/chat/completions '{"messages":[{"role":"user","content":"weather?"}],'"$TOOLS"',"tool_choice":"required","parallel_tool_calls":false,"max_tokens":300,"temperature":0}' >/dev/null
id=$(jqb '.choices[0].message.tool_calls[0].id')
check compat_mistral_call_id_9 sh -c "echo '$id' | grep -qE '^[A-Za-z0-9]{9}\$'"
n=0
for cid in "$id" call_ey3LKEANhmkICdkcW3NTMrqL; do
    n=$((n + 1))
    code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"'"$cid"'","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"'"$cid"'","content":"20C"}],'"$TOOLS"',"max_tokens":3}')
    check "compat_mistral_turn2_id$n" [ "$code" = 200 ]
done
# the deprecated functions API: answered with message.function_call, finish function_call; its
# history (function_call, a function message) renders
F='"functions":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"]}}]'
post /v1/chat/completions '{"messages":[{"role":"user","content":"weather?"}],'"$F"',"function_call":{"name":"get_weather"},"max_tokens":300,"temperature":0}' >/dev/null
check compat_functions_api jqt '.choices[0].finish_reason == "function_call" and .choices[0].message.function_call.name == "get_weather" and (.choices[0].message.function_call.arguments | fromjson | .city | type) == "string" and (.choices[0].message | has("tool_calls") | not)'
post /v1/chat/completions '{"messages":[{"role":"user","content":"weather?"}],'"$F"',"function_call":{"name":"get_weather"},"max_tokens":300,"temperature":0,"stream":true}' >/dev/null
check compat_functions_api_stream sh -c "sed -n 's/^data: //p' '$T/body' | grep -v DONE | jq -s -e '[.[].choices[0]] | (map(.delta.function_call.name // empty) == [\"get_weather\"]) and (map(.finish_reason // empty) == [\"function_call\"])' >/dev/null"
check compat_functions_api_history [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"role":"function","name":"get_weather","content":"20C"}],'"$F"',"max_tokens":3}')" = 200 ]
# GET /v1/models/{id}: the client encodes the "/" of the name
check compat_model_slash_encoded [ "$(get "$API/v1/models/meta-llama%2FTiny-1B")" = 200 ]
check compat_model_slash_id [ "$(jqb .id)" = meta-llama/Tiny-1B ]
c1=$(jqb .created)
# the Node client itself (it encodes the "/" as %2F)
if npm_need compat_node_retrieve openai; then
    got=$(NODE_PATH=build/npm/node_modules node -e '
        const m = require("openai"); const OpenAI = m.OpenAI || m.default || m;
        new OpenAI({ baseURL: process.argv[1], apiKey: "k", maxRetries: 0 }).models.retrieve("meta-llama/Tiny-1B")
            .then((r) => console.log(r.id), (e) => console.log(`error ${e.status} ${e.message}`));' "$API/v1" 2>&1)
    check compat_node_models_retrieve_slash [ "$got" = meta-llama/Tiny-1B ]
fi
check compat_model_slash_plain [ "$(get "$API/v1/models/meta-llama/Tiny-1B")" = 200 ]
check compat_model_bad_escape [ "$(get "$API/v1/models/meta-llama%2")" = 400 ]
check compat_model_nul_escape [ "$(get "$API/v1/models/a%00b")" = 400 ]
check compat_model_unknown [ "$(get "$API/v1/models/meta-llama%2FOther")" = 404 ]
sleep 1.1
get "$API/v1/models" >/dev/null
check compat_models_created_is_start sh -c "[ '$(jqb '.data[0].created')' = '$c1' ] && [ '$c1' -le $(date +%s) ]"
serve_stop

# --- Hermes-3: tools without a description, text before <tool_call> streamed and whole alike
serve_start --model models/tiny-llama2-mha --chat-template tests/data/chat_templates/hermes-3-llama-3.1-tool-use.jinja ||
    { fail compat_hermes_start "daemon did not start"; exit 0; }
check compat_hermes_null_keys_with_tools [ "$(post /v1/chat/completions "$NULLS,$TOOLS}")" = 200 ]
check compat_hermes_tool_without_description [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"max_tokens":3}')" = 200 ]
check compat_hermes_tool_without_parameters [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","description":"d"}}],"max_tokens":3}')" = 200 ]
G='"grammar":"root ::= \"Let me check.\\n<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\"}}\\n</tool_call>\""'
BODY='{"messages":[{"role":"user","content":"weather?"}],'"$TOOLS"','"$G"',"max_tokens":300,"temperature":0'
post /v1/chat/completions "$BODY}" >/dev/null
jq -c '.choices[0] | {content: .message.content, calls: [.message.tool_calls[] | {name: .function.name, arguments: .function.arguments}], finish: .finish_reason}' "$T/body" >"$T/whole"
check compat_hermes_text_then_call_whole sh -c "jq -e '.content == \"Let me check.\\n\" and .finish == \"tool_calls\" and (.calls | length) == 1' '$T/whole' >/dev/null"
post /v1/chat/completions "$BODY,\"stream\":true}" >/dev/null
sed -n 's/^data: //p' "$T/body" | grep -v '^\[DONE\]' | jq -s -c '
    [.[].choices[]] as $c
    | {content: ([$c[] | .delta.content // empty] | join("")),
       calls: [$c[] | .delta.tool_calls // [] | .[] | {name: .function.name, arguments: .function.arguments}],
       finish: ([$c[] | .finish_reason // empty] | last)}' >"$T/stream"
check compat_hermes_text_then_call_stream_equals_whole cmp -s "$T/whole" "$T/stream"
# the text went out as it came (several chunks), not held to the end with the call
check compat_hermes_text_streamed_as_it_comes sh -c "[ \$(sed -n 's/^data: //p' '$T/body' | grep -v DONE | jq -r '.choices[0].delta.content // empty' | grep -c .) -ge 2 ]"
serve_stop
