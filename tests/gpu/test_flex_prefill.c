/* FlexPrefill wired into the CUDA prefill (accel_prefill_req.sparse -> gpu_prefill_sparse) on a
 * head_dim-128 GQA model written by mkmodel (the Llama-3 head; the GPU index takes head_dim 64 or
 * 128). Skipped without a CUDA device.
 *
 * With every causal block kept (gamma 1, min_budget = the prompt) the sparse path computes what
 * dense prefill computes — the same attention tiles in the same order, the same GEMMs over the
 * same rows — in another loop order (layer-major), so its logits, its KV export and the decode
 * after it must agree with dense prefill's within the bounds test_shapes.c holds random-weight
 * models to (max |logit diff| 0.05, mean KL 1e-4: a few bf16 rounding flips at most; the worst
 * values are printed). With real budgets it must report a density below 1 over every layer, as
 * the CPU backend does on the same prompt (both printed). */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/gpu/gpu_util.h"
#include "cpu/kv_quant.h"
#include "devices/devices.h"

#define HD128 "--hidden 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 768 " \
              "--vocab 2000 --max-pos 4096"

/* The options the next open_hd128 takes (NULL: defaults; a test is one process). */
static const accel_opts *open_opts;

/* Writes the model, sets the engine's pass size (NULL: default), opens cuda; 1: skip. */
static int open_hd128(const char *chunk, model **m, accel_dev **d, char *why, size_t n)
{
    char dir[512];
    if (t_mkmodel(HD128, "hd128", dir, sizeof dir)) return -1;
    accel_opts o = {0};
    if (open_opts) o = *open_opts;
    char tune[64];
    if (chunk) {
        snprintf(tune, sizeof tune, "chunk=%s", chunk);
        o.gpu_tune = tune;
    }
    return tg_open(dir, &o, m, d, why, n);
}

#define OPEN_OR_SKIP(chunk, m, d)                                                                  \
    model *m;                                                                                      \
    accel_dev *d;                                                                                  \
    do {                                                                                           \
        char why_[600];                                                                            \
        int r_ = open_hd128(chunk, &m, &d, why_, sizeof why_);                                     \
        if (r_ > 0) SKIP("%s", why_);                                                              \
        REQUIRE(r_ == 0);                                                                          \
    } while (0)

static accel_sparse every_block(int n)
{
    return t_flex_sparse(1.0f, 0.1f, n, 0, 256);
}

/* One prefill call of n tokens on a fresh sequence with capacity n + extra; all logits. The
 * sequence is returned in *keep (else freed). NULL after reporting a failure. */
static float *prefill(accel_dev *d, const int32_t *ids, int n, int extra, const accel_sparse *sp,
                      accel_sparse_report *rep, const accel_kv_sink *sink, accel_seq **keep)
{
    int V = accel_model(d)->cfg.vocab;
    accel_seq *s;
    if (accel_seq_new(d, n + extra, &s)) return NULL;
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg, .all_logits = 1,
                           .kv = sink, .sparse = sp, .sparse_report = rep};
    int st = accel_prefill(d, &r);
    if (st) {
        t_fail(__FILE__, __LINE__, "prefill of %d tokens: %s", n, accel_strerror(st));
        free(lg);
        lg = NULL;
    }
    if (keep && !st) *keep = s;
    else accel_seq_free(d, s);
    return lg;
}

static void check_logits(const char *what, const float *ref, const float *got, int rows, int V)
{
    double kl, top1, mx;
    tg_compare(ref, got, rows, V, &kl, &top1, &mx);
    fprintf(stderr, "  %s: max |diff| %.4g, mean KL %.3g, top-1 %.4f over %d rows\n", what, mx, kl,
            top1, rows);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "%s: max |diff| %.4g, KL %.3g", what, mx, kl);
}

static void full_budget_case(const char *chunk)
{
    OPEN_OR_SKIP(chunk, m, d);
    const int n = 1000, V = m->cfg.vocab, L = m->cfg.n_layers, H = m->cfg.n_heads, nb = 8;
    int32_t *ids = tg_ids(n, V, 21);
    accel_sparse sp = every_block(n);
    accel_sparse_report rep = {0}, rd = {0};
    float *dense = prefill(d, ids, n, 0, NULL, &rd, NULL, NULL);
    float *sparse = prefill(d, ids, n, 0, &sp, &rep, NULL, NULL);
    REQUIRE(dense && sparse);
    CHECK_EQ(rd.layers_sparse, 0);
    CHECK_NEAR(rd.density, 1.0, 0);
    CHECK_EQ(rep.layers_sparse, L);
    CHECK_EQ(rep.blocks_causal, (int64_t)L * H * nb * (nb + 1) / 2);
    CHECK_EQ(rep.blocks_computed, rep.blocks_causal);
    CHECK_NEAR(rep.density, 1.0, 0);
    check_logits(chunk ? "every block vs dense, passes of 300" : "every block vs dense", dense,
                 sparse, n, V);
    free(dense), free(sparse), free(ids);
    accel_free(d);
    model_free(m);
}

TEST(gpu_flex_prefill_every_block_equals_dense)
{
    full_budget_case(NULL);
}

/* Passes of 300 tokens: the sparse path runs chunks of 256 (its chunks start on 128-blocks), the
 * dense one 300, 300, 300, 100. */
TEST(gpu_flex_prefill_every_block_equals_dense_chunked)
{
    full_budget_case("300");
}

/* The same in the plugin's fp16 build (gpu/h16.cuh; this bf16 checkpoint converted at load):
 * its index (WMMA on fp16) and block-sparse attention */
TEST(gpu_flex_prefill_every_block_equals_dense_fp16)
{
    static const accel_opts f16 = {.gpu_half = ACCEL_GPU_HALF_F16};
    open_opts = &f16;
    full_budget_case(NULL);
}

/* Decode continues from the KV a sparse prefill left in the cache: after every-block sparse
 * prefill, 24 teacher-forced steps against the same steps after a dense prefill. After a real
 * sparse prefill the steps run and give finite logits, and a later prefill chunk that does not
 * start on a 128-token block (after 924 positions) runs dense whatever its request says. */
static void then_decode(void)
{
    OPEN_OR_SKIP(NULL, m, d);
    const int n = 900, steps = 24, V = m->cfg.vocab;
    int32_t *ids = tg_ids(n + steps + 8, V, 22);
    accel_sparse all = every_block(n);
    accel_sparse real = t_flex_sparse(0.9f, 0.1f, 256, 0, -1);
    accel_seq *sd = NULL, *ss = NULL, *sr = NULL;
    accel_sparse_report rep;
    float *a = prefill(d, ids, n, steps + 8, NULL, NULL, NULL, &sd);
    float *b = prefill(d, ids, n, steps + 8, &all, &rep, NULL, &ss);
    float *c = prefill(d, ids, n, steps + 8, &real, &rep, NULL, &sr);
    REQUIRE(a && b && c && sd && ss && sr);
    CHECK_EQ(rep.layers_sparse, m->cfg.n_layers);
    float *ld = malloc(sizeof(float) * (size_t)steps * V), *ls = malloc(sizeof(float) * (size_t)steps * V);
    float *lr = malloc(sizeof(float) * V);
    int finite = 1;
    for (int k = 0; k < steps; k++) {
        REQUIRE(accel_decode(d, 1, &sd, &ids[n + k], ld + (size_t)k * V) == 0);
        REQUIRE(accel_decode(d, 1, &ss, &ids[n + k], ls + (size_t)k * V) == 0);
        REQUIRE(accel_decode(d, 1, &sr, &ids[n + k], lr) == 0);
        for (int i = 0; i < V; i++) finite &= isfinite(lr[i]) != 0;
    }
    check_logits("decode after every-block sparse vs after dense", ld, ls, steps, V);
    CHECK_MSG(finite, "decode after a sparse prefill gave non-finite logits");
    accel_prefill_req more = {.seq = sr, .ids = ids + n + steps, .n = 8, .logits = lr,
                              .sparse = &real, .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &more) == 0);
    CHECK_EQ(rep.layers_sparse, 0);
    CHECK_NEAR(rep.density, 1.0, 0);
    CHECK_EQ(accel_seq_len(d, sr), n + steps + 8);
    accel_seq_free(d, sd), accel_seq_free(d, ss), accel_seq_free(d, sr);
    free(a), free(b), free(c), free(ld), free(ls), free(lr), free(ids);
    accel_free(d);
    model_free(m);
}

TEST(gpu_flex_prefill_then_decode)
{
    then_decode();
}

/* a real sparse prefill (and the decode after it) in the fp16 build too */
TEST(gpu_flex_prefill_then_decode_fp16)
{
    static const accel_opts f16 = {.gpu_half = ACCEL_GPU_HALF_F16};
    open_opts = &f16;
    then_decode();
}

/* Asked for the last token's logits only, the sparse path carries only the last 128-block through
 * the last layer's attention and MLP (sparse_layers' last_from; passes of 256 here): that row
 * against the same prompt with every row's logits within the bounds (the same attention tile; the
 * GEMMs run over 104 rows instead of the last pass's 232), and the decode steps after it bit for bit. */
TEST(gpu_flex_prefill_last_row_only)
{
    OPEN_OR_SKIP("300", m, d);
    const int n = 1000, steps = 4, V = m->cfg.vocab;
    int32_t *ids = tg_ids(n + steps, V, 23);
    accel_sparse real = t_flex_sparse(0.9f, 0.1f, 256, 0, -1);
    accel_sparse_report rep;
    accel_seq *sa = NULL, *sb = NULL;
    float *all = prefill(d, ids, n, steps, &real, &rep, NULL, &sa);
    REQUIRE(all && sa);
    REQUIRE(accel_seq_new(d, n + steps, &sb) == 0);
    float *la = malloc(sizeof(float) * (size_t)(steps + 1) * V), *lb = malloc(sizeof(float) * (size_t)(steps + 1) * V);
    accel_prefill_req r = {.seq = sb, .ids = ids, .n = n, .logits = lb, .sparse = &real, .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(rep.layers_sparse, m->cfg.n_layers);
    memcpy(la, all + (size_t)(n - 1) * V, sizeof(float) * V);
    for (int k = 0; k < steps; k++) {
        REQUIRE(accel_decode(d, 1, &sa, &ids[n + k], la + (size_t)(k + 1) * V) == 0);
        REQUIRE(accel_decode(d, 1, &sb, &ids[n + k], lb + (size_t)(k + 1) * V) == 0);
    }
    check_logits("sparse, last row only vs every row", la, lb, 1, V);
    CHECK_MSG(!memcmp(la + V, lb + V, sizeof(float) * (size_t)steps * V),
              "decode after a last-row-only sparse prefill differs from decode after a full one");
    accel_seq_free(d, sa), accel_seq_free(d, sb);
    free(all), free(la), free(lb), free(ids);
    accel_free(d);
    model_free(m);
}

/* Real budgets (vertical and slash capped at 2 blocks each): every layer sparse, a density
 * strictly between what the always-kept sink and diagonal blocks give and 1, the same causal
 * block count as the CPU backend reports (its density printed beside ours); prompts at or below
 * the dense threshold and bad parameters behave as on the CPU. */
TEST(gpu_flex_prefill_reports_density)
{
    OPEN_OR_SKIP(NULL, m, d);
    const int n = 1000, V = m->cfg.vocab, L = m->cfg.n_layers, H = m->cfg.n_heads, nb = 8;
    int32_t *ids = tg_ids(n, V, 23);
    accel_sparse sp = t_flex_sparse(0.9f, 0.1f, 256, 256, -1);
    accel_sparse_report rg = {0}, rc = {0};
    float *g = prefill(d, ids, n, 0, &sp, &rg, NULL, NULL);
    accel_opts co = {.threads = 2};
    char err[512];
    accel_dev *cpu = devices_open("cpu", m, &co, err, sizeof err);
    REQUIRE(cpu && g);
    float *c = prefill(cpu, ids, n, 0, &sp, &rc, NULL, NULL);
    REQUIRE(c);
    fprintf(stderr, "  density: gpu %.4f (%lld of %lld blocks), cpu %.4f\n", rg.density,
            (long long)rg.blocks_computed, (long long)rg.blocks_causal, rc.density);
    CHECK_EQ(rg.layers_sparse, L);
    CHECK_EQ(rg.blocks_causal, rc.blocks_causal);
    CHECK_EQ(rg.blocks_causal, (int64_t)L * H * nb * (nb + 1) / 2);
    CHECK(rg.blocks_computed >= (int64_t)L * H * (2 * nb - 1)); /* sink + diagonal */
    CHECK(rg.density < 1.0);
    CHECK_NEAR(rg.density, (double)rg.blocks_computed / rg.blocks_causal, 1e-12);
    int finite = 1;
    for (size_t i = 0; i < (size_t)n * V; i++) finite &= isfinite(g[i]) != 0;
    CHECK(finite);
    /* at the threshold (min_budget 1024 -> 1024 tokens) the scheduler's plan is dense (the
     * backend is never asked to run it sparse: sparse/sparse.h decides) */
    accel_sparse def = t_flex_sparse(0.9f, 0.1f, 1024, 0, -1);
    CHECK_EQ(sparse_plan(&def.p, 1000), 0);
    float *t = NULL;
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    accel_sparse bad = t_flex_sparse(0.0f, 0.1f, 128, 0, -1);
    accel_prefill_req rb = {.seq = s, .ids = ids, .n = n, .sparse = &bad};
    CHECK_EQ(accel_prefill(d, &rb), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_seq_len(d, s), 0);
    accel_seq_free(d, s);
    free(g), free(c), free(t), free(ids);
    accel_free(cpu);
    accel_free(d);
    model_free(m);
}

/* ---------------------------------------------------------------- KV export */

struct store {
    int n;
    proto_kv_layer chunks[64];
};

static int keep_layer(void *ctx, const proto_kv_layer *c)
{
    struct store *s = ctx;
    if (s->n == 64) return ACCEL_ERR_INVALID;
    proto_kv_layer *o = &s->chunks[s->n++];
    *o = *c;
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t ns = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim) * 2;
    void *k = malloc(vb), *v = malloc(vb), *ks = malloc(ns), *vs = malloc(ns);
    memcpy(k, c->k, vb), memcpy(v, c->v, vb), memcpy(ks, c->k_scale, ns), memcpy(vs, c->v_scale, ns);
    o->k = k, o->v = v, o->k_scale = ks, o->v_scale = vs;
    return 0;
}

static void store_free(struct store *s)
{
    for (int i = 0; i < s->n; i++) {
        free((void *)s->chunks[i].k), free((void *)s->chunks[i].v);
        free((void *)s->chunks[i].k_scale), free((void *)s->chunks[i].v_scale);
    }
}

/* Dequantized row (token pos, head h, K or V) of layer l from whichever chunk holds it, and its
 * scale; 0 when no chunk does. */
static int row_of(const struct store *s, int l, int pos, int h, int v, float *out, float *scale)
{
    for (int i = 0; i < s->n; i++) {
        const proto_kv_layer *c = &s->chunks[i];
        if (c->layer != l || pos < c->pos0 || pos >= c->pos0 + c->n_tokens) continue;
        size_t r = (size_t)(pos - c->pos0) * c->n_kv_heads + h;
        size_t vb = proto_kv_value_bytes(c->dtype, 1, 1, c->head_dim);
        const uint16_t *sc = v ? c->v_scale : c->k_scale;
        cpu_kv_dequantize(c->dtype, (v ? c->v : c->k) + r * vb, sc + r, 1, 1, c->head_dim, out);
        *scale = model_f16_to_f32(sc[r]);
        return 1;
    }
    return 0;
}

/* The sparse path's export (each layer one chunk of all n tokens, in layer order, built from
 * chunks of 256 rows quantized into one slot) against dense prefill's (chunks of 300): every
 * value within one quantization step of the other (each side rounds its own K/V) plus 1% of the
 * row's largest value (the K/V themselves differ by GEMM rounding only: ~1e-5 relative). */
TEST(gpu_flex_prefill_kv_export)
{
    OPEN_OR_SKIP("300", m, d);
    const int n = 1000, V = m->cfg.vocab, L = m->cfg.n_layers, nkv = m->cfg.n_kv_heads;
    const int hd = m->cfg.head_dim;
    int32_t *ids = tg_ids(n, V, 24);
    accel_sparse sp = every_block(n);
    accel_sparse_report rep;
    struct store ss = {0}, sd = {0};
    accel_kv_sink ks = {keep_layer, &ss}, kd = {keep_layer, &sd};
    float *a = prefill(d, ids, n, 0, &sp, &rep, &ks, NULL);
    float *b = prefill(d, ids, n, 0, NULL, NULL, &kd, NULL);
    REQUIRE(a && b);
    CHECK_EQ(rep.layers_sparse, L);
    CHECK_EQ(ss.n, L);
    for (int i = 0; i < ss.n; i++)
        CHECK_MSG(ss.chunks[i].layer == i && ss.chunks[i].pos0 == 0 && ss.chunks[i].n_tokens == n &&
                      ss.chunks[i].dtype == PROTO_KV_INT8 && ss.chunks[i].n_kv_heads == nkv,
                  "sparse export chunk %d: layer %d pos0 %d tokens %d", i, ss.chunks[i].layer,
                  ss.chunks[i].pos0, ss.chunks[i].n_tokens);
    float *xa = malloc(sizeof(float) * hd), *xb = malloc(sizeof(float) * hd);
    long bad = 0;
    double worst = 0;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < n; p++)
            for (int h = 0; h < nkv; h++)
                for (int v = 0; v < 2; v++) {
                    float sa = 0, sb = 0, amax = 0;
                    if (!row_of(&ss, l, p, h, v, xa, &sa) || !row_of(&sd, l, p, h, v, xb, &sb)) {
                        bad++;
                        continue;
                    }
                    for (int i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(xb[i]));
                    for (int i = 0; i < hd; i++) {
                        double dd = fabs((double)xa[i] - xb[i]);
                        if (dd / (amax + 1e-30) > worst) worst = dd / (amax + 1e-30);
                        if (!(dd <= 0.505 * (sa + sb) + 0.01 * amax)) bad++;
                    }
                }
    fprintf(stderr, "  sparse vs dense export: worst |diff| %.3g of the row's max\n", worst);
    CHECK_MSG(bad == 0, "%ld exported values differ beyond a quantization step", bad);
    store_free(&ss), store_free(&sd);
    free(xa), free(xb), free(a), free(b), free(ids);
    accel_free(d);
    model_free(m);
}
