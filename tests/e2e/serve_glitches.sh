#!/bin/sh
# GLITCHES dispatch end to end: the daemon on the CPU backend (prefill + fallback decode) and
# three emulated U280 cards (fpga-emu, paced by the emulator's timing model), 32 concurrent
# streamed requests at temperature 0 on stories260K. Every request completes; its text equals
# what the device that decoded it (x-tandem-devices) produces for the prompt alone — for a card
# `tandem generate --device fpga-emu:N` (CPU prefill, KV imported, decoded on the card), for the
# CPU the golden greedy text; the metrics show decodes on the cards and fallbacks to the CPU
# while the cards are busy. Then the same with a card that disappears mid-decode, and with one
# whose run hangs (the backend's watchdog times it out): every request still completes without
# an error, the failed card is marked, /ready stays 200.
#
# GLITCHES_PREFILL=cuda:0 runs the same with the GPU as the prefill (and fallback decode) device
# in place of the CPU (bench/sched_gpu.sh does, on the GPU machine): texts decoded on the GPU
# must then equal `tandem generate --device cuda:0`, those on a card `tandem generate --device
# fpga-emu:N --prefill-device cuda:0`.
. tests/e2e/lib/serve.sh
. tests/e2e/lib/cards.sh
P=${GLITCHES_PREFILL:-cpu}

NAMES="glitches_default_devices glitches_default_on_card glitches_ready glitches_all_complete glitches_text_on_cards glitches_text_on_prefill_device glitches_on_cards glitches_fallback glitches_status_json glitches_gone_complete glitches_gone_moved glitches_gone_marked glitches_gone_ready glitches_hang_complete glitches_hang_moved"
# GLITCHES' cards decode one sequence per run (TANDEM_FPGA_BATCH=1): a busy card sends the next
# request to the CPU. tests/e2e/serve_card_batch.sh runs the batched cards.
export TANDEM_CACHE_DIR="$T/cache" TANDEM_EMU_PACE=1 TANDEM_EMU_CARDS=3 TANDEM_FPGA_BATCH=1
emu_ready "$NAMES" || exit 0
if ! "$TANDEM" generate --device "$P" --ids 1 --max-tokens 1 >/dev/null 2>&1; then
    for n in $NAMES; do echo "ok $n # SKIP no device $P here"; done
    exit 0
fi
# A GPU prefills whole prompts here (no chunking), as `tandem generate` does: the CPU's chunks
# are bit-identical to a whole prefill, a GPU's need not be (other tile shapes).
EXTRA=
[ "$P" = cpu ] || EXTRA="--tbt-budget-ms 0"

GOLD=tests/data/golden/stories260K
CASES="bos_only lily once sun unicode"
CARDS=3
MAXTOK=64

# references: the CPU's golden greedy text (the GPU's own output when it is the prefill device),
# each card's standalone output after a prefill on the prefill device
for c in $CASES; do
    ids=$(jq -r '.ids | map(tostring) | join(",")' "$GOLD/$c.json")
    if [ "$P" = cpu ]; then
        golden_completion "$GOLD/$c.json" >"$T/ref.$c.cpu"
    else
        "$TANDEM" generate --device "$P" --ids "$ids" --max-tokens $MAXTOK --temperature 0 --json \
            2>/dev/null | jq -j '.text' >"$T/ref.$c.$P"
    fi
    i=0
    while [ $i -lt $CARDS ]; do
        "$TANDEM" generate --device fpga-emu:$i --prefill-device "$P" --ids "$ids" --max-tokens $MAXTOK \
            --temperature 0 --json 2>/dev/null | jq -j '.text' >"$T/ref.$c.fpga-emu:$i"
        i=$((i + 1))
    done
done
DEVS="$P,fpga-emu:0,fpga-emu:1,fpga-emu:2"

# The default configuration: the CPU and two emulated cards.
if [ "$P" = cpu ]; then
    SERVE_DEVICES= serve_start || { fail glitches_default_start "daemon did not start"; exit 0; }
    code=$(get "$ADMIN/admin/status")
    check glitches_default_devices sh -c "[ $code = 200 ] && jq -e '[.devices[].name] == [\"cpu\",\"fpga-emu:0\",\"fpga-emu:1\"] and ([.devices[].warm] | all)' $T/body >/dev/null"
    post /v1/completions "{\"prompt\":$(jq -c '.ids' "$GOLD/once.json"),\"max_tokens\":$MAXTOK,\"temperature\":0}" >/dev/null
    jqb '.choices[0].text' | head -c -1 >"$T/got.default"
    check glitches_default_on_card sh -c "grep -qi '^x-tandem-devices: prefill=cpu; decode=fpga-emu:0' $T/hdr && cmp -s $T/got.default $T/ref.once.fpga-emu:0"
    serve_stop
fi

N=32
serve_start --devices "$DEVS" --max-running 32 $EXTRA ||
    { fail glitches_start "daemon did not start"; exit 0; }
check glitches_ready sh -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $ADMIN/ready) = 200 ]"
burst $N
check glitches_all_complete complete $N
bad_cards=""
bad_local=""
k=1
while [ $k -le $N ]; do
    c=$(cat "$T/case.$k")
    dev=$(decode_of $k)
    pre=$(sed -n 's/^x-tandem-devices: prefill=\([^;]*\);.*/\1/p' "$T/h.$k")
    text_of $k >"$T/got.$k"
    if [ "$pre" != "$P" ] || [ ! -f "$T/ref.$c.$dev" ] || ! cmp -s "$T/got.$k" "$T/ref.$c.$dev"; then
        if [ "$dev" = "$P" ]; then bad_local="$bad_local $k($c)"; else bad_cards="$bad_cards $k($c on '$dev')"; fi
    fi
    k=$((k + 1))
done
# decoded on a card: equal to `tandem generate --device fpga-emu:N --prefill-device $P`
check glitches_text_on_cards [ -z "$bad_cards" ]
# decoded on the prefill device (fallback, batched with the others): equal to its own output
check glitches_text_on_prefill_device [ -z "$bad_local" ]
[ -n "$bad_cards$bad_local" ] && echo "# texts differ from their device's: cards:$bad_cards $P:$bad_local" >&2
curl -s "$ADMIN/metrics" >"$T/metrics"
cards=$(sed -n 's/^tandem_decode_placements_total{target="card"} //p' "$T/metrics")
fallback=$(sed -n 's/^tandem_decode_placements_total{target="fallback"} //p' "$T/metrics")
on_dev=$(grep -c 'decode=fpga-emu' "$T"/h.* | awk -F: '{s += $2} END {print s}')
check glitches_on_cards sh -c "[ '$cards' -ge 3 ] && [ '$cards' = '$on_dev' ] && grep -q '^tandem_device_kv_import_bytes_total{device=\"fpga-emu:0\",kind=\"fpga\"} [1-9]' $T/metrics"
check glitches_fallback sh -c "[ '$fallback' -ge 1 ] && [ \$(($cards + $fallback)) = $N ]"
code=$(get "$ADMIN/admin/status")
check glitches_status_json sh -c "[ $code = 200 ] && jq -e '(.devices | length) == 4 and .devices[0].name == \"$P\" and .devices[1].kind == \"fpga\" and .devices[1].caps == \"prefill,decode,kv_export,kv_import\" and .placements.split == $cards and .placements.fallback == $fallback' $T/body >/dev/null"
serve_stop

# The runs a card makes before it serves: the weight upload's (found by failing run k: the open
# fails while k falls inside the upload). Then come the warm-up's decode run, one import run per
# layer chunk piece and one run per token: upload + 30 falls inside the first request a card
# decodes (64 tokens).
RUN=$(($(emu_upload_runs) + 31))

# A card disappears mid-decode.
TANDEM_EMU_FAULT="card=1,run=$RUN,kind=gone" serve_start --devices "$DEVS" --max-running 32 $EXTRA ||
    { fail glitches_gone_start "daemon did not start"; exit 0; }
burst $N
check glitches_gone_complete complete $N
curl -s "$ADMIN/metrics" >"$T/metrics"
check glitches_gone_moved sh -c "grep -q '^tandem_request_failovers_total [1-9]' $T/metrics && grep -q 'event=request_moved.*from=fpga-emu:1' $LOG"
check glitches_gone_marked grep -q '^tandem_device_health{device="fpga-emu:1",kind="fpga",state="failed"} 1' "$T/metrics"
check glitches_gone_ready sh -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $ADMIN/ready) = 200 ]"
serve_stop

# A card's run hangs: the backend's watchdog (200 ms here) times it out, the request moves.
TANDEM_FPGA_TIMEOUT_MS=200 TANDEM_EMU_FAULT="card=0,run=$RUN,kind=hang" \
    serve_start --devices "$DEVS" --max-running 32 $EXTRA ||
    { fail glitches_hang_start "daemon did not start"; exit 0; }
burst $N
check glitches_hang_complete complete $N
curl -s "$ADMIN/metrics" >"$T/metrics"
check glitches_hang_moved sh -c "grep -q 'event=request_moved.*from=fpga-emu:0' $LOG && ! grep -q '^tandem_device_health{device=\"fpga-emu:0\",kind=\"fpga\",state=\"ok\"} 1' $T/metrics"
serve_stop
