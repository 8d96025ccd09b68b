#!/bin/sh
# Structured outputs (response_format json_schema / json_object, the "grammar" extension) through
# the official OpenAI Node client, each output validated against its schema by Ajv (npm `ajv` and
# `ajv-formats`, installed with the client into build/npm, git-ignored; make deps installs the
# client and ajv, npm_need adds ajv-formats when it is missing).
. tests/e2e/lib/serve.sh

NPM_DIR=build/npm
npm_need structured_node openai ajv ajv-formats || exit 0
check structured_ajv_installed [ -f "$NPM_DIR/node_modules/ajv/package.json" ]

serve_start || { fail structured_start "daemon did not start"; exit 0; }
NODE_PATH=$NPM_DIR/node_modules node tests/e2e/structured_client.js "$API/v1"
# a completion continues its prompt's text: the grammar sees the space the client gets (before,
# `"a"*` could return " aaaa", and `" a time" ...` after "Once upon" was refused as no token
# able to start it)
for seed in 1 2 3; do
    post /v1/completions "{\"prompt\":\"x\",\"max_tokens\":4,\"grammar\":\"root ::= \\\"a\\\"*\",\"seed\":$seed}" >/dev/null
    check "structured_completion_text_is_the_grammars_$seed" sh -c "jq -e '.choices[0].text | test(\"^a*\$\")' '$T/body' >/dev/null"
done
code=$(post /v1/completions '{"prompt":"Once upon","max_tokens":6,"temperature":0,"grammar":"root ::= \" a time\" [a-z ,]*"}')
check structured_completion_keeps_the_space sh -c "[ '$code' = 200 ] && jq -e '.choices[0].text | startswith(\" a time\")' '$T/body' >/dev/null"
serve_stop
check structured_exit_zero [ "$RC" = 0 ]
