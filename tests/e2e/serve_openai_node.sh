#!/bin/sh
# The official OpenAI client library (npm `openai`, run with this machine's Node.js) against
# tandem serve: a completion (the golden greedy text), a chat completion, a streamed chat
# completion. The package is installed at test time into build/npm (git-ignored).
. tests/e2e/lib/serve.sh

NPM_DIR=build/npm
npm_need openai_node openai || exit 0
check openai_node_installed [ -f "$NPM_DIR/node_modules/openai/package.json" ]

serve_start || { fail openai_node_start "daemon did not start"; exit 0; }
G=tests/data/golden/stories260K/once.json
COMPLETION_TEXT=$(golden_completion $G) NODE_PATH=$NPM_DIR/node_modules \
    node tests/e2e/openai_client.js "$API/v1" $G
serve_stop
check openai_node_exit_zero [ "$RC" = 0 ]
