#!/bin/sh
# tandem simulate: a run prints its summary, --fig7 its table, bad input is refused clearly.
BUILD=${BUILD:-build}
TANDEM=${TANDEM:-$BUILD/tandem}
T=$(mktemp -d /tmp/tandem-sim.XXXXXX)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok $1"; }
fail() { echo "not ok $1 # $2"; }
check() {
    name=$1
    shift
    if "$@"; then ok "$name"; else fail "$name" "$*"; fi
}

"$TANDEM" simulate --requests 60 >"$T/out" 2>&1
check simulate_default sh -c "grep -q 'node a100+7xu280, llama2-7b, \[1536, 512\]' $T/out && grep -q 'finished 60, rejected 0' $T/out && grep -q 'throughput [0-9.]* tok/s' $T/out"
"$TANDEM" simulate --node 2xa100+3xu280 --model llama3-8b --sharegpt --rate 0.5 --requests 40 --gpu-batch 8 >"$T/out" 2>&1
check simulate_poisson_sharegpt sh -c "grep -q 'ShareGPT-like lengths, Poisson 0.5 req/s' $T/out && grep -q 'finished 40' $T/out && grep -q 'u280:2' $T/out"
"$TANDEM" simulate --node 8xa100 --gpu-prefill 100@2048 --gpu-decode 10@1024 --requests 40 >"$T/out" 2>&1
check simulate_calibration_override sh -c "grep -q 'decodes: 0 on cards (split), 40 in place' $T/out && grep -q 'TPOT p50 10\.[0-9]* ms' $T/out"
"$TANDEM" simulate --fig7 --gpus a100 --requests 20 >"$T/fig7" 2>&1
check simulate_fig7_rows sh -c "[ \$(grep -c '^| llama' $T/fig7) = 6 ] && grep -q '| llama2-7b | \[1536, 512\] | a100 |' $T/fig7"
# two nodes over 1 Gbit/s: a remote decode step brings its row's logits back (128,256 float32 at
# 1 Gbit/s: ~4 ms a step), with --greedy its token alone: the same trace's TPOT is longer sampled
N2="--node h200-tandem/u280-batch --model llama3-8b --workload 512:32 --clients 1 --requests 4 --net 1 --placement cards-first"
"$TANDEM" simulate $N2 >"$T/sampled" 2>&1
"$TANDEM" simulate $N2 --greedy >"$T/greedy" 2>&1
tpot() { sed -n 's/.*TPOT p50 \([0-9.]*\) ms.*/\1/p' "$1"; }
check simulate_remote_logits_cost_tpot sh -c "grep -q '4 decodes on other nodes' $T/sampled && grep -q '4 decodes on other nodes' $T/greedy && awk -v s=\"$(tpot $T/sampled)\" -v g=\"$(tpot $T/greedy)\" 'BEGIN { exit !(s - g > 3.5 && s - g < 5) }'"
"$TANDEM" simulate --node a100+7xfoo >"$T/out" 2>&1
rc=$?
check simulate_bad_node sh -c "[ $rc = 1 ] && grep -q \"unknown device profile 'foo'\" $T/out"
"$TANDEM" simulate --workload 12 >"$T/out" 2>&1
rc=$?
check simulate_bad_workload sh -c "[ $rc = 2 ] && grep -q 'PROMPT.*:OUTPUT' $T/out"
"$TANDEM" simulate --node h200-tandem+7xu280-batch --model llama3-8b --workload 128-512:64 --clients 16 \
    --requests 64 --gpu-batch 256 --slo-tbt-ms 50 --slo-ttft-ms 2000 --placement cards-first >"$T/out" 2>&1
check simulate_energy_slo sh -c "grep -q '\[128-512, 64\]' $T/out && grep -q 'energy: 2275 W rated, [0-9.]* tok/J' $T/out && grep -q 'SLO TTFT <= 2000 ms, TBT <= 50 ms: [0-9]* of 64 finished' $T/out && grep -q 'placement cards-first' $T/out && grep -q 'decodes: 64 on cards' $T/out"
# goodput, tok/J and tok/s per $1000 against the run's own figures: with no bound that binds,
# every request meets the SLO and goodput is the steady throughput; with a 1 ms TTFT none does;
# tok/J is the steady tokens/s over the rated watts, tok/s per $1000 over the price
W="--node h200-tandem+7xu280-batch --model llama3-8b --workload 128-512:64 --clients 16 --requests 64 --gpu-batch 256 --placement cards-first"
"$TANDEM" simulate $W --slo-tbt-ms 1e7 --slo-ttft-ms 1e7 >"$T/loose" 2>&1
"$TANDEM" simulate $W --slo-tbt-ms 50 --slo-ttft-ms 1 >"$T/tight" 2>&1
sums_ok() {
    awk '/throughput .* tok\/s steady/ { tps = $2 } /goodput/ { g = $(NF - 2) }
         /^  cost: / { gsub(/[$,]/, "", $2); cost = $2; per = $3 }
         /^  energy: / { w = $2; tpj = $5 }
         END { ok = tps > 0 && g == tps && sprintf("%.3f", tps / w) == tpj && sprintf("%.2f", tps / (cost / 1000)) == per
               exit !ok }' "$T/loose"
}
check simulate_goodput_bounds sh -c "grep -q ': 64 of 64 finished requests (100%)' $T/loose && grep -q ': 0 of 64 finished requests (0%), goodput 0.0 tok/s' $T/tight"
check simulate_goodput_energy_cost_sums sums_ok
# weighing the batch curves (the default): short prompts leave the GPU free, so it decodes them
# itself; long prompts keep it prefilling, so the cards take (nearly) every decode
"$TANDEM" simulate --node h200-tandem+7xu280-batch --model llama3-8b --workload 128-512:64 --clients 16 \
    --requests 64 --gpu-batch 256 >"$T/out" 2>&1
check simulate_weigh_short_prompts_on_gpu sh -c "grep -q 'placement weigh' $T/out && grep -q 'decodes: 0 on cards (split), 64 in place' $T/out"
"$TANDEM" simulate --node h200-tandem+7xu280-batch --model llama3.1-8b --workload 8192-32768:64 --clients 16 \
    --requests 64 --gpu-batch 256 >"$T/out" 2>&1
check simulate_weigh_long_prompts_on_cards sh -c "grep -q 'decodes: [5-6][0-9] on cards' $T/out"
"$TANDEM" simulate --compare --gpu-batch 8 >"$T/out" 2>&1
rc=$?
check simulate_compare_never_caps_gpu sh -c "[ $rc = 2 ] && grep -q 'best batch' $T/out"
"$TANDEM" simulate --compare --model llama3.1-8b --requests 16 >"$T/cmp" 2>&1
check simulate_compare_rows sh -c "[ \$(grep -c '^| decode-heavy' $T/cmp) = 12 ] && [ \$(grep -c '^| prefill-heavy' $T/cmp) = 12 ] && grep -q '| 8xh200-tandem |' $T/cmp && grep -q '| weigh |' $T/cmp && grep -q '| cards-first |' $T/cmp"
# sparse prefill on every GPU: the same node with Tri-shape's measured kernels prefills faster
"$TANDEM" simulate --node h200-tandem --model llama3.1-8b --workload 32768:4 --clients 1 --requests 10 >"$T/dense" 2>&1
"$TANDEM" simulate --node h200-tandem --model llama3.1-8b --workload 32768:4 --clients 1 --requests 10 \
    --sparse-prefill trishape >"$T/sparse" 2>&1
check simulate_sparse_prefill sh -c "grep -q 'GPU prefill trishape' $T/sparse && ! grep -q 'GPU prefill' $T/dense && [ \$(sed -n 's/.*TTFT p50 \([0-9.]*\) s.*/\1/p' $T/sparse | tr -d .) -lt \$(sed -n 's/.*TTFT p50 \([0-9.]*\) s.*/\1/p' $T/dense | tr -d .) ]"
# layer-split prefill calls (issue 22): a 120K FlexPrefill prompt beside a decoding one on the H200
# runs its deep blocks a few layers a call (one block's index over ~100K cached keys costs more
# than the 50 ms budget); cards that prefill beside their decodes have no layer split
"$TANDEM" simulate --node h200-tandem --model llama3.1-8b --workload 120000:2000 --clients 2 --requests 2 \
    --gpu-batch 4 --sparse-prefill flexprefill >"$T/split" 2>&1
"$TANDEM" simulate --node 2xu280-batch --workload 1536:256 --clients 4 --requests 8 --fpga-prefill >"$T/cards" 2>&1
check simulate_layer_split_calls sh -c "grep -q 'prefill calls: [0-9]* ([1-9][0-9]* layer-split' $T/split && grep -q 'longest gap between two tokens of a request: p50 [0-9.]* ms' $T/split && grep -q 'finished 8' $T/cards && grep -q 'prefill calls: [1-9][0-9]* (0 layer-split' $T/cards"
"$TANDEM" simulate --sparse-prefill xattn >"$T/out" 2>&1
rc=$?
check simulate_sparse_prefill_bad sh -c "[ $rc = 2 ] && grep -q 'trishape or flexprefill' $T/out"
"$TANDEM" simulate --list >"$T/out" 2>&1
check simulate_list sh -c "grep -q 'u280-tandem' $T/out && grep -q 'h200-tandem' $T/out && grep -q 'u280-batch' $T/out && grep -q 'power 225 W' $T/out && grep -q '^  trishape ' $T/out"
# several nodes: the other nodes' cards decode with KV shipped over the network
"$TANDEM" simulate --node "h200-tandem/4xu280-batch" --model llama3-8b --workload 4096:64 --clients 8 \
    --requests 32 --placement cards-first --net 25:20 >"$T/out" 2>&1
check simulate_nodes_remote_decodes sh -c "grep -q '2 nodes, network 25 Gbit/s each way per node, 20 us: 32 decodes on other nodes' $T/out && grep -q 'n1/u280-batch' $T/out"
"$TANDEM" simulate --node "h200-tandem/4xu280-batch/4xu280-batch" --model llama3-8b --workload 4096:256 \
    --clients 32 --requests 200 --net-sweep >"$T/sweep" 2>&1
check simulate_net_sweep sh -c "grep -q '^| one node (h200-tandem+4xu280-batch+4xu280-batch)' $T/sweep && [ \$(grep -c '^| [0-9]* Gbit/s' $T/sweep) = 5 ] && grep -q 'the KV transfer costs' $T/sweep"
"$TANDEM" simulate --node "h200-tandem//u280" >"$T/out" 2>&1
rc=$?
check simulate_nodes_bad_spec sh -c "[ $rc = 1 ] && grep -q 'empty' $T/out"
"$TANDEM" simulate --node h200-tandem/u280 --net 0 >"$T/out" 2>&1
rc=$?
check simulate_nodes_bad_net sh -c "[ $rc = 2 ] && grep -q 'GBIT' $T/out"
"$TANDEM" simulate --node h200-tandem+u280 --net-sweep >"$T/out" 2>&1
rc=$?
check simulate_net_sweep_needs_nodes sh -c "[ $rc = 2 ] && grep -q 'several nodes' $T/out"
