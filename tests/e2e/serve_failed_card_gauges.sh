#!/bin/sh
# A card that fails mid-decode and the node's KV gauges. A failed card keeps the blocks its
# sequences held (fpga/seq.c: the card may still write them), so its own gauges freeze where it
# failed; the node-wide tandem_kv_cache_usage_perc counted them, and never went back to idle.
#   failed_card_left_out  fpga-emu:0 gone at a run in the middle of two streams' decode
#                         (TANDEM_EMU_FAULT): once they are done (moved to the CPU), the card is
#                         failed with blocks still held, and the node's fraction is 0 again
#   failed_card_frozen    the card's own gauges stay as they froze (documented): its
#                         tandem_device_kv_cache_usage_perc above 0, its sequences 0
. tests/e2e/lib/serve.sh
export TANDEM_CACHE_DIR="$T/cache"
NAMES="failed_card_left_out failed_card_frozen"
emu_ready "$NAMES" || exit 0
# the runs the card's open makes (its weight upload); 30 more lands in the decode
U=$(emu_upload_runs)
TANDEM_EMU_FAULT="card=0,run=$((U + 30)),kind=gone" serve_start --devices cpu,fpga-emu:0 --step-delay-ms 10 ||
    { fail failed_card_start "daemon did not start"; exit 0; }
for k in 1 2; do
    curl -s -o "$T/s.$k" -H 'Content-Type: application/json' \
        -d '{"prompt":"Once upon a time","max_tokens":100,"stream":true,"ignore_eos":true}' "$API/v1/completions" &
    CURLS="$CURLS $!"
done
wait $CURLS # (not the daemon, a child too)
# the requests are done: nothing runs anywhere (at most a few seconds for the last answers)
i=0
while [ $i -lt 100 ] && ! curl -s "$ADMIN/metrics" | grep -q '^tandem_num_requests_running 0$'; do
    sleep 0.05
    i=$((i + 1))
done
curl -s "$ADMIN/metrics" >"$T/metrics"
curl -s "$ADMIN/admin/status" >"$T/status"
check failed_card_left_out sh -c "jq -e '.devices[] | select(.name == \"fpga-emu:0\") | .health == \"failed\" and .kv_store.blocks_used > 0' $T/status >/dev/null &&
    grep -q '^tandem_kv_cache_usage_perc 0\$' $T/metrics ||
    { jq -c '.devices[] | {name, health, running, blocks_used: .kv_store.blocks_used}' $T/status >&2; grep kv_cache_usage $T/metrics >&2; exit 1; }"
check failed_card_frozen sh -c "grep '^tandem_device_kv_cache_usage_perc{device=\"fpga-emu:0\"' $T/metrics | awk '{exit !(\$2 > 0)}' &&
    grep -q '^tandem_device_sequences_running{device=\"fpga-emu:0\",kind=\"fpga\"} 0\$' $T/metrics"
serve_stop
