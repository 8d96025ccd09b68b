# Builds the issue-5 table from one device run's logs: python3 summary.py OUT_DIR MODEL_DIR
# Floors (BENCHMARKS.md, "GPU backend"): prefill = GEMM FLOPs / measured cuBLAS rate + causal attention
# FLOPs / measured attention rate (ours, and torch SDPA's best backend); decode = (weights + KV
# bytes read per token) / measured device copy bandwidth (read + write counted, as limits.cu does).
# Prefill TTFT back to back and, where bench.jsonl has bench_gpu --idle rows, after idle.
import json, re, sys, os
out, mdir = sys.argv[1], sys.argv[2]

def jl(name):
    rows = []
    p = os.path.join(out, name)
    if not os.path.exists(p): return rows
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            try: rows.append(json.loads(line))
            except ValueError: pass
    return rows

lim = open(os.path.join(out, "limits.txt")).read() if os.path.exists(os.path.join(out, "limits.txt")) else ""
gemm = max([float(x) for x in re.findall(r"bf16 gemm n=\d+: ([\d.]+) TFLOP/s", lim)] or [0])
d2d = float((re.findall(r"d2d copy: ([\d.]+) GB/s", lim) or [0])[0])
d2h = float((re.findall(r"pinned d2h: ([\d.]+) GB/s", lim) or [0])[0])
# gpu/bench/gemm_shapes (phase gemm): the square GEMM held for ~1 s, engine's call and best cublasLt
sus = [float(a) for a in re.findall(r"\| square 8192 \| 8192 \| 8192 \| ([\d.]+) \|", lim)]
gemm_sus = max(sus) if sus else 0
cfg = json.load(open(os.path.join(mdir, "config.json")))
H, L, nh, nkv = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd, I, V = cfg.get("head_dim", H // nh), cfg["intermediate_size"], cfg["vocab_size"]
qd, kvd = nh * hd, nkv * hd
per_layer = H * (qd + 2 * kvd) + qd * H + 3 * I * H
wbytes = 2 * (L * per_layer + V * H) + 4 * H * (2 * L + 1)
kv_tok = 2 * L * kvd * 2
allbench = jl("bench.jsonl")
bench = [r for r in allbench if "switch" not in r]
ablation = [r for r in allbench if "switch" in r]
hf = (jl("hf_peer.txt") or [{}])[-1]
sdpa = {}
for r in jl("sdpa.txt"):
    if "tflops" in r: sdpa[r["tokens"]] = max(sdpa.get(r["tokens"], 0), r["tflops"])
kernels = {}
for r in bench:
    if r.get("bench") == "attention": kernels.setdefault(r["kernel"], {})[r["tokens"]] = r["tflops"]
att = kernels.get("wgmma") or kernels.get("mma.sync-4w", {}) # the engine's default on sm_90 (else mma.sync)

def att_rate(table, P):
    if not table: return 0
    k = min(table, key=lambda t: abs(t - P))
    return table[k]

print(f"ceilings: cuBLAS bf16 GEMM {gemm:.0f} TFLOP/s (sustained ~1 s: {gemm_sus:.0f}), device copy {d2d:.0f} GB/s, pinned D2H {d2h:.1f} GB/s")
print()
# TTFT of the same prompt reaching an idle GPU (bench_gpu --idle): the conditions of the burst
# GEMM ceiling (limits: a short GEMM after idle); the main column is back to back (sustained)
idle = {r["tokens"]: r for r in bench if r.get("bench") == "prefill" and r.get("idle_ms", 0) > 0}
print("| prefill tokens | tandem TTFT ms | transformers ms | floor ms (our attn rate) | floor ms (SDPA rate) | tandem / floor(ours) | tandem / floor(SDPA) | floor ms (sustained GEMM rate, our attn) | tandem / that | TTFT after idle ms | that / floor(ours) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in bench:
    if r.get("bench") != "prefill" or r.get("idle_ms", 0) > 0: continue
    P = r["tokens"]
    gf = 2.0 * P * L * per_layer + 2.0 * V * H
    af = 4.0 * P * P / 2 * hd * nh * L
    nan = float("nan") # a ceiling this run did not measure (no limits / gemm phase): no floor
    f_o = (gf / (gemm * 1e12) + (af / (att_rate(att, P) * 1e12) if att else 0)) * 1e3 if gemm else nan
    f_s = (gf / (gemm * 1e12) + (af / (att_rate(sdpa, P) * 1e12) if sdpa else 0)) * 1e3 if gemm else nan
    f_u = (gf / (gemm_sus * 1e12) + (af / (att_rate(att, P) * 1e12) if att else 0)) * 1e3 if gemm_sus else nan
    hfm = hf.get(f"prefill_{P}_ms", nan)
    ti = idle[P]["ttft_ms"] if P in idle else nan
    print(f"| {P} | {r['ttft_ms']:.1f} | {hfm} | {f_o:.1f} | {f_s:.1f} | {r['ttft_ms']/f_o:.2f} | {r['ttft_ms']/f_s:.2f} | {f_u:.1f} | {r['ttft_ms']/f_u:.2f} | {ti:.1f} | {ti/f_o:.2f} |")
print()
names = sorted(kernels)
print("| attention tokens | " + " | ".join(f"{k} TFLOP/s" for k in names) + " | SDPA best TFLOP/s |")
print("|---|" + "---|" * (len(names) + 1))
for T in sorted(att): print(f"| {T} | " + " | ".join(str(kernels[k].get(T, 'n/a')) for k in names) + f" | {sdpa.get(T, 'n/a')} |")
print()
print("| decode after | tandem ms/token | floor ms (bytes / copy bw) | ratio | transformers ms/token |")
print("|---|---|---|---|---|")
for r in bench:
    if r.get("bench") != "decode": continue
    C = r["context"]
    fl = (wbytes + C * kv_tok) / (d2d * 1e9) * 1e3 if d2d else float("nan")
    print(f"| {C} | {r['ms_per_token']:.3f} | {fl:.3f} | {r['ms_per_token']/fl:.3f} | {hf.get(f'decode_after_{C}_ms_per_tok', 'n/a')} |")
print()
print("| batch | context | ms/step | tokens/s |")
print("|---|---|---|---|")
for r in bench:
    if r.get("bench") == "batch": print(f"| {r['batch']} | {r['context']} | {r['ms_per_step']:.3f} | {r['tok_s']:.0f} |")
print()
print("| export tokens | TTFT ms | TTFT + int8 export ms | added | KV bytes | copy GB/s | / pinned D2H |")
print("|---|---|---|---|---|---|---|")
for r in bench:
    if r.get("bench") != "export": continue
    share = "%.0f%%" % (r["copy_gb_s"] / d2h * 100) if d2h else "n/a"
    print(f"| {r['tokens']} | {r['ttft_ms']:.1f} | {r['ttft_export_ms']:.1f} | {r['overhead_pct']:.2f}% | {r['bytes']/1e6:.0f} MB | {r['copy_gb_s']:.1f} | {share} |")
print()
if ablation:
    print("| switch | prefill 4096 ms | prefill 32768 ms | decode ms/token (1K) | batch 8 ms/step |")
    print("|---|---|---|---|---|")
    base = {("prefill", r.get("tokens")): r.get("ttft_ms") for r in bench
            if r.get("bench") == "prefill" and not r.get("idle_ms")} # back to back, as the ablation
    dec = [r for r in bench if r.get("bench") == "decode" and r["context"] == 1024]
    b8 = [r for r in bench if r.get("bench") == "batch" and r["batch"] == 8]
    print(f"| (default) | {base.get(('prefill', 4096), 'n/a')} | {base.get(('prefill', 32768), 'n/a')} | "
          f"{dec[0]['ms_per_token'] if dec else 'n/a'} | {b8[0]['ms_per_step'] if b8 else 'n/a'} |")
    for sw in sorted(set(r["switch"] for r in ablation)):
        rs = [r for r in ablation if r["switch"] == sw]
        g = lambda kind, key, val, field: next((r[field] for r in rs if r.get("bench") == kind and r.get(key) == val), "n/a")
        print(f"| {sw} | {g('prefill', 'tokens', 4096, 'ttft_ms')} | {g('prefill', 'tokens', 32768, 'ttft_ms')} | "
              f"{g('decode', 'context', 1024, 'ms_per_token')} | {g('batch', 'batch', 8, 'ms_per_step')} |")
    print()
for r in jl("eval.jsonl"): print("eval:", json.dumps(r))
