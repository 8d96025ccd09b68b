#!/bin/sh
# tandem generate end to end on stories260K: temperature 0 reproduces transformers' greedy text
# (tests/data/golden) from a text prompt and from ids; seeds reproduce; stop strings are honoured.
# The text continues the prompt (transformers' decode(ids + greedy_ids) after decode(ids)): the
# golden's greedy_text with the space its first piece's "\u2581" stands for.
B=${BUILD:-build}
G=tests/data/golden/stories260K
M=models/stories260K
for c in once lily sun unicode; do
    out=$(python3 - "$B" "$G/$c.json" "$M" <<'PY'
import json, subprocess, sys
b, path, m = sys.argv[1:4]
g = json.load(open(path))
r = subprocess.run([b + "/tandem", "generate", "--model", m, "--prompt", g["text"], "--max-tokens",
                    str(len(g["greedy_ids"])), "--temperature", "0", "--ignore-eos", "--json"],
                   capture_output=True, text=True)
if r.returncode: print("exit", r.returncode, r.stderr); sys.exit()
j = json.loads(r.stdout)
vocab = {v: k for k, v in json.load(open(m + "/tokenizer.json"))["model"]["vocab"].items()}
want = (" " if vocab[g["greedy_ids"][0]].startswith("\u2581") else "") + g["greedy_text"]
ok = j["ids"] == g["greedy_ids"] and j["text"] == want and j["prompt_tokens"] == len(g["ids"])
print("ok" if ok else "differs: %r vs %r" % (j["text"][:60], want[:60]))
PY
)
    [ "$out" = ok ] && echo "ok generate_golden_greedy_$c" || echo "not ok generate_golden_greedy_$c # $out"
done
# ids in, same ids out
ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$G/once.json'))['ids'])))")
want=$(python3 -c "import json;print(json.load(open('$G/once.json'))['greedy_ids'][:20])")
got=$($B/tandem generate --model $M --ids "$ids" --max-tokens 20 --temperature 0 --json | python3 -c "import json,sys;print(json.load(sys.stdin)['ids'])")
[ "$got" = "$want" ] && echo "ok generate_ids" || echo "not ok generate_ids # $got"
# same seed, same text; different seed, different text
a=$($B/tandem generate --model $M --prompt "Once upon a time" --max-tokens 40 --temperature 1 --seed 7 --json)
b=$($B/tandem generate --model $M --prompt "Once upon a time" --max-tokens 40 --temperature 1 --seed 7 --json)
c=$($B/tandem generate --model $M --prompt "Once upon a time" --max-tokens 40 --temperature 1 --seed 8 --json)
[ "$a" = "$b" ] && [ "$a" != "$c" ] && echo "ok generate_seed_reproducible" || echo "not ok generate_seed_reproducible"
# a stop string ends the text before it and is not printed
t=$($B/tandem generate --model $M --prompt "Once upon a time" --max-tokens 64 --temperature 0 --stop "Lily" --json)
echo "$t" | python3 -c "
import json,sys; j=json.load(sys.stdin)
assert j['text'] == ', there was a little girl named ', j
assert j['finish_reason'] == 'stop', j" && echo "ok generate_stop_string" || echo "not ok generate_stop_string"
# bad input: a clear error and a non-zero exit
if $B/tandem generate --model $M --ids 1,99999 --max-tokens 2 2>/dev/null; then echo "not ok generate_bad_id"; else echo "ok generate_bad_id"; fi
# The same bytes as before generate became a client of the scheduler, on every device
# combination (tests/data/cli: stdout, stderr and exit status of each run in cases.sh)
PATTERNS='gen_* cuda_gen_*'
. tests/data/cli/check.sh
