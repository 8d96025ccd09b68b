/* KV-cache correctness of the CPU backend: prefill + decode, chunked prefill and batched decode
 * must give the logits of one prefill of the whole sequence. Issue 2 asks for 1e-4; the CPU ops
 * fix their arithmetic order (cpu/ops.h), so these are in fact bit-identical and the tests
 * assert 1e-4 while reporting the actual difference on failure. */
#include "tests/test.h"
#include "tests/util.h"
#include "devices/devices.h"

static int32_t *some_ids(int n, int vocab, int seed)
{
    int32_t *ids = malloc(n * sizeof *ids);
    uint32_t x = 2463534242u + seed;
    ids[0] = 1;
    for (int i = 1; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        ids[i] = (int32_t)(x % (uint32_t)vocab);
    }
    return ids;
}

static void prefill_then_decode(const char *dir, int n, int k)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(dir, "cpu", &m, &d) == 0);
    int V = m->cfg.vocab;
    int32_t *ids = some_ids(n, V, n);
    float *full = t_prefill_all(d, ids, n);
    REQUIRE(full);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    float *lg = malloc((size_t)V * sizeof(float));
    accel_prefill_req r = {.seq = s, .ids = ids, .n = k, .logits = lg};
    REQUIRE(accel_prefill(d, &r) == 0);
    double worst = t_max_abs_diff(lg, full + (size_t)(k - 1) * V, V);
    for (int p = k; p < n; p++) {
        REQUIRE(accel_decode(d, 1, &s, &ids[p], lg) == 0);
        double w = t_max_abs_diff(lg, full + (size_t)p * V, V);
        if (w > worst) worst = w;
    }
    CHECK_EQ(accel_seq_len(d, s), n);
    CHECK_MSG(worst <= 1e-4, "%s: prefill %d + decode %d differs by %.3g", dir, k, n - k, worst);
    accel_seq_free(d, s);
    free(lg);
    free(full);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(cpu_prefill_decode_matches_prefill_stories)
{
    prefill_then_decode("models/stories260K", 200, 7);
}

TEST(cpu_prefill_decode_matches_prefill_tiny_bf16)
{
    prefill_then_decode("models/tiny-llama2-mha", 96, 40);
}

/* Chunks of uneven sizes against one prefill; also exercises the internal 512-token batching. */
TEST(cpu_chunked_prefill_matches)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open("models/stories260K", "cpu", &m, &d) == 0);
    int V = m->cfg.vocab, n = 512;
    int32_t *ids = some_ids(n, V, 3);
    float *full = t_prefill_all(d, ids, n);
    REQUIRE(full);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    float *lg = malloc((size_t)n * V * sizeof(float));
    const int chunks[] = {1, 100, 37, 300, 74};
    int done = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        accel_prefill_req r = {.seq = s, .ids = ids + done, .n = chunks[i],
                               .logits = lg + (size_t)done * V, .all_logits = 1};
        REQUIRE(accel_prefill(d, &r) == 0);
        done += chunks[i];
    }
    CHECK_EQ(done, n);
    double w = t_max_abs_diff(lg, full, (size_t)n * V);
    CHECK_MSG(w <= 1e-4, "chunked prefill differs by %.3g", w);
    accel_seq_free(d, s);
    free(lg);
    free(full);
    free(ids);
    accel_free(d);
    model_free(m);
}

/* Three sequences of different lengths decoded in one batch equal each decoded alone. */
TEST(cpu_batched_decode_matches_single)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open("models/tiny-llama2-mha", "cpu", &m, &d) == 0);
    int V = m->cfg.vocab;
    const int lens[3] = {5, 33, 17};
    accel_seq *bs[3], *ss[3];
    int32_t *ids[3];
    float *lg = malloc(3 * (size_t)V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < 3; i++) {
        ids[i] = some_ids(lens[i] + 4, V, 10 + i);
        REQUIRE(accel_seq_new(d, lens[i] + 4, &bs[i]) == 0);
        REQUIRE(accel_seq_new(d, lens[i] + 4, &ss[i]) == 0);
        accel_prefill_req r = {.seq = bs[i], .ids = ids[i], .n = lens[i]};
        REQUIRE(accel_prefill(d, &r) == 0);
        r.seq = ss[i];
        REQUIRE(accel_prefill(d, &r) == 0);
    }
    double worst = 0;
    for (int step = 0; step < 4; step++) {
        int32_t tok[3];
        for (int i = 0; i < 3; i++) tok[i] = ids[i][lens[i] + step];
        REQUIRE(accel_decode(d, 3, bs, tok, lg) == 0);
        for (int i = 0; i < 3; i++) {
            REQUIRE(accel_decode(d, 1, &ss[i], &tok[i], one) == 0);
            double w = t_max_abs_diff(lg + (size_t)i * V, one, V);
            if (w > worst) worst = w;
        }
    }
    CHECK_MSG(worst <= 1e-4, "batched decode differs by %.3g", worst);
    for (int i = 0; i < 3; i++) {
        accel_seq_free(d, bs[i]);
        accel_seq_free(d, ss[i]);
        free(ids[i]);
    }
    free(lg);
    free(one);
    accel_free(d);
    model_free(m);
}

/* Bounds the wrappers enforce for every backend. */
TEST(accel_bounds)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open("models/stories260K", "cpu", &m, &d) == 0);
    accel_seq *s;
    CHECK_EQ(accel_seq_new(d, 0, &s), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_seq_new(d, m->cfg.max_pos + 1, &s), ACCEL_ERR_INVALID);
    REQUIRE(accel_seq_new(d, 4, &s) == 0);
    int32_t ids[5] = {1, 2, 3, 4, 5}, bad = m->cfg.vocab;
    accel_prefill_req r = {.seq = s, .ids = ids, .n = 5};
    CHECK_EQ(accel_prefill(d, &r), ACCEL_ERR_INVALID); /* past capacity */
    r.ids = &bad;
    r.n = 1;
    CHECK_EQ(accel_prefill(d, &r), ACCEL_ERR_INVALID); /* outside the vocabulary */
    r.ids = ids;
    r.n = 4;
    CHECK_EQ(accel_prefill(d, &r), ACCEL_OK);
    float *lg = malloc(m->cfg.vocab * sizeof(float));
    CHECK_EQ(accel_decode(d, 1, &s, ids, lg), ACCEL_ERR_INVALID); /* full */
    /* one sequence twice in a decode batch: refused, nothing written */
    accel_seq *t;
    REQUIRE(accel_seq_new(d, 8, &t) == 0);
    r.seq = t;
    r.n = 2;
    REQUIRE(accel_prefill(d, &r) == ACCEL_OK);
    accel_seq *twice[2] = {t, t};
    float *lg2 = malloc(2 * m->cfg.vocab * sizeof(float));
    CHECK_EQ(accel_decode(d, 2, twice, ids, lg2), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_decode(d, 1, &t, ids, lg2), ACCEL_OK); /* the sequence is intact: len 2 -> 3 */
    free(lg2);
    accel_seq_free(d, t);
    /* host buffers: none for 0 bytes; usable memory (plain malloc on the CPU) */
    CHECK(accel_host_alloc(d, 0) == NULL);
    float *h = accel_host_alloc(d, 16 * sizeof(float));
    REQUIRE(h);
    for (int i = 0; i < 16; i++) h[i] = (float)i;
    CHECK(h[15] == 15.f);
    accel_host_free(d, h);
    accel_host_free(d, NULL);
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.n_seqs, 1);
    CHECK(info.mem_free + accel_kv_bytes(d, 4) == info.mem_total);
    accel_seq_free(d, s);
    accel_get_info(d, &info);
    CHECK(info.mem_free == info.mem_total);
    free(lg);
    accel_free(d);
    model_free(m);
}

/* Memory admission: a sequence that does not fit the KV budget is refused, not crashed on. */
TEST(accel_memory_admission)
{
    char err[256];
    model *m = model_load("models/stories260K", err, sizeof err);
    REQUIRE(m);
    uint64_t per = 2ull * m->cfg.n_layers * m->cfg.n_kv_heads * m->cfg.head_dim * 4;
    accel_opts o = {.threads = 1, .mem_limit = per * 300};
    accel_dev *d = devices_open("cpu", m, &o, err, sizeof err);
    REQUIRE(d);
    accel_seq *a, *b;
    CHECK_EQ(accel_seq_new(d, 200, &a), ACCEL_OK);
    CHECK_EQ(accel_seq_new(d, 200, &b), ACCEL_ERR_NOMEM);
    CHECK_EQ(accel_seq_new(d, 100, &b), ACCEL_OK);
    accel_seq_free(d, a);
    accel_seq_free(d, b);
    accel_free(d);
    model_free(m);
}
