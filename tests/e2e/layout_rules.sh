#!/bin/sh
# The rules of the house (docs/ARCHITECTURE.md), checked by tools/check_layout.py: which folder
# may include which, the same arrows at link level over $BUILD/obj (a call by name without an
# include counts), no cycle between top-level folders, no source file over 1,000 lines. Each
# violation is printed as file:line under its "not ok". Then: the arrows table in
# docs/ARCHITECTURE.md is the one the script enforces, and the script fails on a scratch tree
# that breaks each rule (a check that cannot fail proves nothing).
B=${BUILD:-build}
T=$(mktemp -d /tmp/tandem-layout.XXXXXX)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok $1"; }
fail() { echo "not ok $1 # $2"; }
CHECK="python3 tools/check_layout.py"

for c in includes links cycles sizes; do
    if [ $c = links ] && ! ls "$B/obj/scheduler/"*.o >/dev/null 2>&1; then
        ok "layout_links # SKIP no objects in $B/obj (build first)"
        continue
    fi
    $CHECK --only $c --objects "$B/obj" >"$T/out" 2>&1
    rc=$?
    if [ $rc = 0 ] && [ ! -s "$T/out" ]; then ok "layout_$c"
    else
        fail "layout_$c" "rc $rc, $(wc -l <"$T/out") violation(s)"
        sed 's/^/#   /' "$T/out"
    fi
done

$CHECK --known | sed 's/^/# known: /'

# the table in docs/ARCHITECTURE.md, between its markers, is the script's
$CHECK --table >"$T/want"
sed -n '/<!-- layout-table -->/,/<!-- \/layout-table -->/p' docs/ARCHITECTURE.md |
    grep '^|' >"$T/doc"
if [ -s "$T/doc" ] && cmp -s "$T/want" "$T/doc"; then ok layout_doc_table_is_the_checked_one
else
    fail layout_doc_table_is_the_checked_one "docs/ARCHITECTURE.md's table differs from --table"
    diff "$T/want" "$T/doc" | sed 's/^/#   /'
fi

# docs/ARCHITECTURE.md cites nothing outside the repository, and every path it names exists
grep -o '[A-Za-z0-9_.-]*/[A-Za-z0-9_./-]*\.\(c\|h\|md\|cu\|cuh\|sh\|py\)\b' docs/ARCHITECTURE.md |
    grep -v '^build/' | sort -u >"$T/paths"
missing=""
while read -r p; do [ -e "$p" ] || missing="$missing $p"; done <"$T/paths"
if grep -q '\.\./\|DESIGN\.md\|/shared/\|papers/\|://' docs/ARCHITECTURE.md; then
    fail layout_doc_stands_alone "docs/ARCHITECTURE.md cites something outside the repository"
elif [ -n "$missing" ]; then fail layout_doc_stands_alone "missing:$missing"
else ok "layout_doc_stands_alone # $(wc -l <"$T/paths") paths"; fi

# a scratch tree with one violation of each kind: each is reported, with its file:line
R="$T/tree"
mkdir -p "$R/scheduler" "$R/cpu" "$R/fpga/emu" "$R/proto" "$R/model" "$R/daemon" "$R/odd"
printf '#include "cpu/ops.h"\n' >"$R/scheduler/bad.c"               # scheduler -> backend
printf 'int x;\n#include "gpu/gpu.h"\n' >"$R/cpu/ops.h"              # backend -> backend
printf '#include "fpga/card.h"\n' >"$R/fpga/emu/emu.c"               # emulator -> host code
printf '#include "daemon/log.h"\n' >"$R/model/m.c"                   # model -> daemon
printf '#include "proto/p.h"\n' >"$R/daemon/log.h"                   # daemon -> proto (fine)
printf '/* #include "model/m.h" in a comment is no include */\n' >"$R/proto/p.h"
printf '#include "model/m.h"\n' >"$R/proto/q.h"                      # proto -> model, a cycle
printf '#include "proto/q.h"\n' >"$R/model/m.h"                      #   with model -> proto
printf 'int y;\n' >"$R/odd/z.c"                                      # a folder without rules
awk 'BEGIN { for (i = 0; i < 1001; i++) print "int v" i ";" }' >"$R/cpu/big.c"
$CHECK --root "$R" >"$T/self" 2>&1
rc=$?
miss=""
for want in 'scheduler/bad.c:1: includes cpu/ops.h' 'cpu/ops.h:2: includes gpu/gpu.h' \
    'fpga/emu/emu.c:1: includes fpga/card.h' 'model/m.c:1: includes daemon/log.h' \
    'proto/q.h:1: includes model/m.h' ': cycle ' 'proto -> model' 'odd/z.c:1: no rule' \
    'cpu/big.c:1001: 1001 lines'; do
    grep -qF "$want" "$T/self" || miss="$miss [$want]"
done
extra=$(grep -c '^daemon/log.h:[0-9]*: includes\|^proto/p.h:' "$T/self")
if [ $rc = 1 ] && [ -z "$miss" ] && [ "$extra" = 0 ]; then
    ok "layout_check_catches_each_rule # $(wc -l <"$T/self") violations planted and found"
else
    fail layout_check_catches_each_rule "rc $rc, missing:$miss, false alarms: $extra"
    sed 's/^/#   /' "$T/self"
fi
