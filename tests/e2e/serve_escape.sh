#!/bin/sh
# escape_special_tokens through the daemon (curl): a chat whose user message types the bundled
# model's special tokens ("<s>", "</s>") is charged the tokens of that text encoded as plain text,
# counted by `tandem tokenize` with a copy of tokenizer.json that has no special added tokens
# (the reference: the strings are text there by construction). With escape_special_tokens = off
# the count is /tokenize's of the /apply-template prompt (transformers' behaviour: the strings are
# the tokens). stories260K has no chat template: the daemon's plain one joins the contents with
# newlines and encodes them like a completion prompt (BOS added).
. tests/e2e/lib/serve.sh
mkdir -p "$T/plain"
jq -c '.added_tokens |= map(select(.special | not))' models/stories260K/tokenizer.json \
    >"$T/plain/tokenizer.json"
text='Once <s> upon </s> a time<s>'
chat() { # content of the user message [system content] -> prompt_tokens
    if [ -n "$2" ]; then
        _m=$(jq -nc --arg u "$1" --arg s "$2" '[{role: "system", content: $s}, {role: "user", content: $u}]')
    else
        _m=$(jq -nc --arg u "$1" '[{role: "user", content: $u}]')
    fi
    curl -s "$API/v1/chat/completions" \
        -d "$(jq -nc --argjson m "$_m" '{messages: $m, max_tokens: 1, temperature: 0}')" |
        jq -r '.usage.prompt_tokens'
}
tokenize() { # text -> /tokenize's count (specials recognised, BOS added)
    curl -s "$API/tokenize" -d "$(jq -nc --arg t "$1" '{content: $t}')" | jq '.tokens | length'
}
plain=$("$TANDEM" tokenize --tokenizer "$T/plain/tokenizer.json" "$text" | jq '.ids | length')
special=$("$TANDEM" tokenize --model models/stories260K "$text" | jq '.ids | length')

serve_start || { fail escape_start "daemon did not start"; exit 0; }
prompt=$(curl -s "$API/apply-template" -d "$(jq -nc --arg t "$text" '{messages: [{role: "user", content: $t}]}')" | jq -r .prompt)
check escape_apply_template_is_the_text [ "$prompt" = "$text" ]
got=$(chat "$text")
check escape_user_prompt_tokens_plain_text [ "$got" = "$plain" ]
check escape_plain_text_is_not_the_tokens [ "$plain" != "$special" ]
check escape_tokenize_recognises_them [ "$(tokenize "$prompt")" = "$special" ]
# the operator's system message keeps its tokens under untrusted: its "<s>" is one token, the
# user's is text; no special strings at all: the same count as /tokenize gives
sys_esc=$(chat "hi" "Be kind <s>")
check escape_plain_conversation_unchanged [ "$(chat "Once upon a time")" = "$(tokenize "Once upon a time")" ]
# /v1/completions' prompt is the caller's own template: its strings are the tokens
comp=$(curl -s "$API/v1/completions" -d "$(jq -nc --arg t "$text" '{prompt: $t, max_tokens: 1, temperature: 0}')" | jq -r .usage.prompt_tokens)
check escape_completions_prompt_not_escaped [ "$comp" = "$special" ]
serve_stop

serve_start --escape-special-tokens off || { fail escape_off_start "daemon did not start"; exit 0; }
check escape_off_prompt_tokens_are_tokenize [ "$(chat "$text")" = "$special" ]
check escape_off_system_same_as_untrusted [ "$(chat "hi" "Be kind <s>")" = "$sys_esc" ]
serve_stop

serve_start --escape-special-tokens all || { fail escape_all_start "daemon did not start"; exit 0; }
sys_all=$(chat "hi" "Be kind <s>")
check escape_all_escapes_system [ "$sys_all" -gt "$sys_esc" ]
serve_stop
check escape_exit_zero [ "$RC" = 0 ]

out=$("$TANDEM" serve --escape-special-tokens maybe 2>&1)
case "$out" in
*"escape_special_tokens must be untrusted, all or off"*) ok escape_bad_value_refused ;;
*) fail escape_bad_value_refused "$out" ;;
esac

# a tokenizer whose special tokens the escaping cannot hold stops start-up under untrusted (the
# default) and all, saying why and "set it to off"; off starts. Lowercase: "<S>" would be "<s>".
for kind in lower digit; do
    mkdir -p "$T/$kind"
    for f in models/stories260K/*; do ln -s "$PWD/$f" "$T/$kind/"; done
    rm "$T/$kind/tokenizer.json"
    if [ $kind = lower ]; then
        jq -c '.normalizer.normalizers += [{type: "Lowercase"}]' models/stories260K/tokenizer.json
    else
        jq -c '.added_tokens += [{id: 491, content: "7", special: true, normalized: false}]' \
            models/stories260K/tokenizer.json
    fi >"$T/$kind/tokenizer.json"
    for scope in untrusted all; do
        out=$(timeout 30 "$TANDEM" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu \
            --model "$T/$kind" --escape-special-tokens $scope --log-file "$T/$kind.log" 2>&1)
        rc=$?
        why=$(grep load_failed "$T/$kind.log")
        case "$why" in
        *"escape_special_tokens = $scope cannot be kept"*"set it to off"*)
            check "escape_${kind}_${scope}_refused_at_start" [ $rc = 1 ] ;;
        *) fail "escape_${kind}_${scope}_refused_at_start" "rc $rc: $why $out" ;;
        esac
    done
    want="whose Lowercase step could turn other text into it"
    [ $kind = digit ] && want="special token '7' is made of digits"
    case "$(grep load_failed "$T/$kind.log")" in
    *"$want"*) ok "escape_${kind}_says_why" ;;
    *) fail "escape_${kind}_says_why" "$(grep load_failed "$T/$kind.log")" ;;
    esac
    if serve_start --model "$T/$kind" --escape-special-tokens off; then
        check "escape_${kind}_off_serves" [ "$(chat "hi <S> 7")" -gt 0 ]
        serve_stop
    else
        fail "escape_${kind}_off_serves" "daemon did not start"
    fi
done
