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
 * by index; lists written ascending. The select runs over the cluster's CTAs, each holding a
 * contiguous range of the indices: each pass sums the CTAs' histograms through distributed
 * shared memory, and it stops early once the chosen digit's keys are exactly the ones missing
 * (then every key matching the prefix is in and no tie is left to break). */
#include "gpu/tls_dev.cuh"
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TLS_THREADS 256
#define TLS_WARPS (TLS_THREADS / 32)
#define TLS_CL GPU_TLS_CLUSTER
#define TLS_PER_MAX (GPU_TLS_MAX_CAND / TLS_CL)     /* level-1 blocks or level-2 candidates per CTA */
#define TLS_SLICE_MAX (GPU_TLS_MAX_TOKENS / TLS_CL) /* kept keys a CTA attends */
#define TLS_KEPT_MAX (GPU_TLS_MAX_CAND / 16)        /* kept blocks at the smallest block size */
#define TLS_TOK 8                                   /* keys a warp loads at once in the attention */
#define TLS_CAND 4                                  /* level-2 candidates a thread loads at once */
#ifndef TLS_MIN_CTAS
#define TLS_MIN_CTAS 2 /* CTAs per SM the registers must allow */
#endif
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
    t->code = p;
    t->cap = cap;
    t->nbc = (int)nbc;
    t->words = (int)words;
}

/* ---------------------------------------------------------------- top-k over a cluster */


/* The phase trace (gpu_tls_cfg.trace): 0 start, 1 the query in, 2 level 1 scored, 3 its top-k,
 * 4 the kept blocks' list, 5 level 2 scored, 6 its top-k, 7 the kept positions' lists, 8 the
 * attention's loop, 9 the CTA's partial, 10 the cluster's merge. */
#define TLS_MARK(i)                                                                                \
    do {                                                                                           \
        if (c.trace && tid == 0 && rank == 0 && b == 0 && g == 0) c.trace[i] = gpu_globaltimer();  \
    } while (0)

/* Cluster barrier with release / acquire semantics (shared and global memory written before it
 * are visible to every CTA of the cluster after it). */
__device__ __forceinline__ void tls_cl_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* One CTA's shared memory. The hist, ex, kept, lst, po and pml members are read or written by
 * the other CTAs of the cluster (distributed shared memory). */
struct tls_smem {
    float q[GPU_TLS_MAX_GROUP * 128]; /* the group's queries, head-major, as floats */
    float qp[128], qn[128], qsel[128];
    union {
        struct {
            float sc[TLS_PER_MAX];
            unsigned char fl[TLS_PER_MAX];
        } s;                         /* the selection: this CTA's scores and flags */
        float wo[TLS_WARPS][128];    /* the attention: the warps' partial rows of one head */
    } u;
    int kept[TLS_KEPT_MAX];          /* every kept block, ascending (the whole cluster's) */
    int lst[TLS_SLICE_MAX];          /* the kept positions this CTA attends */
    unsigned hist[2][256];           /* the radix passes' histograms (alternating) */
    unsigned tot[256];
    int ex[2];                       /* this CTA's keys above the k-th and equal to it */
    int res[3];                      /* the pass's digit, the rank left, done */
    int tmp[33];
    float po[GPU_TLS_MAX_GROUP * 128]; /* this CTA's unnormalized output per head */
    float2 pml[GPU_TLS_MAX_GROUP];     /* ... its (max, sum) per head */
    float wm[TLS_WARPS][GPU_TLS_MAX_GROUP], wl[TLS_WARPS][GPU_TLS_MAX_GROUP];
    unsigned long long st[2];
    float qsum;
};

/* fl[i] = 1 for the keys of sc[0 .. nl-1] (this CTA's range of the cluster's indices, the ranges
 * in rank order) among the k first of the whole cluster in the order above (k < the cluster's
 * total), else 0. Every thread of every CTA of the cluster calls it. *mine: this CTA's kept
 * count, *off: the kept before its range. */
__device__ void tls_cl_topk(cg::cluster_group &cl, int rank, const float *sc, int nl, int k,
                            unsigned char *fl, tls_smem &S, int *mine, int *off)
{
    const int tid = threadIdx.x, nt = TLS_THREADS, lane = tid & 31;
    unsigned prefix = 0, mask = 0;
    int kk = k; /* rank still to place among the keys matching prefix */
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        /* the other CTAs read this buffer two passes ago, before the last cluster barrier */
        unsigned *h = S.hist[pass & 1];
        h[tid] = 0;
        __syncthreads();
        for (int base = 0; base < nl; base += nt) {
            const int i = base + tid;
            const unsigned u = i < nl ? tls_key(sc[i]) : 0u;
            const bool ok = i < nl && (u & mask) == prefix;
            const unsigned dig = ok ? (u >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, dig);
            if (ok && lane == __ffs(peers) - 1) atomicAdd(&h[dig], (unsigned)__popc(peers));
        }
        tls_cl_sync();
        {
            unsigned s = 0;
#pragma unroll
            for (int q = 0; q < TLS_CL; q++) s += cl.map_shared_rank(h, q)[tid];
            S.tot[tid] = s;
        }
        __syncthreads();
        if (tid < 32) {
            /* lane j holds digits 255 - 8j .. 248 - 8j (descending): their sum, a scan over lanes */
            int s = 0;
            for (int d = 0; d < 8; d++) s += S.tot[255 - 8 * lane - d];
            int incl = s;
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
            const int excl = incl - s;
            const unsigned hit = __ballot_sync(0xffffffffu, incl >= kk);
            const int first = __ffs(hit) - 1; /* never empty: the counts sum to >= kk */
            if (lane == first) {
                int acc = excl, d = 255 - 8 * lane;
                for (int j = 0; j < 8; j++, d--) {
                    if (acc + (int)S.tot[d] >= kk) break;
                    acc += S.tot[d];
                }
                S.res[0] = d;
                S.res[1] = kk - acc;
                S.res[2] = (int)S.tot[d] == kk - acc;
            }
        }
        __syncthreads();
        prefix |= (unsigned)S.res[0] << shift;
        mask |= 255u << shift;
        kk = S.res[1];
        const int done = S.res[2];
        __syncthreads(); /* S.res is written again by the next pass */
        if (done) break;
    }
    /* keys above prefix (under mask) are in; of those equal to it, the first kk by index */
    const int per = (nl + nt - 1) / nt, i0 = min(tid * per, nl), i1 = min(i0 + per, nl);
    int gt = 0, eq = 0;
    for (int i = i0; i < i1; i++) {
        const unsigned u = tls_key(sc[i]) & mask;
        gt += u > prefix;
        eq += u == prefix;
    }
    int tot_gt, tot_eq;
    tls_scan(gt, S.tmp, &tot_gt);
    int at = tls_scan(eq, S.tmp, &tot_eq);
    if (tid == 0) S.ex[0] = tot_gt, S.ex[1] = tot_eq;
    tls_cl_sync();
    int before = 0, eq_before = 0, my = 0; /* equal keys of the ranks below this one */
    for (int q = 0; q < TLS_CL; q++) {
        const int *x = cl.map_shared_rank(S.ex, q);
        const int g_q = x[0], e_q = x[1];
        const int in_eq = max(0, min(kk - eq_before, e_q));
        if (q < rank) before += g_q + in_eq;
        if (q == rank) my = g_q + in_eq;
        if (q == rank) at += eq_before;
        eq_before += e_q;
    }
    for (int i = i0; i < i1; i++) {
        const unsigned u = tls_key(sc[i]) & mask;
        int f = u > prefix;
        if (u == prefix) f = at++ < kk;
        fl[i] = (unsigned char)f;
    }
    __syncthreads();
    *mine = my;
    *off = before;
}

/* ---------------------------------------------------------------- one layer in one kernel
 * One cluster of TLS_CL CTAs per (row, KV head): the newest key's summaries, level 1 over the
 * CTAs' ranges of blocks, the cluster's top-k of them, the kept blocks' list in every CTA, level
 * 2 over the CTAs' ranges of the candidates, the cluster's top-k of them, the kept positions
 * spread evenly over the CTAs, each CTA's exact attention over its share, and the CTAs' partials
 * merged through distributed shared memory. A dense row (on == 0) attends keys 0 .. n-1, an
 * eighth per CTA. */
template <int GM>
__global__ void __cluster_dims__(TLS_CL, 1, 1) __launch_bounds__(TLS_THREADS, TLS_MIN_CTAS)
tls_layer_k(gpu_tls_cfg c, int layer, const h16 *q, const int *pos, const gpu_seq_dev *seqs,
            const gpu_tls_dev *tls, h16 *out)
{
    __shared__ tls_smem S;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank(), g = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, nt = TLS_THREADS, lane = tid & 31, warp = tid >> 5;
    const int hd = c.hd, G = c.n_heads / c.n_kv, bs = c.bs, r = c.r;
    const gpu_tls_dev t = tls[b];
    const gpu_seq_dev sq = seqs[b];
    const int p = pos[b], n = p + 1;
    const size_t lg = (size_t)layer * c.n_kv + g;
    TLS_MARK(0);
    /* before the QKV kernel is done (PDL): the step's rows and the summaries were written before
     * it; this CTA's range of block max / min rows is requested into L2 */
    if (t.on && tid == 0) {
        const int nb = (n + bs - 1) / bs, per1 = ((nb + TLS_CL - 1) / TLS_CL + 31) & ~31;
        const int lo1 = rank * per1, n1 = max(0, min(nb - lo1, per1));
        if (nb > t.block_budget && n1 > 0)
            gpu_l2_prefetch(t.mm + (lg * t.nbc + lo1) * 2 * hd, 0, (unsigned)n1 * 4u * hd);
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
        const int sl = (n + TLS_CL - 1) / TLS_CL;
        first = min(rank * sl, n);
        mine = min(n - first, sl);
        if (rank == 0 && tid == 0) *cnt = -n;
    } else {
        const int nb = (n + bs - 1) / bs, last = nb - 1;
        const int per1 = ((nb + TLS_CL - 1) / TLS_CL + 31) & ~31; /* whole bitmap words */
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
        }
        __syncthreads();
        /* level 1: two threads a block (its max row with Q+, its min row with Q-) */
        const int bb = t.block_budget;
        int kc, ko;
        if (nb > bb) {
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
            tls_cl_topk(cl, rank, S.u.s.sc, n1, bb, S.u.s.fl, S, &kc, &ko);
            TLS_MARK(3);
        } else {
            for (int i = tid; i < n1; i += nt) S.u.s.fl[i] = 1;
            kc = n1;
            ko = min(lo1, nb);
            __syncthreads();
        }
        const int nk = nb > bb ? bb : nb;
        /* the offload's count: blocks kept now that were not kept at the step before */
        {
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
        /* this CTA's kept blocks into every CTA's list */
        {
            const int per = (n1 + nt - 1) / nt, i0 = min(tid * per, n1), i1 = min(i0 + per, n1);
            int k = 0;
            for (int i = i0; i < i1; i++) k += S.u.s.fl[i];
            int tot, at = tls_scan(k, S.tmp, &tot) + ko;
            for (int i = i0; i < i1; i++)
                if (S.u.s.fl[i]) {
#pragma unroll
                    for (int qr = 0; qr < TLS_CL; qr++) cl.map_shared_rank(S.kept, qr)[at] = lo1 + i;
                    at++;
                }
        }
        (void)kc;
        tls_cl_sync();
        TLS_MARK(4);
        /* level 2 over the kept blocks' positions (candidate j: kept[j / bs] * bs + j % bs) */
        const int lastlen = n - last * bs;
        const int C = nk * bs - (S.kept[nk - 1] == last ? bs - lastlen : 0);
        const int tb = t.token_budget;
        int m;
        if (C <= tb) {
            m = C;
            const int sl = (m + TLS_CL - 1) / TLS_CL, j0 = min(rank * sl, m);
            mine = min(m - j0, sl);
            for (int j = tid; j < mine; j += nt) {
                const int pp = S.kept[(j0 + j) / bs] * bs + (j0 + j) % bs;
                S.lst[j] = pp;
                idx[j0 + j] = pp;
            }
            __syncthreads();
        } else {
            const int per2 = (C + TLS_CL - 1) / TLS_CL, lo2 = min(rank * per2, C);
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
                /* TLS_CAND candidates' labels requested at once; word k holds codes 8k .. 8k+7 */
                const int nw = r / 8;
                for (int i0 = tid; i0 < n2; i0 += TLS_CAND * nt) {
                    unsigned wd[TLS_CAND][4];
                    float2 lb[TLS_CAND];
#pragma unroll
                    for (int u = 0; u < TLS_CAND; u++) {
                        const int i = i0 + u * nt;
                        if (i < n2) {
                            const int j = lo2 + i, pp = S.kept[j / bs] * bs + j % bs;
                            const unsigned *wp = (const unsigned *)(code0 + (size_t)pp * (r / 2));
#pragma unroll
                            for (int k4 = 0; k4 < 4; k4++)
                                if (k4 < nw) wd[u][k4] = wp[k4];
                            lb[u] = lab0[pp];
                        }
                    }
#pragma unroll
                    for (int u = 0; u < TLS_CAND; u++) {
                        const int i = i0 + u * nt;
                        if (i >= n2) break;
                        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
                        for (int k4 = 0; k4 < 4; k4++) {
                            if (k4 >= nw) break;
#pragma unroll
                            for (int l = 0; l < 8; l++)
                                acc[l] = __fadd_rn(acc[l], __fmul_rn(S.qsel[k4 * 8 + l],
                                                                     (float)((wd[u][k4] >> (4 * l)) & 15u)));
                        }
#pragma unroll
                        for (int wdt = 4; wdt >= 1; wdt >>= 1)
#pragma unroll
                            for (int l = 0; l < wdt; l++) acc[l] = __fadd_rn(acc[l], acc[l + wdt]);
                        S.u.s.sc[i] = __fadd_rn(__fmul_rn(lb[u].y, acc[0]), __fmul_rn(lb[u].x, qsum));
                    }
                }
            } else {
                for (int i = tid; i < n2; i += nt) {
                    const int j = lo2 + i, pp = S.kept[j / bs] * bs + j % bs;
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
            /* the kept positions, ascending: entry J to CTA J / sl's list, and to idx */
            const int sl = (m + TLS_CL - 1) / TLS_CL;
            {
                const int per = (n2 + nt - 1) / nt, i0 = min(tid * per, n2), i1 = min(i0 + per, n2);
                int k = 0;
                for (int i = i0; i < i1; i++) k += S.u.s.fl[i];
                int tot, at = tls_scan(k, S.tmp, &tot) + ko2;
                for (int i = i0; i < i1; i++)
                    if (S.u.s.fl[i]) {
                        const int j = lo2 + i, pp = S.kept[j / bs] * bs + j % bs, to = at / sl;
                        cl.map_shared_rank(S.lst, to)[at - to * sl] = pp;
                        idx[at] = pp;
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
    const float scl = rsqrtf((float)hd) * 1.4426950408889634f; /* log2 domain */
    const int c4 = lane * 4;
    const bool chan = c4 < hd;
    float mx[GM], l[GM], acc[GM][4];
#pragma unroll
    for (int h = 0; h < GM; h++) {
        mx[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++) acc[h][e] = 0.0f;
    }
    for (int j0 = warp * TLS_TOK; j0 < mine; j0 += TLS_WARPS * TLS_TOK) {
        int pj[TLS_TOK];
#pragma unroll
        for (int u = 0; u < TLS_TOK; u++) pj[u] = j0 + u < mine ? (list ? list[j0 + u] : first + j0 + u) : -1;
        uint2 kx[TLS_TOK], vx[TLS_TOK];
#pragma unroll
        for (int u = 0; u < TLS_TOK; u++) {
            const int pp = pj[u] < 0 ? pj[0] : pj[u];
            if (chan) {
                kx[u] = *(const uint2 *)(tls_krow(sq, sq.k, layer, c.n_kv, g, hd, pp) + c4);
                vx[u] = *(const uint2 *)(tls_krow(sq, sq.v, layer, c.n_kv, g, hd, pp) + c4);
            } else {
                kx[u] = make_uint2(0, 0);
                vx[u] = make_uint2(0, 0);
            }
        }
        float kf[TLS_TOK][4], vf[TLS_TOK][4];
#pragma unroll
        for (int u = 0; u < TLS_TOK; u++) {
            const h16 *ke = (const h16 *)&kx[u], *ve = (const h16 *)&vx[u];
#pragma unroll
            for (int e = 0; e < 4; e++) kf[u][e] = h16_to(ke[e]), vf[u][e] = h16_to(ve[e]);
        }
        /* per head: the group's TLS_TOK scores at once, then one online-softmax update */
#pragma unroll
        for (int h = 0; h < GM; h++) {
            if (h >= G) break;
            float sc[TLS_TOK];
#pragma unroll
            for (int u = 0; u < TLS_TOK; u++) {
                float x = 0.0f;
                if (chan)
#pragma unroll
                    for (int e = 0; e < 4; e++) x += S.q[h * hd + c4 + e] * kf[u][e];
                sc[u] = x;
            }
#pragma unroll
            for (int o = 16; o; o >>= 1)
#pragma unroll
                for (int u = 0; u < TLS_TOK; u++) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
            float mloc = -INFINITY;
#pragma unroll
            for (int u = 0; u < TLS_TOK; u++) {
                sc[u] = pj[u] < 0 ? -INFINITY : sc[u] * scl;
                mloc = fmaxf(mloc, sc[u]);
            }
            const float mn = fmaxf(mx[h], mloc), corr = exp2f(mx[h] - mn);
            float ps = 0.0f, pv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int u = 0; u < TLS_TOK; u++) {
                const float pe = exp2f(sc[u] - mn);
                ps += pe;
#pragma unroll
                for (int e = 0; e < 4; e++) pv[e] += pe * vf[u][e];
            }
            l[h] = l[h] * corr + ps;
#pragma unroll
            for (int e = 0; e < 4; e++) acc[h][e] = acc[h][e] * corr + pv[e];
            mx[h] = mn;
        }
    }
    TLS_MARK(8);
    /* the warps' states merged per head into this CTA's partial */
#pragma unroll
    for (int h = 0; h < GM; h++)
        if (lane == 0 && h < G) {
            S.wm[warp][h] = mx[h];
            S.wl[warp][h] = l[h];
        }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < GM; h++) {
        if (h >= G) break;
        float M = -INFINITY;
        for (int w = 0; w < TLS_WARPS; w++) M = fmaxf(M, S.wm[w][h]);
        const float f = M == -INFINITY ? 0.0f : exp2f(mx[h] - M);
        if (chan)
#pragma unroll
            for (int e = 0; e < 4; e++) S.u.wo[warp][c4 + e] = acc[h][e] * f;
        __syncthreads();
        if (tid < hd) {
            float o = 0.0f;
            for (int w = 0; w < TLS_WARPS; w++) o += S.u.wo[w][tid];
            S.po[h * hd + tid] = o;
        }
        if (tid == 32) {
            float L = 0.0f;
            for (int w = 0; w < TLS_WARPS; w++)
                if (S.wm[w][h] != -INFINITY) L += S.wl[w][h] * exp2f(S.wm[w][h] - M);
            S.pml[h] = make_float2(M, L);
        }
        __syncthreads();
    }
    TLS_MARK(9);
    /* the cluster's partials merged: CTA rank writes outputs rank, rank + TLS_CL, ... */
    tls_cl_sync();
    for (int o = tid * TLS_CL + rank; o < G * hd; o += nt * TLS_CL) {
        const int h = o / hd;
        float2 ml[TLS_CL];
        float M = -INFINITY;
#pragma unroll
        for (int qr = 0; qr < TLS_CL; qr++) {
            ml[qr] = cl.map_shared_rank(S.pml, qr)[h];
            if (ml[qr].y > 0.0f) M = fmaxf(M, ml[qr].x);
        }
        float O = 0.0f, L = 0.0f;
#pragma unroll
        for (int qr = 0; qr < TLS_CL; qr++) {
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

int gpu_tls_attn_layer(cudaStream_t s, const gpu_tls_cfg &c, int layer, int T, const h16 *q,
                       const int *pos, const gpu_seq_dev *seqs, const gpu_tls_dev *tls, h16 *out,
                       int pdl, int form)
{
    if (form == 0) form = (long long)T * c.n_kv * TLS_CL <= 2LL * c.sms ? 1 : 2;
    if (form >= 2) return gpu_tls_split_layer(s, c, layer, T, q, pos, seqs, tls, out, form == 3 ? 512 : 0);
    const int G = c.n_heads / c.n_kv;
    const dim3 grid(TLS_CL, c.n_kv, T);
    void (*k)(gpu_tls_cfg, int, const h16 *, const int *, const gpu_seq_dev *, const gpu_tls_dev *,
              h16 *) = G <= 4 ? tls_layer_k<4> : G <= 8 ? tls_layer_k<8> : tls_layer_k<16>;
    GPU_CHECK(gpu_launch(k, grid, dim3(TLS_THREADS), 0, s, pdl, c, layer, q, pos, seqs, tls, out));
    return ACCEL_OK;
}

int gpu_tls_kernels_init(void)
{
    return gpu_tls_split_init();
}
