#!/bin/sh
# The JSON Schema converter's grammars against Ajv (npm `ajv` with `ajv-formats`, a validator we
# did not write): the unit tests json_schema_int_ranges, json_schema_number_ranges,
# json_schema_number_exclusive_random, json_schema_number_decimal_bounds and
# json_schema_format_samples draw random documents from the grammars of random bounded integer
# and number schemas (fractional bounds included, and the numbers closest to exclusive bounds)
# and of every enforced format, and write them with their schemas
# (TANDEM_JSCHEMA_SAMPLES); every one must validate. No daemon: the grammar alone decides.
. tests/e2e/lib/serve.sh

npm_need schema_ajv_node ajv ajv-formats || exit 0
S=$T/samples.jsonl
UCX_MEM_EVENTS=no TANDEM_JSCHEMA_SAMPLES=$S "$BUILD/tandem-tests" json_schema_int_ranges json_schema_number_ranges \
    json_schema_number_exclusive_random json_schema_number_decimal_bounds json_schema_format_samples \
    >"$T/unit.log" 2>&1
check schema_ajv_units_pass grep -q ' 5 passed, 0 failed' "$T/unit.log"
NODE_PATH=build/npm/node_modules node tests/e2e/schema_ajv.js "$S"
