// gpu/gpu_xattn_impl.cuh — what gpu/gpu_xattn.cu (the estimate, the workspace) and
// gpu/gpu_xattn_select.cu (selection, Tri-shape, CSR emission) share, and what the two Hopper
// estimates (gpu/gpu_xattn_wg.cu, gpu/gpu_xattn_ws.cu) share.
#ifndef TANDEM_GPU_XATTN_IMPL_CUH
#define TANDEM_GPU_XATTN_IMPL_CUH
#include "gpu/gpu_flex_common.cuh"
#include "gpu/gpu_xattn.h"
#include "gpu/wgmma.cuh"

#define XT 128 // reshaped query rows per CTA, reshaped keys per tile

// The estimate's arguments (gpu/gpu_xattn.cu fills them; both estimate kernels read them).
struct xargs {
    const h16 *q, *k;
    size_t q_tok, k_tok, k_head;
    const int *tbl;
    long long bstride;
    int n, q_pos0, H, Hk, D, S, rpb, interleave;
    int nrs, i0, tile0, ntl; // reshaped rows, first reshaped query row, this launch's tiles
    int nb, q0, nkt;         // key blocks, first query block, Mt's row length (key tiles)
    int nsplit, kps;         // the Hopper estimate: CTAs per query tile along the keys, key tiles each
    float scale_log2;
    float *P, *Mt, *A;
    float *ML;               // nsplit > 1: each split's (max, sum) per row, folded by a second kernel
    // the FP8 estimate (gpu/gpu_xattn_fp8.cu): Q_r of head h at q8 + (h * nq8 + i - i0) * L8,
    // K_r of KV head g at k8 + (g * nrs + j) * L8 (e4m3, rows of L8 bytes, a multiple of 128);
    // amax: the heads' largest magnitudes as float bits (H query heads, then Hk KV heads)
    const unsigned char *q8, *k8;
    int L8, nq8;
    unsigned *amax;
};

// The Hopper estimate (gpu/gpu_xattn_wg.cu): usable for this shape on this device (B / S >= 8,
// the wgmma kernels available), its key tile (Mt's tiles), and one launch of grid (H, a.ntl).
int gpu_xattn_wg_usable(int rpb);
#define XWN 256 // the Hopper estimate's key tile (reshaped keys)
int gpu_xattn_wg_launch(const xargs &a, cudaStream_t st);
// The same estimate with each query tile's keys split over a.nsplit CTAs of a.kps key tiles
// (gpu/gpu_xattn_ws.cu: grid (H, a.ntl, a.nsplit), then the kernel that merges the splits and
// folds; a.ML: (H, a.ntl, a.nsplit, 128) (max, sum) pairs). Where gpu_xattn_wg_usable.
int gpu_xattn_ws_launch(const xargs &a, cudaStream_t st);

// ---- the Hopper estimates' common parts (gpu/gpu_xattn_wg.cu's comment has their structure)
#define XWM 128          // reshaped query rows per CTA (XT: the P rows of a tile)
#define XWK 64           // reduction chunk: one 128-byte swizzled row
#define XWST 4           // ring stages
#define XW_A (XWM * 128) // bytes of a stage's Q_r chunk
#define XW_B (XWN * 128) // bytes of a stage's K_r chunk
#define XW_KVB 128       // the paged cache's block (gpu/engine.cuh)
static_assert(XWM == XT, "the P rows of a query tile");

// The cache row of reshaped key position j: through the paged cache's block table tbl (NULL: j).
__device__ __forceinline__ long long xw_key_row(const int *tbl, long long bstride, long long j)
{
    return tbl ? (long long)tbl[j / XW_KVB] * bstride + j % XW_KVB : j;
}

// A warpgroup's 64 x 256 product of reduction chunk kc (a key tile's first: kc == 0) as 2 x 4
// wgmma m64n128k16 from the stage's Q_r rows cA and K_r rows cB (128-byte swizzled), into acc0
// (columns 0..127) and acc1; committed as one group, not waited for.
__device__ __forceinline__ void xw_chunk_mma(float (&acc0)[64], float (&acc1)[64],
                                             const unsigned char *cA, const unsigned char *cB,
                                             int kc)
{
    /* (no register fence here: the previous chunk's wgmmas may still write acc0 / acc1, and
     * touching them would make ptxas wait for those first) */
    gpu_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const uint64_t da = gpu_wgmma_desc_sw128(cA + kk * 32, 16, 1024);
        const int accum = kc > 0 || kk > 0;
        gpu_wgmma_ss_m64n128(acc0, da, gpu_wgmma_desc_sw128(cB + kk * 32, 16, 1024), accum);
        gpu_wgmma_ss_m64n128(acc1, da, gpu_wgmma_desc_sw128(cB + 128 * 128 + kk * 32, 16, 1024),
                             accum);
    }
    gpu_wgmma_commit();
}

// The end of key tile kt, in registers: a thread's logits of rows iA and iB = iA + 8 (its
// accumulator rows; okR0 / okR1: rows that exist) in acc0 (the tile's columns 0..127) and acc1;
// S, n, rpb, sc: the xargs' (gpb = rpb / 8 n8 groups per key block, lg = log2 gpb). The mask
// (only on tiles that cross the diagonal of the warpgroup's rows from wlo on, or the end), the
// rows' tile maxima (a quad shuffle), the running max m and sum l, and per key block J the sum of
// exp2(x - running max) over the block's columns (its n8 groups, then the quad): stored by one
// lane of the quad as store_p(J, r8, sum) (r8: 0 for row iA, 8 for iB), the running maxima by
// lane 0 of the quad as store_m(r8, m). The kernels differ only in where P and Mt lie.
template <class StoreP, class StoreM>
__device__ __forceinline__ void xw_tile_end(float (&acc0)[64], float (&acc1)[64], int S, int n,
                                            int rpb, int gpb, int lg, float sc, int kt, int wlo,
                                            int iA, int iB, bool okR0, bool okR1, int lane,
                                            float &m0, float &m1, float &l0, float &l1,
                                            StoreP store_p, StoreM store_m)
{
    const int j0 = kt * XWN;
    const bool edge = j0 + XWN - 1 > wlo || (long long)(j0 + XWN - 1) * S >= n;
    if (edge) {
#pragma unroll
        for (int c = 0; c < 16; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = j0 + c * 8 + (lane % 4) * 2 + (e & 1), i = e < 2 ? iA : iB;
                if (j > i || (long long)j * S >= n) acc0[4 * c + e] = -INFINITY;
                if (j + 128 > i || (long long)(j + 128) * S >= n) acc1[4 * c + e] = -INFINITY;
            }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        mx0 = fmaxf(mx0, fmaxf(fmaxf(acc0[4 * c], acc0[4 * c + 1]),
                               fmaxf(acc1[4 * c], acc1[4 * c + 1])));
        mx1 = fmaxf(mx1, fmaxf(fmaxf(acc0[4 * c + 2], acc0[4 * c + 3]),
                               fmaxf(acc1[4 * c + 2], acc1[4 * c + 3])));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    /* scaled running maxima (sc > 0: the max of the scaled logits) */
    const float mn0 = fmaxf(m0, mx0 * sc), mn1 = fmaxf(m1, mx1 * sc);
    const float mr0 = mn0 == -INFINITY ? 0.f : mn0, mr1 = mn1 == -INFINITY ? 0.f : mn1;
    float b0 = 0.f, b1 = 0.f, t0 = 0.f, t1 = 0.f;
#pragma unroll
    for (int G = 0; G < 32; G++) { /* n8 group G: columns 8 G .. 8 G + 7 of the tile */
        const float *v = G < 16 ? acc0 + 4 * G : acc1 + 4 * (G - 16);
        b0 += exp2f(fmaf(v[0], sc, -mr0)) + exp2f(fmaf(v[1], sc, -mr0));
        b1 += exp2f(fmaf(v[2], sc, -mr1)) + exp2f(fmaf(v[3], sc, -mr1));
        if (((G + 1) & (gpb - 1)) == 0) { /* the last group of key block j0 / rpb + G / gpb */
            b0 += __shfl_xor_sync(0xffffffffu, b0, 1);
            b0 += __shfl_xor_sync(0xffffffffu, b0, 2);
            b1 += __shfl_xor_sync(0xffffffffu, b1, 1);
            b1 += __shfl_xor_sync(0xffffffffu, b1, 2);
            t0 += b0;
            t1 += b1;
            const int J = j0 / rpb + (G >> lg);
            if (((G >> lg) & 3) == (lane & 3)) { /* one lane of the quad stores */
                if (okR0 && J * rpb <= iA) store_p(J, 0, b0);
                if (okR1 && J * rpb <= iB) store_p(J, 8, b1);
            }
            b0 = b1 = 0.f;
        }
    }
    if (mx0 > -INFINITY) {
        l0 = (m0 == -INFINITY ? 0.f : l0 * exp2f(m0 - mn0)) + t0;
        m0 = mn0;
    }
    if (mx1 > -INFINITY) {
        l1 = (m1 == -INFINITY ? 0.f : l1 * exp2f(m1 - mn1)) + t1;
        m1 = mn1;
    }
    if ((lane & 3) == 0) {
        if (okR0) store_m(0, m0);
        if (okR1) store_m(8, m1);
    }
}

// A thread's rows rw and rw + 8 at the end: their final max and 1 / sum (0 for a row past the
// end) into mfin and linv, by lane 0 of the quad.
__device__ __forceinline__ void xw_rows_final(float *mfin, float *linv, int rw, int lane, bool okR0,
                                              bool okR1, float m0, float m1, float l0, float l1)
{
    if ((lane & 3) == 0) {
        mfin[rw] = okR0 ? m0 : 0.f;
        linv[rw] = okR0 ? 1.f / l0 : 0.f;
        mfin[rw + 8] = okR1 ? m1 : 0.f;
        linv[rw + 8] = okR1 ? 1.f / l1 : 0.f;
    }
}

struct gpu_xattn_ws {
    int cap_n, H, Hk, d, block, nb; // nb: key blocks of cap_n
    int tpl;                        // query tiles per launch of the estimate (P's size)
    int nkt;                        // key tiles per row at most (stride 1)
    int estimate;                   // the estimate's buffers are there (else lists only)
    int borrowed;                   // the buffers lie in the caller's memory (gpu_xattn_ws_new_at)
    float *P, *Mt, *A;              // partial block sums, per-tile maxima, block masses
    uint32_t *keep;                 // (H, nb, words) kept-block bits
    int *counts;                    // (H, nb)
    int32_t *row_ptr, *col;
    int fp8, fp8_used;              // gpu/gpu_xattn_fp8.h: asked for, taken by the last index
    unsigned char *f8;              // the FP8 Q_r, K_r and amax (f8_bytes; cudaMalloc'ed unless
    size_t f8_bytes;                // f8_borrowed: gpu_xattn_ws_fp8_at)
    int f8_borrowed;
};

// The FP8 estimate (gpu/gpu_xattn_fp8.cu): usable for this workspace and shape (sm_90a, the
// Hopper estimate's shapes, head_dim % 16 == 0); its buffers for a call (grows w->f8; fills
// a.q8, a.k8, a.L8, a.nq8, a.amax; 1: borrowed buffers too small, run bf16), the pre-pass (amax,
// then Q_r and K_r in e4m3), and one launch
// of the estimate over a.ntl query tiles: GPU_XATTN_FP8_WS (grid (H, a.ntl, a.nsplit), the copy
// engine, warp-specialized) or GPU_XATTN_FP8_WG (grid (H, a.ntl), a.nsplit 1; the 256-thread
// cp.async kernel of gpu/gpu_xattn_wg.cu in FP8).
int gpu_xattn_fp8_usable(const gpu_xattn_ws *w, int rpb, int nsplit);
int gpu_xattn_fp8_prep(gpu_xattn_ws *w, xargs &a, cudaStream_t st);
int gpu_xattn_fp8_launch(const gpu_xattn_ws *w, const xargs &a, cudaStream_t st);
// gpu/gpu_xattn_ws.cu's merge of key splits and fold (after a split launch with row-minor P, Mt)
int gpu_xattn_fold_launch(const xargs &a, cudaStream_t st);

// Selection of every row q0 .. nb - 1 into ws->keep / counts, then the CSR lists.
int gpu_xattn_select(gpu_xattn_ws *w, const gpu_xattn_params *p, int nb, int q0, cudaStream_t st);
// The CSR lists from ws->keep and ws->counts (rows q0 .. nb - 1).
int gpu_xattn_emit(gpu_xattn_ws *w, int nb, int q0, cudaStream_t st);

#endif
