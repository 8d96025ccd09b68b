#!/bin/sh
# The whole test run: unit tests (build/tandem-tests), then every end-to-end script in tests/e2e/.
# Every line "ok ..." / "not ok ..." counts; skipped tests count as passed and say so.
# Each part's wall time is printed after it ("== took N s: part"), so a slow script shows.
# The last line is "N passed, N failed".
BUILD=${BUILD:-build}
export BUILD
log=$(mktemp)
status=0
now() { date +%s; }
echo "== unit tests"
t0=$(now)
"$BUILD/tandem-tests" "$@" 2>&1 | tee -a "$log"
echo "== took $(( $(now) - t0 )) s: unit tests"
for t in tests/e2e/*.sh; do
    [ -f "$t" ] || continue
    [ $# -gt 0 ] && continue
    echo "== $t"
    t0=$(now)
    sh "$t" 2>&1 | tee -a "$log"
    echo "== took $(( $(now) - t0 )) s: $t"
done
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^not ok ' "$log")
rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
