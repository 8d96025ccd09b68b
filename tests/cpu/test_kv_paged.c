/* The CPU backend's paged KV (cpu/kv_cache.h, CPU_KV_BLOCK positions per block) and
 * accel_seq_fork. Every comparison is bit for bit: the paged attention keeps cpu_attend's order
 * of arithmetic, so however a sequence's positions fall into blocks, however they got there
 * (prefill in any chunks, decode, import, a fork's shared blocks, a copy on write), the logits are
 * those of one plain prefill of the same tokens.
 *
 *   attend_blocks_is_attend   the op: scattered blocks == cpu_attend over the same rows in a run
 *   many_blocks               a sequence over many blocks, prefilled in chunks that straddle
 *                             block edges and decoded == one prefill (and the pool back to 0)
 *   truncate_across_block     truncate from block 2 into block 0, write other tokens == fresh
 *   export_import_blocks      KV exported in uneven chunks, imported in other uneven chunks ==
 *                             imported in one chunk; decoding from it == decoding from the export
 *   fork_cow                  forks at a partial block and at a block edge, both sides written
 *                             in turn: each == its own fresh prefill; blocks shared, then freed
 *   fork_bad_args             bounds, accounting, and ACCEL_ERR_UNSUPPORTED where not offered
 *   unreserved_pool_same_logits  a device whose budget is past physical memory (its pool grows
 *                             by copying, past 64 blocks here): three sequences prefilled and
 *                             decoded == the same on a device with the default budget (reserved)
 *   import_spread_over_threads  a chunk of 20 block runs (the first a block's tail) imported on a
 *                             2-thread device, int8 and int4: every block's saved rows == the
 *                             chunk dequantized in one call, position by position
 *   pool_grows_keeping_rows   the pool grown past 64, 128 and 256 ids with its arenas reserved
 *                             (they stay put) and growing by copying: every row written before a
 *                             growth reads back after it, a fork's copy on write and a block
 *                             saved and loaded keep them; past max_ids refused, nothing taken */
#include "cpu/backend.h"
#include "devices/devices.h"
#include "cpu/kv_cache.h"
#include "cpu/kv_import.h"
#include "cpu/pool.h"
#include "cpu/kv_quant.h"
#include "cpu/ops.h"
#include "scheduler/accel_impl.h"
#include "tests/test.h"
#include "tests/util.h"
#include <unistd.h>

#define STORIES "models/stories260K"

static int32_t *test_ids(int n, int vocab, int mul, int add)
{
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; ids && i < n; i++) ids[i] = (int32_t)((i * mul + add) % vocab);
    if (ids) ids[0] = 1;
    return ids;
}

/* Appends ids to s in the given chunk sizes (the last chunk takes what is left); logits of every
 * position into lg (n, V). */
static int prefill_chunks(accel_dev *d, accel_seq *s, const int32_t *ids, int n, const int *chunk,
                          int n_chunks, float *lg, int V)
{
    for (int done = 0, c = 0; done < n; c++) {
        int k = c < n_chunks && chunk[c] < n - done ? chunk[c] : n - done;
        accel_prefill_req r = {.seq = s, .ids = ids + done, .n = k,
                               .logits = lg + (size_t)done * V, .all_logits = 1};
        int st = accel_prefill(d, &r);
        if (st) return st;
        done += k;
    }
    return 0;
}

static int same(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(cpu_kv_attend_blocks_is_attend)
{
    enum { HD = 24, KVH = 3, KVD = HD * KVH, N = 150, NB = (N + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK };
    float *k = malloc(sizeof(float) * N * KVD), *v = malloc(sizeof(float) * N * KVD);
    float *kb[NB], *vb[NB], q[HD], s1[N], s2[N], o1[HD], o2[HD];
    int32_t table[NB];
    uint32_t x = 12345;
    for (int i = 0; i < N * KVD; i++) {
        x = x * 1664525u + 1013904223u;
        k[i] = (float)((x >> 8) % 2001) / 1000.0f - 1.0f;
        v[i] = (float)((x >> 12) % 2001) / 500.0f - 2.0f;
    }
    for (int i = 0; i < HD; i++) q[i] = 0.3f - 0.05f * i;
    /* block b of the table stored at slot NB-1-b: scattered, out of order */
    for (int b = 0; b < NB; b++) {
        table[b] = NB - 1 - b;
        kb[NB - 1 - b] = malloc(sizeof(float) * CPU_KV_BLOCK * KVD);
        vb[NB - 1 - b] = malloc(sizeof(float) * CPU_KV_BLOCK * KVD);
        for (int r = 0; r < CPU_KV_BLOCK && b * CPU_KV_BLOCK + r < N; r++) {
            memcpy(kb[NB - 1 - b] + r * KVD, k + (size_t)(b * CPU_KV_BLOCK + r) * KVD, KVD * 4);
            memcpy(vb[NB - 1 - b] + r * KVD, v + (size_t)(b * CPU_KV_BLOCK + r) * KVD, KVD * 4);
        }
    }
    const int cases[][2] = {{0, 1}, {0, 16}, {0, 17}, {5, 11}, {5, 12}, {15, 2}, {31, 119}, {0, N}, {100, 50}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int h = 0; h < KVH; h++) {
            int first = cases[c][0], n = cases[c][1];
            cpu_attend(o1, q, k + (size_t)first * KVD + h * HD, v + (size_t)first * KVD + h * HD, n,
                       KVD, HD, 0.2f, s1);
            cpu_attend_blocks(o2, q, kb, vb, table, CPU_KV_BLOCK, (size_t)h * HD, first, n, KVD, HD,
                              0.2f, s2);
            CHECK_MSG(same(o1, o2, HD), "first %d n %d head %d differs", first, n, h);
        }
    for (int b = 0; b < NB; b++) {
        free(kb[b]);
        free(vb[b]);
    }
    free(k);
    free(v);
}

TEST(cpu_kv_many_blocks)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    const int n = 300, V = m->cfg.vocab; /* 19 blocks of 16 */
    int32_t *ids = test_ids(n, V, 37, 11);
    float *ref = t_prefill_all(d, ids, n), *lg = malloc(sizeof(float) * n * V);
    REQUIRE(ref && lg);
    /* chunks that start and end inside blocks, one of a single token, then decode */
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0); /* blocks are taken as it grows */
    const int chunk[] = {5, 1, 26, 16, 33, 100};
    REQUIRE(prefill_chunks(d, s, ids, 181, chunk, 6, lg, V) == 0);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), (181 + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK);
    for (int p = 181; p < n; p++)
        REQUIRE(accel_decode(d, 1, &s, ids + p, lg + (size_t)p * V) == 0);
    CHECK_MSG(same(lg, ref, (size_t)n * V), "chunked prefill + decode differs from one prefill");
    accel_seq_free(d, s);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    free(ref);
    free(lg);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(cpu_kv_truncate_across_block)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    const int V = m->cfg.vocab, keep = 13, more = 30;
    int32_t *a = test_ids(40, V, 37, 11), *b = test_ids(more, V, 53, 5), joined[13 + 30];
    memcpy(joined, a, keep * sizeof *a);
    memcpy(joined + keep, b, more * sizeof *b);
    float *ref = t_prefill_all(d, joined, keep + more), *lg = malloc(sizeof(float) * 64 * V);
    REQUIRE(ref && lg);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    accel_prefill_req r = {.seq = s, .ids = a, .n = 40, .logits = lg, .all_logits = 1};
    REQUIRE(accel_prefill(d, &r) == 0);
    REQUIRE(accel_seq_truncate(d, s, keep) == 0); /* 40 (block 2) back into block 0 */
    r.ids = b;
    r.n = more;
    r.logits = lg + (size_t)keep * V;
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK(same(lg + (size_t)keep * V, ref + (size_t)keep * V, (size_t)more * V));
    /* and back over a block edge once more, by decode */
    REQUIRE(accel_seq_truncate(d, s, 17) == 0);
    REQUIRE(accel_decode(d, 1, &s, joined + 17, lg) == 0);
    CHECK(same(lg, ref + (size_t)17 * V, V));
    accel_seq_free(d, s);
    free(ref);
    free(lg);
    free(a);
    free(b);
    accel_free(d);
    model_free(m);
}

/* ---------------------------------------------------------------- export / import */

typedef struct kv_store {
    int n;
    proto_kv_layer c[64];
    void *buf[64];
} kv_store;

static int keep_chunk(void *ctx, const proto_kv_layer *c)
{
    kv_store *st = ctx;
    if (st->n == 64) return ACCEL_ERR_INVALID;
    st->c[st->n] = t_kv_copy(c, &st->buf[st->n]);
    if (!st->buf[st->n]) return ACCEL_ERR_NOMEM;
    st->n++;
    return 0;
}

/* Positions [p0, p0 + n) of layer l of the export as one chunk (the export's runs joined). */
static proto_kv_layer join_chunk(const kv_store *st, int l, int p0, int n, uint8_t *k, uint8_t *v,
                                 uint16_t *ks, uint16_t *vs)
{
    const proto_kv_layer *c0 = &st->c[0];
    int H = c0->n_kv_heads, hd = c0->head_dim;
    enum proto_kv_dtype dt = c0->dtype;
    for (int i = 0; i < st->n; i++) {
        const proto_kv_layer *c = &st->c[i];
        if (c->layer != l) continue;
        for (int t = 0; t < c->n_tokens; t++) {
            int p = c->pos0 + t;
            if (p < p0 || p >= p0 + n) continue;
            size_t vb = proto_kv_value_bytes(dt, 1, H, hd), sc = proto_kv_scale_count(dt, 1, H, hd);
            memcpy(k + (size_t)(p - p0) * vb, c->k + t * vb, vb);
            memcpy(v + (size_t)(p - p0) * vb, c->v + t * vb, vb);
            memcpy(ks + (size_t)(p - p0) * sc, c->k_scale + t * sc, sc * 2);
            memcpy(vs + (size_t)(p - p0) * sc, c->v_scale + t * sc, sc * 2);
        }
    }
    proto_kv_layer out = {.layer = l, .pos0 = p0, .n_tokens = n, .n_kv_heads = H, .head_dim = hd,
                          .dtype = dt, .k = k, .v = v, .k_scale = ks, .v_scale = vs};
    return out;
}

/* Imports the export into a fresh sequence in runs of the given sizes; logits of `steps`
 * decoded tokens after it into lg. */
static int import_runs(accel_dev *d, const kv_store *st, int n, const int *run, int n_runs,
                       const int32_t *next, int steps, float *lg)
{
    const model_config *c = &accel_model(d)->cfg;
    size_t vb = proto_kv_value_bytes(st->c[0].dtype, n, c->n_kv_heads, c->head_dim);
    size_t sc = proto_kv_scale_count(st->c[0].dtype, n, c->n_kv_heads, c->head_dim);
    uint8_t *k = malloc(vb), *v = malloc(vb);
    uint16_t *ks = malloc(sc * 2), *vs = malloc(sc * 2);
    accel_seq *s = NULL;
    int rc = k && v && ks && vs ? accel_seq_new(d, n + steps, &s) : ACCEL_ERR_NOMEM;
    for (int p0 = 0, r = 0; !rc && p0 < n; r++) {
        int len = r < n_runs && run[r] < n - p0 ? run[r] : n - p0;
        for (int l = 0; l < c->n_layers && !rc; l++) {
            proto_kv_layer ch = join_chunk(st, l, p0, len, k, v, ks, vs);
            rc = accel_kv_import(d, s, &ch);
        }
        p0 += len;
    }
    for (int i = 0; i < steps && !rc; i++)
        rc = accel_decode(d, 1, &s, next + i, lg + (size_t)i * c->vocab);
    accel_seq_free(d, s);
    free(k);
    free(v);
    free(ks);
    free(vs);
    return rc;
}

TEST(cpu_kv_export_import_blocks)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    const int n = 90, steps = 6, V = m->cfg.vocab;
    int32_t *ids = test_ids(n + steps, V, 41, 9);
    kv_store st = {0};
    accel_kv_sink sink = {keep_chunk, &st};
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    const int pchunk[] = {7, 30, 53}; /* exported in runs that straddle block edges */
    for (int done = 0, c = 0; done < n; done += pchunk[c++]) {
        accel_prefill_req r = {.seq = s, .ids = ids + done, .n = pchunk[c], .kv = &sink};
        REQUIRE(accel_prefill(d, &r) == 0);
    }
    accel_seq_free(d, s);
    REQUIRE(st.n == 3 * m->cfg.n_layers);
    float *one = malloc(sizeof(float) * steps * V), *runs = malloc(sizeof(float) * steps * V);
    const int whole[] = {n}, irun[] = {16, 3, 29, 1, 20};
    REQUIRE(import_runs(d, &st, n, whole, 1, ids + n, steps, one) == 0);
    REQUIRE(import_runs(d, &st, n, irun, 5, ids + n, steps, runs) == 0);
    CHECK_MSG(same(one, runs, (size_t)steps * V), "imported in runs differs from in one chunk");
    /* every row landed at its position: decoding from the int8 KV stays near decoding from the
     * float KV (a row in the wrong place would move the logits by whole units) */
    float *ref = t_prefill_all(d, ids, n + steps);
    REQUIRE(ref);
    double w = t_max_abs_diff(one, ref + (size_t)n * V, (size_t)steps * V);
    fprintf(stderr, "int8 import vs float KV: max |logit diff| %.4g\n", w);
    CHECK(w < 0.5);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    for (int i = 0; i < st.n; i++) free(st.buf[i]);
    free(ref);
    free(one);
    free(runs);
    free(ids);
    accel_free(d);
    model_free(m);
}

/* ---------------------------------------------------------------- fork */

/* Fork src (len a) at n_tokens; decode `steps` of ids_f on the fork and ids_s on src, in turn
 * (src_first: src writes first); each side's logits == its own fresh prefill. */
static void fork_case(accel_dev *d, const int32_t *prompt, int a, int n_tokens,
                      const int32_t *ids_f, const int32_t *ids_s, int steps, int src_first)
{
    const int V = accel_model(d)->cfg.vocab, cap = a + steps + 4;
    int32_t *jf = malloc(sizeof *jf * (n_tokens + steps)), *js = malloc(sizeof *js * (a + steps));
    memcpy(jf, prompt, n_tokens * sizeof *jf);
    memcpy(jf + n_tokens, ids_f, steps * sizeof *jf);
    memcpy(js, prompt, a * sizeof *js);
    memcpy(js + a, ids_s, steps * sizeof *js);
    float *rf = t_prefill_all(d, jf, n_tokens + steps), *rs = t_prefill_all(d, js, a + steps);
    float *lf = malloc(sizeof(float) * steps * V), *ls = malloc(sizeof(float) * steps * V);
    REQUIRE(rf && rs && lf && ls);
    int before = cpu_accel_kv_blocks_in_use(d);
    accel_seq *src, *f;
    REQUIRE(accel_seq_new(d, cap, &src) == 0);
    accel_prefill_req r = {.seq = src, .ids = prompt, .n = a};
    REQUIRE(accel_prefill(d, &r) == 0);
    int one = cpu_accel_kv_blocks_in_use(d) - before;
    REQUIRE(accel_seq_fork(d, src, n_tokens, cap, &f) == 0);
    CHECK_EQ(accel_seq_len(d, f), n_tokens);
    CHECK_EQ(one, (a + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d) - before, one); /* the fork takes nothing yet */
    for (int i = 0; i < steps; i++) {
        if (src_first) REQUIRE(accel_decode(d, 1, &src, ids_s + i, ls + (size_t)i * V) == 0);
        REQUIRE(accel_decode(d, 1, &f, ids_f + i, lf + (size_t)i * V) == 0);
        if (!src_first) REQUIRE(accel_decode(d, 1, &src, ids_s + i, ls + (size_t)i * V) == 0);
    }
    CHECK_MSG(same(lf, rf + (size_t)n_tokens * V, (size_t)steps * V),
              "fork at %d of %d: the fork's logits differ from a fresh prefill", n_tokens, a);
    CHECK_MSG(same(ls, rs + (size_t)a * V, (size_t)steps * V),
              "fork at %d of %d: the source's logits changed", n_tokens, a);
    /* each side took blocks for its own positions; a partial shared block was copied by the
     * first writer only, so the full shared blocks are all that is still counted once */
    int b_src = (a + steps + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK;
    int b_f = (n_tokens + steps + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK;
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d) - before, b_src + b_f - n_tokens / CPU_KV_BLOCK);
    /* the source freed first, the fork still decodes as the fresh sequence */
    accel_seq_free(d, src);
    float tail[1024];
    REQUIRE(V <= 1024);
    int32_t t = ids_f[0];
    REQUIRE(accel_decode(d, 1, &f, &t, tail) == 0);
    accel_seq *fresh;
    REQUIRE(accel_seq_new(d, cap, &fresh) == 0);
    float *lr = malloc(sizeof(float) * V);
    accel_prefill_req rr = {.seq = fresh, .ids = jf, .n = n_tokens + steps};
    REQUIRE(accel_prefill(d, &rr) == 0);
    REQUIRE(accel_decode(d, 1, &fresh, &t, lr) == 0);
    CHECK(same(tail, lr, V));
    accel_seq_free(d, fresh);
    accel_seq_free(d, f);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), before);
    free(lr);
    free(jf);
    free(js);
    free(rf);
    free(rs);
    free(lf);
    free(ls);
}

TEST(cpu_kv_fork_cow)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    const int V = m->cfg.vocab;
    int32_t *p = test_ids(60, V, 37, 11), *x = test_ids(12, V, 7, 100), *y = test_ids(12, V, 11, 3);
    x[0] = 5;
    y[0] = 9;
    fork_case(d, p, 37, 37, x, y, 12, 0); /* whole prompt, partial block 2: the fork writes first */
    fork_case(d, p, 37, 37, x, y, 12, 1); /* the source writes first */
    fork_case(d, p, 37, 32, x, y, 12, 0); /* at a block edge, the source past it */
    fork_case(d, p, 37, 20, x, y, 12, 1); /* inside block 1, the source past it */
    fork_case(d, p, 48, 48, x, y, 12, 0); /* a full last block: nothing to copy */
    fork_case(d, p, 37, 0, x, y, 12, 0);  /* nothing shared */
    /* n choices: two forks of one prompt decode the same tokens == each other */
    accel_seq *src, *f1, *f2;
    REQUIRE(accel_seq_new(d, 64, &src) == 0);
    accel_prefill_req r = {.seq = src, .ids = p, .n = 37};
    REQUIRE(accel_prefill(d, &r) == 0);
    REQUIRE(accel_seq_fork(d, src, 37, 64, &f1) == 0);
    REQUIRE(accel_seq_fork(d, src, 37, 64, &f2) == 0);
    for (int i = 0; i < 10; i++) {
        accel_seq *both[2] = {f1, f2};
        int32_t t2[2] = {x[i], x[i]};
        float *l12 = malloc(sizeof(float) * 2 * V);
        REQUIRE(accel_decode(d, 2, both, t2, l12) == 0); /* the two in one batch */
        CHECK(same(l12, l12 + V, V));
        free(l12);
    }
    accel_seq_free(d, f2);
    accel_seq_free(d, src);
    accel_seq_free(d, f1);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    free(p);
    free(x);
    free(y);
    accel_free(d);
    model_free(m);
}

static void nofork_free(accel_dev *d) { (void)d; }
static void nofork_describe(accel_dev *d, accel_info *o) { (void)d; (void)o; }

TEST(cpu_kv_fork_bad_args)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    int32_t *p = test_ids(20, m->cfg.vocab, 37, 11);
    accel_seq *s, *f;
    REQUIRE(accel_seq_new(d, 32, &s) == 0);
    accel_prefill_req r = {.seq = s, .ids = p, .n = 20};
    REQUIRE(accel_prefill(d, &r) == 0);
    accel_info before, during, after;
    accel_get_info(d, &before);
    CHECK_EQ(accel_seq_fork(d, s, 21, 32, &f), ACCEL_ERR_INVALID);
    CHECK(f == NULL);
    CHECK_EQ(accel_seq_fork(d, s, -1, 32, &f), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_seq_fork(d, NULL, 0, 32, &f), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_seq_fork(d, s, 20, 19, &f), ACCEL_ERR_INVALID); /* capacity below n_tokens */
    REQUIRE(accel_seq_fork(d, s, 20, 32, &f) == 0);
    accel_get_info(d, &during);
    /* a paged device: the fork shares the source's blocks and takes none of its own yet */
    CHECK_EQ(before.mem_free - during.mem_free, 0);
    CHECK_EQ(during.n_seqs, before.n_seqs + 1);
    accel_seq_free(d, f);
    accel_get_info(d, &after);
    CHECK_EQ(after.mem_free, before.mem_free);
    accel_seq_free(d, s);
    /* a device without the entry */
    static const struct accel_dev_i nofork_i = {.free = nofork_free, .describe = nofork_describe};
    struct accel_dev nd = {.i = &nofork_i, .m = m, .mem_total = 1 << 20};
    struct accel_seq ns = {.len = 4, .capacity = 8};
    CHECK_EQ(accel_seq_fork(&nd, &ns, 2, 8, &f), ACCEL_ERR_UNSUPPORTED);
    CHECK_EQ(atomic_load(&nd.mem_reserved), 0);
    free(p);
    accel_free(d);
    model_free(m);
}

/* The host tier's unit: blocks saved and loaded back into another sequence decode exactly as
 * the source does; a load past the pool is refused with the sequence unchanged. */
TEST(cpu_kv_block_save_load)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    const int V = m->cfg.vocab, n = 3 * CPU_KV_BLOCK;
    int32_t *p = test_ids(n + 1, V, 37, 11);
    accel_info info;
    accel_get_info(d, &info);
    REQUIRE(info.caps & ACCEL_CAP_PAGED);
    CHECK_EQ(info.kv_block_tokens, CPU_KV_BLOCK);
    CHECK_EQ(info.kv_block_bytes, CPU_KV_BLOCK * info.kv_bytes_per_token);
    accel_seq *s, *t;
    REQUIRE(accel_seq_new(d, 64, &s) == 0 && accel_seq_new(d, 64, &t) == 0);
    accel_prefill_req r = {.seq = s, .ids = p, .n = n};
    REQUIRE(accel_prefill(d, &r) == 0);
    unsigned char *buf = accel_host_alloc(d, 3 * info.kv_block_bytes);
    REQUIRE(buf);
    for (int b = 0; b < 3; b++) REQUIRE(accel_kv_block_save(d, s, b, buf + b * info.kv_block_bytes) == 0);
    CHECK_EQ(accel_kv_block_save(d, s, 3, buf), ACCEL_ERR_INVALID); /* not full */
    for (int b = 0; b < 3; b++) REQUIRE(accel_kv_block_load(d, t, buf + b * info.kv_block_bytes) == 0);
    CHECK_EQ(accel_seq_len(d, t), n);
    float *l1 = malloc(sizeof(float) * V), *l2 = malloc(sizeof(float) * V);
    REQUIRE(accel_decode(d, 1, &s, p + n, l1) == 0 && accel_decode(d, 1, &t, p + n, l2) == 0);
    CHECK_MSG(same(l1, l2, V), "decoding from loaded blocks differs from the source");
    CHECK_EQ(accel_kv_block_load(d, t, buf), ACCEL_ERR_INVALID); /* length not at a block edge */
    accel_seq_free(d, s);
    accel_seq_free(d, t);
    unsigned char *buf2 = malloc(info.kv_block_bytes);
    REQUIRE(buf2);
    memcpy(buf2, buf, info.kv_block_bytes);
    accel_host_free(d, buf);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    accel_free(d);
    /* a pool of 2 blocks: a third load is refused, the sequence unchanged */
    char err[256];
    accel_opts o = {.threads = 1, .mem_limit = 2 * info.kv_block_bytes};
    d = devices_open("cpu", m, &o, err, sizeof err);
    REQUIRE(d);
    REQUIRE(accel_seq_new(d, 64, &t) == 0);
    REQUIRE(accel_kv_block_load(d, t, buf2) == 0 && accel_kv_block_load(d, t, buf2) == 0);
    CHECK_EQ(accel_kv_block_load(d, t, buf2), ACCEL_ERR_NOMEM);
    CHECK_EQ(accel_seq_len(d, t), 2 * CPU_KV_BLOCK);
    accel_seq_free(d, t);
    accel_free(d);
    model_free(m);
    free(buf2);
    free(l1);
    free(l2);
    free(p);
}

/* A value of (layer, position, element, K or V) that no two places share. */
static float row_val(int l, int pos, int i, int v)
{
    return (float)(((l * 5003 + pos) * 17 + i) * 2 + v);
}

TEST(cpu_kv_pool_grows_keeping_rows)
{
    enum { L = 3, KD = 8, MAX = 300, N = 290 * CPU_KV_BLOCK };
    for (int reserve = 0; reserve <= 1; reserve++) {
        cpu_kv_pool p;
        REQUIRE(cpu_kv_pool_init(&p, L, KD, MAX, reserve) == 0);
        CHECK_MSG(reserve || !p.reserved, "reserved %zu unasked", p.reserved);
        if (reserve && !p.reserved) fprintf(stderr, "# the reservation was refused here\n");
        float *arena = p.k_arena;
        cpu_kv_table t;
        REQUIRE(cpu_kv_table_new(&p, N, &t) == 0);
        for (int pos0 = 0; pos0 < N;) { /* chunks that straddle blocks and every growth */
            int n = pos0 + 37 * 3 < N ? 37 * 3 : N - pos0;
            REQUIRE(cpu_kv_table_prepare(&p, &t, pos0, n) == 0);
            for (int l = 0; l < L; l++)
                for (int q = pos0; q < pos0 + n; q++)
                    for (int i = 0; i < KD; i++) {
                        cpu_kv_row(p.k, &p, &t, l, q)[i] = row_val(l, q, i, 0);
                        cpu_kv_row(p.v, &p, &t, l, q)[i] = row_val(l, q, i, 1);
                    }
            pos0 += n;
        }
        CHECK_EQ(cpu_kv_pool_in_use(&p), N / CPU_KV_BLOCK);
        CHECK(p.cap >= N / CPU_KV_BLOCK);
        if (reserve) CHECK_MSG(p.k_arena == arena, "a reserved arena moved");
        int bad = 0;
        for (int l = 0; l < L; l++)
            for (int q = 0; q < N; q++)
                for (int i = 0; i < KD; i++)
                    bad += cpu_kv_row(p.k, &p, &t, l, q)[i] != row_val(l, q, i, 0) ||
                           cpu_kv_row(p.v, &p, &t, l, q)[i] != row_val(l, q, i, 1);
        CHECK_MSG(bad == 0, "reserve %d: %d values lost in growing", reserve, bad);
        /* a fork sharing all but the last 5 positions writes its own copy of the last block */
        cpu_kv_table f;
        const int F = N - 5;
        REQUIRE(cpu_kv_table_fork(&p, &t, F, N, &f) == 0);
        REQUIRE(cpu_kv_table_prepare(&p, &f, F, 5) == 0);
        for (int l = 0; l < L; l++)
            for (int q = F; q < N; q++) cpu_kv_row(p.k, &p, &f, l, q)[0] = -1.0f;
        for (int l = 0; l < L; l++)
            for (int q = 0; q < N; q++) {
                bad += cpu_kv_row(p.k, &p, &t, l, q)[0] != row_val(l, q, 0, 0);
                bad += q < F && cpu_kv_row(p.k, &p, &f, l, q)[0] != row_val(l, q, 0, 0);
            }
        CHECK_MSG(bad == 0, "reserve %d: %d rows wrong after the fork's copy on write", reserve,
                  bad);
        /* block 7 saved and loaded into the fork's own last block */
        float *blk = malloc(sizeof(float) * 2 * cpu_kv_block_floats(&p));
        REQUIRE(blk);
        cpu_kv_block_save(&p, &t, 7, blk);
        cpu_kv_block_load(&p, &f, N / CPU_KV_BLOCK - 1, blk);
        for (int l = 0; l < L; l++)
            for (int q = 0; q < CPU_KV_BLOCK; q++)
                for (int i = 0; i < KD; i++)
                    bad += cpu_kv_row(p.v, &p, &f, l, N - CPU_KV_BLOCK + q)[i] !=
                           row_val(l, 7 * CPU_KV_BLOCK + q, i, 1);
        CHECK_MSG(bad == 0, "reserve %d: a loaded block differs from the saved one", reserve);
        free(blk);
        cpu_kv_table_free(&p, &f);
        /* past the budget: refused, the table as it was */
        cpu_kv_table u;
        REQUIRE(cpu_kv_table_new(&p, 11 * CPU_KV_BLOCK, &u) == 0);
        CHECK_EQ(cpu_kv_table_prepare(&p, &u, 0, 11 * CPU_KV_BLOCK), -1);
        CHECK_EQ(u.n, 0);
        CHECK_EQ(cpu_kv_pool_in_use(&p), N / CPU_KV_BLOCK);
        CHECK_EQ(cpu_kv_table_prepare(&p, &u, 0, 10 * CPU_KV_BLOCK), 0);
        cpu_kv_table_free(&p, &u);
        cpu_kv_table_free(&p, &t);
        CHECK_EQ(cpu_kv_pool_in_use(&p), 0);
        cpu_kv_pool_deinit(&p);
    }
}

TEST(cpu_kv_import_spread_over_threads)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0); /* 2 threads */
    const model_config *cf = &m->cfg;
    const int L = cf->n_layers, H = cf->n_kv_heads, D = cf->head_dim, kvd = H * D;
    enum { N = 20 * CPU_KV_BLOCK, A = 5 }; /* a run of A, then one of N - A: a tail and 19 blocks */
    accel_info info;
    accel_get_info(d, &info);
    size_t cap = cpu_kv_layer_bytes(PROTO_KV_INT8, N, H, D); /* int4 takes less */
    unsigned char *buf = malloc(cap), *blk = malloc(info.kv_block_bytes);
    float *x = malloc(sizeof(float) * 2 * (size_t)N * kvd),
          *want = malloc(sizeof(float) * 2 * (size_t)N * kvd * L);
    REQUIRE(buf && blk && x && want);
    unsigned st = 11;
    for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++) {
        accel_seq *s;
        REQUIRE(accel_seq_new(d, N, &s) == 0);
        for (int run = 0; run < 2; run++) {
            int pos0 = run ? A : 0, n = run ? N - A : A;
            for (int l = 0; l < L; l++) {
                for (size_t i = 0; i < 2 * (size_t)n * kvd; i++) {
                    st = st * 1103515245u + 12345u;
                    x[i] = ((float)((st >> 8) & 0xffff) / 32768.0f - 1.0f) * (float)(1 + l);
                }
                proto_kv_layer c;
                REQUIRE(cpu_kv_quantize_layer(dt, x, x + (size_t)n * kvd, l, pos0, n, H, D, buf,
                                              cap, &c) == 0);
                float *wk = want + ((size_t)l * 2 * N + pos0) * kvd;
                float *wv = want + ((size_t)l * 2 * N + N + pos0) * kvd;
                REQUIRE(cpu_kv_dequantize(dt, c.k, c.k_scale, n, H, D, wk) == 0);
                REQUIRE(cpu_kv_dequantize(dt, c.v, c.v_scale, n, H, D, wv) == 0);
                REQUIRE(accel_kv_import(d, s, &c) == 0);
            }
        }
        REQUIRE(accel_seq_len(d, s) == N);
        int bad = 0;
        const size_t run_floats = (size_t)CPU_KV_BLOCK * kvd, bf = (size_t)L * run_floats;
        for (int b = 0; b < N / CPU_KV_BLOCK; b++) {
            REQUIRE(accel_kv_block_save(d, s, b, blk) == 0);
            const float *f = (const float *)(const void *)blk; /* K then V, layer by layer */
            for (int l = 0; l < L; l++)
                for (int kv = 0; kv < 2; kv++) {
                    size_t at = (size_t)l * 2 * N + (size_t)kv * N + (size_t)b * CPU_KV_BLOCK;
                    bad += memcmp(f + kv * bf + l * run_floats, want + at * kvd,
                                  run_floats * sizeof(float)) != 0;
                }
        }
        CHECK_MSG(bad == 0,
                  "dtype %d: %d block layers differ from the chunk dequantized in one call", dt,
                  bad);
        accel_seq_free(d, s);
    }
    free(buf);
    free(blk);
    free(x);
    free(want);
    accel_free(d);
    model_free(m);
}

/* cpu_kv_import_rows answers a chunk it cannot import (a missing array, a shape proto/kv.h does
 * not have, a row width not the pool's) with -1 before writing any row, not silence; a good
 * chunk after them imports. */
TEST(cpu_kv_import_rows_refuses_bad_chunk)
{
    enum { H = 2, D = 8, KD = H * D, N = 20 * CPU_KV_BLOCK };
    cpu_kv_pool p;
    REQUIRE(cpu_kv_pool_init(&p, 1, KD, 64, 1) == 0);
    cpu_kv_table t;
    REQUIRE(cpu_kv_table_new(&p, N, &t) == 0);
    REQUIRE(cpu_kv_table_prepare(&p, &t, 0, N) == 0);
    cpu_pool *pool = cpu_pool_new(2);
    REQUIRE(pool);
    static float x[2 * N * KD];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)(i % 13) - 6.0f;
    size_t cap = cpu_kv_layer_bytes(PROTO_KV_INT8, N, H, D);
    unsigned char *buf = malloc(cap);
    REQUIRE(buf);
    proto_kv_layer c;
    REQUIRE(cpu_kv_quantize_layer(PROTO_KV_INT8, x, x + N * KD, 0, 0, N, H, D, buf, cap, &c) == 0);
    for (int pos = 0; pos < N; pos++) { /* a mark in every row, to see that none is written */
        memset(cpu_kv_row(p.k, &p, &t, 0, pos), 0x5a, KD * sizeof(float));
        memset(cpu_kv_row(p.v, &p, &t, 0, pos), 0x5a, KD * sizeof(float));
    }
    proto_kv_layer bad = c;
    bad.v_scale = NULL;
    CHECK_EQ(cpu_kv_import_rows(&p, &t, pool, &bad), -1);
    bad = c;
    bad.head_dim = 7; /* odd: not a proto/kv.h shape */
    CHECK_EQ(cpu_kv_import_rows(&p, &t, pool, &bad), -1);
    bad = c;
    bad.head_dim = 4, bad.n_kv_heads = 2; /* a valid shape, half the pool's row width */
    CHECK_EQ(cpu_kv_import_rows(&p, &t, pool, &bad), -1);
    float mark[KD];
    memset(mark, 0x5a, sizeof mark);
    int written = 0; /* refused before any row: every row still holds its mark */
    for (int pos = 0; pos < N; pos++)
        written += memcmp(cpu_kv_row(p.k, &p, &t, 0, pos), mark, sizeof mark) != 0 ||
                   memcmp(cpu_kv_row(p.v, &p, &t, 0, pos), mark, sizeof mark) != 0;
    CHECK_EQ(written, 0);
    CHECK_EQ(cpu_kv_import_rows(&p, &t, pool, &c), 0);
    float want[KD];
    REQUIRE(cpu_kv_dequantize(PROTO_KV_INT8, c.k + (size_t)(N - 1) * KD, c.k_scale + (N - 1) * H, 1,
                              H, D, want) == 0);
    CHECK(memcmp(cpu_kv_row(p.k, &p, &t, 0, N - 1), want, sizeof want) == 0);
    free(buf);
    cpu_pool_free(pool);
    cpu_kv_table_free(&p, &t);
    cpu_kv_pool_deinit(&p);
}

TEST(cpu_kv_unreserved_pool_same_logits)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(STORIES, "cpu", &m, &d) == 0);
    const int n = 400, seqs = 3, steps = 3, V = m->cfg.vocab; /* 75 blocks of 16 in all */
    char err[256];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    accel_opts o = {.threads = 2, .mem_limit = (uint64_t)pages * (uint64_t)page * 2};
    accel_dev *g = devices_open("cpu", m, &o, err, sizeof err);
    REQUIRE(g);
    CHECK_EQ(cpu_accel_kv_reserved(g), 0);
    if (!cpu_accel_kv_reserved(d)) fprintf(stderr, "# the default pool was not reserved here\n");
    accel_dev *dev[2] = {d, g};
    accel_seq *s[2][3];
    float *lg[2];
    int32_t *ids = test_ids(n + steps, V, 37, 11);
    REQUIRE(ids);
    for (int k = 0; k < 2; k++) {
        lg[k] = malloc(sizeof(float) * seqs * steps * V);
        REQUIRE(lg[k]);
        for (int q = 0; q < seqs; q++) { /* each sequence's blocks taken while the others live */
            REQUIRE(accel_seq_new(dev[k], n + steps, &s[k][q]) == 0);
            accel_prefill_req r = {.seq = s[k][q], .ids = ids + q, .n = n - q};
            REQUIRE(accel_prefill(dev[k], &r) == 0);
        }
        for (int t = 0; t < steps; t++)
            for (int q = 0; q < seqs; q++)
                REQUIRE(accel_decode(dev[k], 1, &s[k][q], ids + n + t,
                                     lg[k] + ((size_t)t * seqs + q) * V) == 0);
    }
    CHECK_MSG(same(lg[0], lg[1], (size_t)seqs * steps * V),
              "decoding from a pool grown by copying differs from a reserved one");
    for (int k = 0; k < 2; k++) {
        for (int q = 0; q < seqs; q++) accel_seq_free(dev[k], s[k][q]);
        CHECK_EQ(cpu_accel_kv_blocks_in_use(dev[k]), 0);
        free(lg[k]);
    }
    free(ids);
    accel_free(g);
    accel_free(d);
    model_free(m);
}
