/* gpu/gemv.cuh — the device building blocks of single-token projections (decode, T = 1), shared
 * by the plain GEMV (gemm.cu) and the fused decode kernels (decode_fused.cu), so that both sum in
 * the same order and give the same bits:
 *   gpu_warp_dot    one warp streams R weight rows (16-byte chunks, four loads in flight per row
 *                   and lane, read once: ld.global.cs) against one h16 activation row, float32
 *                   accumulation in chunk order, then a butterfly shuffle reduction; every lane
 *                   ends with the R sums;
 *   gpu_warp_dot_pipe  the same with the next round's loads issued before the current round is
 *                   summed (the fused kernels, x in shared memory; same bits);
 *   gpu_block_rmsnorm  a block's RMSNorm of one float32 row into h16 (cpu_rmsnorm's arithmetic:
 *                   the mean of squares in double, inv = (float)(1 / sqrt(ms + eps)),
 *                   out = x * inv * w rounded once); with the same thread count it is the same
 *                   computation as kernels.cu's k_rmsnorm, bit for bit; CG = true reads x past
 *                   L1 (__ldcg: the decode step kernel, where other blocks wrote it). */
#ifndef TANDEM_GPU_GEMV_CUH
#define TANDEM_GPU_GEMV_CUH
#include "gpu/engine.cuh"

/* One round of weight chunks per row: w[r][u] = chunk c + 32 u of row r (read once: ld.global.cs). */
template <int R>
__device__ __forceinline__ void gpu_load_round(uint4 (&w)[R][4], const h16 *__restrict__ W,
                                               size_t rstride, int c)
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < 4; u++) w[r][u] = __ldcs((const uint4 *)(W + r * rstride) + c + 32 * u);
}

/* The weight chunks gpu_warp_dot loads first (its first round of four per row and lane), issued
 * ahead: a kernel launched with programmatic dependent launch calls this before gpu_pdl_wait
 * (weights never depend on the kernel before) and hands the registers to gpu_warp_dot<.., true>.
 * Returns 0, the same in every lane, when K is too short for a full round of the whole warp
 * (K < 1024; then nothing is loaded and every lane takes the plain gpu_warp_dot, whose shuffles
 * must be reached by the whole warp at one call site). */
template <int R>
__device__ __forceinline__ int gpu_warp_prefetch(const h16 *__restrict__ W, size_t rstride, int K,
                                                 int lane, uint4 pre[R][4])
{
    if (K / 8 < 128) return 0;
    gpu_load_round<R>(*(uint4(*)[R][4])pre, W, rstride, lane);
    return 1;
}

/* The part of a K-long h16 row that an L2 prefetch of pf bytes per row covers beyond the first
 * round gpu_warp_prefetch loads into registers (4 x 32 x 16 bytes): [2048, min(2 K, 2048 + pf)). */
__device__ __forceinline__ unsigned gpu_l2_prefetch_end(int K, int pf)
{
    const unsigned row = 2u * (unsigned)K, end = 2048u + (unsigned)pf;
    return (end < row ? end : row) & ~15u;
}

/* Each acc[r] summed over the warp (butterfly: every lane ends with the sums). */
template <int R> __device__ __forceinline__ void gpu_warp_sums(float acc[R])
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        float v = acc[r];
#pragma unroll
        for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[r] = v;
    }
}

/* acc[r] += one round of row r's weight chunks w[r][u] (chunks c + 32 u of the row, U per round:
 * 4 in the engine) times x's same chunks, in chunk order: the arithmetic every form of the warp
 * dot product shares (so that they give the same bits; gpu/bench/gemv_bw.cu's variants too). */
template <int R, bool GLOBAL, int U = 4>
__device__ __forceinline__ void gpu_sum_round(float acc[R], const uint4 (&w)[R][U], const uint4 *xp,
                                              int c)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const uint4 xv = GLOBAL ? __ldca(xp + c + 32 * u) : xp[c + 32 * u];
        const h16 *xb = (const h16 *)&xv;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const h16 *wb = (const h16 *)&w[r][u];
#pragma unroll
            for (int e = 0; e < 8; e++) acc[r] += h16_to(wb[e]) * h16_to(xb[e]);
        }
    }
}

/* acc[r] = sum_k W[r * rstride + k] * x[k] for r < R (K % 8 == 0, rows 16-byte aligned).
 * GLOBAL: x is global memory (an earlier kernel's output, which under PDL is still being written
 * while this kernel starts), read with coherent L1-cached loads (ld.global.ca, not the
 * non-coherent ld.global.nc, whose data must stay unwritten for the kernel's whole life); else
 * x is shared memory.
 * PRE: the first round of weight chunks is in pre (gpu_warp_prefetch returned 1). The same
 * arithmetic in the same order either way. */
template <int R, bool GLOBAL, bool PRE = false>
__device__ __forceinline__ void gpu_warp_dot(const h16 *__restrict__ W, size_t rstride,
                                             const h16 *__restrict__ x, int K, int lane,
                                             float acc[R], const uint4 (*pre)[4] = nullptr)
{
    const uint4 *xp = (const uint4 *)x;
    const int chunks = K / 8;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    int c = lane;
    for (; c + 96 < chunks; c += 128) {
        uint4 wv[R][4];
        if (PRE && c == lane) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < 4; u++) wv[r][u] = pre[r][u];
        } else {
            gpu_load_round<R>(wv, W, rstride, c);
        }
        gpu_sum_round<R, GLOBAL>(acc, wv, xp, c);
    }
    for (; c < chunks; c += 32) {
        uint4 xv = GLOBAL ? __ldca(xp + c) : xp[c];
        const h16 *xb = (const h16 *)&xv;
#pragma unroll
        for (int r = 0; r < R; r++) {
            uint4 wv = __ldcs((const uint4 *)(W + r * rstride) + c);
            const h16 *wb = (const h16 *)&wv;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[r] += h16_to(wb[e]) * h16_to(xb[e]);
        }
    }
    gpu_warp_sums<R>(acc);
}

/* gpu_warp_dot<R, false, PRE> with x in shared memory, pipelined: round k + 1's weight loads go
 * out before round k is summed, so a lane keeps its loads in flight while it computes (twice the
 * registers). The same chunks in the same order: the same bits. Needs K % 1024 == 0 (whole rounds
 * of 4 x 32 chunks); PRE: the first round is in pre (gpu_warp_prefetch). */
template <int R, bool PRE = false>
__device__ __forceinline__ void gpu_warp_dot_pipe(const h16 *__restrict__ W, size_t rstride,
                                                  const h16 *__restrict__ x, int K, int lane,
                                                  float acc[R], const uint4 (*pre)[4] = nullptr)
{
    const uint4 *xp = (const uint4 *)x;
    const int rounds = K / 1024;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    uint4 cur[R][4];
    if (PRE) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < 4; u++) cur[r][u] = pre[r][u];
    } else {
        gpu_load_round<R>(cur, W, rstride, lane);
    }
    for (int k = 0; k < rounds; k++) {
        uint4 nxt[R][4];
        if (k + 1 < rounds) gpu_load_round<R>(nxt, W, rstride, (k + 1) * 128 + lane);
        gpu_sum_round<R, false>(acc, cur, xp, k * 128 + lane);
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < 4; u++) cur[r][u] = nxt[r][u];
    }
    gpu_warp_sums<R>(acc);
}

/* Sum of v over the block (any size up to 1024 threads), in double; every thread gets it.
 * Holds a barrier: every thread of the block must call it. */
__device__ __forceinline__ double gpu_block_sum_double(double v)
{
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) part[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) / 32;
    v = w == 0 && l < nw ? part[l] : 0.0; /* only warp 0 reads: thread 0 rewrites part[0] below */
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) part[0] = v;
    __syncthreads();
    v = part[0];
    __syncthreads(); /* part is reused by the next call */
    return v;
}

/* out (H, h16) = RMSNorm(x) * w, computed by the whole block (every thread must call it).
 * Vector path (H % 4 == 0, x and w 16-byte aligned, out 8-byte aligned, H <= 16 * blockDim.x):
 * every thread issues all its float4 loads of x and w at once (the row is in L2: one round trip
 * instead of one per element), sums its chunks in order, keeps them in registers for the output.
 * Else one element at a time. Either way the arithmetic per element is cpu_rmsnorm's; only the
 * order of the double sum depends on the path. */
template <bool CG = false>
__device__ __forceinline__ void gpu_block_rmsnorm(const float *x, const float *w, int H, float eps,
                                                  h16 *out)
{
    constexpr int MAXV = 4; /* float4 chunks per thread held in registers */
    const int nt = blockDim.x, tid = threadIdx.x;
    const bool vec = H % 4 == 0 && H <= 4 * MAXV * nt && ((uintptr_t)x | (uintptr_t)w) % 16 == 0 &&
                     (uintptr_t)out % 8 == 0;
    double ss = 0;
    if (vec) {
        const float4 *x4 = (const float4 *)x, *w4 = (const float4 *)w;
        const int n4 = H / 4;
        float4 xv[MAXV], wv[MAXV];
#pragma unroll
        for (int v = 0; v < MAXV; v++) {
            const int c = tid + v * nt;
            if (c < n4) {
                xv[v] = CG ? __ldcg(x4 + c) : x4[c];
                wv[v] = w4[c];
            }
        }
#pragma unroll
        for (int v = 0; v < MAXV; v++)
            if (tid + v * nt < n4)
                ss += (double)xv[v].x * xv[v].x + (double)xv[v].y * xv[v].y +
                      (double)xv[v].z * xv[v].z + (double)xv[v].w * xv[v].w;
        ss = gpu_block_sum_double(ss);
        const float inv = (float)(1.0 / sqrt(ss / H + (double)eps));
#pragma unroll
        for (int v = 0; v < MAXV; v++) {
            const int c = tid + v * nt;
            if (c < n4) {
                const float4 a = xv[v], b = wv[v];
                h16x2 lo = h16x2_from(__fmul_rn(__fmul_rn(a.x, inv), b.x),
                                                          __fmul_rn(__fmul_rn(a.y, inv), b.y));
                h16x2 hi = h16x2_from(__fmul_rn(__fmul_rn(a.z, inv), b.z),
                                                          __fmul_rn(__fmul_rn(a.w, inv), b.w));
                uint2 pk;
                pk.x = *(const unsigned *)&lo;
                pk.y = *(const unsigned *)&hi;
                *(uint2 *)(out + 4 * (size_t)c) = pk;
            }
        }
        return;
    }
    for (int i = tid; i < H; i += nt) {
        const float xi = CG ? __ldcg(x + i) : x[i];
        ss += (double)xi * xi;
    }
    ss = gpu_block_sum_double(ss);
    float inv = (float)(1.0 / sqrt(ss / H + (double)eps));
    for (int i = tid; i < H; i += nt)
        out[i] = h16_from(__fmul_rn(__fmul_rn(CG ? __ldcg(x + i) : x[i], inv), w[i]));
}

#endif
