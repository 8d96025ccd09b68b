/* gpu/tls_split.cu — AsyncTLS's layer in three kernels (gpu/tls.cuh has the plan of the
 * one-kernel form in gpu/tls_kernels.cu; this is the form for larger batches, where the clusters
 * of the one-kernel form outnumber the SMs): the same selection in the same arithmetic
 * (gpu/tls_kernels.cu's header), with the top-k of each level in one CTA of 1024 threads.
 *   tls_score   grid (GPU_TLS_CHUNKS, n_kv, T): the newest key's block max/min and label (the
 *               CTA whose chunk holds the last block), then level 1: the group's aggregated query
 *               [Q+ Q-] times [M; m] for every block (8 threads per block, sparse_tls.c's dot8)
 *   tls_select  grid (n_kv, T), 1024 threads: top block_budget blocks, the candidates of the kept
 *               blocks, level 2 scores from the labels, top token_budget tokens -> idx (ascending);
 *               for an offloaded row with a row cache (gpu/tls_off.cu), each listed key's slot
 *               -> rslot: the slot holding its rows, else a slot whose key left the list
 *   tls_attend  grid (GPU_TLS_SPLITS, n_kv, T): exact attention of the group's heads over the
 *               listed keys (a dense row: cnt_idx = -n, keys 0 .. n-1), split-K, the last CTA of
 *               a (sequence, KV head) merges; a cached key's K / V from its slot, a key new to
 *               the cache over PCIe, then into its slot (the same values either way) */
#include "gpu/tls_dev.cuh"
#include <stdlib.h>
#include <string.h>

#define SEL_THREADS 1024
#define NEXT_THREADS 512 /* tls_next_k: 16 uint4 loads in flight per thread need > 64 registers */
#define ATT_WARPS 4
#define TOK_UNROLL 4 /* keys a warp loads at once in the attention */

/* ---------------------------------------------------------------- level 1 (+ the newest key) */

__global__ void __launch_bounds__(256) tls_score_k(gpu_tls_cfg c, int layer, const h16 *q,
                                                   const int *pos, const gpu_seq_dev *seqs,
                                                   const gpu_tls_dev *tls)
{
    const int b = blockIdx.z, g = blockIdx.y, hd = c.hd, G = c.n_heads / c.n_kv;
    const gpu_tls_dev t = tls[b];
    if (!t.on) return;
    const int p = pos[b], n = p + 1, nb = (n + c.bs - 1) / c.bs, last = nb - 1;
    const int per = (nb + GPU_TLS_CHUNKS - 1) / GPU_TLS_CHUNKS;
    const int c0 = blockIdx.x * per, c1 = min(c0 + per, nb);
    const size_t lg = (size_t)layer * c.n_kv + g;
    h16 *mm = t.mm + lg * t.nbc * 2 * hd;
    if (c0 <= last && last < c1) {
        /* the newest key into its block's max / min and its label (sparse_tls_put) */
        const gpu_seq_dev sq = seqs[b];
        const h16 *k = tls_krow(sq, sq.k, layer, c.n_kv, g, hd, p);
        h16 *o = mm + (size_t)last * 2 * hd;
        const int first = p % c.bs == 0;
        for (int ch = threadIdx.x; ch < hd; ch += blockDim.x) {
            float x = h16_to(k[ch]);
            float M = first ? x : h16_to(o[ch]), m = first ? x : h16_to(o[hd + ch]);
            if (!first) {
                M = x > M ? x : M;
                m = x < m ? x : m;
            }
            o[ch] = h16_from(M);
            o[hd + ch] = h16_from(m);
        }
        if (threadIdx.x < 32)
            tls_label_warp(k, c.ch + lg * c.r, c.r, t.code + (lg * t.cap + p) * (c.r / 2),
                           t.lab + lg * t.cap + p);
        __syncthreads();
    }
    /* a staggered row scores no level 1 here (its set is from the step before), and its first
     * chunk's CTA saves the aggregated query for the next step's (tls_next_k) */
    const bool score = t.stagger != 1 && nb > t.block_budget && c0 < c1;
    const bool save = t.stagger && blockIdx.x == 0;
    if (!score && !save) return;
    __shared__ float qp[128], qn[128];
    for (int ch = threadIdx.x; ch < hd; ch += blockDim.x) {
        float a = 0.0f, z = 0.0f;
        for (int h = 0; h < G; h++) {
            float x = h16_to(q[(size_t)b * c.n_heads * hd + (size_t)(g * G + h) * hd + ch]);
            if (x > 0.0f) a = __fadd_rn(a, x);
            else z = __fadd_rn(z, x);
        }
        qp[ch] = a;
        qn[ch] = z;
        if (save) {
            t.sa[lg * 2 * hd + ch] = a;
            t.sa[lg * 2 * hd + hd + ch] = z;
        }
    }
    if (!score) return;
    __syncthreads();
    const int sub = threadIdx.x & 7, grp = threadIdx.x >> 3, ngrp = blockDim.x >> 3;
    float *out = c.bscore + ((size_t)b * c.n_kv + g) * c.nb_max;
    /* trips uniform per warp (its four groups shuffle together); a group past c1 idles */
    for (int b0 = c0 + (grp & ~3); b0 < c1; b0 += ngrp) {
        const int blk = b0 + (grp & 3);
        const bool live = blk < c1;
        const h16 *M = mm + (size_t)(live ? blk : c0) * 2 * hd, *m = M + hd;
        float ap = 0.0f, an = 0.0f;
        for (int i = 0; i < hd; i += 8) {
            ap = __fadd_rn(ap, __fmul_rn(qp[i + sub], h16_to(M[i + sub])));
            an = __fadd_rn(an, __fmul_rn(qn[i + sub], h16_to(m[i + sub])));
        }
        for (int w = 4; w >= 1; w >>= 1) {
            float op = __shfl_down_sync(0xffffffffu, ap, w, 8);
            float on = __shfl_down_sync(0xffffffffu, an, w, 8);
            if (sub < w) {
                ap = __fadd_rn(ap, op);
                an = __fadd_rn(an, on);
            }
        }
        if (sub == 0 && live) out[blk] = __fadd_rn(ap, an);
    }
}

/* ---------------------------------------------------------------- top-k in one CTA */

/* flag[i] = 1 for the k first of sc[0 .. n-1] in the order above (k < n), else 0. Every thread
 * of the CTA calls it; hist: 256 + 8 words, tmp: 33 ints of shared memory. */
static __device__ void tls_topk(const float *sc, int n, int k, unsigned char *flag, unsigned *hist, int *tmp)
{
    const int nt = blockDim.x, tid = threadIdx.x, lane = tid & 31;
    const int per = (n + nt - 1) / nt, i0 = min(tid * per, n), i1 = min(i0 + per, n);
    unsigned prefix = 0, mask = 0;
    int kk = k; /* rank still to place among the keys matching prefix */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += nt) hist[i] = 0;
        __syncthreads();
        /* order does not matter here: strided (no bank conflicts), and the lanes that share a
         * digit add once (most scores share their top bytes: one bin would serialize) */
        for (int base = 0; base < n; base += nt) {
            const int i = base + tid;
            const unsigned u = i < n ? tls_key(sc[i]) : 0u;
            const bool ok = i < n && (u & mask) == prefix;
            const unsigned dig = ok ? (u >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, dig);
            if (ok && lane == __ffs(peers) - 1) atomicAdd(&hist[dig], (unsigned)__popc(peers));
        }
        __syncthreads();
        if (tid < 32) {
            /* lane j holds digits 255 - 8j .. 248 - 8j (descending): their sum, a scan over lanes */
            int s = 0;
            for (int d = 0; d < 8; d++) s += hist[255 - 8 * lane - d];
            int incl = s;
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
            int excl = incl - s;
            unsigned hit = __ballot_sync(0xffffffffu, incl >= kk);
            int first = __ffs(hit) - 1; /* hit is never empty: the counts sum to >= kk */
            if (lane == first) {
                int acc = excl, d = 255 - 8 * lane;
                for (int j = 0; j < 8; j++, d--) {
                    if (acc + (int)hist[d] >= kk) break;
                    acc += hist[d];
                }
                hist[256] = (unsigned)d;
                hist[257] = (unsigned)(kk - acc);
            }
        }
        __syncthreads();
        prefix |= hist[256] << shift;
        mask |= 255u << shift;
        kk = (int)hist[257];
        __syncthreads();
    }
    /* keys above prefix are in; of those equal to it, the first kk by index */
    int eq = 0;
    for (int i = i0; i < i1; i++) eq += tls_key(sc[i]) == prefix;
    int tot, base = tls_scan(eq, tmp, &tot);
    for (int i = i0; i < i1; i++) {
        unsigned u = tls_key(sc[i]);
        int f = u > prefix;
        if (u == prefix) f = base++ < kk;
        flag[i] = (unsigned char)f;
    }
    __syncthreads();
}

/* out[0 ..] = the indices i < n with flag[i], ascending; returns their count (every thread). */
static __device__ int tls_compact(const unsigned char *flag, int n, int *out, int *tmp)
{
    const int nt = blockDim.x, tid = threadIdx.x;
    const int per = (n + nt - 1) / nt, i0 = min(tid * per, n), i1 = min(i0 + per, n);
    int cnt = 0;
    for (int i = i0; i < i1; i++) cnt += flag[i];
    int tot, at = tls_scan(cnt, tmp, &tot);
    for (int i = i0; i < i1; i++)
        if (flag[i]) out[at++] = i;
    __syncthreads();
    return tot;
}

/* ---------------------------------------------------------------- the row cache's slots */

/* An offloaded row's row cache (gpu/tls.cuh), one (layer, KV head): ids[0 .. m) the new list
 * (ascending, m <= t.rcs), already in idx (global; every thread calls this after writing its
 * part). A listed key that a slot holds keeps that slot (rslot[j] = s); the others take, in list
 * order, the slots (in slot order) that hold no listed key (rslot[j] = -1 - s, the table updated:
 * the attention then reads its rows over PCIe and writes them there). Returns the keys held
 * (every thread). ip: 3 x GPU_TLS_RC_MAX ints of shared memory, used: t.rcs bytes. */
static __device__ int tls_rc_assign(const gpu_tls_dev &t, size_t lg, const int *idx, int m,
                                    int *rslot, int *ip, unsigned char *used, int *tmp)
{
    const int nt = blockDim.x, tid = threadIdx.x, S = t.rcs;
    int *tp = ip, *ids = ip + GPU_TLS_RC_MAX, *hs = ip + 2 * GPU_TLS_RC_MAX;
    int *tbl = t.rct + lg * S;
    __syncthreads(); /* idx and the shared arrays' last readers */
    for (int s = tid; s < S; s += nt) {
        tp[s] = tbl[s];
        used[s] = 0;
    }
    for (int j = tid; j < m; j += nt) {
        ids[j] = idx[j];
        hs[j] = -1;
    }
    __syncthreads();
    for (int s = tid; s < S; s += nt) {
        const int q = tp[s];
        if (q < 0) continue;
        int lo = 0, hi = m;
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            if (ids[mid] < q) lo = mid + 1;
            else hi = mid;
        }
        if (lo < m && ids[lo] == q) {
            hs[lo] = s; /* a position sits in one slot at most */
            used[s] = 1;
        }
    }
    __syncthreads();
    /* the free slots, in slot order, into tp */
    const int ps = (S + nt - 1) / nt, s0 = min(tid * ps, S), s1 = min(s0 + ps, S);
    int f = 0;
    for (int s = s0; s < s1; s++) f += !used[s];
    int tot, at = tls_scan(f, tmp, &tot);
    for (int s = s0; s < s1; s++)
        if (!used[s]) tp[at++] = s;
    __syncthreads();
    /* the k-th key not held takes the k-th free slot (free >= S - held >= m - held) */
    const int pj = (m + nt - 1) / nt, j0 = min(tid * pj, m), j1 = min(j0 + pj, m);
    int miss = 0;
    for (int j = j0; j < j1; j++) miss += hs[j] < 0;
    at = tls_scan(miss, tmp, &tot);
    for (int j = j0; j < j1; j++) {
        int s = hs[j];
        if (s < 0) {
            s = tp[at++];
            tbl[s] = ids[j];
            rslot[j] = -1 - s;
        } else {
            rslot[j] = s;
        }
    }
    return m - tot;
}

/* ---------------------------------------------------------------- both selections */

#define SEL_KEPT_MAX (GPU_TLS_MAX_CAND / 16) /* kept blocks at the smallest block size */

__global__ void __launch_bounds__(SEL_THREADS) tls_select_k(gpu_tls_cfg c, int layer, const h16 *q,
                                                          const int *pos, const gpu_tls_dev *tls)
{
    extern __shared__ float sc[]; /* GPU_TLS_MAX_CAND scores, then two flag arrays */
    unsigned char *fa = (unsigned char *)(sc + GPU_TLS_MAX_CAND), *fb = fa + GPU_TLS_MAX_CAND;
    __shared__ int kept[SEL_KEPT_MAX];
    __shared__ unsigned hist[264];
    __shared__ int tmp[33];
    __shared__ float qsel[128];
    __shared__ float qsum_s;
    __shared__ unsigned long long st[2];
    const int g = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, nt = blockDim.x, hd = c.hd;
    const int G = c.n_heads / c.n_kv, r = c.r, bs = c.bs;
    const gpu_tls_dev t = tls[b];
    const int n = pos[b] + 1;
    int *cnt = c.cnt_idx + (size_t)b * c.n_kv + g;
    int *idx = c.idx + ((size_t)b * c.n_kv + g) * GPU_TLS_MAX_TOKENS;
    if (!t.on) {
        if (tid == 0) *cnt = -n;
        return;
    }
    const size_t lg = (size_t)layer * c.n_kv + g;
    const int nb = (n + bs - 1) / bs;
    if (t.stagger == 1) {
        /* staggered: the set of the step before (tls_stagger_set), no level 1 here */
    } else if (nb > t.block_budget) {
        const float *bsc = c.bscore + ((size_t)b * c.n_kv + g) * c.nb_max;
        for (int i = tid; i < nb; i += nt) sc[i] = bsc[i];
        __syncthreads();
        tls_topk(sc, nb, t.block_budget, fa, hist, tmp);
    } else {
        for (int i = tid; i < nb; i += nt) fa[i] = 1;
        __syncthreads();
    }
    /* the offload's count: blocks kept now that were not kept at the step before */
    if (tid < 2) st[tid] = 0;
    __syncthreads();
    unsigned *prev = t.prev + lg * t.words;
    for (int w = tid; w < (t.stagger == 1 ? 0 : (nb + 31) / 32); w += nt) {
        unsigned word = 0;
        for (int j = 0; j < 32 && w * 32 + j < nb; j++) word |= (unsigned)fa[w * 32 + j] << j;
        unsigned fresh = word & ~prev[w];
        prev[w] = word;
        atomicAdd(&st[0], (unsigned long long)__popc(fresh));
        atomicAdd(&st[1], (unsigned long long)__popc(word));
    }
    int nk;
    if (t.stagger == 1) {
        nk = tls_stagger_set(t, lg, nb, kept);
    } else {
        nk = tls_compact(fa, nb, kept, tmp);
        if (t.stagger == 2 && kept[nk - 1] != nb - 1) { /* a staggered first step: + the newest */
            __syncthreads();
            if (tid == 0) kept[nk] = nb - 1;
            nk++;
            __syncthreads();
        }
    }
    const int lastlen = n - (nb - 1) * bs;
    const int C = nk * bs - (kept[nk - 1] == nb - 1 ? bs - lastlen : 0);
    int m;
    if (C <= t.token_budget) {
        for (int j = tid; j < C; j += nt) idx[j] = kept[j / bs] * bs + j % bs;
        m = C;
    } else {
        const unsigned short *ch = c.ch + lg * r;
        if (tid < r) {
            float a = 0.0f;
            for (int h = 0; h < G; h++)
                a = __fadd_rn(a, h16_to(q[(size_t)b * c.n_heads * hd + (size_t)(g * G + h) * hd + ch[tid]]));
            qsel[tid] = __fdiv_rn(a, (float)G);
        }
        __syncthreads();
        if (tid == 0) {
            float s = 0.0f;
            for (int i = 0; i < r; i++) s = __fadd_rn(s, qsel[i]);
            qsum_s = s;
        }
        __syncthreads();
        const float qsum = qsum_s;
        for (int j = tid; j < C; j += nt) {
            const int p = kept[j / bs] * bs + j % bs;
            const unsigned char *code = t.code + (lg * t.cap + p) * (r / 2);
            const float2 lb = t.lab[lg * t.cap + p];
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int i = 0;
            if ((r & 7) == 0) {
                /* r / 2 bytes a multiple of 4: word k holds codes 8k .. 8k+7, lane l in bits 4l */
                const unsigned *wp = (const unsigned *)code;
                unsigned wd[16];
                for (int k = 0; k < r / 8; k++) wd[k] = wp[k];
                for (int k = 0; k < r / 8; k++, i += 8)
                    for (int l = 0; l < 8; l++)
                        acc[l] = __fadd_rn(acc[l], __fmul_rn(qsel[i + l], (float)((wd[k] >> (4 * l)) & 15u)));
            }
            for (; i + 8 <= r; i += 8)
                for (int l = 0; l < 8; l += 2) {
                    unsigned char cc = code[(i + l) / 2];
                    acc[l] = __fadd_rn(acc[l], __fmul_rn(qsel[i + l], (float)(cc & 15)));
                    acc[l + 1] = __fadd_rn(acc[l + 1], __fmul_rn(qsel[i + l + 1], (float)(cc >> 4)));
                }
            for (int l = 0; i < r; i++, l++) {
                unsigned char cc = code[i / 2];
                acc[l] = __fadd_rn(acc[l], __fmul_rn(qsel[i], (float)(i & 1 ? cc >> 4 : cc & 15)));
            }
            for (int w = 4; w >= 1; w >>= 1)
                for (int l = 0; l < w; l++) acc[l] = __fadd_rn(acc[l], acc[l + w]);
            sc[j] = __fadd_rn(__fmul_rn(lb.y, acc[0]), __fmul_rn(lb.x, qsum));
        }
        __syncthreads();
        tls_topk(sc, C, t.token_budget, fb, hist, tmp);
        /* the kept candidates' positions, ascending (the candidates are) */
        const int per = (C + nt - 1) / nt, i0 = min(tid * per, C), i1 = min(i0 + per, C);
        int k = 0;
        for (int i = i0; i < i1; i++) k += fb[i];
        int tot, at = tls_scan(k, tmp, &tot);
        for (int i = i0; i < i1; i++)
            if (fb[i]) idx[at++] = kept[i / bs] * bs + i % bs;
        m = tot;
    }
    int held = 0;
    if (t.rct && m <= t.rcs)
        held = tls_rc_assign(t, lg, idx, m, c.rslot + ((size_t)b * c.n_kv + g) * GPU_TLS_RC_MAX,
                             (int *)sc, fa, tmp);
    if (tid == 0) {
        if (held) atomicAdd(&t.cnt[4], (unsigned long long)held);
        *cnt = m;
        atomicAdd(&t.cnt[0], (unsigned long long)m);
        atomicAdd(&t.cnt[1], (unsigned long long)n);
        atomicAdd(&t.cnt[2], st[0]);
        atomicAdd(&t.cnt[3], st[1]);
    }
}

/* ---------------------------------------------------------------- the staggered rows' next sets
 * One CTA per (KV head, sparse layer l0 + y, row): level 1 over every block with the query the
 * layer saved (sa), two threads a block as the one-kernel form scores (the same bits), its
 * top-k (tls_topk), and S_t into sg with the blocks it saw (sparse_tls_pipe_step's step 3). */
__global__ void __launch_bounds__(NEXT_THREADS) tls_next_k(gpu_tls_cfg c, int l0, const int *pos,
                                                        const gpu_tls_dev *tls)
{
    extern __shared__ float sc[]; /* GPU_TLS_MAX_CAND scores, then flags */
    unsigned char *fl = (unsigned char *)(sc + GPU_TLS_MAX_CAND);
    __shared__ unsigned hist[264];
    __shared__ int tmp[33];
    __shared__ float qp[128], qn[128];
    const int g = blockIdx.x, layer = l0 + blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, nt = blockDim.x, hd = c.hd;
    const gpu_tls_dev t = tls[b];
    if (!t.on || !t.stagger) return;
    const int n = pos[b] + 1, nb = (n + c.bs - 1) / c.bs, bb = t.block_budget;
    const size_t lg = (size_t)layer * c.n_kv + g;
    int *sg = t.sg + lg * (2 + t.kmax);
    if (nb <= bb) {
        for (int i = tid; i < nb; i += nt) sg[2 + i] = i;
        if (tid == 0) sg[0] = nb, sg[1] = nb;
        return;
    }
    for (int i = tid; i < hd; i += nt) qp[i] = t.sa[lg * 2 * hd + i], qn[i] = t.sa[lg * 2 * hd + hd + i];
    __syncthreads();
    const h16 *mm = t.mm + lg * t.nbc * 2 * hd;
    for (int i0 = 0; i0 < nb; i0 += nt / 2) {
        const int i = i0 + (tid >> 1), half = tid & 1;
        const bool live = i < nb;
        const h16 *src = mm + (size_t)(live ? i : 0) * 2 * hd + half * hd;
        const float *qv = half ? qn : qp;
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
            for (int l = 0; l < 8; l++) acc[l] = __fadd_rn(acc[l], __fmul_rn(qv[k8 * 8 + l], h16_to(e[l])));
        }
#pragma unroll
        for (int wdt = 4; wdt >= 1; wdt >>= 1)
#pragma unroll
            for (int l = 0; l < wdt; l++) acc[l] = __fadd_rn(acc[l], acc[l + wdt]);
        const float other = __shfl_xor_sync(0xffffffffu, acc[0], 1);
        if (live && !half) sc[i] = __fadd_rn(acc[0], other);
    }
    __syncthreads();
    tls_topk(sc, nb, bb, fl, hist, tmp);
    const int k = tls_compact(fl, nb, sg + 2, tmp);
    if (tid == 0) sg[0] = k, sg[1] = nb;
}

int gpu_tls_next_layers(cudaStream_t s, const gpu_tls_cfg &c, int l0, int l1, int dense_layers,
                        int T, const int *pos, const gpu_tls_dev *tls)
{
    l0 = l0 > dense_layers ? l0 : dense_layers;
    if (l1 <= l0 || T < 1) return ACCEL_OK;
    const size_t smem = (size_t)GPU_TLS_MAX_CAND * (sizeof(float) + 1);
    tls_next_k<<<dim3(c.n_kv, l1 - l0, T), NEXT_THREADS, smem, s>>>(c, l0, pos, tls);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- attention over the list */

template <int GM>
__global__ void __launch_bounds__(ATT_WARPS * 32) tls_attend_k(gpu_tls_cfg c, int layer, const h16 *q,
                                                               const gpu_seq_dev *seqs,
                                                               const gpu_tls_dev *tls, h16 *out)
{
    const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z, hd = c.hd;
    const int G = c.n_heads / c.n_kv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ __align__(16) float qs[GPU_TLS_MAX_GROUP][128];
    __shared__ float wm[ATT_WARPS][GPU_TLS_MAX_GROUP], wl[ATT_WARPS][GPU_TLS_MAX_GROUP];
    __shared__ float wo[ATT_WARPS][128];
    __shared__ int last_s;
    const float sc = rsqrtf((float)hd) * 1.4426950408889634f; /* log2 domain */
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x)
        qs[i / hd][i % hd] = h16_to(q[(size_t)b * c.n_heads * hd + (size_t)g * G * hd + i]) * sc;
    __syncthreads();
    const int cnt = c.cnt_idx[(size_t)b * c.n_kv + g];
    const int dense = cnt < 0, total = dense ? -cnt : cnt;
    const int *idx = c.idx + ((size_t)b * c.n_kv + g) * GPU_TLS_MAX_TOKENS;
    const int per = (total + GPU_TLS_SPLITS - 1) / GPU_TLS_SPLITS;
    const int j0 = split * per, j1 = min(j0 + per, total);
    const gpu_seq_dev sq = seqs[b];
    /* the row cache (tls_rc_assign ran for this list) */
    const int *rct = tls[b].rct, rcs = tls[b].rcs;
    const bool rc = !dense && rct && total <= rcs;
    h16 *rrow = rc ? tls[b].rcr + ((size_t)layer * c.n_kv + g) * rcs * 2 * hd : nullptr;
    const int *rs = c.rslot + ((size_t)b * c.n_kv + g) * GPU_TLS_RC_MAX;
    float m[GM], l[GM], acc[GM][4];
#pragma unroll
    for (int h = 0; h < GM; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        for (int e = 0; e < 4; e++) acc[h][e] = 0.0f;
    }
    /* lane holds channels 4 lane .. 4 lane + 3: a row is one 8-byte load per lane, the warp's
     * 256 bytes in whole 128-byte lines (an offloaded row's K and V cross PCIe as two such
     * reads, not eight of 64 bytes: gpu/tls_off.cu) */
    const int c4 = 4 * lane;
    const bool on = c4 < hd;
    for (int j = j0 + warp * TOK_UNROLL; j < j1; j += ATT_WARPS * TOK_UNROLL) {
        int pj[TOK_UNROLL], sl[TOK_UNROLL]; /* sl: the slot (rslot's code), 0 without a cache */
#pragma unroll
        for (int u = 0; u < TOK_UNROLL; u++) {
            pj[u] = j + u < j1 ? (dense ? j + u : idx[j + u]) : -1;
            sl[u] = rc && j + u < j1 ? rs[j + u] : -1 - (1 << 30);
        }
#pragma unroll
        for (int u = 1; u < TOK_UNROLL; u++) /* past the end: u = 0's rows again, from its source */
            if (pj[u] < 0) sl[u] = sl[0] >= 0 ? sl[0] : -1 - (1 << 30);
        uint2 kr[TOK_UNROLL], vr[TOK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOK_UNROLL; u++) {
            const int p = pj[u] < 0 ? pj[0] : pj[u];
            const h16 *k, *v;
            if (sl[u] >= 0) {
                k = rrow + (size_t)sl[u] * 2 * hd;
                v = k + hd;
            } else {
                k = tls_krow(sq, sq.k, layer, c.n_kv, g, hd, p);
                v = tls_krow(sq, sq.v, layer, c.n_kv, g, hd, p);
            }
            kr[u] = on ? *(const uint2 *)(k + c4) : make_uint2(0u, 0u);
            vr[u] = on ? *(const uint2 *)(v + c4) : make_uint2(0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < TOK_UNROLL; u++) {
            /* a key new to the cache: its rows into the slot it was given */
            if (sl[u] < 0 && sl[u] > -1 - (1 << 30) && on) {
                h16 *d = rrow + (size_t)(-1 - sl[u]) * 2 * hd;
                *(uint2 *)(d + c4) = kr[u];
                *(uint2 *)(d + hd + c4) = vr[u];
            }
        }
        float kx[TOK_UNROLL][4], vx[TOK_UNROLL][4];
#pragma unroll
        for (int u = 0; u < TOK_UNROLL; u++) {
            const h16x2 *k2 = (const h16x2 *)&kr[u], *v2 = (const h16x2 *)&vr[u];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float2 a = h16x2_to(k2[e]), b = h16x2_to(v2[e]);
                kx[u][2 * e] = a.x, kx[u][2 * e + 1] = a.y;
                vx[u][2 * e] = b.x, vx[u][2 * e + 1] = b.y;
            }
        }
#pragma unroll
        for (int u = 0; u < TOK_UNROLL; u++) {
            if (pj[u] < 0) break;
#pragma unroll
            for (int h = 0; h < GM; h++) {
                if (h >= G) break;
                float s = 0.0f;
                if (on) {
                    const float4 q4 = *(const float4 *)&qs[h][c4];
                    s = q4.x * kx[u][0];
                    s += q4.y * kx[u][1];
                    s += q4.z * kx[u][2];
                    s += q4.w * kx[u][3];
                }
                for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                float mn = fmaxf(m[h], s), corr = exp2f(m[h] - mn), pe = exp2f(s - mn);
                l[h] = l[h] * corr + pe;
#pragma unroll
                for (int e = 0; e < 4; e++) acc[h][e] = acc[h][e] * corr + pe * vx[u][e];
                m[h] = mn;
            }
        }
    }
    /* the warps' partials merged per head into this split's partial */
    const size_t slot0 = ((size_t)b * c.n_heads + (size_t)g * G) * GPU_TLS_SPLITS + split;
#pragma unroll
    for (int h = 0; h < GM; h++) {
        if (lane == 0 && h < G) {
            wm[warp][h] = m[h];
            wl[warp][h] = l[h];
        }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < GM; h++) {
        if (h >= G) break;
        float M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, wm[w][h]);
        const float f = M == -INFINITY ? 0.0f : exp2f(m[h] - M);
        if (on) {
#pragma unroll
            for (int e = 0; e < 4; e++) wo[warp][c4 + e] = acc[h][e] * f;
        }
        __syncthreads();
        const size_t slot = slot0 + (size_t)h * GPU_TLS_SPLITS;
        for (int ch = threadIdx.x; ch < hd; ch += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++) o += wo[w][ch];
            c.po[slot * hd + ch] = o;
        }
        if (threadIdx.x == 0) {
            float L = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++)
                if (wm[w][h] != -INFINITY) L += wl[w][h] * exp2f(wm[w][h] - M);
            c.pml[slot] = make_float2(M, L);
        }
        __syncthreads();
    }
    /* the last split of this (sequence, KV head) to finish merges */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *a = c.arrive + (size_t)b * c.n_kv + g;
        last_s = atomicAdd(a, 1) == GPU_TLS_SPLITS - 1;
        if (last_s) *a = 0;
    }
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    for (int h = 0; h < G; h++) {
        const size_t s0 = ((size_t)b * c.n_heads + (size_t)g * G + h) * GPU_TLS_SPLITS;
        float M = -INFINITY;
        for (int s = 0; s < GPU_TLS_SPLITS; s++) {
            float2 ml = __ldcg(c.pml + s0 + s);
            if (ml.y > 0.0f) M = fmaxf(M, ml.x);
        }
        for (int ch = threadIdx.x; ch < hd; ch += blockDim.x) {
            float o = 0.0f, L = 0.0f;
            for (int s = 0; s < GPU_TLS_SPLITS; s++) {
                float2 ml = __ldcg(c.pml + s0 + s);
                if (!(ml.y > 0.0f)) continue;
                float f = exp2f(ml.x - M);
                L += ml.y * f;
                o += __ldcg(c.po + (s0 + s) * hd + ch) * f;
            }
            out[(size_t)b * c.n_heads * hd + (size_t)(g * G + h) * hd + ch] = h16_from(o / L);
        }
    }
}

int gpu_tls_split_layer(cudaStream_t s, const gpu_tls_cfg &c, int layer, int T, const h16 *q,
                        const int *pos, const gpu_seq_dev *seqs, const gpu_tls_dev *tls, h16 *out,
                        int sel_threads)
{
    const size_t smem = (size_t)GPU_TLS_MAX_CAND * (sizeof(float) + 2);
    if (!sel_threads) {
        const char *ev = getenv("TANDEM_TLS_SEL_THREADS");
        sel_threads = ev && !strcmp(ev, "512") ? 512 : SEL_THREADS; /* gpu/tls.cuh */
    }
    tls_score_k<<<dim3(GPU_TLS_CHUNKS, c.n_kv, T), 256, 0, s>>>(c, layer, q, pos, seqs, tls);
    GPU_LAUNCHED();
    tls_select_k<<<dim3(c.n_kv, T), sel_threads, smem, s>>>(c, layer, q, pos, tls);
    GPU_LAUNCHED();
    const int G = c.n_heads / c.n_kv;
    const dim3 ag(GPU_TLS_SPLITS, c.n_kv, T);
    if (G <= 4) tls_attend_k<4><<<ag, ATT_WARPS * 32, 0, s>>>(c, layer, q, seqs, tls, out);
    else if (G <= 8) tls_attend_k<8><<<ag, ATT_WARPS * 32, 0, s>>>(c, layer, q, seqs, tls, out);
    else tls_attend_k<16><<<ag, ATT_WARPS * 32, 0, s>>>(c, layer, q, seqs, tls, out);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

int gpu_tls_split_init(void)
{
    const size_t smem = (size_t)GPU_TLS_MAX_CAND * (sizeof(float) + 2);
    GPU_CHECK(cudaFuncSetAttribute(tls_select_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    GPU_CHECK(cudaFuncSetAttribute(tls_next_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)((size_t)GPU_TLS_MAX_CAND * (sizeof(float) + 1))));
    /* two CTAs of 512 threads per SM: 2 x ~104 KB of shared memory */
    GPU_CHECK(cudaFuncSetAttribute(tls_select_k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared));
    return ACCEL_OK;
}
