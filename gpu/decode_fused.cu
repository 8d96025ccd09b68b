/* gpu/decode_fused.cu — the single-token decode step's projections with their neighbours fused
 * in, so that a layer is five kernels instead of nine:
 *
 *   gpu_qkv_fused  RMSNorm(x) -> [wq; wk; wv] -> (+ bias) -> rope of q and k -> q (h16) and k, v
 *                  written into the sequence's cache at its position
 *                  (replaces k_rmsnorm + k_gemv + k_rope_qkv)
 *   gpu_gu_fused   RMSNorm(x) -> [w_gate; w_up] -> h = silu(g) * u (h16)
 *                  (replaces k_rmsnorm + k_gemv + k_swiglu)
 *
 * Why: at batch 1 every projection is pure weight streaming (16 GB per Llama-3-8B token) and the
 * small kernels between them (one block each: RMSNorm, rope, SwiGLU) cost more in launch gaps
 * and in the idle HBM around them than in work (~20% of a token: gpu/KERNELS.md).
 *
 * How: every block first normalizes the residual row itself (4 H bytes from L2, cheap next to the
 * weights it streams) into shared memory, with the exact arithmetic of k_rmsnorm (the same code,
 * gpu_block_rmsnorm, with the same 256 threads). Then each warp takes work items in
 * turn: a rope pair (rows i and i + head_dim/2 of one q or k head, streamed together, so the
 * rotation needs no exchange), a pair of v rows (j and kvd/2 + j: every QKV item streams two
 * rows), or a gate/up pair (rows j and I + j). The dot products are gpu_warp_dot, the plain
 * GEMV's; the epilogues are k_rope_qkv's and k_swiglu's arithmetic,
 * including their roundings (q/k/v as float32 before the bias and rope; g and u rounded to h16
 * before SiLU). So the fused step gives the unfused step's bits (tests/gpu/test_ops.c checks it).
 *
 * Both are launched with programmatic dependent launch when the engine says so (engine.cuh): then
 * each warp loads its first item's first weight chunks into registers before waiting for the
 * kernel before (gpu_warp_prefetch) and before the norm. (L2 prefetches of each warp's rows,
 * before or after the wait, were measured slower and dropped: gpu/KERNELS.md.)
 *
 * Only T = 1 without a KV export (the export reads float32 K/V the fused kernel does not write);
 * H <= GPU_FUSED_MAX_H and H % 8 == 0. Grid: at most one resident wave (blocks per SM from the
 * occupancy calculator), warps looping over items, so the norm is not recomputed by more blocks
 * than run at once. */
#include "gpu/engine.cuh"
#include "gpu/gemv.cuh"
#include <stdlib.h>

#define FUSED_THREADS 256 /* 8 warps; also the norm's thread count (k_rmsnorm's ROW_THREADS) */
#define FUSED_WARPS (FUSED_THREADS / 32)

struct qkv_fused_params {
    const h16 *w;      /* (qkv, H) */
    const float *x;     /* (H) residual row */
    const float *norm;  /* (H) */
    const float *bias;  /* (qkv) or NULL */
    const float2 *rope; /* (hd/2) cos, sin of the token */
    const int *seq_idx, *pos;
    const gpu_seq_dev *seqs;
    h16 *q; /* (qd) */
    gpu_dims d;
    int layer;
    int pdl; /* launched with PDL: the first item's first weight loads go out before the wait */
    unsigned long long *tr; /* chain trace slot (engine.cuh), NULL: off */
};

/* Item it of the QKV step, always two rows: < n_q + n_k a rope pair (head, i), else a pair of v
 * rows (j, j + kvd / 2), so that every warp's items stream the same bytes. */
__device__ __forceinline__ int qkv_items(const gpu_dims &d)
{
    return (d.n_heads + d.n_kv) * (d.hd / 2) + d.kvd / 2;
}

__device__ __forceinline__ int qkv_first_row(const gpu_dims &d, int it, int *second)
{
    const int half = d.hd / 2, n_qk = (d.n_heads + d.n_kv) * half, n_q = d.n_heads * half;
    if (it < n_qk) {
        int k = it >= n_q, j = k ? it - n_q : it;
        int c0 = (k ? d.qd : 0) + (j / half) * d.hd + j % half;
        *second = c0 + half;
        return c0;
    }
    const int c0 = d.qd + d.kvd + (it - n_qk);
    *second = c0 + d.kvd / 2;
    return c0;
}

/* PIPE: the dot products pipelined (gpu_warp_dot_pipe; H % 1024 == 0), the same bits. */
template <bool PIPE>
__global__ void __launch_bounds__(FUSED_THREADS) k_qkv_fused(qkv_fused_params p)
{
    extern __shared__ __align__(16) unsigned char fused_smem[];
    h16 *xs = (h16 *)fused_smem;
    const gpu_dims &d = p.d;
    const int lane = threadIdx.x % 32, H = d.H, half = d.hd / 2;
    const int n_q = d.n_heads * half, n_qk = (d.n_heads + d.n_kv) * half, items = qkv_items(d);
    const int stride = gridDim.x * FUSED_WARPS;
    const int it0 = blockIdx.x * FUSED_WARPS + threadIdx.x / 32;
    int it = it0;
    uint4 pre[2][4];
    int have = 0, r01 = 0, r00 = 0;
    gpu_chain_mark(p.tr, 0);
    if (p.pdl && it0 < items) {
        r00 = qkv_first_row(d, it0, &r01);
        have = gpu_warp_prefetch<2>(p.w + (size_t)r00 * H, (size_t)(r01 - r00) * H, H, lane, pre);
    }
    gpu_pdl_wait(); /* x, and the cache slot the attention before may still read */
    gpu_pdl_trigger();
    gpu_chain_mark(p.tr, 1);
    gpu_block_rmsnorm(p.x, p.norm, H, d.eps, xs);
    __syncthreads();
    const gpu_seq_dev sq = p.seqs[p.seq_idx[0]];
    const long long pos = gpu_kv_row(sq.map, p.pos[0]); /* the position's row in the cache */
    for (; it < items; it += stride) {
        int r1, r0 = qkv_first_row(d, it, &r1);
        float v[2];
        const h16 *w = p.w + (size_t)r0 * H;
        const size_t rs = (size_t)(r1 - r0) * H;
        if (PIPE && have && it == it0)
            gpu_warp_dot_pipe<2, true>(w, rs, xs, H, lane, v, pre);
        else if (PIPE)
            gpu_warp_dot_pipe<2>(w, rs, xs, H, lane, v);
        else if (have && it == it0)
            gpu_warp_dot<2, false, true>(w, rs, xs, H, lane, v, pre);
        else
            gpu_warp_dot<2, false>(w, rs, xs, H, lane, v);
        if (lane != 0) continue;
        /* k_rope_qkv's arithmetic */
        float a = v[0], b = v[1];
        if (p.bias) {
            a = __fadd_rn(a, p.bias[r0]);
            b = __fadd_rn(b, p.bias[r1]);
        }
        if (it < n_qk) {
            const int k = it >= n_q, j = k ? it - n_q : it, head = j / half, i = j % half;
            float2 r = p.rope[i];
            float o0 = __fsub_rn(__fmul_rn(a, r.x), __fmul_rn(b, r.y));
            float o1 = __fadd_rn(__fmul_rn(b, r.x), __fmul_rn(a, r.y));
            h16 *dst = k ? sq.k + (((size_t)p.layer * d.n_kv + head) * sq.cap + pos) * d.hd + i
                          : p.q + (size_t)head * d.hd + i;
            dst[0] = h16_from(o0);
            dst[half] = h16_from(o1);
        } else {
            const int j0 = it - n_qk, j1 = j0 + d.kvd / 2;
            sq.v[(((size_t)p.layer * d.n_kv + j0 / d.hd) * sq.cap + pos) * d.hd + j0 % d.hd] =
                h16_from(a);
            sq.v[(((size_t)p.layer * d.n_kv + j1 / d.hd) * sq.cap + pos) * d.hd + j1 % d.hd] =
                h16_from(b);
        }
    }
}

template <bool PIPE>
__global__ void __launch_bounds__(FUSED_THREADS) k_gu_fused(const h16 *w, const float *x,
                                                            const float *norm, int H, int I,
                                                            float eps, h16 *h, int pdl,
                                                            unsigned long long *tr)
{
    extern __shared__ __align__(16) unsigned char fused_smem[];
    h16 *xs = (h16 *)fused_smem;
    const int lane = threadIdx.x % 32, stride = gridDim.x * FUSED_WARPS;
    const int j0 = blockIdx.x * FUSED_WARPS + threadIdx.x / 32;
    uint4 pre[2][4];
    gpu_chain_mark(tr, 0);
    const int have = pdl && j0 < I && gpu_warp_prefetch<2>(w + (size_t)j0 * H, (size_t)I * H, H, lane, pre);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    gpu_chain_mark(tr, 1);
    gpu_block_rmsnorm(x, norm, H, eps, xs);
    __syncthreads();
    for (int j = j0; j < I; j += stride) {
        float v[2];
        if (PIPE && have && j == j0)
            gpu_warp_dot_pipe<2, true>(w + (size_t)j * H, (size_t)I * H, xs, H, lane, v, pre);
        else if (PIPE)
            gpu_warp_dot_pipe<2>(w + (size_t)j * H, (size_t)I * H, xs, H, lane, v);
        else if (have && j == j0)
            gpu_warp_dot<2, false, true>(w + (size_t)j * H, (size_t)I * H, xs, H, lane, v, pre);
        else
            gpu_warp_dot<2, false>(w + (size_t)j * H, (size_t)I * H, xs, H, lane, v);
        if (lane != 0) continue;
        /* the unfused path stores g and u as h16 (the gate/up GEMM's output), then k_swiglu */
        float g = h16_to(h16_from(v[0]));
        float u = h16_to(h16_from(v[1]));
        h[j] = h16_from(gpu_silu_mul(g, u));
    }
}

/* Both fused kernels pipeline their dot products (gpu_warp_dot_pipe: the next round's loads go
 * out before the current round is summed; the same bits) where the row length allows it. */
static int pipelined(int H)
{
    return H % 1024 == 0;
}

/* Blocks for `items` work items: one per 8 items, at most one resident wave; balanced: as few
 * warps as give every warp the same number of items as the wave would give its busiest one (no
 * warp idle while others take one more item: Llama-3-8B's gate/up 14336 items on 2112 warps ->
 * 7 each on 2048, QKV 3072 -> 2 each on 1536). */
template <typename K> static int fused_grid(K kernel, size_t smem, int sms, int items, int *blocks,
                                            int balanced)
{
    int per_sm = 0;
    GPU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, FUSED_THREADS, smem));
    int want = (items + FUSED_WARPS - 1) / FUSED_WARPS, wave = (per_sm > 0 ? per_sm : 1) * sms;
    *blocks = want < wave ? want : wave;
    if (balanced && items > 0) {
        const int per_warp = (items + *blocks * FUSED_WARPS - 1) / (*blocks * FUSED_WARPS);
        const int warps = (items + per_warp - 1) / per_warp;
        *blocks = (warps + FUSED_WARPS - 1) / FUSED_WARPS;
    }
    return ACCEL_OK;
}

int gpu_fused_ok(const gpu_dims *d)
{
    return d->H % 8 == 0 && d->H <= GPU_FUSED_MAX_H && d->hd % 2 == 0;
}

int gpu_qkv_fused(cudaStream_t s, int pdl, int sms, const gpu_dims *d, int layer, const h16 *w,
                  const float *bias, const float *x, const float *norm, const float2 *rope,
                  const int *seq_idx, const int *pos, const gpu_seq_dev *seqs, h16 *q, unsigned long long *tr,
                  int balanced)
{
    if (!gpu_fused_ok(d)) return ACCEL_ERR_INVALID;
    qkv_fused_params p;
    p.w = w;
    p.x = x;
    p.norm = norm;
    p.bias = bias;
    p.rope = rope;
    p.seq_idx = seq_idx;
    p.pos = pos;
    p.seqs = seqs;
    p.q = q;
    p.d = *d;
    p.layer = layer;
    p.pdl = pdl;
    p.tr = tr;
    const size_t smem = (size_t)d->H * sizeof(h16);
    const int items = (d->n_heads + d->n_kv) * (d->hd / 2) + d->kvd / 2;
    void (*k)(qkv_fused_params) = pipelined(d->H) ? k_qkv_fused<true> : k_qkv_fused<false>;
    int blocks;
    GPU_TRY(fused_grid(k, smem, sms, items, &blocks, balanced));
    GPU_CHECK(gpu_launch(k, blocks, FUSED_THREADS, smem, s, pdl, p));
    return ACCEL_OK;
}

int gpu_gu_fused(cudaStream_t s, int pdl, int sms, const gpu_dims *d, const h16 *w, const float *x,
                 const float *norm, h16 *h, unsigned long long *tr)
{
    if (!gpu_fused_ok(d)) return ACCEL_ERR_INVALID;
    const size_t smem = (size_t)d->H * sizeof(h16);
    void (*k)(const h16 *, const float *, const float *, int, int, float, h16 *, int,
              unsigned long long *) = pipelined(d->H) ? k_gu_fused<true> : k_gu_fused<false>;
    int blocks;
    /* balanced always: a little faster at 1K and 8K (gpu/KERNELS.md) */
    GPU_TRY(fused_grid(k, smem, sms, d->I, &blocks, 1));
    GPU_CHECK(gpu_launch(k, blocks, FUSED_THREADS, smem, s, pdl, w, x, norm, d->H, d->I, d->eps, h,
                         pdl, tr));
    return ACCEL_OK;
}
