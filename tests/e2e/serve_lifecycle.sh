#!/bin/sh
# tandem serve's lifecycle: the sd_notify messages (NOTIFY_SOCKET at a test socket), SIGTERM
# drain with a request in flight (it completes, exit 0), SIGHUP reopening the log file.
. tests/e2e/lib/serve.sh

# A datagram listener standing in for systemd: one line per message, newlines as '|'.
python3 - "$T/notify" >"$T/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    msg = s.recv(4096).decode()
    print(msg.replace("\n", "|"), flush=True)
PY
# the same with wall-clock times, for the watchdog test below
cat >"$T/listen_t.py" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    msg = s.recv(4096).decode()
    print("%.3f %s" % (time.time(), msg.replace("\n", "|")), flush=True)
PY
listener=$!
i=0
while [ ! -S "$T/notify" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done

NOTIFY_SOCKET=$T/notify WATCHDOG_USEC=400000 serve_start --step-delay-ms 100 ||
    { fail lifecycle_start "daemon did not start"; kill $listener; exit 0; }
sleep 0.5
check notify_status_loading grep -q '^STATUS=loading model$' "$T/notify.log"
check notify_ready sh -c "grep -q '^READY=1|STATUS=ready' $T/notify.log"
check notify_watchdog grep -q '^WATCHDOG=1$' "$T/notify.log"
check notify_ready_after_loading sh -c "[ \$(grep -n 'READY=1' $T/notify.log | head -1 | cut -d: -f1) -gt \$(grep -n 'STATUS=loading' $T/notify.log | head -1 | cut -d: -f1) ]"

# SIGHUP: the log file is reopened (logrotate moved it away)
mv "$LOG" "$LOG.old"
kill -HUP "$PID"
sleep 0.2
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"a","max_tokens":1}' "$API/v1/completions"
i=0
while ! grep -q 'event=request' "$LOG" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.05; i=$((i + 1)); done
check sighup_reopens_log grep -q 'event=request' "$LOG"
check sighup_logged grep -q 'event=sighup logs_reopened=1' "$LOG"
check sighup_old_log_kept grep -q 'event=ready' "$LOG.old"

# SIGTERM with a request in flight: it completes (200, all its tokens), then exit 0.
curl -s -o "$T/inflight" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}' "$API/v1/completions" >"$T/inflight.code" &
client=$!
sleep 0.3
kill -TERM "$PID"
sleep 0.1
# new requests get 503 with Retry-After while it drains (the listener still accepts: a load
# balancer sees an answer telling it to go elsewhere, not a refused connection)
code=$(curl -s -o "$T/drain_body" -D "$T/drain_hdr" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"prompt":"a","max_tokens":1}' "$API/v1/completions")
check drain_answers_503 [ "$code" = 503 ]
check drain_retry_after grep -qi '^Retry-After: [0-9]' "$T/drain_hdr"
check drain_connection_close grep -qi '^Connection: close' "$T/drain_hdr"
check drain_json_error [ "$(jq -r .error.code "$T/drain_body")" = draining ]
wait "$client"
wait "$PID"
RC=$?
PID=
check drain_inflight_completes [ "$(cat "$T/inflight.code")" = 200 ]
check drain_inflight_all_tokens [ "$(jq '.usage.completion_tokens' "$T/inflight")" = 8 ]
check drain_exit_zero [ "$RC" = 0 ]
check notify_stopping grep -q '^STOPPING=1' "$T/notify.log"
check drain_logged grep -q 'event=shutdown reason=drained' "$LOG"
kill "$listener" 2>/dev/null

# A drain that times out cancels what still runs and exits 3, not 0 (systemd marks the stop failed).
serve_start --step-delay-ms 400 --drain-timeout 0.5 || { fail drain_timeout_start "daemon did not start"; exit 0; }
curl -s -o "$T/cut" -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}' "$API/v1/completions" &
client=$!
sleep 0.3
kill -TERM "$PID"
wait "$PID"
RC=$?
PID=
wait "$client"
check drain_timeout_exit_3 [ "$RC" = 3 ]
check drain_timeout_client_told [ "$(jq -r .error.code "$T/cut")" != null ]
check drain_timeout_logged grep -q 'event=shutdown reason="drain timeout' "$LOG"
# the cancelled request's line quotes its reason as every other logfmt value with spaces (it was
# printed bare: reason=drain timeout: ... read as one word and stray keys)
check drain_timeout_cancel_quoted grep -q 'event=request_cancelled id=[^ ]* reason="drain timeout: requests still in flight were cancelled"$' "$LOG"

# WATCHDOG=1 only while the engine makes progress: a device step that takes longer than
# watchdog_stall (the step delay stands in for a hung device) withholds the pings, which resume
# when it finishes.
python3 "$T/listen_t.py" "$T/notify2" >"$T/notify2.log" &
listener=$!
i=0
while [ ! -S "$T/notify2" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
NOTIFY_SOCKET=$T/notify2 WATCHDOG_USEC=200000 serve_start --step-delay-ms 1500 --watchdog-stall 0.5 ||
    { fail watchdog_start "daemon did not start"; kill $listener; exit 0; }
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"a","max_tokens":1}' "$API/v1/completions"
sleep 0.3
serve_stop
kill "$listener" 2>/dev/null
check watchdog_stall_logged grep -q 'event=stalled .*watchdog=starved' "$LOG"
check watchdog_progress_logged grep -q 'event=progress' "$LOG"
# no WATCHDOG=1 between the stall and the recovery (log times are UTC with milliseconds)
python3 - "$LOG" "$T/notify2.log" <<'PY' && ok watchdog_withheld_while_stalled || fail watchdog_withheld_while_stalled "pings while stalled"
import sys, datetime
def t(line):
    ts = line.split()[0][3:].rstrip("Z")
    return datetime.datetime.fromisoformat(ts).replace(tzinfo=datetime.timezone.utc).timestamp()
log = open(sys.argv[1]).read().splitlines()
a = t(next(l for l in log if "event=stalled" in l))
b = t(next(l for l in log if "event=progress" in l))
pings = [float(l.split()[0]) for l in open(sys.argv[2]) if l.split()[1] == "WATCHDOG=1"]
inside = [p for p in pings if a + 0.01 < p < b - 0.01]
before = [p for p in pings if p < a]
after = [p for p in pings if p > b]
sys.exit(0 if b - a > 0.3 and not inside and before and after else 1)
PY

# /admin/drain while the daemon loads (a rolling update drains a node that is still starting):
# it stays draining once loaded (before: warm-up set it ready and it served), until
# /admin/resume. The load is held ~2 s by a peer that does not answer (--peer-wait).
DLOG=$T/drainload.log
"$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --log-file "$DLOG" \
    --peers 127.0.0.1:9 --peer-key 0123456789abcdef0123 --peer-wait 2 >"$T/drainload.out" 2>&1 &
PID=$!
i=0
while [ $i -lt 100 ] && ! grep -q 'event=listening listener=admin' "$DLOG" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
DADMIN=http://127.0.0.1:$(sed -n 's/.*event=listening listener=admin .*port=\([0-9]*\).*/\1/p' "$DLOG" | head -1)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$DADMIN/admin/drain")
check drain_while_loading_accepted [ "$code" = 202 ]
check drain_while_loading_was_loading sh -c "! grep -q 'event=ready' '$DLOG'"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$DADMIN/admin/resume")
check drain_while_loading_no_resume_yet [ "$code" = 503 ]
i=0
while [ $i -lt 200 ] && ! grep -q 'event=ready' "$DLOG" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
check drain_while_loading_loaded grep -q 'event=ready .*draining=1' "$DLOG"
code=$(curl -s -o /dev/null -w '%{http_code}' "$DADMIN/ready")
check drain_while_loading_stays_draining [ "$code" = 503 ]
check drain_while_loading_status sh -c "curl -s '$DADMIN/admin/status' | jq -e '.state == \"draining\"' >/dev/null"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$DADMIN/admin/resume")
check drain_while_loading_resumed sh -c "[ '$code' = 200 ] && [ \"\$(curl -s -o /dev/null -w '%{http_code}' '$DADMIN/ready')\" = 200 ]"
serve_stop
