#!/bin/sh
# Every subcommand answers --help (and -h, and `tandem help NAME`) with its usage on stdout,
# nothing on stderr and exit 0; a bad option gets the usage on stderr and exit 2; `tandem
# version` and `tandem --version` print the version; `serve --help` names each flag, and each
# default, once.
B=${BUILD:-build}
TANDEM=${TANDEM:-$B/tandem}
T=$(mktemp -d /tmp/tandem-help.XXXXXX)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok $1"; }
fail() { echo "not ok $1 # $2"; }

# the commands `tandem help` lists ("  name  summary" lines)
"$TANDEM" help >"$T/list" 2>"$T/err"
rc=$?
cmds=$(sed -n 's/^  \([a-z]*\) .*/\1/p' "$T/list")
if [ $rc = 0 ] && [ ! -s "$T/err" ] && [ "$(echo "$cmds" | wc -l)" -ge 10 ]; then ok help_lists_commands
else fail help_lists_commands "rc $rc, $(echo "$cmds" | wc -l) commands"; fi
for c in $cmds; do
    for form in "$c --help" "$c -h" "help $c"; do
        # shellcheck disable=SC2086 # form is split into words on purpose
        "$TANDEM" $form >"$T/out" 2>"$T/err" </dev/null
        rc=$?
        t=help_$(echo "$form" | tr -c 'a-z\n' _)
        if [ $rc = 0 ] && [ ! -s "$T/err" ] && grep -q '^usage: tandem' "$T/out"; then ok "$t"
        else fail "$t" "rc $rc, stdout '$(head -c 80 "$T/out")', stderr '$(head -c 120 "$T/err")'"; fi
    done
done
# a bad option: usage on stderr, exit 2 (help itself takes none: it lists the commands)
for c in $cmds; do
    [ "$c" = help ] && continue
    [ "$c" = version ] && continue
    "$TANDEM" "$c" --no-such-option >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    if [ $rc = 2 ] && grep -qi 'usage\|unknown\|unexpected' "$T/err"; then ok "bad_option_$c"
    else fail "bad_option_$c" "rc $rc, stderr '$(head -c 120 "$T/err")'"; fi
done
for form in version --version; do
    v=$("$TANDEM" $form 2>&1)
    rc=$?
    if [ $rc = 0 ] && echo "$v" | grep -qx 'tandem [0-9][0-9.]*'; then ok "version_${form#--}_flag"
    else fail "version_${form#--}_flag" "rc $rc: $v"; fi
done
"$TANDEM" nosuchcommand >/dev/null 2>&1
[ $? = 2 ] && ok unknown_command_exit_2 || fail unknown_command_exit_2 "not 2"

# serve --help: one line per flag, each with at most one "default", every flag once
"$TANDEM" serve --help >"$T/serve"
twice=$(grep -c '(default:.*(default:' "$T/serve")
[ "$twice" = 0 ] && ok serve_help_default_once || fail serve_help_default_once "$(grep '(default:.*(default:' "$T/serve" | head -2)"
dups=$(sed -n 's/^  \(--[a-z-]*\) .*/\1/p' "$T/serve" | sort | uniq -d)
n=$(sed -n 's/^  \(--[a-z-]*\) .*/\1/p' "$T/serve" | wc -l)
[ -z "$dups" ] && [ "$n" -ge 40 ] && ok serve_help_flags_once || fail serve_help_flags_once "$n flags, repeated: $dups"
grep -q '^  --admin-port .*(default: 8090)' "$T/serve" && ok serve_help_admin_port || fail serve_help_admin_port "$(grep admin-port "$T/serve")"
# --print-config: the flags, environment and defaults added up, in the file's format
TANDEM_PORT=8123 "$TANDEM" serve --print-config --admin-port 8124 --api-key secret-key >"$T/cfg" 2>&1
rc=$?
if [ $rc = 0 ] && grep -qx 'port = 8123' "$T/cfg" && grep -qx 'admin_port = 8124' "$T/cfg" &&
    grep -qx 'host = "0.0.0.0"' "$T/cfg" && ! grep -q secret-key "$T/cfg"; then ok serve_print_config
else fail serve_print_config "rc $rc: $(head -c 300 "$T/cfg")"; fi
# what it prints reads back as a config file
grep -v '^#' "$T/cfg" >"$T/cfg.conf"
"$TANDEM" serve --config "$T/cfg.conf" --print-config >"$T/cfg2" 2>&1
if [ $? = 0 ] && grep -qx 'port = 8123' "$T/cfg2" && grep -qx 'admin_port = 8124' "$T/cfg2"; then ok serve_print_config_reads_back
else fail serve_print_config_reads_back "$(head -c 300 "$T/cfg2")"; fi
# make run's curl line names the port the configuration gives (tools/run.sh; the daemon it then
# starts stops at once on the missing model)
TANDEM_PORT=8125 sh tools/run.sh "$TANDEM" --host 127.0.0.1 --model "$T/no-model" >"$T/run" 2>&1
if grep -q 'curl -s http://127.0.0.1:8125/v1/completions' "$T/run" && grep -q 'no-model' "$T/run"; then ok run_curl_real_port
else fail run_curl_real_port "$(head -c 400 "$T/run")"; fi
