#!/usr/bin/env python3
"""tools/check_k8s.py — checks deploy/k8s/tandem.yaml without a cluster (make test runs it
through tests/e2e/deploy_k8s.sh).

  schema    each InferencePool against the openAPIV3Schema of the upstream CRD
            (deploy/k8s/schema/inferencepools.yaml, from kubernetes-sigs/
            gateway-api-inference-extension; python3-jsonschema; the CRD's CEL rules,
            x-kubernetes-validations, are not evaluated)
  objects   the fields the Kubernetes API requires of a ConfigMap, Deployment (apps/v1) and
            Service (v1) — our own rules, written from the API reference, not its schema: no
            core schema is packaged for Debian and the cluster's own is not reachable here
  wiring    what makes the pieces fit: the Deployment's selector matches its pod labels; the
            Service and the InferencePool select those pods; their ports name container ports;
            the probes are /health (liveness) and /ready (startup, readiness: /health answers
            200 while the model loads) on declared ports; the ConfigMap's tandem.conf parses
            with `tandem serve --print-config`'s rules (keys it knows), puts the API on the
            pool's target port and the admin listener on the port Prometheus is told to scrape,
            sets no per-address connection limit (every client comes through the gateway's few
            addresses); the container's limits give it the GPUs (nvidia.com/gpu) and U280 cards
            (an AMD/Xilinx device plugin resource naming a u280 shell) its devices name; and a
            node name taken from the pod's name fits, with the longest lent device, the 31
            characters of a device name among peers
Usage: tools/check_k8s.py [FILE] [--tandem BUILD/tandem]. Prints "ok NAME" / "not ok NAME # why"
lines (tests/run.sh counts them) and exits 1 when any failed."""
import os
import subprocess
import sys
import tempfile

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failures = []


def result(name, problems):
    if problems:
        failures.append(name)
        print(f"not ok {name} # " + "; ".join(problems))
    else:
        print(f"ok {name}")


def need(obj, path, typ, problems, where):
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            problems.append(f"{where}: missing {path}")
            return None
        cur = cur[p]
    if typ is not None and not isinstance(cur, typ):
        problems.append(f"{where}: {path} is {type(cur).__name__}, not {typ.__name__}")
        return None
    return cur


def check_meta(o, problems, where):
    name = need(o, "metadata.name", str, problems, where)
    if name and (len(name) > 63 or not all(c.islower() or c.isdigit() or c == "-" for c in name)):
        problems.append(f"{where}: metadata.name '{name}' is not a DNS-1123 label")


def check_probe(p, path, ports, problems, where):
    if not isinstance(p, dict):
        problems.append(f"{where}: missing")
        return
    hg = need(p, "httpGet", dict, problems, where)
    if not hg:
        return
    if hg.get("path") != path:
        problems.append(f"{where}: path {hg.get('path')} (want {path})")
    port = hg.get("port")
    if port not in ports:
        problems.append(f"{where}: port {port} is not a container port")
    for k in ("periodSeconds", "failureThreshold", "timeoutSeconds"):
        if k in p and (not isinstance(p[k], int) or p[k] < 1):
            problems.append(f"{where}: {k} must be a positive integer")


def device_indices(spec, kind):
    """The indices of devices `kind` (cuda, fpga) in a comma-separated device list."""
    out = []
    for d in spec.replace(" ", ",").split(","):
        k, _, i = d.partition(":")
        if k == kind:
            out.append(int(i) if i.isdigit() else 0)
    return out


def check_accelerators(eff, c, problems):
    """A device plugin shows a container only what it requests, numbered from 0: cuda:N needs N+1
    GPUs, fpga:N N+1 cards (lent ones included)."""
    limits = (c.get("resources") or {}).get("limits") or {}
    devs = eff.get("devices", "") + "," + eff.get("peer_devices", "")
    gpus = device_indices(devs, "cuda")
    if gpus and int(limits.get("nvidia.com/gpu", 0)) < max(gpus) + 1:
        problems.append(f"devices name cuda:{max(gpus)}: limits need nvidia.com/gpu >= {max(gpus) + 1}")
    cards = device_indices(devs, "fpga")
    have = sum(int(v) for k, v in limits.items()
               if k.startswith(("amd.com/xilinx_u280", "xilinx.com/fpga-xilinx_u280")))
    if cards and have < max(cards) + 1:
        problems.append(f"devices name fpga:{max(cards)}: limits need {max(cards) + 1} U280 card(s) "
                        "(amd.com/xilinx_u280_<shell>-<timestamp>)")


# A Deployment's pods are named <ReplicaSet>-<5 random>, the ReplicaSet <Deployment>-<hash>, the
# pod-template hash a uint32 in at most 10 characters (rand.SafeEncodeString).
POD_SUFFIX = 1 + 10 + 1 + 5
DEVICE_NAME_MAX = 31  # accel_info.name; peer/msg.h PEER_NAME_MAX for the node alone


def check_node_name(eff, dep, c, problems):
    env = {e.get("name"): e for e in c.get("env", [])}
    src = ((env.get("TANDEM_NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
    if src != "metadata.name":
        return
    longest = 0
    for d in eff.get("peer_devices", "").replace(" ", ",").split(","):
        if d:
            k, _, i = d.partition(":")
            longest = max(longest, len(k) if k == "cpu" else len(k) + 1 + len(str(int(i) if i.isdigit() else 0)))
    pod = len(dep["metadata"]["name"]) + POD_SUFFIX
    room = DEVICE_NAME_MAX - (1 + longest if longest else 0)
    if pod > room:
        problems.append(f"TANDEM_NODE_NAME is the pod's name, up to {pod} characters: at most {room} "
                        "fit (31 for a node or device name, less '/' and the longest lent device; "
                        "tandem serve refuses a longer one)")


def main():
    args = sys.argv[1:]
    tandem = None
    if "--tandem" in args:
        i = args.index("--tandem")
        tandem = args[i + 1]
        del args[i:i + 2]
    path = args[0] if args else os.path.join(ROOT, "deploy/k8s/tandem.yaml")
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)

    # ---------------------------------------------------------------- schema
    problems = []
    with open(os.path.join(ROOT, "deploy/k8s/schema/inferencepools.yaml")) as f:
        crd = yaml.safe_load(f)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    pools = by_kind.get("InferencePool", [])
    if not pools:
        problems.append("no InferencePool")
    for p in pools:
        api = p.get("apiVersion", "")
        group, _, version = api.partition("/")
        if group != crd["spec"]["group"] or version not in versions:
            problems.append(f"InferencePool apiVersion {api} is not served by the CRD")
            continue
        schema = versions[version]["schema"]["openAPIV3Schema"]
        v = jsonschema.Draft7Validator(schema)
        for e in sorted(v.iter_errors(p), key=lambda e: list(e.path)):
            problems.append("InferencePool " + "/".join(map(str, e.path)) + ": " + e.message)
    result("k8s_inferencepool_schema", problems)

    # ---------------------------------------------------------------- objects
    problems = []
    for kind, api in (("ConfigMap", "v1"), ("Deployment", "apps/v1"), ("Service", "v1")):
        objs = by_kind.get(kind, [])
        if len(objs) != 1:
            problems.append(f"want one {kind}, found {len(objs)}")
            continue
        if objs[0].get("apiVersion") != api:
            problems.append(f"{kind} apiVersion {objs[0].get('apiVersion')} (want {api})")
        check_meta(objs[0], problems, kind)
    for d in docs:
        if set(d) - {"apiVersion", "kind", "metadata", "spec", "data"}:
            problems.append(f"{d.get('kind')}: unknown top-level fields {sorted(set(d) - {'apiVersion', 'kind', 'metadata', 'spec', 'data'})}")
    result("k8s_objects", problems)
    if problems:
        return

    # ---------------------------------------------------------------- wiring
    problems = []
    dep, svc, cm = by_kind["Deployment"][0], by_kind["Service"][0], by_kind["ConfigMap"][0]
    sel = need(dep, "spec.selector.matchLabels", dict, problems, "Deployment") or {}
    labels = need(dep, "spec.template.metadata.labels", dict, problems, "Deployment") or {}
    if any(labels.get(k) != v for k, v in sel.items()) or not sel:
        problems.append("Deployment: selector does not match the pod template's labels")
    containers = need(dep, "spec.template.spec.containers", list, problems, "Deployment") or []
    if len(containers) != 1:
        problems.append("Deployment: want one container")
    c = containers[0] if containers else {}
    for k in ("name", "image"):
        need(c, k, str, problems, "container")
    ports = {}
    for p in c.get("ports", []):
        if not isinstance(p.get("containerPort"), int) or not 1 <= p["containerPort"] <= 65535:
            problems.append(f"container port {p} has no valid containerPort")
            continue
        ports[p["containerPort"]] = p
        if "name" in p:
            ports[p["name"]] = p
    check_probe(c.get("startupProbe"), "/ready", ports, problems, "startupProbe")
    check_probe(c.get("livenessProbe"), "/health", ports, problems, "livenessProbe")
    check_probe(c.get("readinessProbe"), "/ready", ports, problems, "readinessProbe")
    vols = {v.get("name"): v for v in need(dep, "spec.template.spec.volumes", list, problems, "Deployment") or []}
    for m in c.get("volumeMounts", []):
        if m.get("name") not in vols:
            problems.append(f"volumeMount {m.get('name')} has no volume")
    cmref = [v["configMap"]["name"] for v in vols.values() if "configMap" in v]
    if cm["metadata"]["name"] not in cmref:
        problems.append("the ConfigMap is not mounted")
    ssel = need(svc, "spec.selector", dict, problems, "Service") or {}
    if any(labels.get(k) != v for k, v in ssel.items()) or not ssel:
        problems.append("Service: selector does not select the pods")
    for p in need(svc, "spec.ports", list, problems, "Service") or []:
        if p.get("targetPort") not in ports:
            problems.append(f"Service port {p.get('name')}: targetPort {p.get('targetPort')} is not a container port")
    pool = by_kind["InferencePool"][0]
    pspec = pool.get("spec") or {}
    psel = (pspec.get("selector") or {}).get("matchLabels", {})
    if any(labels.get(k) != v for k, v in psel.items()) or not psel:
        problems.append("InferencePool: selector does not select the pods")
    pool_ports = [tp.get("number") for tp in pspec.get("targetPorts") or [] if isinstance(tp, dict)]
    for n in pool_ports:
        if n not in ports:
            problems.append(f"InferencePool targetPort {n} is not a container port")
    conf = (cm.get("data") or {}).get("tandem.conf")
    if not isinstance(conf, str):
        problems.append("ConfigMap: no data[tandem.conf]")
        conf = None
    if conf is not None and tandem:
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(conf)
        try:
            r = subprocess.run([tandem, "serve", "--config", f.name, "--print-config"],
                               capture_output=True, text=True, timeout=30)
        finally:
            os.unlink(f.name)
        if r.returncode != 0:
            problems.append("tandem.conf: " + (r.stderr.strip() or r.stdout.strip())[:300])
        else:
            eff = {}
            for line in r.stdout.splitlines():
                if "=" in line and not line.startswith("#"):
                    k, _, v = line.partition("=")
                    eff[k.strip()] = v.strip().strip('"')
            if int(eff.get("port", 0)) not in pool_ports:
                problems.append(f"tandem.conf port {eff.get('port')} is not the pool's target port")
            ann = dep["spec"]["template"]["metadata"].get("annotations", {})
            if ann.get("prometheus.io/port") != eff.get("admin_port"):
                problems.append(f"prometheus.io/port {ann.get('prometheus.io/port')} is not admin_port {eff.get('admin_port')}")
            if eff.get("admin_host") in ("127.0.0.1", "::1", "localhost"):
                problems.append("admin_host is loopback: nothing outside the pod can scrape or probe it")
            for port_key in ("port", "admin_port"):
                if int(eff.get(port_key, 0)) not in ports:
                    problems.append(f"tandem.conf {port_key} {eff.get(port_key)} is not a container port")
            if eff.get("max_connections_per_ip") != "0":
                problems.append(f"max_connections_per_ip {eff.get('max_connections_per_ip')}: behind a "
                                "gateway every client has the gateway's address (set 0)")
            check_accelerators(eff, c, problems)
            check_node_name(eff, dep, c, problems)
    result("k8s_wiring", problems)


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
