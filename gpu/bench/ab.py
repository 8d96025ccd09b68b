# python3 gpu/bench/ab.py AB_JSONL A B — the table of gpu/bench/ab.sh's runs: per measurement, each
# build's value in every round, the mean of each, and B / A (below 1: B faster).
import json, sys
path, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]

def key(r):
    k = r.get("bench")
    if k == "prefill": return ("prefill TTFT ms", r["tokens"], "ttft_ms")
    if k == "decode": return ("decode ms/token after", r["context"], "ms_per_token")
    if k == "batch": return ("batch ms/step, batch", r["batch"], "ms_per_step")
    return None

vals = {}
for r in rows:
    k = key(r)
    if k: vals.setdefault(k, {}).setdefault(r["build"], []).append(r[k[2]])
fmt = lambda v: "%.3f" % v if v < 10 else "%.1f" % v
print(f"| measurement | {a} (rounds) | {b} (rounds) | {a} mean | {b} mean | {b} / {a} |")
print("|---|---|---|---|---|---|")
for k in sorted(vals, key=lambda k: (k[0], k[1])):
    va, vb = vals[k].get(a, []), vals[k].get(b, [])
    if not va or not vb: continue
    ma, mb = sum(va) / len(va), sum(vb) / len(vb)
    print(f"| {k[0]} {k[1]} | {' / '.join(map(fmt, va))} | {' / '.join(map(fmt, vb))} | {fmt(ma)} | {fmt(mb)} | {mb / ma:.3f} |")
