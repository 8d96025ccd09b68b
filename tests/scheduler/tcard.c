/* tests/scheduler/tcard.c — see tcard.h. */
#include "tests/scheduler/tcard.h"
#include "scheduler/accel_impl.h"
#include "cpu/backend.h"
#include "cpu/kv_quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct tcard {
    struct accel_dev base;
    accel_dev *inner;
    int index;
    tcard_faults f;
    int imports, decodes, prefills;
} tcard;

typedef struct tseq {
    struct accel_seq base;
    accel_seq *inner;
} tseq;

static void t_free(accel_dev *d)
{
    tcard *c = (tcard *)d;
    accel_free(c->inner);
    free(c);
}

static void t_describe(accel_dev *d, accel_info *out)
{
    tcard *c = (tcard *)d;
    if (c->f.curve) out->decode_curve = *c->f.curve;
    if (c->f.gpu) {
        snprintf(out->name, sizeof out->name, "tgpu:%d", c->index);
        snprintf(out->desc, sizeof out->desc, "test GPU (CPU arithmetic)");
        out->kind = ACCEL_KIND_CUDA;
        out->caps = ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT;
        out->max_batch = 256;
        return;
    }
    snprintf(out->name, sizeof out->name, "tcard:%d", c->index);
    snprintf(out->desc, sizeof out->desc, "test card (CPU arithmetic on imported int8 KV)");
    out->kind = ACCEL_KIND_FPGA;
    out->caps = ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT;
    out->max_batch = c->f.max_batch > 0 ? c->f.max_batch : 1;
}

static int t_seq_new(accel_dev *d, int capacity, accel_seq **out)
{
    tcard *c = (tcard *)d;
    if (c->f.seq_new_ms > 0) {
        struct timespec ts = {0, (long)(c->f.seq_new_ms * 1e6)};
        nanosleep(&ts, NULL);
    }
    tseq *s = calloc(1, sizeof *s);
    if (!s) return ACCEL_ERR_NOMEM;
    int st = accel_seq_new(c->inner, capacity, &s->inner);
    if (st) {
        free(s);
        return st;
    }
    *out = &s->base;
    return ACCEL_OK;
}

static void t_seq_free(accel_dev *d, accel_seq *s)
{
    tcard *c = (tcard *)d;
    accel_seq_free(c->inner, ((tseq *)s)->inner);
    free(s);
}

static int t_prefill(accel_dev *d, const accel_prefill_req *r)
{
    tcard *c = (tcard *)d;
    if (!c->f.gpu) return ACCEL_ERR_UNSUPPORTED;
    if (++c->prefills == c->f.prefill_fault_at) return ACCEL_ERR_DEVICE;
    accel_prefill_req in = *r;
    in.seq = ((tseq *)r->seq)->inner;
    return accel_prefill(c->inner, &in);
}

static int t_decode(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids, float *logits)
{
    tcard *c = (tcard *)d;
    c->decodes++;
    if (c->f.decode_ms > 0) {
        struct timespec ts = {0, (long)(c->f.decode_ms * 1e6)};
        nanosleep(&ts, NULL);
    }
    if (c->f.decode_fault_at && c->decodes >= c->f.decode_fault_at) return ACCEL_ERR_DEVICE;
    if (c->f.decode_timeout_at && c->decodes == c->f.decode_timeout_at) {
        accel_dev_degrade(d);
        return ACCEL_ERR_TIMEOUT;
    }
    for (int i = 0; i < n; i++) {
        accel_seq *in = ((tseq *)seqs[i])->inner;
        int st = accel_decode(c->inner, 1, &in, ids + i, logits + (size_t)i * d->m->cfg.vocab);
        if (st) return st;
    }
    return ACCEL_OK;
}

/* The card keeps its KV at 4 bits (proto/kv.h int4, groups of 32): the imported int8 chunk is
 * dequantized and quantized again, so that this device's numerics — and its text — differ from
 * the CPU's, as a real card's do. */
static int t_import(accel_dev *d, accel_seq *s, const proto_kv_layer *chunk)
{
    tcard *c = (tcard *)d;
    if (++c->imports == c->f.import_corrupt_at) return ACCEL_ERR_CORRUPT;
    if (c->f.gpu) return accel_kv_import(c->inner, ((tseq *)s)->inner, chunk);
    int n = chunk->n_tokens, h = chunk->n_kv_heads, hd = chunk->head_dim;
    size_t nf = (size_t)n * h * hd;
    float *k = malloc(sizeof(float) * nf * 2);
    size_t cap = cpu_kv_layer_bytes(PROTO_KV_INT4, n, h, hd);
    uint64_t *buf = malloc(cap + 8);
    int st = ACCEL_ERR_NOMEM;
    proto_kv_layer q4;
    if (k && buf && !cpu_kv_dequantize(chunk->dtype, chunk->k, chunk->k_scale, n, h, hd, k) &&
        !cpu_kv_dequantize(chunk->dtype, chunk->v, chunk->v_scale, n, h, hd, k + nf) &&
        !cpu_kv_quantize_layer(PROTO_KV_INT4, k, k + nf, chunk->layer, chunk->pos0, n, h, hd, buf,
                               cap, &q4))
        st = accel_kv_import(c->inner, ((tseq *)s)->inner, &q4);
    free(k);
    free(buf);
    return st;
}

static const struct accel_dev_i tcard_i = {
    .free = t_free,
    .describe = t_describe,
    .seq_new = t_seq_new,
    .seq_free = t_seq_free,
    .prefill = t_prefill,
    .decode = t_decode,
    .kv_import = t_import,
};

accel_dev *tcard_open(int index, const model *m, const tcard_faults *f, char *err, size_t errlen)
{
    tcard *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    accel_opts o = {.threads = 1, .mem_limit = f ? f->mem_limit : 0};
    c->inner = cpu_accel_open(0, m, &o, err, errlen);
    if (!c->inner) {
        free(c);
        return NULL;
    }
    c->base.i = &tcard_i;
    c->base.m = m;
    c->base.opts = o;
    c->base.mem_total = c->inner->mem_total;
    c->base.kv_bytes_per_token = c->inner->kv_bytes_per_token;
    c->index = index;
    if (f) c->f = *f;
    return &c->base;
}
