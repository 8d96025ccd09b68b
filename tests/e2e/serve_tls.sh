#!/bin/sh
# AsyncTLS sparse decode through the daemon (decode_sparse key; the CPU device, and an emulated
# card for the per-request switch): with budgets that
# cover the context the greedy text equals dense decode's; with small budgets requests are served;
# a request turns it on by itself ("sparse_decode", staggered too) and usage says what fraction of
# the KV it read;
# bad values are a 400 naming the key;
# without the model's channel file the daemon refuses to start and says how to make it; a bad
# spec names the key.
. tests/e2e/lib/serve.sh

M=$T/model
mkdir -p "$M" && cp models/stories260K/* "$M"/ 2>/dev/null
"$TANDEM" calibrate-channels --model "$M" --channels 4 --seqs 2 --len 64 >"$T/cal" 2>&1
check tls_calibrate_writes_sidecar [ -s "$M/tandem-channels.bin" ]

# 300 ids + 64 generated: the decode steps attend 300..364 keys
ids=$(python3 -c "print([1] + [(i * 37 + 11) % 500 + 3 for i in range(299)])")
req="{\"prompt\":$ids,\"max_tokens\":64,\"temperature\":0}"

# answered CODE TEXT FRAC [DEVICE]: the last answer is a 200 whose text is TEXT (- for any text),
# whose usage.decode_kv_read_fraction is 1 (FRAC full) or in (0, 0.9) (FRAC less; - for either),
# decoded on DEVICE when one is given
answered() {
    [ "$1" = 200 ] || return 1
    [ "$2" = - ] || [ "$(jq -r '.choices[0].text' "$T/body")" = "$2" ] || return 1
    case $3 in
    full) jq -e '.usage.decode_kv_read_fraction == 1' "$T/body" >/dev/null || return 1 ;;
    less) jq -e '.usage.decode_kv_read_fraction | . > 0 and . < 0.9' "$T/body" >/dev/null || return 1 ;;
    esac
    [ -z "$4" ] || grep -qi "^x-tandem-devices: .*decode=$4" "$T/hdr"
}

serve_start --model "$M" || { fail tls_dense_start "daemon did not start"; exit 0; }
code=$(post /v1/completions "$req")
dense=$(jq -r '.choices[0].text' "$T/body")
check tls_dense_text sh -c "[ $code = 200 ] && [ -n '$dense' ]"
check tls_dense_no_fraction sh -c "[ \"\$(jq -r '.usage.decode_kv_read_fraction' $T/body)\" = null ]"
# the per-request switch (the config's default is off; the channel file lets a request ask)
sreq="{\"prompt\":$ids,\"max_tokens\":64,\"temperature\":0,\"sparse_decode\":{\"mode\":\"asynctls\",\"token_budget\":32,\"block_budget\":4}}"
code=$(post /v1/completions "$sreq")
check tls_request_sparse_reads_less answered "$code" - less
freq="{\"prompt\":$ids,\"max_tokens\":64,\"temperature\":0,\"sparse_decode\":{\"token_budget\":512,\"block_budget\":64}}"
code=$(post /v1/completions "$freq")
check tls_request_full_budget_equals_dense answered "$code" "$dense" full
code=$(post /v1/completions "{\"prompt\":[1,2,3],\"max_tokens\":2,\"sparse_decode\":{\"token_budget\":0}}")
check tls_request_bad_budget_names_key sh -c "[ $code = 400 ] && [ \"\$(jq -r '.error.param' $T/body)\" = token_budget ]"
code=$(post /v1/completions "{\"prompt\":[1,2,3],\"max_tokens\":2,\"sparse_decode\":{\"mode\":\"quest\"}}")
check tls_request_bad_mode_names_key sh -c "[ $code = 400 ] && [ \"\$(jq -r '.error.param' $T/body)\" = mode ]"
# the staggered selection asked per request: budgets covering the context still give dense's
# text and read everything; small ones read less; a bad value names the key
gfreq="{\"prompt\":$ids,\"max_tokens\":64,\"temperature\":0,\"sparse_decode\":{\"token_budget\":512,\"block_budget\":64,\"stagger\":true}}"
gsreq="{\"prompt\":$ids,\"max_tokens\":64,\"temperature\":0,\"sparse_decode\":{\"token_budget\":32,\"block_budget\":4,\"stagger\":true}}"
code=$(post /v1/completions "$gfreq")
check tls_request_stagger_full_equals_dense answered "$code" "$dense" full
code=$(post /v1/completions "$gsreq")
check tls_request_stagger_reads_less answered "$code" - less
code=$(post /v1/completions "{\"prompt\":[1,2,3],\"max_tokens\":2,\"sparse_decode\":{\"stagger\":\"yes\"}}")
check tls_request_bad_stagger_names_key sh -c "[ $code = 400 ] && [ \"\$(jq -r '.error.param' $T/body)\" = stagger ]"
serve_stop

# the same switch on an emulated card (the CPU prefills, the card decodes): budgets covering the
# context give the card's dense text and read everything; small ones read less
serve_start --model "$M" --devices cpu,fpga-emu:0 || { fail tls_card_start "daemon did not start"; exit 0; }
code=$(post /v1/completions "$req")
cdense=$(jq -r '.choices[0].text' "$T/body")
check tls_card_decodes answered "$code" - - fpga-emu
code=$(post /v1/completions "$freq")
check tls_card_full_budget_equals_dense answered "$code" "$cdense" full fpga-emu
code=$(post /v1/completions "$sreq")
check tls_card_request_sparse_reads_less answered "$code" - less fpga-emu
code=$(post /v1/completions "$gfreq")
check tls_card_stagger_full_equals_dense answered "$code" "$cdense" - fpga-emu
serve_stop

serve_start --model "$M" --decode-sparse "asynctls,block_size=16,block_budget=64,token_budget=512,dense_layers=0,dense_below=0" ||
    { fail tls_full_start "daemon did not start"; exit 0; }
code=$(post /v1/completions "$req")
check tls_full_budget_equals_dense answered "$code" "$dense" -
serve_stop

serve_start --model "$M" --decode-sparse "asynctls,block_size=16,block_budget=4,token_budget=32,dense_layers=0" ||
    { fail tls_small_start "daemon did not start"; exit 0; }
code=$(post /v1/completions "$req")
check tls_small_budget_served sh -c "[ $code = 200 ] && [ \"\$(jq -r '.usage.completion_tokens' $T/body)\" = 64 ]"
serve_stop

# no channel file: start-up fails with a message naming the command that makes it
"$TANDEM" serve --devices cpu --host 127.0.0.1 --port 0 --admin-port 0 --model models/stories260K \
    --decode-sparse asynctls --log-file "$T/nochan.log" >"$T/nochan.out" 2>&1
rc=$?
check tls_missing_channels_refused sh -c "[ $rc != 0 ] && grep -q calibrate-channels '$T/nochan.log' '$T/nochan.out'"
"$TANDEM" serve --devices cpu --host 127.0.0.1 --port 0 --admin-port 0 --model "$M" \
    --decode-sparse "asynctls,token_budgt=5" --log-file "$T/bad.log" >"$T/bad.out" 2>&1
rc=$?
check tls_bad_spec_names_key sh -c "[ $rc != 0 ] && grep -q token_budgt '$T/bad.log' '$T/bad.out'"
