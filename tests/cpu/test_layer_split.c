/* Layer-split prefill on the CPU backend (accel_prefill_req.layer0 / layers, ACCEL_CAP_LAYER_SPLIT):
 * a chunk's layers spread over several calls gives whole calls' results bit for bit.
 *  - dense and each sparse method (FlexPrefill, XAttention, Tri-shape, each actually sparse),
 *    chunks of one block and the whole prompt, k = 1 and 3 of 5 layers per call (3 + 2) against
 *    whole calls (k = all): the
 *    same logits (every row), the same KV (accel_kv_export of the whole prompt), the same stream
 *    of KV chunks through a sink, the same density, and the same decode step after it;
 *  - the length grows only with the call that runs the last layer, logits are written only there;
 *  - a continuation that does not match the chunk in progress is refused;
 *  - a cancel between layers abandons the chunk (length unchanged, the chunk prefills again from
 *    layer 0 to the same bits); truncate, a decode step and free of a sequence mid-split leave
 *    no blocks behind. */
#include "tests/test.h"
#include "tests/util.h"
#include "cpu/backend.h"
#include "tests/cpu/layer_split.h"
#include <stdlib.h>
#include <string.h>

#define SPLIT_LAYERS 5

static int mk(char *dir, size_t n)
{
    char cmd[1024];
    snprintf(dir, n, "%s/m", t_tmpdir());
    snprintf(cmd, sizeof cmd, "%s/mkmodel --preset tiny-gqa --layers %d --shards 1 --out %s",
             t_build_dir(), SPLIT_LAYERS, dir);
    return system(cmd);
}

/* every KV chunk a prefill exports, appended in the order it came */
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

void ls_result_free(ls_result *r)
{
    free(r->logits);
    free(r->next);
    free(r->sink.b);
    free(r->kv.b);
}

int ls_run(accel_dev *d, const int32_t *ids, int n, int chunk, int k, const accel_sparse *sp,
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

int ls_same(const ls_result *a, const ls_result *b, int n, int V)
{
    return t_max_abs_diff(a->logits, b->logits, (size_t)n * V) == 0 &&
           t_max_abs_diff(a->next, b->next, (size_t)V) == 0 && a->sink.n == b->sink.n &&
           !memcmp(a->sink.b, b->sink.b, a->sink.n) && a->kv.n == b->kv.n &&
           !memcmp(a->kv.b, b->kv.b, a->kv.n) && a->density == b->density;
}

TEST(cpu_layer_split_equals_whole_calls_dense_and_sparse)
{
    char dir[512];
    REQUIRE(mk(dir, sizeof dir) == 0);
    model *m;
    accel_dev *d;
    REQUIRE(t_open(dir, "cpu", &m, &d) == 0);
    REQUIRE(m->cfg.n_layers == SPLIT_LAYERS);
    accel_info info;
    accel_get_info(d, &info);
    CHECK(info.caps & ACCEL_CAP_LAYER_SPLIT);
    const int n = 384, V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    accel_sparse meth[3];
    meth[0] = t_flex_sparse(0.3f, 0.0f, 0, 0, -1);
    sparse_params_default(&meth[1].p, SPARSE_MODE_XATTN);
    meth[1].p.xattention_block_size = 32;
    meth[1].p.xattention_stride = 4;
    meth[1].p.xattention_threshold = 0.5;
    sparse_params_default(&meth[2].p, SPARSE_MODE_TRISHAPE);
    meth[2].p.num_retained_start_tokens_in_cache = 128;
    meth[2].p.num_retained_recent_tokens_in_cache = 0;
    for (int mth = -1; mth < 3; mth++) {
        const accel_sparse *sp = mth < 0 ? NULL : &meth[mth];
        const int bs = sp ? sparse_block_size(&sp->p) : 64;
        const int chunks[2] = {bs, 0};
        for (int c = 0; c < 2; c++) {
            ls_result whole, split;
            REQUIRE(ls_run(d, ids, n, chunks[c], 0, sp, &whole) == 0);
            if (sp)
                fprintf(stderr, "  %s density %.3f (chunks of %d)\n", sparse_mode_name(mth),
                        whole.density, chunks[c]);
            /* actually sparse where the method skips anything at these chunks */
            if (sp && (chunks[c] || mth != SPARSE_MODE_TRISHAPE)) CHECK(whole.density < 1.0);
            /* (k = all layers is a whole call: the reference) */
            const int ks[2] = {1, 3};
            for (int i = 0; i < 2; i++) {
                REQUIRE(ls_run(d, ids, n, chunks[c], ks[i], sp, &split) == 0);
                CHECK_MSG(ls_same(&whole, &split, n, V), "%s chunk %d, %d layers a call: differs",
                          sp ? sparse_mode_name(mth) : "dense", chunks[c], ks[i]);
                ls_result_free(&split);
            }
            ls_result_free(&whole);
        }
    }
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(cpu_layer_split_cancel_truncate_free)
{
    char dir[512];
    REQUIRE(mk(dir, sizeof dir) == 0);
    model *m;
    accel_dev *d;
    REQUIRE(t_open(dir, "cpu", &m, &d) == 0);
    const int n = 256, c = 128, V = m->cfg.vocab;
    int32_t ids[256];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 13 + 7) % V);
    float *ref = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
    REQUIRE(ref && lg);
    accel_seq *s;
    /* the reference: two whole calls */
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    accel_prefill_req w = {.seq = s, .ids = ids, .n = c};
    REQUIRE(accel_prefill(d, &w) == 0);
    w.ids = ids + c;
    w.logits = ref;
    REQUIRE(accel_prefill(d, &w) == 0);
    accel_seq_free(d, s);

    REQUIRE(accel_seq_new(d, n, &s) == 0);
    REQUIRE(accel_prefill(d, &(accel_prefill_req){.seq = s, .ids = ids, .n = c}) == 0);
    /* the second chunk: layers 0-1, then a mismatched continuation, then a cancelled one */
    accel_prefill_req r = {.seq = s, .ids = ids + c, .n = c, .logits = lg, .layer0 = 0, .layers = 2};
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(accel_seq_len(d, s), c);
    accel_prefill_req bad = r;
    bad.layer0 = 3;
    CHECK_EQ(accel_prefill(d, &bad), ACCEL_ERR_INVALID);
    bad = r;
    bad.layer0 = 2;
    bad.n = c - 1;
    CHECK_EQ(accel_prefill(d, &bad), ACCEL_ERR_INVALID);
    bad = r;
    bad.layer0 = 2;
    bad.layers = SPLIT_LAYERS; /* past the last layer */
    CHECK_EQ(accel_prefill(d, &bad), ACCEL_ERR_INVALID);
    volatile int cancel = 1;
    accel_prefill_req cr = r;
    cr.layer0 = 2;
    cr.layers = 2;
    cr.cancel = &cancel;
    CHECK_EQ(accel_prefill(d, &cr), ACCEL_ERR_CANCELLED);
    CHECK_EQ(accel_seq_len(d, s), c);
    /* abandoned: a continuation is refused; the chunk runs again from layer 0 */
    cr.cancel = NULL;
    CHECK_EQ(accel_prefill(d, &cr), ACCEL_ERR_INVALID);
    r.layers = 4;
    REQUIRE(accel_prefill(d, &r) == 0);
    r.layer0 = 4;
    r.layers = 1;
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(accel_seq_len(d, s), n);
    CHECK_EQ(t_max_abs_diff(ref, lg, (size_t)V), 0);
    /* truncate mid-split: the chunk is abandoned, the sequence goes on from the cut */
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layer0 = 0;
    r.layers = 3;
    REQUIRE(accel_prefill(d, &r) == 0);
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layer0 = 3;
    r.layers = 2;
    CHECK_EQ(accel_prefill(d, &r), ACCEL_ERR_INVALID);
    r.layer0 = 0;
    r.layers = 0; /* a whole call after it */
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(t_max_abs_diff(ref, lg, (size_t)V), 0);
    /* a decode step of a sequence mid-split abandons the chunk */
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layers = 1;
    REQUIRE(accel_prefill(d, &r) == 0);
    int32_t tok = ids[c];
    REQUIRE(accel_decode(d, 1, &s, &tok, lg) == 0);
    CHECK_EQ(accel_seq_len(d, s), c + 1);
    r.layer0 = 1;
    CHECK_EQ(accel_prefill(d, &r), ACCEL_ERR_INVALID);
    /* free mid-split */
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layer0 = 0;
    r.layers = 2;
    REQUIRE(accel_prefill(d, &r) == 0);
    accel_seq_free(d, s);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    free(ref);
    free(lg);
    accel_free(d);
    model_free(m);
}
