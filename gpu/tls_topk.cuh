/* gpu/tls_topk.cuh — the one-kernel AsyncTLS layer's shared memory and its top-k over a
 * thread-block cluster of CL CTAs or inside each CTA (gpu/tls_kernels.cu, the only includer, has
 * the plan: its top comment; split from it to keep files small). */
#ifndef TANDEM_GPU_TLS_TOPK_CUH
#define TANDEM_GPU_TLS_TOPK_CUH
#include "gpu/tls_dev.cuh"
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TLS_CL GPU_TLS_CLUSTER /* CTAs per cluster (the kernels' CL: TLS_CL, or 2 at larger batches) */
#define TLS_KEPT_MAX (GPU_TLS_MAX_CAND / 16)        /* kept blocks at the smallest block size */
#define TLS_CAND 4                                  /* level-2 candidates a thread loads at once */
#define TLS_LOCAL_MAX 2048 /* level-1 blocks every CTA selects from alone (more: over the cluster) */

/* Cluster barrier with release / acquire semantics (shared and global memory written before it
 * are visible to every CTA of the cluster after it). */
__device__ __forceinline__ void tls_cl_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* ... in two halves: the wait returns once every thread of the cluster has arrived (the work
 * between them hides the barrier's latency); each arrive is followed by one wait. */
__device__ __forceinline__ void tls_cl_arrive()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void tls_cl_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* One CTA's shared memory. The all, hist, ex, kept, lst, po and pml members are read or written
 * by the other CTAs of the cluster (distributed shared memory). */
template <int NT, int CL> struct tls_smem {
    float q[GPU_TLS_MAX_GROUP * 128]; /* the group's queries, head-major, as floats */
    float qp[128], qn[128], qsel[128];
    union __align__(16) {
        struct {
            float sc[GPU_TLS_MAX_CAND / CL];
            unsigned char fl[GPU_TLS_MAX_CAND / CL];
        } s;                         /* the selection: this CTA's scores and flags */
        float wo[NT / 32][4 * 128];  /* the attention's end: the warps' sums of four heads; before
                                        it, a tile's scores and rows (tls_attend_tiles) */
    } u;
    int kept[TLS_KEPT_MAX];          /* every kept block, ascending (the whole cluster's) */
    int ktb[TLS_KEPT_MAX];           /* ... the pool table's entry of each (0: a contiguous cache) */
    int lst[GPU_TLS_MAX_TOKENS / CL]; /* the kept keys this CTA attends, as candidate indices */
    int wc[NT / 32][2];              /* the warps' counts above the k-th and equal to it */
    unsigned hist[3][256];           /* the radix passes' histograms (in turn) */
    unsigned tot[256];
    int ex[2];                       /* this CTA's keys above the k-th and equal to it */
    int tmp[33];
    union {
        float all[TLS_LOCAL_MAX];          /* level 1's scores, the whole cluster's (when few) */
        float po[GPU_TLS_MAX_GROUP * 128]; /* the attention: this CTA's unnormalized output per
                                              head (written after every CTA's level 1) */
    };
    float2 pml[GPU_TLS_MAX_GROUP];     /* ... its (max, sum) per head */
    float wm[NT / 32][GPU_TLS_MAX_GROUP], wl[NT / 32][GPU_TLS_MAX_GROUP]; /* the attention: a
                                       tile's max and sum per warp and head */
    float tc[GPU_TLS_MAX_GROUP];       /* ... a tile's rescale of the sums before it, per head */
    unsigned long long st[2];
    float qsum;
};

/* Every warp of a radix select's pass, from the pass's histogram t (256 counts): the digit whose
 * keys hold rank kk counting from the highest (lane j sums digits 255 - 8j .. 248 - 8j, a scan
 * over the lanes finds the first whose running sum reaches kk, then the digit inside its eight);
 * *above: the keys of the higher digits. The counts sum to >= kk. */
__device__ __forceinline__ int tls_digit_pick(const unsigned *t, int kk, int *above)
{
    const int lane = threadIdx.x & 31;
    int s = 0;
#pragma unroll
    for (int d = 0; d < 8; d++) s += t[255 - 8 * lane - d];
    int incl = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, incl >= kk);
    const int first = __ffs(hit) - 1; /* never empty */
    int acc = __shfl_sync(0xffffffffu, incl - s, first), d = 255 - 8 * first;
    for (int j = 0; j < 8; j++, d--) {
        if (acc + (int)t[d] >= kk) break;
        acc += t[d];
    }
    *above = acc;
    return d;
}

/* fl[i] = 1 for the keys of sc[0 .. nl-1] (this CTA's range of the cluster's indices, the ranges
 * in rank order) among the k first of the whole cluster in the order above (k < the cluster's
 * total), else 0. Every thread of every CTA of the cluster calls it. *mine: this CTA's kept
 * count, *off: the kept before its range.
 * Per pass one cluster barrier and one CTA barrier: the histograms alternate between two
 * buffers (the one a pass fills was last read by the other CTAs two passes before, ahead of the
 * cluster barrier this CTA has passed since, and is zeroed before the CTA barrier that precedes
 * the pass), and every warp finds the pass's digit from the summed histogram itself. */
template <int NT, int CL>
__device__ void tls_cl_topk(cg::cluster_group &cl, int rank, const float *sc, int nl, int k,
                            unsigned char *fl, tls_smem<NT, CL> &S, int *mine, int *off)
{
    const int tid = threadIdx.x, nt = NT, lane = tid & 31;
    unsigned prefix = 0, mask = 0;
    int kk = k; /* rank still to place among the keys matching prefix */
    if (tid < 256) S.hist[0][tid] = 0, S.hist[1][tid] = 0;
    __syncthreads();
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        unsigned *h = S.hist[pass & 1];
        for (int base = 0; base < nl; base += nt) {
            const int i = base + tid;
            const unsigned u = i < nl ? tls_key(sc[i]) : 0u;
            const bool ok = i < nl && (u & mask) == prefix;
            const unsigned dig = ok ? (u >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, dig);
            if (ok && lane == __ffs(peers) - 1) atomicAdd(&h[dig], (unsigned)__popc(peers));
        }
        tls_cl_sync();
        if (tid < 256) {
            unsigned s = 0;
#pragma unroll
            for (int q = 0; q < CL; q++) s += cl.map_shared_rank(h, q)[tid];
            S.tot[tid] = s; /* the other warps read tot until the next pass's cluster barrier */
            S.hist[(pass + 1) & 1][tid] = 0;
        }
        __syncthreads();
        int acc;
        const int d = tls_digit_pick(S.tot, kk, &acc);
        const int done = (int)S.tot[d] == kk - acc;
        prefix |= (unsigned)d << shift;
        mask |= 255u << shift;
        kk -= acc;
        if (done) break;
    }
    /* keys above prefix (under mask) are in; of those equal to it, the first kk by index. The
     * counts below 2^16 (a CTA's range holds at most GPU_TLS_MAX_CAND / 2 keys), so one scan
     * takes both: above in the low half, equal in the high half. */
    const int per = (nl + nt - 1) / nt, i0 = min(tid * per, nl), i1 = min(i0 + per, nl);
    int gt = 0, eq = 0;
    for (int i = i0; i < i1; i++) {
        const unsigned u = tls_key(sc[i]) & mask;
        gt += u > prefix;
        eq += u == prefix;
    }
    int tot2;
    const int ex2 = tls_scan(gt | eq << 16, S.tmp, &tot2);
    int at = ex2 >> 16;
    if (tid == 0) S.ex[0] = tot2 & 0xffff, S.ex[1] = tot2 >> 16;
    tls_cl_sync();
    int before = 0, eq_before = 0, my = 0; /* equal keys of the ranks below this one */
    for (int q = 0; q < CL; q++) {
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

/* ---------------------------------------------------------------- top-k inside each CTA
 * When level 1's scores are few, every CTA pushes its range's scores into every CTA's `all`
 * (distributed shared memory stores), one cluster barrier, and then each CTA selects from the
 * whole array alone: the same radix select and the same order as tls_cl_topk, with CTA barriers
 * only (where tls_cl_topk takes a cluster barrier and a sum of the cluster's histograms per pass,
 * and one more barrier to hand out the kept list). */

/* sc[0 .. nl-1], this CTA's range of a level's scores starting at index lo, into all[lo ..] of
 * every CTA of the cluster (the other CTAs have started and no longer read their all: the caller
 * waited on a cluster barrier for that). */
template <int NT, int CL>
__device__ void tls_bcast(cg::cluster_group &cl, const float *sc, int nl, int lo, tls_smem<NT, CL> &S)
{
    for (int i = threadIdx.x; i < nl; i += NT) {
        const float x = sc[i];
#pragma unroll
        for (int q = 0; q < CL; q++) cl.map_shared_rank(S.all, q)[lo + i] = x;
    }
}

/* The k-th of all[0 .. N-1] (k < N) in the order above: *prefix under *mask, and *kk, the rank of
 * the k-th among the keys equal to prefix under mask (every key above is in, then the first kk
 * equal ones by index). Every thread of the CTA calls it, all[] complete. */
template <int NT, int CL>
__device__ void tls_cta_select(tls_smem<NT, CL> &S, int N, int k, unsigned *o_prefix, unsigned *o_mask, int *o_kk)
{
    const int tid = threadIdx.x, nt = NT, lane = tid & 31;
    unsigned prefix = 0, mask = 0;
    int kk = k;
    /* pass p fills hist[p % 3] and zeroes hist[(p + 1) % 3] (last read in pass p - 2's scan,
     * before the barrier of pass p - 1) for the next */
    if (tid < 256) S.hist[0][tid] = 0;
    __syncthreads();
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        unsigned *h = S.hist[pass % 3];
        for (int base = 0; base < N; base += nt) {
            const int i = base + tid;
            const unsigned u = i < N ? tls_key(S.all[i]) : 0u;
            const bool ok = i < N && (u & mask) == prefix;
            const unsigned dig = ok ? (u >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, dig);
            if (ok && lane == __ffs(peers) - 1) atomicAdd(&h[dig], (unsigned)__popc(peers));
        }
        if (tid < 256) S.hist[(pass + 1) % 3][tid] = 0;
        __syncthreads();
        int acc;
        const int d = tls_digit_pick(h, kk, &acc);
        const int done = (int)h[d] == kk - acc;
        prefix |= (unsigned)d << shift;
        mask |= 255u << shift;
        kk -= acc;
        if (done) break;
    }
    *o_prefix = prefix;
    *o_mask = mask;
    *o_kk = kk;
}

/* The kept indices of all[0 .. N-1] after tls_cta_select, ascending: fl[i - lo] = kept for i in
 * this CTA's range [lo, lo + nl), and out(J, i) for the J-th kept index i. Warp w takes a contiguous run of whole 32-index groups;
 * ballots rank the keys inside a group. */
template <int NT, int CL, typename F>
__device__ void tls_cta_list(tls_smem<NT, CL> &S, int N, unsigned prefix, unsigned mask, int kk, int lo, int nl,
                             F out)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned lt = (1u << lane) - 1u;
    const int chunk = ((N + NT / 32 - 1) / (NT / 32) + 31) & ~31;
    const int w0 = min(warp * chunk, N), w1 = min(w0 + chunk, N);
    int gt = 0, eq = 0;
    for (int base = w0; base < w1; base += 32) {
        const int i = base + lane;
        const unsigned u = i < w1 ? tls_key(S.all[i]) & mask : 0u;
        gt += __popc(__ballot_sync(0xffffffffu, i < w1 && u > prefix));
        eq += __popc(__ballot_sync(0xffffffffu, i < w1 && u == prefix));
    }
    if (lane == 0) S.wc[warp][0] = gt, S.wc[warp][1] = eq;
    __syncthreads();
    int gb = 0, eb = 0;
    for (int v = 0; v < warp; v++) gb += S.wc[v][0], eb += S.wc[v][1];
    int J = gb + min(eb, kk); /* kept before this warp's run */
    for (int base = w0; base < w1; base += 32) {
        const int i = base + lane;
        const bool in = i < w1;
        const unsigned u = in ? tls_key(S.all[i]) & mask : 0u;
        const unsigned bg = __ballot_sync(0xffffffffu, in && u > prefix);
        const unsigned be = __ballot_sync(0xffffffffu, in && u == prefix);
        const bool f = ((bg >> lane) & 1u) || (((be >> lane) & 1u) && eb + __popc(be & lt) < kk);
        const unsigned bf = __ballot_sync(0xffffffffu, f);
        if (in && i >= lo && i < lo + nl) S.u.s.fl[i - lo] = (unsigned char)f;
        if (f) out(J + __popc(bf & lt), i);
        J += __popc(bf);
        eb += __popc(be);
    }
    __syncthreads();
}

/* Candidate j of the kept blocks: its position kept[j / bs] * bs + j % bs into *pp, its row of
 * the cache (gpu_kv_row's, from the table entries in ktb) returned. bsh: log2 bs. */
template <int NT, int CL>
__device__ __forceinline__ long long tls_cand_row(const tls_smem<NT, CL> &S, const gpu_seq_dev &sq, int bsh, int j,
                                                  int *pp)
{
    const int kb = j >> bsh, p = (S.kept[kb] << bsh) + (j & ((1 << bsh) - 1));
    *pp = p;
    return sq.map.tbl ? (long long)S.ktb[kb] * sq.map.bstride + (p & (GPU_KV_BLOCK - 1)) : (long long)p;
}

#endif
