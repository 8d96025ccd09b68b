#!/bin/sh
# Batched decode on the cards end to end (issue 25): the daemon on the CPU (prefill) and two
# emulated U280 cards whose batched kernel decodes up to 16 sequences per run (paced by the
# emulator's timing model), 32 concurrent streamed requests at temperature 0 on stories260K.
# Every request completes; the text of each equals what its card gives the prompt alone
# (`tandem generate --device fpga-emu:N`, one sequence per run); the metrics show several
# sequences per card step (tokens through a card over its device calls, which also count the
# imports: > 2, where one sequence per run gives < 1). That daemon runs with a 20 ms TTFT target,
# so that under the burst the CPU's prefill queue is reordered (prompts still on time first:
# sched_policy_next_prefill) — the texts must not change. Then a card disappears mid-batch: every
# sequence of its batch moves to another device and every stream still completes without an
# error.
. tests/e2e/lib/serve.sh
. tests/e2e/lib/cards.sh

NAMES="card_batch_all_complete card_batch_text card_batch_on_both_cards card_batch_several_per_step card_batch_gone_complete card_batch_gone_moved"
export TANDEM_CACHE_DIR="$T/cache" TANDEM_EMU_PACE=1 TANDEM_EMU_CARDS=2
emu_ready "$NAMES" || exit 0
GOLD=tests/data/golden/stories260K
CASES="bos_only lily once sun unicode"
MAXTOK=64
N=32
for c in $CASES; do
    ids=$(jq -r '.ids | map(tostring) | join(",")' "$GOLD/$c.json")
    for i in 0 1; do
        "$TANDEM" generate --device fpga-emu:$i --prefill-device cpu --ids "$ids" --max-tokens $MAXTOK \
            --temperature 0 --json 2>/dev/null | jq -j '.text' >"$T/ref.$c.fpga-emu:$i"
    done
    golden_completion "$GOLD/$c.json" >"$T/ref.$c.cpu"
done

metric() { sed -n "s/^$1{device=\"$2\",kind=\"fpga\"} //p" "$T/metrics"; }

DEVS="cpu,fpga-emu:0,fpga-emu:1"
serve_start --devices "$DEVS" --max-running 32 --ttft-target-ms 20 ||
    { fail card_batch_start "daemon did not start"; exit 0; }
burst $N
check card_batch_all_complete complete $N
bad=""
k=1
while [ $k -le $N ]; do
    c=$(cat "$T/case.$k")
    dev=$(decode_of $k)
    text_of $k >"$T/got.$k"
    [ -f "$T/ref.$c.$dev" ] && cmp -s "$T/got.$k" "$T/ref.$c.$dev" || bad="$bad $k($c on '$dev')"
    k=$((k + 1))
done
check card_batch_text [ -z "$bad" ]
[ -n "$bad" ] && echo "# texts differ from their device's alone:$bad" >&2
curl -s "$ADMIN/metrics" >"$T/metrics"
d0=$(metric tandem_device_decodes_total fpga-emu:0)
d1=$(metric tandem_device_decodes_total fpga-emu:1)
check card_batch_on_both_cards sh -c "[ '${d0:-0}' -ge 8 ] && [ '${d1:-0}' -ge 8 ]"
ratio_ok() {
    for dev in fpga-emu:0 fpga-emu:1; do
        tok=$(metric tandem_device_tokens_total $dev)
        st=$(metric tandem_device_steps_total $dev)
        echo "# $dev: $tok tokens in $st device calls" >&2
        [ "${st:-0}" -gt 0 ] && [ $((${tok:-0} / st)) -ge 2 ] || return 1
    done
}
check card_batch_several_per_step ratio_ok
serve_stop

# The runs a card makes before it serves (the weight upload's: the open fails while run k falls
# inside it); the fault comes 150 runs later, after the imports of the first requests, while the
# card decodes its batch.
RUN=$(($(emu_upload_runs) + 151))
TANDEM_EMU_FAULT="card=1,run=$RUN,kind=gone" serve_start --devices "$DEVS" --max-running 32 ||
    { fail card_batch_gone_start "daemon did not start"; exit 0; }
burst $N
check card_batch_gone_complete complete $N
curl -s "$ADMIN/metrics" >"$T/metrics"
moved=$(grep -c 'event=request_moved.*from=fpga-emu:1' "$LOG")
echo "# $moved requests moved from fpga-emu:1" >&2
check card_batch_gone_moved sh -c "[ $moved -ge 2 ] && grep -q '^tandem_device_health{device=\"fpga-emu:1\",kind=\"fpga\",state=\"failed\"} 1' $T/metrics"
serve_stop
