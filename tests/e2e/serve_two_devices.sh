#!/bin/sh
# A node with two devices of one kind: two GPUs (`--devices cuda:0,cuda:1`) where cuda:1 runs,
# else two CPU devices (`--devices cpu,cpu`: the scheduler's path is the same). The daemon opens
# both, serves a burst of concurrent greedy requests on them, and every text equals `tandem
# generate --device D0`'s for the same prompt (two GPUs run the same kernels:
# tests/gpu/test_two_gpus.c checks their logits bit for bit). Each response's x-tandem-devices
# header names the device that served it; the spread over the two is printed.
. tests/e2e/lib/serve.sh
if "$TANDEM" generate --device cuda:1 --ids 1 --max-tokens 1 >"$T/probe" 2>&1; then
    D0=cuda:0 D1=cuda:1
else
    D0=cpu D1=cpu
    echo "# cuda:1 does not run here ($(tail -n 1 "$T/probe")): two CPU devices"
fi
GOLD=tests/data/golden/stories260K/once.json
IDS=$(jq -r '.ids | map(tostring) | join(",")' "$GOLD")
MAXTOK=32
N=8
"$TANDEM" generate --device $D0 --ids "$IDS" --max-tokens $MAXTOK --temperature 0 --json \
    2>/dev/null | jq -j '.text' >"$T/ref"
serve_start --devices $D0,$D1 --max-running 4 || { fail two_start "daemon did not start"; exit 0; }
ok two_start
code=$(get "$ADMIN/admin/status")
check two_both_listed sh -c "[ $code = 200 ] && jq -e '[.devices[].name] == [\"$D0\",\"$D1\"]' $T/body >/dev/null"
pids=
k=1
while [ $k -le $N ]; do
    curl -s --max-time 60 -o "$T/body.$k" -D "$T/hdr.$k" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "{\"prompt\":$(jq -c '.ids' "$GOLD"),\"max_tokens\":$MAXTOK,\"temperature\":0}" \
        "$API/v1/completions" >"$T/code.$k" &
    pids="$pids $!"
    k=$((k + 1))
done
wait $pids # not a bare wait: the daemon is a background job of this shell too
done_ok=0
same=0
on_two=0
k=1
while [ $k -le $N ]; do
    [ "$(cat "$T/code.$k")" = 200 ] && done_ok=$((done_ok + 1))
    jq -j '.choices[0].text' "$T/body.$k" >"$T/got.$k" 2>/dev/null
    cmp -s "$T/got.$k" "$T/ref" && same=$((same + 1))
    grep -qi "^x-tandem-devices: prefill=\\($D0\\|$D1\\); decode=\\($D0\\|$D1\\)" "$T/hdr.$k" && on_two=$((on_two + 1))
    k=$((k + 1))
done
check two_all_complete [ $done_ok = $N ]
check two_texts_equal [ $same = $N ]
check two_on_the_two [ $on_two = $N ]
[ $D0 = $D1 ] || for g in $D0 $D1; do
    echo "# served with decode on $g: $(grep -il "decode=$g" "$T"/hdr.* | wc -l) of $N"
done
serve_stop
