/* gpu/decode_step.cu — the whole single-token decode step (batch 1, all layers) as one kernel.
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
 * (cp.async.bulk, 32 KB per slot, completion on an mbarrier per slot): thread 0 issues the ring
 * full at the start and refills a slot as soon as the block has consumed it. Between the phases
 * that need each other's results the blocks meet at a grid-wide barrier (an arrival counter and a
 * generation word in global memory); the copies already in flight keep HBM busy through the
 * barrier, the rope and the attention, up to the ring's depth (~190 KB per SM: ~6 us of HBM time).
 *
 * Phases of a layer (block b of B takes rows [N b / B, N (b + 1) / B) of each matrix):
 *   1. RMSNorm of the residual row into shared memory (every block, k_rmsnorm's arithmetic:
 *      gpu_block_rmsnorm), QKV rows -> float32 q/k/v                       | grid barrier
 *   2. bias + rope of q and k, q (bf16) and the cache rows of k and v (k_rope_qkv's arithmetic)
 *                                                                          | grid barrier
 *   3. attention: the ranges of attn_decode.cuh (d2_range), one block per (KV head slice, range),
 *      the last range of a row merging them                                | grid barrier
 *   4. o rows: x += att · Wo^T                                             | grid barrier
 *   5. RMSNorm again, gate rows then up rows, h = silu(g) * u (bf16)       | grid barrier
 *   6. down rows: x += h · Wd^T                                            | grid barrier
 * The final norm and lm_head stay separate kernels (one big GEMV at full rate already).
 *
 * A chunk (a slot's content) is up to STEP_RMAX whole rows; the 8 warps split every row of the
 * chunk (warp w: its K / 8 columns, lane l: 16-byte pieces l, l + 32, ... of them, against the
 * activation pieces it holds in registers for the whole phase), sum in float32, reduce with
 * shuffles, and threads < rows add the 8 warp sums in warp order. So the projections' sums are
 * in another order than the GEMV's (not the chain's bits: the same bf16 inputs, float32 sums;
 * tests/gpu compares against the CPU and against the chain within bf16 tolerance), but fixed:
 * the step is deterministic. Everything else (norm, rope, attention, SwiGLU, the residual adds)
 * is the chain's arithmetic.
 *
 * When (gpu_step_setup): Hopper (bulk copies), head_dim 128, H, q dim and I multiples of 64 and at
 * most 16384, the one-kernel decode attention, every block resident (cooperative launch), T = 1
 * without a KV export. TANDEM_GPU_STEP=off keeps the chain (comparisons), as do the chain's own
 * switches (TANDEM_GPU_FUSED, _GEMV, _PDL = off). */
#include "gpu/attn_decode.cuh"
#include "gpu/gemv.cuh"
#include "gpu/tma.cuh"

#define STEP_THREADS   256
#define STEP_WARPS     (STEP_THREADS / 32)
#define STEP_SLOT      32768 /* bytes per ring slot */
#define STEP_SLOTS_MAX 8
#define STEP_RMAX      8 /* rows per chunk at most */
#define STEP_MAXU      8 /* 16-byte activation pieces per lane: K <= 64 * 32 * STEP_MAXU / 8 */
#define STEP_MAX_K     16384
#define STEP_GMAX      256 /* gate values a block keeps for its up rows */
#define STEP_SEGS      5   /* weight segments per layer: qkv, o, gate, up, down */

struct step_params {
    const gpu_layer_w *layers; /* device copy of e->layers */
    float *x;                  /* (H) residual row */
    float *qkv;                /* (qkv) projections before bias and rope */
    bf16 *h;                   /* (I) */
    const float2 *rope;        /* (hd / 2) the token's cos, sin */
    dec_params dp;             /* the attention's: q, att (out), positions, partials, splits */
    int *part_cnt;
    unsigned *bar; /* [2] grid barrier: arrivals, generation */
    gpu_dims d;
    int slots;    /* ring slots */
    int un_bytes; /* the union of the normalized row and the attention's scratch */
};

/* Shared memory: ring | union (xs or d2_smem) | part[2][warps][rmax] | gs[gmax] | full[slots] */
__host__ __device__ static inline size_t step_smem_bytes(int slots, int un_bytes)
{
    return (size_t)slots * STEP_SLOT + un_bytes + 2 * STEP_WARPS * STEP_RMAX * sizeof(float) +
           STEP_GMAX * sizeof(float) + STEP_SLOTS_MAX * sizeof(uint64_t);
}

__device__ __forceinline__ int step_rpc(int K)
{
    return min(STEP_RMAX, STEP_SLOT / (2 * K));
}

struct step_seg {
    const bf16 *w; /* the block's first row */
    int rows, K, r0;
};

__device__ __forceinline__ step_seg step_seg_of(const step_params &p, int l, int s)
{
    const gpu_layer_w &lw = p.layers[l];
    const gpu_dims &d = p.d;
    const bf16 *W;
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

/* The copy side (thread 0 only): the next chunk of the block's weight stream. */
struct step_prod {
    int l, s, row;
    step_seg sg;
    uint64_t pol;
};

__device__ __forceinline__ void step_issue(const step_params &p, step_prod &pr, uint32_t ring,
                                           uint32_t full, int slot)
{
    while (pr.l < p.d.L && pr.row >= pr.sg.rows) {
        pr.row = 0;
        if (++pr.s == STEP_SEGS) pr.s = 0, pr.l++;
        if (pr.l < p.d.L) pr.sg = step_seg_of(p, pr.l, pr.s);
    }
    if (pr.l >= p.d.L) return;
    const int n = min(step_rpc(pr.sg.K), pr.sg.rows - pr.row);
    const uint32_t bytes = (uint32_t)n * pr.sg.K * 2, bar = full + 8 * slot;
    gpu_mbar_expect_tx(bar, bytes);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;\n" ::"r"(ring + (uint32_t)slot * STEP_SLOT),
                 "l"(pr.sg.w + (size_t)pr.row * pr.sg.K), "r"(bytes), "r"(bar), "l"(pr.pol)
                 : "memory");
    pr.row += n;
}

/* Grid-wide barrier: every block's writes before it are visible to every block after it. The
 * generation is read before arriving (it can only move once this block has arrived); the last
 * block to arrive resets the counter and moves the generation. */
__device__ __forceinline__ void step_grid_sync(unsigned *bar)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned g;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(g) : "l"(bar + 1) : "memory");
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            unsigned now;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n"
                             : "=r"(now)
                             : "l"(bar + 1)
                             : "memory");
            } while (now == g);
        }
        __threadfence();
    }
    __syncthreads();
}

/* The lane's activation pieces for a K-wide phase (src: shared memory, or global written in this
 * kernel: read past L1). */
template <bool GLOBAL>
__device__ __forceinline__ void step_act(const bf16 *src, int K, uint4 act[STEP_MAXU])
{
    const int per_w = K / 64, lane = threadIdx.x % 32;
    const uint4 *a = (const uint4 *)src + (threadIdx.x / 32) * per_w;
#pragma unroll
    for (int j = 0; j < STEP_MAXU; j++) {
        const int i = lane + 32 * j;
        act[j] = i >= per_w ? make_uint4(0, 0, 0, 0) : GLOBAL ? __ldcg(a + i) : a[i];
    }
}

enum { EPI_QKV, EPI_RESID, EPI_GATE, EPI_UP };

struct step_state {
    unsigned char *ring;
    float (*part)[STEP_WARPS][STEP_RMAX];
    float *gs;
    uint32_t ring_a, full_a;
    int c; /* chunks consumed */
    step_prod pr;
};

/* Consume segment sg of the block's stream: every row's dot product with the activation, then
 * the epilogue EPI on (row index in the matrix, row index in the block's range, sum). */
template <int EPI>
__device__ __forceinline__ void step_stream(const step_params &p, step_state &st,
                                            const step_seg &sg, const uint4 act[STEP_MAXU],
                                            float *out)
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int K = sg.K, per_w = K / 64, rowu = K / 8, rpc = step_rpc(K);
    for (int row = 0; row < sg.rows; row += rpc, st.c++) {
        const int slot = st.c % p.slots, n = min(rpc, sg.rows - row);
        gpu_mbar_wait(st.full_a + 8 * slot, (uint32_t)(st.c / p.slots) & 1);
        const uint4 *tile = (const uint4 *)(st.ring + (size_t)slot * STEP_SLOT) + warp * per_w;
        float(*part)[STEP_RMAX] = st.part[st.c & 1];
#pragma unroll
        for (int r = 0; r < STEP_RMAX; r++) {
            if (r >= n) break;
            float a = 0.f;
#pragma unroll
            for (int j = 0; j < STEP_MAXU; j++) {
                const int i = lane + 32 * j;
                if (i < per_w) a += d2_dot(tile[r * rowu + i], act[j]);
            }
#pragma unroll
            for (int o = 16; o >= 1; o /= 2) a += __shfl_xor_sync(0xffffffffu, a, o);
            if (lane == 0) part[warp][r] = a;
        }
        __syncthreads(); /* the slot is read: refill it; the warp sums are in */
        if (tid == 0) step_issue(p, st.pr, st.ring_a, st.full_a, slot);
        if (tid < n) {
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < STEP_WARPS; w++) v += part[w][tid];
            const int loc = row + tid, r = sg.r0 + loc;
            if (EPI == EPI_QKV) {
                out[r] = v;
            } else if (EPI == EPI_RESID) {
                out[r] = __ldcg(out + r) + v;
            } else if (EPI == EPI_GATE) {
                st.gs[loc] = v;
            } else {
                /* the chain stores g and u as bf16 (the gate/up GEMM's output), then k_swiglu */
                const float g = __bfloat162float(__float2bfloat16(st.gs[loc]));
                const float u = __bfloat162float(__float2bfloat16(v));
                p.h[r] = __float2bfloat16(gpu_silu_mul(g, u));
            }
        }
    }
}

/* Bias + rope of q and k, q and the cache rows of k and v: k_rope_qkv's arithmetic for one token,
 * spread over the grid. */
__device__ __forceinline__ void step_rope(const step_params &p, int l)
{
    const gpu_dims &d = p.d;
    const int half = d.hd / 2, n_q = d.n_heads * half, n_k = d.n_kv * half;
    const float *bias = p.layers[l].b_qkv;
    const gpu_seq_dev sq = p.dp.seqs[p.dp.seq_idx[0]];
    const int pos = p.dp.pos[0];
    bf16 *q = (bf16 *)p.dp.q;
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
            bf16 *dst = k ? sq.k + (((size_t)l * d.n_kv + head) * sq.cap + pos) * d.hd + i
                          : q + (size_t)head * d.hd + i;
            dst[0] = __float2bfloat16(o0);
            dst[half] = __float2bfloat16(o1);
        } else {
            const int j = w - n_q - n_k, head = j / d.hd, i = j % d.hd, c = d.qd + d.kvd + j;
            float v = __ldcg(p.qkv + c);
            if (bias) v = __fadd_rn(v, bias[c]);
            sq.v[(((size_t)l * d.n_kv + head) * sq.cap + pos) * d.hd + i] = __float2bfloat16(v);
        }
    }
}

template <int G> __global__ void __launch_bounds__(STEP_THREADS, 1) k_decode_step(step_params p)
{
    extern __shared__ __align__(128) unsigned char step_smem[];
    const gpu_dims &d = p.d;
    step_state st;
    st.ring = step_smem;
    unsigned char *un = step_smem + (size_t)p.slots * STEP_SLOT;
    st.part = (float(*)[STEP_WARPS][STEP_RMAX])(un + p.un_bytes);
    st.gs = (float *)(un + p.un_bytes + 2 * STEP_WARPS * STEP_RMAX * sizeof(float));
    uint64_t *full = (uint64_t *)(st.gs + STEP_GMAX);
    st.ring_a = gpu_smem_addr(st.ring);
    st.full_a = gpu_smem_addr(full);
    st.c = 0;
    bf16 *xs = (bf16 *)un;
    d2_smem<G> &asm_ = *(d2_smem<G> *)un;

    if (threadIdx.x == 0) {
        for (int s = 0; s < p.slots; s++) gpu_mbar_init(st.full_a + 8 * s, 1);
        gpu_mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(st.pr.pol));
        st.pr.l = 0, st.pr.s = 0, st.pr.row = 0;
        st.pr.sg = step_seg_of(p, 0, 0);
        for (int s = 0; s < p.slots; s++) step_issue(p, st.pr, st.ring_a, st.full_a, s);
    }
    const int ngx = d.n_kv * p.dp.gslices, items = ngx * p.dp.splits;
    uint4 act[STEP_MAXU];
    for (int l = 0; l < d.L; l++) {
        const gpu_layer_w &lw = p.layers[l];
        /* 1. norm + QKV */
        gpu_block_rmsnorm<true>(p.x, lw.attn_norm, d.H, d.eps, xs);
        __syncthreads();
        step_act<false>(xs, d.H, act);
        step_stream<EPI_QKV>(p, st, step_seg_of(p, l, 0), act, p.qkv);
        step_grid_sync(p.bar);
        /* 2. bias + rope, q and the cache rows */
        step_rope(p, l);
        step_grid_sync(p.bar);
        /* 3. attention */
        dec_params dp = p.dp;
        dp.layer = l;
        for (int it = blockIdx.x; it < items; it += gridDim.x)
            d2_range<G, true>(dp, 0, it % ngx, it / ngx, ngx, p.part_cnt, asm_);
        step_grid_sync(p.bar);
        /* 4. o + residual */
        step_act<true>(p.dp.out, d.qd, act);
        step_stream<EPI_RESID>(p, st, step_seg_of(p, l, 1), act, p.x);
        step_grid_sync(p.bar);
        /* 5. norm + gate/up + SwiGLU */
        gpu_block_rmsnorm<true>(p.x, lw.ffn_norm, d.H, d.eps, xs);
        __syncthreads();
        step_act<false>(xs, d.H, act);
        step_stream<EPI_GATE>(p, st, step_seg_of(p, l, 2), act, NULL);
        step_stream<EPI_UP>(p, st, step_seg_of(p, l, 3), act, NULL);
        step_grid_sync(p.bar);
        /* 6. down + residual */
        step_act<true>(p.h, d.I, act);
        step_stream<EPI_RESID>(p, st, step_seg_of(p, l, 4), act, p.x);
        step_grid_sync(p.bar);
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
    size_t a = (size_t)d->H * sizeof(bf16), b;
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

int gpu_step_setup(gpu_engine *e)
{
    const gpu_dims &d = e->d;
    e->step = 0;
    const char *env = getenv("TANDEM_GPU_STEP");
    if (env && !strcmp(env, "off")) return ACCEL_OK;
    cudaDeviceProp prop;
    GPU_CHECK(cudaGetDeviceProperties(&prop, e->index));
    if (prop.major < 9 || !prop.cooperativeLaunch || !e->part_cnt || !step_fits(&d))
        return ACCEL_OK;
    const int G = gpu_decode_heads_per_block(d.n_heads / d.n_kv);
    const int un = step_un_bytes(&d, G);
    /* the deepest ring that fits next to the rest (the kernel's static shared memory: the
     * norm's 32 doubles) */
    const size_t avail = prop.sharedMemPerBlockOptin - 1024;
    int slots = STEP_SLOTS_MAX;
    while (slots >= 2 && step_smem_bytes(slots, un) > avail) slots--;
    if (slots < 2) return ACCEL_OK;
    const size_t smem = step_smem_bytes(slots, un);
    step_kernel k = step_kernel_for(G);
    GPU_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    GPU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, STEP_THREADS, smem));
    if (per_sm < 1) return ACCEL_OK;
    const int B = e->sms; /* one block per SM: the ring is the SM's shared memory */
    if ((d.I + B - 1) / B > STEP_GMAX) return ACCEL_OK;
    /* attention ranges: one per block at most, within the partial slots the engine holds */
    const int gslices = (d.n_heads / d.n_kv + G - 1) / G, ngx = d.n_kv * gslices;
    int splits = B / ngx;
    const int have = (int)(gpu_attn_decode_slots(&d, e->sms, 1) / d.n_heads);
    if (splits > have) splits = have;
    if (splits > GPU_DECODE_SPLIT_MAX) splits = GPU_DECODE_SPLIT_MAX;
    if (splits < 1) splits = 1;
    GPU_CHECK(cudaMalloc((void **)&e->layers_d, (size_t)d.L * sizeof(gpu_layer_w)));
    GPU_CHECK(cudaMemcpy(e->layers_d, e->layers, (size_t)d.L * sizeof(gpu_layer_w),
                         cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMalloc((void **)&e->step_bar, 2 * sizeof(unsigned)));
    GPU_CHECK(cudaMemset(e->step_bar, 0, 2 * sizeof(unsigned)));
    e->step = 1;
    const size_t dl = strlen(e->desc);
    snprintf(e->desc + dl, sizeof e->desc - dl, ", one-kernel decode");
    e->step_blocks = B;
    e->step_slots = slots;
    e->step_splits = splits;
    e->step_un = un;
    e->step_smem = smem;
    return ACCEL_OK;
}

int gpu_decode_step(gpu_engine *e, const int *seq_idx, const int *pos, const gpu_seq_dev *seqs)
{
    const gpu_dims &d = e->d;
    if (!e->step) return ACCEL_ERR_UNSUPPORTED;
    step_params p;
    memset(&p, 0, sizeof p);
    p.layers = e->layers_d;
    p.x = e->x;
    p.qkv = e->qkv;
    p.h = e->h;
    p.rope = e->rope;
    p.part_cnt = e->part_cnt;
    p.bar = e->step_bar;
    p.d = d;
    p.slots = e->step_slots;
    p.un_bytes = e->step_un;
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
    a.splits = e->step_splits;
    a.early = 0;
    a.scale_log2 = (float)(1.4426950408889634 / sqrt((double)d.hd));
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(e->step_blocks);
    cfg.blockDim = dim3(STEP_THREADS);
    cfg.dynamicSmemBytes = e->step_smem;
    cfg.stream = e->compute;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    GPU_CHECK(cudaLaunchKernelEx(&cfg, step_kernel_for(G), p));
    return ACCEL_OK;
}
