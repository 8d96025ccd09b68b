# The attention rate of the best attention kernel on the machine, for the prefill floor: torch's
# scaled_dot_product_attention (causal, bf16, Llama-3-8B heads: 32 query / 8 KV heads, head_dim
# 128), timed with CUDA events, median of 10 after 3 warm-ups, per backend torch offers here.
import json, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

def rate(T, backend):
    torch.manual_seed(0)
    q = torch.randn(1, 32, T, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, T, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, T, 128, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(backend):
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        for _ in range(3): f()
        ts = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); f(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ms = sorted(ts)[len(ts) // 2]
    return ms, 4.0 * T * T / 2 * 128 * 32 / (ms * 1e-3) / 1e12

for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
    for T in [1024, 4096, 16384, 32768]:
        try:
            ms, tf = rate(T, be)
            print(json.dumps({"bench": "sdpa", "backend": name, "tokens": T, "ms": round(ms, 3), "tflops": round(tf, 1)}), flush=True)
        except Exception as e:
            print(json.dumps({"bench": "sdpa", "backend": name, "tokens": T, "error": str(e)[:200]}), flush=True)
