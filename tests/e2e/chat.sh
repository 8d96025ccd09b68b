#!/bin/sh
# tandem chat: two turns through a real chat template on stories260K; errors are clear.
B=${BUILD:-build}
M=models/stories260K
T=tests/data/chat_templates/chatml-vllm.jinja
out=$(printf 'Tell me a story\nAnd then?\n' | $B/tandem chat --model $M --chat-template $T --temperature 0 --max-tokens 20)
rc=$?
lines=$(printf '%s\n' "$out" | grep -c .)
[ $rc = 0 ] && [ "$lines" -ge 2 ] && echo "ok chat_two_turns" || echo "not ok chat_two_turns # rc=$rc lines=$lines"
# deterministic at temperature 0
out2=$(printf 'Tell me a story\nAnd then?\n' | $B/tandem chat --model $M --chat-template $T --temperature 0 --max-tokens 20)
[ "$out" = "$out2" ] && echo "ok chat_deterministic" || echo "not ok chat_deterministic"
# a model without a chat template: clear error, exit 2
printf 'hi\n' | $B/tandem chat --model $M >/dev/null 2>/tmp/chat.err.$$
rc=$?
grep -q "no chat_template" /tmp/chat.err.$$ && [ $rc = 2 ] && echo "ok chat_no_template" || echo "not ok chat_no_template"
rm -f /tmp/chat.err.$$
# invalid UTF-8 input is refused for that line, not fatal
out3=$(printf '\377\376\nhello\n' | $B/tandem chat --model $M --chat-template $T --temperature 0 --max-tokens 5 2>/dev/null)
[ $? = 0 ] && [ -n "$out3" ] && echo "ok chat_invalid_utf8" || echo "not ok chat_invalid_utf8"
# The same bytes as before chat became a client of the scheduler (tests/data/cli)
PATTERNS='chat_* cuda_chat_*'
. tests/data/cli/check.sh
