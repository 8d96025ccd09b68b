#!/bin/sh
# `tandem sparse-index` against the official XAttention's and FlexPrefill's recorded block sets
# (tests/data/sparse/xattn_official.json, tools/sparse_official_xattn.py on the H200; FlexPrefill
# below): the same
# inputs are regenerated here (the recording's LCG), written as float32 files, indexed by the
# command, and each case's block sets must agree with the official ones at Jaccard >= 0.99
# (the unit test xattn_index_matches_recorded_official_outputs checks that every difference sits
# at the threshold edge). Bad flags exit 2. DEVICE=cuda runs the index on the GPU
# (gpu/gpu_xattn.h; inputs rounded to bf16 on upload, so its sets may differ from the official
# float32 ones at more threshold edges: the same Jaccard >= 0.99 holds; tests/gpu/README.md).
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cpu}
T=$(mktemp -d /tmp/tandem-sidx.XXXXXX)
trap 'rm -rf "$T"' EXIT
python3 - "$BUILD/tandem" "$T" "$DEVICE" <<'PY'
import json, struct, subprocess, sys
tandem, tmp, device = sys.argv[1], sys.argv[2], sys.argv[3]
d = json.load(open("tests/data/sparse/xattn_official.json"))

def lcg(seed, count):
    out, s = [], seed
    for _ in range(count):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append((s >> 8) / 16777216.0 * 2 - 1)
    return out, s

def compare(name, cmd, rows, B, q0):
    """Runs cmd (writing {tmp}/out.json) and prints ok when its block sets agree with the
    recorded rows (official blocks above the diagonal are not counted) at Jaccard >= 0.99."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(f"not ok {name} # {r.stderr.strip()[:200]}")
        return
    ours = json.load(open(f"{tmp}/out.json"))
    inter = uni = 0
    for h in range(len(rows)):
        for row, (a, b) in enumerate(zip(ours["heads"][h], rows[h])):
            b = [j for j in b if j <= q0 + row]
            inter += len(set(a) & set(b))
            uni += len(set(a) | set(b))
    jac = inter / uni if uni else 1.0
    ok = ours["block_size"] == B and ours["q_block0"] == q0 and len(ours["heads"]) == len(rows) and jac >= 0.99
    print(f"{'ok' if ok else 'not ok'} {name} # jaccard {jac:.5f}")

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def bf16(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", u))[0]

for i, c in enumerate(d["cases"]):
    n, P, H, HK, D = c["n"], c["q_from"], c["heads"], c["kv_heads"], c["head_dim"]
    q, s = lcg(c["seed"], n * H * D)
    k, _ = lcg(s, n * HK * D)
    q = [f32(v) for v in q]
    k = [f32(v) for v in k]
    if c["structured"]:
        G = H // HK
        for t in range(n):
            for h in range(H):
                q[(t * H + h) * D + h % D] = f32(q[(t * H + h) * D + h % D] + 4.0)
            if t < 4 or t % 97 == 0:
                for g in range(HK):
                    for h in range(g * G, (g + 1) * G):
                        j = (t * HK + g) * D + h % D
                        k[j] = f32(k[j] + 3.0)
    if c["dtype"] == "bfloat16":
        q = [bf16(v) for v in q]
        k = [bf16(v) for v in k]
    open(f"{tmp}/q", "wb").write(struct.pack(f"<{(n - P) * H * D}f", *q[P * H * D:]))
    open(f"{tmp}/k", "wb").write(struct.pack(f"<{n * HK * D}f", *k))
    cmd = [tandem, "sparse-index", "--mode", "xattention", "--q", f"{tmp}/q", "--k", f"{tmp}/k",
           "--heads", str(H), "--kv-heads", str(HK), "--head-dim", str(D), "--tokens", str(n),
           "--q-from", str(P), "--xattention-threshold", str(c["threshold"]),
           "--xattention-stride", str(c["stride"]), "--xattention-block-size", str(c["block_size"]),
           "--out", f"{tmp}/out.json", "--threads", "2", "--device", device]
    if P == 0:
        cmd.append("--official-chunking")
    name = f"sparse_index_official_{i}_n{n}_{c['dtype']}" + ("" if device == "cpu" else "_" + device)
    compare(name, cmd, c["rows"], c["block_size"], P // c["block_size"])

# FlexPrefill: the recorded official get_active_blocks outputs (tests/data/sparse/
# flex_official.json, tools/sparse_official_flex.py on the H200): cases 0 (random), 1 (vertical
# heads) and 5 (tau 0.5: every head query-aware), ~2M input values so that this stays a few
# seconds (the command's flags express block 128 and kv head h / (H / HK) only); the inputs
# regenerated as tools/sparse_official_flex.py and tests/cpu/test_flex_official.c make them (the
# unit test checks every case and that any difference sits at the coverage threshold's edge).
# Always --device cpu: the GPU's FlexPrefill index is not behind sparse-index.
from array import array
d = json.load(open("tests/data/sparse/flex_official.json"))

def lcg_f32(seed, count):
    out, s = array("f", bytes(4 * count)), seed
    for i in range(count):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = (s >> 8) / 16777216.0 * 2 - 1  # stored as float32, as the C cast
    return out, s

def bf16_all(a):
    u = array("I", a.tobytes())
    for i in range(len(u)):
        x = u[i]
        u[i] = (x + 0x7FFF + ((x >> 16) & 1)) & 0xFFFF0000
    return array("f", u.tobytes())

for i in (0, 1, 5):
    c = d["cases"][i]
    n, H, HK, D = c["n"], c["heads"], c["kv_heads"], c["head_dim"]
    assert c["block_size"] == 128 and not c["gqa_interleave"]
    q, s = lcg_f32(c["seed"], n * H * D)
    k, _ = lcg_f32(s, n * HK * D)
    for h in range(H):  # float32 adds: each sum is exact in double, then rounded on store
        g = h // (H // HK)
        typ = 1 if c["kind"] == 1 else (h % 3 if c["kind"] == 2 else 0)
        for t in range(n if typ else 0):
            dim = h % D if typ == 1 else (h + 1 + (t // 64) % 8) % D
            a = 8.0 if typ == 1 else 6.0
            q[(t * H + h) * D + dim] += a
            if typ == 2 or t < 4 or t % 97 == 0:
                k[(t * HK + g) * D + dim] += a
    if c["dtype"] == "bfloat16":
        q, k = bf16_all(q), bf16_all(k)
    open(f"{tmp}/q", "wb").write(q.tobytes())
    open(f"{tmp}/k", "wb").write(k.tobytes())
    cmd = [tandem, "sparse-index", "--mode", "flexprefill", "--q", f"{tmp}/q", "--k", f"{tmp}/k",
           "--heads", str(H), "--kv-heads", str(HK), "--head-dim", str(D), "--tokens", str(n),
           "--gamma", repr(c["gamma"]), "--tau", repr(c["tau"]),
           "--min-budget", str(c["min_budget"]), "--max-budget", str(c["max_budget"]),
           "--out", f"{tmp}/out.json", "--threads", "2", "--device", "cpu"]
    compare(f"sparse_index_flex_official_{i}_n{n}_{c['dtype']}", cmd, c["rows"], 128, 0)
PY
"$BUILD/tandem" sparse-index --mode sliding --q x --k x --heads 1 --kv-heads 1 --head-dim 1 --tokens 1 --out x >/dev/null 2>&1
[ $? = 2 ] && echo "ok sparse_index_bad_mode" || echo "not ok sparse_index_bad_mode"
head -c 12 /dev/zero > "$T/q"
"$BUILD/tandem" sparse-index --mode xattention --q "$T/q" --k "$T/q" --heads 1 --kv-heads 1 --head-dim 4 --tokens 2 --out "$T/o" >/dev/null 2>&1
[ $? = 1 ] && echo "ok sparse_index_short_file" || echo "not ok sparse_index_short_file"
