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
