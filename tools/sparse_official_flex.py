#!/usr/bin/env python3
"""Records the official FlexPrefill block selection as test data (run once, on a machine with
PyTorch, Triton and a CUDA GPU: the official code pools the keys with a Triton kernel).

    python3 tools/sparse_official_flex.py OFFICIAL_FILE OUT.json
    python3 tools/sparse_official_flex.py --cpu OFFICIAL_FILE OUT.json   (see below)

OFFICIAL_FILE is bytedance/FlexPrefill@a24b27bf117f's flex_prefill/ops/flex_prefill_attention.py
(not in this repository; fetch it and keep it in an ignored folder). Its get_active_blocks is
called as flex_prefill_attention calls it (budgets in blocks: ceil(tokens / block_size), None ->
1 token and 2147483647 tokens). It is loaded by bench/flex_official.py's load_official, which
shims two imports the function does not use where the package is missing:
transformers.utils.is_flash_attn_2_available and einops.rearrange (the one pattern it uses). The module keeps its causal mask in a
global built by its first call; it is reset before each call (as a fresh process would have it),
since a mask built for a smaller block size would not fit a larger one.

The inputs are generated here from the same 32-bit LCG as tests/cpu/test_flex_official.c, so only
the block sets are stored: q (n, H, D) then k (n, HK, D), uniform in [-1, 1), float32, then
per head h (kv head g(h) = h // (H / HK), or h % HK with gqa_interleave, as the official einsum
views map them) and per token t, in increasing h:
  kind 1 "vertical"   every head as type 1;
  kind 2 "mixed"      head type h % 3: 0 random (nothing added), 1 vertical, 2 slash;
  type 1 (vertical):  q[t, h, h % D] += 8; k[t, g(h), h % D] += 8 where t < 4 or t % 97 == 0
                      (heavy key columns: sinks and vertical lines);
  type 2 (slash):     s = (t // 64) % 8; q[t, h, (h + 1 + s) % D] += 6; k[t, g(h), (h + 1 + s) % D]
                      += 6 (a query attends to the keys of its own segment class: diagonal
                      stripes every 512 tokens, a slash pattern);
then, for dtype bfloat16, q and k rounded to bfloat16 (round to nearest even).
float32 cases run with TF32 off (torch's default for matmuls, set explicitly here).

--cpu runs the official function on the CPU with its Triton pooling kernel replaced by a torch
average pool over each block's true length (triton itself stubbed): only to check this script on
a machine without a GPU. Files written that way say so in "device" and "shims"; the test data
in tests/data/sparse/ is recorded on the GPU.
"""
import json
import math
import os
import sys
import types

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from flex_official import load_official, torch_bnhd_avg_pool  # noqa: E402

SOURCE = ("bytedance/FlexPrefill@a24b27bf117fd6ad4ba34b0db82c598e7786fd59 "
          "flex_prefill/ops/flex_prefill_attention.py get_active_blocks")

# n, H, HK, D, block, gamma, tau, min_budget, max_budget (tokens; None: the official None),
# kind, seed, dtype, gqa_interleave
CASES = [
    (1000, 4, 2, 32, 128, 0.9, 0.1, None, None, 0, 101, "float32", False),
    (1500, 4, 2, 64, 128, 0.9, 0.1, 256, None, 1, 102, "float32", False),
    (2200, 6, 2, 64, 128, 0.95, 0.1, 1024, None, 2, 103, "float32", False),
    (1700, 6, 3, 32, 64, 0.8, 0.2, 128, 512, 2, 104, "float32", False),
    (3000, 6, 2, 64, 128, 0.9, 0.0, None, None, 2, 105, "float32", False),
    (2500, 6, 2, 64, 128, 0.9, 0.5, 512, None, 2, 106, "float32", False),
    (2300, 6, 3, 64, 128, 0.85, 0.1, 256, 1024, 2, 107, "float32", True),
    (2000, 6, 2, 128, 128, 0.9, 0.1, 1024, None, 2, 108, "bfloat16", False),
    (6000, 3, 1, 64, 128, 0.9, 0.1, 1024, None, 2, 109, "float32", False),
    (4000, 4, 2, 64, 128, 0.9, 0.0, None, None, 1, 110, "float32", False),
]


def lcg_floats(seed, count):
    """count values of s = s * 1664525 + 1013904223 (mod 2^32), each (s >> 8) / 2^24 * 2 - 1,
    and the state after them; vectorized by jumping ahead in strides of M."""
    M = 4096
    A = np.empty(M, dtype=np.uint64)
    C = np.empty(M, dtype=np.uint64)
    a, c = 1, 0
    for j in range(M):  # s_{j+1} = A[j] s_0 + C[j]
        a, c = (a * 1664525) & 0xFFFFFFFF, (c * 1664525 + 1013904223) & 0xFFFFFFFF
        A[j], C[j] = a, c
    out = np.empty(count, dtype=np.uint64)
    s = seed & 0xFFFFFFFF
    mask = np.uint64(0xFFFFFFFF)
    for base in range(0, count, M):
        m = min(M, count - base)
        blk = (A[:m] * np.uint64(s) + C[:m]) & mask
        out[base:base + m] = blk
        s = int(blk[-1])
    vals = (out >> np.uint64(8)).astype(np.float64) / 16777216.0 * 2 - 1
    return vals, s


def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return u.astype(np.uint32).view(np.float32)


def make_qk(n, H, HK, D, seed, kind, dtype, interleave):
    q, s = lcg_floats(seed, n * H * D)
    k, _ = lcg_floats(s, n * HK * D)
    q = q.astype(np.float32).reshape(n, H, D)
    k = k.astype(np.float32).reshape(n, HK, D)
    t = np.arange(n)
    heavy = (t < 4) | (t % 97 == 0)
    seg = (t // 64) % 8
    for h in range(H):
        g = h % HK if interleave else h // (H // HK)
        typ = 1 if kind == 1 else (h % 3 if kind == 2 else 0)
        if typ == 1:
            q[:, h, h % D] += np.float32(8.0)
            k[heavy, g, h % D] += np.float32(8.0)
        elif typ == 2:
            for sv in range(8):
                rows = seg == sv
                dim = (h + 1 + sv) % D
                q[rows, h, dim] += np.float32(6.0)
                k[rows, g, dim] += np.float32(6.0)
    if dtype == "bfloat16":
        q, k = bf16_round(q), bf16_round(k)
    return q, k


def load(path, cpu):
    """bench/flex_official.py's loader (its shims for transformers.utils and einops); --cpu stubs
    triton first and swaps the Triton pooling for the torch average pool."""
    shims = []
    if cpu:
        tr = types.ModuleType("triton")
        tl = types.ModuleType("triton.language")
        tl.constexpr = object
        tr.language = tl
        tr.jit = lambda f: f
        tr.cdiv = lambda a, b: (a + b - 1) // b
        tr.next_power_of_2 = lambda x: 1 << (x - 1).bit_length()
        sys.modules["triton"], sys.modules["triton.language"] = tr, tl
        shims.append("triton stubbed (--cpu)")
    mod, more = load_official(path)
    shims += more
    if cpu:
        mod.triton_bnhd_pool = torch_bnhd_avg_pool
        shims.append("triton_bnhd_pool -> torch average pool (--cpu)")
    return mod, shims


def main():
    args = sys.argv[1:]
    cpu = bool(args) and args[0] == "--cpu"
    if cpu:
        args = args[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    if not os.path.exists(args[0]):
        sys.exit(f"{args[0]}: not found")
    mod, shims = load(args[0], cpu)
    dev = "cpu" if cpu else "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {"source": SOURCE,
           "torch": torch.__version__,
           "device": "cpu (--cpu: not a recording)" if cpu else torch.cuda.get_device_name(0),
           "shims": shims, "cases": []}
    try:
        import triton
        out["triton"] = getattr(triton, "__version__", "?")
    except Exception:
        pass
    for (n, H, HK, D, bs, gamma, tau, min_b, max_b, kind, seed, dtype, il) in CASES:
        q, k = make_qk(n, H, HK, D, seed, kind, dtype, il)
        dt = getattr(torch, dtype)
        qt = torch.from_numpy(q).unsqueeze(0).to(dev, dt).contiguous()
        kt = torch.from_numpy(k).unsqueeze(0).to(dev, dt).contiguous()
        call = (qt, kt, kt, bs, gamma, math.ceil((1 if min_b is None else min_b) / bs),
                math.ceil((2147483647 if max_b is None else max_b) / bs), tau, il)
        mod.causal_mask = None
        with torch.no_grad():
            try:
                idx = mod.get_active_blocks(*call)
            except Exception as e:  # noqa: BLE001
                # only if the official Triton pooling kernel fails on this Triton: once more with
                # the torch average pool, said in "shims"
                if mod.triton_bnhd_pool is torch_bnhd_avg_pool:
                    raise
                print(f"official get_active_blocks failed ({type(e).__name__}: {e}); "
                      "retrying with a torch average pool", file=sys.stderr)
                mod.triton_bnhd_pool = torch_bnhd_avg_pool
                shims.append("triton_bnhd_pool -> torch average pool (the Triton kernel failed)")
                mod.causal_mask = None
                idx = mod.get_active_blocks(*call)
        nb = (n + bs - 1) // bs
        rows = []
        above = 0
        for h in range(H):
            per = [[] for _ in range(nb)]
            for x in idx[0][h].tolist():
                per[x // nb].append(x % nb)
                above += x % nb > x // nb
            rows.append([sorted(r) for r in per])
        out["cases"].append({"n": n, "heads": H, "kv_heads": HK, "head_dim": D,
                             "block_size": bs, "gamma": gamma, "tau": tau,
                             "min_budget": min_b or 0, "max_budget": max_b or 0,
                             "kind": kind, "seed": seed, "dtype": dtype,
                             "gqa_interleave": int(il), "rows": rows})
        kept = sum(len([c for c in r if c <= i]) for per in rows for i, r in enumerate(per))
        print(f"n {n} H {H}/{HK} D {D} B {bs} gamma {gamma} tau {tau} kind {kind} {dtype}"
              f"{' interleave' if il else ''}: density {kept / (H * nb * (nb + 1) / 2):.4f}"
              f"{f', {above} blocks above the diagonal' if above else ''}", flush=True)
    with open(args[1], "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
