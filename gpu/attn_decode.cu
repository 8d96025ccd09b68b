/* gpu/attn_decode.cu — attention of single query rows over long KV (flash-decoding): decode, and
 * prefill chunks of a few tokens. Memory-bound (each K/V byte is used by `group` query heads
 * only), so the kernel's job is to keep enough loads in flight: the keys of a row are cut into
 * `splits` ranges, one block per (token, KV head, range), and a second kernel merges the ranges.
 *
 * Block (128 threads) = CH chunk lanes (16 bytes of head_dim each) x KL key lanes:
 *   scores: lane (c, kl) takes keys kl, kl+KL, ...; its chunk of K times its chunk of each of the
 *           block's query heads (G of them: the GQA group, or a slice of it), reduced over the CH
 *           lanes of the key with shuffles;
 *   softmax: per sub-tile of SUB keys, the running max/sum update of the online softmax;
 *   values:  the same lanes accumulate p * V chunk for every head; a shuffle + shared-memory
 *           reduction over key lanes gives the range's unnormalized output, its max and sum.
 * The merge weights each range by 2^(m_r - M) (scores are kept in log2 units).
 * Each token cuts its own keys into ns = min(splits, keys / 64) ranges (blocks past ns exit at
 * once), so the launch depends only on the number of tokens; a range left empty by rounding
 * writes max -inf, sum 0 and weighs nothing.
 * head_dim 128 (every Llama-3/2 7-8B shape) takes the one-kernel form below (k_decode_fast: same
 * ranges, the merge done by the last block of each row); other head_dims, and the engine with
 * decode_attn=two (part_cnt NULL), the two-kernel form. */
#include "gpu/attn_decode.cuh"

#define DEC_THREADS 128
#define DEC_SUB 128

__device__ __forceinline__ void load8(const h16 *src, bool ok, float out[8])
{
    if (ok) {
        uint4 raw = *(const uint4 *)src;
        const h16 *b = (const h16 *)&raw;
#pragma unroll
        for (int e = 0; e < 8; e++) out[e] = h16_to(b[e]);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) out[e] = 0.f;
    }
}

template <int HDP, int G>
__global__ void __launch_bounds__(DEC_THREADS) k_decode_split(dec_params p)
{
    constexpr int CH = HDP / 8, KL = DEC_THREADS / CH, WARPS = DEC_THREADS / 32;
    __shared__ float sp[G][DEC_SUB];
    __shared__ float s_alpha[G], s_m[G], s_l[G];
    __shared__ float red[WARPS][G][HDP];

    gpu_pdl_wait(); /* q, and the cache row the QKV kernel wrote */
    gpu_pdl_trigger();
    const int t = blockIdx.z, split = blockIdx.y;
    const int g = blockIdx.x / p.gslices, slice = blockIdx.x % p.gslices;
    const int h0 = g * p.group + slice * G, nh = min(G, p.group - slice * G);
    const gpu_seq_dev sq = p.seqs[p.seq_idx[t]];
    const int qp = p.pos[t];
    int kstart, ns, len;
    dec_ranges(qp, p.window, p.splits, &kstart, &ns, &len);
    if (split >= ns) return; /* this token needs fewer ranges: the merge reads only ns */
    const int kb = kstart + split * len, ke = min(kb + len, qp + 1);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, c = tid % CH, kl = tid / CH;
    const bool cok = c * 8 < p.hd;
    const size_t head_off = ((size_t)p.layer * p.n_kv + g) * sq.cap * p.hd;
    const h16 *K = sq.k + head_off, *V = sq.v + head_off;

    float qv[G][8], acc[G][8];
#pragma unroll
    for (int gh = 0; gh < G; gh++) {
        load8(p.q + (size_t)t * p.qd + (size_t)(h0 + gh) * p.hd + c * 8, cok && gh < nh, qv[gh]);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            qv[gh][e] *= p.scale_log2;
            acc[gh][e] = 0.f;
        }
    }
    if (tid < G) {
        s_m[tid] = -INFINITY;
        s_l[tid] = 0.f;
    }
    __syncthreads();

    for (int sb = kb; sb < ke; sb += DEC_SUB) {
        const int n = min(DEC_SUB, ke - sb);
        /* every lane runs the same trip count: the shuffles need the whole warp */
#pragma unroll 4
        for (int j0 = 0; j0 < n; j0 += KL) {
            const int j = j0 + kl;
            const bool ok = j < n;
            float kv[8];
            load8(K + (size_t)gpu_kv_row(sq.map, sb + (ok ? j : 0)) * p.hd + c * 8, cok && ok, kv);
#pragma unroll
            for (int gh = 0; gh < G; gh++) {
                float dsum = 0.f;
#pragma unroll
                for (int e = 0; e < 8; e++) dsum += qv[gh][e] * kv[e];
#pragma unroll
                for (int o = CH / 2; o >= 1; o /= 2) dsum += __shfl_xor_sync(0xffffffffu, dsum, o);
                if (ok && c == 0) sp[gh][j] = dsum;
            }
        }
        __syncthreads();
        for (int gh = warp; gh < G; gh += WARPS) {
            if (gh >= nh) continue;
            float mx = -INFINITY;
            for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sp[gh][j]);
            for (int o = 16; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mold = s_m[gh], mnew = fmaxf(mold, mx);
            float sum = 0.f;
            for (int j = lane; j < n; j += 32) {
                float e = exp2f(sp[gh][j] - mnew);
                sp[gh][j] = e;
                sum += e;
            }
            for (int o = 16; o >= 1; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                float a = exp2f(mold - mnew); /* mold = -inf on the first sub-tile: 0 */
                s_alpha[gh] = a;
                s_m[gh] = mnew;
                s_l[gh] = s_l[gh] * a + sum;
            }
        }
        __syncthreads();
#pragma unroll
        for (int gh = 0; gh < G; gh++) {
            const float a = gh < nh ? s_alpha[gh] : 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[gh][e] *= a;
        }
#pragma unroll 4
        for (int j = kl; j < n; j += KL) {
            float vv[8];
            load8(V + (size_t)gpu_kv_row(sq.map, sb + j) * p.hd + c * 8, cok, vv);
#pragma unroll
            for (int gh = 0; gh < G; gh++) {
                const float pj = gh < nh ? sp[gh][j] : 0.f;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[gh][e] += pj * vv[e];
            }
        }
        __syncthreads(); /* sp is rewritten by the next sub-tile */
    }

    /* reduce over key lanes: inside the warp (lanes c + CH*i), then across warps */
#pragma unroll
    for (int gh = 0; gh < G; gh++)
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float v = acc[gh][e];
#pragma unroll
            for (int o = CH; o < 32; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane < CH) red[warp][gh][c * 8 + e] = v;
        }
    __syncthreads();
    for (int i = tid; i < G * HDP; i += DEC_THREADS) {
        int gh = i / HDP, col = i % HDP;
        if (gh >= nh || col >= p.hd) continue;
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) v += red[w][gh][col];
        size_t slot = ((size_t)t * p.n_heads + h0 + gh) * p.splits + split;
        p.part_o[slot * HDP + col] = v;
        if (col == 0) p.part_ml[slot] = make_float2(s_m[gh], s_l[gh]);
    }
}

__global__ void k_decode_merge(const float *part_o, const float2 *part_ml, const int *pos,
                               int window, int splits, int n_heads, int hd, int hdp, int qd,
                               h16 *out)
{
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int h = blockIdx.x, t = blockIdx.y;
    const size_t s0 = ((size_t)t * n_heads + h) * splits;
    int kstart, ns, len;
    dec_ranges(pos[t], window, splits, &kstart, &ns, &len);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, part_ml[s0 + s].x);
    float L = 0.f;
    for (int s = 0; s < ns; s++) {
        float2 ml = part_ml[s0 + s];
        if (ml.y > 0.f) L += ml.y * exp2f(ml.x - M);
    }
    for (int col = threadIdx.x; col < hd; col += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < ns; s++) {
            float2 ml = part_ml[s0 + s];
            if (ml.y > 0.f) acc += part_o[(s0 + s) * hdp + col] * exp2f(ml.x - M);
        }
        out[(size_t)t * qd + (size_t)h * hd + col] = h16_from(acc / L);
    }
}

/* ---------------------------------------------------------------- one kernel (head_dim 128)
 * The ranges of attn_decode.cuh (d2_range), one block per (token, KV head slice, range). */
template <int G>
__global__ void __launch_bounds__(D2_THREADS, G <= 4 ? 2 : 1) k_decode_fast(dec_params p, int *cnt)
{
    __shared__ d2_smem<G> sm;
    d2_bmark(p, 0);
    d2_range<G, false>(p, blockIdx.z, blockIdx.x, blockIdx.y, gridDim.x, cnt, sm);
    d2_bmark(p, 3);
}

/* The cluster form (short rows): one thread-block cluster of GPU_DECODE_CLUSTER blocks per
 * (token, KV head slice), one range each, merged through distributed shared memory
 * (d2_cluster_merge). */
template <int G>
__global__ void __launch_bounds__(D2_THREADS, G <= 4 ? 2 : 1) k_decode_cluster(dec_params p, int *cnt)
{
    __shared__ d2_smem<G> sm;
    d2_bmark(p, 0);
    d2_range<G, false, true>(p, blockIdx.z, blockIdx.x, blockIdx.y, gridDim.x, cnt, sm);
    d2_bmark(p, 3);
}

/* The rows form (batches: every row one range, splits == 1, from 33 sequences on with 8 KV
 * heads): one block per (token, KV head slice) over all its keys, the tensor-core range body with
 * a deeper ring — D2R_STAGES steps per warp, two of them in flight while one is computed, against
 * one in k_decode_fast's ring (which shares its shared memory with the merge's staging) — and no
 * merge: the block normalizes its own partial (what the merge of one range computes, the same
 * bits). At batch 256 the attention is about half of the step and reads 1 GB per layer: a
 * memory-level-parallelism matter (KERNELS.md). Shared memory: the ring (dynamic) and the warps'
 * partials (static), two blocks per SM at up to 4 heads per block. */
#define D2R_STAGES 3
#define D2R_RING_BYTES (D2R_STAGES * D2_WARPS * D2M_STAGE * 16)
template <int G> struct d2_rows_smem {
    float acc[D2_WARPS][G][D2_HD];
    float m[D2_WARPS][G], l[D2_WARPS][G];
};

template <int G>
__global__ void __launch_bounds__(D2_THREADS, 2) k_decode_rows(dec_params p)
{
    __shared__ d2_rows_smem<G> sm;
    const int t = blockIdx.z, gx = blockIdx.x;
    const int g = gx / p.gslices, slice = gx % p.gslices;
    const int h0 = g * p.group + slice * G, nh = min(G, p.group - slice * G);
    const int qp = p.pos[t];
    const int kstart = p.window > 0 ? max(0, qp + 1 - p.window) : 0;
    const gpu_seq_dev sq = p.seqs[p.seq_idx[t]];
    const size_t head_off = ((size_t)p.layer * p.n_kv + g) * sq.cap * D2_HD;
    d2_mma_range<G, D2R_STAGES>(p, t, h0, nh, qp, sq.k + head_off, sq.v + head_off, sq.map, kstart,
                                qp + 1, sm);
    __syncthreads();
    for (int i = threadIdx.x; i < nh * D2_HD; i += D2_THREADS) {
        const int gh = i / D2_HD, col = i % D2_HD;
        float M, L;
        const float O = d2_block_partial<G>(sm, gh, col, &M, &L);
        p.out[(size_t)t * p.qd + (size_t)(h0 + gh) * D2_HD + col] = h16_from(O / L);
    }
}

static void (*rows_for(int G))(dec_params)
{
    return G == 1 ? k_decode_rows<1> : G == 2 ? k_decode_rows<2> : k_decode_rows<4>;
}

/* Whether the rows form runs here for groups of G heads per block: allowed its ring once per
 * device, and two blocks per SM (else the split form, whose one-range rows take the same
 * shortcut). */
static int rows_ok(int G)
{
    static int ok[64][3]; /* per device, per G = 1, 2, 4: 0 unknown, 1 yes, -1 no */
    int dev = 0;
    if (G > 4 || cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        cudaGetLastError();
        return 0;
    }
    const int gi = G == 1 ? 0 : G == 2 ? 1 : 2;
    int v = __atomic_load_n(&ok[dev][gi], __ATOMIC_ACQUIRE);
    if (v) return v > 0;
    void (*k)(dec_params) = rows_for(G);
    int n = 0;
    v = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, D2R_RING_BYTES) == cudaSuccess &&
                cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared) == cudaSuccess &&
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, D2_THREADS, D2R_RING_BYTES) == cudaSuccess &&
                n >= 2
            ? 1
            : -1;
    cudaGetLastError();
    __atomic_store_n(&ok[dev][gi], v, __ATOMIC_RELEASE);
    return v > 0;
}

static void (*cluster_for(int G))(dec_params, int *)
{
    return G == 1 ? k_decode_cluster<1> : G == 2 ? k_decode_cluster<2> : G == 4 ? k_decode_cluster<4> : k_decode_cluster<8>;
}

static int ring_setup();

/* A launch of the cluster form: clusters of GPU_DECODE_CLUSTER blocks along y, the tile ring's
 * shared memory, PDL when asked (at: room for two attributes). */
static void cluster_config(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *at, dim3 grid,
                           cudaStream_t s, int pdl)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->gridDim = grid;
    cfg->blockDim = D2_THREADS;
    cfg->dynamicSmemBytes = D2_RING_BYTES;
    cfg->stream = s;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1;
    at[0].val.clusterDim.y = GPU_DECODE_CLUSTER;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg->attrs = at;
    cfg->numAttrs = pdl ? 2 : 1;
}

/* Whether this GPU runs the cluster form for the model's group (clusters of 16 blocks are a
 * Hopper feature beyond the portable 8: allowed per kernel, then checked for residency). */
int gpu_attn_decode_cluster_ok(const gpu_dims *d)
{
    if (d->hd != D2_HD) return 0;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9) {
        cudaGetLastError();
        return 0;
    }
    const int G = gpu_decode_heads_per_block(d->n_heads / d->n_kv);
    void (*k)(dec_params, int *) = cluster_for(G);
    if (cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        ring_setup() != ACCEL_OK) {
        cudaGetLastError();
        return 0;
    }
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[2];
    cluster_config(&cfg, at, dim3(d->n_kv, GPU_DECODE_CLUSTER, 1), 0, 0);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, k, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

/* The one-kernel forms take D2_RING_BYTES of dynamic shared memory (their tile ring): above the
 * default 48 KB, so allowed once per kernel. */
static int ring_allow(void (*k)(dec_params, int *), int bytes = D2_RING_BYTES)
{
    GPU_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return ACCEL_OK;
}

/* k_decode_fast's dynamic shared memory: the tile ring, or more where the merge's staging of a
 * row's partials (G heads x splits ranges x D2_HD floats: 67.6 KB for 4 heads and 33 ranges)
 * then fits in one piece (d2_merge_staged; two blocks per SM still fit at 4 heads); at most
 * D2_MERGE_SMEM_MAX (beyond it the merge takes pieces). */
#define D2_MERGE_SMEM_MAX (96 * 1024)
static size_t d2_merge_smem(int G, int splits)
{
    const size_t need = (size_t)G * splits * D2_HD * sizeof(float);
    return need <= D2_RING_BYTES ? D2_RING_BYTES : need <= D2_MERGE_SMEM_MAX ? need : D2_RING_BYTES;
}

/* Per device (the attribute is the current device's): a bit per device index set once done. */
static int ring_setup()
{
    static unsigned long long done;
    int dev = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    const unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (bit && (__atomic_load_n(&done, __ATOMIC_ACQUIRE) & bit)) return ACCEL_OK;
    GPU_TRY(ring_allow(k_decode_fast<1>, D2_MERGE_SMEM_MAX));
    GPU_TRY(ring_allow(k_decode_fast<2>, D2_MERGE_SMEM_MAX));
    GPU_TRY(ring_allow(k_decode_fast<4>, D2_MERGE_SMEM_MAX));
    GPU_TRY(ring_allow(k_decode_fast<8>, D2_MERGE_SMEM_MAX));
    GPU_TRY(ring_allow(k_decode_cluster<1>));
    GPU_TRY(ring_allow(k_decode_cluster<2>));
    GPU_TRY(ring_allow(k_decode_cluster<4>));
    GPU_TRY(ring_allow(k_decode_cluster<8>));
    if (bit) __atomic_fetch_or(&done, bit, __ATOMIC_RELEASE);
    return ACCEL_OK;
}

static int launch_cluster(cudaStream_t s, int pdl, const dec_params &p, int T, int G, int *cnt)
{
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[2];
    cluster_config(&cfg, at, dim3(p.n_kv * p.gslices, GPU_DECODE_CLUSTER, T), s, pdl);
    GPU_CHECK(cudaLaunchKernelEx(&cfg, cluster_for(G), p, cnt));
    return ACCEL_OK;
}

/* Ranges per row at most: enough blocks to fill the GPU DECODE_FILL times over when the rows are
 * long. Two blocks of k_decode_fast fit on an SM for groups of up to 4 heads, so 2 is one resident
 * wave: more ranges only add merge work, fewer leave SMs idle (gpu/KERNELS.md). */
#define DECODE_FILL 2
static int n_splits(const gpu_dims *d, int sms, int T)
{
    const int fill = DECODE_FILL;
    int G = gpu_decode_heads_per_block(d->n_heads / d->n_kv);
    int gslices = (d->n_heads / d->n_kv + G - 1) / G;
    long units = (long)T * d->n_kv * gslices;
    long want = ((long)fill * sms + units - 1) / units;
    if (want > GPU_DECODE_SPLIT_MAX) want = GPU_DECODE_SPLIT_MAX;
    return want < 1 ? 1 : (int)want;
}

int gpu_attn_decode_rows_ok(const gpu_dims *d, int sms, int T)
{
    const int G = gpu_decode_heads_per_block(d->n_heads / d->n_kv);
    return d->hd == D2_HD && T >= 1 && T <= 65535 && n_splits(d, sms, T) == 1 && rows_ok(G);
}

size_t gpu_attn_decode_slots(const gpu_dims *d, int sms, int n_tokens)
{
    return (size_t)n_tokens * d->n_heads * n_splits(d, sms, n_tokens);
}

template <int HDP, int G> static int launch(cudaStream_t s, int pdl, const dec_params &p, int T)
{
    dim3 grid(p.n_kv * p.gslices, p.splits, T);
    GPU_CHECK(gpu_launch(k_decode_split<HDP, G>, grid, DEC_THREADS, 0, s, pdl, p));
    return ACCEL_OK;
}

template <int HDP> static int launch_g(cudaStream_t s, int pdl, const dec_params &p, int T, int G)
{
    switch (G) {
    case 1: return launch<HDP, 1>(s, pdl, p, T);
    case 2: return launch<HDP, 2>(s, pdl, p, T);
    case 4: return launch<HDP, 4>(s, pdl, p, T);
    case 8: return launch<HDP, 8>(s, pdl, p, T);
    }
    return ACCEL_ERR_UNSUPPORTED;
}

int gpu_attn_decode(cudaStream_t s, int pdl, int one_row, int cluster, const gpu_dims *d, int sms,
                    int layer, int T, const h16 *q, const int *seq_idx, const int *pos,
                    const gpu_seq_dev *seqs, float *part_o, float2 *part_ml, int *part_cnt, h16 *out,
                    unsigned long long *tr, unsigned long long *btr, int mma, int rows)
{
    if (T <= 0) return ACCEL_OK;
    if (T > 65535) return ACCEL_ERR_INVALID; /* grid.z bound */
    dec_params p;
    p.q = q;
    p.seq_idx = seq_idx;
    p.pos = pos;
    p.seqs = seqs;
    p.part_o = part_o;
    p.part_ml = part_ml;
    p.layer = layer;
    p.n_kv = d->n_kv;
    p.n_heads = d->n_heads;
    p.group = d->n_heads / d->n_kv;
    p.hd = d->hd;
    p.qd = d->qd;
    p.window = d->window;
    int G = gpu_decode_heads_per_block(p.group);
    p.gslices = (p.group + G - 1) / G;
    p.splits = n_splits(d, sms, T);
    p.scale_log2 = (float)(1.4426950408889634 / sqrt((double)d->hd));
    p.out = out;
    p.early = pdl && one_row;
    p.tr = tr;
    p.btr = btr;
    p.mma = mma && d->hd == D2_HD;
    if (d->hd == D2_HD) GPU_TRY(ring_setup());
    if (cluster && d->hd == D2_HD && T <= 65535) {
        p.splits = GPU_DECODE_CLUSTER;
        return launch_cluster(s, pdl, p, T, G, part_cnt);
    }
    if (rows && p.mma && p.splits == 1 && rows_ok(G)) {
        GPU_CHECK(gpu_launch(rows_for(G), dim3(p.n_kv * p.gslices, 1, T), D2_THREADS, D2R_RING_BYTES, s,
                             pdl, p));
        return ACCEL_OK;
    }
    if (part_cnt && d->hd == D2_HD && T <= GPU_MAX_BATCH) {
        dim3 grid(p.n_kv * p.gslices, p.splits, T);
        void (*k)(dec_params, int *) = G == 1   ? k_decode_fast<1>
                                       : G == 2 ? k_decode_fast<2>
                                       : G == 4 ? k_decode_fast<4>
                                                : k_decode_fast<8>;
        GPU_CHECK(gpu_launch(k, grid, D2_THREADS, d2_merge_smem(G, p.splits), s, pdl, p, part_cnt));
        return ACCEL_OK;
    }
    int st = ACCEL_ERR_UNSUPPORTED;
    switch (d->hdp) {
    case 16: st = launch_g<16>(s, pdl, p, T, G); break;
    case 32: st = launch_g<32>(s, pdl, p, T, G); break;
    case 64: st = launch_g<64>(s, pdl, p, T, G); break;
    case 128: st = launch_g<128>(s, pdl, p, T, G); break;
    }
    if (st) return st;
    GPU_CHECK(gpu_launch(k_decode_merge, dim3(d->n_heads, T), 128, 0, s, pdl, (const float *)part_o,
                         (const float2 *)part_ml, pos, d->window, p.splits, d->n_heads, d->hd,
                         d->hdp, d->qd, out));
    return ACCEL_OK;
}
