#!/bin/sh
# The whole test run: unit tests (build/tandem-tests), then every end-to-end script in tests/e2e/.
# Every line "ok ..." / "not ok ..." counts; skipped tests count as passed and say so.
# The last line is "N passed, N failed".
BUILD=${BUILD:-build}
export BUILD
log=$(mktemp)
status=0
echo "== unit tests"
"$BUILD/tandem-tests" "$@" 2>&1 | tee -a "$log"
for t in tests/e2e/*.sh; do
    [ -f "$t" ] || continue
    [ $# -gt 0 ] && continue
    echo "== $t"
    sh "$t" 2>&1 | tee -a "$log"
done
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^not ok ' "$log")
rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
