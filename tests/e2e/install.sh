#!/bin/sh
# An installed tandem stands alone: `make install-files DESTDIR=... PREFIX=/usr` stages the
# install (what `make install` copies, from this build), and the staged binary, run from outside
# the repository, finds its emulator (PREFIX/lib/tandem/libxrt_emu.so) and its bundled model
# (PREFIX/share/tandem/models) for every subcommand that opens a device: generate, eval, bench,
# and serve with the default devices (cpu and two emulated cards).
. tests/e2e/lib/serve.sh
ROOT=$T/root
REPO=$(pwd)
if ! make -s --no-print-directory install-files BUILD="$BUILD" DESTDIR="$ROOT" PREFIX=/usr >"$T/make" 2>&1; then
    fail install_staged "$(tail -c 400 "$T/make")"
    exit 0
fi
BIN=$ROOT/usr/bin/tandem
check install_staged sh -c "[ -x $BIN ] && [ -f $ROOT/usr/lib/tandem/libxrt_emu.so ] && [ -f $ROOT/usr/share/tandem/models/stories260K/config.json ] && grep -q '^ExecStart=/usr/bin/tandem ' $ROOT/lib/systemd/system/tandem.service && [ -f $ROOT/etc/tandem/tandem.conf ]"
export TANDEM_CACHE_DIR=$T/cache
# outside the checkout: nothing relative to the working directory can help
cd "$T" || exit 1
"$BIN" generate --ids 1,403,407 --max-tokens 8 --temperature 0 --device fpga-emu --json >"$T/emu.json" 2>"$T/emu.err"
rc=$?
"$REPO/$BUILD/tandem" generate --ids 1,403,407 --max-tokens 8 --temperature 0 --device cpu --json >"$T/cpu.json" 2>/dev/null
check installed_generate_fpga_emu sh -c "[ $rc = 0 ] && jq -e '.ids | length == 8' $T/emu.json >/dev/null && [ \"\$(jq -c .ids $T/emu.json)\" = \"\$(jq -c .ids $T/cpu.json)\" ]"
[ $rc = 0 ] || echo "# $(head -c 400 "$T/emu.err")"
check installed_generate_cpu_default_model sh -c "'$BIN' generate --prompt 'Once upon a time' --max-tokens 4 --temperature 0 >/dev/null 2>&1"
check installed_bench_fpga_emu sh -c "'$BIN' bench --model $ROOT/usr/share/tandem/models/stories260K --device fpga-emu:1 --tokens 4 --repeat 1 >$T/bench 2>&1"
check installed_eval_fpga_emu sh -c "'$BIN' eval --model $ROOT/usr/share/tandem/models/stories260K --golden $REPO/tests/data/golden/stories260K --device fpga-emu >$T/eval 2>&1"
# the daemon with its default devices, from the installed tree
cd "$REPO" || exit 1
TANDEM=$BIN
SERVE_DEVICES=
serve_start --fpga-emu-pace 0
rc=$?
check installed_serve_default_devices sh -c "[ $rc = 0 ] && grep -q 'event=device name=fpga-emu:1' $LOG"
[ $rc = 0 ] && serve_stop
