// gpu/gpu_flex_attn.cu — gpu_flex_attention (gpu/gpu_flex.h): causal attention over a CSR block
// list, on the kernel the engine's sparse prefill takes (prefill_sparse.cu: sparse_layers) in its
// block-sparse form: on Hopper with head_dim 128 the warp-specialized kernel
// (gpu/attn_prefill_ws.cu, one 128-key tile per block), else the mma.sync kernel of
// gpu/attn_prefill.cu (each 128-block two of its 64-key tiles). This entry reads token-major
// K/V, (n, n_kv_heads, d), through the kernels' strides (its test, gpu_flex_attention_matches_cpu,
// checks it against the CPU reference; the WMMA kernel it replaced: gpu/KERNELS.md).
#include "gpu/engine.cuh"
#include "gpu/gpu_flex.h"
#include "gpu/gpu_flex_common.cuh"
#include <atomic>
#include <string.h>

int gpu_flex_ws_here(void)
{
    static std::atomic<int> known[16]; /* 0 not asked, 1 no, 2 yes */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) {
        cudaGetLastError();
        return 0;
    }
    if (!known[dev].load()) {
        int av = gpu_attn_sm90_available(dev);
        if (av < 0) cudaGetLastError();
        known[dev].store(av > 0 ? 2 : 1);
    }
    return known[dev].load() == 2;
}

extern "C" int gpu_flex_attention(const void *q, const void *k, const void *v, void *out, int n,
                                  int H, int Hk, int d, const int32_t *row_ptr,
                                  const int32_t *col, int interleave, void *stream)
{
    if (!q || !k || !v || !out || !row_ptr || !col || n < 1 || n > GPU_FLEX_MAX_TOKENS || H < 1 ||
        H > GPU_FLEX_MAX_HEADS || Hk < 1 || H % Hk || (d != 64 && d != 128))
        return GPU_FLEX_ERR_INVALID;
    gpu_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.n_heads = H;
    dd.n_kv = Hk;
    dd.hd = d;
    dd.hdp = d;
    dd.qd = H * d;
    dd.kvd = Hk * d;
    dd.L = 1;
    gpu_block_list bl = {row_ptr, col, (n + GPU_FLEX_BS - 1) / GPU_FLEX_BS};
    if (d == 128 && gpu_flex_ws_here()) {
        int st = gpu_attn_prefill_ws_ex((cudaStream_t)stream, &dd, n, 0, (const h16 *)q,
                                        (const h16 *)k, (const h16 *)v, (size_t)Hk * d, (size_t)d,
                                        interleave, &bl, (h16 *)out, 0);
        if (st != ACCEL_ERR_UNSUPPORTED) return st;
    }
    return gpu_attn_prefill_ex((cudaStream_t)stream, &dd, n, 0, (const h16 *)q, (const h16 *)k,
                               (const h16 *)v, (size_t)Hk * d, (size_t)d, interleave, &bl,
                               (h16 *)out, 4);
}
