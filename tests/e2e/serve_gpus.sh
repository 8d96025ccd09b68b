#!/bin/sh
# A node with two GPUs (`--devices cuda:0,cuda:1`): the daemon opens both, serves a burst of
# concurrent greedy requests on them, and every text equals `tandem generate --device cuda:0`'s
# for the same prompt (the two GPUs run the same kernels: tests/gpu/test_two_gpus.c checks their
# logits bit for bit). Each response's x-tandem-devices header names the GPU that served it; the
# spread over the two is printed. Skipped where fewer than two GPUs are visible (CI; the lent
# 2 x H200 machine runs it: tests/gpu/logs/).
. tests/e2e/lib/serve.sh
NAMES="gpus_start gpus_both_listed gpus_all_complete gpus_texts_equal gpus_on_gpus"
if ! "$TANDEM" generate --device cuda:1 --ids 1 --max-tokens 1 >"$T/probe" 2>&1; then
    for n in $NAMES; do echo "ok $n # SKIP cuda:1 does not run here: $(tail -n 1 "$T/probe")"; done
    exit 0
fi
GOLD=tests/data/golden/stories260K/once.json
IDS=$(jq -r '.ids | map(tostring) | join(",")' "$GOLD")
MAXTOK=32
N=8
"$TANDEM" generate --device cuda:0 --ids "$IDS" --max-tokens $MAXTOK --temperature 0 --json \
    2>/dev/null | jq -j '.text' >"$T/ref"
serve_start --devices cuda:0,cuda:1 --max-running 4 || { fail gpus_start "daemon did not start"; exit 0; }
ok gpus_start
code=$(get "$ADMIN/admin/status")
check gpus_both_listed sh -c "[ $code = 200 ] && jq -e '[.devices[].name] == [\"cuda:0\",\"cuda:1\"]' $T/body >/dev/null"
k=1
while [ $k -le $N ]; do
    curl -s -o "$T/body.$k" -D "$T/hdr.$k" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "{\"prompt\":$(jq -c '.ids' "$GOLD"),\"max_tokens\":$MAXTOK,\"temperature\":0}" \
        "$API/v1/completions" >"$T/code.$k" &
    k=$((k + 1))
done
wait
done_ok=0
same=0
on_gpu=0
k=1
while [ $k -le $N ]; do
    [ "$(cat "$T/code.$k")" = 200 ] && done_ok=$((done_ok + 1))
    jq -j '.choices[0].text' "$T/body.$k" >"$T/got.$k" 2>/dev/null
    cmp -s "$T/got.$k" "$T/ref" && same=$((same + 1))
    grep -qi '^x-tandem-devices: prefill=cuda:[01]; decode=cuda:[01]' "$T/hdr.$k" && on_gpu=$((on_gpu + 1))
    k=$((k + 1))
done
check gpus_all_complete [ $done_ok = $N ]
check gpus_texts_equal [ $same = $N ]
check gpus_on_gpus [ $on_gpu = $N ]
for g in 0 1; do
    echo "# served with decode on cuda:$g: $(grep -il "decode=cuda:$g" "$T"/hdr.* | wc -l) of $N"
done
serve_stop
