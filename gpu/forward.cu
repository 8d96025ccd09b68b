/* gpu/forward.cu — the forward pass: prefill (one sequence, in chunks of at most t_max tokens)
 * and batched decode (one token for each of n sequences), with the layer-by-layer KV export
 * (gpu/kv_xfer.cu: the export's streams and events, the export of held KV, the import, and the
 * host tier's block loads that a prefill overlaps, layer by layer). The sparse prefill is
 * gpu/prefill_sparse.cu; what the two share, gpu/forward.cuh.
 *
 * A pass of T tokens: per-call metadata (token ids, positions, owning sequence, rope table per
 * token, the sequences' cache pointers, inverse frequencies) goes to the device in one copy; then
 * every kernel and GEMM is queued on the compute stream; the host waits once, at the end. */
#include "gpu/engine.cuh"
#include "gpu/gpu_split.h"
#include "gpu/forward.cuh"
#include "gpu/gemm_small.cuh" /* gpu_gemm_swiglu */
#include "gpu/tls.cuh" /* an offloaded sequence (gpu/tls_off.cu) */
#include <string.h>
#include <time.h>

/* Prefill chunks up to this many tokens use the single-row (decode) attention kernel: the tiled
 * kernel's 64-row tiles would be mostly empty and its grid too small to spread a long cache. */
#define SMALL_CHUNK 8

struct meta_ptrs {
    int *ids, *pos, *seq, *tbl;
    gpu_seq_dev *seqs;
    gpu_seq_dev *seqs2; /* layers from gpu_tls_off_split on: == seqs but for offloaded rows */
    float *inv;
};

/* Compact per-call layout inside the metadata buffers (sized for the largest call). */
struct meta_fill {
    size_t off_ids, off_pos, off_seq, off_tbl, off_seqs, off_seqs2, off_inv, bytes;
};

static size_t a16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static meta_fill meta_plan(int T, int n_seqs, int n_tbl, int half)
{
    meta_fill f;
    size_t o = 0;
    f.off_ids = o, o = a16(o + T * sizeof(int));
    f.off_pos = o, o = a16(o + T * sizeof(int));
    f.off_seq = o, o = a16(o + T * sizeof(int));
    f.off_tbl = o, o = a16(o + T * sizeof(int));
    f.off_seqs = o, o = a16(o + n_seqs * sizeof(gpu_seq_dev));
    f.off_seqs2 = o, o = a16(o + n_seqs * sizeof(gpu_seq_dev));
    f.off_inv = o, o = a16(o + (size_t)n_tbl * half * sizeof(float));
    f.bytes = o;
    return f;
}

static meta_ptrs meta_at(unsigned char *base, const meta_fill &f)
{
    meta_ptrs p;
    p.ids = (int *)(base + f.off_ids);
    p.pos = (int *)(base + f.off_pos);
    p.seq = (int *)(base + f.off_seq);
    p.tbl = (int *)(base + f.off_tbl);
    p.seqs = (gpu_seq_dev *)(base + f.off_seqs);
    p.seqs2 = (gpu_seq_dev *)(base + f.off_seqs2);
    p.inv = (float *)(base + f.off_inv);
    return p;
}

/* ---------------------------------------------------------------- profile (profile=1)
 * The report; the events (prof_mark, prof_collect) are in gpu/forward.cuh. */
static const char *prof_names[GPU_PROF_CATS] = {"start", "rope table", "embed", "rmsnorm",
                                                "qkv gemm", "rope+cache", "kv export", "attention",
                                                "o gemm", "gate/up gemm", "swiglu", "down gemm",
                                                "norm+lm_head", "flex index", "lab decode"};

void gpu_prof_report(gpu_engine *e)
{
    for (int k = 0; k < 2; k++) {
        if (!e->prof_passes[k]) continue;
        double total = 0;
        for (int c = 1; c < GPU_PROF_CATS; c++) total += e->prof_ms[k][c];
        fprintf(stderr, "tandem cuda profile: %s, %ld passes, %.3f ms per pass:", k ? "decode" : "prefill",
                e->prof_passes[k], total / e->prof_passes[k]);
        for (int c = 1; c < GPU_PROF_CATS; c++)
            if (e->prof_ms[k][c] > 0)
                fprintf(stderr, " %s %.3f (%.1f%%);", prof_names[c], e->prof_ms[k][c] / e->prof_passes[k],
                        100.0 * e->prof_ms[k][c] / total);
        fprintf(stderr, "\n");
    }
}

/* ---------------------------------------------------------------- the layers */

struct pass {
    int T;
    gpu_kv *kv;   /* prefill: the sequence (all tokens); decode: NULL */
    int pos0;     /* prefill: position of token 0 */
    gpu_export_run *xr; /* NULL: no export */
    const volatile int *cancel;
    int cluster;  /* decode: the cluster form of the decode attention (short rows) */
    int tls;      /* decode: AsyncTLS sparse attention past the dense layers (gpu/tls.cu) */
    int keep;     /* rows of the last layer's output that are read (the logits): T, 1 (the last
                   * row) or 0; the last layer's K/V are written for every row either way */
    float *x; int l0, l1; /* layer-split (gpu_split.h): residual (NULL: e->x), layers (l1 0: all) */
};

/* A decode step's pass over n sequences: every row kept, no prefill sequence, export or cancel. */
static pass decode_pass(int n, int cluster, int tls)
{
    pass p = {};
    p.T = n;
    p.cluster = cluster;
    p.tls = tls;
    p.keep = n;
    return p;
}

static int run_layers_in(gpu_engine *e, const pass &p, const meta_ptrs &md);

/* A pass's layers; on an error, AsyncTLS's side stream (gpu/tls.cu) is joined back, so that
 * neither the next step nor a graph capture inherits the fork. */
static int run_layers(gpu_engine *e, const pass &p, const meta_ptrs &md)
{
    const int st = run_layers_in(e, p, md);
    if (st && p.tls) {
        gpu_tls_join(e);
        cudaGetLastError(); /* the status is the first error's */
    }
    return st;
}

static int run_layers_in(gpu_engine *e, const pass &p, const meta_ptrs &md)
{
    /* the chain trace covers single-token decode passes (their lm_head included) */
    e->ctrace_n = p.T == 1 && !p.kv && !p.xr ? 0 : -1;
    if (e->ctrace_n == 0) e->ctrace_passes++;
    GPU_TRY(gpu_chain_stamp(e, 0));
    const gpu_dims &d = e->d;
    cudaStream_t s = e->compute;
    const int T = p.T;
    /* one token without export: the fused kernels of decode_fused.cu (the same bits) */
    const bool fused = e->fused && T == 1 && !p.xr && !p.x;
    float *const X = p.x ? p.x : e->x;
    const int l1 = p.l1 ? p.l1 : d.L;
    prof_mark(e, P_START);
    /* the rope table and the embedding rows in one launch (the profile books it as the rope
     * table): one launch less at the head of every decode step (split past layer 0: into e->x) */
    GPU_TRY(gpu_embed_rope(s, e->embed, md.ids, T, d.H, p.l0 ? e->x : X, md.pos, md.tbl, md.inv,
                           d.hd / 2, e->rope));
    prof_mark(e, P_ROPE_TAB);
    prof_mark(e, P_EMBED);
    if (e->lab_decode && T == 1 && !p.xr && !p.kv) { /* the lab plugin's variant (engine.cuh) */
        GPU_TRY(e->lab_decode(e, md.seq, md.pos, md.seqs));
        prof_mark(e, P_LAB);
        return ACCEL_OK;
    }
    const int off_split = gpu_tls_off_split(e);
    for (int l = p.l0; l < l1; l++) {
        const gpu_layer_w &w = e->layers[l];
        const gpu_seq_dev *const seqs = l >= off_split ? md.seqs2 : md.seqs; /* tls_off.cu */
        if (p.cancel && __atomic_load_n(p.cancel, __ATOMIC_ACQUIRE)) return ACCEL_ERR_CANCELLED;
        /* a prefill after host-tier loads: this layer's blocks come in while earlier layers
         * compute, and this layer waits for them (kv_xfer.cu) */
        if (p.kv && e->n_loads) GPU_TRY(gpu_kv_loads_layer(e, l));
        if (fused) {
            /* the balanced QKV grid (two items per warp on Llama-3-8B) leaves SMs to the split-form
             * attention's blocks, which then start early and request their first keys; before
             * the cluster form it is slower: the clusters start later (gpu/KERNELS.md) */
            GPU_TRY(gpu_qkv_fused(s, e->pdl, e->sms, &d, l, w.w_qkv, w.b_qkv, e->x, w.attn_norm,
                                  e->rope, md.seq, md.pos, seqs, e->q, gpu_chain_slot(e),
                                  !p.cluster));
            prof_mark(e, P_QKV);
        } else {
            GPU_TRY(gpu_rmsnorm(s, X, NULL, w.attn_norm, T, d.H, d.eps, e->xb));
            prof_mark(e, P_NORM);
            GPU_TRY(gpu_gemm(e, T, d.qkv, d.H, w.w_qkv, e->xb, e->qkv, 1, 0.f));
            prof_mark(e, P_QKV);
            GPU_TRY(gpu_rope_qkv(s, &d, l, T, e->qkv, w.b_qkv, e->rope, md.seq, md.pos, seqs,
                                 e->q, NULL, NULL));
            prof_mark(e, P_ROPE);
        }
        if (p.xr) GPU_TRY(gpu_export_enqueue(e, p.xr, l));
        prof_mark(e, P_EXPORT);
        /* the rows this layer carries past its K/V: all, except in the last layer of a prefill
         * pass whose hidden states are not all read (only the logits read them) — there the last
         * row, or none: 1/L of the pass's MLP and attention work that nothing would read */
        const int r0 = l == d.L - 1 ? T - p.keep : 0, nr = T - r0;
        if (nr == 0) {
            if (p.xr) GPU_TRY(gpu_export_poll(e, p.xr, l, 0));
            continue;
        }
        h16 *const q_r = e->q + (size_t)r0 * d.qd, *const att_r = e->att + (size_t)r0 * d.qd;
        float *const x_r = X + (size_t)r0 * d.H;
        if (p.kv && nr > SMALL_CHUNK) {
            gpu_seq_dev sq = seq_of(e, p.kv);
            size_t off = (size_t)l * d.n_kv * sq.cap * d.hd;
            const gpu_attn_split sp = gpu_engine_split(e); /* a short chunk's keys over blocks */
            if (e->sm90)
                GPU_TRY(gpu_attn_prefill_sm90(s, &d, nr, p.pos0 + r0, q_r, sq.k + off, sq.v + off, sq.cap,
                                              att_r, &sq.map, &sp));
            else
                GPU_TRY(gpu_attn_prefill(s, &d, nr, p.pos0 + r0, q_r, sq.k + off, sq.v + off, sq.cap,
                                         att_r, e->fa_warps, &sq.map));
        } else if (p.tls && l >= gpu_tls_dense_layers(e)) {
            GPU_TRY(gpu_tls_layer(e, l, nr, q_r, md.pos + r0, seqs, att_r));
        } else {
            unsigned long long *btr =
                e->atrace && e->ctrace_n >= 0 ? e->atrace + (size_t)l * GPU_ATRACE_BLOCKS * GPU_ATRACE_STAMPS : NULL;
            GPU_TRY(gpu_attn_decode(s, e->pdl, !p.kv, p.cluster, &d, e->sms, l, nr, q_r, md.seq + r0,
                                    md.pos + r0, seqs, e->part_o, e->part_ml, e->part_cnt, att_r,
                                    gpu_chain_slot(e), btr, e->dec_mma, e->dec_rows));
        }
        prof_mark(e, P_ATTN);
        /* x += attn · Wo^T; the single-token GEMV's blocks are resident beside the attention, and
         * while the short rows' attention leaves HBM idle they request their whole rows into L2
         * (the long rows' split attention streams its keys itself: there it loses) */
        const int short_attn = p.cluster || (p.tls && l >= gpu_tls_dense_layers(e)); /* AsyncTLS too */
        GPU_TRY(gpu_gemm(e, nr, d.H, d.qd, w.w_o, att_r, x_r, 1, 1.f, short_attn ? GPU_L2PF_O : 0));
        prof_mark(e, P_O);
        if (fused) {
            GPU_TRY(gpu_gu_fused(s, e->pdl, e->sms, &d, w.w_gu, e->x, w.ffn_norm, e->h,
                                 gpu_chain_slot(e)));
            prof_mark(e, P_GU);
            GPU_TRY(gpu_gemm(e, nr, d.H, d.I, w.w_down, e->h, x_r, 1, 1.f)); /* x += h · Wd^T */
            prof_mark(e, P_DOWN);
        } else {
            GPU_TRY(gpu_mlp_rows(e, w, nr, x_r));
        }
        if (p.xr) GPU_TRY(gpu_export_poll(e, p.xr, l, 0));
    }
    /* AsyncTLS's staggered rows: level 1 of every sparse layer for the next step, in one launch
     * after the layers (gpu/tls.cuh) */
    if (p.tls && !p.kv) GPU_TRY(gpu_tls_step_end(e, p.l0, l1, T, md.pos));
    return ACCEL_OK;
}

int gpu_mlp_rows(gpu_engine *e, const gpu_layer_w &w, int nr, float *x)
{
    const gpu_dims &d = e->d;
    cudaStream_t s = e->compute;
    GPU_TRY(gpu_rmsnorm(s, x, NULL, w.ffn_norm, nr, d.H, d.eps, e->xb));
    prof_mark(e, P_NORM);
    /* a few rows: gate/up and SwiGLU in one kernel (gemm.cu), else two */
    const int gu_swiglu = gpu_gemm_swiglu(e, nr, d.I, d.H, w.w_gu, e->xb, e->h);
    if (gu_swiglu < 0) return gu_swiglu;
    if (!gu_swiglu) GPU_TRY(gpu_gemm(e, nr, 2 * d.I, d.H, w.w_gu, e->xb, e->gu, 0, 0.f));
    prof_mark(e, P_GU);
    if (!gu_swiglu) GPU_TRY(gpu_swiglu(s, e->gu, nr, d.I, e->h));
    prof_mark(e, P_SWIGLU);
    GPU_TRY(gpu_gemm(e, nr, d.H, d.I, w.w_down, e->h, x, 1, 1.f)); /* x += h · Wd^T */
    prof_mark(e, P_DOWN);
    return ACCEL_OK;
}

/* Final norm + lm_head of nr (<= GPU_LOGIT_ROWS) rows of x from row0 into e->logits (norm_only:
 * the norm into e->xn alone). */
static int logits_compute(gpu_engine *e, const float *x, int row0, int nr, int norm_only = 0)
{
    const gpu_dims &d = e->d;
    GPU_TRY(gpu_rmsnorm(e->compute, x + (size_t)row0 * d.H, NULL, e->norm, nr, d.H, d.eps, e->xn));
    if (!norm_only) GPU_TRY(gpu_gemm(e, nr, d.V, d.H, e->lm_head, e->xn, e->logits, 1, 0.f));
    return ACCEL_OK;
}

/* A batch's logits after the graph of its layers and final norm: the lm_head in `chunks` column
 * ranges (64-column multiples), each copied to dst (n rows of V floats, page-locked) on the copy
 * stream once computed, under the next range's GEMM (batch 256: 131 MB, ~2.4 ms over PCIe against
 * ~0.4 ms of lm_head). The caller waits for both streams. dst NULL: the chunks' GEMMs alone (the
 * same logits in e->logits, nothing copied: the argmax path's lm_head). */
static int logits_overlapped(gpu_engine *e, int n, int chunks, float *dst)
{
    const gpu_dims &d = e->d;
    const int per = ((d.V + chunks - 1) / chunks + 63) / 64 * 64;
    for (int c = 0, c0 = 0; c0 < d.V; c++, c0 += per) {
        const int nc = d.V - c0 < per ? d.V - c0 : per;
        GPU_TRY(gpu_gemm_cols(e, n, nc, d.H, e->lm_head + (size_t)c0 * d.H, e->xn, e->logits + c0, d.V));
        if (!dst) continue;
        GPU_CHECK(cudaEventRecord(e->lg_ev[c], e->compute));
        GPU_CHECK(cudaStreamWaitEvent(e->copy, e->lg_ev[c], 0));
        GPU_CHECK(cudaMemcpy2DAsync(dst + c0, (size_t)d.V * sizeof(float), e->logits + c0,
                                    (size_t)d.V * sizeof(float), (size_t)nc * sizeof(float), n,
                                    cudaMemcpyDeviceToHost, e->copy));
    }
    return ACCEL_OK;
}

/* Logits of rows row0.. of x (the pass's residual stream) into host memory (float32), in
 * sub-batches. */
int gpu_logits_rows(gpu_engine *e, const float *x, int row0, int nrows, float *out)
{
    const gpu_dims &d = e->d;
    for (int r = 0; r < nrows; r += GPU_LOGIT_ROWS) {
        int nr = nrows - r < GPU_LOGIT_ROWS ? nrows - r : GPU_LOGIT_ROWS;
        GPU_TRY(logits_compute(e, x, row0 + r, nr));
        prof_mark(e, P_LOGITS);
        GPU_CHECK(cudaMemcpyAsync(out + (size_t)r * d.V, e->logits, (size_t)nr * d.V * sizeof(float),
                                  cudaMemcpyDeviceToHost, e->compute));
    }
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- entries */

/* gpu_prefill of layers [l0, l1) on the residual stream xs (NULL: e->x, every layer) */
static int prefill_dense(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                         float *logits, int all_logits, const accel_kv_sink *sink,
                         enum proto_kv_dtype kv_dtype, const volatile int *cancel, int l0, int l1,
                         float *xs)
{
    const gpu_dims &d = e->d;
    if (n <= 0 || pos0 < 0 || pos0 > kv->cap - n) return ACCEL_ERR_INVALID;
    if (gpu_kv_offloaded(kv)) return ACCEL_ERR_UNSUPPORTED; /* its KV in host memory */
    if (sink && kv_dtype != PROTO_KV_INT8 && kv_dtype != PROTO_KV_INT4) return ACCEL_ERR_INVALID;
    if (xs && sink && n > e->t_max) return ACCEL_ERR_UNSUPPORTED; /* gpu_split.h */
    GPU_CHECK(cudaSetDevice(e->index));
    /* host-tier loads of this sequence are overlapped with the first pass (not split); anyone else's first */
    if (!e->tune.load_overlap || xs || !gpu_kv_loads_for(e, kv)) GPU_TRY(gpu_kv_loads_settle(e));
    /* the blocks of every new position first: NOMEM here leaves the sequence as it was */
    GPU_TRY(gpu_kv_stage_reset(e));
    GPU_TRY(gpu_kv_reserve(e, 1, &kv, &pos0, &n));
    gpu_export_run xr;
    if (sink) {
        memset(&e->stats, 0, sizeof e->stats);
        int T0 = n < e->t_max ? n : e->t_max;
        GPU_TRY(gpu_export_host_grow(e, (size_t)d.L * gpu_export_slot_bytes(&d, kv_dtype, T0)));
    }
    const int half = d.hd / 2;
    for (int done = 0; done < n;) {
        const int T = n - done < e->t_max ? n - done : e->t_max;
        meta_fill mf = meta_plan(T, 1, 1, half);
        meta_ptrs mh = meta_at(e->meta_h, mf), md = meta_at(e->meta_d, mf);
        for (int t = 0; t < T; t++) {
            mh.ids[t] = ids[done + t];
            mh.pos[t] = pos0 + done + t;
            mh.seq[t] = 0;
            mh.tbl[t] = 0;
        }
        mh.seqs[0] = mh.seqs2[0] = seq_of(e, kv);
        /* dynamic NTK: the length the sequence reaches in this call (transformers recomputes
         * inv_freq from max(position_ids) + 1 of the call) */
        inv_table(e, pos0 + n, mh.inv);
        GPU_CHECK(cudaMemcpyAsync(e->meta_d, e->meta_h, mf.bytes, cudaMemcpyHostToDevice, e->compute));

        pass p;
        p.T = T;
        p.kv = kv;
        p.pos0 = pos0 + done;
        p.cancel = cancel;
        p.xr = NULL;
        p.cluster = 0;
        p.tls = 0;
        p.keep = e->prune_off || (logits && all_logits) ? T : logits && done + T == n ? 1 : 0;
        p.x = xs ? xs + (size_t)done * d.H : NULL;
        p.l0 = l0;
        p.l1 = l1;
        if (sink) {
            gpu_export_init(&xr, e, kv, sink, kv_dtype, T, pos0 + done);
            xr.next = l0;
            p.xr = &xr;
        }
        GPU_CHECK(cudaEventRecord(e->ev_t0, e->compute));
        int st = run_layers(e, p, md);
        if (!st) {
            cudaError_t ce = cudaEventRecord(e->ev_t1, e->compute);
            if (ce != cudaSuccess) st = gpu_cuda_status(ce, "cudaEventRecord", __FILE__, __LINE__);
        }
        if (!st && logits && l1 == d.L) {
            float *const x = xs ? p.x : e->x;
            if (all_logits)
                st = gpu_logits_rows(e, x, 0, T, logits + (size_t)done * d.V);
            else if (done + T == n)
                st = gpu_logits_rows(e, x, T - 1, 1, logits);
        }
        if (!st && sink) st = gpu_export_poll(e, &xr, l1 - 1, 1);
        if (e->n_loads) { /* the layers run_layers did not reach (cancelled, failed) */
            int sl = gpu_kv_loads_end(e);
            if (!st) st = sl;
        }
        st = gpu_finish(e, st);
        if (!st) prof_collect(e, 0);
        if (st) return st;
        float ms = 0;
        GPU_CHECK(cudaEventElapsedTime(&ms, e->ev_t0, e->ev_t1));
        e->stats.compute_ms += ms;
        done += T;
    }
    return ACCEL_OK;
}

int gpu_prefill(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n, float *logits,
                int all_logits, const accel_kv_sink *sink, enum proto_kv_dtype kv_dtype,
                const volatile int *cancel)
{
    return prefill_dense(e, kv, pos0, ids, n, logits, all_logits, sink, kv_dtype, cancel, 0,
                         e->d.L, NULL);
}

/* ---------------------------------------------------------------- layer-split (gpu_split.h) */

struct gpu_split {
    float *x;      /* (n, H) on the device */
    gpu_lend lend; /* x lent from the KV pool (lend.ptr), else cudaMalloc'ed */
    int n;
};

void gpu_split_free(gpu_engine *e, gpu_split *sp)
{
    if (!sp) return;
    if (sp->lend.ptr) gpu_pool_unlend(e, &sp->lend);
    else if (sp->x && cudaSetDevice(e->index) == cudaSuccess) cudaFree(sp->x);
    free(sp);
}

int gpu_prefill_layers(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                       float *logits, int all_logits, const accel_kv_sink *sink,
                       enum proto_kv_dtype kv_dtype, const volatile int *cancel,
                       const gpu_sparse_req *sr, accel_sparse_report *rep, int l0, int l1,
                       gpu_split **sp)
{
    gpu_split *c = *sp;
    if (n < 1 || l0 < 0 || l1 <= l0 || l1 > e->d.L) return ACCEL_ERR_INVALID;
    if (l0 == 0) { /* the residual stream from the KV pool, as the sparse workspace */
        gpu_split_free(e, c);
        *sp = c = (gpu_split *)calloc(1, sizeof *c);
        if (!c) return ACCEL_ERR_NOMEM;
        c->n = n;
        GPU_CHECK(cudaSetDevice(e->index));
        const size_t bytes = (size_t)n * e->d.H * sizeof(float);
        int st = gpu_pool_lend(e, bytes, &c->lend); /* UNSUPPORTED: no VMM, cudaMalloc */
        if (st == ACCEL_OK) c->x = (float *)c->lend.ptr;
        else if (st == ACCEL_ERR_UNSUPPORTED && cudaMalloc((void **)&c->x, bytes) != cudaSuccess)
            c->x = NULL, cudaGetLastError();
        if (!c->x) { /* NOMEM: admitted like KV (the caller gives room and calls again) */
            gpu_split_free(e, c);
            *sp = NULL;
            return st == ACCEL_ERR_UNSUPPORTED ? ACCEL_ERR_NOMEM : st;
        }
    } else if (!c || c->n != n) {
        return ACCEL_ERR_INVALID;
    }
    int st = sr ? gpu_prefill_sparse_layers(e, kv, pos0, ids, n, logits, all_logits, sink,
                                           kv_dtype, cancel, sr, rep, l0, l1, c->x)
                : prefill_dense(e, kv, pos0, ids, n, logits, all_logits, sink, kv_dtype, cancel,
                                l0, l1, c->x);
    if (st || l1 == e->d.L) {
        gpu_split_free(e, c);
        *sp = NULL;
    }
    return st;
}

/* The decode step for n sequences as a CUDA graph (captured at the first step with n sequences;
 * every launch parameter of the step depends on n only: positions, cache pointers and rope
 * tables are read from the metadata block on the device). NULL when capture is off or failed. */
static cudaGraphExec_t decode_graph(gpu_engine *e, int n, int cluster, int tls, const meta_ptrs &md,
                                    int norm_only)
{
    if (e->graphs_off || !e->dec_graph) return NULL;
    const int slot = (tls ? 2 : cluster) * (GPU_MAX_BATCH + 1) + n;
    if (e->dec_graph[slot]) return e->dec_graph[slot];
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    if (cudaStreamBeginCapture(e->compute, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        e->graphs_off = 1;
        return NULL;
    }
    int st = run_layers(e, decode_pass(n, cluster, tls), md);
    if (!st) st = logits_compute(e, e->x, 0, n, norm_only);
    if (!st) st = gpu_chain_stamp(e, 1);
    cudaError_t ce = cudaStreamEndCapture(e->compute, &g);
    if (tls) gpu_tls_capture_end(e);
    if (!st && ce == cudaSuccess) ce = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaGraphDestroy(g);
    if (st || ce != cudaSuccess) {
        /* not a device fault: decode goes on without graphs */
        fprintf(stderr, "tandem cuda: decode graph capture failed (%s); running without graphs\n",
                st ? accel_strerror(st) : cudaGetErrorString(ce));
        cudaGetLastError();
        e->graphs_off = 1;
        return NULL;
    }
    e->dec_graph[slot] = x;
    return x;
}

/* p is page-locked host memory the device can copy into (cudaHostAlloc'd or registered). */
static int host_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* The step's logits stay on the device (e->logits, n rows): each row's greedy token is taken
 * there, and only the rows asked for come back. The rows go into dst (page-locked: the caller's
 * buffer, or the staging copied out by the caller afterwards), in runs of consecutive rows. */
static int argmax_out(gpu_engine *e, int n, const unsigned char *want, float *dst)
{
    const gpu_dims &d = e->d;
    GPU_TRY(gpu_argmax_rows(e->compute, e->logits, n, d.V, e->argmax_d));
    GPU_CHECK(cudaMemcpyAsync(e->argmax_h, e->argmax_d, (size_t)n * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, e->compute));
    for (int i = 0; i < n;) {
        if (want && !want[i]) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < n && (!want || want[j])) j++;
        GPU_CHECK(cudaMemcpyAsync(dst + (size_t)i * d.V, e->logits + (size_t)i * d.V,
                                  (size_t)(j - i) * d.V * sizeof(float), cudaMemcpyDeviceToHost,
                                  e->compute));
        i = j;
    }
    return ACCEL_OK;
}

int gpu_decode_argmax_on(const gpu_engine *e)
{
    return e->argmax;
}

int gpu_decode(gpu_engine *e, int n, gpu_kv *const *kvs, const int *pos, const int32_t *ids,
               float *logits, const unsigned char *want, int32_t *argmax)
{
    const gpu_dims &d = e->d;
    if (n <= 0 || n > GPU_MAX_BATCH || n > e->t_max) return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(e->index));
    const int half = d.hd / 2;
    const int dynamic = e->m->cfg.rope.type == MODEL_ROPE_DYNAMIC;
    meta_fill mf = meta_plan(n, n, dynamic ? n + 1 : 1, half);
    meta_ptrs mh = meta_at(e->meta_h, mf), md = meta_at(e->meta_d, mf);
    inv_table(e, 0, mh.inv);
    for (int i = 0; i < n; i++)
        if (pos[i] < 0 || pos[i] >= kvs[i]->cap) return ACCEL_ERR_INVALID;
    /* every sequence's block for its new position (and the copy of a shared one), all or none */
    int ones[GPU_MAX_BATCH];
    for (int i = 0; i < n; i++) ones[i] = 1;
    GPU_TRY(gpu_kv_stage_reset(e));
    GPU_TRY(gpu_kv_reserve(e, n, kvs, pos, ones));
    /* AsyncTLS: the rows' modes, summaries brought up to date (queued before the step) */
    const int tls = gpu_tls_prepare(e, n, kvs, pos);
    if (tls < 0) return tls;
    for (int i = 0; i < n; i++) {
        mh.ids[i] = ids[i];
        mh.pos[i] = pos[i];
        mh.seq[i] = i;
        mh.tbl[i] = dynamic ? i + 1 : 0;
        mh.seqs[i] = seq_of(e, kvs[i]);
        if (!gpu_kv_off_seqs(kvs[i], NULL, &mh.seqs2[i])) mh.seqs2[i] = mh.seqs[i];
        if (dynamic) inv_table(e, pos[i] + 1, mh.inv + (size_t)(i + 1) * half);
    }
    struct timespec h0, h1;
    const int timed = e->ctrace && n == 1;
    if (timed) {
        clock_gettime(CLOCK_MONOTONIC, &h0);
        GPU_CHECK(cudaEventRecord(e->tev[0], e->compute));
    }
    const size_t lbytes = (size_t)n * d.V * sizeof(float);
    GPU_CHECK(cudaMemcpyAsync(e->meta_d, e->meta_h, mf.bytes, cudaMemcpyHostToDevice, e->compute));
    int st = ACCEL_OK, longest = 0;
    for (int i = 0; i < n; i++) longest = pos[i] + 1 > longest ? pos[i] + 1 : longest;
    /* one sequence only: in a batch the split form already has few ranges per row, and the
     * clusters' blocks outnumber its (slower at batch 8 and 32: gpu/KERNELS.md) */
    const int cluster = !tls && e->dec_cluster && n == 1 && longest <= e->dec_cluster_max;
    /* a batch's lm_head after the graph, in column chunks whose copies overlap the next chunk's
     * GEMM (logits_overlapped): a property of n and the settings, so each n's graph keeps it */
    const int chunks = n >= GPU_LOGIT_CHUNK_MIN ? e->logits_chunks : 1;
    cudaGraphExec_t g = decode_graph(e, n, cluster, tls, md, chunks > 1);
    /* a caller's page-locked buffer (accel_host_alloc) takes the copy directly */
    int wanted = !argmax || !want;
    for (int i = 0; i < n && !wanted; i++) wanted = want[i] != 0;
    const int direct = (g || argmax) && wanted && host_pinned(logits);
    if ((g || argmax) && wanted && !direct && lbytes > e->logits_h_bytes) {
        /* the logits come back through pinned memory: a device-to-host copy into the caller's
         * (pageable) buffer is staged by the driver, several times slower than a pinned copy
         * plus a host copy (gpu/KERNELS.md) */
        float *old = e->logits_h;
        e->logits_h = NULL;
        e->logits_h_bytes = 0;
        if (old) GPU_CHECK(cudaFreeHost(old));
        GPU_CHECK(cudaHostAlloc((void **)&e->logits_h, lbytes, cudaHostAllocDefault));
        e->logits_h_bytes = lbytes;
    }
    float *const dst = direct ? logits : e->logits_h;
    if (argmax) {
        /* the same logits as below (the same GEMMs, chunked alike), then the argmax */
        if (g) {
            GPU_CHECK(cudaGraphLaunch(g, e->compute));
            if (chunks > 1) st = logits_overlapped(e, n, chunks, NULL);
        } else {
            st = run_layers(e, decode_pass(n, cluster, tls), md);
            if (!st) st = logits_compute(e, e->x, 0, n); /* n <= GPU_MAX_BATCH = GPU_LOGIT_ROWS */
            prof_mark(e, P_LOGITS);
            if (!st) st = gpu_chain_stamp(e, 1);
        }
        if (!st) st = argmax_out(e, n, want, dst);
    } else if (g && chunks > 1) {
        GPU_CHECK(cudaGraphLaunch(g, e->compute));
        st = logits_overlapped(e, n, chunks, dst);
    } else if (g) {
        GPU_CHECK(cudaGraphLaunch(g, e->compute));
        if (timed) GPU_CHECK(cudaEventRecord(e->tev[1], e->compute));
        GPU_CHECK(cudaMemcpyAsync(dst, e->logits, lbytes, cudaMemcpyDeviceToHost, e->compute));
        if (timed) GPU_CHECK(cudaEventRecord(e->tev[2], e->compute));
    } else {
        st = run_layers(e, decode_pass(n, cluster, tls), md);
        if (!st) st = gpu_logits_rows(e, e->x, 0, n, logits);
        if (!st) st = gpu_chain_stamp(e, 1);
    }
    if (timed) clock_gettime(CLOCK_MONOTONIC, &h1);
    st = gpu_finish(e, st);
    if (argmax && !st) {
        memcpy(argmax, e->argmax_h, (size_t)n * sizeof(int32_t));
        for (int i = 0; i < n && !direct && wanted; i++)
            if (!want || want[i])
                memcpy(logits + (size_t)i * d.V, e->logits_h + (size_t)i * d.V, (size_t)d.V * sizeof(float));
    } else if (g && !direct && !st) {
        memcpy(logits, e->logits_h, lbytes);
    }
    if (timed && g && !argmax && !st) gpu_chain_step(e, &h0, &h1);
    if (!st) prof_collect(e, 1);
    return st;
}
