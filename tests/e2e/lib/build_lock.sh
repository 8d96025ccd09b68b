# tests/e2e/lib/build_lock.sh — sourced by the e2e scripts that build something of their own
# (fuzz_smoke.sh: the libFuzzer harnesses; serve_san.sh: the ASan daemon). tests/run.sh starts
# those builds early, in the background (`SCRIPT --build`), and the scripts' own builds then wait
# for it, or find its result, instead of running make on the same files at once.
#
#   build_locked NAME CMD...   runs CMD (a command or a shell function) in a subshell holding
#                              build/.lock-NAME (flock, util-linux: Essential on Debian; without
#                              flock CMD just runs); CMD's exit status
build_locked() {
    _bl_name=$1
    shift
    mkdir -p build
    if command -v flock >/dev/null 2>&1; then
        (flock 9 && "$@") 9>"build/.lock-$_bl_name"
    else
        "$@"
    fi
}
