#!/bin/sh
# The Kubernetes manifest (deploy/k8s/tandem.yaml) checked without a cluster by
# tools/check_k8s.py: the InferencePool against the upstream CRD's schema (python3-jsonschema),
# the ConfigMap, Deployment and Service against the fields the API requires, and the wiring
# between them and the daemon's configuration (`tandem serve --print-config` reads tandem.conf).
# Then the checker is shown to fail: copies of the manifest with one fault each must be refused
# (among them: a startup probe on /health, no GPU or card requested, a per-address connection
# limit behind the gateway, a pod name too long to name its lent devices).
BUILD=${BUILD:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! python3 -c 'import yaml, jsonschema' 2>/dev/null; then
    echo "not ok k8s_tools # python3-yaml and python3-jsonschema are needed (make deps)"
    exit 0
fi
python3 tools/check_k8s.py deploy/k8s/tandem.yaml --tandem "$BUILD/tandem"

# mutant NAME CHECK SED: the manifest with SED applied must fail CHECK
mutant() {
    sed "$3" deploy/k8s/tandem.yaml >"$T/m.yaml"
    if cmp -s "$T/m.yaml" deploy/k8s/tandem.yaml; then
        echo "not ok k8s_catches_$1 # the edit changed nothing"
    elif python3 tools/check_k8s.py "$T/m.yaml" --tandem "$BUILD/tandem" >"$T/out" 2>&1 &&
        false; then
        :
    elif grep -q "^not ok $2" "$T/out"; then
        echo "ok k8s_catches_$1"
    else
        echo "not ok k8s_catches_$1 # $2 passed a manifest with $1"
    fi
}
mutant pool_without_ports k8s_inferencepool_schema '/^  targetPorts:$/,/number: 8080/d'
mutant pool_port_string k8s_inferencepool_schema 's/^    - number: 8080$/    - number: "8080"/'
mutant pool_bad_failure_mode k8s_inferencepool_schema 's/failureMode: FailClose/failureMode: Sometimes/'
mutant readiness_on_health k8s_wiring '/readinessProbe:/,/path:/s|path: /ready|path: /health|'
mutant pool_selects_nothing k8s_wiring '/^kind: InferencePool/,$s|app.kubernetes.io/name: tandem$|app.kubernetes.io/name: other|'
mutant unknown_config_key k8s_wiring 's/^    drain_timeout = 25$/    drain_timeout = 25\n    no_such_key = 1/'
mutant admin_on_loopback k8s_wiring 's/^    admin_host = 0.0.0.0$/    admin_host = 127.0.0.1/'
mutant service_port_unknown k8s_wiring 's/targetPort: peers/targetPort: nope/'
mutant startup_on_health k8s_wiring '/startupProbe:/,/path:/s|path: /ready|path: /health|'
mutant no_gpu_requested k8s_wiring '/nvidia.com\/gpu: 1/d'
mutant no_card_requested k8s_wiring '/amd.com\/xilinx_u280/d'
mutant per_address_limit k8s_wiring 's/^    max_connections_per_ip = 0$/    max_connections_per_ip = 128/'
mutant pod_name_too_long k8s_wiring '/^kind: Deployment/,/^spec:/s/^  name: tandem$/  name: tandem-inference-nodes/'
mutant lent_name_too_long k8s_wiring 's/^    peer_devices =$/    peer_devices = fpga-emu:0/'
