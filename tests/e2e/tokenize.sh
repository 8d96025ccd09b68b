#!/bin/sh
# `tandem tokenize` / `tandem detokenize` end to end on the bundled models (references: the
# stories260K golden ids and greedy text, tests/data/golden/stories260K/once.json and bos_only.json).
BUILD=${BUILD:-build}
T="$BUILD/tandem"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # name, command output, expected
    if [ "$2" = "$3" ]; then echo "ok $1"; else echo "not ok $1"; echo "#   got:      $2"; echo "#   expected: $3"; fi
}
check tokenize_model "$($T tokenize --model models/stories260K 'Once upon a time')" '{"ids":[1,403,407,261,378]}'
check tokenize_no_special "$($T tokenize --model models/stories260K --no-special 'Once upon a time')" '{"ids":[403,407,261,378]}'
check tokenize_tokenizer_file "$($T tokenize --tokenizer models/tiny-llama2-mha/tokenizer.json --no-special 'Hello world')" '{"ids":[15043,3186]}'
printf 'a\000b' > "$tmp/nul.txt"
check tokenize_text_file_exact_bytes "$($T tokenize --tokenizer models/tiny-llama2-mha/tokenizer.json --no-special --text-file "$tmp/nul.txt")" '{"ids":[263,3,29890]}'
ids=$(python3 -c 'import json; print(",".join(map(str, json.load(open("tests/data/golden/stories260K/bos_only.json"))["greedy_ids"])))')
want=$(python3 -c 'import json; print(json.load(open("tests/data/golden/stories260K/bos_only.json"))["greedy_text"])')
check detokenize_greedy "$($T detokenize --model models/stories260K --skip-special --ids "$ids")" "$want"
check detokenize_brackets "$($T detokenize --model models/stories260K --ids '[1, 403, 407]')" '<s> Once upon'
# round trip of exact bytes through the byte-level GPT-2 tokenizer
printf 'caf\303\251 \360\237\230\200\n\ttabs  and spaces\n' > "$tmp/t.txt"
ids=$($T tokenize --tokenizer build/data/tokenizer/gpt2/tokenizer.json --text-file "$tmp/t.txt" | sed 's/{"ids":\[\(.*\)\]}/\1/')
$T detokenize --tokenizer build/data/tokenizer/gpt2/tokenizer.json --raw --ids "$ids" > "$tmp/back.txt"
if cmp -s "$tmp/t.txt" "$tmp/back.txt"; then echo "ok detokenize_round_trip_raw"; else echo "not ok detokenize_round_trip_raw"; fi
# errors: one line on stderr, non-zero exit
err() { # name, expected exit status class (nonzero), command...
    name=$1; shift
    out=$("$@" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ "$lines" -ge 1 ] && printf '%s' "$out" | grep -q "tandem"; then echo "ok $name"; else echo "not ok $name (rc=$rc: $out)"; fi
}
err tokenize_missing_model "$T" tokenize --model /nonexistent 'x'
err tokenize_no_text "$T" tokenize --model models/stories260K
err tokenize_missing_file "$T" tokenize --model models/stories260K --text-file /nonexistent/file
err detokenize_bad_id "$T" detokenize --model models/stories260K --ids 1,99999
err detokenize_not_a_number "$T" detokenize --model models/stories260K --ids 1,x
err detokenize_no_ids "$T" detokenize --model models/stories260K
