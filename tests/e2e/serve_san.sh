#!/bin/sh
# tandem serve built with AddressSanitizer + UndefinedBehaviorSanitizer (make SAN=1, into
# build/san) against hostile bodies — malformed, duplicate-key, deeply nested, wrong-typed,
# invalid UTF-8, NUL escapes, oversized arrays — then a valid request that still returns the
# golden text; a clean SIGTERM exit with no sanitizer report (leaks included).
# `serve_san.sh --build` only builds (tests/run.sh runs it beside the unit tests); the build is
# under build_locked (tests/e2e/lib/build_lock.sh), so the test waits for that one or finds it done.
. tests/e2e/lib/build_lock.sh
san_build() {
    if [ ! -x build/san/tandem ] || [ "$(find daemon proto scheduler model cpu -newer build/san/tandem -name '*.[ch]' | head -1)" ]; then
        make -s -j2 SAN=1 build/san/tandem
    fi
}
if [ "$1" = --build ]; then
    build_locked san san_build
    exit $?
fi
. tests/e2e/lib/serve.sh

build_locked san san_build >"$T/make.log" 2>&1 || { fail san_build "$(tail -n 5 "$T/make.log")"; exit 0; }
TANDEM=build/san/tandem
export ASAN_OPTIONS="detect_leaks=1:log_path=$T/asan:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$T/ubsan"
serve_start || { fail san_start "sanitized daemon did not start"; exit 0; }

i=0
bad() {
    i=$((i + 1))
    code=$(curl -s -o "$T/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$1" "$API$2")
    case $code in 4*) ok "san_bad_$i";; *) fail "san_bad_$i" "status $code for $(head -c 80 "$1")";; esac
}
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
cases = [
    b'{', b'}', b'{"prompt":', b'{"prompt":"a"', b'nul\x00l', b'\xff\xfe\x00{', b'"just a string"', b'12',
    b'{"prompt":"a","prompt":"b"}',
    b'{"messages":[{"role":"user","content":"a","content":"b"}]}',
    b'{"prompt":"a","x":' + b'[' * 100000 + b']' * 100000 + b'}',
    b'{"prompt":"a","x":' + b'{"a":' * 5000 + b'1' + b'}' * 5000 + b'}',
    b'[' * 200000,
    b'{"prompt":"\xc3\x28\xa0\xa1"}',
    b'{"prompt":"a\\u0000b"}',
    b'{"prompt":"\\ud800"}',
    b'{"prompt":"a","max_tokens":1e400}',
    b'{"prompt":"a","max_tokens":-9223372036854775809}',
    b'{"prompt":"a","n":1.0e10}',
    b'{"prompt":"a","stop":' + json.dumps(["s"] * 10000).encode() + b'}',
    b'{"prompt":"a","logit_bias":' + json.dumps({str(i): 1 for i in range(5000)}).encode() + b'}',
    b'{"prompt":' + json.dumps([1] * 100000).encode() + b'}',
    b'{"prompt":[[1,2],["x"]]}',
    b'{"prompt":{"a":1}}',
    b'{"prompt":"a","temperature":"NaN"}',
    b'{"prompt":"a","seed":18446744073709551616}',
    b'{"messages":[{"role":"user","content":[{"type":"text"}]}]}',
    b'{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}',
    b'{"messages":[null]}',
    b'{"messages":"hi"}',
    b'{"messages":[{"role":"assistant","content":null}]}',
]
for k, c in enumerate(cases):
    open(f"{t}/bad{k}", "wb").write(c)

PY
k=0
while [ -f "$T/bad$k" ]; do
    case $k in 9 | 26 | 27 | 28 | 29 | 30) path=/v1/chat/completions ;; *) path=/v1/completions ;; esac
    bad "$T/bad$k" $path
    k=$((k + 1))
done
g=tests/data/golden/stories260K/once.json
body=$(jq -c '{prompt: .text, max_tokens: (.greedy_ids|length), temperature: 0}' "$g")
code=$(post /v1/completions "$body")
check san_valid_after_bad sh -c "[ $code = 200 ] && [ \"\$(jq -r '.choices[0].text' $T/body)\" = \"\$(jq -r .greedy_text $g)\" ]"
# prompt arrays (several token-id prompts, one choice each) through the sanitized daemon, and
# more prompts than a request may carry
code=$(post /v1/completions '{"prompt":[[1,2],[3],"Once"],"max_tokens":2,"temperature":0}')
check san_prompt_arrays sh -c "[ $code = 200 ] && [ \"\$(jq '.choices | length' $T/body)\" = 3 ]"
bad_many=$(python3 -c 'print({"prompt": [[1]] * 40, "max_tokens": 1}.__repr__().replace("\x27", "\""))')
code=$(post /v1/completions "$bad_many")
check san_prompt_arrays_bounded [ "$code" = 400 ]
curl -s -N -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":8,"stream":true,"n":2}' "$API/v1/completions"
serve_stop
check san_exit_zero [ "$RC" = 0 ]
check san_no_reports sh -c "! ls $T/asan.* $T/ubsan.* >/dev/null 2>&1"
[ -f "$(ls $T/asan.* $T/ubsan.* 2>/dev/null | head -1)" ] && head -n 30 $T/asan.* $T/ubsan.* 2>/dev/null | sed 's/^/# /'
exit 0
