#!/bin/sh
# Faults on the card while requests run, as a client and the logs see them: the daemon on the
# CPU and one emulated U280 (fpga-emu:0), faults injected by the emulator (TANDEM_EMU_FAULT).
#
# Corrupt KV: a bit flipped in a KV buffer shipped to the card (byte 512 of the first staging
# slot of the first layer's first import piece: a piece lies in one KV block of 128 positions,
# striped 32 to a slot, whose K values are the slot's first 1,024 bytes). The card's check
# catches it, the request is not decoded from it: it moves to the CPU and returns the CPU's
# text, the card is marked degraded and the move logged with its reason (status "corrupt data": ACCEL_ERR_CORRUPT). (A flip past
# a short piece's payload changes no KV byte at all, so nothing shows and nothing needs to. A
# flip in the card's HBM after the KV landed is caught by
# the check of the complete run: tests/scheduler/test_sched_kv_crc.c, whose fault needs the
# sequence's place in HBM.)
#
# Moved streams: a card that disappears mid-decode moves a streamed request whose headers
# (x-tandem-devices: ... decode=fpga-emu:0) are out already. The stream's last chunk — the usage
# chunk, or the last finish chunk without include_usage — says where it ended in a field OpenAI
# clients ignore ("tandem": {"devices": "prefill=cpu; decode=cpu; moved_from=fpga-emu:0",
# "moves": 1}); the request's log line names the device that finished it; a whole (non-streamed)
# response's header does too.
. tests/e2e/lib/serve.sh

NAMES="kv_corrupt_complete kv_corrupt_text kv_corrupt_logged kv_corrupt_marked kv_corrupt_counted kv_corrupt_ready stream_moved_usage_chunk stream_moved_log stream_unmoved_last_chunk stream_moved_finish_chunk whole_moved_header"
export TANDEM_CACHE_DIR="$T/cache"
emu_ready "$NAMES" || exit 0
DEVS=cpu,fpga-emu:0

# The runs the card makes while it opens (the weight upload): a fault at run k fails the open
# while k falls inside it. Then, in the daemon: the warm-up's decode run (U + 1), one import run
# per layer chunk (U + 2 is layer 0's), the check of the landed KV, one decode run per token.
U=$(emu_upload_runs)

# ---------------------------------------------------------------- corrupt KV
ids=1
i=1
while [ $i -lt 300 ]; do
    ids="$ids,$(((i * 37 + 11) % 500 + 3))"
    i=$((i + 1))
done
"$TANDEM" generate --device cpu --ids "$ids" --max-tokens 16 --temperature 0 --json 2>/dev/null |
    jq -j '.text' >"$T/ref.cpu"
TANDEM_EMU_FAULT="card=0,run=$((U + 2)),kind=bitflip,byte=512,bit=3" serve_start --devices "$DEVS" ||
    { fail kv_corrupt_start "daemon did not start"; exit 0; }
code=$(post /v1/completions "{\"prompt\":[$ids],\"max_tokens\":16,\"temperature\":0}")
jqb '.choices[0].text' | head -c -1 >"$T/got.corrupt"
check kv_corrupt_complete sh -c "[ $code = 200 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=cpu; moved_from=fpga-emu:0' $T/hdr"
check kv_corrupt_text cmp -s "$T/got.corrupt" "$T/ref.cpu"
check kv_corrupt_logged grep -q 'event=request_moved .*from=fpga-emu:0 status="corrupt data"' "$LOG"
curl -s "$ADMIN/metrics" >"$T/metrics"
check kv_corrupt_marked sh -c "grep -Eq '^tandem[:_]device_health\{device=\"fpga-emu:0\",kind=\"fpga\",state=\"degraded\"\} 1' $T/metrics && grep -Eq '^tandem[:_]device_failovers_total\{device=\"fpga-emu:0\",kind=\"fpga\"\} 1' $T/metrics"
check kv_corrupt_counted grep -Eq '^tandem_device_kv_corrupt_total\{device="fpga-emu:0",kind="fpga"\} 1' "$T/metrics"
check kv_corrupt_ready sh -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $ADMIN/ready) = 200 ]"
serve_stop

# ---------------------------------------------------------------- moved streams
# stream N USAGE: a streamed request of 64 tokens (include_usage USAGE); body $T/s.N, headers
# $T/sh.N, its last data chunk $T/last.N
stream() {
    curl -s -N -D "$T/sh.$1" -o "$T/s.$1" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":$2}}" \
        "$API/v1/completions"
    grep '^data: {' "$T/s.$1" | tail -n 1 | sed 's/^data: //' >"$T/last.$1"
}
GONE="card=0,run=$((U + 30)),kind=gone" # inside the first request the card decodes

TANDEM_EMU_FAULT=$GONE serve_start --devices "$DEVS" || { fail stream_moved_start "daemon did not start"; exit 0; }
stream 1 true
id=$(sed -n 's/^x-request-id: \([^\r]*\).*/\1/p' "$T/sh.1" | tr -d '\r')
check stream_moved_usage_chunk sh -c "grep -qi '^x-tandem-devices: prefill=cpu; decode=fpga-emu:0' $T/sh.1 && grep -q '^data: \[DONE\]' $T/s.1 && jq -e '.choices == [] and .usage.completion_tokens == 64 and .tandem == {\"devices\": \"prefill=cpu; decode=cpu; moved_from=fpga-emu:0\", \"moves\": 1}' $T/last.1 >/dev/null"
check stream_moved_log grep -q "event=request id=$id .*status=200 .*prefill=cpu decode=cpu moves=1 moved_from=fpga-emu:0" "$LOG"
# the card is gone: the next stream decodes on the CPU from the start, and says so too
stream 2 false
check stream_unmoved_last_chunk sh -c "jq -e '.choices[0].finish_reason == \"length\" and .tandem == {\"devices\": \"prefill=cpu; decode=cpu\", \"moves\": 0}' $T/last.2 >/dev/null"
serve_stop

TANDEM_EMU_FAULT=$GONE serve_start --devices "$DEVS" || { fail stream_moved_start "daemon did not start"; exit 0; }
stream 3 false
check stream_moved_finish_chunk sh -c "grep -qi '^x-tandem-devices: prefill=cpu; decode=fpga-emu:0' $T/sh.3 && jq -e '.choices[0].finish_reason == \"length\" and .tandem.devices == \"prefill=cpu; decode=cpu; moved_from=fpga-emu:0\" and .tandem.moves == 1' $T/last.3 >/dev/null"
serve_stop

TANDEM_EMU_FAULT=$GONE serve_start --devices "$DEVS" || { fail whole_moved_start "daemon did not start"; exit 0; }
code=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}')
check whole_moved_header sh -c "[ $code = 200 ] && [ \$(jq '.usage.completion_tokens' $T/body) = 64 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=cpu; moved_from=fpga-emu:0' $T/hdr"
serve_stop
