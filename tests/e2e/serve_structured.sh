#!/bin/sh
# Structured outputs (response_format json_schema / json_object, the "grammar" extension) through
# the official OpenAI Node client, each output validated against its schema by Ajv (npm `ajv`,
# installed with the client into build/npm, git-ignored; make deps installs both).
. tests/e2e/lib/serve.sh

NPM_DIR=build/npm
npm_need structured_node openai ajv || exit 0
check structured_ajv_installed [ -f "$NPM_DIR/node_modules/ajv/package.json" ]

serve_start || { fail structured_start "daemon did not start"; exit 0; }
NODE_PATH=$NPM_DIR/node_modules node tests/e2e/structured_client.js "$API/v1"
serve_stop
check structured_exit_zero [ "$RC" = 0 ]
