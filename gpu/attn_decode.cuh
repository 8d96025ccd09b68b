/* gpu/attn_decode.cuh — the single-row decode attention's ranges (flash-decoding), shared by
 * the decode attention kernel (attn_decode.cu, k_decode_fast) and the decode step kernel
 * (decode_step.cu), which runs the same range body inside its attention phase.
 *
 * A row's keys [kstart, qp] are cut into ns ranges (dec_ranges); d2_range computes one range of
 * one (token, KV head slice) with 256 threads and, in the last block of the row to finish, merges
 * the ranges (see the comment below). */
#ifndef TANDEM_GPU_ATTN_DECODE_CUH
#define TANDEM_GPU_ATTN_DECODE_CUH
#include "gpu/engine.cuh"
#include "gpu/mma.cuh"

#define DEC_MIN_SPLIT 64 /* keys: fewer per range would cost more in merging than they save */

/* How token t's keys [kstart, qp] are split: ns ranges of len keys (the last may be short). */
__device__ __forceinline__ void dec_ranges(int qp, int window, int splits, int *kstart, int *ns,
                                           int *len)
{
    *kstart = window > 0 ? max(0, qp + 1 - window) : 0;
    int n = qp + 1 - *kstart;
    *ns = min(splits, max(1, (n + DEC_MIN_SPLIT - 1) / DEC_MIN_SPLIT));
    *len = (n + *ns - 1) / *ns;
}

/* Query heads per block: the GQA group, in slices of at most 8 (registers: 2 * 8 * G floats). */
static inline int gpu_decode_heads_per_block(int group)
{
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

struct dec_params {
    const h16 *q;
    const int *seq_idx, *pos;
    const gpu_seq_dev *seqs;
    float *part_o;
    float2 *part_ml;
    h16 *out; /* the one-kernel form writes the merged rows itself */
    int layer, n_kv, n_heads, group, hd, qd, window, splits, gslices;
    int early; /* PDL and one new row per sequence: a first tile below it is read before the wait */
    float scale_log2;
    unsigned long long *tr; /* chain trace slot (engine.cuh), NULL: off */
    unsigned long long *btr; /* chain trace, every block: GPU_ATRACE_STAMPS per block (NULL: off) */
    int mma;                 /* 1: the kernels' ranges on the tensor cores (d2_mma_range) */
};


/* ---------------------------------------------------------------- the range body (head_dim 128)
 * Same ranges and arithmetic contract as attn_decode.cu's two-kernel form (scores in log2 units,
 * float32 throughout), built for latency: at batch 1 with 1K of context a layer's K and V are
 * 4 MB (1 us of HBM time) while the two-kernel form took many times that (a latency chain of
 * dependent loads, block barriers per sub-tile and a second launch). Here:
 *   - 256 threads; a tile of D2_TILE = 32 keys: half-warp lanes c = lane % 16 own 8 dims, the key
 *     of a thread in the tile is i * 16 + warp * 2 + lane / 16 (i < 2); a thread's K and V loads
 *     of the next tile go out before this tile's arithmetic (a register double buffer), so a
 *     range costs about one memory round trip plus its arithmetic;
 *   - q stays h16 in registers (the dot product is scaled afterwards): with 2 blocks per SM the
 *     kernel must fit 128 registers;
 *   - no barrier inside the loop: every warp runs its own online softmax over its keys;
 *   - the 8 warps merge through shared memory once, the block writes its range's partial, and
 *     the last block of the (token, KV head slice) to finish (a counter, which that block resets)
 *     merges the ranges with k_decode_merge's arithmetic — no second kernel.
 * d2_range<G, STEP> is that body for the block's (token t, KV head slice gx of ngx, range split):
 * STEP = false is the kernel's (PDL wait inside, L1-cached coherent loads), STEP = true the lab's
 * decode step kernel's (gpu/bench/decode_step.cu: no PDL; every load of data written in the same
 * kernel bypasses L1). Every thread
 * of the block calls it; it returns in the same way in all of them. */
#define D2_THREADS 256
#define D2_WARPS   8
#define D2_NI      2
#define D2_TILE    (D2_NI * 16)
#define D2_HD      128

/* Per-block stamps of the chain trace (chain_trace=1): start, wait returned, range
 * computed, done; block b of the launch at btr[GPU_ATRACE_STAMPS * b] (engine.cuh). */
__device__ __forceinline__ void d2_bmark(const dec_params &p, int i)
{
    if (!p.btr || threadIdx.x != 0) return;
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (b < GPU_ATRACE_BLOCKS) p.btr[GPU_ATRACE_STAMPS * b + i] = gpu_globaltimer();
}

/* Coherent loads (not __ldg): under PDL the QKV kernel may still be writing this token's row
 * when the block starts (it is read only after gpu_pdl_wait); in the decode step kernel (CG = true)
 * another block wrote it in this kernel, so the load bypasses L1 (__ldcg). */
template <bool CG>
__device__ __forceinline__ void d2_load(const h16 *base, const gpu_kv_map &m, int key, int ke,
                                        int c, uint4 *k)
{
    if (key < ke) {
        const uint4 *a = (const uint4 *)(base + (size_t)gpu_kv_row(m, key) * D2_HD) + c;
        *k = CG ? __ldcg(a) : __ldca(a);
    } else
        *k = make_uint4(0, 0, 0, 0);
}

/* The kernels' tile ring (dynamic shared memory, D2_RING_BYTES per block): slot s holds, for
 * every thread, its 16-byte chunks of the tile's keys i * 16 + kofs (i < D2_NI), K then V:
 * [s][2 * i + (0: K, 1: V)][thread]. A thread copies (cp.async) exactly the chunks it later
 * reads, so no block barrier is needed: its own cp.async.wait_group orders them. Keys past the
 * range are zero-filled (source size 0). Depth: at 8K of context a range is 8 tiles, and the
 * register double buffer it replaces kept only one tile per thread in flight (16 KB per block). */
#define D2_STAGES 4
#define D2_RING_BYTES (D2_STAGES * 2 * D2_NI * D2_THREADS * 16)
__device__ __forceinline__ uint4 *d2_ring()
{
    extern __shared__ __align__(16) uint4 d2_ring_smem[];
    return d2_ring_smem;
}
__device__ __forceinline__ void d2_cp16(uint4 *dst, const void *src, bool ok)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
/* Tile `tile` of the range [kb, ke) into its ring slot, as one cp.async group. */
__device__ __forceinline__ void d2_issue(const h16 *K, const h16 *V, const gpu_kv_map &m, int kb,
                                         int ke, int tile, int kofs, int c)
{
    uint4 *slot = d2_ring() + (size_t)(tile % D2_STAGES) * 2 * D2_NI * D2_THREADS + threadIdx.x;
    /* this thread's keys key0 + 16 i: one table lookup unless they cross a block boundary */
    const int key0 = kb + tile * D2_TILE + kofs;
    const bool cross = m.tbl && (key0 & (GPU_KV_BLOCK - 1)) > GPU_KV_BLOCK - 1 - 16 * (D2_NI - 1);
    const long long row0 = key0 < ke ? gpu_kv_row(m, key0) : 0;
#pragma unroll
    for (int i = 0; i < D2_NI; i++) {
        const int key = key0 + i * 16;
        const bool ok = key < ke;
        const size_t off =
            ok ? (size_t)(cross ? gpu_kv_row(m, key) : row0 + i * 16) * D2_HD + c * 8 : 0;
        d2_cp16(slot + (2 * i) * D2_THREADS, K + off, ok);
        d2_cp16(slot + (2 * i + 1) * D2_THREADS, V + off, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* The shared memory of one range (a kernel's static shared memory, or a slice of the decode
 * step kernel's dynamic shared memory). */
template <int G> struct d2_smem {
    float acc[D2_WARPS][G][D2_HD];
    float m[D2_WARPS][G], l[D2_WARPS][G];
    float2 ml[G][GPU_DECODE_SPLIT_MAX]; /* the cluster form: the received column values instead */
    float L[G];
    int last;
    float2 rcv_ml[GPU_DECODE_CLUSTER][G]; /* the cluster form: every range's (max, sum) per head */
};

__device__ __forceinline__ float d2_dot(uint4 a, uint4 b)
{
    const h16x2 *x = (const h16x2 *)&a, *y = (const h16x2 *)&b;
    float d = 0.f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float2 u = h16x2_to(x[e]), v = h16x2_to(y[e]);
        d += u.x * v.x;
        d += u.y * v.y;
    }
    return d;
}

/* The cluster form's merge (CLUSTER = true below): the ns ranges of one (token, KV head slice) are
 * the blocks of one thread-block cluster. Block `rank` merges the output columns i = rank + 16 k
 * (i = head * 128 + column). Each block pushes its range's values straight into the shared
 * memory of the blocks that merge them (distributed shared memory stores: its unnormalized
 * column values, and its (max, sum) per head to every block), one cluster barrier (release /
 * acquire) makes them visible, and every block merges from its own shared memory with the
 * arithmetic of the global merge below, in range order (so the result is the one-kernel form's
 * for the same ranges). This replaces the global partials, the fence, the counter and the last
 * block's two round trips through L2 by one barrier. The kernel arrives at the cluster barrier
 * once at its start and waits on it before the first store (a block may write another's shared
 * memory only once that block is running). */
__device__ __forceinline__ unsigned d2_dsmem(const void *local, unsigned rank)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(local), r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
__device__ __forceinline__ void d2_dsmem_st(unsigned a, float v)
{
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void d2_dsmem_st2(unsigned a, float2 v)
{
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(v.x), "f"(v.y) : "memory");
}
__device__ __forceinline__ void d2_cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void d2_cluster_wait()
{
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void d2_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* Column values per merging block (G heads of 128 columns over the cluster's blocks). */
#define D2_PER_RANK(G) ((G) * D2_HD / GPU_DECODE_CLUSTER)

/* A block's pushes: column i of its range's output to the block that merges it (range = the
 * sender's rank). */
template <int G>
__device__ __forceinline__ void d2_cluster_push(d2_smem<G> &sm, int range, int i, float o)
{
    float *rcv = (float *)sm.ml; /* [GPU_DECODE_CLUSTER][D2_PER_RANK(G)] in the receiver */
    d2_dsmem_st(d2_dsmem(rcv + range * D2_PER_RANK(G) + i / GPU_DECODE_CLUSTER, i % GPU_DECODE_CLUSTER), o);
}

template <int G>
__device__ __forceinline__ void d2_cluster_merge(const dec_params &p, int t, int h0, int nh, int ns,
                                                 int rank, d2_smem<G> &sm)
{
    d2_cluster_sync(); /* every range's pushes are here */
    const float *rcv = (const float *)sm.ml;
    for (int k = threadIdx.x; k < D2_PER_RANK(G); k += D2_THREADS) {
        const int i = rank + GPU_DECODE_CLUSTER * k, gh = i / D2_HD, col = i % D2_HD;
        if (gh >= nh) continue;
        float M = -INFINITY;
        for (int r = 0; r < ns; r++) M = fmaxf(M, sm.rcv_ml[r][gh].x);
        float L = 0.f, O = 0.f;
        for (int r = 0; r < ns; r++) {
            const float2 ml = sm.rcv_ml[r][gh];
            const float wt = ml.y > 0.f ? exp2f(ml.x - M) : 0.f;
            if (ml.y > 0.f) L += ml.y * wt;
        }
        for (int r = 0; r < ns; r++) {
            const float2 ml = sm.rcv_ml[r][gh];
            const float wt = ml.y > 0.f ? exp2f(ml.x - M) : 0.f;
            if (ml.y > 0.f) O += rcv[r * D2_PER_RANK(G) + k] * wt;
        }
        p.out[(size_t)t * p.qd + (size_t)(h0 + gh) * D2_HD + col] = h16_from(O / L);
    }
    if (threadIdx.x == 0) gpu_chain_mark_any(p.tr, 5);
}

/* The block's range partial for head gh, column col: the 8 warps' online-softmax states merged
 * (their max M and sum L; returns the unnormalized column value). */
template <int G, typename SM>
__device__ __forceinline__ float d2_block_partial(const SM &sm, int gh, int col, float *M_,
                                                  float *L_)
{
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < D2_WARPS; w++) M = fmaxf(M, sm.m[w][gh]);
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < D2_WARPS; w++) {
        const float wt = sm.m[w][gh] == -INFINITY ? 0.f : exp2f(sm.m[w][gh] - M);
        L += sm.l[w][gh] * wt;
        O += sm.acc[w][gh][col] * wt;
    }
    *M_ = M;
    *L_ = L;
    return O;
}

/* The kernels' merge of a row's ranges (the last block of the row to finish; the step kernel
 * keeps the plain loop in d2_global_merge): k_decode_merge's arithmetic in the same order, built
 * for latency — at 8K of context (33 ranges) a plain merge was over a third of the layer's
 * attention (the chain trace: gpu/KERNELS.md), a chain of dependent round trips and a serial
 * loop. Here the partials of a piece of
 * heads (as many as fit the idle tile ring, which the launch sizes for all of a row's where that
 * fits: d2_merge_smem) are copied into shared memory (cp.async, all in flight at once) while the
 * ranges' (max, sum) are fetched; a warp per head takes the max and the
 * ranges' weights in parallel (max is exact, the weights the same exp2f), one lane sums L in range
 * order; every column then sums its ranges from shared memory in range order. */
template <int G>
__device__ __forceinline__ void d2_merge_staged(const dec_params &p, int t, int h0, int nh, int ns,
                                                d2_smem<G> &sm)
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const size_t base = (size_t)t * p.n_heads * p.splits;
    float *buf = (float *)d2_ring();
    unsigned dyn; /* the launch gives the ring room for a row's partials where they fit */
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const int per_head = ns * D2_HD, q4 = per_head / 4; /* floats, 16-byte chunks per head */
    const int hp = max(1, (int)(dyn / sizeof(float)) / per_head);
    auto issue = [&](int g0) {
        const int gn = min(hp, nh - g0);
        for (int i = tid; i < gn * q4; i += D2_THREADS) {
            const int gh = i / q4, k = i % q4;
            const size_t s0 = base + (size_t)(h0 + g0 + gh) * p.splits;
            d2_cp16((uint4 *)(buf + (size_t)gh * per_head) + k, (const uint4 *)(p.part_o + s0 * D2_HD) + k, true);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    /* the (max, sum) pairs first (at most 8 heads x 64 ranges: two per thread), so that the
     * weights need not wait behind the partials' copies */
    static_assert(8 * GPU_DECODE_SPLIT_MAX <= 2 * D2_THREADS, "two (max, sum) pairs per thread");
    float2 mlr[2];
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int i = tid + k * D2_THREADS;
        if (i < nh * ns) mlr[k] = __ldcg(&p.part_ml[base + (size_t)(h0 + i / ns) * p.splits + i % ns]);
    }
    issue(0);
    d2_bmark(p, 4);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int i = tid + k * D2_THREADS;
        if (i < nh * ns) sm.ml[i / ns][i % ns] = mlr[k];
    }
    __syncthreads();
    for (int gh = warp; gh < nh; gh += D2_WARPS) {
        float M = -INFINITY;
        for (int r = lane; r < ns; r += 32) M = fmaxf(M, sm.ml[gh][r].x);
#pragma unroll
        for (int o = 16; o >= 1; o /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        for (int r = lane; r < ns; r += 32) {
            const float2 ml = sm.ml[gh][r];
            sm.ml[gh][r].x = ml.y > 0.f ? exp2f(ml.x - M) : 0.f; /* the range's weight from here on */
        }
        __syncwarp();
        if (lane == 0) {
            float L = 0.f;
#pragma unroll 8 /* the same order; the shared loads batched */
            for (int r = 0; r < ns; r++) {
                const float2 ml = sm.ml[gh][r];
                if (ml.y > 0.f) L += ml.y * ml.x;
            }
            sm.L[gh] = L;
        }
    }
    d2_bmark(p, 5);
    for (int g0 = 0; g0 < nh; g0 += hp) {
        const int gn = min(hp, nh - g0);
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads(); /* the piece, the weights and L */
        if (g0 == 0) d2_bmark(p, 6);
        for (int i = tid; i < gn * D2_HD; i += D2_THREADS) {
            const int gl = i / D2_HD, gh = g0 + gl, col = i % D2_HD;
            const float *src = buf + (size_t)gl * per_head + col;
            float O = 0.f;
#pragma unroll 8
            for (int r = 0; r < ns; r++) {
                const float2 ml = sm.ml[gh][r];
                if (ml.y > 0.f) O += src[(size_t)r * D2_HD] * ml.x;
            }
            p.out[(size_t)t * p.qd + (size_t)(h0 + gh) * D2_HD + col] = h16_from(O / sm.L[gh]);
        }
        if (g0 + hp < nh) {
            __syncthreads(); /* buf is the next piece's */
            issue(g0 + hp);
        }
    }
    d2_bmark(p, 7);
}

/* The one-kernel form's merge through global memory (d2_range's tail when not CLUSTER): the
 * block's range partial to part_o / part_ml, and the last block of the row merges them all. */
template <int G, bool STEP>
__device__ __forceinline__ void d2_global_merge(const dec_params &p, int t, int gx, int ngx, int h0,
                                                int nh, int ns, size_t slot0, int *cnt,
                                                d2_smem<G> &sm)
{
    const int tid = threadIdx.x;
    if (!STEP && ns == 1) {
        /* the row is this one range (every row of a batch of 33+ sequences: n_splits): the merge
         * below would weigh it by exp2f(0) = 1 and divide by its own sum, so the block writes
         * that result itself — the same bits, without the partial's round trip through L2, the
         * counter and the staged merge (the counter stays 0, as the merge leaves it) */
        for (int i = tid; i < nh * D2_HD; i += D2_THREADS) {
            const int gh = i / D2_HD, col = i % D2_HD;
            float M, L;
            const float O = d2_block_partial<G>(sm, gh, col, &M, &L);
            p.out[(size_t)t * p.qd + (size_t)(h0 + gh) * D2_HD + col] = h16_from(O / L);
        }
        return;
    }
    for (int i = tid; i < nh * D2_HD; i += D2_THREADS) {
        const int gh = i / D2_HD, col = i % D2_HD;
        float M, L;
        const float O = d2_block_partial<G>(sm, gh, col, &M, &L);
        const size_t slot = slot0 + (size_t)gh * p.splits;
        p.part_o[slot * D2_HD + col] = O;
        if (col == 0) p.part_ml[slot] = make_float2(M, L);
    }
    /* the last range of this (token, KV head slice) to finish merges them all; the block's
     * stores are ordered before its arrival by the barrier and the arriving thread's release
     * (cumulative: the grid barrier's pattern), the merger's loads after it by its acquire (the
     * kernels: one acq_rel atomic; the step kernel: a fence on each side) */
    __syncthreads();
    /* atomicInc wraps to 0 at the ns-th arrival: the counter is ready for the next step (the graph
     * replays this launch) without a separate reset store */
    unsigned *ctr = (unsigned *)cnt + (size_t)t * ngx + gx;
    if (tid == 0) {
        if (!STEP) { /* one acquire-release arrival instead of two full fences: shorter at 8K */
            unsigned old;
            asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;\n"
                         : "=r"(old) : "l"(ctr), "r"((unsigned)ns - 1) : "memory");
            sm.last = old == (unsigned)ns - 1;
        } else {
            __threadfence();
            sm.last = atomicInc(ctr, (unsigned)ns - 1) == (unsigned)ns - 1;
        }
    }
    __syncthreads();
    if (!sm.last) return;
    if (STEP) __threadfence();
    if constexpr (!STEP) {
        d2_merge_staged<G>(p, t, h0, nh, ns, sm);
        return;
    }
    /* the merge: the ranges' (max, sum) fetched at once into shared memory, each head's weights
     * computed once (in range order: k_decode_merge's arithmetic), then every output column sums
     * its ranges with all their loads independent */
    const size_t base = (size_t)t * p.n_heads * p.splits;
    for (int i = tid; i < nh * ns; i += D2_THREADS) {
        const int gh = i / ns, r = i % ns;
        sm.ml[gh][r] = __ldcg(&p.part_ml[base + (size_t)(h0 + gh) * p.splits + r]);
    }
    __syncthreads();
    if (tid < nh) {
        float M = -INFINITY;
        for (int r = 0; r < ns; r++) M = fmaxf(M, sm.ml[tid][r].x);
        float L = 0.f;
        for (int r = 0; r < ns; r++) {
            const float2 ml = sm.ml[tid][r];
            const float wt = ml.y > 0.f ? exp2f(ml.x - M) : 0.f;
            if (ml.y > 0.f) L += ml.y * wt;
            sm.ml[tid][r].x = wt; /* the range's weight from here on */
        }
        sm.L[tid] = L;
    }
    __syncthreads();
    for (int i = tid; i < nh * D2_HD; i += D2_THREADS) {
        const int gh = i / D2_HD, col = i % D2_HD;
        const size_t s0 = base + (size_t)(h0 + gh) * p.splits;
        float O = 0.f;
#pragma unroll 8
        for (int r = 0; r < ns; r++) {
            const float2 ml = sm.ml[gh][r];
            if (ml.y > 0.f) O += __ldcg(&p.part_o[(s0 + r) * D2_HD + col]) * ml.x;
        }
        p.out[(size_t)t * p.qd + (size_t)(h0 + gh) * D2_HD + col] = h16_from(O / sm.L[gh]);
    }
    __syncthreads(); /* the step kernel: sm is the next range's */
}

/* ---------------------------------------------------------------- the range on the tensor cores
 * The kernels' (not the step's) range body with p.mma: the scalar body above is bound by its
 * instruction issue at long context (ncu, 8K: 60 % of the schedulers' cycles issue, 6 cycles per
 * instruction) and by its dependent arithmetic at short context. Here every warp owns steps of
 * 8 keys (step g of the range: keys kb + 8 g .., warp w takes g = w, w + 8, ...) and streams them
 * through its own D2M_STAGES-slot ring in the dynamic shared memory (cp.async, keys XOR-swizzled
 * by chunk so that ldmatrix is free of bank conflicts; a warp reads only what it copied, so
 * __syncwarp suffices). Per step:
 *   S^T (16 x 8: heads x keys) = Q (heads, zero-padded to 16) . K^T   8 x mma.m16n8k16
 *   online softmax per head (rows: a head is the 4 lanes l / 4), p rounded to h16 (the sum l
 *   adds the rounded p, the values the product uses)
 *   O^T (128 x 8: dims x heads) += V^T . P                             8 x mma.m16n8k8
 * (S^T's accumulator layout is P's operand layout: no shuffle of P.) Float32 accumulation; P in
 * h16 as in the prefill kernels. The warp's (acc, m, l) go to sm as the scalar body leaves them,
 * so the block and global / cluster merges are the same code. */
#define D2M_KEYS 8
#define D2M_STAGE 256 /* uint4 per stage: K and V, 8 keys x 16 chunks each */
#define D2M_STAGES (D2_RING_BYTES / 16 / D2_WARPS / D2M_STAGE)
static_assert(D2M_STAGES >= 2, "the ring holds two steps per warp");

__device__ __forceinline__ void d2m_issue(uint4 *stage, const h16 *K, const h16 *V,
                                          const gpu_kv_map &m, int k0, int ke, int lane)
{
    /* the step's D2M_KEYS keys: one table lookup unless they cross a block boundary */
    const bool cross = m.tbl && (k0 & (GPU_KV_BLOCK - 1)) > GPU_KV_BLOCK - D2M_KEYS;
    const long long row0 = k0 < ke ? gpu_kv_row(m, k0) : 0;
#pragma unroll
    for (int it = 0; it < 8; it++) {
        const int idx = it * 32 + lane, kv = idx >> 7, r = idx & 127, k = r >> 4, c = r & 15;
        const int key = k0 + k;
        const bool ok = key < ke;
        const size_t off = ok ? (size_t)(cross ? gpu_kv_row(m, key) : row0 + k) * D2_HD + c * 8 : 0;
        d2_cp16(stage + kv * 128 + k * 16 + (c ^ k), (kv ? V : K) + off, ok);
    }
}

/* ST: steps in each warp's ring (ST - 1 in flight while one is computed); SM: any shared
 * memory with d2_smem's acc, m and l. */
template <int G, int ST = D2M_STAGES, typename SM = d2_smem<G>>
__device__ __forceinline__ void d2_mma_range(const dec_params &p, int t, int h0, int nh, int qp,
                                             const h16 *K, const h16 *V, const gpu_kv_map &km,
                                             int kb, int ke, SM &sm)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hr = lane / 4, q4 = lane % 4;
    const int nsteps = (ke - kb + D2M_KEYS - 1) / D2M_KEYS;
    const int nj = nsteps > warp ? (nsteps - warp + D2_WARPS - 1) / D2_WARPS : 0;
    uint4 *ring = d2_ring() + (size_t)warp * ST * D2M_STAGE;
    auto first_key = [&](int j) { return kb + (warp + j * D2_WARPS) * D2M_KEYS; };
    int issued = 0;
    const int ahead = min(ST, nj);
    /* steps wholly below this token's row hold only older keys: requested before the wait */
    if (p.early)
        while (issued < ahead && first_key(issued) + D2M_KEYS <= qp) {
            d2m_issue(ring + (issued % ST) * D2M_STAGE, K, V, km, first_key(issued), ke, lane);
            asm volatile("cp.async.commit_group;\n" ::: "memory");
            issued++;
        }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    gpu_chain_mark(p.tr, 1);
    d2_bmark(p, 1);
    while (issued < ahead) {
        d2m_issue(ring + (issued % ST) * D2M_STAGE, K, V, km, first_key(issued), ke, lane);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        issued++;
    }
    for (int k = ahead; k < ST; k++) asm volatile("cp.async.commit_group;\n" ::: "memory");
    /* Q as the A operand: row hr (a head of the slice), k-step ks: dims 16 ks + 2 q4 (+8) */
    unsigned qa[8], qb[8];
    {
        const unsigned *qh = (const unsigned *)(p.q + (size_t)t * p.qd + (size_t)(h0 + hr) * D2_HD);
#pragma unroll
        for (int ks = 0; ks < 8; ks++) {
            qa[ks] = hr < nh ? __ldca(qh + ks * 8 + q4) : 0u;
            qb[ks] = hr < nh ? __ldca(qh + ks * 8 + 4 + q4) : 0u;
        }
    }
    float o[8][4];
#pragma unroll
    for (int mt = 0; mt < 8; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[mt][e] = 0.f;
    float m = -INFINITY, l = 0.f; /* head hr's, the same in its 4 lanes */
    const int lrow = lane & 7, lsel = lane >> 3;
    for (int j = 0; j < nj; j++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1) : "memory");
        __syncwarp();
        const uint4 *st = ring + (j % ST) * D2M_STAGE;
        float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int pp = 0; pp < 4; pp++) { /* chunks 4 pp .. 4 pp + 3: k-steps 2 pp, 2 pp + 1 */
            unsigned b[4];
            gpu_ldmatrix_x4(b, st + lrow * 16 + ((4 * pp + lsel) ^ lrow));
            const unsigned a0[4] = {qa[2 * pp], 0u, qb[2 * pp], 0u};
            const unsigned a1[4] = {qa[2 * pp + 1], 0u, qb[2 * pp + 1], 0u};
            gpu_mma_h16(sc, a0, b[0], b[1]);
            gpu_mma_h16(sc, a1, b[2], b[3]);
        }
        const int key0 = first_key(j) + 2 * q4;
        const float s0 = key0 < ke ? sc[0] * p.scale_log2 : -INFINITY;
        const float s1 = key0 + 1 < ke ? sc[1] * p.scale_log2 : -INFINITY;
        float mx = fmaxf(s0, s1);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m, mx);
        const float mu = mn == -INFINITY ? 0.f : mn;
        const float alpha = exp2f(m - mu); /* m = -inf: 0 */
        const unsigned pb = gpu_pack_h16(exp2f(s0 - mu), exp2f(s1 - mu));
        const float2 pr = h16x2_to(*(const h16x2 *)&pb);
        float rs = pr.x + pr.y;
        rs += __shfl_xor_sync(0xffffffffu, rs, 1);
        rs += __shfl_xor_sync(0xffffffffu, rs, 2);
        l = l * alpha + rs;
        m = mn;
        /* O^T's columns are heads 2 q4, 2 q4 + 1: their rescale factors from those heads' lanes */
        const float a_lo = __shfl_sync(0xffffffffu, alpha, 8 * q4);
        const float a_hi = __shfl_sync(0xffffffffu, alpha, 8 * q4 + 4);
#pragma unroll
        for (int pp = 0; pp < 4; pp++) { /* dims 32 pp .. 32 pp + 31: m-tiles 2 pp, 2 pp + 1 */
            unsigned v[4];
            gpu_ldmatrix_x4_trans(v, st + 128 + lrow * 16 + ((4 * pp + lsel) ^ lrow));
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float *c = o[2 * pp + h];
                c[0] *= a_lo;
                c[1] *= a_hi;
                c[2] *= a_lo;
                c[3] *= a_hi;
                gpu_mma_h16_k8(c, v[2 * h], v[2 * h + 1], pb);
            }
        }
        __syncwarp(); /* every lane has read the slot before it is refilled */
        if (j + ST < nj)
            d2m_issue(ring + (j % ST) * D2M_STAGE, K, V, km, first_key(j + ST), ke, lane);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    gpu_chain_mark_any(p.tr, 2);
    d2_bmark(p, 2);
    /* the warp's partial as the scalar body leaves it: acc[warp][head][dim], m and l per head */
    const int c0 = 2 * q4;
#pragma unroll
    for (int mt = 0; mt < 8; mt++) {
        const int dim = 16 * mt + hr;
        if (c0 < nh) {
            sm.acc[warp][c0][dim] = o[mt][0];
            sm.acc[warp][c0][dim + 8] = o[mt][2];
        }
        if (c0 + 1 < nh) {
            sm.acc[warp][c0 + 1][dim] = o[mt][1];
            sm.acc[warp][c0 + 1][dim + 8] = o[mt][3];
        }
    }
    if (q4 == 0 && hr < nh) {
        sm.m[warp][hr] = m;
        sm.l[warp][hr] = l;
    }
}

template <int G, bool STEP, bool CLUSTER = false>
__device__ __forceinline__ void d2_range(const dec_params &p, int t, int gx, int split, int ngx,
                                         int *cnt, d2_smem<G> &sm)
{
    /* positions and sequences come from the host (meta upload), not from the kernel before: read
     * before gpu_pdl_wait; so are, in decode (p.early), the cached keys before this token's (only
     * its own row, qp, is written by the QKV kernel before): a first tile wholly below qp is
     * loaded before the wait */
    const int g = gx / p.gslices, slice = gx % p.gslices;
    const int h0 = g * p.group + slice * G, nh = min(G, p.group - slice * G);
    const int qp = p.pos[t];
    int kstart, ns, len;
    if (!STEP) gpu_chain_mark(p.tr, 0);
    dec_ranges(qp, p.window, p.splits, &kstart, &ns, &len);
    if (split >= ns) { /* not counted: the merge waits for ns ranges */
        if constexpr (CLUSTER) { /* the block still takes its share of the cluster's merge */
            d2_cluster_arrive();
            gpu_pdl_wait();
            gpu_pdl_trigger();
            d2_cluster_wait();
            d2_cluster_merge<G>(p, t, h0, nh, ns, split, sm);
        }
        return;
    }
    const gpu_seq_dev sq = p.seqs[p.seq_idx[t]];
    const int kb = kstart + split * len, ke = min(kb + len, qp + 1);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, c = lane % 16;
    const int kofs = warp * 2 + lane / 16;
    const size_t head_off = ((size_t)p.layer * p.n_kv + g) * sq.cap * D2_HD;
    const h16 *K = sq.k + head_off, *V = sq.v + head_off;

    if constexpr (CLUSTER) d2_cluster_arrive(); /* this block runs: the others may push to it */
    if (!STEP && p.mma) {
        d2_mma_range<G>(p, t, h0, nh, qp, K, V, sq.map, kb, ke, sm);
    } else {
        uint4 kr[D2_NI], vr[D2_NI], qv[G];
        /* RING (the kernels, not the step): the range's tiles stream through a per-thread ring of
         * D2_STAGES shared-memory slots (d2_issue), D2_STAGES - 1 tiles ahead */
        constexpr bool RING = !STEP;
        const int ntile = (ke - kb + D2_TILE - 1) / D2_TILE;
        const int ahead = min(D2_STAGES - 1, ntile);
        int issued = 0;
        const bool early = !STEP && p.early && kb + D2_TILE <= qp;
        if constexpr (RING) {
            /* tiles wholly below this token's row hold only older keys: requested before the wait */
            if (!STEP && p.early)
                while (issued < ahead && kb + (issued + 1) * D2_TILE <= qp) d2_issue(K, V, sq.map, kb, ke, issued++, kofs, c);
        } else if (early) {
    #pragma unroll
            for (int i = 0; i < D2_NI; i++) {
                d2_load<STEP>(K, sq.map, kb + i * 16 + kofs, ke, c, &kr[i]);
                d2_load<STEP>(V, sq.map, kb + i * 16 + kofs, ke, c, &vr[i]);
            }
        }
        if (!STEP) {
            gpu_pdl_wait();
            gpu_pdl_trigger();
            gpu_chain_mark(p.tr, 1);
            d2_bmark(p, 1);
        }
        if constexpr (RING) {
            while (issued < ahead) d2_issue(K, V, sq.map, kb, ke, issued++, kofs, c);
            /* always D2_STAGES - 1 groups ahead (empty ones for a range of fewer tiles), so that
             * the wait in the loop covers the tile it reads */
            for (int k = ahead; k < D2_STAGES - 1; k++) asm volatile("cp.async.commit_group;\n" ::: "memory");
        } else if (!early) {
    #pragma unroll
            for (int i = 0; i < D2_NI; i++) {
                d2_load<STEP>(K, sq.map, kb + i * 16 + kofs, ke, c, &kr[i]);
                d2_load<STEP>(V, sq.map, kb + i * 16 + kofs, ke, c, &vr[i]);
            }
        }
        float acc[G][8], m[G], l[G];
    #pragma unroll
        for (int gh = 0; gh < G; gh++) {
            const h16 *qh = p.q + (size_t)t * p.qd + (size_t)(h0 + gh) * D2_HD;
            qv[gh] = gh >= nh ? make_uint4(0, 0, 0, 0)
                     : STEP   ? __ldcg((const uint4 *)qh + c)
                              : __ldca((const uint4 *)qh + c);
    #pragma unroll
            for (int e = 0; e < 8; e++) acc[gh][e] = 0.f;
            m[gh] = -INFINITY;
            l[gh] = 0.f;
        }
        for (int t0 = kb, tile = 0; t0 < ke; t0 += D2_TILE, tile++) {
            uint4 kc[D2_NI], vc[D2_NI];
            if constexpr (RING) {
                /* one more tile in flight (or an empty group, so that the count below holds), then
                 * this tile's group is complete; each thread reads only the slots it filled */
                if (issued < ntile)
                    d2_issue(K, V, sq.map, kb, ke, issued++, kofs, c);
                else
                    asm volatile("cp.async.commit_group;\n" ::: "memory");
                asm volatile("cp.async.wait_group %0;\n" ::"n"(D2_STAGES - 1) : "memory");
                const uint4 *slot = d2_ring() + (size_t)(tile % D2_STAGES) * 2 * D2_NI * D2_THREADS + threadIdx.x;
    #pragma unroll
                for (int i = 0; i < D2_NI; i++) {
                    kc[i] = slot[(2 * i) * D2_THREADS];
                    vc[i] = slot[(2 * i + 1) * D2_THREADS];
                }
            } else {
    #pragma unroll
                for (int i = 0; i < D2_NI; i++) {
                    kc[i] = kr[i];
                    vc[i] = vr[i];
                }
                if (t0 + D2_TILE < ke) { /* the next tile's loads go out before this tile's arithmetic */
    #pragma unroll
                    for (int i = 0; i < D2_NI; i++) {
                        d2_load<STEP>(K, sq.map, t0 + D2_TILE + i * 16 + kofs, ke, c, &kr[i]);
                        d2_load<STEP>(V, sq.map, t0 + D2_TILE + i * 16 + kofs, ke, c, &vr[i]);
                    }
                }
            }
            float s[D2_NI][G];
    #pragma unroll
            for (int i = 0; i < D2_NI; i++) {
                const bool ok = t0 + i * 16 + kofs < ke;
    #pragma unroll
                for (int gh = 0; gh < G; gh++) {
                    float d = d2_dot(qv[gh], kc[i]);
    #pragma unroll
                    for (int o = 8; o >= 1; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
                    s[i][gh] = ok ? d * p.scale_log2 : -INFINITY;
                }
            }
    #pragma unroll
            for (int gh = 0; gh < G; gh++) {
                float mx = s[0][gh];
    #pragma unroll
                for (int i = 1; i < D2_NI; i++) mx = fmaxf(mx, s[i][gh]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                const float mn = fmaxf(m[gh], mx);
                const float mu = mn == -INFINITY ? 0.f : mn;
                const float a = exp2f(m[gh] - mu); /* m = -inf: 0 */
                float pr[D2_NI], rs = 0.f;
    #pragma unroll
                for (int i = 0; i < D2_NI; i++) {
                    pr[i] = exp2f(s[i][gh] - mu);
                    rs += pr[i];
                }
                rs += __shfl_xor_sync(0xffffffffu, rs, 16);
                l[gh] = l[gh] * a + rs;
                m[gh] = mn;
    #pragma unroll
                for (int e = 0; e < 8; e++) {
                    float v = acc[gh][e] * a;
    #pragma unroll
                    for (int i = 0; i < D2_NI; i++)
                        v += pr[i] * h16_to(((const h16 *)&vc[i])[e]);
                    acc[gh][e] = v;
                }
            }
        }
        if (!STEP && threadIdx.x == 0) gpu_chain_mark_any(p.tr, 2);
        if (!STEP) d2_bmark(p, 2);
        /* the two half-warps hold different keys under the same running max: add them */
    #pragma unroll
        for (int gh = 0; gh < G; gh++) {
    #pragma unroll
            for (int e = 0; e < 8; e++) acc[gh][e] += __shfl_xor_sync(0xffffffffu, acc[gh][e], 16);
            if (lane < 16)
    #pragma unroll
                for (int e = 0; e < 8; e++) sm.acc[warp][gh][c * 8 + e] = acc[gh][e];
            if (lane == 0) {
                sm.m[warp][gh] = m[gh];
                sm.l[warp][gh] = l[gh];
            }
        }
    }
    __syncthreads();
    const size_t slot0 = ((size_t)t * p.n_heads + h0) * p.splits + split;
    if constexpr (CLUSTER) { /* the range's partial goes straight to the merging blocks */
        d2_cluster_wait(); /* every block of the cluster is running */
        if (threadIdx.x == 0) gpu_chain_mark_any(p.tr, 3);
        for (int i = tid; i < nh * D2_HD; i += D2_THREADS) {
            const int gh = i / D2_HD, col = i % D2_HD;
            float M, L;
            const float O = d2_block_partial<G>(sm, gh, col, &M, &L);
            d2_cluster_push<G>(sm, split, i, O);
            if (col == 0)
                for (int r = 0; r < GPU_DECODE_CLUSTER; r++)
                    d2_dsmem_st2(d2_dsmem(&sm.rcv_ml[split][gh], r), make_float2(M, L));
        }
        if (threadIdx.x == 0) gpu_chain_mark_any(p.tr, 4);
        d2_cluster_merge<G>(p, t, h0, nh, ns, split, sm);
    } else {
        d2_global_merge<G, STEP>(p, t, gx, ngx, h0, nh, ns, slot0, cnt, sm);
    }
}

#endif
