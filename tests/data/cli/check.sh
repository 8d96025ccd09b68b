# tests/data/cli/check.sh — sourced by tests/e2e/generate.sh and chat.sh with PATTERNS set
# (shell patterns on case names, separated by spaces): runs those cases of cases.sh with $BUILD/tandem and compares
# stdout, stderr and the exit status with the goldens in this folder, byte for byte. One line
# per case: "ok cli_golden_NAME", "not ok cli_golden_NAME # ..." with the first differing
# lines, or "ok cli_golden_NAME # SKIP why" for a cuda_ case without an NVIDIA GPU (or with no
# golden recorded for it).
_B=${BUILD:-build}
_D=tests/data/cli
_T=$(mktemp -d)
export TANDEM_CACHE_DIR="${TANDEM_CACHE_DIR:-$_B/fpga-test-cache}"
_gpu=0
nvidia-smi -L 2>/dev/null | grep -q GPU && _gpu=1
run() {
    name=$1 in=$2 env=$3
    shift 3
    want=0
    for p in $PATTERNS; do
        case $name in $p) want=1 ;; esac
    done
    [ $want = 1 ] || return 0
    case $name in
    cuda_*)
        if [ $_gpu = 0 ]; then
            echo "ok cli_golden_$name # SKIP no NVIDIA GPU here (nvidia-smi lists none)"
            return 0
        fi
        if [ ! -f "$_D/$name.out" ]; then
            echo "ok cli_golden_$name # SKIP no golden recorded (tests/data/cli/record.sh on a GPU machine)"
            return 0
        fi
        ;;
    esac
    [ "$in" = - ] && in=/dev/null || in=$_D/$in
    if [ "$env" = - ]; then
        "$_B/tandem" "$@" <"$in" >"$_T/$name.out" 2>"$_T/$name.err"
    else
        env "$env" "$_B/tandem" "$@" <"$in" >"$_T/$name.out" 2>"$_T/$name.err"
    fi
    echo "[exit $?]" >>"$_T/$name.err"
    if cmp -s "$_T/$name.out" "$_D/$name.out" && cmp -s "$_T/$name.err" "$_D/$name.err"; then
        echo "ok cli_golden_$name"
    else
        why=$( (diff "$_D/$name.out" "$_T/$name.out"; diff "$_D/$name.err" "$_T/$name.err") | grep '^[<>]' | head -4 | cut -c1-160 | tr '\n' ' ')
        echo "not ok cli_golden_$name # $why"
    fi
}
. $_D/cases.sh
rm -rf "$_T"
