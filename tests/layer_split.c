/* tests/layer_split.c — layer-split prefill against whole calls on any device (layer_split.h). */
#include "tests/layer_split.h"
#include "tests/util.h"
#include "tests/test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ls_stream {
    unsigned char *b;
    size_t n, cap;
} ls_stream;

typedef struct ls_result {
    float *logits;      /* (n, V): every row */
    float *next;        /* (V): the decode step after the prompt */
    ls_stream sink, kv; /* the KV chunks exported during the prefill; accel_kv_export after it */
    double density;     /* the sparse reports summed over the calls */
} ls_result;

static int put(ls_stream *s, const void *p, size_t n)
{
    if (s->n + n > s->cap) {
        size_t cap = (s->n + n) * 2;
        unsigned char *b = realloc(s->b, cap);
        if (!b) return -1;
        s->b = b;
        s->cap = cap;
    }
    memcpy(s->b + s->n, p, n);
    s->n += n;
    return 0;
}

static int sink_layer(void *ctx, const proto_kv_layer *c)
{
    ls_stream *s = ctx;
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t sc = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim) * 2;
    int hdr[3] = {c->layer, c->pos0, c->n_tokens};
    return put(s, hdr, sizeof hdr) || put(s, c->k, vb) || put(s, c->v, vb) ||
                   put(s, c->k_scale, sc) || put(s, c->v_scale, sc)
               ? ACCEL_ERR_NOMEM
               : ACCEL_OK;
}

static void ls_result_free(ls_result *r)
{
    free(r->logits);
    free(r->next);
    free(r->sink.b);
    free(r->kv.b);
}

/* ids prefilled in chunks of `chunk` tokens (0: whole), each chunk in calls of k layers (0: whole
 * calls), then the KV exported and one decode step (ls_check_split); 0, or -1 on a failure
 * (reported on stderr). */
static int ls_run(accel_dev *d, const int32_t *ids, int n, int chunk, int k, const accel_sparse *sp,
                  ls_result *out)
{
    const model *m = accel_model(d);
    const int V = m->cfg.vocab, L = m->cfg.n_layers;
    memset(out, 0, sizeof *out);
    out->logits = malloc(sizeof(float) * (size_t)n * V);
    out->next = malloc(sizeof(float) * V);
    accel_seq *s;
    if (!out->logits || !out->next || accel_seq_new(d, n + 8, &s)) return -1;
    accel_kv_sink sink = {sink_layer, &out->sink};
    int64_t comp = 0, causal = 0;
    int st = 0;
    for (int done = 0; !st && done < n;) {
        int c = chunk && chunk < n - done ? chunk : n - done;
        float *lg = out->logits + (size_t)done * V;
        for (int l0 = 0; !st && l0 < L;) {
            int nl = k && k < L - l0 ? k : L - l0;
            accel_sparse_report rep = {0};
            /* the logits are written only by the call of the last layer: a marker elsewhere */
            lg[0] = -12345.f;
            accel_prefill_req r = {.seq = s, .ids = ids + done, .n = c, .logits = lg,
                                   .all_logits = 1, .kv = &sink, .sparse = sp,
                                   .sparse_report = &rep, .layer0 = k ? l0 : 0,
                                   .layers = k ? nl : 0};
            st = accel_prefill(d, &r);
            if (st) fprintf(stderr, "  prefill at %d layers %d+%d: %s\n", done, l0, nl, accel_strerror(st));
            comp += rep.blocks_computed;
            causal += rep.blocks_causal;
            l0 += nl;
            if (!st && l0 < L && (accel_seq_len(d, s) != done || lg[0] != -12345.f)) {
                fprintf(stderr, "  a partial call moved the length or wrote logits\n");
                st = -1;
            }
        }
        if (!st && accel_seq_len(d, s) != done + c) st = -1;
        done += c;
    }
    accel_kv_sink all = {sink_layer, &out->kv};
    if (!st) st = accel_kv_export(d, s, 0, n, &all);
    int32_t tok = t_argmax(out->logits + (size_t)(n - 1) * V, V);
    if (!st) st = accel_decode(d, 1, &s, &tok, out->next);
    accel_seq_free(d, s);
    out->density = causal ? (double)comp / causal : 1.0;
    return st ? -1 : 0;
}

/* Every output of a and b equal, bit for bit. */
static int ls_same(const ls_result *a, const ls_result *b, int n, int V)
{
    return t_max_abs_diff(a->logits, b->logits, (size_t)n * V) == 0 &&
           t_max_abs_diff(a->next, b->next, (size_t)V) == 0 && a->sink.n == b->sink.n &&
           !memcmp(a->sink.b, b->sink.b, a->sink.n) && a->kv.n == b->kv.n &&
           !memcmp(a->kv.b, b->kv.b, a->kv.n) && a->density == b->density;
}

double ls_check_split(accel_dev *d, const int32_t *ids, int n, int chunk, const accel_sparse *sp)
{
    const int V = accel_model(d)->cfg.vocab;
    const char *name = sp ? sparse_mode_name(sp->p.mode) : "dense";
    ls_result whole, split;
    if (ls_run(d, ids, n, chunk, 0, sp, &whole)) {
        t_fail(__FILE__, __LINE__, "%s chunk %d: the whole calls failed", name, chunk);
        ls_result_free(&whole);
        return -1;
    }
    if (sp) fprintf(stderr, "  %s density %.3f (chunks of %d)\n", name, whole.density, chunk);
    const int ks[2] = {1, 3};
    double density = whole.density;
    for (int i = 0; i < 2 && density >= 0; i++) {
        if (ls_run(d, ids, n, chunk, ks[i], sp, &split)) {
            t_fail(__FILE__, __LINE__, "%s chunk %d, %d layers a call: failed", name, chunk, ks[i]);
            density = -1;
        } else {
            CHECK_MSG(ls_same(&whole, &split, n, V), "%s chunk %d, %d layers a call: differs", name,
                      chunk, ks[i]);
        }
        ls_result_free(&split);
    }
    ls_result_free(&whole);
    return density;
}
