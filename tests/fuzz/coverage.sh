#!/bin/sh
# tests/fuzz/coverage.sh NAME [CORPUS] — source coverage a corpus reaches: builds the harnesses
# again with clang's source-based coverage (no sanitizers) into build/fuzz-cov/, replays CORPUS
# (default tests/fuzz/corpus/NAME) once, and prints llvm-cov's report for the files the harness
# targets. FUZZING.md's campaign table comes from it, run on each campaign's final corpus.
set -e
name=$1
corpus=${2:-tests/fuzz/corpus/$name}
[ -n "$name" ] && [ -d "$corpus" ] || { echo "usage: $0 NAME [CORPUS_DIR]" >&2; exit 2; }
case $name in
openai_req) src="proto/openai_req.c" ;;
kv_wire) src="proto/kv_wire.c" ;;
http) src="daemon/http_parse.c" ;;
model_load) src="model/ckpt/model.c model/ckpt/config.c model/ckpt/safetensors.c" ;;
tokenizer) src=$(ls model/tok/*.c) ;;
tmpl) src=$(ls model/tmpl/*.c) ;;
*) echo "$0: unknown harness $name" >&2; exit 2 ;;
esac
out=build/fuzz-cov
make --no-print-directory -s -j2 CUDA=0 FUZZ_DIR=$out \
    FUZZ_SAN="-fprofile-instr-generate -fcoverage-mapping" "$out/fuzz_$name" >/dev/null
rm -f "$out/$name".profraw
LLVM_PROFILE_FILE="$out/$name.profraw" "$out/fuzz_$name" -runs=0 "$corpus" >"$out/$name.log" 2>&1
llvm-profdata merge -sparse "$out/$name.profraw" -o "$out/$name.profdata"
llvm-cov report "$out/fuzz_$name" -instr-profile="$out/$name.profdata" $src
