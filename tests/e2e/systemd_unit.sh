#!/bin/sh
# `make install` into a staging root installs the binary, the unit, the example config and the
# sysusers entry; the unit's hardening scores at most 2.5 on `systemd-analyze security`;
# `systemd-analyze verify` has nothing to say about any of its lines; its device policy lets UCX
# open the RDMA devices (the verbs devices and the RDMA CM: DevicePolicy=closed blocked them).
T=$(mktemp -d /tmp/tandem-unit.XXXXXX)
trap 'rm -rf "$T"' EXIT
# install what this build has, from its own folder (the Makefile's BUILD is not read from the
# environment: without BUILD= on its command line a BUILD=build/c run built and installed build/),
# with that folder's sanitizer (an object of another build must not land in it)
SAN=0
[ "${BUILD:-build}" = build/san ] && SAN=1
[ "${BUILD:-build}" = build/tsan ] && SAN=thread
# no CUDA plugins built here (a CUDA=0 tree) -> none compiled now
CUDA=0
[ -f "${BUILD:-build}/libtandem_cuda.so" ] && CUDA=1
if make -s install BUILD="${BUILD:-build}" SAN=$SAN CUDA=$CUDA DESTDIR="$T" PREFIX=/usr/local >"$T/make.log" 2>&1; then
    echo "ok unit_make_install"
else
    echo "not ok unit_make_install # $(tail -n 3 "$T/make.log")"
    exit 0
fi
for f in usr/local/bin/tandem lib/systemd/system/tandem.service etc/tandem/tandem.conf \
    usr/lib/sysusers.d/tandem.conf usr/local/share/tandem/models/stories260K/config.json; do
    if [ -e "$T/$f" ]; then echo "ok unit_installed_$(echo "$f" | tr ./ __)"; else echo "not ok unit_installed_$f"; fi
done
# the installed binary finds the installed model through its prefix
"$T/usr/local/bin/tandem" serve --help >/dev/null 2>&1 && echo "ok unit_binary_runs" || echo "not ok unit_binary_runs"
if ! command -v systemd-analyze >/dev/null; then
    echo "not ok unit_security # systemd-analyze missing (Debian package systemd; make deps)"
    exit 0
fi
score=$(systemd-analyze security --offline=yes "$T/lib/systemd/system/tandem.service" 2>/dev/null |
    sed -n 's/.*Overall exposure level for tandem.service: \([0-9.]*\).*/\1/p')
if [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }'; then
    echo "ok unit_security_exposure # $score"
else
    echo "not ok unit_security_exposure # score '$score' > 2.5"
fi
grep -q '^Type=notify' "$T/lib/systemd/system/tandem.service" && echo "ok unit_type_notify" || echo "not ok unit_type_notify"
grep -q '^ExecStart=/usr/local/bin/tandem serve --config /etc/tandem/tandem.conf' "$T/lib/systemd/system/tandem.service" &&
    echo "ok unit_execstart" || echo "not ok unit_execstart"
U=$T/lib/systemd/system/tandem.service
# verify names a line of the unit it finds fault with as FILE:LINE (what it says about this host,
# a binary or /bin/kill not installed in the staging root, is not the unit's)
systemd-analyze verify "$U" >"$T/verify" 2>&1
if grep -q 'tandem.service:[0-9][0-9]*:' "$T/verify"; then
    echo "not ok unit_verify # $(grep 'tandem.service:[0-9][0-9]*:' "$T/verify" | head -3 | tr '\n' ' ')"
else
    echo "ok unit_verify"
fi
grep -q '^DeviceAllow=char-infiniband_verbs rw' "$U" && grep -q '^DeviceAllow=/dev/infiniband/rdma_cm rw' "$U" &&
    echo "ok unit_allows_rdma" || echo "not ok unit_allows_rdma # DeviceAllow= lacks the verbs devices or rdma_cm"
