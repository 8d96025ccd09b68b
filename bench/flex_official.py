#!/usr/bin/env python3
"""bench/flex_official.py — our FlexPrefill block sets and timings against the official code.

    python3 bench/flex_official.py jaccard DIR        per-head Jaccard of the official
                                                       get_active_blocks vs our GPU and CPU sets
                                                       on the prompts `flex_gpu_bench check DIR`
                                                       wrote (same bf16 Q/K)
    python3 bench/flex_official.py time DIR [DIR...]  the official index, its block-wise
                                                       attention and the whole call, and torch's
                                                       dense causal SDPA, on prompts written by
                                                       `flex_gpu_bench dump`

The official module (bytedance/FlexPrefill, flex_prefill/ops/flex_prefill_attention.py) is NOT
part of tandem: it is loaded from $FLEX_OFFICIAL (default .gpuwork-flex/flex_prefill_attention.py,
a git-ignored copy; .gpuwork/flex_prefill_attention.py is tried next). Shims, only where a package is missing: transformers.utils (reports no
flash-attn, so the module uses its own Triton dense kernel) and einops.rearrange (the one
pattern the module uses). Prints markdown.
"""
import importlib.util
import math
import os
import statistics
import sys
import types

import torch


def load_official(path=None):
    """The official module (path: FLEX_OFFICIAL's by default) and the shims it took; also used
    by tools/sparse_official_flex.py."""
    path = path or os.environ.get("FLEX_OFFICIAL", ".gpuwork-flex/flex_prefill_attention.py")
    if not os.path.exists(path) and os.path.exists(".gpuwork/flex_prefill_attention.py"):
        path = ".gpuwork/flex_prefill_attention.py"
    if not os.path.exists(path):
        sys.exit(f"flex_official: {path} not found (copy the official file there, see the header)")
    shims = []
    try:
        import transformers.utils

        if not hasattr(transformers.utils, "is_flash_attn_2_available"):
            transformers.utils.is_flash_attn_2_available = lambda: False
            shims.append("transformers.utils.is_flash_attn_2_available")
    except Exception:
        t = types.ModuleType("transformers")
        u = types.ModuleType("transformers.utils")
        u.is_flash_attn_2_available = lambda: False
        t.utils = u
        sys.modules["transformers"], sys.modules["transformers.utils"] = t, u
        shims.append("transformers.utils")
    try:
        import einops  # noqa: F401
    except Exception:
        e = types.ModuleType("einops")

        def rearrange(x, pattern):
            assert pattern == "b h g i j -> b (h g) i j", pattern
            b, h, g, i, j = x.shape
            return x.reshape(b, h * g, i, j)

        e.rearrange = rearrange
        sys.modules["einops"] = e
        shims.append("einops")
    spec = importlib.util.spec_from_file_location("flex_official", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, shims


def torch_bnhd_avg_pool(x, kernel_size, pool_type="avg"):
    """Stand-in for the official triton_bnhd_pool (avg only), used only if its Triton kernel
    fails on this Triton version: per block mean over the block's true length, in x's dtype."""
    assert pool_type == "avg"
    b, n, h, d = x.shape
    m = (n + kernel_size - 1) // kernel_size
    pad = m * kernel_size - n
    xf = torch.nn.functional.pad(x.float(), (0, 0, 0, 0, 0, pad)).view(b, m, kernel_size, h, d)
    cnt = torch.full((m,), float(kernel_size), device=x.device)
    cnt[-1] = kernel_size - pad
    return (xf.sum(2) / cnt[None, :, None, None]).to(x.dtype)


def active_blocks(mod, shims, *args):
    """The official get_active_blocks; on a Triton failure of its pooling kernel, once more with
    the torch stand-in (reported among the shims)."""
    try:
        return mod.get_active_blocks(*args)
    except Exception as e:  # noqa: BLE001
        if "torch pooling (triton_bnhd_pool failed)" in shims:
            raise
        print(f"official get_active_blocks failed ({type(e).__name__}: {e}); "
              "retrying with a torch avg pool", file=sys.stderr)
        mod.triton_bnhd_pool = torch_bnhd_avg_pool
        shims.append("torch pooling (triton_bnhd_pool failed)")
        return mod.get_active_blocks(*args)


def read_prompt(d):
    meta = open(os.path.join(d, "meta.txt")).read().split()
    n, H, G, D = map(int, meta[:4])
    gamma, tau = float(meta[4]), float(meta[5])
    min_budget, il = int(meta[6]), int(meta[7])

    def bf16(name, heads):
        raw = open(os.path.join(d, name), "rb").read()
        t = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(torch.bfloat16)
        return t.view(1, n, heads, D).cuda()

    return dict(n=n, H=H, G=G, D=D, gamma=gamma, tau=tau, min_budget=min_budget, il=il,
                kind=meta[8] if len(meta) > 8 else "?", q=bf16("q.bf16", H), k=bf16("k.bf16", G),
                v=bf16("v.bf16", G))


def read_csr(d, who, H, nb):
    rp = torch.frombuffer(bytearray(open(os.path.join(d, f"{who}_rowptr.i32"), "rb").read()),
                          dtype=torch.int32).view(H, nb + 1)
    col = torch.frombuffer(bytearray(open(os.path.join(d, f"{who}_col.i32"), "rb").read()),
                           dtype=torch.int32)
    sets = []
    for h in range(H):
        s = set()
        for r in range(nb):
            for c in col[rp[h, r]:rp[h, r + 1]].tolist():
                s.add(r * nb + c)
        sets.append(s)
    return sets


def jaccard(a, b):
    return len(a & b) / len(a | b) if a | b else 1.0


def cmd_jaccard(root):
    mod, shims = load_official()
    print("## Official get_active_blocks vs ours (per-head Jaccard, causal blocks)\n")
    if shims:
        print(f"shims used: {', '.join(shims)}\n")
    print("| case | n | kind | gamma | official density | ours GPU: mean / min Jaccard, heads "
          "equal | ours CPU: mean / min, heads equal |\n|---|---:|---|---:|---:|---|---|")
    all_gpu, all_cpu = [], []
    for case in sorted(os.listdir(root)):
        d = os.path.join(root, case)
        if not os.path.isdir(d):
            continue
        p = read_prompt(d)
        n, H, bs = p["n"], p["H"], 128
        nb = (n + bs - 1) // bs
        with torch.no_grad():
            idx = active_blocks(mod, shims, p["q"], p["k"], p["v"], bs, p["gamma"],
                                math.ceil(p["min_budget"] / bs), math.ceil(2147483647 / bs),
                                p["tau"], bool(p["il"]))
        off = [set(x for x in idx[0][h].tolist() if x % nb <= x // nb) for h in range(H)]
        row = [case, str(n), p["kind"], f"{p['gamma']:.2f}",
               f"{sum(map(len, off)) / (H * nb * (nb + 1) / 2):.4f}"]
        for who, acc in (("gpu", all_gpu), ("cpu", all_cpu)):
            ours = read_csr(d, who, H, nb)
            js = [jaccard(off[h], ours[h]) for h in range(H)]
            acc.extend(js)
            row.append(f"{statistics.mean(js):.4f} / {min(js):.4f}, "
                       f"{sum(j == 1.0 for j in js)}/{H}")
        print("| " + " | ".join(row) + " |")
        sys.stdout.flush()
    if shims:
        print(f"\nshims in the end: {', '.join(shims)}")
    if all_gpu:
        print(f"\nmean over all heads: GPU {statistics.mean(all_gpu):.4f}, "
              f"CPU {statistics.mean(all_cpu):.4f} (goal >= 0.95)\n")


def timed(fn, reps=3):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def cmd_time(dirs):
    mod, shims = load_official()
    F = torch.nn.functional
    print("## Official FlexPrefill and dense SDPA timings (ms, median of 3)\n")
    if shims:
        print(f"shims used: {', '.join(shims)}\n")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}\n")
    print("| n | kind | official get_active_blocks | official block-wise attention | official "
          "flex_prefill_attention | official density | SDPA causal (dense) |\n"
          "|---:|---|---:|---:|---:|---:|---:|")
    for d in dirs:
        p = read_prompt(d)
        q, k, v, bs = p["q"], p["k"], p["v"], 128
        n, H, G = p["n"], p["H"], p["G"]
        mb = math.ceil(p["min_budget"] / bs)
        def attempt(fn):
            try:
                return f"{timed(fn):.2f}"
            except Exception as e:  # noqa: BLE001
                return f"failed ({type(e).__name__}: {str(e)[:60]})"

        with torch.no_grad():
            args = (q, k, v, bs, p["gamma"], mb, math.ceil(2147483647 / bs), p["tau"], False)
            idx = active_blocks(mod, shims, *args)
            t_idx = attempt(lambda: mod.get_active_blocks(*args))
            nb = (n + bs - 1) // bs
            dens = sum(x.numel() for x in idx[0]) / (H * nb * (nb + 1) / 2)
            t_att = attempt(lambda: mod.triton_block_wise_attention(q, k, v, idx, bs))
            t_all = attempt(lambda: mod.flex_prefill_attention(q, k, v, p["gamma"], p["tau"],
                                                               min_budget=p["min_budget"]))
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            try:
                t_sdpa = timed(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                                      enable_gqa=True))
            except TypeError:  # torch < 2.5: no enable_gqa
                kr, vr = kt.repeat_interleave(H // G, 1), vt.repeat_interleave(H // G, 1)
                t_sdpa = timed(lambda: F.scaled_dot_product_attention(qt, kr, vr, is_causal=True))
        print(f"| {n} | {p['kind']} | {t_idx} | {t_att} | {t_all} | {dens:.4f} | {t_sdpa:.2f} |")
        sys.stdout.flush()
        del q, k, v, idx
        torch.cuda.empty_cache()
    if shims:
        print(f"\nshims: {', '.join(shims)}")
    print()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "jaccard":
        cmd_jaccard(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "time":
        cmd_time(sys.argv[2:])
    else:
        sys.exit(__doc__)
