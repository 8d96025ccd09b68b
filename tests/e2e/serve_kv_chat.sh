#!/bin/sh
# The KV store end to end (issue 20): 64 concurrent multi-turn chats (3 turns each, every turn
# resending the whole conversation: bench/chat_trace.py) against the daemon on the CPU, once with
# prefix caching and once with every request opting out ("cache_prompt": false). Every turn of
# every chat completes; at temperature 0 the texts of the two runs are identical (reuse changes
# nothing: the CPU's cached KV is bit for bit what a prefill computes); the cached run reuses
# prompt tokens (usage.prompt_tokens_details.cached_tokens, the prefix-cache metrics) and the
# opted-out one none; after the load the device's memory is back to idle: no sequence left, every
# block still in use is a cached prefix (tandem_kv_cache_usage_perc 0). Then the same load on the
# CPU with two emulated cards (requests split to the cards are prefilled whole): all complete;
# there the host tier's default is one node-wide budget, an eighth of RAM, shared by the three
# paged devices (it was an eighth each: 3/8 of RAM).
. tests/e2e/lib/serve.sh

NAMES="kv_chat_cached_complete kv_chat_cold_complete kv_chat_same_text kv_chat_reused kv_chat_cold_reused_nothing kv_chat_metrics kv_chat_idle_after kv_chat_status_eviction kv_chat_cards_complete kv_chat_host_budget_node_wide"
if ! command -v python3 >/dev/null; then
    for n in $NAMES; do echo "ok $n # SKIP python3 missing"; done
    exit 0
fi
TRACE="python3 bench/chat_trace.py --conversations 64 --turns 3 --system-words 60 --user-words 8 --reply-tokens 12"

serve_start --max-running 64 --max-waiting 256 || exit 1
$TRACE --api "$API" >"$T/cached.json" 2>"$T/cached.err"
$TRACE --api "$API" --no-cache >"$T/cold.json" 2>"$T/cold.err"
check kv_chat_cached_complete [ "$(jq '.completed' "$T/cached.json")" = 192 -a "$(jq '.errors | length' "$T/cached.json")" = 0 ]
check kv_chat_cold_complete [ "$(jq '.completed' "$T/cold.json")" = 192 -a "$(jq '.errors | length' "$T/cold.json")" = 0 ]
check kv_chat_same_text [ "$(jq -c ".texts" "$T/cached.json")" = "$(jq -c ".texts" "$T/cold.json")" -a "$(jq "[.texts[][] | length] | add" "$T/cached.json")" -gt 0 ]
# the first conversation to arrive finds the shared system text cached at the latest on its
# second turn; later turns find their own history
check kv_chat_reused [ "$(jq '.cached_tokens' "$T/cached.json")" -gt "$(jq '.prompt_tokens / 2 | floor' "$T/cached.json")" ]
check kv_chat_cold_reused_nothing [ "$(jq '.cached_tokens' "$T/cold.json")" = 0 ]
get "$ADMIN/metrics" >/dev/null
hits=$(sed -n 's/^tandem_prefix_cache_hits_total \([0-9.e+]*\)$/\1/p' "$T/body")
check kv_chat_metrics [ -n "$hits" ] && [ "$(printf '%.0f' "$hits")" = "$(jq '.cached_tokens' "$T/cached.json")" ]
usage=$(sed -n 's/^tandem_kv_cache_usage_perc \([0-9.e+-]*\)$/\1/p' "$T/body")
get "$ADMIN/admin/status" >/dev/null
idle=$(jq '[.devices[] | select(.kv_store != null) | .kv_store.blocks_used == .kv_store.blocks_cached] | all' "$T/body")
check kv_chat_idle_after [ "$usage" = 0 -a "$idle" = true ]
# the eviction order and the host tier's bound: the cached prefixes go least recently used first
# (the next victim's whole blocks shown), the host tier is bounded (default 1/8 of RAM)
ev=$(jq -c '[.devices[] | select(.kv_store != null) | .kv_store | [.eviction.order, (.eviction.device_next.blocks > 0), (.eviction.device_next.idle_seconds >= 0), (.host_budget > 0), (.host_bytes <= .host_budget)]] | .[0]' "$T/body")
check kv_chat_status_eviction [ "$ev" = '["lru",true,true,true,true]' ]
serve_stop

export TANDEM_CACHE_DIR="$T/cache" TANDEM_EMU_PACE=0
serve_start --devices cpu,fpga-emu:0,fpga-emu:1 --max-running 64 --max-waiting 256 || exit 1
get "$ADMIN/admin/status" >/dev/null
ram8=$(($(getconf _PHYS_PAGES) * $(getconf PAGESIZE) / 8))
budgets=$(jq -c '[.devices[] | select(.kv_store != null) | .kv_store.host_budget]' "$T/body")
hb=$(echo "$budgets" | jq --argjson r "$ram8" 'length == 3 and all(. > 0) and add <= $r and add > $r - 3')
check kv_chat_host_budget_node_wide sh -c "[ '$hb' = true ] || { echo '# host_budget $budgets, RAM/8 $ram8' >&2; exit 1; }"
$TRACE --api "$API" >"$T/cards.json" 2>"$T/cards.err"
check kv_chat_cards_complete [ "$(jq '.completed' "$T/cards.json")" = 192 -a "$(jq '.errors | length' "$T/cards.json")" = 0 ]
serve_stop
