/* gpu/tls_kernels.cu — AsyncTLS sparse decode's kernels (gpu/tls.cuh has the plan).
 *
 * Arithmetic: every score is computed in sparse/tls.c's order with rounded operations
 * (__fmul_rn / __fadd_rn / __fdiv_rn: no contraction into FMA, which the C reference, built as
 * ISO C, never does), so from the same K and q the scores are the CPU's bits and the selection is
 * the CPU's selection, ties included (score descending, ties to the lower index, NaN last):
 *   level 1: Q+ / Q- summed over the group's heads in head order; each of the two dot products
 *            in 8 lanes (lane = channel mod 8, channels in order), reduced 4+4, 2+2, 1+1
 *   level 2: qbar_i = (sum over heads in order) / G, qsum in channel order, the same dot8 over
 *            the codes, score = lstep * dot + lmin * qsum
 * Top-k: a radix select of the k-th key (passes of 8 bits over an order-preserving uint32 of the
 * score; NaN the lowest key, -0 as +0), then the keys above it and the first of the equal ones
 * by index; lists written ascending. It stops early once the chosen digit's keys are exactly the
 * ones missing (then every key matching the prefix is in and no tie is left to break). The CTAs
 * of a cluster score contiguous ranges of the indices. Level 1, while its blocks are few (at most
 * 4 per thread and TLS_LOCAL_MAX: 64K positions at block 64 in CTAs of 256 threads, 128K in
 * CTAs of 512), is selected by every CTA alone: each stores its range into every CTA's shared
 * memory, then selects from the whole array with CTA barriers only (tls_cta_select,
 * tls_cta_list: one cluster barrier in all). Else, and at level 2 (8,192 candidates: selecting
 * them in every CTA measured slower, 2026-11-29), the select runs over the cluster (tls_cl_topk):
 * each pass sums the CTAs' histograms through distributed shared memory, and the kept list is
 * handed out through it. Both give the same lists. */
#include "gpu/mma.cuh"
#include "gpu/tls_topk.cuh"
#include <pthread.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- summaries */

__global__ void __launch_bounds__(128) tls_rebuild_k(gpu_tls_cfg c, gpu_seq_dev sq0, gpu_seq_dev hi,
                                                     int split, gpu_tls_dev t, int b0, int to)
{
    const int b = b0 + blockIdx.x, g = blockIdx.y, l = blockIdx.z, hd = c.hd;
    const gpu_seq_dev &sq = l >= split ? hi : sq0;
    const int p0 = b * c.bs, p1 = min(p0 + c.bs, to);
    if (p0 >= p1) return;
    const size_t lg = (size_t)l * c.n_kv + g;
    for (int ch = threadIdx.x; ch < hd; ch += blockDim.x) {
        float M = h16_to(tls_krow(sq, sq.k, l, c.n_kv, g, hd, p0)[ch]), m = M;
        for (int p = p0 + 1; p < p1; p++) {
            float x = h16_to(tls_krow(sq, sq.k, l, c.n_kv, g, hd, p)[ch]);
            M = x > M ? x : M;
            m = x < m ? x : m;
        }
        h16 *o = t.mm + (lg * t.nbc + b) * 2 * hd;
        o[ch] = h16_from(M);
        o[hd + ch] = h16_from(m);
    }
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int p = p0 + warp; p < p1; p += nw)
        tls_label_warp(tls_krow(sq, sq.k, l, c.n_kv, g, hd, p), c.ch + lg * c.r, c.r,
                       t.code + (lg * t.cap + p) * (c.r / 2), t.lab + lg * t.cap + p);
}

int gpu_tls_rebuild(cudaStream_t s, const gpu_tls_cfg &c, const gpu_seq_dev &sq,
                    const gpu_tls_dev &t, int from, int to, const gpu_seq_dev *hi, int split)
{
    if (to <= from) return ACCEL_OK;
    const int b0 = from / c.bs, b1 = (to + c.bs - 1) / c.bs;
    tls_rebuild_k<<<dim3(b1 - b0, c.n_kv, c.L), 128, 0, s>>>(c, sq, hi ? *hi : sq, hi ? split : c.L,
                                                            t, b0, to);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

size_t gpu_tls_seq_bytes(const gpu_tls_cfg &c, int cap)
{
    const size_t lh = (size_t)c.L * c.n_kv, nbc = (cap + c.bs - 1) / c.bs, words = (nbc + 31) / 32;
    size_t b = 256; /* counters */
    b += (lh * nbc * 2 * c.hd * sizeof(h16) + 255) & ~(size_t)255;
    b += (lh * cap * sizeof(float2) + 255) & ~(size_t)255;
    b += (lh * words * 4 + 255) & ~(size_t)255;
    b += (lh * (2 + GPU_TLS_MAX_CAND / c.bs) * 4 + 255) & ~(size_t)255; /* sg */
    b += (lh * 2 * c.hd * 4 + 255) & ~(size_t)255;                      /* sa */
    b += lh * cap * (c.r / 2);
    return b;
}

void gpu_tls_seq_carve(const gpu_tls_cfg &c, void *mem, int cap, gpu_tls_dev *t)
{
    const size_t lh = (size_t)c.L * c.n_kv, nbc = (cap + c.bs - 1) / c.bs, words = (nbc + 31) / 32;
    unsigned char *p = (unsigned char *)mem;
    t->cnt = (unsigned long long *)p, p += 256;
    t->mm = (h16 *)p, p += (lh * nbc * 2 * c.hd * sizeof(h16) + 255) & ~(size_t)255;
    t->lab = (float2 *)p, p += (lh * cap * sizeof(float2) + 255) & ~(size_t)255;
    t->prev = (unsigned *)p, p += (lh * words * 4 + 255) & ~(size_t)255;
    t->kmax = GPU_TLS_MAX_CAND / c.bs;
    t->sg = (int *)p, p += (lh * (2 + t->kmax) * 4 + 255) & ~(size_t)255;
    t->sa = (float *)p, p += (lh * 2 * c.hd * 4 + 255) & ~(size_t)255;
    t->code = p;
    t->cap = cap;
    t->nbc = (int)nbc;
    t->words = (int)words;
}

/* TANDEM_TLS_EARLY=0 (A/B): a staggered row's set built after the PDL wait, as before 2026-11-29
 * tlslat; else before it (gpu_tls_kernels_init sets it per device). */
__constant__ int tls_early_c;

/* The phase trace (gpu_tls_cfg.trace): 0 start, 1 the query in, 2 level 1 scored, 3 its top-k,
 * 4 the kept blocks' list, 5 level 2 scored, 6 its top-k, 7 the kept positions' lists, 8 the
 * attention's loop, 9 the CTA's partial, 10 the cluster's merge. */
#define TLS_MARK(i)                                                                                \
    do {                                                                                           \
        if (c.trace && tid == 0 && rank == 0 && b == 0 && g == 0) c.trace[i] = gpu_globaltimer();  \
    } while (0)

/* ---------------------------------------------------------------- a CTA's exact attention
 * The keys a CTA attends (list[0 .. mine-1] as candidate indices, or first .. first+mine-1) in
 * tiles of TK keys, each in three steps with a CTA barrier between them, so that the loads of a
 * step are all in flight at once and no warp's state needs merging:
 *   scores  each warp takes whole n-tiles of 8 keys: the 4 lanes of a key load its K row in
 *           16-byte pieces (every n-tile of the warp's batch at once), the tensor cores take the
 *           group's heads as the 16 rows of A (h16 q, float accumulation; the channel order
 *           permuted alike in A and B: a dot product does not depend on it), the scores (log2
 *           domain) into shared memory and each warp's max per head; the V rows requested into
 *           L2 meanwhile
 *   softmax the tile's max per head over the warps (and the tiles before), p = 2^(s - max) in
 *           place, the warps' sums per head
 *   P V     a warp per key (strided), a lane per 4 channels: every head's p x V summed in key
 *           order into the lane's registers (rescaled once a tile when the max grows)
 * then the warps' sums added in warp order per (head, channel): S.po, and S.pml = (max, sum) per
 * head, the CTA's partial the cluster merge takes. Fixed orders throughout: the same bits every
 * run. The scores' sums are the tensor cores' (not sparse/tls.c's order: the attention is
 * checked against cpu_tls_attend within the decode attention's bound, not bit for bit). */
/* NB: n-tiles a warp loads at once (4 at GM 4 spilled in ptxas: 128 registers a thread at 512
 * threads); PB: V rows a lane loads at once. */
template <int GM> struct tls_att_shape {
    static constexpr int NB = GM <= 8 ? 2 : 1;
    static constexpr int PB = GM <= 8 ? 16 : 8;
};

/* The tile loop: acc[h][e] (head h, channel 4 x lane + e, this warp's keys) relative to *mrun
 * (the running max of this thread's head tid % GM), *lrun (thread h < G: head h's sum). */
template <int GM, int NT, int CL>
__device__ __forceinline__ void tls_attend_tiles(tls_smem<NT, CL> &S, const gpu_seq_dev &sq,
                                                 size_t lg, int hd, int G, int bsh, const int *list,
                                                 int first, int mine, float (&acc)[GM][4],
                                                 float *mrun, float *lrun)
{
    constexpr int NW = NT / 32, NB = tls_att_shape<GM>::NB, PB = tls_att_shape<GM>::PB;
    constexpr bool HI = GM > 8; /* heads 8 .. 15 in A's rows 8 .. 15 */
    /* in the selection's union (free once the lists are out): A's fragments (rows 0-7, then
     * 8-15 when HI, per 32-channel piece and lane), then a tile's scores, then p, (key, head),
     * and each key's row of the cache */
    constexpr int QF = (HI ? 2 : 1) * 4 * 32;
    constexpr int TK = (int)((sizeof(S.u) - QF * 16) / (4 * GM + 8)) & ~7;
    static_assert(TK >= 8, "the selection's union holds no tile of the attention");
    uint4 *qf = reinterpret_cast<uint4 *>(&S.u);
    float *sp = reinterpret_cast<float *>(qf + QF);
    long long *srw = reinterpret_cast<long long *>(sp + GM * TK);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
    const int hh = tid & (GM - 1), c4 = lane * 4, nch = (hd + 31) >> 5;
    const bool chan = c4 < hd;
    const float scl = rsqrtf((float)hd) * 1.4426950408889634f; /* log2 domain */
    /* A: lane l holds row l / 4 (and + 8) of the group's queries, channels 32i + 8 (l % 4) .. +7
     * of piece i (the queries are h16 values held as floats: packed back exactly) */
    if (warp == 0)
        for (int x = 0; x < QF / 32; x++) {
            const int hr = g8 + 8 * (x >> 2), c0 = 32 * (x & 3) + 8 * t4;
            unsigned w[4] = {0u, 0u, 0u, 0u};
            if (hr < G && c0 < hd)
#pragma unroll
                for (int y = 0; y < 4; y++)
                    w[y] = gpu_pack_h16(S.q[hr * hd + c0 + 2 * y], S.q[hr * hd + c0 + 2 * y + 1]);
            qf[x * 32 + lane] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    __syncthreads();
    for (int k0 = 0; k0 < mine; k0 += TK) {
        const int kt = min(TK, mine - k0), ntl = (kt + 7) >> 3;
        /* scores: n-tile z of the tile is warp z % NW's */
        float wmax[2] = {-INFINITY, -INFINITY};
        for (int z0 = warp; z0 < ntl; z0 += NW * NB) {
            uint4 kw[NB][4];
#pragma unroll
            for (int u = 0; u < NB; u++) {
                const int key = (z0 + u * NW) * 8 + g8;
                const bool ok = z0 + u * NW < ntl && key < kt;
                long long row = 0;
                if (ok) {
                    int pp;
                    const int jj = k0 + key;
                    row = (long long)lg * sq.cap + (list ? tls_cand_row(S, sq, bsh, list[jj], &pp)
                                                         : gpu_kv_row(sq.map, first + jj));
                    if (t4 == 0) srw[key] = row;
                    /* the V row's 128-byte lines, for the P V step */
                    if (t4 < 2 && t4 * 64 < hd)
                        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(sq.v + row * hd + t4 * 64));
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
                    kw[u][i] = ok && i < nch && 32 * i + 8 * t4 < hd
                                   ? *(const uint4 *)(sq.k + row * hd + 32 * i + 8 * t4)
                                   : make_uint4(0u, 0u, 0u, 0u);
            }
            float cc[NB][4];
#pragma unroll
            for (int u = 0; u < NB; u++)
#pragma unroll
                for (int x = 0; x < 4; x++) cc[u][x] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (i >= nch) break;
                const uint4 fa = qf[i * 32 + lane],
                            fb = HI ? qf[(4 + i) * 32 + lane] : make_uint4(0u, 0u, 0u, 0u);
                const unsigned a0[4] = {fa.x, fb.x, fa.y, fb.y}, a1[4] = {fa.z, fb.z, fa.w, fb.w};
#pragma unroll
                for (int u = 0; u < NB; u++) {
                    gpu_mma_h16(cc[u], a0, kw[u][i].x, kw[u][i].y);
                    gpu_mma_h16(cc[u], a1, kw[u][i].z, kw[u][i].w);
                }
            }
            /* cc[u]: (head g8, keys 2 t4 and +1 of n-tile z0 + u NW), (head g8 + 8, the same) */
#pragma unroll
            for (int u = 0; u < NB; u++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int key = (z0 + u * NW) * 8 + 2 * t4 + j;
                    const bool ok = z0 + u * NW < ntl && key < kt;
                    const float s0 = ok ? cc[u][j] * scl : -INFINITY,
                                s1 = ok ? cc[u][2 + j] * scl : -INFINITY;
                    if (ok && g8 < G) sp[key * GM + g8] = s0;
                    if (HI && ok && g8 + 8 < G) sp[key * GM + g8 + 8] = s1;
                    wmax[0] = fmaxf(wmax[0], s0);
                    wmax[1] = fmaxf(wmax[1], s1);
                }
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            wmax[0] = fmaxf(wmax[0], __shfl_xor_sync(0xffffffffu, wmax[0], o));
            wmax[1] = fmaxf(wmax[1], __shfl_xor_sync(0xffffffffu, wmax[1], o));
        }
        if (t4 == 0 && g8 < G) S.wm[warp][g8] = wmax[0];
        if (HI && t4 == 0 && g8 + 8 < G) S.wm[warp][g8 + 8] = wmax[1];
        __syncthreads();
        /* softmax: thread tid takes head hh (NT is a multiple of GM) */
        float mt = *mrun;
        if (hh < G)
            for (int w = 0; w < NW; w++) mt = fmaxf(mt, S.wm[w][hh]);
        const float mref = mt == -INFINITY ? 0.0f : mt, corr = exp2f(*mrun - mref);
        float ls = 0.0f;
        if (hh < G)
            for (int x = tid; x < kt * GM; x += NT) {
                const float pe = exp2f(sp[x] - mref);
                sp[x] = pe;
                ls += pe;
            }
#pragma unroll
        for (int o = GM; o < 32; o <<= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
        if (lane < GM && hh < G) S.wl[warp][hh] = ls;
        if (tid < G) S.tc[tid] = corr;
        *mrun = mt;
        __syncthreads();
        if (tid < G) {
            float lt = 0.0f;
            for (int w = 0; w < NW; w++) lt += S.wl[w][tid];
            *lrun = *lrun * corr + lt;
        }
        /* P V: key k of the tile is warp k % NW's */
#pragma unroll
        for (int h = 0; h < GM; h++) {
            if (h >= G) break;
            const float f = S.tc[h];
#pragma unroll
            for (int e = 0; e < 4; e++) acc[h][e] *= f;
        }
        for (int b0 = warp; b0 < kt; b0 += NW * PB) {
            uint2 vx[PB];
#pragma unroll
            for (int u = 0; u < PB; u++) {
                const int key = b0 + u * NW;
                vx[u] = key < kt && chan ? *(const uint2 *)(sq.v + srw[key] * hd + c4)
                                         : make_uint2(0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < PB; u++) {
                const int key = b0 + u * NW;
                if (key >= kt) break;
                float pr[GM];
#pragma unroll
                for (int h4 = 0; h4 < GM; h4 += 4) {
                    const float4 p4 = *(const float4 *)&sp[key * GM + h4];
                    pr[h4] = p4.x, pr[h4 + 1] = p4.y, pr[h4 + 2] = p4.z, pr[h4 + 3] = p4.w;
                }
                const h16 *ve = (const h16 *)&vx[u];
                float vf[4];
#pragma unroll
                for (int e = 0; e < 4; e++) vf[e] = h16_to(ve[e]);
#pragma unroll
                for (int h = 0; h < GM; h++) {
                    if (h >= G) break;
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[h][e] += pr[h] * vf[e];
                }
            }
        }
        __syncthreads(); /* sp, srw, tc, wm and wl are rewritten next (or wo, which they share) */
    }
}

/* The warps' sums added in warp order per (head, channel), four heads per CTA barrier, into
 * S.po; S.pml[h] = (max, sum) of head h. */
template <int GM, int NT, int CL>
__device__ __forceinline__ void tls_attend_partial(tls_smem<NT, CL> &S, int hd, int G,
                                                   const float (&acc)[GM][4], float mrun,
                                                   float lrun)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, c4 = lane * 4;
#pragma unroll
    for (int h = 0; h < GM; h++) {
        if (h >= G) break;
        if (c4 < hd)
            *(float4 *)&S.u.wo[warp][(h & 3) * 128 + c4] =
                make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        if ((h & 3) != 3 && h != G - 1) continue;
        __syncthreads();
        const int h0 = h & ~3;
        for (int x = tid; x < (h - h0 + 1) * hd; x += NT) {
            const int hx = h0 + x / hd, ch = x - (x / hd) * hd;
            float o = 0.0f;
            for (int w = 0; w < NT / 32; w++) o += S.u.wo[w][(hx & 3) * 128 + ch];
            S.po[hx * hd + ch] = o;
        }
        if (h + 1 < G) __syncthreads(); /* wo is rewritten for the next four heads */
    }
    if (tid < G) S.pml[tid] = make_float2(mrun, lrun);
}

/* Code l (0 .. 7) of a label word as a float, from lo / hi: the word's even / odd codes, one a
 * byte (w & 0x0f0f0f0f, w >> 4 & 0x0f0f0f0f). The byte goes into the low byte of 2^23
 * (0x4b000000): 2^23 + c exactly, minus 2^23 is c exactly, on the integer and FP32 pipes where
 * (float)c is an I2F, a conversion (16 a clock per SM). Measured 2026-11-29 (tlsl2, BENCHMARKS.md):
 * level 2 at 32K batch 8 from 11.1 to 10.4 µs. */
__device__ __forceinline__ float tls_code_f(unsigned lo, unsigned hi, int l)
{
    const unsigned x = __byte_perm(l & 1 ? hi : lo, 0x4b000000u, 0x7440u | (unsigned)(l >> 1));
    return __fsub_rn(__uint_as_float(x), 8388608.0f);
}

/* Level 2's scores of this CTA's candidates lo2 .. lo2 + n2 - 1 into sc (r a multiple of 8 up to
 * 32): TLS_CAND candidates' labels requested at once a thread, word k of a label holding codes
 * 8k .. 8k+7, 4 bits each, the lowest first. The CPU's order: dot8 over the codes (lane = channel
 * mod 8), then lstep * dot + lmin * qsum. */
template <int NT, int CL>
__device__ void tls_l2_scores(const tls_smem<NT, CL> &S, const unsigned char *code0, const float2 *lab0, int r,
                              int bsh, int lo2, int n2, float qsum, float *sc)
{
    const int tid = threadIdx.x, nw = r / 8, bs = 1 << bsh;
    float qs[32]; /* the group-averaged query's selected channels, in registers */
#pragma unroll
    for (int e = 0; e < 32; e++) qs[e] = e < r ? S.qsel[e] : 0.0f;
    for (int i0 = tid; i0 < n2; i0 += TLS_CAND * NT) {
        unsigned wd[TLS_CAND][4];
        float2 lb[TLS_CAND];
#pragma unroll
        for (int u = 0; u < TLS_CAND; u++) {
            const int i = i0 + u * NT;
            if (i < n2) {
                const int j = lo2 + i, pp = (S.kept[j >> bsh] << bsh) + (j & (bs - 1));
                const unsigned *wp = (const unsigned *)(code0 + (size_t)pp * (r / 2));
#pragma unroll
                for (int k4 = 0; k4 < 4; k4++)
                    if (k4 < nw) wd[u][k4] = wp[k4];
                lb[u] = lab0[pp];
            }
        }
#pragma unroll
        for (int u = 0; u < TLS_CAND; u++) {
            const int i = i0 + u * NT;
            if (i >= n2) break;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
            for (int k4 = 0; k4 < 4; k4++) {
                if (k4 >= nw) break;
                const unsigned lo = wd[u][k4] & 0x0f0f0f0fu, hi = (wd[u][k4] >> 4) & 0x0f0f0f0fu;
#pragma unroll
                for (int l = 0; l < 8; l++)
                    acc[l] = __fadd_rn(acc[l], __fmul_rn(qs[k4 * 8 + l], tls_code_f(lo, hi, l)));
            }
#pragma unroll
            for (int wdt = 4; wdt >= 1; wdt >>= 1)
#pragma unroll
                for (int l = 0; l < wdt; l++) acc[l] = __fadd_rn(acc[l], acc[l + wdt]);
            sc[i] = __fadd_rn(__fmul_rn(lb[u].y, acc[0]), __fmul_rn(lb[u].x, qsum));
        }
    }
}

/* ---------------------------------------------------------------- one layer in one kernel
 * One cluster of CL CTAs of NT threads per (row, KV head): the newest key's summaries, level
 * 1 over the CTAs' ranges of blocks, its top-k (in every CTA, or over the cluster), the kept
 * blocks' list and their block-table entries in every CTA, level 2 over the CTAs' ranges of the
 * candidates, the cluster's top-k of them, the kept keys (as candidate indices) spread evenly
 * over the CTAs, each CTA's exact attention over its share (rows from the kept blocks' table
 * entries: no table read per key), and the CTAs' partials merged through distributed shared
 * memory. A dense row (on == 0) attends keys 0 .. n-1, an eighth per CTA. */
template <int GM, int NT, int CL>
__global__ void __launch_bounds__(NT, 512 / NT)
tls_layer_k(gpu_tls_cfg c, int layer, const h16 *q, const int *pos, const gpu_seq_dev *seqs,
            const gpu_tls_dev *tls, h16 *out)
{
    extern __shared__ __align__(16) unsigned char tls_smem_raw[];
    tls_smem<NT, CL> &S = *reinterpret_cast<tls_smem<NT, CL> *>(tls_smem_raw);
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank(), g = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, nt = NT;
    const int hd = c.hd, G = c.n_heads / c.n_kv, bs = c.bs, r = c.r, bsh = __ffs(bs) - 1;
    const gpu_tls_dev t = tls[b];
    const gpu_seq_dev sq = seqs[b];
    const int p = pos[b], n = p + 1;
    const size_t lg = (size_t)layer * c.n_kv + g;
    TLS_MARK(0);
    /* (A0) the first cluster barrier's arrive: its wait, before the first store into another
     * CTA's shared memory, returns once every CTA of the cluster has started */
    tls_cl_arrive();
    /* before the QKV kernel is done (PDL): the step's rows and the summaries were written before
     * it; this CTA's range of block max / min rows is requested into L2 */
    if (t.on && tid == 0) {
        const int nb = (n + bs - 1) / bs, per1 = ((nb + CL - 1) / CL + 31) & ~31;
        const int lo1 = rank * per1, n1 = max(0, min(nb - lo1, per1));
        if (nb > t.block_budget && n1 > 0 && t.stagger != 1)
            gpu_l2_prefetch(t.mm + (lg * t.nbc + lo1) * 2 * hd, 0, (unsigned)n1 * 4u * hd);
    }
    /* a staggered row's attention set and its blocks' table entries, before the wait too: sg
     * was written by the step before's next-step launch, the table before the step */
    int nk_early = 0;
    if (t.on && t.stagger == 1 && tls_early_c) {
        nk_early = tls_stagger_set(t, lg, (n + bs - 1) / bs, S.kept);
        for (int j = tid; j < nk_early; j += nt)
            S.ktb[j] = sq.map.tbl ? sq.map.tbl[(S.kept[j] * bs) >> GPU_KV_SHIFT] : 0;
    }
    gpu_pdl_wait(); /* q, and the newest key the QKV kernel wrote */
    gpu_pdl_trigger();
    {
        const h16 *qg = q + (size_t)b * c.n_heads * hd + (size_t)g * G * hd;
        for (int i = tid; i < G * hd; i += nt) S.q[i] = h16_to(qg[i]);
    }
    if (tid < 2) S.st[tid] = 0;
    int *cnt = c.cnt_idx + (size_t)b * c.n_kv + g;
    int *idx = c.idx + ((size_t)b * c.n_kv + g) * GPU_TLS_MAX_TOKENS;
    int mine, first = 0; /* this CTA's keys: list[0 .. mine-1], or first .. first+mine-1 */
    const int *list = NULL;
    __syncthreads();
    TLS_MARK(1);
    if (!t.on) {
        tls_cl_wait(); /* A0 */
        const int sl = (n + CL - 1) / CL;
        first = min(rank * sl, n);
        mine = min(n - first, sl);
        if (rank == 0 && tid == 0) *cnt = -n;
    } else {
        const int nb = (n + bs - 1) / bs, last = nb - 1;
        const int per1 = ((nb + CL - 1) / CL + 31) & ~31; /* whole bitmap words */
        const int lo1 = rank * per1, n1 = max(0, min(nb - lo1, per1));
        h16 *mm = t.mm + lg * t.nbc * 2 * hd;
        if (last >= lo1 && last < lo1 + per1) {
            /* the newest key into its block's max / min and its label (sparse_tls_put) */
            const h16 *k = tls_krow(sq, sq.k, layer, c.n_kv, g, hd, p);
            h16 *o = mm + (size_t)last * 2 * hd;
            const int fresh = p % bs == 0;
            for (int ch = tid; ch < hd; ch += nt) {
                float x = h16_to(k[ch]);
                float M = fresh ? x : h16_to(o[ch]), m = fresh ? x : h16_to(o[hd + ch]);
                if (!fresh) {
                    M = x > M ? x : M;
                    m = x < m ? x : m;
                }
                o[ch] = h16_from(M);
                o[hd + ch] = h16_from(m);
            }
            if (tid < 32)
                tls_label_warp(k, c.ch + lg * r, r, t.code + (lg * t.cap + p) * (r / 2),
                               t.lab + lg * t.cap + p);
        }
        if (tid < hd) {
            float a = 0.0f, z = 0.0f;
            for (int h = 0; h < G; h++) {
                const float x = S.q[h * hd + tid];
                if (x > 0.0f) a = __fadd_rn(a, x);
                else z = __fadd_rn(z, x);
            }
            S.qp[tid] = a;
            S.qn[tid] = z;
            if (t.stagger && rank == 0) { /* the next step's level 1 (tls_split.cu's tls_next_k) */
                t.sa[lg * 2 * hd + tid] = a;
                t.sa[lg * 2 * hd + hd + tid] = z;
            }
        }
        __syncthreads();
        /* level 1: two threads a block (its max row with Q+, its min row with Q-) */
        const int bb = t.block_budget;
        int kc = 0, ko = 0, local1 = 1, nk;
        if (t.stagger == 1) {
            /* staggered: S_{t-1} below the block it saw being filled, then that block on
             * (sparse_tls_pipe_step's attention set) */
            tls_cl_wait(); /* A0 */
            nk = nk_early ? nk_early : tls_stagger_set(t, lg, nb, S.kept);
        } else if (nb > bb) {
            float *bsc = c.bscore + ((size_t)b * c.n_kv + g) * c.nb_max;
            for (int i0 = 0; i0 < n1; i0 += nt / 2) {
                const int i = i0 + (tid >> 1), half = tid & 1;
                const bool live = i < n1;
                const h16 *src = mm + (size_t)(lo1 + (live ? i : 0)) * 2 * hd + half * hd;
                const float *qv = half ? S.qn : S.qp;
                uint4 w[16];
#pragma unroll
                for (int k8 = 0; k8 < 16; k8++)
                    if (k8 * 8 < hd) w[k8] = *(const uint4 *)(src + k8 * 8);
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
                for (int k8 = 0; k8 < 16; k8++) {
                    if (k8 * 8 >= hd) break;
                    const h16 *e = (const h16 *)&w[k8];
#pragma unroll
                    for (int l = 0; l < 8; l++)
                        acc[l] = __fadd_rn(acc[l], __fmul_rn(qv[k8 * 8 + l], h16_to(e[l])));
                }
#pragma unroll
                for (int wdt = 4; wdt >= 1; wdt >>= 1)
#pragma unroll
                    for (int l = 0; l < wdt; l++) acc[l] = __fadd_rn(acc[l], acc[l + wdt]);
                const float other = __shfl_xor_sync(0xffffffffu, acc[0], 1);
                if (live && !half) {
                    const float s = __fadd_rn(acc[0], other);
                    S.u.s.sc[i] = s;
                    bsc[lo1 + i] = s;
                }
            }
            __syncthreads();
            TLS_MARK(2);
            tls_cl_wait(); /* A0 */
            if (nb <= (NT * 4 < TLS_LOCAL_MAX ? NT * 4 : TLS_LOCAL_MAX)) {
                /* every CTA takes the whole score array and selects alone */
                tls_bcast(cl, S.u.s.sc, n1, lo1, S);
                tls_cl_sync();
                unsigned pf, mk;
                int kq;
                tls_cta_select(S, nb, bb, &pf, &mk, &kq);
                TLS_MARK(3);
                int *kept = S.kept;
                tls_cta_list(S, nb, pf, mk, kq, lo1, n1, [&](int J, int i) { kept[J] = i; });
            } else {
                tls_cl_topk(cl, rank, S.u.s.sc, n1, bb, S.u.s.fl, S, &kc, &ko);
                TLS_MARK(3);
                local1 = 0;
            }
        } else {
            tls_cl_wait(); /* A0 */
            for (int i = tid; i < n1; i += nt) S.u.s.fl[i] = 1;
            for (int j = tid; j < nb; j += nt) S.kept[j] = j;
            __syncthreads();
        }
        if (t.stagger != 1) nk = nb > bb ? bb : nb;
        /* the offload's count: blocks kept now that were not kept at the step before (not for a
         * staggered row, which scores no level 1 here) */
        if (t.stagger != 1) {
            unsigned *prev = t.prev + lg * t.words + lo1 / 32;
            for (int w = tid; w < (n1 + 31) / 32; w += nt) {
                unsigned word = 0;
                for (int j = 0; j < 32 && w * 32 + j < n1; j++) word |= (unsigned)S.u.s.fl[w * 32 + j] << j;
                const unsigned fr = word & ~prev[w];
                prev[w] = word;
                atomicAdd(&S.st[0], (unsigned long long)__popc(fr));
                atomicAdd(&S.st[1], (unsigned long long)__popc(word));
            }
        }
        /* (level 1 selected over the cluster) this CTA's kept blocks into every CTA's list */
        if (!local1) {
            const int per = (n1 + nt - 1) / nt, i0 = min(tid * per, n1), i1 = min(i0 + per, n1);
            int k = 0;
            for (int i = i0; i < i1; i++) k += S.u.s.fl[i];
            int tot, at = tls_scan(k, S.tmp, &tot) + ko;
            for (int i = i0; i < i1; i++)
                if (S.u.s.fl[i]) {
#pragma unroll
                    for (int qr = 0; qr < CL; qr++) cl.map_shared_rank(S.kept, qr)[at] = lo1 + i;
                    at++;
                }
        }
        (void)kc;
        if (!local1) tls_cl_sync();
        if (t.stagger == 2 && S.kept[nk - 1] != last) {
            /* a staggered row's first step: the set level 1 chose now, and the newest block */
            __syncthreads();
            if (tid == 0) S.kept[nk] = last;
            nk++;
            __syncthreads();
        }
        TLS_MARK(4);
        /* the kept blocks' entries of the block table, read once here so that the attention's
         * rows need no table read (a kept block lies inside one pool block: bs divides it) */
        if (!nk_early)
            for (int j = tid; j < nk; j += nt) S.ktb[j] = sq.map.tbl ? sq.map.tbl[(S.kept[j] * bs) >> GPU_KV_SHIFT] : 0;
        __syncthreads();
        /* level 2 over the kept blocks' positions (candidate j: kept[j / bs] * bs + j % bs) */
        const int lastlen = n - last * bs;
        const int C = nk * bs - (S.kept[nk - 1] == last ? bs - lastlen : 0);
        const int tb = t.token_budget;
        int m;
        if (C <= tb) {
            m = C;
            const int sl = (m + CL - 1) / CL, j0 = min(rank * sl, m);
            mine = min(m - j0, sl);
            for (int j = tid; j < mine; j += nt) {
                S.lst[j] = j0 + j;
                idx[j0 + j] = S.kept[(j0 + j) / bs] * bs + (j0 + j) % bs;
            }
            __syncthreads();
        } else {
            const int per2 = (C + CL - 1) / CL, lo2 = min(rank * per2, C);
            const int n2 = min(C - lo2, per2);
            const unsigned short *ch = c.ch + lg * r;
            if (tid < r) {
                float a = 0.0f;
                for (int h = 0; h < G; h++) a = __fadd_rn(a, S.q[h * hd + ch[tid]]);
                S.qsel[tid] = __fdiv_rn(a, (float)G);
            }
            __syncthreads();
            if (tid == 0) {
                float s = 0.0f;
                for (int i = 0; i < r; i++) s = __fadd_rn(s, S.qsel[i]);
                S.qsum = s;
            }
            __syncthreads();
            const float qsum = S.qsum;
            const unsigned char *code0 = t.code + lg * t.cap * (r / 2);
            const float2 *lab0 = t.lab + lg * t.cap;
            if (r <= 32 && (r & 7) == 0) {
                tls_l2_scores(S, code0, lab0, r, bsh, lo2, n2, qsum, S.u.s.sc);
            } else {
                for (int i = tid; i < n2; i += nt) {
                    const int j = lo2 + i, pp = (S.kept[j >> bsh] << bsh) + (j & (bs - 1));
                    const unsigned char *code = code0 + (size_t)pp * (r / 2);
                    const float2 lb = lab0[pp];
                    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    int e = 0;
                    if ((r & 7) == 0) {
                        const unsigned *wp = (const unsigned *)code;
                        for (int k = 0; k < r / 8; k++, e += 8) {
                            const unsigned wdk = wp[k];
                            for (int l = 0; l < 8; l++)
                                acc[l] = __fadd_rn(acc[l], __fmul_rn(S.qsel[e + l], (float)((wdk >> (4 * l)) & 15u)));
                        }
                    }
                    for (; e + 8 <= r; e += 8)
                        for (int l = 0; l < 8; l += 2) {
                            const unsigned char cc = code[(e + l) / 2];
                            acc[l] = __fadd_rn(acc[l], __fmul_rn(S.qsel[e + l], (float)(cc & 15)));
                            acc[l + 1] = __fadd_rn(acc[l + 1], __fmul_rn(S.qsel[e + l + 1], (float)(cc >> 4)));
                        }
                    for (int l = 0; e < r; e++, l++) {
                        const unsigned char cc = code[e / 2];
                        acc[l] = __fadd_rn(acc[l], __fmul_rn(S.qsel[e], (float)(e & 1 ? cc >> 4 : cc & 15)));
                    }
                    for (int wdt = 4; wdt >= 1; wdt >>= 1)
                        for (int l = 0; l < wdt; l++) acc[l] = __fadd_rn(acc[l], acc[l + wdt]);
                    S.u.s.sc[i] = __fadd_rn(__fmul_rn(lb.y, acc[0]), __fmul_rn(lb.x, qsum));
                }
            }
            __syncthreads();
            TLS_MARK(5);
            int kc2, ko2;
            tls_cl_topk(cl, rank, S.u.s.sc, n2, tb, S.u.s.fl, S, &kc2, &ko2);
            TLS_MARK(6);
            (void)kc2;
            m = tb;
            /* the kept positions, ascending: entry J to CTA J / sl's list (as its candidate
             * index) and to idx */
            const int sl = (m + CL - 1) / CL;
            {
                const int per = (n2 + NT - 1) / NT, i0 = min(tid * per, n2), i1 = min(i0 + per, n2);
                int k = 0;
                for (int i = i0; i < i1; i++) k += S.u.s.fl[i];
                int tot, at = tls_scan(k, S.tmp, &tot) + ko2;
                for (int i = i0; i < i1; i++)
                    if (S.u.s.fl[i]) {
                        const int j = lo2 + i, to = at / sl;
                        cl.map_shared_rank(S.lst, to)[at - to * sl] = j;
                        idx[at] = (S.kept[j >> bsh] << bsh) + (j & (bs - 1));
                        at++;
                    }
            }
            tls_cl_sync();
            TLS_MARK(7);
            mine = max(0, min(m - rank * sl, sl));
        }
        list = S.lst;
        if (tid == 0) {
            if (rank == 0) {
                *cnt = m;
                atomicAdd(&t.cnt[0], (unsigned long long)m);
                atomicAdd(&t.cnt[1], (unsigned long long)n);
            }
            if (S.st[0]) atomicAdd(&t.cnt[2], S.st[0]);
            if (S.st[1]) atomicAdd(&t.cnt[3], S.st[1]);
        }
    }

    /* ------------------------------------------------ exact attention over this CTA's keys */
    {
        float acc[GM][4], mrun = -INFINITY, lrun = 0.0f;
#pragma unroll
        for (int h = 0; h < GM; h++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[h][e] = 0.0f;
        tls_attend_tiles<GM>(S, sq, lg, hd, G, bsh, list, first, mine, acc, &mrun, &lrun);
        TLS_MARK(8);
        tls_attend_partial<GM>(S, hd, G, acc, mrun, lrun);
    }
    TLS_MARK(9);
    /* the cluster's partials merged: CTA rank writes outputs rank, rank + CL, ... */
    tls_cl_sync();
    for (int o = tid * CL + rank; o < G * hd; o += nt * CL) {
        const int h = o / hd;
        float2 ml[CL];
        float M = -INFINITY;
#pragma unroll
        for (int qr = 0; qr < CL; qr++) {
            ml[qr] = cl.map_shared_rank(S.pml, qr)[h];
            if (ml[qr].y > 0.0f) M = fmaxf(M, ml[qr].x);
        }
        float O = 0.0f, L = 0.0f;
#pragma unroll
        for (int qr = 0; qr < CL; qr++) {
            if (!(ml[qr].y > 0.0f)) continue;
            const float f = exp2f(ml[qr].x - M);
            L += ml[qr].y * f;
            O += cl.map_shared_rank(S.po, qr)[o] * f;
        }
        out[(size_t)b * c.n_heads * hd + (size_t)g * G * hd + o] = h16_from(O / L);
    }
    __syncthreads();
    TLS_MARK(10);
    tls_cl_sync(); /* the other CTAs read this one's shared memory until here */
}

/* The one-kernel form's kernels: per group width (GM 4, 8, 16) and CTA size (256 or 512
 * threads) in clusters of TLS_CL CTAs (clusters of 16 at batch 1 and of 4 CTAs of 512 threads at
 * batch 8 were slower, 2026-11-29, BENCHMARKS.md), and in clusters of 2 CTAs of 512 threads:
 * 128 CTAs for 64 (row, KV head) pairs, batch 8 of Llama-3-8B in one wave on 132 SMs. */
typedef void (*tls_kfn)(gpu_tls_cfg, int, const h16 *, const int *, const gpu_seq_dev *,
                        const gpu_tls_dev *, h16 *);
static const tls_kfn tls_kfns[3][2] = {{tls_layer_k<4, 256, TLS_CL>, tls_layer_k<4, 512, TLS_CL>},
                                       {tls_layer_k<8, 256, TLS_CL>, tls_layer_k<8, 512, TLS_CL>},
                                       {tls_layer_k<16, 256, TLS_CL>, tls_layer_k<16, 512, TLS_CL>}};
static const size_t tls_smems[2] = {sizeof(tls_smem<256, TLS_CL>), sizeof(tls_smem<512, TLS_CL>)};
static const tls_kfn tls_kfns2[3] = {tls_layer_k<4, 512, 2>, tls_layer_k<8, 512, 2>, tls_layer_k<16, 512, 2>};
static const size_t tls_smem2 = sizeof(tls_smem<512, 2>);
#define TLS_DEVS 64
static int tls_fit2[TLS_DEVS][3]; /* per device and group width: clusters of 2 that run at once
                                     (cudaOccupancyMaxActiveClusters; 0: not asked), written once
                                     per device (tls_fit2_set) while other engines may read it */
int gpu_tls_fit_clusters(int gi, int cl); /* below; gpu/test/tls_test_api.cu reports it too */
static pthread_mutex_t tls_fit2_mu = PTHREAD_MUTEX_INITIALIZER;
static int tls_fit2_done[TLS_DEVS];

/* tls_fit2[dev], the first time a device opens (under tls_fit2_mu; the values atomic, as a
 * reader takes them without the lock). */
static void tls_fit2_set(int dev)
{
    if (dev < 0 || dev >= TLS_DEVS) return;
    pthread_mutex_lock(&tls_fit2_mu);
    if (!tls_fit2_done[dev]) {
        for (int gi = 0; gi < 3; gi++)
            __atomic_store_n(&tls_fit2[dev][gi], gpu_tls_fit_clusters(gi, 2), __ATOMIC_RELEASE);
        tls_fit2_done[dev] = 1;
    }
    pthread_mutex_unlock(&tls_fit2_mu);
}

/* TANDEM_TLS_THREADS=256 or 512: every one-kernel launch in CTAs of that size (A/B); else the
 * rule below. */
static int tls_threads_env(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TANDEM_TLS_THREADS");
        v = e && atoi(e) == 256 ? 256 : e && atoi(e) == 512 ? 512 : 0;
    }
    return v;
}

/* TANDEM_TLS_FORM=1, 2 or 6: the rule's launches all in the one-kernel form, all in the three
 * kernels, or all in the one-kernel form in clusters of 2 (A/B); else the rule below. */
static int tls_form_env(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TANDEM_TLS_FORM");
        v = e && (atoi(e) == 1 || atoi(e) == 2 || atoi(e) == 6) ? atoi(e) : 0;
    }
    return v;
}

/* TANDEM_TLS_CL2=0: the rule never takes clusters of 2 (A/B: the three kernels past the
 * clusters of TLS_CL, as before). */
static int tls_cl2_env(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TANDEM_TLS_CL2");
        v = !(e && atoi(e) == 0);
    }
    return v;
}

/* Clusters of 2 (CTAs of 512 threads) that fit at once on the current device for group width
 * index gi (0: unknown). */
static int tls_fit2_now(int gi)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= TLS_DEVS) return 0;
    return __atomic_load_n(&tls_fit2[dev][gi], __ATOMIC_ACQUIRE);
}

int gpu_tls_attn_layer(cudaStream_t s, const gpu_tls_cfg &c, int layer, int T, const h16 *q,
                       const int *pos, const gpu_seq_dev *seqs, const gpu_tls_dev *tls, h16 *out,
                       int pdl, int form)
{
    /* the rule: clusters of TLS_CL in CTAs of 512 threads while one per SM holds every cluster
     * (T x n_kv x TLS_CL <= SMs: batch 1 and 2 of Llama-3-8B), of 256 while two per SM do (batch
     * 3 and 4); then clusters of 2 CTAs of 512 threads up to 8 rows while every cluster runs at
     * once (batch 5 .. 8 of Llama-3-8B: at 8, 64 pairs, 128 CTAs on 132 SMs; measured at 8,
     * 2026-11-29, BENCHMARKS.md); else the three kernels (and their row cache for offloaded
     * rows, which the one-kernel form has not) */
    const long long ctas = (long long)T * c.n_kv * TLS_CL;
    const int G = c.n_heads / c.n_kv, gi = G <= 4 ? 0 : G <= 8 ? 1 : 2;
    if (form == 0) {
        if (tls_form_env()) form = tls_form_env();
        else if (ctas <= 2LL * c.sms) form = 1;
        else if (tls_cl2_env() && T <= 8 && (long long)T * c.n_kv <= tls_fit2_now(gi)) form = 6;
        else form = 2;
    }
    if (form == 2 || form == 3)
        return gpu_tls_split_layer(s, c, layer, T, q, pos, seqs, tls, out, form == 3 ? 512 : 0);
    int ni = ctas <= c.sms ? 1 : 0;
    if (form == 4 || form == 5) ni = form - 4;
    else if (form == 6) ni = 1;
    else if (tls_threads_env()) ni = tls_threads_env() == 512;
    const int cl = form == 6 ? 2 : TLS_CL;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(cl, c.n_kv, T);
    cfg.blockDim = dim3(ni ? 512 : 256);
    cfg.dynamicSmemBytes = form == 6 ? tls_smem2 : tls_smems[ni];
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 2 : 1;
    GPU_CHECK(cudaLaunchKernelEx(&cfg, form == 6 ? tls_kfns2[gi] : tls_kfns[gi][ni], c, layer, q, pos, seqs,
                                 tls, out));
    return ACCEL_OK;
}

int gpu_tls_fit_clusters(int gi, int cl)
{
    if (gi < 0 || gi > 2 || (cl != 2 && cl != TLS_CL)) return 0;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(cl, 1, 1);
    cfg.blockDim = dim3(512);
    cfg.dynamicSmemBytes = cl == 2 ? tls_smem2 : tls_smems[1];
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = cl;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, (const void *)(cl == 2 ? tls_kfns2[gi] : tls_kfns[gi][1]), &cfg) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int gpu_tls_kernels_init(void)
{
    /* dynamic shared memory (past the static 48 KB when a group is wide); no carveout preference
     * (an SM whose kernels ask different carveouts drains between them: the decode chain's PDL
     * overlap) */
    for (int gi = 0; gi < 3; gi++) {
        for (int ni = 0; ni < 2; ni++)
            GPU_CHECK(cudaFuncSetAttribute(tls_kfns[gi][ni], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)tls_smems[ni]));
        GPU_CHECK(cudaFuncSetAttribute(tls_kfns2[gi], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tls_smem2));
    }
    const char *ee = getenv("TANDEM_TLS_EARLY");
    const int early = !(ee && atoi(ee) == 0);
    GPU_CHECK(cudaMemcpyToSymbol(tls_early_c, &early, sizeof early));
    int dev = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    tls_fit2_set(dev);
    return gpu_tls_split_init();
}
