#!/bin/sh
# tandem serve with cors_origins (daemon/http_cors.h): what a browser sends, with curl.
# Unset: no Access-Control-* header anywhere, a preflight is refused as before (401 without the
# key). A list: a preflight from a listed origin is a 204 with the allow headers and needs no key;
# that origin's requests get Access-Control-Allow-Origin (the origin) and Vary: Origin on every
# answer: 200, 401, 413 (the listener's own), an event stream, /ready. An origin not listed gets
# no CORS header and is not refused. "*": any origin, "*" in the header, no Vary. The admin
# listener never has CORS. A bad list stops start-up with a message naming the key.
. tests/e2e/lib/serve.sh

WEB=https://ui.example.com
CHAT='{"messages":[{"role":"user","content":"a"}],"max_tokens":2}'

# preflight URL ORIGIN [REQUEST_HEADERS]: OPTIONS as a browser sends it (no key); prints the
# status, headers in $T/hdr
preflight() {
    curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -X OPTIONS -H "Origin: $2" \
        -H 'Access-Control-Request-Method: POST' ${3:+-H "Access-Control-Request-Headers: $3"} "$1"
}
# hdr NAME: the value of header NAME in $T/hdr (empty when absent)
hdr() { grep -i "^$1:" "$T/hdr" | head -1 | sed 's/^[^:]*: *//' | tr -d '\r'; }
no_cors() { ! grep -qi '^access-control-' "$T/hdr"; }

# ---------------------------------------------------------------- unset: today's behaviour
serve_start --api-key sk-k || { fail cors_start "daemon did not start"; exit 0; }
code=$(preflight "$API/v1/chat/completions" "$WEB" "authorization,content-type")
check cors_unset_preflight_refused [ "$code" = 401 ]
check cors_unset_preflight_no_headers no_cors
code=$(post /v1/chat/completions "$CHAT" -H "Origin: $WEB" -H 'Authorization: Bearer sk-k')
check cors_unset_request_ok [ "$code" = 200 ]
check cors_unset_request_no_headers no_cors
check cors_unset_no_vary sh -c "! grep -qi '^vary:' $T/hdr"
serve_stop

# ---------------------------------------------------------------- a list of origins
serve_start --api-key sk-k --max-body-bytes 2048 \
    --cors-origins "http://localhost:5173, $WEB" || { fail cors_list_start "daemon did not start"; exit 0; }
code=$(preflight "$API/v1/chat/completions" "$WEB" "authorization,content-type,x-stainless-os")
check cors_preflight_204 [ "$code" = 204 ]
check cors_preflight_origin [ "$(hdr access-control-allow-origin)" = "$WEB" ]
check cors_preflight_methods [ "$(hdr access-control-allow-methods)" = POST ]
check cors_preflight_headers [ "$(hdr access-control-allow-headers)" = "Authorization, Content-Type, x-stainless-os" ]
check cors_preflight_max_age [ "$(hdr access-control-max-age)" = 600 ]
check cors_preflight_vary_origin grep -qi '^vary: Origin' "$T/hdr"
check cors_preflight_vary_request_headers grep -qi '^vary: Access-Control-Request-Headers' "$T/hdr"
check cors_preflight_no_length sh -c "! grep -qi '^content-length:' $T/hdr"
check cors_preflight_no_credentials sh -c "! grep -qi '^access-control-allow-credentials' $T/hdr"
code=$(preflight "$API/v1/models" "http://localhost:5173")
check cors_preflight_get_route [ "$code" = 204 ]
check cors_preflight_get_route_methods [ "$(hdr access-control-allow-methods)" = "GET, HEAD" ]
check cors_preflight_get_route_origin [ "$(hdr access-control-allow-origin)" = "http://localhost:5173" ]
# a requested header that is not a token: only the base list
code=$(preflight "$API/v1/chat/completions" "$WEB" "x-a(b)")
check cors_preflight_bad_header_list [ "$code" = 204 ]
check cors_preflight_bad_header_list_base [ "$(hdr access-control-allow-headers)" = "Authorization, Content-Type" ]
# an origin not listed: served as without CORS (the key is asked for), no header
code=$(preflight "$API/v1/chat/completions" "https://evil.example.com")
check cors_preflight_other_origin [ "$code" = 401 ]
check cors_preflight_other_origin_no_headers no_cors
# a path that is no route is not preflighted
code=$(preflight "$API/v1/nothing" "$WEB")
check cors_preflight_unknown_route [ "$code" = 401 ]
# OPTIONS without Access-Control-Request-Method is not a preflight
code=$(curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -X OPTIONS -H "Origin: $WEB" \
    -H 'Authorization: Bearer sk-k' "$API/v1/chat/completions")
check cors_plain_options_405 [ "$code" = 405 ]
check cors_plain_options_origin [ "$(hdr access-control-allow-origin)" = "$WEB" ]

# the real requests
code=$(post /v1/chat/completions "$CHAT" -H "Origin: $WEB" -H 'Authorization: Bearer sk-k')
check cors_request_200 [ "$code" = 200 ]
check cors_request_origin [ "$(hdr access-control-allow-origin)" = "$WEB" ]
check cors_request_vary [ "$(hdr vary)" = Origin ]
check cors_request_expose [ "$(hdr access-control-expose-headers)" = "x-request-id, x-tandem-devices, Retry-After" ]
check cors_request_id_exposed [ -n "$(hdr x-request-id)" ]
# the 401 a page gets without the key: readable (the browser shows the error, not a CORS failure)
code=$(post /v1/chat/completions "$CHAT" -H "Origin: $WEB")
check cors_401 [ "$code" = 401 ]
check cors_401_readable [ "$(hdr access-control-allow-origin)" = "$WEB" ]
check cors_401_body [ "$(jqb .error.code)" = invalid_api_key ]
# an event stream
curl -s -N -D "$T/hdr" -o "$T/sse" -H "Origin: $WEB" -H 'Authorization: Bearer sk-k' \
    -H 'Content-Type: application/json' \
    --data-binary '{"messages":[{"role":"user","content":"a"}],"max_tokens":3,"stream":true}' \
    "$API/v1/chat/completions"
check cors_sse_origin [ "$(hdr access-control-allow-origin)" = "$WEB" ]
check cors_sse_done grep -q '^data: \[DONE\]' "$T/sse"
# a body too large, refused by the listener itself: by its Content-Length with the head (what
# fetch() sends), and chunked after the handler saw the head (the length known as it arrives)
head -c 4000 /dev/zero | tr '\0' a >"$T/big"
code=$(post /v1/chat/completions @"$T/big" -H "Origin: $WEB" -H 'Authorization: Bearer sk-k')
check cors_413 [ "$code" = 413 ]
check cors_413_readable [ "$(hdr access-control-allow-origin)" = "$WEB" ]
code=$(curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -H "Origin: $WEB" -H 'Authorization: Bearer sk-k' \
    -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' --data-binary @"$T/big" \
    "$API/v1/chat/completions")
check cors_413_chunked [ "$code" = 413 ]
check cors_413_chunked_readable [ "$(hdr access-control-allow-origin)" = "$WEB" ]
# the probes too (a dashboard polls /ready from the page)
code=$(get "$API/ready" -H "Origin: $WEB")
check cors_ready [ "$code" = 200 ]
check cors_ready_origin [ "$(hdr access-control-allow-origin)" = "$WEB" ]
# an origin not listed: served, no CORS header, Vary still says the answer depends on Origin
code=$(post /v1/chat/completions "$CHAT" -H "Origin: https://evil.example.com" -H 'Authorization: Bearer sk-k')
check cors_other_origin_served [ "$code" = 200 ]
check cors_other_origin_no_headers no_cors
check cors_other_origin_vary [ "$(hdr vary)" = Origin ]
# scheme and host compare without case, and the request's own spelling is echoed
code=$(get "$API/v1/models" -H "Origin: HTTPS://UI.example.com" -H 'Authorization: Bearer sk-k')
check cors_origin_case [ "$(hdr access-control-allow-origin)" = "HTTPS://UI.example.com" ]
# preflights need no key, so anyone can send them by the thousand: they are logged as refusals
# are, the first of each second and a count
before=$(wc -l <"$LOG")
python3 - "${API##*:}" "$WEB" >"$T/flood" 2>&1 <<'PY'
import http.client, sys, time
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
h = {"Origin": sys.argv[2], "Access-Control-Request-Method": "POST"}
n, end = 0, time.time() + 1.3
while time.time() < end:
    c.request("OPTIONS", "/v1/chat/completions", headers=h)
    r = c.getresponse()
    r.read()
    n += r.status == 204
print(n)
PY
after=$(wc -l <"$LOG")
check cors_preflight_flood_sent [ "$(cat "$T/flood")" -gt 100 ]
check cors_preflight_flood_log_bounded [ $((after - before)) -lt 10 ]
# the admin listener: never
code=$(get "$ADMIN/health" -H "Origin: $WEB")
check cors_admin_none no_cors
serve_stop
check cors_list_exit_zero [ "$RC" = 0 ]

# ---------------------------------------------------------------- any origin
serve_start --cors-origins '*' || { fail cors_any_start "daemon did not start"; exit 0; }
code=$(preflight "$API/v1/completions" "https://anything.example.org" "content-type")
check cors_any_preflight [ "$code" = 204 ]
check cors_any_preflight_origin [ "$(hdr access-control-allow-origin)" = "*" ]
check cors_any_preflight_vary [ "$(hdr vary)" = "Access-Control-Request-Headers" ]
code=$(post /v1/completions '{"prompt":"a","max_tokens":1}' -H "Origin: https://anything.example.org")
check cors_any_request [ "$code" = 200 ]
check cors_any_request_origin [ "$(hdr access-control-allow-origin)" = "*" ]
check cors_any_no_vary sh -c "! grep -qi '^vary:' $T/hdr"
serve_stop

# ---------------------------------------------------------------- bad lists stop start-up
i=0
for bad in 'https://a.example.com/' 'https://*.example.com' 'https://a.example.com:443' 'null' \
    '*, https://a.example.com' 'https://a.example.com,,http://b' 'a.example.com'; do
    i=$((i + 1))
    "$TANDEM" serve --cors-origins "$bad" --port 0 --admin-port 0 --log-file "$T/bad.log" >"$T/bad.out" 2>&1
    rc=$?
    check "cors_bad_list_refused_$i" sh -c "[ $rc = 2 ] && grep -qF \"cors_origins\" $T/bad.out"
done
