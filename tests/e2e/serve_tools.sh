#!/bin/sh
# Tool calls (tools, tool_choice none / auto / required / named, parallel_tool_calls, streamed
# deltas) through the official OpenAI Node client, for each chat template family we ship with
# tool support: Hermes-3 and Qwen2.5 (<tool_call>), Llama-3.1 (JSON), Mistral v0.3 ([TOOL_CALLS]).
# The daemon serves tiny-llama2-mha (a 4K context holds the templates' tool preambles) with
# --chat-template; Ajv checks every call's arguments against its function's parameters.
. tests/e2e/lib/serve.sh

NPM_DIR=build/npm
if [ ! -d "$NPM_DIR/node_modules/openai" ] || [ ! -d "$NPM_DIR/node_modules/ajv" ]; then
    mkdir -p "$NPM_DIR"
    if ! npm install --silent --no-audit --no-fund --prefix "$NPM_DIR" openai ajv >"$T/npm.log" 2>&1; then
        echo "ok tools_node # SKIP npm install openai ajv failed: $(tail -n 1 "$T/npm.log")"
        exit 0
    fi
fi
for tmpl in hermes-3-llama-3.1-tool-use qwen2.5-instruct llama-3.1-instruct mistral-7b-instruct-v0.3; do
    if ! serve_start --model models/tiny-llama2-mha --chat-template tests/data/chat_templates/$tmpl.jinja; then
        fail "tools_${tmpl}_start" "daemon did not start"
        continue
    fi
    NODE_PATH=$NPM_DIR/node_modules node tests/e2e/tools_client.js "$API/v1" "$tmpl"
    serve_stop
    check "tools_${tmpl}_exit_zero" [ "$RC" = 0 ]
done
