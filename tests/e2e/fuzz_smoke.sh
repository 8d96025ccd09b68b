#!/bin/sh
# The libFuzzer harnesses (tests/fuzz/, FUZZING.md) as a smoke test: build them (make fuzz-build:
# clang, -fsanitize=fuzzer,address,undefined, into build/fuzz/) and run each for
# $FUZZ_SMOKE_TIME seconds (default 20), two at a time, on a scratch copy of its seed corpus; "ok fuzz_NAME" when
# it found nothing. Without clang's libFuzzer this fails (it never skips): install clang-14 and
# libclang-rt-14-dev (Debian 12), which make deps does.
FUZZ_SMOKE_TIME=${FUZZ_SMOKE_TIME:-20}
CC_FUZZ=${FUZZ_CC:-clang}
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS # the harnesses run with libFuzzer's own settings
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' > "$tmp/t.c"
if ! "$CC_FUZZ" -fsanitize=fuzzer,address,undefined -o "$tmp/t" "$tmp/t.c" >"$tmp/err" 2>&1; then
    echo "not ok fuzz_toolchain # $CC_FUZZ cannot build a libFuzzer harness (Debian: apt-get install clang-14 libclang-rt-14-dev): $(head -c 300 "$tmp/err" | tr '\n' ' ')"
    exit 0
fi
echo "ok fuzz_toolchain"
if ! make --no-print-directory -j2 CUDA=0 fuzz-build >"$tmp/build.log" 2>&1; then
    echo "not ok fuzz_build # make fuzz-build failed"
    tail -n 30 "$tmp/build.log" | sed 's/^/#   /'
    exit 0
fi
names=$(ls tests/fuzz/harness/fuzz_*.c | sed 's|.*/fuzz_\(.*\)\.c|\1|')
# $FUZZ_SMOKE_LANES harnesses at a time (default 2: one per core of the 2-core CI machine; each
# harness is one process, so lanes halve the wall time and leave each its own full time);
# tests/run.sh gives half its jobs, the other scripts running beside it
lanes=${FUZZ_SMOKE_LANES:-2}
i=0
for n in $names; do
    echo "$n" >>"$tmp/lane.$((i % lanes))"
    i=$((i + 1))
done
for f in "$tmp"/lane.*; do
    FUZZ_TIME=$FUZZ_SMOKE_TIME tests/fuzz/run.sh $(cat "$f") >"$f.out" 2>&1 &
done
wait
cat "$tmp"/lane.*.out
exit 0
