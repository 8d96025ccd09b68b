#!/bin/sh
# A fleet behind HAProxy (Debian's haproxy, the shipped deploy/haproxy/haproxy.cfg with the test's
# addresses on its bind and server lines) in front of two daemons on loopback, with curl:
#   haproxy_config_valid   haproxy -c accepts the shipped file as it is
#   haproxy_spreads        concurrent requests through HAProxy reach both nodes (least-connections)
#   haproxy_all_ok         every one of them answers 200 with its text
#   haproxy_drain_idle     a node drained (POST /admin/drain on its admin port) gets no new
#                          requests once HAProxy's /ready check has seen it
#   haproxy_drain_ok       ... and every request still answers 200 (the other node takes them)
#   haproxy_drain_inflight streams running on a node when it is drained finish whole
#   haproxy_resume         after POST /admin/resume the node receives requests again
#   metrics_open_*         node 2 has an admin key and admin_metrics_open = 1: /metrics answers a
#                          scraper without the key (what the endpoint picker reads is there),
#                          /admin/status and /admin/drain still refuse it
#   haproxy_over_per_ip_limit  150 concurrent completions through HAProxy to one node with the
#                          daemon's default per-address limit (128): every client comes from
#                          HAProxy's one address, and the shipped server maxconn keeps HAProxy's
#                          connections below the limit (the rest wait in its queue), so all 150
#                          answer 200 (with maxconn 256 some got 408 and 429 while the node had room)
. tests/e2e/lib/serve.sh
CFG=deploy/haproxy/haproxy.cfg
NAMES="haproxy_config_valid haproxy_spreads haproxy_all_ok haproxy_drain_idle haproxy_drain_ok haproxy_drain_inflight haproxy_resume metrics_open_without_key metrics_open_status_keyed haproxy_over_per_ip_limit"
if ! command -v haproxy >/dev/null 2>&1; then
    for n in $NAMES; do echo "not ok $n # haproxy is not installed (make deps installs Debian's)"; done
    exit 0
fi
check haproxy_config_valid sh -c "haproxy -c -q -f $CFG"

HPID=
N1=
N2=
H3PID=
N3=
stop_all() {
    for p in $HPID $N1 $N2 $H3PID $N3; do kill -TERM $p 2>/dev/null; done
    for p in $HPID $N1 $N2 $H3PID $N3; do wait $p 2>/dev/null; done
}
trap 'stop_all; serve_cleanup' EXIT

# two nodes: serve_start's PID, API, ADMIN, LOG after each start
serve_start --step-delay-ms 20 || { fail haproxy_start "node 1 did not start"; exit 0; }
N1=$PID API1=$API ADMIN1=$ADMIN LOG1=$LOG
serve_start --step-delay-ms 20 --admin-key e2e-admin-key-0123 --admin-metrics-open 1 ||
    { fail haproxy_start "node 2 did not start"; exit 0; }
N2=$PID API2=$API ADMIN2=$ADMIN LOG2=$LOG
PID=

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
FRONT=$(free_port)
sed -e "s|^\(    bind \).*|\1127.0.0.1:$FRONT|" \
    -e "s|^\(    server node1 \)[^ ]*|\1${API1#http://}|" \
    -e "s|^\(    server node2 \)[^ ]*|\1${API2#http://}|" "$CFG" >"$T/haproxy.cfg"
haproxy -f "$T/haproxy.cfg" -db >"$T/haproxy.log" 2>&1 &
HPID=$!
FRONT_URL=http://127.0.0.1:$FRONT
# both servers up: HAProxy needs `rise 2` good checks (2 s at inter 1s) after start
front_up() {
    i=0
    while [ $i -lt 100 ]; do
        n=$(curl -s -o /dev/null -w '%{http_code}' "$1/ready")
        [ "$n" = 200 ] && break
        sleep 0.1
        i=$((i + 1))
    done
    sleep 2.5
}
front_up "$FRONT_URL"

count() { grep -c 'event=request .*path=/v1/completions' "$1"; }
# burst K TAG: K concurrent completions through HAProxy; codes in $T/codes.TAG
burst() {
    : >"$T/codes.$2"
    _pids=
    j=0
    while [ $j -lt "$1" ]; do
        curl -s -o "$T/b.$2.$j" -w '%{http_code}\n' -H 'Content-Type: application/json' \
            -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' \
            "$FRONT_URL/v1/completions" >>"$T/codes.$2" &
        _pids="$_pids $!"
        j=$((j + 1))
    done
    for p in $_pids; do wait "$p"; done
}

burst 12 a
a1=$(count "$LOG1")
a2=$(count "$LOG2")
check haproxy_spreads sh -c "[ $a1 -ge 2 ] && [ $a2 -ge 2 ] && [ $((a1 + a2)) -eq 12 ]"
check haproxy_all_ok sh -c "[ \$(grep -c '^200$' $T/codes.a) -eq 12 ] && [ \$(cat $T/b.a.* | jq -r '.choices[0].text' | sort -u | wc -l) -eq 1 ]"

# streams running on node 1 when it is drained: start 4 long ones, drain, they must finish
k=0
SPIDS=
while [ $k -lt 4 ]; do
    curl -s -N -o "$T/s.$k" -H 'Content-Type: application/json' \
        -d '{"prompt":"Once upon a time","max_tokens":80,"temperature":0,"stream":true}' \
        "$FRONT_URL/v1/completions" &
    SPIDS="$SPIDS $!"
    k=$((k + 1))
done
sleep 0.5
curl -s -o /dev/null -X POST "$ADMIN1/admin/drain"
sleep 2.5 # HAProxy's next /ready check (inter 1s, fall 1) has taken node 1 out
burst 10 d
for p in $SPIDS; do wait "$p"; done
# (a request's log line is written when it ends: the streams that were on node 1 end after the
# drain, so the drained node is judged by its non-streamed requests, all of the bursts')
check haproxy_drain_idle sh -c "[ \$(grep -c 'event=request .*path=/v1/completions .*stream=0' $LOG1) -eq $a1 ]"
check haproxy_drain_ok sh -c "[ \$(grep -c '^200$' $T/codes.d) -eq 10 ]"
check haproxy_drain_inflight sh -c "for k in 0 1 2 3; do grep -q '^data: \[DONE\]' $T/s.\$k || exit 1; [ \$(grep -c '^data: {' $T/s.\$k) -ge 80 ] || exit 1; done"
curl -s -o /dev/null -X POST "$ADMIN1/admin/resume"
sleep 3
burst 8 r
check haproxy_resume sh -c "[ \$(grep -c 'event=request .*path=/v1/completions .*stream=0' $LOG1) -gt $a1 ] && [ \$(grep -c '^200$' $T/codes.r) -eq 8 ]"

code=$(curl -s -o "$T/m2" -w '%{http_code}' "$ADMIN2/metrics")
check metrics_open_without_key sh -c "[ $code = 200 ] && grep -q '^tandem_num_requests_waiting ' $T/m2 && grep -q '^tandem_num_requests_running ' $T/m2"
check metrics_open_status_keyed sh -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $ADMIN2/admin/status) = 401 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' -X POST $ADMIN2/admin/drain) = 401 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer e2e-admin-key-0123' $ADMIN2/admin/status) = 200 ]"

# more concurrent clients than the daemon's per-address limit, through HAProxy to one node (a
# node of its own: room for them all, max_waiting and max_running above 150)
serve_start --step-delay-ms 20 --max-waiting 256 --max-running 64 ||
    { fail haproxy_over_per_ip_limit "node 3 did not start"; exit 0; }
N3=$PID API3=$API
PID=
FRONT3=$(free_port)
sed -e "s|^\(    bind \).*|\1127.0.0.1:$FRONT3|" -e "/^    server node2 /d" \
    -e "s|^\(    server node1 \)[^ ]*|\1${API3#http://}|" "$CFG" >"$T/haproxy3.cfg"
haproxy -f "$T/haproxy3.cfg" -db >"$T/haproxy3.log" 2>&1 &
H3PID=$!
front_up "http://127.0.0.1:$FRONT3"
python3 - "$FRONT3" >"$T/over" 2>&1 <<'PY'
import http.client, sys, threading
port, n = int(sys.argv[1]), 150
codes, lock = {}, threading.Lock()
go = threading.Barrier(n)
def client():
    go.wait()  # all connect together: 150 in flight at once
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", body='{"prompt":"Once upon a time","max_tokens":24,"temperature":0}',
                  headers={"Content-Type": "application/json"})
        st = c.getresponse().status
    except Exception as e:
        st = type(e).__name__
    with lock:
        codes[st] = codes.get(st, 0) + 1
ts = [threading.Thread(target=client) for _ in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
print(codes.get(200, 0), codes)
PY
check haproxy_over_per_ip_limit sh -c "[ \"\$(cut -d' ' -f1 $T/over)\" = 150 ] || { sed 's/^/# /' $T/over >&2; exit 1; }"
