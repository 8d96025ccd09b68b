#!/bin/sh
# tests/fuzz/run.sh NAME... — runs each libFuzzer harness build/fuzz/fuzz_NAME for $FUZZ_TIME
# seconds (default 60) on a scratch copy of tests/fuzz/corpus/NAME (build/fuzz/run/NAME/corpus,
# which keeps what the run added), with tests/fuzz/dict/NAME.dict when there is one.
# Prints "ok fuzz_NAME" or "not ok fuzz_NAME # why" per harness and exits 1 if any failed; a
# crashing input is left in build/fuzz/run/NAME/ (crash-*, leak-*, timeout-*, oom-*).
# FUZZ_JOBS=N runs N harness processes in parallel per harness (libFuzzer -fork).
FUZZ_TIME=${FUZZ_TIME:-60}
FUZZ_DIR=${FUZZ_DIR:-build/fuzz}
status=0
for name in "$@"; do
    bin="$FUZZ_DIR/fuzz_$name"
    run="$FUZZ_DIR/run/$name"
    if [ ! -x "$bin" ]; then
        echo "not ok fuzz_$name # $bin missing (make fuzz-build)"
        status=1
        continue
    fi
    rm -rf "$run"
    mkdir -p "$run/corpus"
    cp tests/fuzz/corpus/"$name"/* "$run/corpus/"
    set -- -max_total_time="$FUZZ_TIME" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$run/"
    [ -f "tests/fuzz/dict/$name.dict" ] && set -- "$@" -dict="tests/fuzz/dict/$name.dict"
    [ -n "$FUZZ_JOBS" ] && set -- "$@" -fork="$FUZZ_JOBS" -ignore_crashes=0
    "$bin" "$@" "$run/corpus" >"$run/log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run/log")
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$run/log" | tail -n 1)
    if [ $rc -eq 0 ]; then
        echo "ok fuzz_$name # ${FUZZ_TIME} s, ${runs:-?} runs (${rate:-?}/s), $cov"
    else
        art=$(ls "$run" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | head -n 1)
        why=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|broken promise' "$run/log")
        echo "not ok fuzz_$name # rc=$rc ${why:-see $run/log} ${art:+(input: $run/$art)}"
        tail -n 40 "$run/log" | sed 's/^/#   /'
        status=1
    fi
done
exit $status
