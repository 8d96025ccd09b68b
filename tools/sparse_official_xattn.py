#!/usr/bin/env python3
"""Records the official XAttention block selection as test data (run once, on a machine with
PyTorch and a CUDA GPU; the official code moves its tensors to "cuda").

    python3 tools/sparse_official_xattn.py OFFICIAL_DIR OUT.json

OFFICIAL_DIR holds mit-han-lab/x-attention@e37988770b9d's xattn/src/Xattention.py and
xattn/src/utils.py (not in this repository). Their Triton kernels and the block-sparse attention
library are not needed by xattn_estimate's torch path (use_triton=False: the path the official
code itself takes on GPUs whose name lacks "100", the H200 among them), so those two imports are
stubbed. The inputs are generated here from the same 32-bit LCG as tests/cpu/test_xattn_official.c
(so only the masks are stored): q, then k, then v, uniform in [-1, 1), float32; "structured"
adds 4 to q[t, h, h % D] and 3 to k[t, g, h % D] for the heads h of group g at t < 4 or t % 97 == 0.
GQA as the official callers do it: each query head h uses kv head h // (H / HK) (repeat_kv).
"""
import json
import math
import sys
import types

import numpy as np
import torch


def lcg_stream(seed, count):
    out = np.empty(count, dtype=np.float64)
    s = seed
    for i in range(count):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = (s >> 8) / 16777216.0 * 2 - 1
    return out, s


def make_qk(n, H, HK, D, seed, structured):
    q, s = lcg_stream(seed, n * H * D)
    k, s = lcg_stream(s, n * HK * D)
    q = q.astype(np.float32).reshape(n, H, D)
    k = k.astype(np.float32).reshape(n, HK, D)
    if structured:
        G = H // HK
        for h in range(H):
            q[:, h, h % D] += np.float32(4.0)
        heavy = [t for t in range(n) if t < 4 or t % 97 == 0]
        for g in range(HK):
            for h in range(g * G, (g + 1) * G):
                k[heavy, g, h % D] += np.float32(3.0)
    return q, k


def chunk_size_of(k_len):
    # Xattention_prefill's choice for chunk_size=None
    p = 1 << (k_len - 1).bit_length()
    return int(max(min(max(2048, p), 128 * 1024 * 2048 // p), 2048))


CASES = [
    # n, q_from, H, HK, D, B, S, threshold, structured, seed, dtype, chunk_size (None: Xattention_prefill's)
    (1000, 0, 4, 2, 32, 64, 8, 0.9, 0, 11, "float32", None),
    (1000, 0, 4, 2, 32, 64, 8, 0.8, 1, 12, "float32", None),
    (2000, 0, 4, 1, 64, 128, 8, 0.9, 1, 13, "float32", None),
    (4000, 0, 2, 2, 128, 128, 16, 0.95, 1, 14, "float32", None),
    (515, 0, 2, 1, 16, 32, 4, 0.5, 0, 15, "float32", None),
    (3000, 2048, 4, 2, 64, 128, 8, 0.9, 1, 16, "float32", 1024),  # a chunk after 2048 cached
    (2000, 0, 4, 2, 64, 128, 8, 0.9, 1, 17, "bfloat16", None),
    (8000, 0, 2, 1, 64, 128, 8, 0.9, 1, 18, "float32", None),
]


def main():
    sys.path.insert(0, sys.argv[1])
    kern = types.ModuleType("xattn.src.kernels")
    kern.flat_group_gemm = kern.softmax_fuse_block_sum = kern.flat_group_gemm_fuse_reshape = None
    sys.modules["xattn.src.kernels"] = kern
    bsa = types.ModuleType("block_sparse_attn")
    bsa.block_sparse_attn_func = None
    sys.modules["block_sparse_attn"] = bsa
    from xattn.src.Xattention import xattn_estimate

    out = {"source": "mit-han-lab/x-attention@e37988770b9d xattn_estimate, use_triton=False",
           "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cases": []}
    for (n, q_from, H, HK, D, B, S, thr, structured, seed, dtype, cs) in CASES:
        q, k = make_qk(n, H, HK, D, seed, structured)
        G = H // HK
        dt = getattr(torch, dtype)
        qt = torch.from_numpy(q[q_from:]).permute(1, 0, 2).unsqueeze(0).to("cuda", dt).contiguous()
        kt = torch.from_numpy(np.repeat(k, G, axis=1)).permute(1, 0, 2).unsqueeze(0).to("cuda", dt).contiguous()
        chunk = cs if cs else chunk_size_of(n)
        _, masks = xattn_estimate(qt, kt, block_size=B, stride=S, norm=1, threshold=thr,
                                  chunk_size=chunk, select_mode="inverse", use_triton=False,
                                  causal=True)
        nb = (n + B - 1) // B
        q0 = q_from // B
        m = masks[0].cpu()
        rows = []
        for h in range(H):
            per = []
            for r in range(q0, nb):
                row = m[h, r - q0, :nb]  # mask row i is the query tensor's block i
                per.append([int(j) for j in torch.nonzero(row).flatten().tolist()])
            rows.append(per)
        out["cases"].append({"n": n, "q_from": q_from, "heads": H, "kv_heads": HK, "head_dim": D,
                             "block_size": B, "stride": S, "threshold": thr,
                             "structured": structured, "seed": seed, "dtype": dtype,
                             "chunk_size": chunk, "rows": rows})
        dens = sum(len(r) for per in rows for r in per) / (H * sum(r + 1 for r in range(q0, nb)))
        print(f"n {n} q_from {q_from} B {B} S {S} thr {thr} {dtype}: density {dens:.4f}", flush=True)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
