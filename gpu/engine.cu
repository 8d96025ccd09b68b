/* gpu/engine.cu — opening a GPU for a model: the device, streams, cuBLAS, weights (weights.cu),
 * workspaces and events; the KV budget; per-sequence KV caches; error reporting. */
#include "gpu/engine.cuh"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* cuBLAS's recommended workspace on Hopper (cuBLAS docs, cublasSetWorkspace: 32 MiB). */
#define BLAS_WS_BYTES (32u << 20)
/* Device memory left out of the KV budget: cuBLAS/driver allocations after start-up, the CUDA
 * context's growth, fragmentation of per-sequence allocations. */
#define MARGIN_FIXED (512ull << 20)
#define MARGIN_FRACTION 0.02

int gpu_cuda_status(cudaError_t err, const char *what, const char *file, int line)
{
    fprintf(stderr, "tandem cuda: %s:%d: %s: %s\n", file, line, what, cudaGetErrorString(err));
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* allocation failures are not sticky: clear it */
        return ACCEL_ERR_NOMEM;
    }
    return ACCEL_ERR_DEVICE;
}

int gpu_cublas_status(cublasStatus_t st, const char *what, const char *file, int line)
{
    fprintf(stderr, "tandem cuda: %s:%d: %s: cuBLAS status %d\n", file, line, what, (int)st);
    return st == CUBLAS_STATUS_ALLOC_FAILED ? ACCEL_ERR_NOMEM : ACCEL_ERR_DEVICE;
}

size_t gpu_export_slot_bytes(const gpu_dims *d, enum proto_kv_dtype t, int T)
{
    return 2 * proto_kv_value_bytes(t, T, d->n_kv, d->hd) +
           2 * proto_kv_scale_count(t, T, d->n_kv, d->hd) * sizeof(uint16_t);
}

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Activation bytes per token of one forward pass (the buffers of engine.cuh's workspace). */
static size_t ws_bytes_per_token(const gpu_dims *d)
{
    return (size_t)d->H * (4 + 2) + (size_t)d->qkv * 4 + (size_t)d->qd * 2 * 2 +
           (size_t)d->I * 2 * 3 + (size_t)(d->hd / 2) * 8 +
           gpu_export_slot_bytes(d, PROTO_KV_INT8, 1) * GPU_EXPORT_RING + 16;
}

template <typename T> static int dev_alloc(T **p, size_t n)
{
    GPU_CHECK(cudaMalloc((void **)p, n * sizeof(T)));
    return ACCEL_OK;
}

static int alloc_workspace(gpu_engine *e)
{
    const gpu_dims &d = e->d;
    size_t T = e->t_max;
    GPU_TRY(dev_alloc(&e->x, T * d.H));
    GPU_TRY(dev_alloc(&e->xb, T * d.H));
    GPU_TRY(dev_alloc(&e->qkv, T * d.qkv));
    GPU_TRY(dev_alloc(&e->q, T * d.qd));
    GPU_TRY(dev_alloc(&e->att, T * d.qd));
    GPU_TRY(dev_alloc(&e->gu, T * 2 * d.I));
    GPU_TRY(dev_alloc(&e->h, T * d.I));
    GPU_TRY(dev_alloc(&e->rope, T * (d.hd / 2)));
    GPU_TRY(dev_alloc(&e->xn, (size_t)GPU_LOGIT_ROWS * d.H));
    GPU_TRY(dev_alloc(&e->logits, (size_t)GPU_LOGIT_ROWS * d.V));
    GPU_TRY(dev_alloc(&e->argmax_d, (size_t)GPU_MAX_BATCH));
    GPU_CHECK(cudaHostAlloc((void **)&e->argmax_h, GPU_MAX_BATCH * sizeof(int32_t), cudaHostAllocDefault));
    /* split-K partials: the most any decode batch (or small prefill chunk) needs */
    size_t slots = 0;
    for (int n = 1; n <= GPU_MAX_BATCH; n++) {
        size_t s = gpu_attn_decode_slots(&d, e->sms, n);
        if (s > slots) slots = s;
    }
    /* and the key splits of a short prefill chunk (attn_prefill_ws.cu), in the same buffers */
    if (d.hdp == 128 && slots < gpu_attn_split_rows(e->sms)) slots = gpu_attn_split_rows(e->sms);
    e->part_slots = slots;
    GPU_TRY(dev_alloc(&e->part_o, slots * d.hdp));
    GPU_TRY(dev_alloc(&e->part_ml, slots));
    if (!e->tune.decode_two) { /* the one-kernel decode attention's arrival counters */
        GPU_TRY(dev_alloc(&e->part_cnt, (size_t)GPU_MAX_BATCH * d.n_heads));
        GPU_CHECK(cudaMemset(e->part_cnt, 0, (size_t)GPU_MAX_BATCH * d.n_heads * sizeof(int)));
    }
    /* per-call metadata */
    gpu_meta_layout &ml = e->ml;
    size_t off = 0;
    ml.ids = off, off = align16(off + T * sizeof(int));
    ml.pos = off, off = align16(off + T * sizeof(int));
    ml.seq = off, off = align16(off + T * sizeof(int));
    ml.tbl = off, off = align16(off + T * sizeof(int));
    ml.rows = off, off = align16(off + GPU_LOGIT_ROWS * sizeof(int));
    ml.seqs = off, off = align16(off + GPU_MAX_BATCH * sizeof(gpu_seq_dev));
    ml.inv = off, off = align16(off + (size_t)(GPU_MAX_BATCH + 1) * (d.hd / 2) * sizeof(float));
    ml.bytes = off;
    GPU_CHECK(cudaMallocHost((void **)&e->meta_h, ml.bytes));
    GPU_TRY(dev_alloc(&e->meta_d, ml.bytes));
    /* export ring */
    e->exp_slot_bytes = gpu_export_slot_bytes(&d, PROTO_KV_INT8, e->t_max);
    size_t s4 = gpu_export_slot_bytes(&d, PROTO_KV_INT4, e->t_max);
    if (s4 > e->exp_slot_bytes) e->exp_slot_bytes = s4;
    for (int i = 0; i < GPU_EXPORT_RING; i++) GPU_TRY(dev_alloc(&e->exp_d[i], e->exp_slot_bytes));
    /* events: per layer, for the export pipeline; copy events are timed (export statistics) and
     * block the host thread instead of spinning when it waits on them */
    e->ev_quant = (cudaEvent_t *)calloc(d.L, sizeof(cudaEvent_t));
    e->ev_copy0 = (cudaEvent_t *)calloc(d.L, sizeof(cudaEvent_t));
    e->ev_copy1 = (cudaEvent_t *)calloc(d.L, sizeof(cudaEvent_t));
    if (!e->ev_quant || !e->ev_copy0 || !e->ev_copy1) return ACCEL_ERR_NOMEM;
    for (int l = 0; l < d.L; l++) {
        GPU_CHECK(cudaEventCreateWithFlags(&e->ev_quant[l], cudaEventDisableTiming));
        GPU_CHECK(cudaEventCreateWithFlags(&e->ev_copy0[l], cudaEventBlockingSync));
        GPU_CHECK(cudaEventCreateWithFlags(&e->ev_copy1[l], cudaEventBlockingSync));
    }
    GPU_CHECK(cudaEventCreate(&e->ev_t0));
    GPU_CHECK(cudaEventCreate(&e->ev_t1));
    GPU_CHECK(cudaMallocHost((void **)&e->nnz_h, (size_t)d.L * sizeof(int)));
    return ACCEL_OK;
}

/* Checks the model against what the kernels cover; 0 or -1 with a message. */
static int check_shape(const model_config *c, int index, char *err, size_t errlen)
{
    if (c->head_dim % 8 || c->head_dim > 128) {
        snprintf(err, errlen, "cuda:%d: head_dim %d not supported (multiples of 8 up to 128)",
                 index, c->head_dim);
        return -1;
    }
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads) {
        snprintf(err, errlen, "cuda:%d: %d heads over %d KV heads", index, c->n_heads,
                 c->n_kv_heads);
        return -1;
    }
    return 0;
}

static void set_dims(gpu_dims &d, const model_config *c)
{
    d.H = c->hidden;
    d.L = c->n_layers;
    d.n_heads = c->n_heads;
    d.n_kv = c->n_kv_heads;
    d.hd = c->head_dim;
    d.I = c->intermediate;
    d.V = c->vocab;
    d.qd = d.n_heads * d.hd;
    d.kvd = d.n_kv * d.hd;
    d.qkv = d.qd + 2 * d.kvd;
    d.hdp = d.hd <= 16 ? 16 : d.hd <= 32 ? 32 : d.hd <= 64 ? 64 : 128;
    d.window = c->sliding_window;
    d.eps = c->rms_eps;
}

/* Which kernels run, from the settings and what this GPU and model have (gpu/KERNELS.md has the
 * table and the measurements behind each default). */
static int pick_kernels(gpu_engine *e, const cudaDeviceProp &prop)
{
    const gpu_tuning &t = e->tune;
    const gpu_dims &d = e->d;
    /* single-token projections: our GEMV (one warp per row streams the weights at copy bandwidth,
     * where cuBLAS's T = 1 kernels do not), and around it the fused QKV and gate/up kernels,
     * which stream with the GEMV's loop (so off with it) */
    e->gemv_off = !t.gemv;
    e->fused = t.gemv && t.fused && gpu_fused_ok(&d);
    /* programmatic dependent launch (engine.cuh): each decode kernel's first weight loads go out
     * before it waits for the kernel before, so HBM keeps streaming across kernel boundaries */
    e->pdl = prop.major >= 9 && t.pdl;
    e->graphs_off = !t.graphs;
    /* prefill attention: on Hopper with head_dim 128 the warp-specialized wgmma kernel
     * (attn_prefill_ws.cu), elsewhere mma.sync with 4 warps per block */
    e->fa_warps = t.attn == GPU_ATTN_MMA8 ? 8 : 4;
    e->sparse_warps = t.sparse_attn == GPU_ATTN_MMA8 ? 8 : t.sparse_attn == GPU_ATTN_MMA4 ? 4 : 0;
    if (t.attn == GPU_ATTN_AUTO ? d.hd == 128 : t.attn == GPU_ATTN_WGMMA && d.hd <= 128) {
        int av = gpu_attn_sm90_available(e->index);
        if (av < 0) return av;
        e->sm90 = av;
    }
    /* block-sparse attention on the dense one's kernel where that is the ws kernel */
    e->sparse_ws = e->sm90 && d.hd == 128 && !e->sparse_warps;
    /* decode attention: one kernel whose last range block merges (the two-kernel form, split +
     * merge, with decode_attn=two); for short rows of one sequence its cluster form (the ranges
     * merged through distributed shared memory: three round trips instead of six) */
    e->dec_cluster = t.decode_cluster > 0 && gpu_attn_decode_cluster_ok(&d);
    e->dec_cluster_max = t.decode_cluster;
    /* its ranges on the tensor cores: the scalar body is bound by instruction issue */
    e->dec_mma = t.decode_mma;
    /* batches whose rows are one range each: the rows form (a deeper ring, no merge) */
    e->dec_rows = t.decode_rows;
    /* a batched step's logits copied chunk by chunk while the lm_head computes the next */
    e->logits_chunks = t.logits_chunks;
    /* greedy tokens picked on the device, only the logits rows asked for copied (forward.cu) */
    e->argmax = t.argmax;
    /* prefill's last layer past its K/V only for the rows the logits read (forward.cu) */
    e->prune_off = !t.prune;
    return ACCEL_OK;
}

/* The lab's traces (profile=1, chain_trace=1): their events and device buffers. */
static int open_traces(gpu_engine *e)
{
    e->ctrace_n = -1;
    if (e->tune.chain_trace) {
        const size_t cb = GPU_CHAIN_STAMPS * sizeof(unsigned long long) * GPU_CHAIN_SLOTS;
        const size_t ab = (size_t)e->d.L * GPU_ATRACE_BLOCKS * GPU_ATRACE_STAMPS * sizeof(unsigned long long);
        GPU_CHECK(cudaMalloc((void **)&e->ctrace, cb));
        GPU_CHECK(cudaMemset(e->ctrace, 0, cb));
        GPU_CHECK(cudaMalloc((void **)&e->atrace, ab));
        GPU_CHECK(cudaMemset(e->atrace, 0, ab));
        for (int k = 0; k < 4; k++) GPU_CHECK(cudaEventCreate(&e->tev[k]));
    }
    if (e->tune.profile) {
        e->prof = 1;
        e->graphs_off = 1; /* events between the ops of a step */
        e->prof_ev = (cudaEvent_t *)calloc(GPU_PROF_EVENTS, sizeof(cudaEvent_t));
        if (!e->prof_ev) return ACCEL_ERR_NOMEM;
        for (int i = 0; i < GPU_PROF_EVENTS; i++) GPU_CHECK(cudaEventCreate(&e->prof_ev[i]));
    }
    return ACCEL_OK;
}

/* The streams and cuBLAS: float32 accumulation without reduced-precision reductions (the
 * numerics engine.cuh states). */
static int open_streams(gpu_engine *e)
{
    GPU_CHECK(cudaStreamCreateWithFlags(&e->compute, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamCreateWithFlags(&e->copy, cudaStreamNonBlocking));
    GPU_CUBLAS(cublasCreate(&e->blas));
    GPU_CUBLAS(cublasSetStream(e->blas, e->compute));
    GPU_CUBLAS(cublasSetMathMode(
        e->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    GPU_CHECK(cudaMalloc(&e->blas_ws, BLAS_WS_BYTES));
    e->blas_ws_bytes = BLAS_WS_BYTES;
    GPU_CUBLAS(cublasSetWorkspace(e->blas, e->blas_ws, e->blas_ws_bytes));
    for (int i = 0; i < (int)(sizeof e->lg_ev / sizeof e->lg_ev[0]); i++)
        GPU_CHECK(cudaEventCreateWithFlags(&e->lg_ev[i], cudaEventDisableTiming));
    return ACCEL_OK;
}

static int open_device(gpu_engine *e, uint64_t mem_limit, char *err, size_t errlen)
{
    const model_config *c = &e->m->cfg;
    gpu_dims &d = e->d;
    set_dims(d, c);
    cudaDeviceProp prop;
    GPU_CHECK(cudaGetDeviceProperties(&prop, e->index));
    e->sms = prop.multiProcessorCount;
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, e->index) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, e->index) != cudaSuccess)
        mem_khz = bus_bits = 0, (void)cudaGetLastError();
    e->mem_bps = gpu_mem_bps(mem_khz, bus_bits);
    snprintf(e->desc, sizeof e->desc, "%s, %d SMs, %.0f GB, %.2f TB/s, " GPU_H16_NAME, prop.name,
             e->sms, prop.totalGlobalMem / 1e9, e->mem_bps / 1e12);
    GPU_TRY(pick_kernels(e, prop));
    e->dec_graph = (cudaGraphExec_t *)calloc(3 * (GPU_MAX_BATCH + 1), sizeof(cudaGraphExec_t));
    if (!e->dec_graph) return ACCEL_ERR_NOMEM;
    GPU_TRY(open_traces(e));
    GPU_TRY(open_streams(e));
    e->inv_freq0 = (float *)malloc(sizeof(float) * (d.hd / 2));
    if (!e->inv_freq0) return ACCEL_ERR_NOMEM;
    model_rope_inv_freq(c, 0, e->inv_freq0);
    GPU_TRY(gpu_weights_upload(e, err, errlen));

    /* workspace: chunk tokens per pass, fewer when that would take over a quarter of what is
     * left after the weights */
    size_t free_b, total_b;
    GPU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t per_tok = ws_bytes_per_token(&d);
    e->t_max = e->tune.chunk;
    while (e->t_max > GPU_MAX_BATCH && (size_t)e->t_max * per_tok > free_b / 4) e->t_max /= 2;
    int st = alloc_workspace(e);
    if (st) {
        snprintf(err, errlen, "cuda:%d: workspace allocation failed", e->index);
        return st;
    }
    if (gpu_lab_open && (st = gpu_lab_open(e))) {
        snprintf(err, errlen, "cuda:%d: lab set-up failed", e->index);
        return st;
    }
    if ((st = gpu_gemm_tune_open(e))) {
        snprintf(err, errlen, "cuda:%d: GEMM tuning failed: %s", e->index, accel_strerror(st));
        return st;
    }

    /* KV budget: what is free now, less a margin */
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    uint64_t margin = MARGIN_FIXED + (uint64_t)(MARGIN_FRACTION * (double)total_b);
    e->kv_budget = free_b > margin ? free_b - margin : 0;
    if (mem_limit && mem_limit < e->kv_budget) e->kv_budget = mem_limit;
    e->kv_per_token = 2ull * d.L * d.kvd * sizeof(h16);
    /* the paged pool over that budget (gpu/kv_pool.cu): ids for all of it, memory as it grows */
    return gpu_pool_open(e);
}

gpu_engine *gpu_engine_new(int index, const model *m, uint64_t mem_limit, const gpu_tuning *t,
                           char *err, size_t errlen)
{
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        snprintf(err, errlen, "cuda:%d: no CUDA device (%s)", index,
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
        return NULL;
    }
    if (index < 0 || index >= count) {
        snprintf(err, errlen, "cuda:%d: no such device (%d present)", index, count);
        return NULL;
    }
    if (check_shape(&m->cfg, index, err, errlen)) return NULL;
    if (cudaSetDevice(index) != cudaSuccess) {
        snprintf(err, errlen, "cuda:%d: cannot select the device", index);
        return NULL;
    }
    gpu_engine *e = (gpu_engine *)calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "cuda:%d: out of host memory", index);
        return NULL;
    }
    e->index = index;
    e->m = m;
    if (t) e->tune = *t;
    else gpu_tuning_default(&e->tune);
    err[0] = 0;
    int st = open_device(e, mem_limit, err, errlen);
    if (st) {
        if (!err[0])
            snprintf(err, errlen, "cuda:%d: start-up failed: %s", index, accel_strerror(st));
        gpu_engine_free(e);
        return NULL;
    }
    return e;
}

void gpu_engine_free(gpu_engine *e)
{
    if (!e) return;
    cudaSetDevice(e->index);
    if (e->compute) cudaStreamSynchronize(e->compute);
    if (e->copy) cudaStreamSynchronize(e->copy);
    if (e->prof) gpu_prof_report(e);
    gpu_chain_report(e);
    if (e->lab && gpu_lab_free) gpu_lab_free(e);
    for (int k = 0; e->ctrace && k < 4; k++)
        if (e->tev[k]) cudaEventDestroy(e->tev[k]);
    for (int i = 0; e->prof_ev && i < GPU_PROF_EVENTS; i++)
        if (e->prof_ev[i]) cudaEventDestroy(e->prof_ev[i]);
    free(e->prof_ev);
    for (int n = 0; e->dec_graph && n < 3 * (GPU_MAX_BATCH + 1); n++)
        if (e->dec_graph[n]) cudaGraphExecDestroy(e->dec_graph[n]);
    free(e->dec_graph);
    gpu_gemm_tune_free(e);
    gpu_kv_loads_free(e);
    gpu_weights_free(e);
    gpu_tls_close(e);
    gpu_pool_close(e);
    void *bufs[] = {e->x, e->xb, e->qkv, e->q, e->att, e->gu, e->h, e->rope,
                    e->xn, e->logits, e->part_o, e->part_ml, e->part_cnt, e->meta_d, e->imp_d, e->blas_ws,
                    e->ctrace, e->atrace, e->argmax_d};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    for (int i = 0; i < GPU_EXPORT_RING; i++) cudaFree(e->exp_d[i]);
    if (e->meta_h) cudaFreeHost(e->meta_h);
    if (e->exp_h) cudaFreeHost(e->exp_h);
    if (e->logits_h) cudaFreeHost(e->logits_h);
    if (e->argmax_h) cudaFreeHost(e->argmax_h);
    if (e->nnz_h) cudaFreeHost(e->nnz_h);
    for (int l = 0; l < e->d.L; l++) {
        if (e->ev_quant && e->ev_quant[l]) cudaEventDestroy(e->ev_quant[l]);
        if (e->ev_copy0 && e->ev_copy0[l]) cudaEventDestroy(e->ev_copy0[l]);
        if (e->ev_copy1 && e->ev_copy1[l]) cudaEventDestroy(e->ev_copy1[l]);
    }
    free(e->ev_quant);
    free(e->ev_copy0);
    free(e->ev_copy1);
    if (e->ev_t0) cudaEventDestroy(e->ev_t0);
    if (e->ev_t1) cudaEventDestroy(e->ev_t1);
    for (int i = 0; i < (int)(sizeof e->lg_ev / sizeof e->lg_ev[0]); i++)
        if (e->lg_ev[i]) cudaEventDestroy(e->lg_ev[i]);
    if (e->blas) cublasDestroy(e->blas);
    if (e->compute) cudaStreamDestroy(e->compute);
    if (e->copy) cudaStreamDestroy(e->copy);
    free(e->inv_freq0);
    free(e);
}

const char *gpu_engine_desc(const gpu_engine *e)
{
    return e->desc;
}

double gpu_engine_mem_bps(const gpu_engine *e)
{
    return e->mem_bps;
}

uint64_t gpu_engine_kv_budget(const gpu_engine *e)
{
    return e->kv_budget;
}

uint64_t gpu_engine_kv_bytes_per_token(const gpu_engine *e)
{
    return e->kv_per_token;
}

void gpu_engine_export_stats(const gpu_engine *e, gpu_export_stats *out)
{
    *out = e->stats;
}

void *gpu_host_alloc(gpu_engine *e, size_t bytes)
{
    void *p = NULL;
    /* portable: page-locked for every device's context, not only this one's */
    if (cudaSetDevice(e->index) != cudaSuccess || cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller sees NULL */
        return NULL;
    }
    return p;
}

void gpu_host_free(gpu_engine *e, void *p)
{
    if (!p) return;
    cudaSetDevice(e->index);
    gpu_kv_loads_settle(e); /* a queued host-tier load may read it (kv_xfer.cu) */
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

int gpu_engine_sync(gpu_engine *e)
{
    GPU_CHECK(cudaSetDevice(e->index));
    GPU_TRY(gpu_kv_loads_settle(e));
    GPU_CHECK(cudaStreamSynchronize(e->compute));
    GPU_CHECK(cudaStreamSynchronize(e->copy));
    return ACCEL_OK;
}
