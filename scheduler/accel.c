/* scheduler/accel.c — the wrappers around every backend's accel_dev_i: bounds, memory
 * reservation, sequence lengths, sticky failure. See accel.h for the contract. */
#include "scheduler/accel_impl.h"
#include "model/sample/sample.h"
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

const char *accel_strerror(int st)
{
    switch ((enum accel_status)st) { /* over the enum: -Wswitch names a code left out */
    case ACCEL_OK: return "ok";
    case ACCEL_ERR_NOMEM: return "not enough device memory";
    case ACCEL_ERR_DEVICE: return "device failed";
    case ACCEL_ERR_INVALID: return "invalid argument";
    case ACCEL_ERR_TIMEOUT: return "device timed out";
    case ACCEL_ERR_UNSUPPORTED: return "not supported by this device";
    case ACCEL_ERR_CORRUPT: return "corrupt data";
    case ACCEL_ERR_CANCELLED: return "cancelled";
    case ACCEL_ERR_NOT_FOUND: return "no such device";
    }
    return "unknown device status";
}

const char *accel_kind_name(enum accel_kind k)
{
    switch (k) {
    case ACCEL_KIND_CPU: return "cpu";
    case ACCEL_KIND_CUDA: return "cuda";
    case ACCEL_KIND_FPGA: return "fpga";
    }
    return "?";
}

const char *accel_health_name(enum accel_health h)
{
    switch (h) {
    case ACCEL_HEALTH_OK: return "ok";
    case ACCEL_HEALTH_DEGRADED: return "degraded";
    case ACCEL_HEALTH_FAILED: return "failed";
    }
    return "?";
}

accel_opts accel_opts_kept(const accel_opts *o)
{
    accel_opts k = *o;
    k.lib_path = NULL;
    return k;
}

int accel_dev_fail(accel_dev *d)
{
    atomic_store(&d->health, ACCEL_HEALTH_FAILED);
    return ACCEL_ERR_DEVICE;
}

void accel_dev_revive(accel_dev *d)
{
    atomic_fetch_add(&d->revivals, 1);
    atomic_store(&d->health, ACCEL_HEALTH_OK);
}

void accel_dev_degrade(accel_dev *d)
{
    int ok = ACCEL_HEALTH_OK;
    atomic_compare_exchange_strong(&d->health, &ok, ACCEL_HEALTH_DEGRADED);
}

static int failed(accel_dev *d)
{
    return atomic_load(&d->health) == ACCEL_HEALTH_FAILED;
}

/* A device status from a backend: ACCEL_ERR_DEVICE makes the failure sticky. */
static int paged(const accel_dev *d)
{
    return d->kv_block_tokens > 0 && d->i->kv_usage;
}

static int track(accel_dev *d, int st)
{
    if (st == ACCEL_ERR_DEVICE) atomic_store(&d->health, ACCEL_HEALTH_FAILED);
    return st;
}

void accel_free(accel_dev *d)
{
    if (d) d->i->free(d);
}

const model *accel_model(accel_dev *d)
{
    return d->m;
}

void accel_get_info(accel_dev *d, accel_info *out)
{
    memset(out, 0, sizeof *out);
    out->max_batch = 1;
    d->i->describe(d, out);
    out->health = atomic_load(&d->health);
    out->revivals = atomic_load(&d->revivals);
    out->mem_total = d->mem_total;
    uint64_t r = atomic_load(&d->mem_reserved);
    out->mem_free = r < d->mem_total ? d->mem_total - r : 0;
    out->kv_bytes_per_token = d->kv_bytes_per_token;
    out->n_seqs = atomic_load(&d->n_seqs);
    if (d->i->kv_export) out->caps |= ACCEL_CAP_KV_EXPORT_HELD;
    if (paged(d)) {
        int total = 0, used = 0, cached = 0;
        d->i->kv_usage(d, &total, &used, &cached);
        out->caps |= ACCEL_CAP_PAGED;
        out->kv_block_tokens = d->kv_block_tokens;
        out->kv_block_bytes = (uint64_t)d->kv_block_tokens * d->kv_bytes_per_token;
        out->kv_blocks_total = total;
        out->kv_blocks_used = used;
        out->kv_blocks_cached = cached;
        out->n_holders = atomic_load(&d->n_holders);
        out->mem_total = (uint64_t)total * out->kv_block_bytes; /* whole blocks */
        int avail = total - used + cached;
        out->mem_free = avail > 0 ? (uint64_t)avail * out->kv_block_bytes : 0;
    }
}

uint64_t accel_kv_bytes(accel_dev *d, int capacity)
{
    return (uint64_t)(capacity > 0 ? capacity : 0) * d->kv_bytes_per_token;
}

int accel_seq_new(accel_dev *d, int capacity, accel_seq **out)
{
    *out = NULL;
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (capacity <= 0 || capacity > model_context_limit(&d->m->cfg)) return ACCEL_ERR_INVALID;
    uint64_t need = paged(d) ? 0 : accel_kv_bytes(d, capacity); /* paged: blocks as it grows */
    uint64_t cur = atomic_load(&d->mem_reserved);
    do {
        if (cur + need > d->mem_total) return ACCEL_ERR_NOMEM;
    } while (!atomic_compare_exchange_weak(&d->mem_reserved, &cur, cur + need));
    int st = track(d, d->i->seq_new(d, capacity, out));
    if (st != ACCEL_OK) {
        atomic_fetch_sub(&d->mem_reserved, need);
        *out = NULL;
        return st;
    }
    (*out)->len = 0;
    (*out)->capacity = capacity;
    (*out)->import_layers_done = 0;
    (*out)->holder = 0;
    (*out)->split_n = (*out)->split_next = 0;
    atomic_fetch_add(&d->n_seqs, 1);
    return ACCEL_OK;
}

/* A layer-split chunk of s in progress is abandoned: the backend frees its state. */
static void split_drop(accel_dev *d, accel_seq *s)
{
    if (!s || !s->split_n) return;
    if (d->i->split_drop) d->i->split_drop(d, s);
    s->split_n = s->split_next = 0;
}

void accel_seq_free(accel_dev *d, accel_seq *s)
{
    if (!s) return;
    uint64_t need = paged(d) ? 0 : accel_kv_bytes(d, s->capacity);
    int holder = s->holder;
    d->i->seq_free(d, s);
    atomic_fetch_sub(&d->mem_reserved, need);
    atomic_fetch_sub(holder ? &d->n_holders : &d->n_seqs, 1);
}

int accel_seq_fork(accel_dev *d, accel_seq *src, int n_tokens, int capacity, accel_seq **out)
{
    *out = NULL;
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!src || n_tokens < 0 || n_tokens > src->len || src->import_layers_done ||
        capacity < n_tokens || capacity < 1 || capacity > model_context_limit(&d->m->cfg))
        return ACCEL_ERR_INVALID;
    if (!d->i->seq_fork) return ACCEL_ERR_UNSUPPORTED;
    /* paged: the pool counts blocks (shared ones once); else counted in full */
    uint64_t need = paged(d) ? 0 : accel_kv_bytes(d, capacity);
    uint64_t cur = atomic_load(&d->mem_reserved);
    do {
        if (cur + need > d->mem_total) return ACCEL_ERR_NOMEM;
    } while (!atomic_compare_exchange_weak(&d->mem_reserved, &cur, cur + need));
    int st = track(d, d->i->seq_fork(d, src, n_tokens, capacity, out));
    if (st != ACCEL_OK) {
        atomic_fetch_sub(&d->mem_reserved, need);
        *out = NULL;
        return st;
    }
    (*out)->len = n_tokens;
    (*out)->capacity = capacity;
    (*out)->import_layers_done = 0;
    (*out)->holder = 0;
    (*out)->split_n = (*out)->split_next = 0;
    atomic_fetch_add(&d->n_seqs, 1);
    return ACCEL_OK;
}

int accel_seq_len(accel_dev *d, const accel_seq *s)
{
    (void)d;
    return s->len;
}

int accel_seq_truncate(accel_dev *d, accel_seq *s, int len)
{
    if (len < 0 || len > s->len) return ACCEL_ERR_INVALID;
    split_drop(d, s);
    if (d->i->seq_truncate) {
        int st = track(d, d->i->seq_truncate(d, s, len));
        if (st) return st;
    }
    s->len = len;
    return ACCEL_OK;
}

int accel_seq_hold(accel_dev *d, accel_seq *s)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!s || s->import_layers_done) return ACCEL_ERR_INVALID;
    if (!paged(d) || !d->i->seq_hold) return ACCEL_ERR_UNSUPPORTED;
    if (s->holder) return ACCEL_OK;
    int st = track(d, d->i->seq_hold(d, s));
    if (st == ACCEL_OK) {
        s->holder = 1;
        atomic_fetch_sub(&d->n_seqs, 1);
        atomic_fetch_add(&d->n_holders, 1);
    }
    return st;
}

int accel_kv_block_save(accel_dev *d, accel_seq *s, int block, void *dst)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!paged(d) || !d->i->kv_block_save) return ACCEL_ERR_UNSUPPORTED;
    if (!s || !dst || block < 0 || (int64_t)(block + 1) * d->kv_block_tokens > s->len)
        return ACCEL_ERR_INVALID;
    return track(d, d->i->kv_block_save(d, s, block, dst));
}

int accel_kv_block_load(accel_dev *d, accel_seq *s, const void *src)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!paged(d) || !d->i->kv_block_load) return ACCEL_ERR_UNSUPPORTED;
    if (!s || !src || s->holder || s->import_layers_done || s->len % d->kv_block_tokens ||
        d->kv_block_tokens > s->capacity - s->len)
        return ACCEL_ERR_INVALID;
    split_drop(d, s); /* the block lands where a pending chunk's partial KV lies */
    int st = track(d, d->i->kv_block_load(d, s, src));
    if (st == ACCEL_OK) s->len += d->kv_block_tokens;
    return st;
}

int accel_kv_export(accel_dev *d, accel_seq *s, int pos0, int n, const accel_kv_sink *sink)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!d->i->kv_export) return ACCEL_ERR_UNSUPPORTED;
    if (!s || !sink || !sink->layer || pos0 < 0 || n < 0 || n > s->len - pos0 ||
        s->import_layers_done)
        return ACCEL_ERR_INVALID;
    if (!n) return ACCEL_OK;
    return track(d, d->i->kv_export(d, s, pos0, n, sink));
}

int accel_seq_decode_sparse(accel_dev *d, accel_seq *s, const sparse_tls_params *p)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!s || s->holder) return ACCEL_ERR_INVALID;
    /* the caller's parameters, checked once for every backend */
    if (p && sparse_tls_params_check(p, 0, NULL, 0)) return ACCEL_ERR_INVALID;
    if (!d->i->seq_decode_sparse) return p ? ACCEL_ERR_UNSUPPORTED : ACCEL_OK;
    return track(d, d->i->seq_decode_sparse(d, s, p));
}

int accel_seq_decode_stats(accel_dev *d, accel_seq *s, accel_decode_stats *out)
{
    if (!out) return ACCEL_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!s) return ACCEL_ERR_INVALID;
    if (!d->i->seq_decode_stats) return ACCEL_ERR_UNSUPPORTED;
    return track(d, d->i->seq_decode_stats(d, s, out));
}

static int valid_ids(const model *m, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab) return 0;
    return 1;
}

int accel_prefill(accel_dev *d, const accel_prefill_req *r)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!r->seq || r->n <= 0 || !r->ids || r->seq->holder) return ACCEL_ERR_INVALID;
    if (r->n > r->seq->capacity - r->seq->len) return ACCEL_ERR_INVALID;
    if (!valid_ids(d->m, r->ids, r->n)) return ACCEL_ERR_INVALID;
    /* a sparse call's parameters, checked once for every backend */
    if (r->sparse && sparse_params_check(&r->sparse->p, NULL, 0, NULL)) return ACCEL_ERR_INVALID;
    const int L = d->m->cfg.n_layers;
    accel_seq *s = r->seq;
    if (r->layers == 0 || (r->layer0 == 0 && r->layers == L)) { /* a whole call */
        split_drop(d, s);
        accel_prefill_req w = *r;
        w.layer0 = w.layers = 0;
        int st = track(d, d->i->prefill(d, &w));
        if (st == ACCEL_OK) s->len += r->n;
        return st;
    }
    /* layer-split (accel.h): the range, and a continuation of the chunk in progress */
    if (r->layer0 < 0 || r->layers < 0 || r->layer0 >= L || r->layers > L - r->layer0)
        return ACCEL_ERR_INVALID;
    if (!d->i->split_drop) return ACCEL_ERR_UNSUPPORTED;
    if (r->layer0 == 0) split_drop(d, s);
    else if (s->split_n != r->n || s->split_next != r->layer0) return ACCEL_ERR_INVALID;
    int st = track(d, d->i->prefill(d, r));
    if (st != ACCEL_OK) {
        if (!s->split_n) s->split_n = r->n; /* whatever the call left is freed */
        split_drop(d, s);
        return st;
    }
    if (r->layer0 + r->layers == L) {
        s->split_n = s->split_next = 0; /* the backend freed it with the chunk complete */
        s->len += r->n;
    } else {
        s->split_n = r->n;
        s->split_next = r->layer0 + r->layers;
    }
    return st;
}

/* accel_decode's checks of its arguments (logits apart) */
static int decode_args_ok(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids)
{
    if (n <= 0 || !seqs || !ids) return 0;
    if (!valid_ids(d->m, ids, n)) return 0;
    for (int i = 0; i < n; i++)
        if (!seqs[i] || seqs[i]->holder || seqs[i]->len >= seqs[i]->capacity) return 0;
    /* a sequence twice in one step would have two tokens written at one position (and, on the
     * GPU with PDL, one token's attention could read the other's row while it is written) */
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (seqs[i] == seqs[j]) return 0;
    return 1;
}

int accel_decode_argmax(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                        float *logits, const unsigned char *want_logits, int32_t *argmax)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!logits || !argmax || !decode_args_ok(d, n, seqs, ids)) return ACCEL_ERR_INVALID;
    for (int i = 0; i < n; i++) split_drop(d, seqs[i]);
    if (d->i->decode_argmax) {
        /* a device may decline (ACCEL_ERR_UNSUPPORTED before doing anything: cuda's argmax=0) */
        int st = d->i->decode_argmax(d, n, seqs, ids, logits, want_logits, argmax);
        if (st != ACCEL_ERR_UNSUPPORTED) {
            st = track(d, st);
            if (st == ACCEL_OK)
                for (int i = 0; i < n; i++) seqs[i]->len++;
            return st;
        }
    }
    const int vocab = d->m->cfg.vocab;
    int st = accel_decode(d, n, seqs, ids, logits);
    if (st == ACCEL_OK)
        for (int i = 0; i < n; i++) argmax[i] = model_sample_argmax(logits + (size_t)i * vocab, vocab);
    return st;
}

int accel_decode(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids, float *logits)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!logits || !decode_args_ok(d, n, seqs, ids)) return ACCEL_ERR_INVALID;
    for (int i = 0; i < n; i++) split_drop(d, seqs[i]);
    int st = track(d, d->i->decode(d, n, seqs, ids, logits));
    if (st == ACCEL_OK)
        for (int i = 0; i < n; i++) seqs[i]->len++;
    return st;
}

void *accel_host_alloc(accel_dev *d, size_t bytes)
{
    if (!d || !bytes) return NULL;
    return d->i->host_alloc && d->i->host_free ? d->i->host_alloc(d, bytes) : malloc(bytes);
}

void accel_host_free(accel_dev *d, void *p)
{
    if (!p) return;
    if (d && d->i->host_alloc && d->i->host_free) d->i->host_free(d, p);
    else free(p);
}

static int kv_import(accel_dev *d, accel_seq *s, const proto_kv_layer *c, int has_crc,
                     uint32_t crc)
{
    const model_config *cfg = &d->m->cfg;
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!d->i->kv_import) return ACCEL_ERR_UNSUPPORTED;
    if (!c || c->layer < 0 || c->layer >= cfg->n_layers || c->n_tokens <= 0 ||
        c->n_kv_heads != cfg->n_kv_heads || c->head_dim != cfg->head_dim)
        return ACCEL_ERR_INVALID;
    /* Chunks of one run of positions arrive layer 0 .. L-1, each starting at the current length. */
    if (s->holder || c->pos0 != s->len || c->n_tokens > s->capacity - s->len)
        return ACCEL_ERR_INVALID;
    split_drop(d, s);
    if (c->layer != s->import_layers_done) return ACCEL_ERR_INVALID;
    if (c->layer > 0 && c->n_tokens != s->import_n) return ACCEL_ERR_INVALID;
    int st = track(d, has_crc && d->i->kv_import_crc ? d->i->kv_import_crc(d, s, c, crc)
                                                    : d->i->kv_import(d, s, c));
    if (st) return st;
    s->import_n = c->n_tokens;
    s->import_pos0 = c->pos0;
    if (++s->import_layers_done == cfg->n_layers) {
        s->import_layers_done = 0;
        s->len += c->n_tokens;
    }
    return ACCEL_OK;
}

int accel_kv_import(accel_dev *d, accel_seq *s, const proto_kv_layer *c)
{
    return kv_import(d, s, c, 0, 0);
}

int accel_kv_import_crc(accel_dev *d, accel_seq *s, const proto_kv_layer *c, uint32_t crc)
{
    return kv_import(d, s, c, 1, crc);
}

int accel_warmup(accel_dev *d)
{
    if (failed(d)) return ACCEL_ERR_DEVICE;
    if (!d->i->warmup) return ACCEL_OK;
    return track(d, d->i->warmup(d));
}

/* ---------------------------------------------------------------- the GPU's 16-bit format */

enum model_dtype accel_ckpt_dtype(const model *m)
{
    return m->cfg.n_layers > 0 && m->layers ? m->layers[0].wq.dtype : m->embed.dtype;
}

enum accel_gpu_half accel_gpu_half_resolve(const model *m, enum accel_gpu_half h)
{
    if (h != ACCEL_GPU_HALF_AUTO) return h;
    if (!m) return ACCEL_GPU_HALF_BF16;
    return accel_ckpt_dtype(m) == MODEL_DTYPE_BF16 ? ACCEL_GPU_HALF_BF16 : ACCEL_GPU_HALF_F16;
}

int accel_gpu_half_parse(const char *s, enum accel_gpu_half *out)
{
    static const enum accel_gpu_half all[] = {ACCEL_GPU_HALF_AUTO, ACCEL_GPU_HALF_BF16,
                                              ACCEL_GPU_HALF_F16};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, accel_gpu_half_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

const char *accel_gpu_half_name(enum accel_gpu_half h)
{
    switch (h) {
    case ACCEL_GPU_HALF_AUTO: return "auto";
    case ACCEL_GPU_HALF_BF16: return "bf16";
    case ACCEL_GPU_HALF_F16: return "fp16";
    }
    return "?";
}
