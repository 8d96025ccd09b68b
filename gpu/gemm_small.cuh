/* gpu/gemm_small.cuh — projections of a few rows (decode batches of 2..16 sequences) on the tensor
 * cores at the weight-streaming rate: out (T, N; rows of ldc) = x (T, K) · W^T (+ out), W (N, K)
 * row-major h16, x (T, K) h16, float32 accumulation. Header-only so that gemm.cu (the winner) and
 * gpu/bench/gemm_decode.cu (every variant) compile the same kernel.
 *
 * Why: at T <= 16 a projection is still pure weight streaming (each weight byte used T times, 16
 * FLOPs per byte at most: far below the tensor cores' ridge), but cuBLAS's kernels for these
 * sizes fall short of the copy rate, and cuBLAS cannot take part in the decode chain's
 * programmatic dependent launch, so a batched step pays every launch gap (issue 23).
 *
 * How: one mma.sync m16n8k16 takes 16 output features (A = 16 weight rows x 16 of K) against
 * the T activation rows (B = 16 of K x 8 rows; NT such tiles for T <= 8 NT). Both operands come
 * straight from global memory with 16-byte loads: lane l (g = l / 4, j = l % 4) loads 8
 * consecutive h16 of weight rows g and g + 8 and of activation row g, at K offset 8 j of each
 * 32-wide chunk of K. The fragment wants k pairs {2j, 2j+1} and {2j+8, 2j+9} of a 16-wide step;
 * we feed it the lane's elements {8j, 8j+1}, {8j+2, 8j+3} in the first step and {8j+4, 8j+5},
 * {8j+6, 8j+7} in the second: a permutation of K, the same for A and B, so the sum is the same
 * set of products (only the float32 summation order differs from any other kernel's).
 *
 * A block of WARPS warps owns a 16-row tile at a time; its warps split K into contiguous slices,
 * each lane keeping U chunks (2U weight loads) of its slice in flight and the next round's loads
 * issued before the current round's MMAs (across tiles too). The warps' 16 x 8 partial tiles are
 * added in shared memory in warp order (deterministic: the same bits run to run). Blocks of one
 * resident wave loop over the tiles with the grid's stride (as k_gemv): under PDL every block
 * issues its first tile's first weight loads before gpu_pdl_wait (weights never depend on the
 * kernel before); the activations and the residual are read after it, x through L1 with
 * coherent loads (__ldca: the predecessor may still be writing when this kernel starts).
 *
 * The gate/up projection can end in the SwiGLU instead (SWI = 1): its block owns the same tile of
 * the gate's and the up's rows and writes h = silu(g) * u (one kernel less per layer, and the
 * activation loads serve both halves).
 *
 * Contract: K % 8 == 0, W and x 16-byte aligned (their rows then are too), 1 <= T <= 8 NT.
 * out_f32: float32 output (beta 1 adds into out: the residual), else h16 output (beta ignored:
 * gemm.cu sends h16 with beta != 0 to cuBLAS). Rows past N are clamped to N - 1 on load and
 * never stored; activation rows past T load as zeros and are never stored. */
#ifndef TANDEM_GPU_GEMM_SMALL_CUH
#define TANDEM_GPU_GEMM_SMALL_CUH
#include "gpu/engine.cuh"

/* c += a · b with the h16 operands as raw registers (gpu/mma.cuh's instruction) */
__device__ __forceinline__ void gs_mma(float c[4], unsigned a0, unsigned a1, unsigned a2,
                                       unsigned a3, unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." GPU_H16_PTX "." GPU_H16_PTX ".f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One round of weight loads for the P row sets of a tile: chunks c0 .. c0 + U - 1 of rows g and
 * g + 8 of each set (rp[p][0], rp[p][1]), this lane's 16 bytes at K offset 8 j of each chunk
 * (zeros past the warp's slice end c1 or past K). ld.global.cs: every weight byte is read once
 * per call. */
template <int U, int P>
__device__ __forceinline__ void gs_load_w(uint4 (&a)[U][P][2], const h16 *const (&rp)[P][2], int c0,
                                          int c1, int j, int K)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int k = 32 * (c0 + u) + 8 * j;
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                a[u][p][h] = c0 + u < c1 && k < K ? __ldcs((const uint4 *)(rp[p][h] + k))
                                                  : make_uint4(0, 0, 0, 0);
    }
}

/* SWI = 0: out (T, N; rows of ldc) = x · W^T, float32 (+ out when beta != 0) or h16.
 * SWI = 1 (gate/up + SwiGLU, T <= 8 NT): W holds 2N rows, the gate's N then the up's N; a block
 * owns a tile of both (its B loads serve both), and writes out (T, N; rows of ldc) h16 =
 * silu(g) * u with g and u first rounded to h16: the unfused chain's bits for the same sums
 * (gpu_gemm to the h16 gate/up buffer, then kernels.cu's k_swiglu8). */
template <int WARPS, int U, int NT, int SWI>
__global__ void __launch_bounds__(WARPS * 32)
    k_gemm_small(const h16 *__restrict__ W, const h16 *__restrict__ x, int T, int N, int K,
                 void *out, int ldc, int out_f32, float beta)
{
    constexpr int P = SWI ? 2 : 1;
    __shared__ float red[2][WARPS][P][NT][32][4]; /* the warps' partial tiles, two tiles in turn */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, j = lane % 4;
    const int chunks = (K + 31) / 32, per = (chunks + WARPS - 1) / WARPS;
    const int cb = warp * per, ce = cb + per < chunks ? cb + per : chunks;
    const int rounds = per > 0 ? (per + U - 1) / U : 1;
    const int tiles = (N + 15) / 16;
    const h16 *rp[P][2]; /* this lane's rows g and g + 8 of each row set in the current tile */
    auto rows = [&](int tile) {
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int n = 16 * tile + g + 8 * h;
                rp[p][h] = W + ((size_t)p * N + (n < N ? n : N - 1)) * K;
            }
    };
    uint4 cur[U][P][2];
    int tile = blockIdx.x;
    if (tile < tiles) {
        rows(tile);
        gs_load_w<U, P>(cur, rp, cb, ce, j, K);
    }
    gpu_pdl_wait(); /* x and the residual in out are the kernel before's */
    gpu_pdl_trigger();
    int buf = 0;
    for (; tile < tiles; tile += gridDim.x) {
        float acc[P][NT][4];
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[p][t][0] = acc[p][t][1] = acc[p][t][2] = acc[p][t][3] = 0.f;
        for (int r = 0; r < rounds; r++) {
            /* this round's activations (L1 after the first tile), issued before the next loads */
            const int c0 = cb + r * U;
            uint4 b[U][NT];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int k = 32 * (c0 + u) + 8 * j;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const int n = 8 * t + g;
                    b[u][t] = c0 + u < ce && k < K && n < T ? __ldca((const uint4 *)(x + (size_t)n * K + k))
                                                            : make_uint4(0, 0, 0, 0);
                }
            }
            /* the next round's weights (this tile's, else the next tile's first) before the MMAs */
            uint4 nxt[U][P][2];
            const int last = r + 1 == rounds, ntile = last ? tile + gridDim.x : tile;
            if (ntile < tiles) {
                if (last) rows(ntile);
                gs_load_w<U, P>(nxt, rp, cb + (last ? 0 : (r + 1) * U), ce, j, K);
            }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int p = 0; p < P; p++)
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        const uint4 &a0 = cur[u][p][0], &a1 = cur[u][p][1];
                        gs_mma(acc[p][t], a0.x, a1.x, a0.y, a1.y, b[u][t].x, b[u][t].y);
                        gs_mma(acc[p][t], a0.z, a1.z, a0.w, a1.w, b[u][t].z, b[u][t].w);
                    }
            if (ntile < tiles) {
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int p = 0; p < P; p++) cur[u][p][0] = nxt[u][p][0], cur[u][p][1] = nxt[u][p][1];
            }
        }
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int i = 0; i < 4; i++) red[buf][warp][p][t][lane][i] = acc[p][t][i];
        __syncthreads();
        /* element e of the 16 x 8 NT output tile: feature f = e % 16, row n = e / 16; it sits in
         * lane (f % 8) * 4 + (n % 8) / 2, register (f / 8) * 2 + n % 2 of n-tile n / 8 */
        for (int e = threadIdx.x; e < 128 * NT; e += WARPS * 32) {
            const int f = e % 16, n = e / 16, fr = 16 * tile + f;
            if (fr >= N || n >= T) continue;
            const int ln = (f % 8) * 4 + (n % 8) / 2, ri = (f / 8) * 2 + n % 2, t = n / 8;
            float v[P];
#pragma unroll
            for (int p = 0; p < P; p++) {
                v[p] = 0.f;
#pragma unroll
                for (int w = 0; w < WARPS; w++) v[p] += red[buf][w][p][t][ln][ri];
            }
            if (SWI) {
                ((h16 *)out)[(size_t)n * ldc + fr] =
                    h16_from(gpu_silu_mul(h16_to(h16_from(v[0])), h16_to(h16_from(v[P - 1]))));
            } else if (out_f32) {
                float *o = (float *)out + (size_t)n * ldc + fr;
                *o = beta != 0.f ? *o + v[0] : v[0];
            } else {
                ((h16 *)out)[(size_t)n * ldc + fr] = h16_from(v[0]);
            }
        }
        buf ^= 1; /* the next tile writes the other buffer: no second barrier */
    }
}

/* gemm.cu: h (T, I) h16 = SwiGLU of x · W^T, W the (2I, K) gate/up weights (gate rows first), in
 * one kernel (SWI = 1) where the small-T kernel takes T rows (gemm_small=N, gpu/tuning.h): 1 done,
 * 0 not taken (the caller runs gpu_gemm and gpu_swiglu), or a negative status. The same bits as
 * those two calls give on this kernel. (Declared here rather than in engine.cuh, which every
 * kernel file includes: forward.cu includes this header.) */
int gpu_gemm_swiglu(gpu_engine *e, int T, int I, int K, const h16 *W, const h16 *x, h16 *h);

#endif
