#!/bin/sh
# /metrics after some traffic passes `promtool check metrics` (Prometheus' own linter) without a
# single complaint and holds the vLLM-style families issue 4 lists (tandem_ for vllm:, the README
# maps them), with counts that match the traffic; /admin/status is JSON with devices and queues.
. tests/e2e/lib/serve.sh

serve_start || { fail metrics_start "daemon did not start"; exit 0; }
for i in 1 2 3; do post /v1/completions '{"prompt":"Once upon a time","max_tokens":4}' >/dev/null; done
curl -s -N -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":[1,403],"max_tokens":3,"stream":true}' "$API/v1/completions"
post /v1/completions '{"prompt":"a","temperature":5}' >/dev/null
curl -s "$ADMIN/metrics" >"$T/metrics"
# promtool exits 1 on a format error and 3 on lint problems (a ':' in a name, reserved for
# recording rules, is one): anything but exit 0 with nothing printed fails.
if command -v promtool >/dev/null; then
    promtool check metrics <"$T/metrics" >"$T/promtool" 2>&1
    rc=$?
    if [ $rc = 0 ] && [ ! -s "$T/promtool" ]; then ok metrics_promtool; else
        fail metrics_promtool "rc $rc: $(head -c 400 "$T/promtool")"; fi
else
    fail metrics_promtool "promtool is not installed (Debian package prometheus; make deps)"
fi
check metrics_no_colon sh -c "! grep -v '^#' $T/metrics | cut -d' ' -f1 | cut -d'{' -f1 | grep -q ':'"
for m in 'tandem_time_to_first_token_seconds_count 4' 'tandem_e2e_request_latency_seconds_count 4' \
    'tandem_request_queue_time_seconds_count 4' 'tandem_prompt_tokens_total 17' \
    'tandem_generation_tokens_total 15' 'tandem_request_success_total{finished_reason="length"} 4' \
    'tandem_num_requests_running 0' 'tandem_num_requests_waiting 0' \
    'tandem_http_responses_total{status="400"} 1' 'tandem_inter_token_latency_seconds_count 11' \
    'tandem_device_health{device="cpu",kind="cpu",state="ok"} 1'; do
    name=metrics_$(echo "$m" | sed 's/[^a-z_]*//g' | cut -c1-60)
    check "$name" grep -qF "$m" "$T/metrics"
done
check metrics_busy_seconds grep -q '^tandem_device_busy_seconds_total{device="cpu",kind="cpu"} [0-9.e-]*$' "$T/metrics"
check metrics_content_type sh -c "curl -s -D - -o /dev/null $ADMIN/metrics | grep -qi '^content-type: text/plain; version=0.0.4'"
code=$(get "$ADMIN/admin/status")
check status_json sh -c "[ $code = 200 ] && jq -e '.state == \"ready\" and .devices[0].name == \"cpu\" and .devices[0].warm == true and .queue.running == 0 and (.requests|type) == \"array\"' $T/body >/dev/null"
serve_stop
check metrics_exit_zero [ "$RC" = 0 ]
