#!/bin/sh
# The libFuzzer harnesses (tests/fuzz/, FUZZING.md) as a smoke test: build them (make fuzz-build:
# clang, -fsanitize=fuzzer,address,undefined, into build/fuzz/) and run each for
# $FUZZ_SMOKE_TIME seconds (default 20) on a scratch copy of its seed corpus; "ok fuzz_NAME" when
# it found nothing. Without clang's libFuzzer this fails (it never skips): install clang-14 and
# libclang-rt-14-dev (Debian 12), which make deps does.
#
#   fuzz_smoke.sh             every harness, $FUZZ_SMOKE_LANES at a time (default 2)
#   fuzz_smoke.sh K/N         part K of N: the harnesses whose place in name order is K-1 modulo
#                             N, one after another. tests/run.sh lists N parts, one per lane of
#                             its e2e phase, so the harnesses run on every core while each keeps
#                             a core (and its full time, and its whole corpus) to itself
#   fuzz_smoke.sh --build     only the build (tests/run.sh runs it beside the unit tests)
# The build is make's, under build_locked (tests/e2e/lib/build_lock.sh): parts and the early
# build never run make on the same files at once. Only part 1 (or the whole run) reports the
# toolchain and the build; the other parts say nothing more when those failed.
. tests/e2e/lib/build_lock.sh
FUZZ_SMOKE_TIME=${FUZZ_SMOKE_TIME:-20}
CC_FUZZ=${FUZZ_CC:-clang}
part=1
parts=1
all=1
case "$1" in
--build)
    build_locked fuzz make --no-print-directory -j2 CUDA=0 fuzz-build
    exit $?
    ;;
*/*)
    part=${1%/*}
    parts=${1#*/}
    all=0
    if ! [ "$part" -ge 1 ] 2>/dev/null || ! [ "$part" -le "$parts" ] 2>/dev/null; then
        echo "not ok fuzz_smoke_args # part $1: want K/N with 1 <= K <= N"
        exit 0
    fi
    ;;
esac
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS # the harnesses run with libFuzzer's own settings
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { [ "$part" = 1 ] && echo "$1"; }
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' > "$tmp/t.c"
if ! "$CC_FUZZ" -fsanitize=fuzzer,address,undefined -o "$tmp/t" "$tmp/t.c" >"$tmp/err" 2>&1; then
    report "not ok fuzz_toolchain # $CC_FUZZ cannot build a libFuzzer harness (Debian: apt-get install clang-14 libclang-rt-14-dev): $(head -c 300 "$tmp/err" | tr '\n' ' ')"
    exit 0
fi
report "ok fuzz_toolchain"
if ! build_locked fuzz make --no-print-directory -j2 CUDA=0 fuzz-build >"$tmp/build.log" 2>&1; then
    if [ "$part" = 1 ]; then
        echo "not ok fuzz_build # make fuzz-build failed"
        tail -n 30 "$tmp/build.log" | sed 's/^/#   /'
    fi
    exit 0
fi
names=$(ls tests/fuzz/harness/fuzz_*.c | sed 's|.*/fuzz_\(.*\)\.c|\1|' |
    awk -v k="$part" -v n="$parts" '(NR - 1) % n == k - 1')
[ -n "$names" ] || exit 0
if [ $all = 0 ]; then
    FUZZ_TIME=$FUZZ_SMOKE_TIME tests/fuzz/run.sh $names
    exit 0
fi
# the whole run: $FUZZ_SMOKE_LANES harnesses at a time (default 2: one per core of the 2-core CI
# machine; each harness is one process, so lanes halve the wall time and leave each its own full
# time)
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
