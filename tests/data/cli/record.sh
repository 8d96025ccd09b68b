#!/bin/sh
# tests/data/cli/record.sh [OUTDIR] — runs every case of cases.sh with $BUILD/tandem (default
# build/) from the repository root and writes OUTDIR/NAME.out (stdout) and OUTDIR/NAME.err
# (stderr, then "[exit N]"); OUTDIR defaults to this folder, i.e. it (re)writes the goldens.
# cuda_ cases are recorded only where `nvidia-smi -L` lists a GPU.
#
# The goldens in this folder were recorded with the code from before generate and chat became
# clients of the scheduler, so that the tests hold the new path to the tokens and bytes of the
# old one: the cpu and fpga-emu cases with 93bdd7f (built with CUDA=0), the cuda_ cases on an
# H200 with 9a522ec's cmd_generate.c / cmd_chat.c on the plugins of the day
# (tests/accel/logs/2026-11-26-h200). Re-record only for an intended change of output, and say
# why in the commit. 2026-11-28: generate's text became the prompt's continuation (the space a
# first "\u2581" piece stands for); the 15 cpu/fpga-emu generate files changed by exactly that
# leading space, cuda_gen_seed_text was given the same space by hand (its first token is "\u2581with").
B=${BUILD:-build}
D=tests/data/cli
O=${1:-$D}
mkdir -p "$O"
export TANDEM_CACHE_DIR="${TANDEM_CACHE_DIR:-$B/fpga-test-cache}"
gpu=0
nvidia-smi -L 2>/dev/null | grep -q GPU && gpu=1
run() {
    name=$1 in=$2 env=$3
    shift 3
    case $name in cuda_*) [ $gpu = 1 ] || return 0 ;; esac
    [ "$in" = - ] && in=/dev/null || in=$D/$in
    if [ "$env" = - ]; then
        "$B/tandem" "$@" <"$in" >"$O/$name.out" 2>"$O/$name.err"
    else
        env "$env" "$B/tandem" "$@" <"$in" >"$O/$name.out" 2>"$O/$name.err"
    fi
    echo "[exit $?]" >>"$O/$name.err"
}
. $D/cases.sh
