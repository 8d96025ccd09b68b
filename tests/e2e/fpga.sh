#!/bin/sh
# The FPGA path end to end with emulated cards: `tandem generate --device fpga-emu` prefills on
# the CPU, ships the prompt's int8 KV into the card's HBM and decodes there; with temperature 0
# the text follows transformers' greedy text (tests/data/golden/stories260K/once.json: the
# emulated card matches all 64 tokens; 40 are required, a margin for quantization changes).
B=${BUILD:-build}
M=models/stories260K
G=tests/data/golden/stories260K
export TANDEM_CACHE_DIR="$B/fpga-test-cache"
out=$(python3 - "$B" "$G/once.json" "$M" <<'PY'
import json, subprocess, sys
b, path, m = sys.argv[1:4]
g = json.load(open(path))
r = subprocess.run([b + "/tandem", "generate", "--model", m, "--ids", ",".join(map(str, g["ids"])),
                    "--max-tokens", str(len(g["greedy_ids"])), "--temperature", "0", "--ignore-eos",
                    "--json", "--device", "fpga-emu"], capture_output=True, text=True)
if r.returncode: print("exit", r.returncode, r.stderr.strip()); sys.exit()
j = json.loads(r.stdout)
k = next((i for i, (a, c) in enumerate(zip(j["ids"], g["greedy_ids"])) if a != c), len(j["ids"]))
print("ok" if k >= 40 and len(j["ids"]) == len(g["greedy_ids"]) else "diverges at %d" % k)
PY
)
[ "$out" = ok ] && echo "ok fpga_generate_follows_golden" || echo "not ok fpga_generate_follows_golden # $out"
# the run says where it prefilled and where it decoded
s=$($B/tandem generate --model $M --prompt "Once upon a time" --max-tokens 8 --temperature 0 --device fpga-emu:1 2>&1 >/dev/null)
case "$s" in *"prefill=cpu; decode=fpga-emu:1"*) echo "ok fpga_generate_devices" ;; *) echo "not ok fpga_generate_devices # $s" ;; esac
# 4-bit weights through the environment's quantization spec
t=$(TANDEM_FPGA_QUANT=wbits=4 $B/tandem generate --model $M --prompt "Once upon a time" --max-tokens 8 --temperature 0 --device fpga-emu --json)
echo "$t" | python3 -c "import json,sys; j=json.load(sys.stdin); assert len(j['ids']) == 8" && echo "ok fpga_generate_w4" || echo "not ok fpga_generate_w4"
# a card that is not there, and a bad quantization spec: clear errors, non-zero exits
if $B/tandem generate --model $M --prompt "Hi" --max-tokens 2 --device fpga-emu:9 2>/dev/null; then
    echo "not ok fpga_missing_card"; else echo "ok fpga_missing_card"; fi
e=$(TANDEM_FPGA_QUANT=wbits=5 $B/tandem generate --model $M --prompt "Hi" --max-tokens 2 --device fpga-emu 2>&1)
case "$e" in *"bad value '5' for wbits"*) echo "ok fpga_bad_quant_spec" ;; *) echo "not ok fpga_bad_quant_spec # $e" ;; esac
# FAST-Prefill on the card: --prefill-device naming the card prefills there (the prefill kernel,
# dense for this short prompt); a prefill on one card with its KV exported into another gives
# the same text. A dense card prefill computes what the card's decode kernel would: eval's
# prefill mode gives the numbers of its decode mode exactly.
ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$G/sun.json'))['ids'])))")
self=$($B/tandem generate --model $M --ids "$ids" --max-tokens 48 --temperature 0 --ignore-eos --json --device fpga-emu:0 --prefill-device fpga-emu:0 | jq -c '[.devices, .ids]')
other=$($B/tandem generate --model $M --ids "$ids" --max-tokens 48 --temperature 0 --ignore-eos --json --device fpga-emu:1 --prefill-device fpga-emu:0 | jq -c '[.devices, .ids]')
case "$self $other" in '["prefill=fpga-emu:0; decode=fpga-emu:0",'*'["prefill=fpga-emu:0; decode=fpga-emu:1",'*) echo "ok fpga_generate_card_prefill_devices" ;; *) echo "not ok fpga_generate_card_prefill_devices # $self $other" ;; esac
a=$(printf '%s' "$self" | jq -c '.[1]'); o=$(printf '%s' "$other" | jq -c '.[1]')
[ -n "$a" ] && [ "$a" = "$o" ] && [ "$(printf '%s' "$a" | jq length)" = 48 ] && echo "ok fpga_generate_card_prefill_export" || echo "not ok fpga_generate_card_prefill_export # $a vs $o"
# eval in prefill mode on the card: the same numbers as its decode mode, bit for bit
pe=$($B/tandem eval --model $M --golden $G --device fpga-emu --mode prefill | jq -c '[.positions, .top1_agreement, .mean_kl, .max_kl]')
de=$($B/tandem eval --model $M --golden $G --device fpga-emu --mode decode | jq -c '[.positions, .top1_agreement, .mean_kl, .max_kl]')
[ -n "$pe" ] && [ "$pe" = "$de" ] && echo "ok fpga_eval_prefill_equals_decode" || echo "not ok fpga_eval_prefill_equals_decode # prefill $pe decode $de"
