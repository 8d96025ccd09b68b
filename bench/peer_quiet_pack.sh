#!/bin/sh
# bench/peer_quiet_pack.sh DEST [BEFORE_PEER_BENCH] — the peer link's benchmark for a quiet
# machine that lacks our libraries (the H200 node's 16 idle host cores: BENCHMARKS.md, "Peers over
# UCX"), packed on the development machine: build/p's PORTABLE=1 peer_bench, peer_handover,
# mkmodel and tandem, ucx_perftest and ucx_info, every shared library they need (rt/: ldd, less
# the C runtime every image has) and UCX's loadable transport module for CMA (ucx/: UCX_MODULE_DIR;
# tcp, sysv and posix are in libuct itself), as DEST/pack.tar.xz beside bench/peer_quiet_run.sh and
# bench/peer_link_rounds.sh. BEFORE_PEER_BENCH (optional): a peer_bench built from the code before
# a change (PORTABLE=1), packed as peer_bench.before for the rounds' "before" column. Carry DEST
# (under the working tree, ignored) and run `bash DEST/peer_quiet_run.sh DEST/pack.tar.xz OUT`.
# TESTS=1: the PORTABLE tandem-tests too (stripped; libxrt_emu.so is beside it: the fpga-emu
# card that peer_remote_carries_block_size_and_decode_curve lends — without it that test failed in
# every quiet-node run before wiretcp6), for peer_quiet_run.sh's TESTS (unit tests of code paths
# this machine's CPU lacks, e.g. AVX-512).
# EXTRA (optional): more peer_bench builds, "PATH:NAME ..." packed as bin/NAME, which an argument
# set of peer_quiet_run.sh's ARGS picks with the word @NAME (e.g. one built with
# CFLAGS="-O3 -g -DPEER_KV_RX_SLOTS=6" in the environment, BUILD=build/p6: more kv_rx slots).
set -eu
DEST=${1:?usage: peer_quiet_pack.sh DEST [BEFORE_PEER_BENCH]}
BEFORE=${2:-}
B=${BUILD:-build/p}
T=
[ "${TESTS:-0}" = 1 ] && T=$B/tandem-tests
make -j${JOBS:-2} CUDA=0 PORTABLE=1 BUILD=$B $B/peer_bench $B/peer_handover $B/mkmodel $B/tandem $B/libxrt_emu.so $T >/dev/null
W=$(mktemp -d)
P=$W/pk
mkdir -p $P/bin $P/rt $P/ucx
# the emulated card's library beside tandem and tandem-tests, where they load it from (the
# hand-over onto fpga-emu:0, peer_quiet_run.sh's HDEV; the fpga-emu tests)
cp $B/peer_bench $B/peer_handover $B/mkmodel $B/tandem $B/libxrt_emu.so $P/bin/
[ -n "$T" ] && strip -o $P/bin/tandem-tests $T
[ -n "$BEFORE" ] && cp "$BEFORE" $P/bin/peer_bench.before
for x in ${EXTRA:-}; do cp "${x%%:*}" "$P/bin/${x##*:}"; done
cp "$(command -v ucx_perftest)" "$(command -v ucx_info)" $P/bin/
for lib in $(ldd $P/bin/* 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $(basename $lib) in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s*|libstdc++*) ;;
    *) cp -L $lib $P/rt/ ;;
    esac
done
M=$(dirname "$(ldd $P/bin/ucx_perftest | awk '/libuct.so/ {print $3}')")/ucx
for f in $M/libuct_cma.so*; do cp -L "$f" $P/ucx/; done
mkdir -p "$DEST"
tar -C $W -cJf "$DEST/pack.tar.xz" pk
cp bench/peer_quiet_run.sh bench/peer_link_rounds.sh "$DEST/"
rm -rf "$W"
ls -la "$DEST"
