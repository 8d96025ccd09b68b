#!/bin/sh
# Devices this machine does not have are skipped, with a warning, as the README says: a cuda:N
# past the GPUs the driver sees (or with no NVIDIA driver) and an fpga:N without XRT or without
# that card. The daemon serves on what is left; it refuses to start when nothing is left, and
# when a device that is there fails to open (an emulated card with a bad fault spec).
. tests/e2e/lib/serve.sh
# 200 is past any machine's GPU count; no machine that runs these tests has XRT and a card 9
serve_start --devices cpu,cuda:200,fpga:9
rc=$?
check devices_absent_skipped_ready [ $rc = 0 ]
check devices_absent_cuda_warned grep -q 'level=warn event=device_skipped device=cuda:200 reason=' "$LOG"
check devices_absent_fpga_warned grep -q 'level=warn event=device_skipped device=fpga:9 reason=' "$LOG"
code=$(get "$ADMIN/admin/status")
check devices_absent_status sh -c "[ '$code' = 200 ] && jq -e '[.devices[].name] == [\"cpu\"]' $T/body >/dev/null"
code=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":4}')
check devices_absent_serves sh -c "[ '$code' = 200 ] && grep -qi '^x-tandem-devices: prefill=cpu; decode=cpu' $T/hdr"
[ $rc = 0 ] && serve_stop
check devices_absent_exit_zero [ "$RC" = 0 ]

# nothing left: exit 1 and say so
"$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cuda:200 >"$T/none" 2>&1
rc=$?
check devices_none_left_fails sh -c "[ $rc = 1 ] && grep -q \"none of 'cuda:200' is on this machine\" $T/none"

# present but failing to open: an error, not a skip
TANDEM_EMU_FAULT=no-such-fault "$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 \
    --devices cpu,fpga-emu:0 >"$T/broken" 2>&1
rc=$?
check devices_broken_fails sh -c "[ $rc = 1 ] && grep -q 'event=load_failed msg=\"device fpga-emu:0' $T/broken && ! grep -q device_skipped $T/broken"
# an unknown name is a typo, not an absent device
"$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu,tpu:0 >"$T/typo" 2>&1
rc=$?
check devices_unknown_fails sh -c "[ $rc = 1 ] && grep -q \"unknown device 'tpu:0'\" $T/typo"
