#!/bin/sh
# The README and the example configuration cite no file outside the repository: no ../ paths,
# no design notes kept elsewhere, and every source or document path they name (dir/file.ext,
# outside build/) exists in the checkout.
T=$(mktemp -d /tmp/tandem-docs.XXXXXX)
trap 'rm -rf "$T"' EXIT
for f in README.md deploy/tandem.conf.example systemd/tandem.service; do
    n=$(echo "$f" | tr 'A-Z' 'a-z' | tr -c 'a-z\n' _)
    if grep -n '\.\./\|DESIGN\.md\|/shared/\|papers/' "$f" >"$T/out"; then
        echo "not ok docs_outside_$n # $(head -c 200 "$T/out")"
    else
        echo "ok docs_outside_$n"
    fi
    grep -o '[A-Za-z0-9_.-]*/[A-Za-z0-9_./-]*\.\(c\|h\|md\|cu\|cuh\|sh\|py\|js\|example\|service\|sysusers\|jinja\|json\|cfg\)\b' "$f" |
        grep -v '^build/\|^/\|^[a-z]*://' | sort -u >"$T/paths"
    missing=""
    while read -r p; do [ -e "$p" ] || missing="$missing $p"; done <"$T/paths"
    if [ -z "$missing" ]; then echo "ok docs_paths_exist_$n # $(wc -l <"$T/paths") paths"
    else echo "not ok docs_paths_exist_$n # missing:$missing"; fi
done
