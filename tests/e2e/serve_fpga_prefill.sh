#!/bin/sh
# The scheduler places prefills on emulated U280 cards when fpga_prefill = 1 (FAST-Prefill's
# kernel, fpga/kernels/prefill.c): the daemon on the CPU and two cards. A request prefills on a
# card (x-tandem-devices names it) and its text at temperature 0 equals `tandem generate` on the
# same prefill and decode devices; two requests at once keep both cards busy, so the second one
# prefills on one card and ships its KV to the other; a long prompt with sparse_prefill runs
# FlexPrefill on the card and reports its density. Without fpga_prefill the CPU prefills, as
# GLITCHES does.
. tests/e2e/lib/serve.sh

NAMES="fpga_prefill_start fpga_prefill_caps fpga_prefill_on_card fpga_prefill_text fpga_prefill_two_complete fpga_prefill_two_on_cards fpga_prefill_two_texts fpga_prefill_sparse_on_card fpga_prefill_sparse_density fpga_prefill_xattention_on_card fpga_prefill_xattention_density fpga_prefill_off_cpu"
export TANDEM_CACHE_DIR="$T/cache"
emu_ready "$NAMES" || exit 0
GOLD=tests/data/golden/stories260K
MAXTOK=32
DEVS="cpu,fpga-emu:0,fpga-emu:1"

# the text `tandem generate` gives on prefill device $1 and decode device $2 for golden case $3
ref() {
    ids=$(jq -r '.ids | map(tostring) | join(",")' "$GOLD/$3.json")
    "$TANDEM" generate --device "$2" --prefill-device "$1" --ids "$ids" --max-tokens $MAXTOK \
        --temperature 0 --json 2>/dev/null | jq -j '.text'
}
devices_of() { sed -n 's/^x-tandem-devices: //p' "$1" | tr -d '\r'; }

serve_start --devices "$DEVS" --fpga-prefill 1 || { fail fpga_prefill_start "daemon did not start"; exit 0; }
ok fpga_prefill_start
code=$(get "$ADMIN/admin/status")
check fpga_prefill_caps sh -c "[ $code = 200 ] && jq -e '.devices[1].caps == \"prefill,decode,kv_export,kv_import\"' $T/body >/dev/null"

post /v1/completions "{\"prompt\":$(jq -c '.ids' "$GOLD/once.json"),\"max_tokens\":$MAXTOK,\"temperature\":0}" >/dev/null
d=$(devices_of "$T/hdr")
check fpga_prefill_on_card sh -c "echo '$d' | grep -q '^prefill=fpga-emu:[01]; decode=fpga-emu:[01]$'"
p=$(echo "$d" | sed 's/^prefill=\([^;]*\);.*/\1/')
q=$(echo "$d" | sed 's/.*decode=//')
jqb '.choices[0].text' | head -c -1 >"$T/got.1"
ref "$p" "$q" once >"$T/ref.1"
check fpga_prefill_text cmp -s "$T/got.1" "$T/ref.1"

# two at once: the second finds the first's card busy
pids=
for k in 1 2; do
    c=$(echo "sun lily" | cut -d' ' -f$k)
    curl -s -D "$T/h.$k" -o "$T/b.$k" -H 'Content-Type: application/json' \
        -d "{\"prompt\":$(jq -c '.ids' "$GOLD/$c.json"),\"max_tokens\":$MAXTOK,\"temperature\":0}" \
        "$API/v1/completions" &
    pids="$pids $!"
done
wait $pids # not the daemon, also a child of this shell
check fpga_prefill_two_complete sh -c "grep -q '^HTTP/1.1 200' $T/h.1 && grep -q '^HTTP/1.1 200' $T/h.2"
d1=$(devices_of "$T/h.1")
d2=$(devices_of "$T/h.2")
check fpga_prefill_two_on_cards sh -c "echo '$d1 $d2' | grep -q '^prefill=fpga-emu:.*prefill=fpga-emu:'"
bad=
k=1
for c in sun lily; do
    dd=$(devices_of "$T/h.$k")
    jq -j '.choices[0].text' "$T/b.$k" >"$T/got.$k"
    ref "$(echo "$dd" | sed 's/^prefill=\([^;]*\);.*/\1/')" "$(echo "$dd" | sed 's/.*decode=//')" $c >"$T/ref.$k"
    cmp -s "$T/got.$k" "$T/ref.$k" || bad="$bad $c($dd)"
    k=$((k + 1))
done
check fpga_prefill_two_texts [ -z "$bad" ]

# FlexPrefill on the card: 300 ids, above the dense threshold max(256, min_budget 128)
ids=$(python3 -c "print([1] + [(i * 37 + 11) % 500 + 3 for i in range(299)])")
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":4,\"temperature\":0,\"sparse_prefill\":{\"min_budget\":128}}")
check fpga_prefill_sparse_on_card sh -c "[ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=fpga-emu' $T/hdr"
den=$(jqb '.usage.prefill_density')
check fpga_prefill_sparse_density python3 -c "import sys; d=float(sys.argv[1]); sys.exit(0 if 0 < d < 1 else 1)" "$den"
# XAttention on the card (its estimator unit beside the SIGU), in the scheduler's chunks
code=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":4,\"temperature\":0,\"sparse_prefill\":{\"mode\":\"xattention\",\"xattention_threshold\":0.5,\"num_last_dense_tokens_in_prefill\":0}}")
check fpga_prefill_xattention_on_card sh -c "[ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=fpga-emu' $T/hdr"
den=$(jqb '.usage.prefill_density')
check fpga_prefill_xattention_density python3 -c "import sys; d=float(sys.argv[1]); sys.exit(0 if 0 < d < 1 else 1)" "$den"
serve_stop

serve_start --devices "$DEVS" || { fail fpga_prefill_off_cpu "daemon did not start"; exit 0; }
post /v1/completions "{\"prompt\":$(jq -c '.ids' "$GOLD/once.json"),\"max_tokens\":4,\"temperature\":0}" >/dev/null
check fpga_prefill_off_cpu grep -qi '^x-tandem-devices: prefill=cpu' "$T/hdr"
serve_stop
