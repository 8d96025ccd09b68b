/* gpu/bench/decode_step.cu — the lab's variant of the whole single-token decode step (batch 1,
 * all layers) as one kernel: built, measured, slower than the chain, kept for measurements.
 *
 * Why: at batch 1 a Llama-3-8B token is 15 GB of weights streamed once; the five-kernel chain per
 * layer (decode_fused.cu, gemm.cu's GEMV, attn_decode.cu) loses about a microsecond of HBM time
 * at each of its 160 kernel boundaries even with programmatic dependent launch and early loads
 * (a kernel's first loads cover ~0.5 us of streaming), and the short QKV and o projections never
 * reach full rate (gpu/KERNELS.md: 4.29 ms per token against a 3.54 ms floor on the H200).
 *
 * How: one cooperative launch, one block per SM (256 threads), every block resident for the whole
 * step. Weights never depend on activations, so each block streams *its* weight rows of every
 * layer, in order, through a ring of shared-memory slots filled by the copy engine
 * (cp.async.bulk, 32 KB per slot, completion on an mbarrier per slot), optionally with an L2
 * prefetch further ahead (TANDEM_GPU_STEP_PREFETCH chunks). Between the phases that need each
 * other's results the blocks meet at a grid-wide barrier (a counter zeroed before the launch);
 * the copies in flight keep HBM busy through the barrier, the rope and the attention, up to the
 * ring's depth (~190 KB per SM).
 *
 * Phases of a layer (block b of B takes rows [N b / B, N (b + 1) / B) of each matrix):
 *   1. RMSNorm of the residual row into shared memory (every block, k_rmsnorm's arithmetic:
 *      gpu_block_rmsnorm), QKV rows -> float32 q/k/v                       | grid barrier
 *   2. bias + rope of q and k, q (h16) and the cache rows of k and v (k_rope_qkv's arithmetic)
 *                                                                          | grid barrier
 *   3. attention: the ranges of attn_decode.cuh (d2_range), one block per (KV head slice, range),
 *      the last range of a row merging them                                | grid barrier
 *   4. o rows: x += att · Wo^T                                             | grid barrier
 *   5. RMSNorm again, gate rows then up rows, h = silu(g) * u (h16)       | grid barrier
 *   6. down rows: x += h · Wd^T                                            | grid barrier
 * The final norm and lm_head stay separate kernels (one big GEMV at full rate already).
 *
 * A chunk (a slot's content) is rpc whole rows (a power of two up to 8); the 8 warps split it
 * into equal parts (8 / rpc warps per row), each warp against the activation pieces it holds in
 * registers for the whole phase; float32 sums, shuffle reductions, and the warp that finishes a
 * slot last adds the row's warp sums in warp order (step_stream). So the projections' sums are in
 * another order than the GEMV's (not the chain's bits: the same h16 inputs, float32 sums;
 * tests/gpu compares against the CPU, against prefill and against the chain within h16
 * tolerance), but fixed: the step is deterministic (tested). Everything else (norm, rope,
 * attention, SwiGLU, the residual adds) is the chain's arithmetic.
 *
 * Measured (H200, Llama-3-8B random bf16, 1K context; TANDEM_GPU_STEP_TRACE=1 prints where a
 * step's time goes): 5.89 ms per token against the chain's 4.33-4.37 — so it is not the serving
 * plugin's. Per layer
 * the weight phases stream at ~1.4x their bytes/bandwidth time (gate/up 80 us against 55, down 39
 * against 27.5) whatever the ring depth (3 or 6 slots: the same 5.88 ms, so not the bytes in
 * flight), and each grid barrier under full HBM load costs 4-7 us (six per layer: ~1 ms per
 * token), several times a PDL kernel boundary. An L2 prefetch 8 chunks ahead made it slower
 * (6.9 ms). What would be needed: weights streamed by the SMs' own loads (as the chain's GEMV,
 * which reaches ~95 % of copy bandwidth) and far fewer grid-wide meetings; see gpu/KERNELS.md.
 *
 * The lab plugin only (the serving plugin's objects plus this file: `make gpu-lab` builds
 * build/lab/libtandem_cuda.so; any program beside it, or opened with accel_opts.lib_path on it,
 * decodes through this kernel). It runs where it fits (gpu_lab_open: Hopper (bulk copies),
 * head_dim 128, H, q dim and I multiples of 64 and at most 16384, the one-kernel decode attention,
 * every block resident for a cooperative launch), for T = 1 without a KV export; elsewhere the
 * chain. Its own knobs, for measurements: TANDEM_GPU_STEP_SLOTS (ring depth, 2-8),
 * TANDEM_GPU_STEP_PREFETCH (chunks, 0-64), TANDEM_GPU_STEP_TRACE=1 (the phase split at the 50th
 * step, with gpu_tune graphs=0 so that steps are launched one by one). */
#include "gpu/attn_decode.cuh"
#include "gpu/gemv.cuh"
#include "gpu/tma.cuh"
#include <stdlib.h>
#include <string.h>

#define STEP_THREADS   256
#define STEP_WARPS     (STEP_THREADS / 32)
#define STEP_SLOT      32768 /* bytes per ring slot */
#define STEP_SLOTS_MAX 8
#define STEP_RMAX      8 /* rows per chunk at most */
#define STEP_MAXU      8 /* 16-byte activation pieces per lane: a warp's part of a chunk is at most
                          * STEP_SLOT / 8 bytes = 32 lanes x 8 pieces */
#define STEP_MAX_K     16384
#define STEP_GMAX      256 /* gate values (or residual rows) a block keeps in shared memory */
#define STEP_PREFETCH  0   /* chunks prefetched into L2 ahead of the ring (0: none; 8 measured slower) */
#define STEP_SEGS      5   /* weight segments per layer: qkv, o, gate, up, down */

struct step_params {
    const gpu_layer_w *layers; /* device copy of e->layers */
    float *x;                  /* (H) residual row */
    float *qkv;                /* (qkv) projections before bias and rope */
    h16 *h;                   /* (I) */
    const float2 *rope;        /* (hd / 2) the token's cos, sin */
    dec_params dp;             /* the attention's: q, att (out), positions, partials, splits */
    int *part_cnt;
    unsigned *bar; /* grid barrier: arrivals in this launch (zeroed before it) */
    gpu_dims d;
    unsigned long long *trace; /* TANDEM_GPU_STEP_TRACE=1: (L, STEP_MARKS, blocks) timestamps */
    int slots;                 /* ring slots */
    int prefetch;              /* chunks prefetched into L2 beyond the ring */
    int un_bytes;              /* the union of the normalized row and the attention's scratch */
};

/* Rows per chunk: the largest power of two up to STEP_RMAX whose rows fit a slot (so that the
 * 8 warps split a chunk into equal parts, STEP_WARPS / rpc warps per row). */
__device__ __forceinline__ int step_rpc(int K)
{
    int r = STEP_RMAX;
    while (r > 1 && r * 2 * K > STEP_SLOT) r /= 2;
    return r;
}

struct step_seg {
    const h16 *w; /* the block's first row */
    int rows, K, r0;
};

/* Layer l's weight pointers through the read-only cache (immutable; every block reads them at
 * every phase). */
__device__ __forceinline__ gpu_layer_w step_layer(const step_params &p, int l)
{
    gpu_layer_w w;
    const unsigned long long *src = (const unsigned long long *)(p.layers + l);
    unsigned long long *dst = (unsigned long long *)&w;
#pragma unroll
    for (int i = 0; i < (int)(sizeof w / 8); i++) dst[i] = __ldg(src + i);
    return w;
}

__device__ __forceinline__ step_seg step_seg_of(const step_params &p, int l, int s)
{
    const gpu_layer_w lw = step_layer(p, l);
    const gpu_dims &d = p.d;
    const h16 *W;
    int N, K;
    switch (s) {
    case 0:
        W = lw.w_qkv, N = d.qkv, K = d.H;
        break;
    case 1:
        W = lw.w_o, N = d.H, K = d.qd;
        break;
    case 2:
        W = lw.w_gu, N = d.I, K = d.H;
        break;
    case 3:
        W = lw.w_gu + (size_t)d.I * d.H, N = d.I, K = d.H;
        break;
    default:
        W = lw.w_down, N = d.H, K = d.I;
        break;
    }
    const int b = blockIdx.x, B = gridDim.x;
    const int r0 = (int)((long long)N * b / B), r1 = (int)((long long)N * (b + 1) / B);
    step_seg sg;
    sg.w = W + (size_t)r0 * K;
    sg.rows = r1 - r0;
    sg.K = K;
    sg.r0 = r0;
    return sg;
}

/* A position in the block's weight stream (layer, segment, next row). */
struct step_it {
    int l, s, row;
    step_seg sg;
};

/* The block's bookkeeping in shared memory. */
struct step_misc {
    uint64_t full[STEP_SLOTS_MAX];          /* mbarrier per slot: its copy landed */
    float part[STEP_SLOTS_MAX][STEP_WARPS]; /* warp sums of the chunk in the slot */
    int cnt[STEP_SLOTS_MAX];                /* warps done with the slot */
    step_it ring_it, pf_it;                 /* next chunk to copy into the ring / to prefetch */
    uint64_t pol;                           /* L2 policy of the ring copies: evict first */
    float gs[STEP_GMAX];                    /* gate values, or the block's residual rows */
};

/* Shared memory: ring | union (xs or d2_smem) | step_misc */
__host__ __device__ static inline size_t step_smem_bytes(int slots, int un_bytes)
{
    return (size_t)slots * STEP_SLOT + un_bytes + sizeof(step_misc);
}

__device__ __forceinline__ void step_it_init(const step_params &p, step_it &it)
{
    it.l = 0, it.s = 0, it.row = 0;
    it.sg = step_seg_of(p, 0, 0);
}

/* The next chunk of the stream (false past the last layer). */
__device__ __forceinline__ bool step_next(const step_params &p, step_it &it, const h16 **src,
                                          uint32_t *bytes)
{
    while (it.l < p.d.L && it.row >= it.sg.rows) {
        it.row = 0;
        if (++it.s == STEP_SEGS) it.s = 0, it.l++;
        if (it.l < p.d.L) it.sg = step_seg_of(p, it.l, it.s);
    }
    if (it.l >= p.d.L) return false;
    const int n = min(step_rpc(it.sg.K), it.sg.rows - it.row);
    *src = it.sg.w + (size_t)it.row * it.sg.K;
    *bytes = (uint32_t)n * it.sg.K * 2;
    it.row += n;
    return true;
}

/* One thread: the next chunk into the slot (the copy engine; completion on the slot's mbarrier)
 * and, `prefetch` chunks further on, one into L2, so that HBM streams ahead of the ring while
 * the block waits at a grid barrier or computes attention. */
__device__ __forceinline__ void step_issue(const step_params &p, step_misc &m, uint32_t ring_a,
                                           int slot, bool pf = true)
{
    const h16 *src;
    uint32_t bytes;
    if (step_next(p, m.ring_it, &src, &bytes)) {
        const uint32_t bar = gpu_smem_addr(&m.full[slot]);
        gpu_mbar_expect_tx(bar, bytes);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
            " [%0], [%1], %2, [%3], %4;\n" ::"r"(ring_a + (uint32_t)slot * STEP_SLOT),
            "l"(src), "r"(bytes), "r"(bar), "l"(m.pol)
            : "memory");
    }
    if (pf && p.prefetch && step_next(p, m.pf_it, &src, &bytes))
        gpu_l2_prefetch(src, 0, bytes);
}

/* Grid-wide barrier number k (1, 2, ... in this launch; the counter is zeroed before every
 * launch): every block's writes before it are visible to every block after it. */
__device__ __forceinline__ void step_grid_sync(unsigned *bar, unsigned k)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned target = k * gridDim.x;
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
        unsigned now;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(now) : "l"(bar) : "memory");
        } while (now < target);
    }
    __syncthreads();
}

/* The activation pieces of this warp's part of a row (K wide, rpc rows per chunk, so 8 / rpc
 * warps per row): lane l holds pieces l, l + 32, ... (src: shared memory, or global written in this
 * kernel: read past L1). */
template <bool GLOBAL>
__device__ __forceinline__ void step_act(const h16 *src, int K, uint4 act[STEP_MAXU])
{
    const int rpc = step_rpc(K), wpr = STEP_WARPS / rpc, pu = K / 8 / wpr;
    const int lane = threadIdx.x % 32;
    const uint4 *a = (const uint4 *)src + (threadIdx.x / 32 % wpr) * pu;
#pragma unroll
    for (int j = 0; j < STEP_MAXU; j++) {
        const int i = lane + 32 * j;
        act[j] = i >= pu ? make_uint4(0, 0, 0, 0) : GLOBAL ? __ldcg(a + i) : a[i];
    }
}

enum { EPI_QKV, EPI_RESID, EPI_GATE, EPI_UP };

struct step_state {
    unsigned char *ring;
    step_misc *m;
    uint32_t ring_a;
    int c; /* chunks this warp has consumed */
};

/* Consume segment sg of the block's stream. A chunk of rpc rows is cut into 8 equal parts, one
 * per warp (warp w: row w / (8 / rpc), its (w % (8 / rpc))-th slice of it); each warp goes through
 * the chunks on its own (mbarrier wait, dot product, shuffle reduction, its sum into the slot's
 * `part`, an arrival on the slot's counter). The warp that arrives last at a slot runs the
 * chunk's epilogue (lanes < rows: the row's warp sums in warp order, then EPI on (row index in
 * the matrix, in the block's range, sum)) and refills the slot; so no block-wide barrier per chunk,
 * and warps run up to a ring ahead of each other. */
template <int EPI>
__device__ __forceinline__ void step_stream(const step_params &p, step_state &st,
                                            const step_seg &sg, const uint4 act[STEP_MAXU],
                                            float *out)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int K = sg.K, rpc = step_rpc(K), wpr = STEP_WARPS / rpc, pu = K / 8 / wpr;
    const int myrow = warp / wpr, rowu = K / 8;
    step_misc &m = *st.m;
    /* the block's residual rows, fetched once (the epilogues then only store) */
    if (EPI == EPI_RESID) {
        for (int i = threadIdx.x; i < sg.rows; i += STEP_THREADS) m.gs[i] = __ldcg(out + sg.r0 + i);
        __syncthreads();
    }
    for (int row = 0; row < sg.rows; row += rpc, st.c++) {
        const int slot = st.c % p.slots, n = min(rpc, sg.rows - row);
        float a = 0.f;
        /* every warp waits for every chunk, even one with no row of it: a phase of the slot's
         * mbarrier may then never be skipped (a parity wait on a phase two ahead would pass) */
        gpu_mbar_wait(gpu_smem_addr(&m.full[slot]), (uint32_t)(st.c / p.slots) & 1);
        if (myrow < n) {
            const uint4 *t = (const uint4 *)(st.ring + (size_t)slot * STEP_SLOT) + myrow * rowu +
                             (warp % wpr) * pu;
#pragma unroll
            for (int j = 0; j < STEP_MAXU; j++) {
                const int i = lane + 32 * j;
                if (i < pu) a += d2_dot(t[i], act[j]);
            }
#pragma unroll
            for (int o = 16; o >= 1; o /= 2) a += __shfl_xor_sync(0xffffffffu, a, o);
        }
        int last = 0;
        if (lane == 0) {
            m.part[slot][warp] = a;
            __threadfence_block();
            last = atomicAdd(&m.cnt[slot], 1) == STEP_WARPS - 1;
        }
        if (!__shfl_sync(0xffffffffu, last, 0)) continue;
        /* the last warp at this slot: every warp's sum is in, nobody reads the slot any more */
        __threadfence_block();
        float v = 0.f;
        if (lane < n)
            for (int k = 0; k < wpr; k++) v += m.part[slot][lane * wpr + k];
        __syncwarp();
        if (lane == 0) {
            m.cnt[slot] = 0;
            step_issue(p, m, st.ring_a, slot);
        }
        if (lane < n) {
            const int loc = row + lane, r = sg.r0 + loc;
            if (EPI == EPI_QKV) {
                out[r] = v;
            } else if (EPI == EPI_RESID) {
                out[r] = m.gs[loc] + v;
            } else if (EPI == EPI_GATE) {
                m.gs[loc] = v;
            } else {
                /* the chain stores g and u as h16 (the gate/up GEMM's output), then k_swiglu */
                const float g = h16_to(h16_from(m.gs[loc]));
                const float u = h16_to(h16_from(v));
                p.h[r] = h16_from(gpu_silu_mul(g, u));
            }
        }
        __threadfence_block(); /* the epilogue's shared writes before this warp's next arrival */
    }
}

/* Bias + rope of q and k, q and the cache rows of k and v: k_rope_qkv's arithmetic for one token,
 * spread over the grid. */
__device__ __forceinline__ void step_rope(const step_params &p, int l)
{
    const gpu_dims &d = p.d;
    const int half = d.hd / 2, n_q = d.n_heads * half, n_k = d.n_kv * half;
    const float *bias = step_layer(p, l).b_qkv;
    const gpu_seq_dev sq = p.dp.seqs[p.dp.seq_idx[0]];
    const long long pos = gpu_kv_row(sq.map, p.dp.pos[0]); /* the position's row in the cache */
    h16 *q = (h16 *)p.dp.q;
    for (int w = blockIdx.x * STEP_THREADS + threadIdx.x; w < n_q + n_k + d.kvd;
         w += gridDim.x * STEP_THREADS) {
        if (w < n_q + n_k) {
            const int k = w >= n_q, j = k ? w - n_q : w, head = j / half, i = j % half;
            const int c0 = (k ? d.qd : 0) + head * d.hd + i;
            float a = __ldcg(p.qkv + c0), b = __ldcg(p.qkv + c0 + half);
            if (bias) {
                a = __fadd_rn(a, bias[c0]);
                b = __fadd_rn(b, bias[c0 + half]);
            }
            const float2 r = p.rope[i];
            const float o0 = __fsub_rn(__fmul_rn(a, r.x), __fmul_rn(b, r.y));
            const float o1 = __fadd_rn(__fmul_rn(b, r.x), __fmul_rn(a, r.y));
            h16 *dst = k ? sq.k + (((size_t)l * d.n_kv + head) * sq.cap + pos) * d.hd + i
                          : q + (size_t)head * d.hd + i;
            dst[0] = h16_from(o0);
            dst[half] = h16_from(o1);
        } else {
            const int j = w - n_q - n_k, head = j / d.hd, i = j % d.hd, c = d.qd + d.kvd + j;
            float v = __ldcg(p.qkv + c);
            if (bias) v = __fadd_rn(v, bias[c]);
            sq.v[(((size_t)l * d.n_kv + head) * sq.cap + pos) * d.hd + i] = h16_from(v);
        }
    }
}

#define STEP_MARKS 8
__device__ __forceinline__ void step_mark(const step_params &p, int l, int k)
{
    if (!p.trace || threadIdx.x != 0) return;
    p.trace[((size_t)l * STEP_MARKS + k) * gridDim.x + blockIdx.x] = gpu_globaltimer();
}

template <int G> __global__ void __launch_bounds__(STEP_THREADS, 1) k_decode_step(step_params p)
{
    extern __shared__ __align__(128) unsigned char step_smem[];
    const gpu_dims &d = p.d;
    step_state st;
    st.ring = step_smem;
    unsigned char *un = step_smem + (size_t)p.slots * STEP_SLOT;
    st.m = (step_misc *)(un + p.un_bytes);
    st.ring_a = gpu_smem_addr(st.ring);
    st.c = 0;
    step_misc &m = *st.m;
    h16 *xs = (h16 *)un;
    d2_smem<G> &asm_ = *(d2_smem<G> *)un;

    if (threadIdx.x == 0) {
        for (int s = 0; s < p.slots; s++) {
            gpu_mbar_init(gpu_smem_addr(&m.full[s]), 1);
            m.cnt[s] = 0;
        }
        gpu_mbar_init_fence();
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(m.pol));
        step_it_init(p, m.ring_it);
        step_it_init(p, m.pf_it);
        const h16 *src;
        uint32_t bytes;
        /* the ring's first fill, then chunks slots .. slots + prefetch - 1 into L2; from here on
         * every refill of chunk c prefetches chunk c + prefetch */
        for (int s = 0; s < p.slots; s++) step_issue(p, m, st.ring_a, s, false);
        for (int s = 0; s < p.slots; s++) step_next(p, m.pf_it, &src, &bytes);
        for (int i = 0; i < p.prefetch; i++)
            if (step_next(p, m.pf_it, &src, &bytes))
                gpu_l2_prefetch(src, 0, bytes);
    }
    __syncthreads();
    unsigned nbar = 0;
    const int ngx = d.n_kv * p.dp.gslices, items = ngx * p.dp.splits;
    uint4 act[STEP_MAXU];
    for (int l = 0; l < d.L; l++) {
        const gpu_layer_w lw = step_layer(p, l);
        /* 1. norm + QKV */
        step_mark(p, l, 0);
        gpu_block_rmsnorm<true>(p.x, lw.attn_norm, d.H, d.eps, xs);
        __syncthreads();
        step_mark(p, l, 1);
        step_act<false>(xs, d.H, act);
        step_stream<EPI_QKV>(p, st, step_seg_of(p, l, 0), act, p.qkv);
        step_mark(p, l, 2);
        step_grid_sync(p.bar, ++nbar);
        /* 2. bias + rope, q and the cache rows */
        step_rope(p, l);
        step_grid_sync(p.bar, ++nbar);
        step_mark(p, l, 3);
        /* 3. attention */
        dec_params dp = p.dp;
        dp.layer = l;
        for (int it = blockIdx.x; it < items; it += gridDim.x)
            d2_range<G, true>(dp, 0, it % ngx, it / ngx, ngx, p.part_cnt, asm_);
        step_grid_sync(p.bar, ++nbar);
        step_mark(p, l, 4);
        /* 4. o + residual */
        step_act<true>(p.dp.out, d.qd, act);
        step_stream<EPI_RESID>(p, st, step_seg_of(p, l, 1), act, p.x);
        step_grid_sync(p.bar, ++nbar);
        step_mark(p, l, 5);
        /* 5. norm + gate/up + SwiGLU */
        gpu_block_rmsnorm<true>(p.x, lw.ffn_norm, d.H, d.eps, xs);
        __syncthreads();
        step_act<false>(xs, d.H, act);
        step_stream<EPI_GATE>(p, st, step_seg_of(p, l, 2), act, NULL);
        step_stream<EPI_UP>(p, st, step_seg_of(p, l, 3), act, NULL);
        step_grid_sync(p.bar, ++nbar);
        step_mark(p, l, 6);
        /* 6. down + residual */
        step_act<true>(p.h, d.I, act);
        step_stream<EPI_RESID>(p, st, step_seg_of(p, l, 4), act, p.x);
        step_mark(p, l, 7);
        step_grid_sync(p.bar, ++nbar);
    }
}

/* ---------------------------------------------------------------- host side */

typedef void (*step_kernel)(step_params);

static step_kernel step_kernel_for(int G)
{
    return G == 1   ? k_decode_step<1>
           : G == 2 ? k_decode_step<2>
           : G == 4 ? k_decode_step<4>
                    : k_decode_step<8>;
}

static int step_un_bytes(const gpu_dims *d, int G)
{
    size_t a = (size_t)d->H * sizeof(h16), b;
    switch (G) {
    case 1:
        b = sizeof(d2_smem<1>);
        break;
    case 2:
        b = sizeof(d2_smem<2>);
        break;
    case 4:
        b = sizeof(d2_smem<4>);
        break;
    default:
        b = sizeof(d2_smem<8>);
        break;
    }
    size_t u = a > b ? a : b;
    return (int)((u + 127) / 128 * 128);
}

static int step_fits(const gpu_dims *d)
{
    return d->hd == D2_HD && d->H % 64 == 0 && d->qd % 64 == 0 && d->I % 64 == 0 &&
           d->H <= STEP_MAX_K && d->qd <= STEP_MAX_K && d->I <= STEP_MAX_K;
}

/* The lab's state beside the engine (e->lab). */
struct lab_step {
    int blocks, slots, splits, un, prefetch;
    size_t smem;
    gpu_layer_w *layers_d;        /* device copy of e->layers */
    unsigned *bar;                /* the grid barrier: arrivals in a launch (zeroed before each) */
    unsigned long long *trace;    /* TANDEM_GPU_STEP_TRACE=1: phase timestamps */
    int traced;
};

static int lab_step_decode(gpu_engine *e, const int *seq_idx, const int *pos, const gpu_seq_dev *seqs);

/* The engine's lab hook (engine.cuh): the step kernel replaces the chain for single-token decode
 * where it fits (Hopper, cooperative launch, the one-kernel decode attention, the shapes of
 * step_fits); elsewhere the lab plugin runs the chain like the serving one. */
extern "C" int gpu_lab_open(gpu_engine *e)
{
    const gpu_dims &d = e->d;
    cudaDeviceProp prop;
    GPU_CHECK(cudaGetDeviceProperties(&prop, e->index));
    if (prop.major < 9 || !prop.cooperativeLaunch || !e->part_cnt || !step_fits(&d))
        return ACCEL_OK;
    const int G = gpu_decode_heads_per_block(d.n_heads / d.n_kv);
    const int un = step_un_bytes(&d, G);
    /* the deepest ring that fits next to the rest (the kernel's static shared memory: the
     * norm's 32 doubles) */
    const size_t avail = prop.sharedMemPerBlockOptin - 1024;
    const char *se = getenv("TANDEM_GPU_STEP_SLOTS"); /* fewer slots (measurements) */
    int slots = se && atoi(se) >= 2 && atoi(se) <= STEP_SLOTS_MAX ? atoi(se) : STEP_SLOTS_MAX;
    while (slots >= 2 && step_smem_bytes(slots, un) > avail) slots--;
    if (slots < 2) return ACCEL_OK;
    const size_t smem = step_smem_bytes(slots, un);
    step_kernel k = step_kernel_for(G);
    GPU_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    GPU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, STEP_THREADS, smem));
    if (per_sm < 1) return ACCEL_OK;
    const int B = e->sms; /* one block per SM: the ring is the SM's shared memory */
    if ((d.I + B - 1) / B > STEP_GMAX || (d.H + B - 1) / B > STEP_GMAX) return ACCEL_OK;
    /* attention ranges: one per block at most, within the partial slots the engine holds */
    const int gslices = (d.n_heads / d.n_kv + G - 1) / G, ngx = d.n_kv * gslices;
    int splits = B / ngx;
    const int have = (int)(gpu_attn_decode_slots(&d, e->sms, 1) / d.n_heads);
    if (splits > have) splits = have;
    if (splits > GPU_DECODE_SPLIT_MAX) splits = GPU_DECODE_SPLIT_MAX;
    if (splits < 1) splits = 1;
    lab_step *ls = (lab_step *)calloc(1, sizeof *ls);
    if (!ls) return ACCEL_ERR_NOMEM;
    e->lab = ls; /* gpu_lab_free releases what is taken below, also after a failure */
    GPU_CHECK(cudaMalloc((void **)&ls->layers_d, (size_t)d.L * sizeof(gpu_layer_w)));
    GPU_CHECK(cudaMemcpy(ls->layers_d, e->layers, (size_t)d.L * sizeof(gpu_layer_w),
                         cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMalloc((void **)&ls->bar, 2 * sizeof(unsigned)));
    GPU_CHECK(cudaMemset(ls->bar, 0, 2 * sizeof(unsigned)));
    const char *tr = getenv("TANDEM_GPU_STEP_TRACE");
    if (tr && !strcmp(tr, "1"))
        GPU_CHECK(cudaMalloc((void **)&ls->trace, (size_t)d.L * STEP_MARKS * B * 8));
    const size_t dl = strlen(e->desc);
    snprintf(e->desc + dl, sizeof e->desc - dl, ", one-kernel decode");
    ls->blocks = B;
    ls->slots = slots;
    /* L2 prefetch distance beyond the ring, in chunks (TANDEM_GPU_STEP_PREFETCH, 0-64) */
    const char *pf = getenv("TANDEM_GPU_STEP_PREFETCH");
    ls->prefetch = pf ? atoi(pf) : STEP_PREFETCH;
    if (ls->prefetch < 0 || ls->prefetch > 64) ls->prefetch = STEP_PREFETCH;
    ls->splits = splits;
    ls->un = un;
    ls->smem = smem;
    e->lab_decode = lab_step_decode;
    return ACCEL_OK;
}

extern "C" void gpu_lab_free(gpu_engine *e)
{
    lab_step *ls = (lab_step *)e->lab;
    if (!ls) return;
    cudaFree(ls->layers_d);
    cudaFree(ls->bar);
    cudaFree(ls->trace);
    free(ls);
    e->lab = NULL;
    e->lab_decode = NULL;
}

/* TANDEM_GPU_STEP_TRACE=1: where the 50th step's time went (stderr), per phase the mean over
 * layers and blocks of the time since the mark before, and of the slowest block's. */
static void step_trace_report(gpu_engine *e)
{
    const lab_step *ls = (const lab_step *)e->lab;
    const int L = e->d.L, B = ls->blocks;
    static const char *names[STEP_MARKS] = {"barrier->layer", "norm",          "qkv stream",
                                            "bar+rope+bar",   "attention+bar", "o+bar",
                                            "norm+gu+bar",    "down"};
    size_t n = (size_t)L * STEP_MARKS * B;
    unsigned long long *h = (unsigned long long *)malloc(n * 8);
    if (!h || cudaStreamSynchronize(e->compute) != cudaSuccess ||
        cudaMemcpy(h, ls->trace, n * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        cudaGetLastError();
        return;
    }
    double mean[STEP_MARKS] = {0}, mx[STEP_MARKS] = {0};
    for (int l = 0; l < L; l++)
        for (int k = 0; k < STEP_MARKS; k++) {
            double worst = 0;
            for (int b = 0; b < B; b++) {
                unsigned long long t = h[((size_t)l * STEP_MARKS + k) * B + b];
                unsigned long long t0 =
                    k   ? h[((size_t)l * STEP_MARKS + k - 1) * B + b]
                    : l ? h[((size_t)(l - 1) * STEP_MARKS + STEP_MARKS - 1) * B + b]
                        : t;
                double dt = (double)(t - t0) / 1e3;
                mean[k] += dt / B;
                if (dt > worst) worst = dt;
            }
            mx[k] += worst;
        }
    unsigned long long first = ~0ull, last = 0;
    for (size_t i = 0; i < n; i++) {
        if (h[i] < first) first = h[i];
        if (h[i] > last) last = h[i];
    }
    fprintf(stderr,
            "tandem cuda step trace: %.1f us from first to last mark; per layer (us, mean / "
            "slowest block):",
            (double)(last - first) / 1e3);
    for (int k = 0; k < STEP_MARKS; k++)
        fprintf(stderr, " %s %.2f / %.2f;", names[k], mean[k] / L, mx[k] / L);
    fprintf(stderr, "\n");
    free(h);
}

static int lab_step_decode(gpu_engine *e, const int *seq_idx, const int *pos, const gpu_seq_dev *seqs)
{
    const gpu_dims &d = e->d;
    lab_step *ls = (lab_step *)e->lab;
    step_params p;
    memset(&p, 0, sizeof p);
    p.layers = ls->layers_d;
    p.x = e->x;
    p.qkv = e->qkv;
    p.h = e->h;
    p.rope = e->rope;
    p.part_cnt = e->part_cnt;
    p.bar = ls->bar;
    p.d = d;
    p.slots = ls->slots;
    p.prefetch = ls->prefetch;
    p.un_bytes = ls->un;
    dec_params &a = p.dp;
    a.q = e->q;
    a.seq_idx = seq_idx;
    a.pos = pos;
    a.seqs = seqs;
    a.part_o = e->part_o;
    a.part_ml = e->part_ml;
    a.out = e->att;
    a.n_kv = d.n_kv;
    a.n_heads = d.n_heads;
    a.group = d.n_heads / d.n_kv;
    a.hd = d.hd;
    a.qd = d.qd;
    a.window = d.window;
    const int G = gpu_decode_heads_per_block(a.group);
    a.gslices = (a.group + G - 1) / G;
    a.splits = ls->splits;
    a.early = 0;
    a.tr = NULL;
    a.btr = NULL;
    a.mma = 0;
    a.scale_log2 = (float)(1.4426950408889634 / sqrt((double)d.hd));
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(ls->blocks);
    cfg.blockDim = dim3(STEP_THREADS);
    cfg.dynamicSmemBytes = ls->smem;
    cfg.stream = e->compute;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    p.trace = ls->trace;
    GPU_CHECK(cudaMemsetAsync(ls->bar, 0, sizeof(unsigned), e->compute));
    GPU_CHECK(cudaLaunchKernelEx(&cfg, step_kernel_for(G), p));
    if (ls->trace && ++ls->traced == 50) step_trace_report(e);
    return ACCEL_OK;
}
