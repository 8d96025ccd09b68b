#!/bin/sh
# FlexPrefill through the API (tandem's "sparse_prefill" extension) on the CPU backend: a prompt
# above the dense threshold takes the sparse path and usage reports its density; the same prompt
# with every block kept (gamma 1, budget = the whole prompt) gives the dense greedy text exactly;
# a short prompt reports density 1; bad parameters get a 400 naming the field.
. tests/e2e/lib/serve.sh

serve_start || { fail serve_sparse_start "daemon did not start"; exit 0; }

# 300 ids: above FlexPrefill's dense threshold max(256, min_budget 128 rounded to 128) = 256
ids=$(python3 -c "print([1] + [(i * 37 + 11) % 500 + 3 for i in range(299)])")
dense=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":16,\"temperature\":0}" >/dev/null; jqb '.choices[0].text')
check sparse_dense_text [ -n "$dense" ]
check sparse_dense_has_no_density [ "$(jqb '.usage.prefill_density')" = null ]

# cache_prompt false: the dense request above cached this prompt, and a sparse request reuses
# exact cached KV first (scheduler/sched_pcache.h), leaving only a dense tail to compute
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":16,\"temperature\":0,\"cache_prompt\":false,\"sparse_prefill\":{\"min_budget\":128}}")
d=$(jqb '.usage.prefill_density')
check sparse_density_reported sh -c "[ $code = 200 ] && python3 -c 'import sys; d=float(sys.argv[1]); sys.exit(0 if 0 < d < 1 else 1)' '$d'"

code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":16,\"temperature\":0,\"cache_prompt\":false,\"sparse_prefill\":{\"gamma\":1,\"min_budget\":300}}")
check sparse_all_blocks_equals_dense sh -c "[ $code = 200 ] && [ \"\$(jq -r '.choices[0].text' $T/body)\" = '$dense' ] && [ \"\$(jq -r '.usage.prefill_density' $T/body)\" = 1 ]"

# with the cache: a sparse request reuses the dense run's exact KV up to a block boundary of its
# method (FlexPrefill's 128: 256 of the 300 positions), the rest computed after it
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":16,\"temperature\":0,\"sparse_prefill\":{\"min_budget\":128}}")
check sparse_reuses_exact_prefix sh -c "[ $code = 200 ] && [ \"\$(jq -r '.usage.prompt_tokens_details.cached_tokens' $T/body)\" = 256 ]"

code=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":4,"temperature":0,"sparse_prefill":true}')
check sparse_short_prompt_dense sh -c "[ $code = 200 ] && [ \"\$(jq -r '.usage.prefill_density' $T/body)\" = 1 ]"

# a request refused: 400 naming the parameter at fault
bad_param() { # NAME BODY PARAM
    code=$(post /v1/completions "$2")
    check "$1" sh -c "[ $code = 400 ] && [ \"\$(jq -r '.error.param' $T/body)\" = $3 ]"
}
bad_param sparse_bad_gamma '{"prompt":"x","max_tokens":4,"sparse_prefill":{"gamma":2}}' gamma
bad_param sparse_bad_member '{"prompt":"x","max_tokens":4,"sparse_prefill":{"beta":1}}' sparse_prefill
code=$(post /v1/completions '{"prompt":"x","max_tokens":4,"sparse_prefill":"yes"}')
check sparse_bad_type [ "$code" = 400 ]

# the method and OpenVINO's parameter names: each bad value a 400 naming its key
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":4,\"temperature\":0,\"sparse_prefill\":{\"mode\":\"xattention\",\"xattention_stride\":16,\"xattention_block_size\":64,\"num_last_dense_tokens_in_prefill\":0}}")
check sparse_xattention_ok sh -c "[ $code = 200 ] && [ \"\$(jq -r '.usage.prefill_density' $T/body)\" != null ]"
bad_param sparse_bad_stride '{"prompt":"x","max_tokens":4,"sparse_prefill":{"mode":"xattention","xattention_stride":3}}' xattention_stride
bad_param sparse_bad_start '{"prompt":"x","max_tokens":4,"sparse_prefill":{"mode":"trishape","num_retained_start_tokens_in_cache":100}}' num_retained_start_tokens_in_cache
bad_param sparse_bad_mode '{"prompt":"x","max_tokens":4,"sparse_prefill":{"mode":"sliding"}}' mode
bad_param sparse_bad_threshold '{"prompt":"x","max_tokens":4,"sparse_prefill":{"xattention_threshold":0}}' xattention_threshold

serve_stop

# Prefill on the CPU, decode on an emulated card (the KV shipped in the wire format): each method
# with every block kept writes the dense text; XAttention's defaults run sparse; Tri-shape's
# 1024-token chunks see everything on a 300-token prompt (dense)
serve_start --devices cpu,fpga-emu:0 || { fail sparse_card_start "daemon did not start"; exit 0; }
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":12,\"temperature\":0}")
cdense=$(jq -r '.choices[0].text' $T/body)
check sparse_card_dense sh -c "[ $code = 200 ] && [ -n '$cdense' ]"
for sp in '"mode":"xattention","xattention_threshold":1,"xattention_block_size":32,"xattention_stride":4' \
          '"mode":"trishape","num_retained_start_tokens_in_cache":1048576' \
          '"mode":"flexprefill","gamma":1,"min_budget":300'; do
    code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":12,\"temperature\":0,\"cache_prompt\":false,\"sparse_prefill\":{$sp}}")
    check "sparse_card_all_blocks_$(echo "$sp" | sed 's/.*"mode":"\([a-z]*\)".*/\1/')" sh -c "[ $code = 200 ] && [ \"\$(jq -r '.choices[0].text' $T/body)\" = '$cdense' ]"
done
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":12,\"temperature\":0,\"cache_prompt\":false,\"sparse_prefill\":{\"mode\":\"xattention\",\"xattention_block_size\":32,\"xattention_stride\":4,\"xattention_threshold\":0.5}}")
d=$(jq -r '.usage.prefill_density' $T/body)
check sparse_card_xattention_sparse sh -c "[ $code = 200 ] && python3 -c 'import sys; d=float(sys.argv[1]); sys.exit(0 if 0 < d < 1 else 1)' '$d'"
serve_stop
