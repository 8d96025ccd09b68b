#!/bin/sh
# tandem serve with API and admin keys: every route with no key, a wrong key and the right key.
# /health and /ready answer without a key; everything else is 401 (with WWW-Authenticate) until
# the key is right, and then behaves as without auth (unknown routes 404 only then).
. tests/e2e/lib/serve.sh

printf '# keys\nsk-file-key\n' >"$T/keys"
serve_start --api-key-file "$T/keys" --api-key sk-flag-key --admin-key adm-key ||
    { fail auth_start "daemon did not start"; exit 0; }

# sweep NAME URL METHOD BODY WANT_WITH_RIGHT_KEY RIGHT_KEY
sweep() {
    name=$1 url=$2 method=$3 body=$4 want=$5 key=$6
    for k in none wrong right; do
        case $k in
        none) auth= ;;
        wrong) auth="Authorization: Bearer sk-wrong" ;;
        right) auth="Authorization: Bearer $key" ;;
        esac
        if [ "$method" = POST ]; then
            code=$(curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -X POST ${auth:+-H "$auth"} \
                -H 'Content-Type: application/json' --data-binary "$body" "$url")
        else
            code=$(curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' ${auth:+-H "$auth"} "$url")
        fi
        expect=$want
        [ "$k" != right ] && [ "$want" != open ] && expect=401
        [ "$want" = open ] && expect=200
        if [ "$code" = "$expect" ]; then ok "auth_${name}_$k"; else fail "auth_${name}_$k" "got $code want $expect"; fi
        if [ "$expect" = 401 ]; then
            check "auth_${name}_${k}_challenge" grep -qi '^www-authenticate: Bearer' "$T/hdr"
        fi
    done
}

sweep health "$API/health" GET "" open sk-flag-key
sweep ready "$API/ready" GET "" open sk-flag-key
sweep models "$API/v1/models" GET "" 200 sk-flag-key
sweep completions "$API/v1/completions" POST '{"prompt":"a","max_tokens":1}' 200 sk-file-key
sweep chat "$API/v1/chat/completions" POST '{"messages":[{"role":"user","content":"a"}],"max_tokens":1}' 200 sk-flag-key
sweep unknown_route "$API/v1/nothing" GET "" 404 sk-flag-key
sweep admin_metrics "$ADMIN/metrics" GET "" 200 adm-key
sweep admin_status "$ADMIN/admin/status" GET "" 200 adm-key
sweep admin_resume "$ADMIN/admin/resume" POST "" 503 adm-key
sweep admin_health "$ADMIN/health" GET "" open adm-key
# the API key does not open the admin listener, nor the admin key the API
check auth_api_key_not_admin [ "$(get "$ADMIN/metrics" -H 'Authorization: Bearer sk-flag-key')" = 401 ]
check auth_admin_key_not_api [ "$(get "$API/v1/models" -H 'Authorization: Bearer adm-key')" = 401 ]
check auth_scheme_case_insensitive [ "$(get "$API/v1/models" -H 'Authorization: bearer sk-flag-key')" = 200 ]
check auth_keys_not_logged sh -c "! grep -q 'sk-flag-key\|sk-file-key\|adm-key' $LOG"
# requests without the key for 1.3 s: a handful of log lines, the rest counted (before, a line a
# request: anyone who could reach the port could fill the disk)
before=$(wc -l <"$LOG")
python3 - "${API##*:}" >"$T/flood401" 2>&1 <<'PY'
import http.client, sys, time
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
n, end = 0, time.time() + 1.3
while time.time() < end:
    c.request("GET", "/v1/models")
    r = c.getresponse()
    r.read()
    n += r.status == 401
print(n)
PY
after=$(wc -l <"$LOG")
check auth_401_flood_sent [ "$(cat "$T/flood401")" -gt 100 ]
check auth_401_flood_log_bounded [ $((after - before)) -lt 10 ]
check auth_401_flood_counted grep -q 'event=requests_refused suppressed=.* last_status=401' "$LOG"
serve_stop
check auth_exit_zero [ "$RC" = 0 ]

# an admin listener off loopback without an admin key refuses to start
"$TANDEM" serve --admin-host 0.0.0.0 --port 0 --admin-port 0 --log-file "$T/refuse.log" >"$T/refuse.out" 2>&1
rc=$?
check auth_admin_off_loopback_needs_key sh -c "[ $rc = 2 ] && grep -q 'admin_key' $T/refuse.out"
