/* gpu/accel.c — the CUDA device behind accel.h: the vtable over the engine (gpu/gpu.h).
 * Loaded by devices/open.c with dlopen; gpu_plugin_open (gpu/plugin.h) is the one symbol it looks
 * up, and hands it the shared FlexPrefill rules, which this file calls through that table.
 * The accel wrappers do bounds and sequence lengths; the engine's block pool does the KV
 * accounting (a paged device, ACCEL_CAP_PAGED); this file maps each entry to the engine and
 * keeps the sequence -> block table link. */
#include "gpu/gpu.h"
#include "gpu/gpu_split.h"
#include "gpu/plugin.h"
#include "plugin_abi.h" /* $(BUILD)/: GPU_PLUGIN_ABI */
#include "scheduler/accel_impl.h"
#include "model/ckpt/tls_channels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gpu_seq {
    struct accel_seq base;
    gpu_kv *kv;
    gpu_split *split; /* a layer-split chunk in progress (gpu_split.h), else NULL */
} gpu_seq;

typedef struct gpu_dev {
    struct accel_dev base;
    gpu_engine *e;
    int index;
} gpu_dev;

static gpu_engine *eng(accel_dev *d)
{
    return ((gpu_dev *)d)->e;
}

static void gpu_dev_free(accel_dev *d)
{
    gpu_engine_free(eng(d));
    free(d);
}

static sparse_tls_params tls_default(const accel_dev *d, int *on);

static void gpu_dev_describe(accel_dev *d, accel_info *out)
{
    snprintf(out->name, sizeof out->name, "cuda:%d", ((gpu_dev *)d)->index);
    snprintf(out->desc, sizeof out->desc, "%s", gpu_engine_desc(eng(d)));
    out->kind = ACCEL_KIND_CUDA;
    out->caps = ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT |
                ACCEL_CAP_LAYER_SPLIT;
    if (gpu_decode_argmax_on(eng(d))) out->caps |= ACCEL_CAP_DECODE_ARGMAX;
    out->max_batch = GPU_MAX_BATCH;
    /* the decode cost by batch, the H200's measured curve scaled to this model's bytes and this
     * device's bandwidth (gpu/curve.h); none when the bandwidth is unknown */
    const model_config *c = &d->m->cfg;
    double w = gpu_curve_weight_bytes(c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                                      c->intermediate, c->vocab, 2);
    gpu_decode_curve(w, (double)gpu_engine_kv_bytes_per_token(eng(d)), gpu_engine_mem_bps(eng(d)),
                     GPU_MAX_BATCH, &out->decode_curve);
    /* AsyncTLS with offload=1 (gpu/tls_off.cu): a sparse sequence's layers past the dense ones go
     * to the pinned host pool at its first decode step; what stays is the dense layers' KV, the
     * summaries (sparse/tls.h's size per position: the GPU's is smaller) and the row cache; the
     * host tier: the pool taken at open, offload_per_token of it per position of capacity */
    int on = 0;
    sparse_tls_params p = tls_default(d, &on);
    uint64_t per_tok = 0;
    const uint64_t pool = gpu_tls_host_pool(eng(d), &per_tok, NULL);
    if (on && p.offload && pool) {
        const uint64_t kv = gpu_engine_kv_bytes_per_token(eng(d));
        const int dl = p.dense_layers < c->n_layers ? p.dense_layers : c->n_layers;
        out->offload_bytes = pool;
        out->offload_per_token = per_tok;
        out->offload_used = gpu_tls_host_pool_used(eng(d));
        out->resident_per_token = kv * (uint64_t)dl / (uint64_t)c->n_layers +
                                  sparse_tls_bytes_per_token(c->n_layers, c->n_kv_heads, c->head_dim,
                                                             p.channels, p.block_size);
        /* its row cache (gpu/tls_off.cu): per sparse layer and KV head, token_budget slots of a
         * K and a V row and a position (token budgets up to GPU_TLS_RC_MAX = 4096, gpu/tls.cuh),
         * charged per block of the default block budget: a sequence with the default budgets
         * commits it exactly */
        const uint64_t rc = p.token_budget <= 4096 ? (uint64_t)(c->n_layers - dl) * c->n_kv_heads *
                                                         (uint64_t)p.token_budget * (4ull * c->head_dim + 4)
                                                   : 0;
        out->resident_per_block = (rc + (uint64_t)p.block_budget + 1) / ((uint64_t)p.block_budget + 2);
        out->resident_default_blocks = p.block_budget;
        out->offload_any = 1;
    }
}

/* AsyncTLS: the device's defaults (accel_opts.decode_sparse), whether new sequences take them */
static sparse_tls_params tls_default(const accel_dev *d, int *on)
{
    sparse_tls_params p;
    int ch = 0;
    const char *spec = d->opts.decode_sparse ? d->opts.decode_sparse : getenv("TANDEM_DECODE_SPARSE");
    if (sparse_tls_parse(spec, d->m->cfg.head_dim, &p, on, &ch, NULL, 0)) *on = 0;
    return p;
}

static int gpu_dev_seq_new(accel_dev *d, int capacity, accel_seq **out)
{
    gpu_seq *s = calloc(1, sizeof *s);
    if (!s) return ACCEL_ERR_NOMEM;
    int st = gpu_kv_new(eng(d), capacity, &s->kv);
    if (st) {
        free(s);
        return st;
    }
    int on = 0;
    sparse_tls_params p = tls_default(d, &on);
    if (on && gpu_tls_available(eng(d)) && (st = gpu_kv_tls_set(eng(d), s->kv, &p))) {
        gpu_kv_free(eng(d), s->kv);
        free(s);
        return st;
    }
    *out = &s->base;
    return ACCEL_OK;
}

static void gpu_dev_seq_free(accel_dev *d, accel_seq *as)
{
    gpu_seq *s = (gpu_seq *)as;
    gpu_split_free(eng(d), s->split);
    gpu_kv_free(eng(d), s->kv);
    free(s);
}

static void gpu_dev_split_drop(accel_dev *d, accel_seq *as)
{
    gpu_seq *s = (gpu_seq *)as;
    gpu_split_free(eng(d), s->split);
    s->split = NULL;
}

static int gpu_dev_seq_fork(accel_dev *d, accel_seq *src, int n_tokens, int capacity,
                            accel_seq **out)
{
    gpu_seq *s = calloc(1, sizeof *s);
    if (!s) return ACCEL_ERR_NOMEM;
    int st = gpu_kv_fork(eng(d), ((gpu_seq *)src)->kv, n_tokens, capacity, &s->kv);
    if (st) {
        free(s);
        return st;
    }
    *out = &s->base;
    return ACCEL_OK;
}

static int gpu_dev_seq_truncate(accel_dev *d, accel_seq *s, int len)
{
    return gpu_kv_truncate(eng(d), ((gpu_seq *)s)->kv, len);
}

static void gpu_dev_kv_usage(accel_dev *d, int *total, int *used, int *cached)
{
    gpu_kv_usage(eng(d), total, used, cached);
}

static int gpu_dev_seq_hold(accel_dev *d, accel_seq *s)
{
    return gpu_kv_hold(eng(d), ((gpu_seq *)s)->kv);
}

static int gpu_dev_kv_block_save(accel_dev *d, accel_seq *s, int block, void *dst)
{
    return gpu_kv_block_save(eng(d), ((gpu_seq *)s)->kv, block, dst);
}

static int gpu_dev_kv_block_load(accel_dev *d, accel_seq *s, const void *src)
{
    return gpu_kv_block_load(eng(d), ((gpu_seq *)s)->kv, s->len, src);
}

static enum proto_kv_dtype export_dtype(accel_dev *d)
{
    return d->opts.kv_dtype ? d->opts.kv_dtype : PROTO_KV_INT8;
}

static int gpu_dev_kv_export(accel_dev *d, accel_seq *s, int pos0, int n, const accel_kv_sink *sink)
{
    return gpu_kv_export(eng(d), ((gpu_seq *)s)->kv, pos0, n, sink, export_dtype(d));
}


/* This sparse chunk's method on the GPU's kernels (1), or 0 when it runs dense: no sparse request
 * (the scheduler settled it, sparse/sparse.h), a sliding-window model, a shape the GPU kernels do
 * not cover (head_dim other than 64/128, over GPU_FLEX_MAX_HEADS heads or GPU_FLEX_MAX_TOKENS
 * keys, a chunk not starting on a 128-token block), FlexPrefill under two blocks in all or one in
 * the chunk, XAttention with a block other than 128 (the attention kernels' block); the report
 * then says dense. */
static int gpu_sparse_params(const accel_dev *d, const accel_prefill_req *r, gpu_sparse_req *gr)
{
    const accel_sparse *sp = r->sparse;
    const model_config *c = &d->m->cfg;
    const int pos0 = r->seq->len;
    if (!sp || c->sliding_window) return 0;
    if ((c->head_dim != 64 && c->head_dim != 128) || c->n_heads > GPU_FLEX_MAX_HEADS ||
        (int64_t)pos0 + r->n > GPU_FLEX_MAX_TOKENS || pos0 % GPU_FLEX_BS || r->n < 1)
        return 0;
    const sparse_params *p = &sp->p;
    memset(gr, 0, sizeof *gr);
    gr->mode = p->mode;
    const int bs = GPU_FLEX_BS;
    switch (p->mode) {
    case SPARSE_MODE_FLEX: {
        /* the estimate takes the chunk's last block over every key: two blocks in all, one in
         * the chunk (cpu/flex.h) */
        if (pos0 + r->n < 2 * bs || r->n < bs) return 0;
        const sparse_flex_params *fp = &p->flex;
        /* budgets in blocks of 128 as cpu/flex_index.c counts them: ceil(tokens / 128),
         * min_budget 0 meaning one token */
        gr->flex = (gpu_flex_params){
            .gamma = fp->gamma, .tau = fp->tau,
            .min_blocks = ((fp->min_budget > 0 ? fp->min_budget : 1) + bs - 1) / bs,
            .max_blocks = fp->max_budget > 0 ? (fp->max_budget + bs - 1) / bs : 0,
            .gqa_interleave = fp->gqa_interleave};
        return 1;
    }
    case SPARSE_MODE_XATTN:
        if (p->xattention_block_size != bs) return 0;
        gr->xattn = (gpu_xattn_params){.threshold = p->xattention_threshold,
                                       .block = bs,
                                       .stride = p->xattention_stride,
                                       .official_chunk = 0,
                                       .gqa_interleave = 0};
        return 1;
    case SPARSE_MODE_TRISHAPE: {
        int lo, hi;
        sparse_tri_skip(p, pos0, &lo, &hi);
        gr->tri_lo = lo / SPARSE_TRI_BLOCK;
        gr->tri_hi = hi / SPARSE_TRI_BLOCK;
        return 1;
    }
    default:
        return 0;
    }
}

static int gpu_dev_prefill(accel_dev *d, const accel_prefill_req *r)
{
    gpu_seq *s = (gpu_seq *)r->seq;
    if (r->sparse_report) {
        memset(r->sparse_report, 0, sizeof *r->sparse_report);
        r->sparse_report->density = 1.0;
    }
    gpu_sparse_req gr;
    int sparse = gpu_sparse_params(d, r, &gr);
    if (sparse < 0) return sparse;
    if (r->layers > 0) /* layer-split (the wrapper checked the range and the chunk) */
        return gpu_prefill_layers(eng(d), s->kv, s->base.len, r->ids, r->n, r->logits,
                                  r->all_logits, r->kv, export_dtype(d), r->cancel,
                                  sparse ? &gr : NULL, sparse ? r->sparse_report : NULL,
                                  r->layer0, r->layer0 + r->layers, &s->split);
    if (sparse)
        return gpu_prefill_sparse(eng(d), s->kv, s->base.len, r->ids, r->n, r->logits,
                                  r->all_logits, r->kv, export_dtype(d), r->cancel, &gr,
                                  r->sparse_report);
    return gpu_prefill(eng(d), s->kv, s->base.len, r->ids, r->n, r->logits, r->all_logits, r->kv,
                       export_dtype(d), r->cancel);
}

static int gpu_dev_decode_argmax(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                                 float *logits, const unsigned char *want, int32_t *argmax)
{
    gpu_kv *kvs[GPU_MAX_BATCH];
    int pos[GPU_MAX_BATCH];
    if (n > GPU_MAX_BATCH) return ACCEL_ERR_INVALID;
    int st = gpu_kv_loads_settle(eng(d)); /* host-tier loads made first (no-op without) */
    if (st) return st;
    for (int i = 0; i < n; i++) {
        kvs[i] = ((gpu_seq *)seqs[i])->kv;
        pos[i] = seqs[i]->len;
    }
    return gpu_decode(eng(d), n, kvs, pos, ids, logits, want, argmax);
}

static int gpu_dev_decode(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                          float *logits)
{
    return gpu_dev_decode_argmax(d, n, seqs, ids, logits, NULL, NULL);
}

/* accel_decode_argmax: declined with argmax=0 (the wrapper then takes the host's argmax) */
static int gpu_dev_decode_argmax_entry(accel_dev *d, int n, accel_seq *const *seqs,
                                       const int32_t *ids, float *logits,
                                       const unsigned char *want, int32_t *argmax)
{
    if (!gpu_decode_argmax_on(eng(d))) return ACCEL_ERR_UNSUPPORTED;
    return gpu_dev_decode_argmax(d, n, seqs, ids, logits, want, argmax);
}

static int gpu_dev_seq_decode_sparse(accel_dev *d, accel_seq *s, const sparse_tls_params *p)
{
    int st = gpu_kv_loads_settle(eng(d)); /* host-tier loads made first */
    if (st) return st;
    return gpu_kv_tls_set(eng(d), ((gpu_seq *)s)->kv, p);
}

static int gpu_dev_seq_decode_stats(accel_dev *d, accel_seq *s, accel_decode_stats *out)
{
    gpu_tls_stats t;
    int st = gpu_kv_tls_stats(eng(d), ((gpu_seq *)s)->kv, &t);
    if (st) return st;
    *out = (accel_decode_stats){.keys_read = t.keys_read, .keys_total = t.keys_total,
                                .blocks_new = t.blocks_new, .blocks_kept = t.blocks_kept,
                                .steps = t.steps, .host_keys = t.host_keys,
                                .offloaded = t.offloaded};
    return ACCEL_OK;
}

static int gpu_dev_kv_import(accel_dev *d, accel_seq *as, const proto_kv_layer *c)
{
    return gpu_kv_import(eng(d), ((gpu_seq *)as)->kv, c);
}

/* A one-token prefill and a decode step on a scratch sequence, then a full sync: the first
 * launch of every kernel family (module load, cuBLAS heuristics) happens here, and any
 * asynchronous fault surfaces before the device is declared ready. */
static int gpu_dev_warmup(accel_dev *d)
{
    accel_seq *s;
    int st = accel_seq_new(d, 2, &s);
    if (st) return st;
    int32_t id = d->m->cfg.bos_id >= 0 ? d->m->cfg.bos_id : 0;
    float *lg = malloc((size_t)d->m->cfg.vocab * sizeof(float));
    accel_prefill_req r = {.seq = s, .ids = &id, .n = 1, .logits = lg};
    st = lg ? accel_prefill(d, &r) : ACCEL_ERR_NOMEM;
    if (!st) st = accel_decode(d, 1, &s, &id, lg);
    if (!st) st = gpu_engine_sync(eng(d));
    free(lg);
    accel_seq_free(d, s);
    return st;
}

static void *gpu_dev_host_alloc(accel_dev *d, size_t bytes)
{
    return gpu_host_alloc(eng(d), bytes);
}

static void gpu_dev_host_free(accel_dev *d, void *p)
{
    gpu_host_free(eng(d), p);
}

static const struct accel_dev_i gpu_i = {
    .free = gpu_dev_free,
    .describe = gpu_dev_describe,
    .seq_new = gpu_dev_seq_new,
    .seq_free = gpu_dev_seq_free,
    .prefill = gpu_dev_prefill,
    .decode = gpu_dev_decode,
    .kv_import = gpu_dev_kv_import,
    .warmup = gpu_dev_warmup,
    .seq_truncate = gpu_dev_seq_truncate,
    .host_alloc = gpu_dev_host_alloc,
    .host_free = gpu_dev_host_free,
    .seq_fork = gpu_dev_seq_fork,
    .kv_usage = gpu_dev_kv_usage,
    .seq_hold = gpu_dev_seq_hold,
    .kv_block_save = gpu_dev_kv_block_save,
    .kv_block_load = gpu_dev_kv_block_load,
    .kv_export = gpu_dev_kv_export,
    .seq_decode_sparse = gpu_dev_seq_decode_sparse,
    .seq_decode_stats = gpu_dev_seq_decode_stats,
    .decode_argmax = gpu_dev_decode_argmax_entry,
    .split_drop = gpu_dev_split_drop,
};

const char gpu_plugin_abi[] = GPU_PLUGIN_ABI;

/* AsyncTLS on the engine: accel_opts.decode_sparse (or $TANDEM_DECODE_SPARSE) gives the defaults
 * and turns it on for every sequence; the channel file (accel_opts.sparse_channels, else
 * <model dir>/tandem-channels.bin) makes it available per sequence even when off. With it on
 * and no usable file the open fails with the reason; off and no file: dense only (a request
 * asking for it decodes dense). */
static int tls_setup(gpu_engine *e, const model *m, const accel_opts *o, int index, char *err,
                     size_t errlen)
{
    const char *spec = o->decode_sparse ? o->decode_sparse : getenv("TANDEM_DECODE_SPARSE");
    sparse_tls_params p;
    int on = 0, chan_set = 0;
    char why[300];
    if (sparse_tls_parse(spec, m->cfg.head_dim, &p, &on, &chan_set, why, sizeof why)) {
        snprintf(err, errlen, "cuda:%d: %s", index, why);
        return -1;
    }
    char path[4200];
    if (o->sparse_channels) snprintf(path, sizeof path, "%s", o->sparse_channels);
    else if (m->dir[0]) model_channels_path(m->dir, path, sizeof path);
    else path[0] = 0;
    model_channels ch;
    memset(&ch, 0, sizeof ch);
    if (!path[0] || model_channels_load(path, &ch, why, sizeof why)) {
        if (!on) return 0;
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls needs the channel file (tandem "
                              "calibrate-channels --model DIR writes it): %s", index,
                 path[0] ? why : "no model directory");
        return -1;
    }
    int st = 0;
    if (model_channels_match(&ch, &m->cfg, why, sizeof why)) {
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls: %s: %s", index, path, why);
        st = -1;
    } else if (chan_set && p.channels != ch.r) {
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls: channels=%d but %s holds %d",
                 index, p.channels, path, ch.r);
        st = -1;
    } else {
        p.channels = ch.r;
        if (gpu_tls_open(e, &p, on, ch.idx, err, errlen)) st = on ? -1 : 0;
    }
    model_channels_free(&ch);
    return st;
}

accel_dev *gpu_plugin_open(int index, const model *m, const accel_opts *o,
                           const gpu_plugin_host *host, char *err, size_t errlen)
{
    if (!host) {
        snprintf(err, errlen, "cuda:%d: no host table", index);
        return NULL;
    }
    if (o->kv_dtype && o->kv_dtype != PROTO_KV_INT8 && o->kv_dtype != PROTO_KV_INT4) {
        snprintf(err, errlen, "cuda:%d: unknown KV dtype %d", index, (int)o->kv_dtype);
        return NULL;
    }
    gpu_tuning t; /* read once, here: the daemon's gpu_tune, else $TANDEM_GPU_TUNE */
    if (gpu_tuning_read(&t, o->gpu_tune, err, errlen)) return NULL;
    gpu_engine *e = gpu_engine_new(index, m, o->mem_limit, &t, err, errlen);
    if (!e) return NULL;
    if (tls_setup(e, m, o, index, err, errlen)) {
        gpu_engine_free(e);
        return NULL;
    }
    gpu_dev *d = calloc(1, sizeof *d);
    if (!d) {
        gpu_engine_free(e);
        snprintf(err, errlen, "cuda:%d: out of host memory", index);
        return NULL;
    }
    d->base.i = &gpu_i;
    d->base.m = m;
    d->base.opts = accel_opts_kept(o);
    /* the pool's whole blocks (ACCEL_CAP_PAGED: kv_blocks_total = mem_total / kv_block_bytes) */
    int total, used, cached;
    gpu_kv_usage(e, &total, &used, &cached);
    d->base.mem_total = (uint64_t)total * gpu_kv_block_bytes(e);
    d->base.kv_bytes_per_token = gpu_engine_kv_bytes_per_token(e);
    d->base.kv_block_tokens = GPU_KV_BLOCK; /* paged (ACCEL_CAP_PAGED): gpu/kv_pool.cu */
    d->e = e;
    d->index = index;
    return &d->base;
}

/* For benchmarks (tools/bench_gpu.c finds it with dlsym): the export counters of the last
 * prefill on this device. d must come from gpu_plugin_open. */
void gpu_accel_export_stats(accel_dev *d, gpu_export_stats *out)
{
    gpu_engine_export_stats(eng(d), out);
}

/* For benchmarks: device bytes a sparse prefill of n tokens takes beyond dense prefill's
 * (gpu_sparse_bytes), with (sink 1) or without the KV export. */
uint64_t gpu_accel_sparse_bytes(accel_dev *d, int n, int sink)
{
    return gpu_sparse_bytes(eng(d), n, sink, export_dtype(d));
}
