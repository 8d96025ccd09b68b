# tests/data/cli/cases.sh — the `tandem generate` / `tandem chat` runs whose output is kept
# byte for byte in this folder (NAME.out: stdout; NAME.err: stderr, then "[exit N]").
#
# Sourced by record.sh (which writes the files) and by tests/e2e/generate.sh and chat.sh (which
# compare). Each line:  run NAME STDIN ENV tandem-arguments...
#   STDIN  a file in this folder fed to stdin, or - (none)
#   ENV    one VAR=value set for the run, or -
# Cases whose name starts with cuda_ need an NVIDIA GPU; the tests skip them without one.
# Models: the two checkpoints in models/; prompts short enough for the emulated cards to be
# quick. Temperature 0 and seeded temperature > 0; every device combination the two commands
# accept here: cpu; fpga-emu decoding with the cpu prefilling (the default for a card); a card
# prefilling itself (FAST-Prefill); a card prefilling for another card; a card prefilling for
# the cpu; cuda (GPU machines).
S=models/stories260K
T=models/tiny-llama2-mha
CHATML=tests/data/chat_templates/chatml-vllm.jinja
LLAMA2=tests/data/chat_templates/llama-2-chat.jinja

# ---- generate, cpu
run gen_cpu_greedy_text - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0
run gen_cpu_greedy_json - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --json
run gen_cpu_ids_json - - generate --model $S --ids 1,403,407 --max-tokens 16 --temperature 0 --json
run gen_cpu_seed_text - - generate --model $S --prompt "Lily went to the park" --max-tokens 48 --temperature 0.8 --seed 7
run gen_cpu_seed_json - - generate --model $S --prompt "Tom had a red ball." --max-tokens 48 --temperature 1 --seed 42 --top-k 40 --top-p 0.9 --json
run gen_cpu_minp_json - - generate --model $S --prompt "The sun" --max-tokens 32 --temperature 0.7 --seed 3 --min-p 0.05 --json
run gen_cpu_stop_json - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --stop "Lily" --json
run gen_cpu_stop_text - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --stop "park" --stop "Lily."
run gen_cpu_context_json - - generate --model $S --prompt "Once" --max-tokens 1000 --temperature 0 --json
run gen_cpu_ignore_eos_json - - generate --model $S --ids 1,403,407 --max-tokens 24 --temperature 0 --ignore-eos --json
run gen_cpu_prefill_cpu_text - - generate --model $S --prompt "Once upon a time" --max-tokens 24 --temperature 0 --device cpu --prefill-device cpu
run gen_cpu_kv4_text - - generate --model $S --prompt "Once upon a time" --max-tokens 24 --temperature 0 --kv int4
run gen_cpu_tiny_json - - generate --model $T --prompt "Hello world" --max-tokens 20 --temperature 0 --json
run gen_cpu_tiny_seed_text - - generate --model $T --prompt "Hello world" --max-tokens 20 --temperature 0.9 --seed 11
# errors keep their messages and exit codes
run gen_err_bad_id - - generate --model $S --ids 1,99999 --max-tokens 2
run gen_err_prompt_and_ids - - generate --model $S --ids 1,2,3 --max-tokens 2 --prompt "x"
run gen_err_missing_card - - generate --model $S --prompt "Hi" --max-tokens 2 --device fpga-emu:9

# ---- generate, emulated cards
run gen_fpga_greedy_text - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --device fpga-emu
run gen_fpga_greedy_json - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --device fpga-emu --json
run gen_fpga_ids_json - - generate --model $S --ids 1,403,407 --max-tokens 16 --temperature 0 --device fpga-emu --json
run gen_fpga_seed_text - - generate --model $S --prompt "Lily went to the park" --max-tokens 48 --temperature 0.8 --seed 7 --device fpga-emu:1
run gen_fpga_seed_json - - generate --model $S --prompt "Tom had a red ball." --max-tokens 48 --temperature 1 --seed 42 --top-k 40 --json --device fpga-emu --prefill-device cpu
run gen_fpga_stop_json - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --stop "Lily" --json --device fpga-emu
run gen_fpga_w4_json - TANDEM_FPGA_QUANT=wbits=4 generate --model $S --prompt "Once upon a time" --max-tokens 16 --temperature 0 --device fpga-emu --json
run gen_fpga_tiny_json - - generate --model $T --prompt "Hello world" --max-tokens 20 --temperature 0 --device fpga-emu --json
run gen_fpga_kv4_err - - generate --model $S --prompt "Once upon a time" --max-tokens 8 --temperature 0 --device fpga-emu --kv int4
run gen_fpgapf_greedy_text - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --device fpga-emu --prefill-device fpga-emu
run gen_fpgapf_greedy_json - - generate --model $S --ids 1,403,407 --max-tokens 48 --temperature 0 --ignore-eos --json --device fpga-emu:0 --prefill-device fpga-emu:0
run gen_fpgapf_seed_json - - generate --model $S --prompt "Lily went to the park" --max-tokens 32 --temperature 0.8 --seed 7 --json --device fpga-emu --prefill-device fpga-emu
run gen_fpga2fpga_json - - generate --model $S --ids 1,403,407 --max-tokens 48 --temperature 0 --ignore-eos --json --device fpga-emu:1 --prefill-device fpga-emu:0
run gen_fpga2fpga_seed_text - - generate --model $S --prompt "Tom had a red ball." --max-tokens 32 --temperature 1 --seed 5 --device fpga-emu:1 --prefill-device fpga-emu:0
run gen_fpga2cpu_json - - generate --model $S --prompt "Once upon a time" --max-tokens 32 --temperature 0 --json --device cpu --prefill-device fpga-emu
run gen_fpga2cpu_seed_text - - generate --model $S --prompt "The sun" --max-tokens 32 --temperature 0.7 --seed 9 --device cpu --prefill-device fpga-emu:1

# ---- generate, cuda (GPU machines only)
run cuda_gen_greedy_json - - generate --model $S --prompt "Once upon a time" --max-tokens 64 --temperature 0 --device cuda --json
run cuda_gen_seed_text - - generate --model $S --prompt "Lily went to the park" --max-tokens 48 --temperature 0.8 --seed 7 --device cuda
run cuda_gen_bf16_json - - generate --model $T --prompt "Hello world" --max-tokens 20 --temperature 0 --device cuda --gpu-dtype bf16 --json
run cuda_gen_fpga_json - - generate --model $S --prompt "Once upon a time" --max-tokens 32 --temperature 0 --device fpga-emu --prefill-device cuda --json
run cuda_gen_cpu2cuda_text - - generate --model $S --prompt "Once upon a time" --max-tokens 32 --temperature 0 --device cuda --prefill-device cpu

# ---- chat
run chat_cpu_greedy chat_story.in - chat --model $S --chat-template $CHATML --temperature 0 --max-tokens 24
run chat_cpu_seed chat_story.in - chat --model $S --chat-template $CHATML --temperature 0.9 --seed 3 --max-tokens 24
run chat_cpu_system_reset chat_reset.in - chat --model $S --chat-template $CHATML --system "You tell short stories." --temperature 0 --max-tokens 16
run chat_cpu_fills_context chat_long.in - chat --model $S --chat-template $CHATML --temperature 0 --max-tokens 120
run chat_cpu_bad_utf8 chat_utf8.in - chat --model $S --chat-template $CHATML --temperature 0 --max-tokens 8
run chat_cpu_tiny chat_tiny.in - chat --model $T --chat-template $LLAMA2 --temperature 0 --max-tokens 12
run chat_err_no_template chat_tiny.in - chat --model $S
run chat_fpga_greedy chat_story.in - chat --model $S --chat-template $CHATML --temperature 0 --max-tokens 24 --device fpga-emu
run chat_fpga_seed chat_story.in - chat --model $S --chat-template $CHATML --temperature 0.9 --seed 3 --max-tokens 24 --device fpga-emu:1
run chat_fpga_tiny chat_tiny.in - chat --model $T --chat-template $LLAMA2 --temperature 0 --max-tokens 12 --device fpga-emu
run cuda_chat_greedy chat_story.in - chat --model $S --chat-template $CHATML --temperature 0 --max-tokens 24 --device cuda
