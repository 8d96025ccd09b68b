#!/bin/sh
# The whole test run: unit tests (build/tandem-tests), then every end-to-end script in tests/e2e/.
# Every line "ok ..." / "not ok ..." counts; skipped tests count as passed and say so.
# Each part's wall time is printed after it ("== took N s: part"), so a slow script shows.
# The last line is "N passed, N failed".
# TANDEM_TEST_JOBS (default: the core count) unit tests run at once (tests/main.c), and as many
# e2e scripts: each script's output is printed whole when it ends, in the order they end. The
# long ones start first: fuzz_smoke.sh as one part per lane (`fuzz_smoke.sh K/N`: its harnesses
# dealt out, one after another in each part), then serve_san.sh. The two scripts' own builds (the
# libFuzzer harnesses, the ASan daemon: ~75 and ~145 CPU seconds) start in the background beside
# the unit tests, which leave cores idle (the emulated cards keep their timing model's pace); the
# scripts wait for them (tests/e2e/lib/build_lock.sh). Not niced: a script waiting for a niced
# build while another lane fuzzes would wait for as long as the machine stays busy.
# TANDEM_TEST_JOBS=1: one at a time, in order, nothing early.
BUILD=${BUILD:-build}
export BUILD
JOBS=${TANDEM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
export TANDEM_TEST_JOBS=$JOBS
log=$(mktemp)
out=$(mktemp -d)
now() { date +%s; }
prebuild=
if [ $# -eq 0 ] && [ "$JOBS" -gt 1 ] && command -v flock >/dev/null 2>&1; then
    # the e2e scripts' builds, beside the unit tests; their output only in the scripts' own runs
    (sh tests/e2e/fuzz_smoke.sh --build; sh tests/e2e/serve_san.sh --build) >"$out/prebuild.log" 2>&1 &
    prebuild=$!
    trap '[ -n "$prebuild" ] && kill "$prebuild" 2>/dev/null; exit 130' INT TERM
fi
echo "== unit tests"
t0=$(now)
"$BUILD/tandem-tests" "$@" 2>&1 | tee -a "$log"
echo "== took $(( $(now) - t0 )) s: unit tests"
if [ $# -eq 0 ]; then
    # one line per run: a script, then its arguments (fuzz_smoke.sh's parts)
    {
        if [ "$JOBS" -gt 1 ]; then
            k=1
            while [ $k -le "$JOBS" ]; do echo "tests/e2e/fuzz_smoke.sh $k/$JOBS"; k=$((k + 1)); done
        else
            echo tests/e2e/fuzz_smoke.sh
        fi
        for t in tests/e2e/serve_san.sh tests/e2e/*.sh; do
            [ -f "$t" ] && [ "$t" != tests/e2e/fuzz_smoke.sh ] && echo "$t"
        done | awk '!seen[$0]++'
    } >"$out/list"
    # each script's output into a file, printed whole (under a lock) when it ends
    export out
    xargs -P "$JOBS" -I{} sh -c '
        f="$out/$(echo "$1" | sed "s|^[^ ]*/||; s|[/ ]|_|g").out"
        t0=$(date +%s)
        { echo "== $1"; sh $1 2>&1; echo "== took $(( $(date +%s) - t0 )) s: $1"; } >"$f"
        if command -v flock >/dev/null 2>&1; then flock "$out/lock" cat "$f"; else cat "$f"; fi
        ' sh {} <"$out/list" | tee -a "$log"
fi
[ -n "$prebuild" ] && wait "$prebuild"
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^not ok ' "$log")
rm -rf "$log" "$out"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
