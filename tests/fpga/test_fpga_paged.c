/* The card's KV in pages (fpga/kernels/dec_layout.h "KV pages", fpga/kv_pool.h): whatever ids a
 * sequence's block table holds — consecutive, interleaved with another sequence's, shared with a
 * fork, copied on write, saved to the host and loaded back — the kernels compute exactly what
 * they compute for that sequence alone on a fresh card, bit for bit. Every reference here is the
 * same card decoding the same tokens without the condition under test. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdlib.h>
#include <string.h>

#define T_BLK 128 /* stories260K: lcm(128, 16 x 8 parts) */

static int32_t tok(int i, int salt, int vocab)
{
    return (int32_t)((i * 37 + salt * 11 + 1) % vocab);
}

/* Decodes tokens tok(from..to-1, salt) into s; the logits of the last step into lg. */
static int run(accel_dev *d, accel_seq *s, int from, int to, int salt, float *lg)
{
    int V = accel_model(d)->cfg.vocab;
    for (int i = from; i < to; i++) {
        int32_t id = tok(i, salt, V);
        int st = accel_decode(d, 1, &s, &id, lg);
        if (st) return st;
    }
    return 0;
}

/* The logits of decoding tok(0..n, salt) alone on a fresh card (the second emulated card: the
 * tests' own device is card 0). */
static void alone(const model *m, int n, int salt, float *lg)
{
    char err[256];
    accel_opts o = {.weight_bits = 8};
    accel_dev *d = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(d);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n + 1, &s) == 0);
    REQUIRE(run(d, s, 0, n, salt, lg) == 0);
    accel_seq_free(d, s);
    accel_free(d);
}

TEST(fpga_paged_interleaved_blocks_equal_alone)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    const int V = m->cfg.vocab, N = 2 * T_BLK + 20;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *r = malloc(sizeof(float) * V);
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(d, N, &sa) == 0 && accel_seq_new(d, N, &sb) == 0);
    /* a and b grow in turns: their blocks interleave (a: 0, 2, 4; b: 1, 3, 5) */
    for (int i = 0; i < N; i++) {
        REQUIRE(run(d, sa, i, i + 1, 1, a) == 0);
        REQUIRE(run(d, sb, i, i + 1, 2, b) == 0);
    }
    fpga_dec_kvmap ka, kb;
    REQUIRE(fpga_dev_seq_kvmap(d, sa, &ka) == 0 && fpga_dev_seq_kvmap(d, sb, &kb) == 0);
    CHECK_EQ(ka.n_ids, 3);
    CHECK(ka.ids[1] != ka.ids[0] + 1 && kb.ids[1] != kb.ids[0] + 1); /* not consecutive */
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 6);
    alone(m, N, 1, r);
    CHECK(memcmp(a, r, sizeof(float) * V) == 0);
    alone(m, N, 2, r);
    CHECK(memcmp(b, r, sizeof(float) * V) == 0);
    accel_seq_free(d, sa);
    accel_seq_free(d, sb);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 0);
    free(a), free(b), free(r);
    accel_free(d);
    model_free(m);
}

/* A fork shares the blocks of the prefix; the shared partial block is copied by whichever side
 * writes into it first, so each side sees only its own tokens. */
TEST(fpga_paged_fork_copy_on_write)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    const int V = m->cfg.vocab, P = T_BLK + 40, N = P + 30;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *r = malloc(sizeof(float) * V);
    accel_seq *src, *f;
    REQUIRE(accel_seq_new(d, N, &src) == 0);
    REQUIRE(run(d, src, 0, P, 1, a) == 0);
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 2);
    REQUIRE(accel_seq_fork(d, src, P, N, &f) == 0);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 2); /* shared, not copied */
    /* the fork continues with other tokens (salt 3 from P on), the source with its own */
    for (int i = P; i < N; i++) {
        int32_t x = tok(i, 3, V), y = tok(i, 1, V);
        REQUIRE(accel_decode(d, 1, &f, &x, b) == 0);
        REQUIRE(accel_decode(d, 1, &src, &y, a) == 0);
    }
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 3); /* block 0 shared, block 1 copied once */
    alone(m, N, 1, r);
    CHECK(memcmp(a, r, sizeof(float) * V) == 0);
    /* the fork's reference: tokens of salt 1 up to P, then salt 3 */
    {
        char err[256];
        accel_opts o = {.weight_bits = 8};
        accel_dev *e = devices_open("fpga-emu:1", m, &o, err, sizeof err);
        REQUIRE(e);
        accel_seq *s;
        REQUIRE(accel_seq_new(e, N, &s) == 0);
        REQUIRE(run(e, s, 0, P, 1, r) == 0 && run(e, s, P, N, 3, r) == 0);
        CHECK(memcmp(b, r, sizeof(float) * V) == 0);
        accel_seq_free(e, s);
        accel_free(e);
    }
    accel_seq_free(d, src);
    accel_seq_free(d, f);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 0);
    free(a), free(b), free(r);
    accel_free(d);
    model_free(m);
}

/* Blocks saved to the host and loaded into another sequence give that sequence exactly the
 * source's state; a truncated sequence gives its blocks back and decodes as if it had never gone
 * further. */
TEST(fpga_paged_block_save_load_truncate)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    const int V = m->cfg.vocab, N = 2 * T_BLK + 5;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    accel_info info;
    accel_get_info(d, &info);
    REQUIRE(info.kv_block_tokens == T_BLK);
    uint8_t *buf = malloc(2 * info.kv_block_bytes);
    accel_seq *s, *t;
    REQUIRE(accel_seq_new(d, N + 1, &s) == 0 && accel_seq_new(d, N + 1, &t) == 0);
    REQUIRE(run(d, s, 0, 2 * T_BLK, 1, a) == 0);
    for (int k = 0; k < 2; k++) REQUIRE(accel_kv_block_save(d, s, k, buf + k * info.kv_block_bytes) == 0);
    CHECK_EQ(accel_kv_block_save(d, s, 2, buf), ACCEL_ERR_INVALID); /* not held */
    for (int k = 0; k < 2; k++) REQUIRE(accel_kv_block_load(d, t, buf + k * info.kv_block_bytes) == 0);
    CHECK_EQ(accel_seq_len(d, t), 2 * T_BLK);
    uint8_t *ka = malloc(tf_kv_bytes(d, 2 * T_BLK)), *kb = malloc(tf_kv_bytes(d, 2 * T_BLK));
    REQUIRE(tf_read_kv(d, s, 2 * T_BLK, ka) == 0 && tf_read_kv(d, t, 2 * T_BLK, kb) == 0);
    CHECK(memcmp(ka, kb, tf_kv_bytes(d, 2 * T_BLK)) == 0);
    REQUIRE(run(d, s, 2 * T_BLK, N, 1, a) == 0 && run(d, t, 2 * T_BLK, N, 1, b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * V) == 0);
    /* truncate s back into its first block, then decode what t decodes from there */
    accel_get_info(d, &info);
    int used = info.kv_blocks_used;
    REQUIRE(accel_seq_truncate(d, s, T_BLK - 3) == 0);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, used - 2);
    accel_seq *u;
    REQUIRE(accel_seq_new(d, N + 1, &u) == 0);
    REQUIRE(run(d, u, 0, T_BLK - 3, 1, a) == 0);
    REQUIRE(run(d, s, T_BLK - 3, T_BLK + 9, 7, a) == 0 && run(d, u, T_BLK - 3, T_BLK + 9, 7, b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * V) == 0);
    accel_seq_free(d, s);
    accel_seq_free(d, t);
    accel_seq_free(d, u);
    free(a), free(b), free(buf), free(ka), free(kb);
    accel_free(d);
    model_free(m);
}

/* A pool of 3 blocks: growth past it answers NOMEM and leaves the sequence as it was; after
 * another sequence gives its blocks back the same step succeeds, with the same logits as a
 * sequence that never ran out. An import that needs more blocks than are free is refused before
 * anything lands. */
TEST(fpga_paged_nomem_leaves_sequence_unchanged)
{
    char err[256];
    tf_cache_env();
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    accel_dev *probe;
    accel_opts o = {.weight_bits = 8};
    REQUIRE((probe = devices_open("fpga-emu", m, &o, err, sizeof err)));
    accel_info info;
    accel_get_info(probe, &info);
    accel_free(probe);
    o.mem_limit = 3 * info.kv_block_bytes;
    accel_dev *d = devices_open("fpga-emu", m, &o, err, sizeof err);
    REQUIRE(d);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_total, 3);
    const int V = m->cfg.vocab, N = 2 * T_BLK + 3;
    float *a = malloc(sizeof(float) * V), *r = malloc(sizeof(float) * V);
    accel_seq *s, *x;
    REQUIRE(accel_seq_new(d, N, &s) == 0 && accel_seq_new(d, N, &x) == 0);
    REQUIRE(run(d, x, 0, 2, 5, a) == 0);                 /* x holds block 0 */
    REQUIRE(run(d, s, 0, 2 * T_BLK, 1, a) == 0);         /* s: blocks 1, 2 */
    CHECK_EQ(run(d, s, 2 * T_BLK, 2 * T_BLK + 1, 1, a), ACCEL_ERR_NOMEM);
    CHECK_EQ(accel_seq_len(d, s), 2 * T_BLK);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 3);
    CHECK_EQ(info.health, ACCEL_HEALTH_OK);
    tf_kv kv = {0};
    {
        accel_opts oc = {.threads = 1};
        accel_dev *cpu = devices_open("cpu", m, &oc, err, sizeof err);
        REQUIRE(cpu);
        int32_t ids[T_BLK + 8];
        for (int i = 0; i < T_BLK + 8; i++) ids[i] = tok(i, 9, V);
        REQUIRE(tf_cpu_kv(cpu, ids, T_BLK + 8, NULL, &kv) == 0);
        accel_free(cpu);
        accel_seq *y;
        REQUIRE(accel_seq_new(d, T_BLK + 9, &y) == 0);
        CHECK_EQ(accel_kv_import(d, y, &kv.chunks[0]), ACCEL_ERR_NOMEM);
        CHECK_EQ(accel_seq_len(d, y), 0);
        accel_seq_free(d, y);
    }
    accel_seq_free(d, x);
    REQUIRE(run(d, s, 2 * T_BLK, N, 1, a) == 0);
    alone(m, N, 1, r);
    CHECK(memcmp(a, r, sizeof(float) * V) == 0);
    accel_seq_free(d, s);
    accel_get_info(d, &info);
    CHECK_EQ(info.kv_blocks_used, 0);
    tf_kv_free(&kv);
    free(a), free(r);
    accel_free(d);
    model_free(m);
}

/* An import lands through the table: pieces split at block boundaries into blocks that are not
 * consecutive, and kv_check verifies the run through the same table. */
TEST(fpga_paged_import_across_scattered_blocks)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    char err[256];
    accel_opts oc = {.threads = 1};
    accel_dev *cpu = devices_open("cpu", m, &oc, err, sizeof err);
    REQUIRE(cpu);
    const int V = m->cfg.vocab, NT = 2 * T_BLK + 30;
    int32_t *ids = malloc(sizeof *ids * (NT + 1));
    for (int i = 0; i <= NT; i++) ids[i] = tok(i, 4, V);
    tf_kv kv;
    REQUIRE(tf_cpu_kv(cpu, ids, NT, NULL, &kv) == 0);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    /* holes: x takes blocks 0..2, y 3; freeing x leaves 0..2 free below y */
    accel_seq *x, *y, *s;
    REQUIRE(accel_seq_new(d, 3 * T_BLK, &x) == 0 && accel_seq_new(d, 8, &y) == 0);
    REQUIRE(run(d, x, 0, 2 * T_BLK + 1, 6, a) == 0 && run(d, y, 0, 1, 6, a) == 0);
    accel_seq_free(d, x);
    REQUIRE(accel_seq_new(d, 3 * T_BLK, &x) == 0);
    REQUIRE(run(d, x, 0, 1, 6, a) == 0); /* x: block 0 again */
    REQUIRE(accel_seq_new(d, NT + 1, &s) == 0);
    fpga_card *c = fpga_dev_card(d);
    c->piece_limit = 50; /* several pieces per block */
    CHECK_EQ(tf_import(d, s, &kv), 0);
    fpga_dec_kvmap km;
    REQUIRE(fpga_dev_seq_kvmap(d, s, &km) == 0);
    CHECK(km.n_ids == 3 && km.ids[0] == 1 && km.ids[1] == 2 && km.ids[2] == 4);
    REQUIRE(accel_decode(d, 1, &s, &ids[NT], a) == 0);
    /* the same import on a fresh card, into blocks 0, 1, 2 */
    accel_opts o = {.weight_bits = 8};
    accel_dev *e = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(e);
    accel_seq *t;
    REQUIRE(accel_seq_new(e, NT + 1, &t) == 0);
    CHECK_EQ(tf_import(e, t, &kv), 0);
    REQUIRE(accel_decode(e, 1, &t, &ids[NT], b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * V) == 0);
    accel_seq_free(e, t);
    accel_free(e);
    accel_seq_free(d, s);
    accel_seq_free(d, x);
    accel_seq_free(d, y);
    tf_kv_free(&kv);
    free(ids), free(a), free(b);
    accel_free(cpu);
    accel_free(d);
    model_free(m);
}
