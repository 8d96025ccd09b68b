// gpu/gpu_xattn_wg.cu — XAttention's antidiagonal estimate on Hopper's warpgroup MMA (wgmma): the
// same function as the mma.sync kernel of gpu/gpu_xattn.cu (its comment has the definitions of
// Q_r, K_r, P, Mt and the fold), on larger tiles with the softmax and the block sums in the
// accumulator registers. Taken on sm_90a when B / S >= 8 (every block of a tile's columns is
// whole n8 groups of the accumulator layout); other shapes, and other GPUs, run the mma.sync one.
//
// One CTA = XWM = 128 reshaped query rows of one head, two warpgroups (64 rows each, the wgmma
// m64 shape); it walks the reshaped keys in tiles of XWN = 256, each tile a GEMM over the
// reduction S * d in chunks of 64 (one 128-byte row of the 128-byte swizzle):
//   - all 256 threads copy (cp.async, 16 bytes each, zeros where the official code pads or where
//     no position is) a chunk of Q_r (128 x 64) and of K_r (256 x 64) into a ring of XWST stages
//     in the layout the copy engine would write with CU_TENSOR_MAP_SWIZZLE_128B (16-byte piece c
//     of row r at piece c ^ (r % 8)); K_r rows through the paged cache's block table. The copies
//     run two stages ahead: stage s + 2 is written into the slot of stage s - 2, whose wgmmas
//     every thread waited for before the barrier of stage s;
//   - each warpgroup issues its 64 x 256 product of the chunk as 2 x 4 wgmma m64n128k16 (both
//     operands in shared memory) and keeps one chunk's group in flight while the next chunk's
//     copies are issued;
//   - after the last chunk of a key tile, each thread holds 2 rows x 64 logits in its
//     accumulators: the mask (only on tiles that cross the diagonal or the end), the row's tile
//     maximum (a quad shuffle), the running max and sum, and per key block the sum of
//     exp2(x - running max) over the block's columns (its n8 groups, then the quad) — written as
//     P[row][J], the running max as Mt[row][tile]; no logit leaves the registers;
//   - after the last tile, the CTA folds its rows into A[I][J] as the mma.sync kernel does.
// Shared memory: 4 x (16 + 32) KB of operands, the rows' final max and 1 / sum: 194 KB, one CTA
// per SM; the grid (heads, query tiles), heaviest tiles first, GQA heads side by side.
extern "C" { // sparse/sparse.h is a C header without guards of its own
#include "sparse/sparse.h"
}
#include "gpu/gpu_xattn_impl.cuh"
#include "gpu/mma.cuh"
#include "gpu/wgmma.cuh"
#include <math.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define XW_SM90A 1
#endif

static constexpr size_t xw_smem()
{
    return (size_t)XWST * (XW_A + XW_B) + 2 * XWM * sizeof(float) + 1024;
}

__global__ void __launch_bounds__(256, 1) xattn_wg_kernel(xargs a)
{
#ifdef XW_SM90A
    extern __shared__ __align__(1024) unsigned char xw_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)xw_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sA = sm, *sB = sm + XWST * XW_A;
    float *mfin = (float *)(sB + XWST * XW_B), *linv = mfin + XWM;

    /* the warpgroup through a shuffle: warp-uniform for the compiler (the descriptors stay in
     * uniform registers; gpu/attn_prefill_ws.cu) */
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int warp = (tid / 32) % 4, lane = tid % 32;
    const int tl = a.ntl - 1 - (int)blockIdx.y, h = blockIdx.x;
    const int g = a.interleave ? h % a.Hk : h / (a.H / a.Hk);
    const int ibase = a.i0 + (a.tile0 + tl) * XWM;
    const int ilast = min(ibase + XWM, a.nrs) - 1;
    const int D = a.D, S = a.S, n = a.n;
    const int KC = (S * D + XWK - 1) / XWK;
    const int steps = (ilast / XWN + 1) * KC;
    const h16 *qh = a.q + (size_t)h * D;
    const h16 *kg = a.k + (size_t)g * a.k_head;

    /* the loader: thread tid copies piece pc of rows r0 + 32 it (Q_r: 4 rows, K_r: 8); per row
     * what does not change between chunks is kept (gpu/gpu_xattn.cu's loader) */
    const int pc = tid & 7, r0 = tid >> 3;
    const int swz = (pc ^ (r0 & 7)) << 4; /* (r0 + 32 it) % 8 == r0 % 8 */
    const h16 *baseA[4];
    int posA[4], posB[8];
    bool okA[4];
    long long rowB[8];
#pragma unroll
    for (int it = 0; it < 4; it++) {
        const int i = ibase + r0 + 32 * it;
        posA[it] = i * S + S - 1;
        okA[it] = i < a.nrs;
        baseA[it] = okA[it] ? qh + (long long)(posA[it] - a.q_pos0) * (long long)a.q_tok : a.q;
    }
#pragma unroll
    for (int it = 0; it < 8; it++) {
        posB[it] = 0;
        rowB[it] = 0;
    }
    int ktB = -1;
    auto load = [&](int st) {
        const int buf = st % XWST, kt = st / KC, kc = st - kt * KC;
        if (kt != ktB) {
            ktB = kt;
#pragma unroll
            for (int it = 0; it < 8; it++) {
                posB[it] = (kt * XWN + r0 + 32 * it) * S;
                rowB[it] = posB[it] < n ? xw_key_row(a.tbl, a.bstride, posB[it]) : 0;
            }
        }
        const int kk = kc * XWK + pc * 8, t = kk / D, e = kk - t * D;
        unsigned char *dA = sA + buf * XW_A + swz, *dB = sB + buf * XW_B + swz;
#pragma unroll
        for (int it = 0; it < 4; it++) {
            const bool va = t < S && okA[it] && posA[it] - t < n;
            gpu_cp_async16(dA + (r0 + 32 * it) * 128,
                           va ? baseA[it] - (long long)t * (long long)a.q_tok + e : a.q, va);
        }
#pragma unroll
        for (int it = 0; it < 8; it++) {
            const bool vb = t < S && posB[it] + t < n;
            gpu_cp_async16(dB + (r0 + 32 * it) * 128,
                           vb ? kg + (rowB[it] + t) * (long long)a.k_tok + e : a.k, vb);
        }
    };

    /* this thread's rows of the tile: rw and rw + 8 (the accumulator layout) */
    const int rw = wg * 64 + warp * 16 + lane / 4;
    const int iA = ibase + rw, iB = iA + 8;
    const bool okR0 = iA < a.nrs, okR1 = iB < a.nrs;
    const size_t prow = ((size_t)h * a.ntl + tl) * XWM + rw;
    const int wlo = ibase + wg * 64; /* the warpgroup's first row */
    const int rpb = a.rpb, gpb = rpb / 8, lg = __ffs(gpb) - 1, nb = a.nb, nkt = a.nkt;
    const float sc = a.scale_log2;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float acc0[64], acc1[64];
#pragma unroll
    for (int x = 0; x < 64; x++) acc0[x] = acc1[x] = 0.f;

#pragma unroll
    for (int s = 0; s < XWST - 2; s++) {
        if (s < steps) load(s);
        gpu_cp_async_commit();
    }
    const int ntile = steps / KC;
    for (int kt = 0; kt < ntile; kt++) {
        for (int kc = 0; kc < KC; kc++) {
            const int st = kt * KC + kc;
            gpu_cp_async_wait<XWST - 3>(); /* this thread's copies of stage st */
            gpu_fence_proxy_async();        /* ... visible to the wgmmas (async proxy) */
            __syncthreads();                /* everyone's; and everyone's wgmmas of st - 2 done */
            if (st + XWST - 2 < steps) load(st + XWST - 2);
            gpu_cp_async_commit();
            const unsigned char *cA = sA + (st % XWST) * XW_A + wg * 64 * 128;
            const unsigned char *cB = sB + (st % XWST) * XW_B;
            xw_chunk_mma(acc0, acc1, cA, cB, kc);
            gpu_wgmma_wait<1>(); /* the chunk before: its slot is free after the next barrier */
        }
        gpu_wgmma_wait<0>();
        gpu_wgmma_fence_regs<64>(acc0);
        gpu_wgmma_fence_regs<64>(acc1);

        /* ---- a key tile is complete: its logits are in acc0 (columns 0..127) and acc1 */
        xw_tile_end(
            acc0, acc1, S, n, rpb, gpb, lg, sc, kt, wlo, iA, iB, okR0, okR1, lane, m0, m1, l0, l1,
            [&](int J, int r8, float v) { a.P[(prow + r8) * nb + J] = v; },
            [&](int r8, float m) { a.Mt[(prow + r8) * nkt + kt] = m; });
    }
    xw_rows_final(mfin, linv, rw, lane, okR0, okR1, m0, m1, l0, l1);
    __syncthreads(); /* also orders this CTA's P / Mt writes before the reads below */

    /* ---- fold the rows into the block masses of the CTA's query blocks (gpu/gpu_xattn.cu) */
    const int tpb = XWM / rpb;
    const size_t p0 = ((size_t)h * a.ntl + tl) * XWM;
    for (int qb = 0; qb < tpb; qb++) {
        const int I = ibase / rpb + qb;
        if ((long long)I * rpb >= a.nrs) break;
        float *dst = a.A + ((size_t)h * (nb - a.q0) + (I - a.q0)) * nb;
        for (int J = tid; J <= I; J += 256) {
            const int kt = (int)((long long)J * rpb / XWN);
            float s = 0.f;
            for (int r = qb * rpb; r < (qb + 1) * rpb; r++) {
                if (ibase + r >= a.nrs) break;
                s += a.P[(p0 + r) * nb + J] * exp2f(a.Mt[(p0 + r) * nkt + kt] - mfin[r]) * linv[r];
            }
            dst[J] = s;
        }
    }
#endif
}

int gpu_xattn_wg_usable(int rpb)
{
    return rpb >= 8 && rpb <= XWM && gpu_flex_ws_here();
}

int gpu_xattn_wg_launch(const xargs &a, cudaStream_t st)
{
    const size_t smem = xw_smem();
    GF_CHECK(cudaFuncSetAttribute(xattn_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
    xattn_wg_kernel<<<dim3(a.H, a.ntl), 256, smem, st>>>(a);
    GF_LAUNCHED();
    return 0;
}
