#!/bin/sh
# Installs the Debian packages tandem needs; does nothing when all are present. Idempotent: safe
# to call before every make run / make test.
#
#   TANDEM_DEPS_TEST=0 tools/deps.sh   building and running (make run)
#   TANDEM_DEPS_TEST=1 tools/deps.sh   and the tools the tests use (make test, make deps)
#
# Runs apt-get as root, else through sudo. apt's and dpkg's output goes to a log file that is
# printed only when the installation fails, so that a test log holds one line per install.
set -e
PKGS="build-essential pkg-config libuv1-dev libmicrohttpd-dev libjansson-dev libpcre2-dev libssl-dev
      libicu-dev libsystemd-dev libucx-dev curl"
# Test-only tools: real clients (curl above, Node's openai package through npm, wrk, and
# slowhttptest for slow-client attacks), promtool (Debian ships it only inside the prometheus
# package), jq, python3, systemd-analyze (systemd), clang with libFuzzer's runtime for the fuzzers
# (clang-14 is bookworm's; the clang package gives the plain `clang` name), haproxy (the fleet
# test puts it in front of two daemons), ucx-utils (ucx_perftest, the transfer benchmark's
# yardstick), python3-yaml and python3-jsonschema (the Kubernetes manifest's check).
# Node.js may come from Debian or from elsewhere (nodesource): only installed when no node exists.
TEST_PKGS="prometheus systemd wrk jq python3 slowhttptest clang clang-14 libclang-rt-14-dev haproxy
           ucx-utils python3-yaml python3-jsonschema"
test_tools=${TANDEM_DEPS_TEST:-1}
[ "$test_tools" = 1 ] && PKGS="$PKGS $TEST_PKGS"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ "$test_tools" = 1 ]; then
    command -v node >/dev/null 2>&1 || missing="$missing nodejs"
    command -v npm >/dev/null 2>&1 || missing="$missing npm"
fi
# The Node packages the end-to-end tests use (the official openai client, the Ajv JSON Schema
# validator and its formats) go into build/npm (git-ignored); an offline machine keeps what it has and the tests
# that need them say SKIP.
if [ "$test_tools" = 1 ] && [ -z "$missing" ] && command -v npm >/dev/null 2>&1 &&
    { [ ! -d build/npm/node_modules/openai ] || [ ! -d build/npm/node_modules/ajv ] ||
        [ ! -d build/npm/node_modules/ajv-formats ]; }; then
    mkdir -p build/npm
    npm install --silent --no-audit --no-fund --prefix build/npm openai ajv ajv-formats >/dev/null 2>&1 ||
        echo "deps: npm install openai ajv ajv-formats failed (offline?); the Node client tests will skip"
fi
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# Debian's prometheus package enables and starts a Prometheus server on :9090. Only promtool is
# wanted: while it installs, a policy-rc.d (invoke-rc.d's veto, exit 101 = "forbidden") keeps
# the service from starting, and it is disabled afterwards, so that a test machine does not gain
# a server (and a busy port) from make test. An existing policy-rc.d is left as it is.
prometheus=0
case " $missing " in *" prometheus "*) prometheus=1 ;; esac
# haproxy's package starts a load balancer on :80 the same way; the tests run their own
haproxy=0
case " $missing " in *" haproxy "*) haproxy=1 ;; esac
policy=/usr/sbin/policy-rc.d
own_policy=0
log=$(mktemp /tmp/tandem-deps.XXXXXX)
cleanup() {
    [ $own_policy = 1 ] && $SUDO rm -f "$policy"
    rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ $((prometheus + haproxy)) -gt 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# tools/deps.sh: no service starts while tandem installs its tools\nexit 101\n' |
        $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    own_policy=1
fi

apt() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq -o Dpkg::Use-Pty=0 "$@" >>"$log" 2>&1; }
apt update || true # an offline machine may still have what it needs in its package cache
# shellcheck disable=SC2086 # $missing is a list of package names
if ! apt install -y --no-install-recommends $missing; then
    echo "deps: apt-get install failed; its output:" >&2
    cat "$log" >&2
    exit 1
fi
if [ $prometheus = 1 ] && command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now prometheus.service >>"$log" 2>&1 ||
        $SUDO systemctl disable prometheus.service >>"$log" 2>&1 || true
    echo "deps: prometheus is installed for promtool only; its service is disabled"
fi
if [ $haproxy = 1 ] && command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now haproxy.service >>"$log" 2>&1 ||
        $SUDO systemctl disable haproxy.service >>"$log" 2>&1 || true
fi
echo "deps: done"
