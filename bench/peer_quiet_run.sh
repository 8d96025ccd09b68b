#!/bin/bash
# bench/peer_quiet_run.sh PACK OUT [SECONDS] — runs bench/peer_quiet_pack.sh's pack on a quiet
# machine (from the repository root: the hand-over's model takes tests/data's Llama-3 tokenizer),
# within SECONDS (default 150: no round starts after that), logs under OUT:
#   machine.txt     CPU, cores, caches, load, THP, ptrace scope (CMA), UCX version and transports, libraries
#   lanes.txt       which UCX lanes our link got per UCX_TLS (peer_bench's first line)
#   rounds-TLS-SIZE interleaved rounds (bench/peer_link_rounds.sh's method), one line a round:
#                   load, before (if packed), ours with polling 0 and 1000 us (POLLS), ours
#                   sending every chunk from one buffer as perftest does (--buffers 1: do the
#                   cached bytes explain perftest's lead at 1 MiB?), ours with at most N sends in
#                   flight over tcp lanes for each N of SENDS (default "1 4"; 1: one at a time, the
#                   code before the window of sends; the default column has PEER_KV_TCP_SENDS),
#                   ucx_perftest tag_bw; each
#                   config one round in turn, so that every config's rounds spread over the run
#                   (TLS with "_" for ",": the device tool brings back no name with a comma)
#   handover.*      the hand-over of a 4K-token sequence (Llama-3-8B's KV shape: 32 layers,
#                   8 x 128, 128K vocabulary; bench/peer_bench.sh's handover part) to daemon B's
#                   CPU over shared memory, polling off and on, against the same device in-process
#                   (handover.pollP.tT.txt; HANDOVER="4096:3 32768:2" picks the token counts and
#                   each one's repetitions, default "4096:3"; HPOLLS the polling values, default
#                   "0 1000"; at 32K a CPU holds 8 GiB of float32 KV, once in each process). The
#                   hand-overs run after round HANDOVER_AT (default 2; 0: before the first round)
#                   if HANDOVER_NEED seconds (default 60) are left then. HBINS (optional): the
#                   pack's peer_handover builds to take turns with (peer_quiet_pack.sh's EXTRA,
#                   e.g. "peer_handover peer_handover.s8"), each of a poll and token count in turn,
#                   HBIN_TURNS times (default 1), logs handover.pollP.tT.NAME.K.txt. HDEV (default
#                   cpu): the device both sides hand over to, e.g. fpga-emu:0 (the emulated card,
#                   libxrt_emu.so beside tandem in the pack; TANDEM_EMU_PACE=1 in the environment
#                   paces both cards to the timing model, else neither is: B's --fpga-emu-pace
#                   follows it (read as the emulator reads it; the daemon's default being 1). HTIMEOUT: seconds a peer_handover
#                   run may take (default 60 + 1 per 1,024 tokens and repetition). HHEADS: the
#                   bench model's query heads (default 8, one a KV head; 32: Llama-3-8B's four)
# TLS: sm,tcp (shared memory: sysv for small messages, cma for large ones) and tcp.
# TESTS (optional): unit test prefixes run first with the pack's tandem-tests (TESTS=1 when
# packed), output in tests.txt; CRC_SPEED=1: `peer_bench --crc-speed 1` (CRC-32C's rate per path
# on this CPU) in crc-speed.txt.
# ARGS (optional): the rounds' peer_bench columns instead of the above (after "before", if
# packed), '|'-separated argument sets ("" is the default build: "|--crc 0|--announce 0"); each
# run's whole output (the stage clocks) goes to stages-TLS-SIZE.txt. Words UCX_K=V in a set
# are put in that peer_bench's environment (env); PERFTEST_ENVS (bench/peer_link_rounds.sh) adds
# perftest columns with such settings. A word @NAME runs the pack's bin/NAME (peer_quiet_pack.sh's
# EXTRA) instead of peer_bench.
set -u
PACK=${1:?usage: peer_quiet_run.sh PACK OUT [SECONDS]}
O=${2:?usage: peer_quiet_run.sh PACK OUT [SECONDS]}
BUDGET=${3:-150}
POLLS=${POLLS:-0 1000}
SENDS=${SENDS:-1 4}
# the rounds' configurations, "TLS SIZE REPS" separated by '|'
CFGS=${CFGS:-sm,tcp 1048576 1000|tcp 1048576 1000|sm,tcp 8388608 100|tcp 8388608 100}
PARTS=${PARTS:-rounds handover} # handover alone: the two hand-overs, no rounds
t0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - t0))); }
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
tar -C "$W" -xJf "$PACK"
P=$W/pk
export LD_LIBRARY_PATH=$P/rt UCX_MODULE_DIR=$P/ucx PATH=$P/bin:$PATH
mkdir -p "$O"
{
    date -u
    uname -a
    echo "nproc $(nproc)"
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node\(s\)|MHz|L1d|L2|L3|Flags'
    echo "loadavg $(cat /proc/loadavg)"
    echo "thp $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
    echo "governor $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo absent)"
    echo "ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent)"
    ldd "$P/bin/peer_bench" "$P/bin/ucx_perftest" | grep -E 'not found|uc[pstm]'
    ucx_info -v
    for tls in sm,tcp tcp; do echo "UCX_TLS=$tls:"; UCX_TLS=$tls ucx_info -d | grep -E '^# +(Transport|Device):' | paste - - | sort -u; done
    ps -eo pcpu,comm --sort=-pcpu | head -5
} >"$O/machine.txt" 2>&1
for tls in sm,tcp tcp; do
    UCX_TLS=$tls "$P/bin/peer_bench" --sizes 1048576 --logits 0 --reps 50 --path tag 2>&1 | head -3 | sed "s/^/$tls: /"
done >"$O/lanes.txt"

if [ -n "${TESTS:-}" ] && [ -x "$P/bin/tandem-tests" ]; then
    # shellcheck disable=SC2086 # prefixes, one word each
    UCX_MEM_EVENTS=no timeout 120 "$P/bin/tandem-tests" $TESTS >"$O/tests.txt" 2>&1
    echo "# rc $?" >>"$O/tests.txt"
fi
[ "${CRC_SPEED:-0}" = 1 ] && "$P/bin/peer_bench" --crc-speed 1 >"$O/crc-speed.txt" 2>&1

bins=
[ -x "$P/bin/peer_bench.before" ] && bins="$P/bin/peer_bench.before"
for p in $POLLS; do bins="$bins|$P/bin/peer_bench --poll-us $p"; done
bins="$bins|$P/bin/peer_bench --buffers 1"
for n in $SENDS; do bins="$bins|$P/bin/peer_bench --sends $n"; done
bins=${bins#|}
if [ -n "${ARGS+x}" ]; then
    bins=
    [ -x "$P/bin/peer_bench.before" ] && bins="$P/bin/peer_bench.before"
    IFS='|' read -r -a av <<<"$ARGS"
    for a in "${av[@]}"; do # UCX_K=V words: peer_bench run with them in its environment
        e=
        r=
        b=peer_bench
        for w in $a; do case $w in UCX_*=*) e="$e $w" ;; @*) b=${w#@} ;; *) r="$r $w" ;; esac; done
        if [ -n "$e" ]; then bins="$bins|env$e $P/bin/$b$r"; else bins="$bins|$P/bin/$b$r"; fi
    done
    bins=${bins#|}
fi
round() { # TLS SIZE REPS: one interleaved round, appended to its file
    f="$O/rounds-$(echo "$1" | tr , _)-$2"
    [ -f "$f" ] || echo "# load | ${bins//$P\/bin\//} (MiB/s) | ucx_perftest tag_bw (MB/s)${PERFTEST_ENVS:+ | with ${PERFTEST_ENVS//|/ | }}; UCX_TLS=$1, $2-byte chunks, $3 a pass" >"$f"
    IFS='|' read -r -a arr <<<"$bins"
    LOG="$O/stages-$(echo "$1" | tr , _)-$2.txt" REPS=$3 PERFTEST=ucx_perftest TIMEOUT=${TIMEOUT:-20} \
        sh "$HERE/peer_link_rounds.sh" 1 "$1" "$2" "${arr[@]}" | tail -n 1 >>"$f"
}
handover() { # POLL_US TOKENS REPS [BIN SUFFIX]: daemon B lends its CPU (2 threads, as peer_handover's local one) or HDEV
    K=bench-peer-key-0123456789
    M=$W/kv8b${HHEADS:+-h$HHEADS}
    [ -d "$M" ] || { mkmodel --out "$M" --layers 32 --kv-heads 8 --head-dim 128 --heads "${HHEADS:-8}" --hidden 256 \
        --intermediate 512 --vocab 128256 --max-pos 40960 >/dev/null && gzip -dc tests/data/tokenizer/llama3/tokenizer.json.gz >"$M/tokenizer.json"; }
    L=$O/handover.poll$1.t$2${5:-}
    # B paced as the emulator reads TANDEM_EMU_PACE (strtol: " 1", "+1", "01" are 1 too; not a
    # whole number, or out of 0..1: off)
    bpace=0
    v=$(printf '%d' "${TANDEM_EMU_PACE:-0}" 2>/dev/null) && [ "$v" = 1 ] && bpace=1
    tandem serve --model "$M" --devices cpu --threads 2 --node-name nodeB --host 127.0.0.1 --port 0 --admin-port 0 \
        --kv-listen 127.0.0.1:0 --peer-devices "${HDEV:-cpu}" --fpga-emu-pace "$bpace" --peer-key $K --peer-poll-us "$1" --log-file "$L.daemon.log" >/dev/null 2>&1 &
    bp=$!
    i=0
    while [ $i -lt 600 ] && ! grep -q event=ready "$L.daemon.log" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
    port=$(sed -n 's/.*listener=peers .*port=\([0-9]*\).*/\1/p' "$L.daemon.log" | head -1)
    echo "# $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): ${4:-peer_handover} --tokens $2 --reps $3 --device ${HDEV:-cpu} --transport auto --poll-us $1${TANDEM_EMU_PACE:+ TANDEM_EMU_PACE=$TANDEM_EMU_PACE}" >"$L.txt"
    # a 4K hand-over takes ~2 s a repetition and side on the quiet node; the limit grows with T
    TANDEM_PEER_CALL_TIMEOUT_S=120 timeout "${HTIMEOUT:-$((60 + $2 * $3 / 1024))}" "${4:-peer_handover}" --model "$M" --peer 127.0.0.1:$port --key $K --device "${HDEV:-cpu}" \
        --tokens "$2" --reps "$3" --transport auto --poll-us "$1" >>"$L.txt" 2>&1
    echo "# $(date -u +%T) rc $?" >>"$L.txt"
    kill $bp 2>/dev/null
    wait $bp 2>/dev/null
}
handovers() {
    for tr in ${HANDOVER:-4096:3}; do
        for p in ${HPOLLS:-0 1000}; do
            if [ -z "${HBINS:-}" ]; then
                handover "$p" "${tr%%:*}" "${tr##*:}"
                continue
            fi
            k=1
            while [ $k -le "${HBIN_TURNS:-1}" ]; do
                for hb in $HBINS; do handover "$p" "${tr%%:*}" "${tr##*:}" "$hb" ".$hb.$k"; done
                k=$((k + 1))
            done
        done
    done
}
has_handover() { case $PARTS in *handover*) true ;; *) false ;; esac; }
# each config's round in turn; the hand-overs once every config has HANDOVER_AT rounds
AT=${HANDOVER_AT:-2}
NEED=${HANDOVER_NEED:-60}
r=1
if [ "$PARTS" = handover ] || { has_handover && [ "$AT" -eq 0 ]; }; then
    handovers
    [ "$PARTS" = handover ] && r=0
fi
while [ "$PARTS" != handover ] && [ "$(left)" -gt 15 ]; do
    IFS='|' read -r -a cfgs <<<"$CFGS"
    for cfg in "${cfgs[@]}"; do
        [ "$(left)" -gt 15 ] || break
        round $cfg
    done
    if [ $r -eq "$AT" ] && [ "$(left)" -gt "$NEED" ] && has_handover; then
        handovers
    fi
    r=$((r + 1))
done
echo "$(date -u +%T) done, $(($(date +%s) - t0)) s, $((r - 1)) rounds" >>"$O/machine.txt"
