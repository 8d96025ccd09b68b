# tests/e2e/lib/cards.sh — what the emulated-card tests of `tandem serve` (serve_glitches.sh,
# serve_card_batch.sh) share; sourced after tests/e2e/lib/serve.sh, with GOLD (the stories260K
# goldens), CASES (their names) and MAXTOK set.
#
#   burst N          N concurrent streamed requests over the golden prompts, case k % 5 for
#                    request k (bodies prepared first, so that they arrive together): its case
#                    name -> $T/case.k, body -> $T/b.k, headers -> $T/h.k
#   complete N       every stream of the burst ended with [DONE], no error event, 200, MAXTOK
#                    tokens
#   text_of K        request K's streamed text
#   decode_of K      the device that decoded request K (its x-tandem-devices header)
# (the runs of the card's weight upload: emu_upload_runs, tests/e2e/lib/serve.sh)
# Their own variables carry a _cards_ prefix (tests/e2e/lib/serve.sh says why).
burst() {
    _cards_k=1
    while [ $_cards_k -le $1 ]; do
        _cards_c=$(echo $CASES | cut -d' ' -f$(((_cards_k - 1) % 5 + 1)))
        echo "$_cards_c" >"$T/case.$_cards_k"
        echo "{\"prompt\":$(jq -c '.ids' "$GOLD/$_cards_c.json"),\"max_tokens\":$MAXTOK,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" >"$T/req.$_cards_k"
        _cards_k=$((_cards_k + 1))
    done
    _cards_k=1
    _cards_pids=
    while [ $_cards_k -le $1 ]; do
        curl -s -N -D "$T/h.$_cards_k" -o "$T/b.$_cards_k" -H 'Content-Type: application/json' \
            -d "@$T/req.$_cards_k" "$API/v1/completions" &
        _cards_pids="$_cards_pids $!"
        _cards_k=$((_cards_k + 1))
    done
    wait $_cards_pids # not the daemon, also a child of this shell
}

complete() {
    _cards_k=1
    while [ $_cards_k -le $1 ]; do
        grep -q '^HTTP/1.1 200' "$T/h.$_cards_k" || return 1
        grep -q '^data: \[DONE\]' "$T/b.$_cards_k" || return 1
        grep -q '"error"' "$T/b.$_cards_k" && return 1
        _cards_n=$(grep '^data: {' "$T/b.$_cards_k" | sed 's/^data: //' |
            jq -s '[.[] | .usage.completion_tokens // empty] | add')
        [ "$_cards_n" = "$MAXTOK" ] || return 1
        _cards_k=$((_cards_k + 1))
    done
    return 0
}

text_of() { grep '^data: {' "$T/b.$1" | sed 's/^data: //' | jq -j '.choices[0].text // empty'; }
decode_of() { sed -n 's/^x-tandem-devices: prefill=\([^;]*\); decode=\([^;\r]*\).*/\2/p' "$T/h.$1" | tr -d '\r'; }
