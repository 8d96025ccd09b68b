/* gpu/kv_xfer.cu — KV in and out of the cache: the layer-by-layer export (of a prefill's new
 * positions, and of positions a sequence already holds), the import of quantized KV, and the host
 * tier's block loads.
 *
 * Export, per layer l (design: the host never waits for the GPU inside the layer loop, except to
 * stay at most GPU_EXPORT_AHEAD layers ahead of the copies, which leaves that many layers of work
 * queued so the GPU never idles):
 *   compute stream:  the layer's K, V in the cache -> quantize (from the cache: h16 values, read
 *                    through the block table) into device slot l % RING -> event Q[l] (before
 *                    reusing a slot it waits for the copy of layer l - RING: a GPU-side wait,
 *                    cudaStreamWaitEvent)
 *   copy stream:     waits Q[l] -> event C0[l] -> async copy to pinned host slot l -> event C1[l]
 *   host:            after queuing layer l, calls the sink for every layer whose C1 has completed
 *                    (cudaEventQuery, no blocking), in layer order; blocks on C1[l - AHEAD] only
 *                    if that copy is still running; after the last layer, drains the rest.
 * The host buffer holds every layer of a run, so nothing is overwritten before its sink call;
 * between runs the export is fully drained. A prefill exports its passes as it computes them
 * (forward.cu); gpu_kv_export exports held positions in runs of t_max with the same kernels, so
 * both give the same bytes (the quantizer reads the cache either way).
 *
 * Host-tier loads: gpu_kv_block_load takes the block (its table entry uploaded) and queues the
 * copy from host memory without making it. The next entry of the engine makes it: a prefill of the
 * same sequence overlaps it with its own work — layer l's K and V rows of every loaded block
 * (two strided copies per run of consecutive blocks from consecutive host memory) go over PCIe on
 * the copy stream while earlier layers compute, and layer l's compute waits for them only (an
 * event per layer) — and every other entry copies them whole and waits (gpu_kv_loads_settle),
 * as does gpu_host_free (the host memory must outlive the copy). */
#include "gpu/engine.cuh"
#include "gpu/tls.cuh" /* an offloaded sequence (gpu/tls_off.cu) */
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- export */

void gpu_export_init(gpu_export_run *x, const gpu_engine *e, const gpu_kv *kv,
                     const accel_kv_sink *sink, enum proto_kv_dtype dt, int T, int pos0)
{
    const gpu_dims &d = e->d;
    memset(x, 0, sizeof *x);
    x->sink = sink;
    x->sq = gpu_kv_seq_dev(e, kv);
    x->dt = dt;
    x->T = T;
    x->pos0 = pos0;
    x->vb = proto_kv_value_bytes(dt, T, d.n_kv, d.hd);
    x->sc = proto_kv_scale_count(dt, T, d.n_kv, d.hd) * sizeof(uint16_t);
    x->used = 2 * x->vb + 2 * x->sc;
    x->vb1 = proto_kv_value_bytes(dt, 1, d.n_kv, d.hd);
    x->sc1 = proto_kv_scale_count(dt, 1, d.n_kv, d.hd) * sizeof(uint16_t);
}

static unsigned char *export_dev_slot(gpu_engine *e, const gpu_export_run *x, int l)
{
    return x->dslot[0] ? x->dslot[l % GPU_EXPORT_RING] : e->exp_d[l % GPU_EXPORT_RING];
}

static unsigned char *export_host_slot(gpu_engine *e, const gpu_export_run *x, int l)
{
    return e->exp_h + (size_t)(x->host_ring ? l % x->host_ring : l) * x->used;
}

int gpu_export_quantize(gpu_engine *e, gpu_export_run *x, int l, int c0, int T)
{
    const gpu_dims &d = e->d;
    cudaStream_t s = e->compute;
    unsigned char *slot = export_dev_slot(e, x, l);
    if (c0 == 0 && l >= GPU_EXPORT_RING)
        GPU_CHECK(cudaStreamWaitEvent(s, e->ev_copy1[l - GPU_EXPORT_RING], 0));
    const size_t vo = (size_t)c0 * x->vb1, so = (size_t)c0 * x->sc1;
    const gpu_seq_dev &q = x->sq;
    const size_t off = (size_t)l * d.n_kv * q.cap * d.hd;
    const int p = x->pos0 + c0;
    GPU_TRY(gpu_kv_quantize_cache(s, x->dt, q.k + off, q.cap, &q.map, p, T, d.n_kv, d.hd,
                                  slot + vo, (unsigned short *)(slot + 2 * x->vb + so)));
    GPU_TRY(gpu_kv_quantize_cache(s, x->dt, q.v + off, q.cap, &q.map, p, T, d.n_kv, d.hd,
                                  slot + x->vb + vo,
                                  (unsigned short *)(slot + 2 * x->vb + x->sc + so)));
    return ACCEL_OK;
}

int gpu_export_copy(gpu_engine *e, gpu_export_run *x, int l)
{
    GPU_CHECK(cudaEventRecord(e->ev_quant[l], e->compute));
    GPU_CHECK(cudaStreamWaitEvent(e->copy, e->ev_quant[l], 0));
    GPU_CHECK(cudaEventRecord(e->ev_copy0[l], e->copy));
    GPU_CHECK(cudaMemcpyAsync(export_host_slot(e, x, l), export_dev_slot(e, x, l), x->used,
                              cudaMemcpyDeviceToHost, e->copy));
    GPU_CHECK(cudaEventRecord(e->ev_copy1[l], e->copy));
    return ACCEL_OK;
}

int gpu_export_enqueue(gpu_engine *e, gpu_export_run *x, int l)
{
    GPU_TRY(gpu_export_quantize(e, x, l, 0, x->T));
    return gpu_export_copy(e, x, l);
}

static int export_deliver_one(gpu_engine *e, gpu_export_run *x)
{
    const int l = x->next;
    const unsigned char *hp = export_host_slot(e, x, l);
    proto_kv_layer c;
    c.layer = l;
    c.pos0 = x->pos0;
    c.n_tokens = x->T;
    c.n_kv_heads = e->d.n_kv;
    c.head_dim = e->d.hd;
    c.dtype = x->dt;
    c.k = hp;
    c.v = hp + x->vb;
    c.k_scale = (const uint16_t *)(hp + 2 * x->vb);
    c.v_scale = (const uint16_t *)(hp + 2 * x->vb + x->sc);
    float ms = 0;
    GPU_CHECK(cudaEventElapsedTime(&ms, e->ev_copy0[l], e->ev_copy1[l]));
    e->stats.copy_ms += ms;
    e->stats.bytes += x->used;
    e->stats.layers++;
    x->next++;
    return x->sink->layer(x->sink->ctx, &c);
}

int gpu_export_poll(gpu_engine *e, gpu_export_run *x, int queued, int drain)
{
    while (x->next <= queued) {
        cudaEvent_t ev = e->ev_copy1[x->next];
        if (drain || x->next <= queued - GPU_EXPORT_AHEAD) {
            GPU_CHECK(cudaEventSynchronize(ev));
        } else {
            cudaError_t q = cudaEventQuery(ev);
            if (q == cudaErrorNotReady) break;
            if (q != cudaSuccess) return gpu_cuda_status(q, "cudaEventQuery", __FILE__, __LINE__);
        }
        int st = export_deliver_one(e, x);
        if (st) return st;
    }
    return ACCEL_OK;
}

int gpu_export_host_grow(gpu_engine *e, size_t bytes)
{
    if (bytes <= e->exp_h_bytes) return ACCEL_OK;
    if (e->exp_h) GPU_CHECK(cudaFreeHost(e->exp_h));
    e->exp_h = NULL;
    e->exp_h_bytes = 0;
    GPU_CHECK(cudaHostAlloc((void **)&e->exp_h, bytes, cudaHostAllocDefault));
    e->exp_h_bytes = bytes;
    return ACCEL_OK;
}

int gpu_finish(gpu_engine *e, int st)
{
    cudaError_t a = cudaStreamSynchronize(e->compute);
    cudaError_t b = cudaStreamSynchronize(e->copy);
    if (a != cudaSuccess) return gpu_cuda_status(a, "cudaStreamSynchronize(compute)", __FILE__, __LINE__);
    if (b != cudaSuccess) return gpu_cuda_status(b, "cudaStreamSynchronize(copy)", __FILE__, __LINE__);
    e->pool.stage_n = 0; /* the table uploads landed: the stage is free (gpu_kv_stage_reset) */
    return st;
}

/* Positions [pos0, pos0 + n) that kv holds, in runs of at most t_max positions. */
int gpu_kv_export(gpu_engine *e, gpu_kv *kv, int pos0, int n, const accel_kv_sink *sink,
                  enum proto_kv_dtype kv_dtype)
{
    const gpu_dims &d = e->d;
    if (!sink || n <= 0 || pos0 < 0 || (long long)pos0 + n > (long long)kv->n * GPU_KV_BLOCK)
        return ACCEL_ERR_INVALID;
    if (kv_dtype != PROTO_KV_INT8 && kv_dtype != PROTO_KV_INT4) return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(e->index));
    GPU_TRY(gpu_kv_loads_settle(e));
    memset(&e->stats, 0, sizeof e->stats);
    const int T0 = n < e->t_max ? n : e->t_max;
    GPU_TRY(gpu_export_host_grow(e, (size_t)d.L * gpu_export_slot_bytes(&d, kv_dtype, T0)));
    for (int done = 0; done < n;) {
        const int T = n - done < T0 ? n - done : T0;
        gpu_export_run xr;
        gpu_export_init(&xr, e, kv, sink, kv_dtype, T, pos0 + done);
        int st = ACCEL_OK;
        for (int l = 0; !st && l < d.L; l++) {
            st = gpu_export_enqueue(e, &xr, l);
            if (!st) st = gpu_export_poll(e, &xr, l, 0);
        }
        if (!st) st = gpu_export_poll(e, &xr, d.L - 1, 1);
        GPU_TRY(gpu_finish(e, st));
        done += T;
    }
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- import */

int gpu_kv_import(gpu_engine *e, gpu_kv *kv, const proto_kv_layer *c)
{
    const gpu_dims &d = e->d;
    if (c->dtype != PROTO_KV_INT8 && c->dtype != PROTO_KV_INT4) return ACCEL_ERR_INVALID;
    if (gpu_kv_offloaded(kv)) return ACCEL_ERR_UNSUPPORTED; /* its KV in host memory (tls_off.cu) */
    if (c->layer < 0 || c->layer >= d.L || c->n_kv_heads != d.n_kv || c->head_dim != d.hd ||
        c->n_tokens <= 0 || c->pos0 < 0 || c->pos0 > kv->cap - c->n_tokens)
        return ACCEL_ERR_INVALID;
    if (!c->k || !c->v || !c->k_scale || !c->v_scale) return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(e->index));
    GPU_TRY(gpu_kv_loads_settle(e));
    GPU_TRY(gpu_kv_stage_reset(e));
    GPU_TRY(gpu_kv_reserve(e, 1, &kv, &c->pos0, &c->n_tokens));
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, d.n_kv, d.hd);
    size_t sc = proto_kv_scale_count(c->dtype, c->n_tokens, d.n_kv, d.hd) * sizeof(uint16_t);
    size_t need = 2 * vb + 2 * sc;
    if (need > e->imp_bytes) {
        if (e->imp_d) GPU_CHECK(cudaFree(e->imp_d));
        e->imp_d = NULL;
        e->imp_bytes = 0;
        GPU_CHECK(cudaMalloc((void **)&e->imp_d, need));
        e->imp_bytes = need;
    }
    unsigned char *b = e->imp_d;
    cudaStream_t s = e->compute;
    GPU_CHECK(cudaMemcpyAsync(b, c->k, vb, cudaMemcpyHostToDevice, s));
    GPU_CHECK(cudaMemcpyAsync(b + vb, c->v, vb, cudaMemcpyHostToDevice, s));
    GPU_CHECK(cudaMemcpyAsync(b + 2 * vb, c->k_scale, sc, cudaMemcpyHostToDevice, s));
    GPU_CHECK(cudaMemcpyAsync(b + 2 * vb + sc, c->v_scale, sc, cudaMemcpyHostToDevice, s));
    gpu_seq_dev sq = gpu_kv_seq_dev(e, kv);
    size_t off = (size_t)c->layer * d.n_kv * sq.cap * d.hd;
    int st = gpu_kv_dequantize(s, c->dtype, b, (const unsigned short *)(b + 2 * vb), c->n_tokens,
                               d.n_kv, d.hd, sq.k + off, sq.cap, c->pos0, &sq.map);
    if (!st)
        st = gpu_kv_dequantize(s, c->dtype, b + vb, (const unsigned short *)(b + 2 * vb + sc),
                               c->n_tokens, d.n_kv, d.hd, sq.v + off, sq.cap, c->pos0, &sq.map);
    return gpu_finish(e, st);
}

/* ---------------------------------------------------------------- host-tier loads */

struct gpu_kv_load {
    gpu_kv *kv;
    int id;                   /* the block it fills */
    const unsigned char *src; /* block_bytes of host memory */
    int alone;                /* copied alone: its run spanned two host allocations */
};

int gpu_kv_block_load(gpu_engine *e, gpu_kv *kv, int pos, const void *src)
{
    if (pos < 0 || pos % GPU_KV_BLOCK || !src) return ACCEL_ERR_INVALID;
    if (gpu_kv_offloaded(kv)) return ACCEL_ERR_UNSUPPORTED;
    GPU_CHECK(cudaSetDevice(e->index));
    if (!e->ev_load) {
        e->ev_load = (cudaEvent_t *)calloc(e->d.L, sizeof(cudaEvent_t));
        if (!e->ev_load) return ACCEL_ERR_NOMEM;
        for (int l = 0; l < e->d.L; l++)
            GPU_CHECK(cudaEventCreateWithFlags(&e->ev_load[l], cudaEventDisableTiming));
    }
    if (e->n_loads == e->loads_cap) {
        int cap = e->loads_cap ? 2 * e->loads_cap : 64;
        gpu_kv_load *l = (gpu_kv_load *)realloc(e->loads, cap * sizeof *l);
        if (!l) return ACCEL_ERR_NOMEM;
        e->loads = l;
        e->loads_cap = cap;
    }
    GPU_TRY(gpu_kv_stage_reset(e));
    const int n = GPU_KV_BLOCK;
    GPU_TRY(gpu_kv_reserve(e, 1, &kv, &pos, &n));
    /* the table upload read the pinned stage, which the next entry reuses */
    GPU_CHECK(cudaStreamSynchronize(e->compute));
    e->pool.stage_n = 0;
    e->loads[e->n_loads++] = gpu_kv_load{kv, kv->blk[pos / GPU_KV_BLOCK], (const unsigned char *)src, 0};
    return ACCEL_OK;
}

/* Loads i.. that continue load i in both memories (consecutive ids, consecutive host blocks). */
static int run_len(const gpu_engine *e, int i)
{
    const size_t bb = e->pool.block_bytes;
    int j = i + 1;
    while (!e->loads[i].alone && j < e->n_loads && !e->loads[j].alone &&
           e->loads[j].id == e->loads[j - 1].id + 1 && e->loads[j].src == e->loads[j - 1].src + bb)
        j++;
    return j - i;
}

/* A copy of r blocks' parts (width bytes at offset off of each) from loads i..; a run whose host
 * blocks are adjacent but lie in two page-locked allocations is refused by the driver (invalid
 * value, not sticky): its blocks are then marked and copied one by one. */
static int load_copy(gpu_engine *e, int i, int r, size_t off, size_t width)
{
    const size_t bb = e->pool.block_bytes;
    char *dst = (char *)e->pool.base + (size_t)e->loads[i].id * bb + off;
    cudaError_t ce = width == bb || r == 1
                         ? cudaMemcpyAsync(dst, e->loads[i].src + off, (size_t)(r - 1) * bb + width,
                                           cudaMemcpyHostToDevice, e->copy)
                         : cudaMemcpy2DAsync(dst, bb, e->loads[i].src + off, bb, width, r,
                                             cudaMemcpyHostToDevice, e->copy);
    if (ce == cudaErrorInvalidValue && r > 1) {
        cudaGetLastError();
        for (int k = i; k < i + r; k++) e->loads[k].alone = 1;
        for (int k = i; k < i + r; k++) GPU_TRY(load_copy(e, k, 1, off, width));
        return ACCEL_OK;
    }
    if (ce != cudaSuccess) return gpu_cuda_status(ce, "cudaMemcpyAsync(load)", __FILE__, __LINE__);
    return ACCEL_OK;
}

int gpu_kv_loads_settle(gpu_engine *e)
{
    if (!e->n_loads) return ACCEL_OK;
    const size_t bb = e->pool.block_bytes;
    int st = ACCEL_OK;
    for (int i = 0, r; !st && i < e->n_loads; i += r) {
        r = run_len(e, i);
        st = load_copy(e, i, r, 0, bb);
    }
    e->n_loads = 0;
    e->load_next = 0;
    cudaError_t ce = cudaStreamSynchronize(e->copy);
    if (ce != cudaSuccess) return gpu_cuda_status(ce, "cudaStreamSynchronize(load)", __FILE__, __LINE__);
    return st;
}

void gpu_kv_loads_drop(gpu_engine *e, const gpu_kv *kv)
{
    int k = 0;
    for (int i = 0; i < e->n_loads; i++)
        if (e->loads[i].kv != kv) e->loads[k++] = e->loads[i];
    e->n_loads = k;
}

int gpu_kv_loads_for(const gpu_engine *e, const gpu_kv *kv)
{
    for (int i = 0; i < e->n_loads; i++)
        if (e->loads[i].kv != kv) return 0;
    return e->n_loads > 0;
}

int gpu_kv_loads_layer(gpu_engine *e, int l)
{
    if (!e->n_loads || l < e->load_next) return ACCEL_OK;
    const gpu_dims &d = e->d;
    /* a block: K of every layer, then V ((2, L, n_kv, GPU_KV_BLOCK, hd) h16) */
    const size_t part = (size_t)d.n_kv * GPU_KV_BLOCK * d.hd * sizeof(h16);
    for (int i = 0, r; i < e->n_loads; i += r) {
        r = run_len(e, i);
        for (int kv = 0; kv < 2; kv++) GPU_TRY(load_copy(e, i, r, ((size_t)kv * d.L + l) * part, part));
    }
    GPU_CHECK(cudaEventRecord(e->ev_load[l], e->copy));
    GPU_CHECK(cudaStreamWaitEvent(e->compute, e->ev_load[l], 0));
    e->load_next = l + 1;
    return ACCEL_OK;
}

int gpu_kv_loads_end(gpu_engine *e)
{
    int st = ACCEL_OK;
    for (int l = e->load_next; !st && l < e->d.L; l++) st = gpu_kv_loads_layer(e, l);
    e->n_loads = 0;
    e->load_next = 0;
    return st;
}

void gpu_kv_loads_free(gpu_engine *e)
{
    for (int l = 0; e->ev_load && l < e->d.L; l++)
        if (e->ev_load[l]) cudaEventDestroy(e->ev_load[l]);
    free(e->ev_load);
    free(e->loads);
    e->ev_load = NULL;
    e->loads = NULL;
    e->n_loads = e->loads_cap = 0;
}
