/* gpu/prefill_sparse.cu — the sparse prefill (gpu_prefill_sparse, and the sparse calls of a
 * layer-split chunk, gpu/gpu_split.h): FlexPrefill, XAttention or Tri-shape block lists, then
 * block-sparse attention; the dense passes and the decode are in gpu/forward.cu.
 *
 * A sparse chunk: positions pos0 .. pos0 + n - 1 of one sequence (pos0 0: a whole prompt; else a
 * chunk after cached tokens, pos0 a multiple of 128), layer-major over the chunk (the index of a
 * layer needs every query of the chunk and every key before it), with the per-token work still in
 * passes of C tokens (t_max rounded down to the 128-token block, so each pass starts on a block
 * boundary):
 *   once     rope table and embedding of the chunk's n tokens, into per-call buffers (sparse_ws);
 *            Tri-shape: its lists (the same for every layer and head: gpu_trishape_index)
 *   layer l  1. per pass: RMSNorm, QKV GEMM, rope -> Q into sw.q (n rows), K/V into the cache;
 *               with a sink, the pass's K/V quantized into the layer's export slot (n rows)
 *            2. the layer's export slot copied to the host (ring of two layers)
 *            3. the method's index over sw.q and the cache's K (every key 0 .. pos0 + n - 1,
 *               through the block table): FlexPrefill gpu_flex_index_chunk,
 *               XAttention gpu_xattn_index -> CSR lists; the list total goes to the pinned
 *               nnz_h[l] (read after the final sync, for the report)
 *            4. per pass: block-sparse attention of its rows (the listed blocks of all earlier
 *               keys are in the cache), o GEMM into the residual, RMSNorm, gate/up, SwiGLU, down
 * Extra device memory, per call: the residual stream of the chunk (4 H bytes per token), Q
 * (2 qd), rope (2 hd), metadata (16), with a sink two layers of quantized KV, and the index
 * workspace; sized by sparse_layout, taken before any work, returned before the call returns.
 * The rest (weights, the t_max activations, the cache) is what dense prefill uses. */
#include "gpu/engine.cuh"
#include "gpu/forward.cuh"
#include "gpu/gpu_xattn_fp8.h" /* gpu_tune xattn_fp8 */
#include "gpu/tls.cuh" /* an offloaded sequence (gpu/tls_off.cu) */
#include <string.h>

struct sparse_ws {
    unsigned char *base;
    gpu_lend lend; /* base lent from the KV pool (lend.ptr), else cudaMalloc'ed */
    float *x;     /* (n, H) residual stream */
    h16 *q;      /* (n, qd) Q after rope */
    float2 *rope; /* (n, hd/2) */
    int *ids, *pos, *seq, *tbl; /* (n) each: the metadata run_layers reads from meta_d */
    gpu_seq_dev *seqs;          /* (1) */
    float *inv;                 /* (hd/2) */
    unsigned char *exp[GPU_EXPORT_RING];
    gpu_flex_ws *fw;   /* flexprefill */
    gpu_xattn_ws *xw;  /* xattention, trishape */
};

struct sparse_off {
    size_t x, q, rope, ids, pos, seq, tbl, seqs, inv, exp[GPU_EXPORT_RING], meta0, meta1, bytes;
};

static size_t a256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static sparse_off sparse_layout(const gpu_dims &d, int n, int sink, enum proto_kv_dtype dt)
{
    sparse_off o;
    size_t at = 0;
    o.x = at, at = a256(at + (size_t)n * d.H * sizeof(float));
    o.q = at, at = a256(at + (size_t)n * d.qd * sizeof(h16));
    o.rope = at, at = a256(at + (size_t)n * (d.hd / 2) * sizeof(float2));
    o.meta0 = at;
    o.ids = at, at = a256(at + (size_t)n * sizeof(int));
    o.pos = at, at = a256(at + (size_t)n * sizeof(int));
    o.seq = at, at = a256(at + (size_t)n * sizeof(int));
    o.tbl = at, at = a256(at + (size_t)n * sizeof(int));
    o.seqs = at, at = a256(at + sizeof(gpu_seq_dev));
    o.inv = at, at = a256(at + (size_t)(d.hd / 2) * sizeof(float));
    o.meta1 = at;
    for (int i = 0; i < GPU_EXPORT_RING; i++) {
        o.exp[i] = at;
        if (sink) at = a256(at + gpu_export_slot_bytes(&d, dt, n));
    }
    o.bytes = at;
    return o;
}

/* gpu_tune xattn_fp8=1: XAttention's FP8 estimate takes its buffers from the same lent range */
static size_t xattn_fp8_bytes(const gpu_engine *e, int mode, int pos0, int n)
{
    const gpu_dims &d = e->d;
    return mode == SPARSE_MODE_XATTN && e->tune.xattn_fp8
               ? gpu_xattn_fp8_bytes(pos0 + n, pos0, d.n_heads, d.n_kv, d.hd)
               : 0;
}

uint64_t gpu_sparse_bytes(const gpu_engine *e, int n, int sink, enum proto_kv_dtype dt)
{
    return gpu_sparse_bytes_mode(e, SPARSE_MODE_FLEX, 0, n, sink, dt);
}

uint64_t gpu_sparse_bytes_mode(const gpu_engine *e, int mode, int pos0, int n, int sink,
                               enum proto_kv_dtype dt)
{
    const gpu_dims &d = e->d;
    return sparse_layout(d, n, sink, dt).bytes +
           (mode == SPARSE_MODE_FLEX ? gpu_flex_ws_bytes(pos0 + n, d.n_heads, d.n_kv, d.hd)
                                     : gpu_xattn_ws_bytes(pos0 + n, d.n_heads, d.n_kv, d.hd, 128,
                                                        mode == SPARSE_MODE_XATTN)) +
           xattn_fp8_bytes(e, mode, pos0, n);
}

static void sparse_ws_free(gpu_engine *e, sparse_ws *w)
{
    gpu_flex_ws_free(w->fw);
    gpu_xattn_ws_free(w->xw);
    if (w->lend.ptr) gpu_pool_unlend(e, &w->lend);
    else if (w->base) cudaFree(w->base);
    memset(w, 0, sizeof *w);
}

/* Takes the per-call buffers (one range: the layout, then the method's index workspace) from the
 * KV pool's free blocks, as KV is admitted: ACCEL_ERR_NOMEM (nothing held, not logged) when the
 * pool has no room — the caller gives back cached blocks and calls again. A pool that cannot lend
 * (no VMM) leaves them to cudaMalloc, outside its budget. */
static int sparse_ws_new(gpu_engine *e, int mode, int pos0, int n, int sink,
                         enum proto_kv_dtype dt, sparse_ws *w)
{
    const gpu_dims &d = e->d;
    memset(w, 0, sizeof *w);
    sparse_off o = sparse_layout(d, n, sink, dt);
    const size_t xb = mode == SPARSE_MODE_FLEX
                          ? gpu_flex_ws_bytes(pos0 + n, d.n_heads, d.n_kv, d.hd)
                          : gpu_xattn_ws_bytes(pos0 + n, d.n_heads, d.n_kv, d.hd, 128,
                                               mode == SPARSE_MODE_XATTN);
    if (!xb) return ACCEL_ERR_INVALID; /* a shape the index refuses */
    const size_t f8b = xattn_fp8_bytes(e, mode, pos0, n), ib = xb + f8b;
    int st = gpu_pool_lend(e, o.bytes + ib, &w->lend);
    if (st == ACCEL_OK) {
        w->base = (unsigned char *)w->lend.ptr;
    } else if (st == ACCEL_ERR_UNSUPPORTED) {
        cudaError_t ce = cudaMalloc((void **)&w->base, o.bytes + ib);
        if (ce != cudaSuccess) {
            cudaGetLastError();
            w->base = NULL;
            if (ce == cudaErrorMemoryAllocation) return ACCEL_ERR_NOMEM;
            return gpu_cuda_status(ce, "cudaMalloc(sparse)", __FILE__, __LINE__);
        }
    } else {
        return st;
    }
    unsigned char *b = w->base;
    st = mode == SPARSE_MODE_FLEX
             ? gpu_flex_ws_new_at(b + o.bytes, pos0 + n, d.n_heads, d.n_kv, d.hd, &w->fw)
             : gpu_xattn_ws_new_at(b + o.bytes, pos0 + n, d.n_heads, d.n_kv, d.hd, 128,
                                   mode == SPARSE_MODE_XATTN, &w->xw);
    if (!st && f8b) st = gpu_xattn_ws_fp8_at(w->xw, GPU_XATTN_FP8_WS, b + o.bytes + xb, f8b);
    if (st) {
        sparse_ws_free(e, w);
        return st; /* GPU_FLEX_ERR_* are ACCEL_ERR_* */
    }
    w->x = (float *)(b + o.x);
    w->q = (h16 *)(b + o.q);
    w->rope = (float2 *)(b + o.rope);
    w->ids = (int *)(b + o.ids);
    w->pos = (int *)(b + o.pos);
    w->seq = (int *)(b + o.seq);
    w->tbl = (int *)(b + o.tbl);
    w->seqs = (gpu_seq_dev *)(b + o.seqs);
    w->inv = (float *)(b + o.inv);
    for (int i = 0; i < GPU_EXPORT_RING; i++) w->exp[i] = sink ? b + o.exp[i] : NULL;
    return ACCEL_OK;
}

/* Queues the upload of ids, positions 0..n-1, the sequence and the rope frequencies: one copy
 * of a host image of the metadata region (*host, malloc'ed: the caller frees it after the final
 * sync), on the compute stream, so the kernels after it see it. (A plain cudaMemcpy from pageable
 * memory may return before its DMA has landed, and the compute stream does not wait for the
 * legacy stream.) */
static int sparse_meta(gpu_engine *e, const sparse_ws *w, gpu_kv *kv, int pos0,
                       const int32_t *ids, int n, unsigned char **host)
{
    const gpu_dims &d = e->d;
    sparse_off o = sparse_layout(d, n, 0, PROTO_KV_INT8);
    size_t bytes = o.meta1 - o.meta0;
    unsigned char *h = (unsigned char *)calloc(1, bytes);
    *host = h;
    if (!h) return ACCEL_ERR_NOMEM;
    int *hid = (int *)(h + o.ids - o.meta0), *hpos = (int *)(h + o.pos - o.meta0);
    for (int t = 0; t < n; t++) {
        hid[t] = ids[t];
        hpos[t] = pos0 + t;
    }
    *(gpu_seq_dev *)(h + o.seqs - o.meta0) = seq_of(e, kv);
    inv_table(e, pos0 + n, (float *)(h + o.inv - o.meta0));
    GPU_CHECK(cudaMemcpyAsync(w->ids, h, bytes, cudaMemcpyHostToDevice, e->compute));
    return ACCEL_OK;
}

static int event_status(cudaError_t ce)
{
    return ce == cudaSuccess ? ACCEL_OK : gpu_cuda_status(ce, "cudaEventRecord", __FILE__, __LINE__);
}

/* last_from: the first row of the chunk the last layer carries past its K/V (0: all; a block
 * boundary: the last block, whose tile of the block-sparse attention is the one a whole pass
 * computes; n: none), as run_layers' keep. */
static int sparse_layers(gpu_engine *e, const sparse_ws &w, gpu_kv *kv, int pos0, int n,
                         const gpu_sparse_req *sr, gpu_export_run *xr, const volatile int *cancel,
                         int last_from, int l0, int l1, float *X)
{
    const gpu_dims &d = e->d;
    cudaStream_t s = e->compute;
    const int half = d.hd / 2, C = e->t_max / GPU_FLEX_BS * GPU_FLEX_BS;
    const int N = pos0 + n, nb = (N + GPU_FLEX_BS - 1) / GPU_FLEX_BS;
    const gpu_seq_dev sq = seq_of(e, kv);
    /* 8 warps (128 query rows, one FlexPrefill block, per CTA: each K/V tile loaded once for all
     * of them) from 128K tokens on, where that wins; 4 below (gpu/KERNELS.md) */
    const int warps = e->sparse_warps ? e->sparse_warps : N >= 131072 ? 8 : 4;
    /* on Hopper with head_dim 128 the warp-specialized kernel's block-sparse form, as the dense
     * prefill (engine.cu: e->sparse_ws; sparse_attn=mma4/mma8 turn it off) */
    const bool ws = e->sparse_ws && gpu_attn_ws_usable(&d, w.q, sq.k, sq.v, sq.cap);
    const size_t k_head = (size_t)sq.cap * d.hd; /* between KV heads (in a block) */
    prof_mark(e, P_START);
    /* X: the residual stream (w.x, or a split chunk's: then w.x past layer 0, unused) */
    GPU_TRY(gpu_embed_rope(s, e->embed, w.ids, n, d.H, l0 ? w.x : X, w.pos, w.tbl, w.inv, half, w.rope));
    prof_mark(e, P_ROPE_TAB);
    prof_mark(e, P_EMBED);
    const int32_t *rp = NULL, *col = NULL;
    if (sr->mode == SPARSE_MODE_TRISHAPE) {
        GPU_TRY(gpu_trishape_index(w.xw, sr->tri_lo, sr->tri_hi, N, pos0, s));
        rp = gpu_xattn_ws_row_ptr(w.xw);
        col = gpu_xattn_ws_col(w.xw);
        prof_mark(e, P_INDEX);
    }
    for (int l = l0; l < l1; l++) {
        const gpu_layer_w &lw = e->layers[l];
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) return ACCEL_ERR_CANCELLED;
        const size_t off = (size_t)l * d.n_kv * sq.cap * d.hd;
        const h16 *kl = sq.k + off, *vl = sq.v + off;
        for (int c0 = 0; c0 < n; c0 += C) {
            const int T = n - c0 < C ? n - c0 : C;
            GPU_TRY(gpu_rmsnorm(s, X + (size_t)c0 * d.H, NULL, lw.attn_norm, T, d.H, d.eps, e->xb));
            prof_mark(e, P_NORM);
            GPU_TRY(gpu_gemm(e, T, d.qkv, d.H, lw.w_qkv, e->xb, e->qkv, 1, 0.f));
            prof_mark(e, P_QKV);
            GPU_TRY(gpu_rope_qkv(s, &d, l, T, e->qkv, lw.b_qkv, w.rope + (size_t)c0 * half,
                                 w.seq + c0, w.pos + c0, w.seqs, w.q + (size_t)c0 * d.qd,
                                 NULL, NULL));
            prof_mark(e, P_ROPE);
            if (xr) GPU_TRY(gpu_export_quantize(e, xr, l, c0, T));
            prof_mark(e, P_EXPORT);
        }
        if (xr) {
            /* the host slot of layer l held layer l - ring: hand that one over first */
            if (l >= xr->host_ring) GPU_TRY(gpu_export_poll(e, xr, l - xr->host_ring, 1));
            GPU_TRY(gpu_export_copy(e, xr, l));
        }
        if (sr->mode == SPARSE_MODE_FLEX) {
            GPU_TRY(gpu_flex_index_chunk(w.fw, &sr->flex, w.q, kl, (size_t)d.hd, k_head,
                                         sq.map.tbl, sq.map.bstride, N, pos0, s));
            rp = gpu_flex_ws_row_ptr(w.fw);
            col = gpu_flex_ws_col(w.fw);
        } else if (sr->mode == SPARSE_MODE_XATTN) {
            GPU_TRY(gpu_xattn_index(w.xw, &sr->xattn, w.q, (size_t)d.qd, kl, (size_t)d.hd, k_head,
                                    sq.map.tbl, sq.map.bstride, N, pos0, s));
            rp = gpu_xattn_ws_row_ptr(w.xw);
            col = gpu_xattn_ws_col(w.xw);
        }
        GPU_CHECK(cudaMemcpyAsync(e->nnz_h + l, rp + (size_t)d.n_heads * (nb + 1) - 1, sizeof(int),
                                  cudaMemcpyDeviceToHost, s));
        prof_mark(e, P_INDEX);
        const gpu_block_list bl = {rp, col, nb};
        for (int c0 = l == d.L - 1 ? last_from : 0; c0 < n; c0 += C) {
            const int T = n - c0 < C ? n - c0 : C;
            float *xc = X + (size_t)c0 * d.H;
            const h16 *qc = w.q + (size_t)c0 * d.qd;
            int st = ACCEL_ERR_UNSUPPORTED;
            const gpu_attn_split sp = gpu_engine_split(e);
            if (ws)
                st = gpu_attn_prefill_ws_ex(s, &d, T, pos0 + c0, qc, kl, vl, (size_t)d.hd, k_head,
                                            0, &bl, e->att, 0, &sq.map, &sp);
            if (st == ACCEL_ERR_UNSUPPORTED) /* no ws kernel, or no tensor map for these */
                st = gpu_attn_prefill_ex(s, &d, T, pos0 + c0, qc, kl, vl, (size_t)d.hd, k_head, 0,
                                         &bl, e->att, d.hdp == 128 ? warps : 4, &sq.map);
            GPU_TRY(st);
            prof_mark(e, P_ATTN);
            GPU_TRY(gpu_gemm(e, T, d.H, d.qd, lw.w_o, e->att, xc, 1, 1.f));
            prof_mark(e, P_O);
            GPU_TRY(gpu_mlp_rows(e, lw, T, xc));
        }
        if (xr) GPU_TRY(gpu_export_poll(e, xr, l, 0));
    }
    return ACCEL_OK;
}

/* gpu_prefill_sparse of layers [l0, l1) on the residual stream xs (NULL: the workspace's) */
int gpu_prefill_sparse_layers(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                              float *logits, int all_logits, const accel_kv_sink *sink,
                              enum proto_kv_dtype kv_dtype, const volatile int *cancel,
                              const gpu_sparse_req *sr, accel_sparse_report *rep, int l0, int l1,
                              float *xs)
{
    const gpu_dims &d = e->d;
    if (!sr || n < 1 || pos0 < 0 || pos0 % GPU_FLEX_BS || pos0 > kv->cap - n)
        return ACCEL_ERR_INVALID;
    if (gpu_kv_offloaded(kv)) return ACCEL_ERR_UNSUPPORTED;
    if (sr->mode == SPARSE_MODE_FLEX && (pos0 + n < 2 * GPU_FLEX_BS || n < GPU_FLEX_BS))
        return ACCEL_ERR_INVALID;
    if (sr->mode == SPARSE_MODE_XATTN && sr->xattn.block != GPU_FLEX_BS) return ACCEL_ERR_INVALID;
    if (sink && kv_dtype != PROTO_KV_INT8 && kv_dtype != PROTO_KV_INT4) return ACCEL_ERR_INVALID;
    const int N = pos0 + n;
    if ((d.hd != 64 && d.hd != 128) || d.n_heads > GPU_FLEX_MAX_HEADS || N > GPU_FLEX_MAX_TOKENS)
        return ACCEL_ERR_UNSUPPORTED;
    GPU_CHECK(cudaSetDevice(e->index));
    GPU_TRY(gpu_kv_loads_settle(e));
    /* the workspace, then the chunk's blocks, both from the pool: NOMEM leaves it as it was */
    sparse_ws w;
    GPU_TRY(sparse_ws_new(e, sr->mode, pos0, n, sink != NULL, kv_dtype, &w));
    GPU_TRY(gpu_kv_stage_reset(e));
    int st = gpu_kv_reserve(e, 1, &kv, &pos0, &n);
    gpu_export_run xr;
    if (!st && sink) {
        memset(&e->stats, 0, sizeof e->stats);
        /* a ring of two whole layers on the host (the dense path's buffer usually holds it) */
        st = gpu_export_host_grow(e, 2 * gpu_export_slot_bytes(&d, kv_dtype, n));
    }
    if (st) {
        sparse_ws_free(e, &w);
        return st;
    }
    unsigned char *meta_host = NULL;
    st = sparse_meta(e, &w, kv, pos0, ids, n, &meta_host);
    if (sink) {
        gpu_export_init(&xr, e, kv, sink, kv_dtype, n, pos0);
        xr.host_ring = 2;
        xr.next = l0;
        for (int i = 0; i < GPU_EXPORT_RING; i++) xr.dslot[i] = w.exp[i];
    }
    if (!st) st = event_status(cudaEventRecord(e->ev_t0, e->compute));
    const int last_from = e->prune_off || (logits && all_logits) ? 0
                          : logits ? (n - 1) / GPU_FLEX_BS * GPU_FLEX_BS : n;
    float *const X = xs ? xs : w.x;
    if (!st) st = sparse_layers(e, w, kv, pos0, n, sr, sink ? &xr : NULL, cancel, last_from, l0, l1, X);
    if (!st) st = event_status(cudaEventRecord(e->ev_t1, e->compute));
    if (!st && logits && l1 == d.L) {
        if (all_logits) st = gpu_logits_rows(e, X, 0, n, logits);
        else st = gpu_logits_rows(e, X, n - 1, 1, logits);
    }
    if (!st && sink) st = gpu_export_poll(e, &xr, l1 - 1, 1);
    st = gpu_finish(e, st);
    if (!st) prof_collect(e, 0);
    sparse_ws_free(e, &w);
    free(meta_host);
    if (st) return st;
    float ms = 0;
    GPU_CHECK(cudaEventElapsedTime(&ms, e->ev_t0, e->ev_t1));
    e->stats.compute_ms += ms;
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->layers_sparse = l1 - l0;
        for (int l = l0; l < l1; l++) rep->blocks_computed += e->nnz_h[l];
        /* causal blocks of the chunk's query blocks q0 .. nb - 1 */
        const int64_t nb = (N + GPU_FLEX_BS - 1) / GPU_FLEX_BS, q0 = pos0 / GPU_FLEX_BS;
        rep->blocks_causal = (int64_t)(l1 - l0) * d.n_heads * (nb * (nb + 1) / 2 - q0 * (q0 + 1) / 2);
        rep->density = (double)rep->blocks_computed / (double)rep->blocks_causal;
    }
    return ACCEL_OK;
}

int gpu_prefill_sparse(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                       float *logits, int all_logits, const accel_kv_sink *sink,
                       enum proto_kv_dtype kv_dtype, const volatile int *cancel,
                       const gpu_sparse_req *sr, accel_sparse_report *rep)
{
    return gpu_prefill_sparse_layers(e, kv, pos0, ids, n, logits, all_logits, sink, kv_dtype,
                                     cancel, sr, rep, 0, e->d.L, NULL);
}
