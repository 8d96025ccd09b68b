// gpu/gpu_xattn_ws.cu — XAttention's antidiagonal estimate on Hopper, warp-specialized, with a
// query tile's keys split over several CTAs: the estimate of a chunk after many cached keys
// (chunked prefill: often one query tile per head, which the one-CTA-per-tile kernel of
// gpu/gpu_xattn_wg.cu walks key tile after key tile on H of the 132 SMs). The host takes it when
// the query tiles are few (gpu/gpu_xattn.cu: a.nsplit > 1); whole prompts keep gpu_xattn_wg.cu's
// kernel, which measured faster there (H200, 128K, structured: index 17.8 / 36.0 ms at stride
// 16 / 8 against this kernel's 23.0 / 43.1 ms without splits; BENCHMARKS.md). Same function and
// same definitions as gpu/gpu_xattn.cu's comment (Q_r, K_r, P, Mt, the fold); B / S >= 8.
//
// One CTA = XWM = 128 reshaped query rows of one head; it walks the reshaped keys in tiles of
// XWN = 256, each tile a GEMM over the reduction S * d in chunks of 64 (one 128-byte row of the
// 128-byte swizzle), through a ring of XWST stages. Three warpgroups, warp-specialized (the
// structure of gpu/attn_prefill_ws.cu, with cp.async where that kernel has the copy engine):
//   - warpgroup 0, the producer (setmaxnreg gives most of its registers away): its 128 threads
//     copy (cp.async, 16 bytes each, zeros where the official code pads or where no position is)
//     a chunk of Q_r (128 x 64) and of K_r (256 x 64) into the stage's slot in the layout the
//     copy engine would write with CU_TENSOR_MAP_SWIZZLE_128B (16-byte piece c of row r at piece
//     c ^ (r % 8)); K_r rows through the paged cache's block table. A slot is taken once its
//     "empty" barrier says both consumers' wgmmas of the chunk it held last are done; a chunk is
//     announced on its "full" barrier once every producer thread's copies of it landed
//     (cp.async.wait_group with the next chunk's copies still in flight, then the proxy fence,
//     then the arrival; before the producer waits for its next slot), so the copies run ahead
//     of the tensor cores (two chunks in flight while the consumers multiply a third and free a
//     fourth), across tile boundaries and under the consumers' softmax;
//   - warpgroups 1 and 2, the consumers (64 query rows each, the wgmma m64 shape): per chunk,
//     wait for it to be full, issue its 64 x 256 product as 2 x 4 wgmma m64n128k16 (both
//     operands in shared memory), keep one chunk's group in flight, and free the slot of the
//     chunk before. No block-wide barrier: the two consumers run on their own.
//   - after the last chunk of a key tile, each consumer thread holds 2 rows x 64 logits in its
//     accumulators: the mask (only on tiles that cross the diagonal or the end), the row's tile
//     maximum (a quad shuffle), the running max and sum, and per key block the sum of
//     exp2(x - running max) over the block's columns (its n8 groups, then the quad) — written as
//     P[row][J], the running max as Mt[row][tile]; no logit leaves the registers. P and Mt are
//     stored row-minor (P[tile][J][row], Mt[tile][key tile][row]: the 8 rows a store
//     instruction writes are one 32-byte sector);
//   - after the last tile: with a.nsplit == 1 the consumers fold their rows into A[I][J] as the
//     mma.sync kernel does; with splits (CTA z = split sp of the tile's key tiles, a.kps each;
//     running max and sum per split) each split writes its rows' (max, sum) to a.ML and
//     xattn_fold_kernel, launched after, merges them per row and folds. A split past a tile's
//     last key tile computes nothing and writes (-inf, 0).
// Shared memory: 4 x (16 + 32) KB of operands, the rows' final max and 1 / sum, 8 barriers:
// 194 KB, one CTA per SM; the grid (heads, query tiles), heaviest tiles first, GQA heads side by
// side.
extern "C" { // sparse/sparse.h is a C header without guards of its own
#include "sparse/sparse.h"
}
#include "gpu/gpu_xattn_impl.cuh"
#include "gpu/mma.cuh"
#include "gpu/tma.cuh"
#include "gpu/wgmma.cuh"
#include <math.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define XW_SM90A 1
#endif

#define XW_THREADS 384   // the producer warpgroup and two consumers
#define XW_LAG 1         // copies in flight per producer thread besides the newest chunk's

static constexpr size_t xw_smem()
{
    return (size_t)XWST * (XW_A + XW_B) + 2 * XWM * sizeof(float) + 2 * XWST * 8 + 1024;
}

/* Fold the rows of a CTA's query tile into the block masses of its query blocks (gpu/gpu_xattn.cu):
 *   A[I][J] = sum over rows r of block I of P[r][J] * exp2(Mt[r][tile(J)] - m_r) / l_r
 * by threads idx, idx + nth, ... of the caller (P and Mt of the tile: row-minor). */
static __device__ void xw_fold(const xargs &a, const float *Pt, const float *Mtt, const float *mfin,
                               const float *linv, int ibase, int h, int idx, int nth)
{
    const int rpb = a.rpb, nb = a.nb, tpb = XWM / rpb;
    for (int qb = 0; qb < tpb; qb++) {
        const int I = ibase / rpb + qb;
        if ((long long)I * rpb >= a.nrs) break;
        float *dst = a.A + ((size_t)h * (nb - a.q0) + (I - a.q0)) * nb;
        for (int J = idx; J <= I; J += nth) {
            const int kt = (int)((long long)J * rpb / XWN);
            const float *pj = Pt + (size_t)J * XWM, *mj = Mtt + (size_t)kt * XWM;
            float s = 0.f;
            for (int r = qb * rpb; r < (qb + 1) * rpb; r++) {
                if (ibase + r >= a.nrs) break;
                s += pj[r] * exp2f(mj[r] - mfin[r]) * linv[r];
            }
            dst[J] = s;
        }
    }
}

__global__ void __launch_bounds__(XW_THREADS, 1) xattn_ws_kernel(xargs a)
{
#ifdef XW_SM90A
    extern __shared__ __align__(1024) unsigned char xw_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)xw_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sA = sm, *sB = sm + XWST * XW_A;
    float *mfin = (float *)(sB + XWST * XW_B), *linv = mfin + XWM;
    const uint32_t bars = gpu_smem_addr(linv + XWM);
#define XW_FULL(s) (bars + 8 * (s))
#define XW_EMPTY(s) (bars + 8 * (XWST + (s)))

    /* the warpgroup through a shuffle: warp-uniform for the compiler (the descriptors stay in
     * uniform registers; gpu/attn_prefill_ws.cu) */
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int tl = a.ntl - 1 - (int)blockIdx.y, h = blockIdx.x;
    const int g = a.interleave ? h % a.Hk : h / (a.H / a.Hk);
    const int ibase = a.i0 + (a.tile0 + tl) * XWM;
    const int ilast = min(ibase + XWM, a.nrs) - 1;
    const int D = a.D, S = a.S, n = a.n;
    const int KC = (S * D + XWK - 1) / XWK;
    /* this CTA's key tiles: split sp of the row's (all of them when a.nsplit == 1) */
    const int sp = blockIdx.z, kt_lo = sp * a.kps, kt_hi = min(ilast / XWN + 1, kt_lo + a.kps);
    const int ntile = kt_hi > kt_lo ? kt_hi - kt_lo : 0, steps = ntile * KC;
    const size_t pt = (size_t)h * a.ntl + tl; /* this CTA's tile of P and Mt */

    if (tid == 0) {
        for (int s = 0; s < XWST; s++) {
            gpu_mbar_init(XW_FULL(s), 128); /* every producer thread */
            gpu_mbar_init(XW_EMPTY(s), 8);  /* lane 0 of each consumer warp */
        }
        gpu_mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;\n");
        /* thread tid copies piece pc of rows r0 + 16 it (Q_r: 8 rows, K_r: 16); a key tile's
         * K_r rows (their first cache row, -1 past the end) are looked up once */
        const int pc = tid & 7, r0 = tid >> 3;
        const int swz = (pc ^ (r0 & 7)) << 4; /* (r0 + 16 it) % 8 == r0 % 8 */
        const h16 *qh = a.q + (size_t)h * D;
        const h16 *kg = a.k + (size_t)g * a.k_head;
        long long rowB[16];
        int ktB = -1;
        for (int st = 0; st < steps; st++) {
            const int s = st % XWST, kt = kt_lo + st / KC, kc = st % KC;
            if (st >= XW_LAG + 1) { /* this thread's copies of chunk st - 2 landed (st - 1's fly) */
                gpu_cp_async_wait<XW_LAG>();
                gpu_fence_proxy_async(); /* ... visible to the wgmmas (async proxy) */
                gpu_mbar_arrive(XW_FULL((st - XW_LAG - 1) % XWST));
            }
            if (kt != ktB) {
                ktB = kt;
#pragma unroll
                for (int it = 0; it < 16; it++) {
                    const int p = (kt * XWN + r0 + 16 * it) * S;
                    rowB[it] = p < n ? xw_key_row(a.tbl, a.bstride, p) : -1;
                }
            }
            const int kk = kc * XWK + pc * 8, t = kk / D, e = kk - t * D;
            gpu_mbar_wait(XW_EMPTY(s), ((st / XWST) & 1) ^ 1);
            unsigned char *dA = sA + s * XW_A + swz, *dB = sB + s * XW_B + swz;
#pragma unroll
            for (int it = 0; it < 8; it++) {
                const int i = ibase + r0 + 16 * it, pos = i * S + S - 1 - t;
                const bool va = t < S && i < a.nrs && pos < n;
                gpu_cp_async16(dA + (r0 + 16 * it) * 128,
                               va ? qh + (long long)(pos - a.q_pos0) * (long long)a.q_tok + e : a.q, va);
            }
#pragma unroll
            for (int it = 0; it < 16; it++) {
                const bool vb = t < S && rowB[it] >= 0 && (kt * XWN + r0 + 16 * it) * S + t < n;
                gpu_cp_async16(dB + (r0 + 16 * it) * 128,
                               vb ? kg + (rowB[it] + t) * (long long)a.k_tok + e : a.k, vb);
            }
            gpu_cp_async_commit();
        }
        gpu_cp_async_wait<0>();
        gpu_fence_proxy_async();
        for (int st = steps > XW_LAG + 1 ? steps - XW_LAG - 1 : 0; st < steps; st++)
            gpu_mbar_arrive(XW_FULL(st % XWST));
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n");

    /* a consumer: this thread's rows of the tile are rw and rw + 8 (the accumulator layout) */
    const int cw = wg - 1, ct = tid - 128, warp = (ct / 32) % 4, lane = tid % 32;
    const bool lane0 = lane == 0; /* the 8 consumer warps' lanes 0 free a slot */
    const int rw = cw * 64 + warp * 16 + lane / 4;
    const int iA = ibase + rw, iB = iA + 8;
    const bool okR0 = iA < a.nrs, okR1 = iB < a.nrs;
    const int wlo = ibase + cw * 64; /* the warpgroup's first row */
    const int rpb = a.rpb, gpb = rpb / 8, lg = __ffs(gpb) - 1, nb = a.nb, nkt = a.nkt;
    float *Pt = a.P + pt * nb * XWM, *Mtt = a.Mt + pt * nkt * XWM;
    const float sc = a.scale_log2;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float acc0[64], acc1[64];
#pragma unroll
    for (int x = 0; x < 64; x++) acc0[x] = acc1[x] = 0.f;

    for (int kt = kt_lo; kt < kt_hi; kt++) {
        for (int kc = 0; kc < KC; kc++) {
            const int st = (kt - kt_lo) * KC + kc, s = st % XWST;
            gpu_mbar_wait(XW_FULL(s), (st / XWST) & 1);
            const unsigned char *cA = sA + s * XW_A + cw * 64 * 128;
            const unsigned char *cB = sB + s * XW_B;
            xw_chunk_mma(acc0, acc1, cA, cB, kc);
            gpu_wgmma_wait<1>(); /* the chunk before is done: its slot is free */
            gpu_mbar_arrive_if(XW_EMPTY((st + XWST - 1) % XWST), lane0 && kc > 0);
        }
        gpu_wgmma_wait<0>();
        gpu_wgmma_fence_regs<64>(acc0);
        gpu_wgmma_fence_regs<64>(acc1);
        gpu_mbar_arrive_if(XW_EMPTY(((kt - kt_lo) * KC + KC - 1) % XWST), lane0);

        /* ---- a key tile is complete: its logits are in acc0 (columns 0..127) and acc1 */
        xw_tile_end(
            acc0, acc1, S, n, rpb, gpb, lg, sc, kt, wlo, iA, iB, okR0, okR1, lane, m0, m1, l0, l1,
            [&](int J, int r8, float v) { Pt[(size_t)J * XWM + rw + r8] = v; },
            [&](int r8, float m) { Mtt[(size_t)kt * XWM + rw + r8] = m; });
    }
    if (a.nsplit > 1) { /* the fold waits for every split: xattn_fold_kernel */
        if ((lane & 3) == 0) {
            float2 *ml = (float2 *)a.ML + (pt * a.nsplit + sp) * XWM;
            ml[rw] = okR0 ? make_float2(m0, l0) : make_float2(-INFINITY, 0.f);
            ml[rw + 8] = okR1 ? make_float2(m1, l1) : make_float2(-INFINITY, 0.f);
        }
        return;
    }
    xw_rows_final(mfin, linv, rw, lane, okR0, okR1, m0, m1, l0, l1);
    gpu_bar_sync(1, 256); /* the consumers; also orders their P / Mt writes before the reads below */
    xw_fold(a, Pt, Mtt, mfin, linv, ibase, h, ct, 256);
#undef XW_FULL
#undef XW_EMPTY
#endif
}

/* a.nsplit > 1: each row's max and sum over the splits, then the fold; grid (H, a.ntl) */
__global__ void __launch_bounds__(256) xattn_fold_kernel(xargs a)
{
    __shared__ float mfin[XWM], linv[XWM];
    const int tl = a.ntl - 1 - (int)blockIdx.y, h = blockIdx.x, tid = threadIdx.x;
    const int ibase = a.i0 + (a.tile0 + tl) * XWM;
    const size_t pt = (size_t)h * a.ntl + tl;
    if (tid < XWM) {
        const float2 *ml = (const float2 *)a.ML + pt * a.nsplit * XWM + tid;
        float m = -INFINITY, l = 0.f;
        for (int s = 0; s < a.nsplit; s++) m = fmaxf(m, ml[(size_t)s * XWM].x);
        for (int s = 0; m > -INFINITY && s < a.nsplit; s++) {
            const float2 v = ml[(size_t)s * XWM];
            if (v.x > -INFINITY) l += v.y * exp2f(v.x - m);
        }
        const bool ok = ibase + tid < a.nrs && m > -INFINITY;
        mfin[tid] = ok ? m : 0.f;
        linv[tid] = ok ? 1.f / l : 0.f;
    }
    __syncthreads();
    xw_fold(a, a.P + pt * a.nb * XWM, a.Mt + pt * a.nkt * XWM, mfin, linv, ibase, h, tid, 256);
}

int gpu_xattn_fold_launch(const xargs &a, cudaStream_t st)
{
    xattn_fold_kernel<<<dim3(a.H, a.ntl), 256, 0, st>>>(a);
    GF_LAUNCHED();
    return 0;
}

int gpu_xattn_ws_launch(const xargs &a, cudaStream_t st)
{
    const size_t smem = xw_smem();
    GF_CHECK(cudaFuncSetAttribute(xattn_ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
    xattn_ws_kernel<<<dim3(a.H, a.ntl, a.nsplit), XW_THREADS, smem, st>>>(a);
    GF_LAUNCHED();
    if (a.nsplit > 1) {
        xattn_fold_kernel<<<dim3(a.H, a.ntl), 256, 0, st>>>(a);
        GF_LAUNCHED();
    }
    return 0;
}
