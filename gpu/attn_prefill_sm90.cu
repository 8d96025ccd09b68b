/* gpu/attn_prefill_sm90.cu — the prefill attention on Hopper's warpgroup MMA (wgmma), for head_dim
 * up to 128. gpu_attn_prefill_sm90 sends head_dim 128 to the warp-specialized kernel
 * (gpu/attn_prefill_ws.cu, 2-3.5x this one's rate) and other head_dims to the one-warpgroup kernel
 * below (padded to 128), which also stays for comparisons (GPU_SM90_ONE_WG).
 *
 * The one-warpgroup kernel: the same algorithm and arguments as gpu/attn_prefill.cu (causal,
 * sliding window, GQA, chunked prefill; online softmax in float32, P rounded to h16), with the
 * same block shape — BR = 64 query rows of one head against key tiles of BC = 64 — but one
 * warpgroup (4 warps) driving the tensor cores with wgmma instead of mma.sync:
 *   - S = Q K^T: 8 wgmma m64n64k16, both operands read by the tensor cores from shared memory
 *     (no ldmatrix traffic through registers);
 *   - O += P V: 4 wgmma m64n128k16 with P straight from the S registers (the wgmma accumulator
 *     layout of each warp's 16 rows is the mma.sync one, so FlashAttention-2's register trick
 *     carries over) and V read transposed (MN-major) from shared memory;
 *   - tiles are stored in the no-swizzle core-matrix layout (gpu/wgmma.cuh): element (row, col) at
 *     byte (row/8)*2048 + (col/8)*128 + (row%8)*16 + (col%8)*2. Thread i copies the 16-byte chunk
 *     that lands at byte 16 i, so the shared-memory writes are linear (no bank conflicts);
 *   - K/V tile i+1 is fetched with cp.async while tile i computes (two buffers).
 * Shared memory: Q 16 KB + 2 x (K 16 KB + V 16 KB) = 80 KB, so two blocks share an SM and one's
 * softmax runs while the other's wgmma does (a block waits for its own wgmma before its softmax).
 * Compiled only for sm_90a (wgmma does not exist elsewhere); gpu_attn_sm90_available() tells the
 * host whether this build carries it (a probe kernel, compiled under the same guard). */
#include "gpu/engine.cuh"
#include "gpu/mma.cuh"
#include "gpu/wgmma.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90_WGMMA 1
#endif

#define WG_BR 64
#define WG_BC 64
#define WG_HD 128
#define WG_THREADS 128
#define WG_TILE_BYTES (64 * WG_HD * 2)                   /* 64 rows x 128 h16 */
#define WG_SMEM (5 * WG_TILE_BYTES)                      /* Q, K[2], V[2] */
#define WG_GROUP_STRIDE (WG_HD * 16)                     /* bytes between 8-row groups */

struct wg_params {
    const h16 *q;
    const h16 *k, *v;
    h16 *out;
    int T, pos0, cap, hd, qd, group, window;
    float scale_log2;
    gpu_kv_map map; /* keys -> rows (a paged cache; a 64-key tile lies inside one block) */
};

__global__ void k_sm90_probe(int *out)
{
#ifdef SM90_WGMMA
    *out = 1;
#else
    *out = 0;
#endif
}

/* 64 rows x 16 chunks of 16 bytes: chunk idx -> (row, col chunk) with row%8 fastest, so that
 * the shared-memory byte offset is exactly 16 * idx. src(row, chunk) gives the global address
 * (NULL: zero fill; cp.async then reads nothing, but is still given a global address, any). */
template <typename F>
__device__ __forceinline__ void wg_load_tile(unsigned char *dst, const h16 *any, F src)
{
    for (int idx = threadIdx.x; idx < 64 * 16; idx += WG_THREADS) {
        int r8 = idx & 7, c = (idx >> 3) & 15, rg = idx >> 7;
        const h16 *s = src(rg * 8 + r8, c);
        gpu_cp_async16(dst + 16 * idx, s ? s : any, s != NULL);
    }
}

__global__ void __launch_bounds__(WG_THREADS, 2) k_flash_prefill_sm90(wg_params p)
{
#ifdef SM90_WGMMA
    extern __shared__ __align__(128) unsigned char wg_smem[];
    unsigned char *sQ = wg_smem;
    unsigned char *sK = wg_smem + WG_TILE_BYTES;     /* [2] */
    unsigned char *sV = wg_smem + 3 * WG_TILE_BYTES; /* [2] */

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int h = blockIdx.x, g = h / p.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * WG_BR;
    const int kv_len = p.pos0 + p.T;
    const int qlo = p.pos0 + q0, qhi = p.pos0 + min(q0 + WG_BR, p.T) - 1;
    const int kbeg = p.window > 0 ? max(0, qlo + 1 - p.window) : 0;
    const int t_first = kbeg / WG_BC, t_last = qhi / WG_BC;
    const h16 *kh = p.k + (size_t)g * p.cap * p.hd, *vh = p.v + (size_t)g * p.cap * p.hd;
    const int hd_chunks = p.hd / 8;

    wg_load_tile(sQ, p.q, [&](int r, int c) -> const h16 * {
        return q0 + r < p.T && c < hd_chunks ? p.q + (size_t)(q0 + r) * p.qd + h * p.hd + c * 8 : NULL;
    });
    auto load_kv = [&](int tile, int buf) {
        int key0 = tile * WG_BC;
        const long long rb = gpu_kv_row(p.map, key0); /* the tile's first row */
        wg_load_tile(sK + buf * WG_TILE_BYTES, kh, [&](int r, int c) -> const h16 * {
            return key0 + r < kv_len && c < hd_chunks ? kh + (size_t)(rb + r) * p.hd + c * 8 : NULL;
        });
        wg_load_tile(sV + buf * WG_TILE_BYTES, vh, [&](int r, int c) -> const h16 * {
            return key0 + r < kv_len && c < hd_chunks ? vh + (size_t)(rb + r) * p.hd + c * 8 : NULL;
        });
    };
    load_kv(t_first, 0);
    gpu_cp_async_commit();

    float o[64], s[32];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int row0 = warp * 16 + lane / 4; /* this thread's rows in the tile: row0, +8 */
    const int qp0 = qlo + row0, qp1 = qp0 + 8;

    for (int tile = t_first; tile <= t_last; tile++) {
        const int buf = (tile - t_first) & 1;
        gpu_cp_async_wait<0>();
        gpu_fence_proxy_async();
        __syncthreads(); /* tile visible to all; the other buffer is no longer read by anyone */
        if (tile < t_last) {
            load_kv(tile + 1, buf ^ 1);
            gpu_cp_async_commit();
        }
        const unsigned char *cK = sK + buf * WG_TILE_BYTES, *cV = sV + buf * WG_TILE_BYTES;

        /* S = Q K^T: k-steps of 16 along head_dim = 2 core matrices (256 bytes) */
        gpu_wgmma_fence_regs<32>(s);
        gpu_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_HD / 16; kk++)
            gpu_wgmma_ss_m64n64(s, gpu_wgmma_desc(sQ + kk * 256, 128, WG_GROUP_STRIDE),
                                gpu_wgmma_desc(cK + kk * 256, 128, WG_GROUP_STRIDE), kk > 0);
        gpu_wgmma_commit();
        gpu_wgmma_wait0();
        gpu_wgmma_fence_regs<32>(s);

        const int kbase = tile * WG_BC;
        const bool edge = kbase + WG_BC - 1 > qlo || kbase + WG_BC > kv_len ||
                          (p.window > 0 && kbase <= qhi - p.window);
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[4 * j + e] * p.scale_log2;
                if (edge) {
                    int key = kbase + j * 8 + (lane % 4) * 2 + (e & 1);
                    int qp = e < 2 ? qp0 : qp1;
                    if (key > qp || key >= kv_len || (p.window > 0 && key <= qp - p.window))
                        v = -INFINITY;
                }
                s[4 * j + e] = v;
            }
            mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
            mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
        const float a0 = exp2f(m0 - mu0), a1 = exp2f(m1 - mu1);
        m0 = mn0;
        m1 = mn1;
        float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            s[4 * j] = exp2f(s[4 * j] - mu0);
            s[4 * j + 1] = exp2f(s[4 * j + 1] - mu0);
            s[4 * j + 2] = exp2f(s[4 * j + 2] - mu1);
            s[4 * j + 3] = exp2f(s[4 * j + 3] - mu1);
            rs0 += s[4 * j] + s[4 * j + 1];
            rs1 += s[4 * j + 2] + s[4 * j + 3];
        }
        l0 = l0 * a0 + rs0;
        l1 = l1 * a1 + rs1;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            o[4 * j] *= a0;
            o[4 * j + 1] *= a0;
            o[4 * j + 2] *= a1;
            o[4 * j + 3] *= a1;
        }

        /* O += P V: k-steps of 16 keys = 2 groups of 8 rows of the V tile (4096 bytes) */
        unsigned pa[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            pa[j][0] = gpu_pack_h16(s[8 * j], s[8 * j + 1]);
            pa[j][1] = gpu_pack_h16(s[8 * j + 2], s[8 * j + 3]);
            pa[j][2] = gpu_pack_h16(s[8 * j + 4], s[8 * j + 5]);
            pa[j][3] = gpu_pack_h16(s[8 * j + 6], s[8 * j + 7]);
        }
        gpu_wgmma_fence_regs<64>(o);
        gpu_wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; j++)
            gpu_wgmma_rs_m64n128_tb(o, pa[j],
                                    gpu_wgmma_desc(cV + j * 2 * WG_GROUP_STRIDE, WG_GROUP_STRIDE, 128));
        gpu_wgmma_commit();
        gpu_wgmma_wait0();
        gpu_wgmma_fence_regs<64>(o);
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const int r0 = q0 + row0, r1 = r0 + 8;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        int col = j * 8 + (lane % 4) * 2;
        if (col >= p.hd) continue;
        if (r0 < p.T)
            *(h16x2 *)(p.out + (size_t)r0 * p.qd + h * p.hd + col) =
                h16x2_from(o[4 * j] * inv0, o[4 * j + 1] * inv0);
        if (r1 < p.T)
            *(h16x2 *)(p.out + (size_t)r1 * p.qd + h * p.hd + col) =
                h16x2_from(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
#endif
}

int gpu_attn_sm90_available(int device)
{
    cudaDeviceProp prop;
    GPU_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major != 9 || prop.minor != 0) return 0;
    int *d = NULL, h = 0;
    GPU_CHECK(cudaMalloc((void **)&d, sizeof(int)));
    k_sm90_probe<<<1, 1>>>(d);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess) return gpu_cuda_status(e, "sm90 probe", __FILE__, __LINE__);
    return h == 1;
}

int gpu_attn_prefill_sm90(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                          const h16 *k, const h16 *v, int cap, h16 *out, const gpu_kv_map *map,
                          const gpu_attn_split *sp)
{
    return gpu_attn_prefill_sm90_ex(s, d, T, pos0, q, k, v, cap, out, GPU_SM90_AUTO, map, sp);
}

int gpu_attn_prefill_sm90_ex(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                             const h16 *k, const h16 *v, int cap, h16 *out, int variant,
                             const gpu_kv_map *map, const gpu_attn_split *sp)
{
    if (T <= 0) return ACCEL_OK;
    if (variant != GPU_SM90_ONE_WG) {
        int st = ACCEL_ERR_UNSUPPORTED;
        if (gpu_attn_ws_usable(d, q, k, v, cap))
            st = gpu_attn_prefill_ws(s, d, T, pos0, q, k, v, cap, out,
                                     variant == GPU_SM90_WS_NOPP ? 1 : variant == GPU_SM90_WS_3ST ? 2 : 0,
                                     map, sp);
        /* UNSUPPORTED (no tensor map for these operands): the one-warpgroup kernel below */
        if (st != ACCEL_ERR_UNSUPPORTED || variant != GPU_SM90_AUTO) return st;
    }
    if (d->hd > WG_HD || (T + WG_BR - 1) / WG_BR > 65535) return ACCEL_ERR_INVALID;
    wg_params p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.out = out;
    p.T = T;
    p.pos0 = pos0;
    p.cap = cap;
    p.hd = d->hd;
    p.qd = d->qd;
    p.group = d->n_heads / d->n_kv;
    p.window = d->window;
    p.scale_log2 = (float)(1.4426950408889634 / sqrt((double)d->hd));
    p.map = map ? *map : gpu_kv_map{};
    GPU_CHECK(cudaFuncSetAttribute(k_flash_prefill_sm90, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   WG_SMEM));
    dim3 grid(d->n_heads, (T + WG_BR - 1) / WG_BR);
    k_flash_prefill_sm90<<<grid, WG_THREADS, WG_SMEM, s>>>(p);
    GPU_LAUNCHED();
    return ACCEL_OK;
}
