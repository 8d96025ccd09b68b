# tests/e2e/lib/serve.sh — helpers for the end-to-end tests of `tandem serve` (sourced, not run:
# tests/run.sh only runs tests/e2e/*.sh). Every test starts the real daemon on loopback with
# ephemeral ports (read back from its log) and the bundled stories260K model.
#
#   serve_start [flags...]   starts it, waits for event=ready; sets PID API ADMIN LOG T
#                            (on the CPU alone — the texts the tests expect are the CPU's —
#                            unless the flags name --devices; SERVE_DEVICES= keeps the default
#                            configuration's devices)
#   serve_stop               SIGTERM, waits; sets RC
#   ok NAME / fail NAME WHY  result lines for tests/run.sh
#   check NAME CMD...        ok when CMD succeeds
#   golden_completion FILE   the text /v1/completions (and tandem generate) give for a stories260K
#                            golden's prompt: transformers' decode(ids + greedy_ids) after
#                            decode(ids), i.e. greedy_text with the space its first piece's
#                            "\u2581" stands for (from tokenizer.json's vocabulary) when the
#                            prompt has text of its own (an id above the specials 0-2)
#   emu_upload_runs          prints U, the runs an emulated card (fpga-emu:0) makes while it
#                            opens (the weight upload): a TANDEM_EMU_FAULT at run k fails the
#                            open while k <= U (binary search over `tandem generate`)
#   emu_ready "NAMES"        0 when the emulated card (fpga-emu:0) decodes a token; else 1 after
#                            a result line for each of NAMES: "not ok" with the reason, or a
#                            SKIP when this build has no emulator library beside $TANDEM
#   npm_need NAME PKG...     the Node packages in build/npm (npm install when one is missing);
#                            when the install fails, prints "ok NAME # SKIP" if the registry is
#                            unreachable, else "not ok NAME_install", and returns 1
#
# The helpers are sourced into the caller's shell, where every variable is global: their own
# variables carry a _serve_ prefix so that they never overwrite a caller's (a test's `name`, `i`
# or `path`). Only the documented ones (PID API ADMIN LOG T RC) are set for the caller.
BUILD=${BUILD:-build}
TANDEM=${TANDEM:-$BUILD/tandem}
T=$(mktemp -d /tmp/tandem-e2e.XXXXXX)
trap 'serve_cleanup' EXIT
PID=

ok() { echo "ok $1"; }
fail() { echo "not ok $1 # $2"; }
check() {
    _serve_check=$1
    shift
    if "$@"; then ok "$_serve_check"; else fail "$_serve_check" "$*"; fi
}

golden_completion() {
    jq -j --slurpfile _t models/stories260K/tokenizer.json '
        .greedy_ids[0] as $g
        | ($_t[0].model.vocab | to_entries | map(select(.value == $g)) | .[0].key) as $p
        | (if ((.ids | map(select(. > 2)) | length) > 0 and ($p | startswith("\u2581")))
           then " " else "" end) + .greedy_text' "$1"
}

serve_cleanup() {
    [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null
    rm -rf "$T"
}

# serve_start [flags...]: LOG is $T/log.N for the Nth start.
SERVE_N=0
serve_start() {
    SERVE_N=$((SERVE_N + 1))
    LOG=$T/log.$SERVE_N
    _serve_devs=${SERVE_DEVICES-cpu}
    # a later --devices in "$@" overrides this one
    [ -n "$_serve_devs" ] && set -- --devices "$_serve_devs" "$@"
    "$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --log-file "$LOG" "$@" \
        >"$T/out.$SERVE_N" 2>&1 &
    PID=$!
    _serve_i=0
    while [ $_serve_i -lt 200 ]; do
        if grep -q "event=ready" "$LOG" 2>/dev/null; then break; fi
        if ! kill -0 "$PID" 2>/dev/null; then break; fi
        sleep 0.05
        _serve_i=$((_serve_i + 1))
    done
    _serve_p1=$(sed -n 's/.*event=listening listener=api .*port=\([0-9]*\).*/\1/p' "$LOG" 2>/dev/null | head -1)
    _serve_p2=$(sed -n 's/.*event=listening listener=admin .*port=\([0-9]*\).*/\1/p' "$LOG" 2>/dev/null | head -1)
    API=http://127.0.0.1:$_serve_p1
    ADMIN=http://127.0.0.1:$_serve_p2
    if ! grep -q "event=ready" "$LOG" 2>/dev/null; then
        echo "# daemon did not become ready; log:" >&2
        cat "$LOG" "$T/out.$SERVE_N" >&2 2>/dev/null
        return 1
    fi
    return 0
}

serve_stop() {
    kill -TERM "$PID" 2>/dev/null
    wait "$PID"
    RC=$?
    PID=
}

# post PATH JSON [curl args...]: body to $T/body, headers to $T/hdr, prints the status code.
post() {
    _serve_path=$1
    _serve_data=$2
    shift 2
    curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$_serve_data" "$@" "$API$_serve_path"
}

get() {
    _serve_url=$1
    shift
    curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' "$@" "$_serve_url"
}

# jqb FILTER: jq over the last body, raw output.
jqb() { jq -r "$1" "$T/body"; }

emu_ready() {
    "$TANDEM" generate --device fpga-emu:0 --ids 1 --max-tokens 1 >"$T/emu_ready.log" 2>&1 && return 0
    if [ -f "$(dirname "$TANDEM")/libxrt_emu.so" ]; then
        for _serve_n in $1; do
            echo "not ok $_serve_n # fpga-emu:0 does not decode: $(tail -n 1 "$T/emu_ready.log")"
        done
    else
        for _serve_n in $1; do echo "ok $_serve_n # SKIP no libxrt_emu.so beside $TANDEM"; done
    fi
    return 1
}

emu_upload_runs() {
    _serve_lo=1
    _serve_hi=400
    while [ $_serve_lo -lt $_serve_hi ]; do
        _serve_mid=$(((_serve_lo + _serve_hi) / 2))
        if TANDEM_EMU_FAULT="card=0,run=$_serve_mid,kind=gone" "$TANDEM" generate --device fpga-emu:0 \
            --ids 1 --max-tokens 1 2>&1 | grep -q 'weight upload'; then
            _serve_lo=$((_serve_mid + 1))
        else
            _serve_hi=$_serve_mid
        fi
    done
    echo $((_serve_lo - 1))
}

npm_need() {
    _serve_name=$1
    shift
    for _serve_pkg in "$@"; do
        [ -d "build/npm/node_modules/$_serve_pkg" ] && continue
        mkdir -p build/npm
        npm install --silent --no-audit --no-fund --prefix build/npm "$@" >"$T/npm.log" 2>&1 && return 0
        if grep -qi 'ENOTFOUND\|ECONNREFUSED\|ETIMEDOUT\|EAI_AGAIN\|network' "$T/npm.log"; then
            echo "ok $_serve_name # SKIP the npm registry is unreachable"
        else
            fail "${_serve_name}_install" "$(tail -n 3 "$T/npm.log")"
        fi
        return 1
    done
    return 0
}
