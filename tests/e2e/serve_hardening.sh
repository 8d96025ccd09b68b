#!/bin/sh
# The daemon's front door under the hardening review's reproducers: the listener keeps accepting
# after being over max_connections (the race that left the API deaf while /ready said 200), a
# slow-header client is cut off at receive_timeout, malformed framing gets one JSON error, and a
# flood of 429s writes a bounded log. Each part is bounded in time.
. tests/e2e/lib/serve.sh

serve_start --max-connections 20 --max-connections-per-ip 0 --receive-timeout 1 --max-waiting 1 --max-running 1 \
    --step-delay-ms 20 || { fail hardening_start "daemon did not start"; exit 0; }
PORT=${API##*:}

# 1. the reproducer: 30 clients send a request line and hang up together, 6 rounds; /health must
#    answer after each (before the fix 11 of 16 runs left it deaf for minutes)
python3 - "$PORT" >"$T/race" 2>&1 <<'PY'
import socket, sys, time, urllib.request
port = int(sys.argv[1])
for r in range(6):
    socks = []
    for i in range(30):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(b"GET /v1/models HTTP/1.1\r\n")
            socks.append(s)
        except OSError:
            pass
    time.sleep(0.2)
    for s in socks:
        s.close()
    time.sleep(0.05)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
        assert b'"ok"' in body
    except Exception as e:
        print(f"round {r}: /health did not answer: {e}")
        sys.exit(1)
print("ok")
PY
check listener_accepts_after_limit grep -q '^ok$' "$T/race"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$ADMIN/ready")
check ready_after_race [ "$code" = 200 ]

# 2. a header line every 300 ms against receive_timeout 1 s: 408 JSON within ~1 s
python3 - "$PORT" >"$T/slow" 2>&1 <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
t0 = time.time()
s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
out = b""
s.settimeout(0.3)
for i in range(20):
    try:
        s.sendall(b"X-Slow-%d: 1\r\n" % i)
    except OSError:
        break
    try:
        b = s.recv(4096)
        if not b:
            break
        out += b
    except socket.timeout:
        pass
print(f"{time.time() - t0:.2f}")
print(out.decode("latin1"))
PY
took=$(head -1 "$T/slow")
check slow_headers_408 grep -q '^HTTP/1.1 408 ' "$T/slow"
check slow_headers_json grep -q '"code":"request_receive_timeout"' "$T/slow"
check slow_headers_cut_in_time awk -v t="$took" 'BEGIN { exit !(t < 3) }'

# 3. malformed Content-Length: one status line, one JSON body (was: headers twice, then HTML)
for cl in abc -1 99999999999999999999; do
    python3 - "$PORT" "$cl" >"$T/cl" 2>&1 <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + sys.argv[2].encode() + b"\r\n\r\n")
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
sys.stdout.write(out.decode("latin1"))
PY
    n=$(grep -c '^HTTP/1.1 ' "$T/cl")
    check "bad_content_length_${cl}_one_response" [ "$n" = 1 ]
    check "bad_content_length_${cl}_json" sh -c "sed '1,/^\r\$/d' '$T/cl' | jq -e .error.code >/dev/null"
done

# 4. a 429 flood writes a bounded log: 8 clients hammering a daemon that runs 1 sequence and
#    queues 1, for 2.5 s (two log windows): thousands of 429s, a handful of lines
before=$(wc -l <"$LOG")
python3 - "$PORT" >"$T/flood" 2>&1 <<'PY'
import http.client, sys, threading, time
port = int(sys.argv[1])
codes = {}
lock = threading.Lock()
def client():
    end = time.time() + 2.5
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while time.time() < end:
        c.request("POST", "/v1/completions", body='{"prompt":"a","max_tokens":16}',
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        with lock:
            codes[r.status] = codes.get(r.status, 0) + 1
ts = [threading.Thread(target=client) for _ in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
print(codes.get(429, 0), codes)
PY
after=$(wc -l <"$LOG")
n429=$(cut -d' ' -f1 "$T/flood")
check flood_got_many_429 [ "${n429:-0}" -gt 200 ]
check flood_log_bounded [ $((after - before)) -lt 60 ]
check flood_counted grep -q 'event=requests_refused suppressed=' "$LOG"
# the queue-full 429s are on /metrics (tandem_request_rejected_queue_full_total was counted but
# never exported)
nq=$(curl -s "$ADMIN/metrics" | sed -n 's/^tandem_request_rejected_queue_full_total \([0-9.e+]*\)$/\1/p')
check flood_queue_full_exported awk -v n="${nq:-0}" -v k="${n429:-0}" 'BEGIN { exit !(n > 200 && n <= k) }'

# 5. work a body asks for stays off the loop: a 300-byte grammar whose nested repetition counts
#    expand to the compiler's bound of elements (was 2-10 s on the loop: the rule names' scan;
#    now compiled on the thread pool in ~0.1 s and refused with the matcher's bound), and a 3 MB
#    /tokenize with pieces (answered from the thread pool like a large completion body, ~2 s);
#    /health asked meanwhile answers at once (before: it waited for the whole request)
python3 - "$PORT" >"$T/offloop" 2>&1 <<'PY'
import http.client, json, sys, threading, time
port = int(sys.argv[1])
def post(path, body, out):
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    b = r.read()
    out.append((r.status, time.time() - t0, b))
def health_during(path, body):
    out = []
    th = threading.Thread(target=post, args=(path, body, out))
    th.start()
    time.sleep(0.3)
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/health")
    c.getresponse().read()
    h = time.time() - t0
    th.join()
    return out[0][0], out[0][1], h
g = "root ::= " + "(" * 29 + '"a"' + "){0,1000}" * 29
out = []
post("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 1, "grammar": g}), out)
print(f"grammar {out[0][0]} {out[0][1]:.2f} {json.loads(out[0][2])['error']['message']}")
body = json.dumps({"content": "Once upon a time " * 180000, "with_pieces": True})
st, took, h = health_during("/tokenize", body)
print(f"tokenize {st} {took:.2f} {h:.3f}")
PY
# the grammar's line: status, seconds, the message; tokenize's: status, the request's seconds,
# /health's seconds (the request must take long enough for the check to mean something)
check grammar_bound_refused_fast awk '$1 == "grammar" && $2 == 400 && $3 < 2 && /too much work/ { ok = 1 } END { exit !ok }' "$T/offloop"
check tokenize_large_off_loop awk '$1 == "tokenize" && $2 == 200 && ($3 < 0.6 || $4 < $3 / 3) { ok = 1 } END { exit !ok }' "$T/offloop"

serve_stop
check hardening_clean_exit [ "$RC" = 0 ]

# 6. a full API listener is not ready: with max_connections 3, three streams being served leave
#    no slot for a newcomer (it gets 503), so the admin /ready and tandem_ready say so; with two
#    the API's own /ready (its asker holding the third slot) and the admin's say ready, and once
#    the streams end all is ready again. Before: admin /ready 200 and tandem_ready 1 while the
#    API refused every new connection (the self-probe that was to notice is exempt from the limits).
serve_start --max-connections 3 --max-connections-per-ip 0 --step-delay-ms 100 ||
    { fail full_start "daemon did not start"; exit 0; }
stream() {
    curl -s -N -o "$T/full.$1" -H 'Content-Type: application/json' \
        -d '{"prompt":"Once upon a time","max_tokens":30,"stream":true}' "$API/v1/completions" &
}
ready_of() { curl -s -o "$T/ready.body" -w '%{http_code}' -m 5 "$1/ready"; }
metric_ready() { curl -s "$ADMIN/metrics" | sed -n 's/^tandem_ready \([0-9]*\)$/\1/p'; }
stream 1
P1=$!
stream 2
P2=$!
sleep 0.8
two_api=$(ready_of "$API")
two_admin=$(ready_of "$ADMIN")
stream 3
P3=$!
sleep 0.8
full_admin=$(ready_of "$ADMIN")
cp "$T/ready.body" "$T/full.ready"
full_metric=$(metric_ready)
full_api=$(ready_of "$API")
wait $P1 $P2 $P3
after_admin=$(ready_of "$ADMIN")
after_metric=$(metric_ready)
check ready_two_of_three [ "$two_api" = 200 -a "$two_admin" = 200 ]
check ready_full_admin_503 [ "$full_admin" = 503 ]
check ready_full_says_why sh -c "grep -q 'every connection slot of the API listener' $T/full.ready || { sed 's/^/# /' $T/full.ready >&2; exit 1; }"
check ready_full_metric_0 [ "$full_metric" = 0 ]
check ready_full_api_refused [ "$full_api" = 503 ]
check ready_after_full [ "$after_admin" = 200 -a "$after_metric" = 1 ]
check ready_full_streams_done sh -c "for k in 1 2 3; do grep -q '^data: \[DONE\]' $T/full.\$k || exit 1; done"
serve_stop
