#!/bin/sh
# tools/testdata.sh — unpacks the compressed test data (tests/data/<path>.gz) to build/data/<path>,
# as make does (the Makefile's TEST_DATA), for a machine that runs prebuilt binaries without make
# (the GPU machine: the working tree travels, build/ does not). Run from the repository root;
# files already unpacked and newer than their .gz are left alone.
set -eu
for gz in $(find tests/data -name '*.gz' | sort); do
    out=build/data/${gz#tests/data/}
    out=${out%.gz}
    [ -f "$out" ] && [ "$out" -nt "$gz" ] && continue
    mkdir -p "$(dirname "$out")"
    gzip -dc "$gz" >"$out.tmp" && mv "$out.tmp" "$out"
done
