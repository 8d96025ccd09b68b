#!/bin/sh
# The whole test run: unit tests (build/tandem-tests), then every end-to-end script in tests/e2e/.
# Every line "ok ..." / "not ok ..." counts; skipped tests count as passed and say so.
# Each part's wall time is printed after it ("== took N s: part"), so a slow script shows.
# The last line is "N passed, N failed".
# TANDEM_TEST_JOBS (default: the core count) unit tests run at once (tests/main.c), and as many
# e2e scripts: each script's output is printed whole when it ends, in the order they end. The two
# long scripts start first, and fuzz_smoke.sh fuzzes in half the lanes (FUZZ_SMOKE_LANES) so
# that the others run beside it. TANDEM_TEST_JOBS=1: one at a time, in order.
BUILD=${BUILD:-build}
export BUILD
JOBS=${TANDEM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
export TANDEM_TEST_JOBS=$JOBS
log=$(mktemp)
out=$(mktemp -d)
now() { date +%s; }
echo "== unit tests"
t0=$(now)
"$BUILD/tandem-tests" "$@" 2>&1 | tee -a "$log"
echo "== took $(( $(now) - t0 )) s: unit tests"
if [ $# -eq 0 ]; then
    if [ -z "$FUZZ_SMOKE_LANES" ] && [ "$JOBS" -gt 1 ]; then
        export FUZZ_SMOKE_LANES=$((JOBS / 2))
    fi
    for t in tests/e2e/fuzz_smoke.sh tests/e2e/serve_san.sh tests/e2e/*.sh; do
        [ -f "$t" ] && echo "$t"
    done | awk '!seen[$0]++' >"$out/list"
    # each script's output into a file, printed whole (under a lock) when it ends
    export out
    xargs -P "$JOBS" -I{} sh -c '
        f="$out/$(basename "$1").out"
        t0=$(date +%s)
        { echo "== $1"; sh "$1" 2>&1; echo "== took $(( $(date +%s) - t0 )) s: $1"; } >"$f"
        if command -v flock >/dev/null 2>&1; then flock "$out/lock" cat "$f"; else cat "$f"; fi
        ' sh {} <"$out/list" | tee -a "$log"
fi
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^not ok ' "$log")
rm -rf "$log" "$out"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
