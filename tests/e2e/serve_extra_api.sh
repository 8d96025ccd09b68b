#!/bin/sh
# The routes beside completions and chat: GET /v1/models/{id}, echo and prompt arrays through the
# official OpenAI Node client; llama.cpp-style POST /tokenize, /detokenize and /apply-template with curl,
# checked against the tokenizer's own expectations (tests/data/golden: transformers' ids) and a
# round trip.
. tests/e2e/lib/serve.sh
serve_start || { fail extra_start "daemon did not start"; exit 0; }
AUTH="Authorization: Bearer sk-test-key"
G=tests/data/golden/stories260K/once.json
text=$(jq -r .text $G)
want=$(jq -c .ids $G)
got=$(curl -s -H "$AUTH" "$API/tokenize" -d "$(jq -nc --arg t "$text" '{content: $t}')" | jq -c .tokens)
check extra_tokenize [ "$got" = "$want" ]
pieces=$(curl -s -H "$AUTH" "$API/tokenize" -d '{"content": "Once upon", "add_special": false, "with_pieces": true}' | jq -r '[.tokens[].piece] | join("")')
check extra_tokenize_pieces [ "$pieces" = " Once upon" ]
# the ids without the BOS (special tokens are text here, as in llama.cpp's /detokenize)
back=$(curl -s -H "$AUTH" "$API/detokenize" -d "{\"tokens\": $(jq -c '.ids[1:]' $G)}" | jq -r .content)
check extra_detokenize [ "$back" = "$text" ]
code=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$API/detokenize" -d '{"tokens": [99999]}')
check extra_detokenize_bad_id [ "$code" = 400 ]
prompt=$(curl -s -H "$AUTH" "$API/apply-template" -d '{"messages": [{"role": "user", "content": "Hi"}]}' | jq -r .prompt)
check extra_apply_template [ -n "$prompt" ] && case "$prompt" in *Hi*) ok extra_apply_template_has_message ;; *) fail extra_apply_template_has_message "$prompt" ;; esac
code=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$API/tokenize")
check extra_tokenize_get_refused [ "$code" = 405 ]
NPM_DIR=build/npm
if [ -d "$NPM_DIR/node_modules/openai" ]; then
    NODE_PATH=$NPM_DIR/node_modules node tests/e2e/extra_client.js "$API/v1" $G \
        tests/data/golden/stories260K/lily.json tests/data/golden/stories260K/sun.json
else
    echo "ok extra_node # SKIP the openai package is not installed (make deps)"
fi
serve_stop
check extra_exit_zero [ "$RC" = 0 ]

# echo with logprobs over a prompt longer than one prefill chunk of logits takes (at Llama-2's
# 32000-token vocabulary, 262 rows: scheduler/sched_prefill.c's PROMPT_LP_BYTES): the prompt's
# logprobs equal the log-softmax of `tandem logits` (the same CPU backend, whole prompt in one
# prefill) on both sides of the chunk boundary, within the CPU's logit tolerance (1e-3).
M2=models/tiny-llama2-mha
ids=$(python3 -c 'print(",".join(["1"] + [str(100 + (i * 37) % 3000) for i in range(299)]))')
if "$TANDEM" logits --model $M2 --ids "$ids" --out "$T/ref.f32" >/dev/null 2>&1 && serve_start --model $M2; then
    curl -s -H "$AUTH" "$API/v1/completions" -d "{\"prompt\": [$ids], \"max_tokens\": 1, \"temperature\": 0, \"echo\": true, \"logprobs\": 1}" >"$T/long.json"
    res=$(python3 - "$T/long.json" "$T/ref.f32" "$ids" <<'PY'
import json, math, struct, sys
lp = json.load(open(sys.argv[1]))["choices"][0]["logprobs"]["token_logprobs"]
ids = [int(x) for x in sys.argv[3].split(",")]
V = 32000
worst, n = 0.0, 0
with open(sys.argv[2], "rb") as f:
    for i in list(range(1, 6)) + list(range(250, 300)):
        f.seek(4 * V * (i - 1))
        row = struct.unpack("<%df" % V, f.read(4 * V))
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        worst = max(worst, abs(lp[i] - (row[ids[i]] - lse)))
        n += 1
print("ok" if lp[0] is None and len(lp) == 301 and worst <= 1e-3 else "bad", n, worst)
PY
)
    case "$res" in ok*) ok "extra_echo_logprobs_chunked # $res" ;; *) fail extra_echo_logprobs_chunked "$res" ;; esac
    serve_stop
else
    fail extra_echo_logprobs_chunked "tandem logits or the daemon on $M2 did not start"
fi
