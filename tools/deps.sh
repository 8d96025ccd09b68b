#!/bin/sh
# Installs the Debian packages tandem builds and tests with; does nothing when all are present.
# Runs apt-get as root, else through sudo. Idempotent: safe to call before every make run/test.
set -e
PKGS="build-essential pkg-config libuv1-dev libmicrohttpd-dev libjansson-dev libpcre2-dev libssl-dev libicu-dev
      libsystemd-dev curl python3"
# Test-only tools (end-to-end tests use real clients: curl, Node's openai package, promtool).
# Node.js may come from Debian or from elsewhere (nodesource): only install it when no node exists.
[ "${TANDEM_DEPS_TEST:-1}" = 1 ] && PKGS="$PKGS prometheus systemd wrk jq"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ "${TANDEM_DEPS_TEST:-1}" = 1 ]; then
    command -v node >/dev/null 2>&1 || missing="$missing nodejs"
    command -v npm >/dev/null 2>&1 || missing="$missing npm"
fi
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends $missing
