/* The paged-device contract (scheduler/accel.h, "Paged devices") as checks over any device with
 * ACCEL_CAP_PAGED, shared by tests/accel/test_paged_conf.c (every device, stories260K) and
 * tests/gpu/test_paged.c (the CUDA kernels' head_dim-128 paths on an mkmodel checkpoint).
 * Every comparison is bit for bit: two sequences that went through the same calls with the same
 * tokens run the same arithmetic whatever blocks hold their KV, so any difference is the block
 * table's (a wrong block, a shared block written through, a copy that missed bytes). Written in
 * units of the device's own block (kv_block_tokens), so the same checks fit cpu (16), cuda
 * (128) and any other size. Static functions: include in one test file each. */
#ifndef TANDEM_TESTS_PAGED_CHECKS_H
#define TANDEM_TESTS_PAGED_CHECKS_H
#include "scheduler/accel.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>

/* Pseudo-random token ids in [1, vocab). */
static void pc_ids(int32_t *ids, int n, int vocab, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 1 + (int32_t)((seed >> 8) % (uint32_t)(vocab - 1));
    }
}

/* Prefill ids into s; the last row's logits into lg (may be NULL). */
static int pc_prefill(accel_dev *d, accel_seq *s, const int32_t *ids, int n, float *lg)
{
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg};
    return accel_prefill(d, &r);
}

static int pc_decode(accel_dev *d, accel_seq *s, int32_t id, float *lg)
{
    return accel_decode(d, 1, &s, &id, lg);
}

static int pc_same(const float *a, const float *b, int V)
{
    return memcmp(a, b, sizeof(float) * (size_t)V) == 0;
}

static void pc_usage(accel_dev *d, int *used, int *cached)
{
    accel_info i;
    accel_get_info(d, &i);
    *used = i.kv_blocks_used;
    *cached = i.kv_blocks_cached;
}

/* A partial last block shared by three sequences (two forks of a): each writes its next token
 * into its own copy. The forks and the original decode exactly as fresh sequences given the same
 * tokens; a fork at a block boundary and at 0 share no partial block. */
static void pc_fork_cow(accel_dev *d, int V)
{
    accel_info in;
    accel_get_info(d, &in);
    REQUIRE(in.caps & ACCEL_CAP_PAGED);
    const int B = in.kv_block_tokens, P = B + B / 2 + 3, cap = P + 8;
    int32_t *ids = malloc(sizeof(int32_t) * P);
    float *l[8];
    for (int i = 0; i < 8; i++) l[i] = malloc(sizeof(float) * (size_t)V);
    REQUIRE(ids && l[7]);
    pc_ids(ids, P, V, 11);
    const int32_t x = ids[3], y = ids[5], z = ids[7];
    accel_seq *a, *f1, *f2, *r1, *r2, *g0, *gb;
    REQUIRE(accel_seq_new(d, cap, &a) == 0);
    REQUIRE(pc_prefill(d, a, ids, P, NULL) == 0);
    int used, cached;
    pc_usage(d, &used, &cached);
    CHECK_EQ(used, 2);
    REQUIRE(accel_seq_fork(d, a, P, cap, &f1) == 0);
    REQUIRE(accel_seq_fork(d, a, P, cap, &f2) == 0);
    CHECK_EQ(accel_seq_len(d, f1), P);
    pc_usage(d, &used, &cached);
    CHECK_MSG(used == 2, "forks take no blocks: %d used", used); /* shared, counted once */
    /* f1 writes first (its copy), then a (its copy: f2 still shares), then f2 (the last owner) */
    REQUIRE(pc_decode(d, f1, x, l[0]) == 0);
    REQUIRE(pc_decode(d, a, y, l[1]) == 0);
    REQUIRE(pc_decode(d, f2, x, l[2]) == 0);
    pc_usage(d, &used, &cached);
    CHECK_MSG(used == 4, "one block shared by all, three private copies: %d used", used);
    /* references: fresh sequences with the same calls */
    REQUIRE(accel_seq_new(d, cap, &r1) == 0 && accel_seq_new(d, cap, &r2) == 0);
    REQUIRE(pc_prefill(d, r1, ids, P, NULL) == 0 && pc_prefill(d, r2, ids, P, NULL) == 0);
    REQUIRE(pc_decode(d, r1, x, l[3]) == 0 && pc_decode(d, r2, y, l[4]) == 0);
    CHECK_MSG(pc_same(l[0], l[3], V), "fork 1 after its copy differs from a fresh sequence");
    CHECK_MSG(pc_same(l[2], l[3], V), "fork 2 differs from a fresh sequence");
    CHECK_MSG(pc_same(l[1], l[4], V), "the original after the forks' writes differs");
    /* one more step on each: the forks stay equal to each other and to the reference */
    REQUIRE(pc_decode(d, f1, z, l[0]) == 0 && pc_decode(d, f2, z, l[2]) == 0);
    REQUIRE(pc_decode(d, r1, z, l[3]) == 0 && pc_decode(d, a, z, l[1]) == 0);
    REQUIRE(pc_decode(d, r2, z, l[4]) == 0);
    CHECK(pc_same(l[0], l[2], V) && pc_same(l[0], l[3], V));
    CHECK(pc_same(l[1], l[4], V));
    /* forks at a block boundary and at 0 */
    REQUIRE(accel_seq_fork(d, a, B, cap, &gb) == 0 && accel_seq_fork(d, a, 0, cap, &g0) == 0);
    CHECK_EQ(accel_seq_len(d, g0), 0);
    REQUIRE(pc_prefill(d, gb, ids + B, P - B, NULL) == 0 && pc_decode(d, gb, y, l[5]) == 0);
    /* g0 replays gb's history: block 0 from a P-token prefill (a GPU's GEMMs may round rows
     * differently in passes of other lengths), then the rest */
    REQUIRE(pc_prefill(d, g0, ids, P, NULL) == 0 && accel_seq_truncate(d, g0, B) == 0);
    REQUIRE(pc_prefill(d, g0, ids + B, P - B, NULL) == 0);
    REQUIRE(pc_decode(d, g0, y, l[6]) == 0);
    CHECK_MSG(pc_same(l[5], l[6], V), "a fork at a block boundary differs from its own prefill");
    accel_seq *all[] = {a, f1, f2, r1, r2, g0, gb};
    for (int i = 0; i < 7; i++) accel_seq_free(d, all[i]);
    pc_usage(d, &used, &cached);
    CHECK_MSG(used == 0 && cached == 0, "blocks left after every free: %d used, %d cached", used,
              cached);
    for (int i = 0; i < 8; i++) free(l[i]);
    free(ids);
}

/* Two full blocks saved to host memory and loaded into a new sequence: its later prefill and
 * decode equal the original's, and the block saved again has the same bytes. */
static void pc_save_load(accel_dev *d, int V)
{
    accel_info in;
    accel_get_info(d, &in);
    REQUIRE(in.caps & ACCEL_CAP_PAGED);
    const int B = in.kv_block_tokens, n = 2 * B + 10;
    const size_t bb = in.kv_block_bytes;
    int32_t *ids = malloc(sizeof(int32_t) * n);
    float *ls = malloc(sizeof(float) * (size_t)V), *lt = malloc(sizeof(float) * (size_t)V);
    unsigned char *h0 = accel_host_alloc(d, bb), *h1 = accel_host_alloc(d, bb);
    unsigned char *again = malloc(bb);
    REQUIRE(ids && ls && lt && h0 && h1 && again);
    pc_ids(ids, n, V, 23);
    accel_seq *s, *t;
    REQUIRE(accel_seq_new(d, n + 4, &s) == 0 && accel_seq_new(d, n + 4, &t) == 0);
    REQUIRE(pc_prefill(d, s, ids, 2 * B, NULL) == 0);
    CHECK_EQ(accel_kv_block_save(d, s, 2, h0), ACCEL_ERR_INVALID); /* not held */
    REQUIRE(accel_kv_block_save(d, s, 0, h0) == 0 && accel_kv_block_save(d, s, 1, h1) == 0);
    REQUIRE(pc_prefill(d, s, ids + 2 * B, 10, ls) == 0);
    CHECK_EQ(accel_kv_block_save(d, s, 2, h0), ACCEL_ERR_INVALID); /* partial */
    REQUIRE(accel_kv_block_load(d, t, h0) == 0);
    REQUIRE(accel_kv_block_load(d, t, h1) == 0);
    CHECK_EQ(accel_seq_len(d, t), 2 * B);
    REQUIRE(pc_prefill(d, t, ids + 2 * B, 10, lt) == 0);
    CHECK_MSG(pc_same(ls, lt, V), "prefill after loaded blocks differs");
    CHECK_EQ(accel_kv_block_load(d, t, h0), ACCEL_ERR_INVALID); /* length not a block multiple */
    REQUIRE(pc_decode(d, s, ids[1], ls) == 0 && pc_decode(d, t, ids[1], lt) == 0);
    CHECK_MSG(pc_same(ls, lt, V), "decode after loaded blocks differs");
    REQUIRE(accel_kv_block_save(d, t, 1, again) == 0);
    CHECK_MSG(memcmp(again, h1, bb) == 0, "a loaded block saved again has other bytes");
    accel_seq_free(d, s);
    accel_seq_free(d, t);
    accel_host_free(d, h0);
    accel_host_free(d, h1);
    free(again);
    free(ids);
    free(ls);
    free(lt);
}

/* A prefix-cache hit against the same prompt served cold (what the scheduler's prefix cache does,
 * scheduler/sched_pcache.c): a holder prefilled the prompt's first two blocks and another
 * continuation; a fork of it at the block boundary prefills only the prompt's rest. cold and hit
 * each get 4 rows of logits: the prompt's last position, then 3 decode steps of the same tokens.
 * This is not the same call history (one prefill of P against a prefill of 2 blocks, a fork and
 * a prefill of the rest), so the caller compares with its device's bound: bit for bit on the CPU
 * and the card, the bound of a GPU computation in another order on the GPU. */
static void pc_hit_vs_cold_rows(accel_dev *d, int V, float *cold, float *hit)
{
    accel_info in;
    accel_get_info(d, &in);
    REQUIRE(in.caps & ACCEL_CAP_PAGED);
    const int B = in.kv_block_tokens, P = 2 * B + 37, O = 2 * B + 50;
    int32_t *ids = malloc(sizeof(int32_t) * P), *other = malloc(sizeof(int32_t) * O);
    REQUIRE(ids && other);
    pc_ids(ids, P, V, 31);
    memcpy(other, ids, sizeof(int32_t) * 2 * B);
    pc_ids(other + 2 * B, O - 2 * B, V, 37);
    const int32_t next[3] = {ids[3], ids[5], ids[7]};
    accel_seq *c, *h, *f;
    REQUIRE(accel_seq_new(d, P + 4, &c) == 0 && accel_seq_new(d, O, &h) == 0);
    REQUIRE(pc_prefill(d, c, ids, P, cold) == 0);
    REQUIRE(pc_prefill(d, h, other, O, NULL) == 0);
    REQUIRE(accel_seq_fork(d, h, 2 * B, P + 4, &f) == 0);
    accel_seq_free(d, h); /* the fork keeps the shared blocks */
    REQUIRE(pc_prefill(d, f, ids + 2 * B, P - 2 * B, hit) == 0);
    for (int i = 0; i < 3; i++) {
        REQUIRE(pc_decode(d, c, next[i], cold + (size_t)(i + 1) * V) == 0);
        REQUIRE(pc_decode(d, f, next[i], hit + (size_t)(i + 1) * V) == 0);
    }
    CHECK_EQ(accel_seq_len(d, c), P + 3);
    CHECK_EQ(accel_seq_len(d, f), P + 3);
    accel_seq_free(d, c);
    accel_seq_free(d, f);
    int used, cached;
    pc_usage(d, &used, &cached);
    CHECK_EQ(used, 0);
    free(ids);
    free(other);
}

/* Sequences grown in turns (their blocks interleaved in the pool, and after a free out of
 * order) give exactly what one grown alone gives. */
static void pc_interleaved(accel_dev *d, int V, int blocks)
{
    accel_info in;
    accel_get_info(d, &in);
    REQUIRE(in.caps & ACCEL_CAP_PAGED);
    const int B = in.kv_block_tokens, n = blocks * B, step = B / 2 + 1;
    int32_t *ids = malloc(sizeof(int32_t) * n), *other = malloc(sizeof(int32_t) * n);
    float *lz = malloc(sizeof(float) * (size_t)V), *lx = malloc(sizeof(float) * (size_t)V);
    float *junk = malloc(sizeof(float) * (size_t)V);
    REQUIRE(ids && other && lz && lx && junk);
    pc_ids(ids, n, V, 31);
    pc_ids(other, n, V, 37);
    accel_seq *z, *x, *y, *w;
    /* scatter the free ids: w and y take blocks between x's, then w is freed */
    REQUIRE(accel_seq_new(d, n, &x) == 0 && accel_seq_new(d, n, &y) == 0 &&
            accel_seq_new(d, n, &w) == 0 && accel_seq_new(d, n, &z) == 0);
    int ok = 1;
    for (int p = 0; p < n - 4 && ok; p += step) {
        const int c = p + step < n - 4 ? step : n - 4 - p;
        REQUIRE(pc_prefill(d, x, ids + p, c, lx) == 0);
        REQUIRE(pc_prefill(d, y, other + p, c, NULL) == 0);
        if (p + c <= n / 2) REQUIRE(pc_prefill(d, w, other + p, c, NULL) == 0);
        if (p + c > n / 2 && accel_seq_len(d, w) > 0) REQUIRE(accel_seq_truncate(d, w, 0) == 0);
        REQUIRE(pc_prefill(d, z, ids + p, c, lz) == 0);
        ok = pc_same(lx, lz, V);
        CHECK_MSG(ok, "chunk at %d: interleaved blocks differ from the same calls alone", p);
    }
    for (int k = 0; k < 4 && ok; k++) {
        REQUIRE(pc_decode(d, x, other[k], lx) == 0 && pc_decode(d, y, ids[k], junk) == 0);
        REQUIRE(pc_decode(d, z, other[k], lz) == 0);
        ok = pc_same(lx, lz, V);
        CHECK_MSG(ok, "decode step %d: interleaved blocks differ", k);
    }
    accel_seq_free(d, x);
    accel_seq_free(d, y);
    accel_seq_free(d, w);
    accel_seq_free(d, z);
    free(ids);
    free(other);
    free(lz);
    free(lx);
    free(junk);
}

/* A pool of exactly 3 blocks (the caller opened d so): growth past it is ACCEL_ERR_NOMEM with
 * the sequence unchanged, a truncate or a free makes room, and the sequence then goes on exactly
 * as one that never met the limit; a holder's blocks count as cached until it is freed. */
static void pc_nomem(accel_dev *d, int V)
{
    accel_info in;
    accel_get_info(d, &in);
    REQUIRE(in.caps & ACCEL_CAP_PAGED);
    CHECK_EQ(in.kv_blocks_total, 3);
    CHECK(in.mem_free == 3 * in.kv_block_bytes);
    const int B = in.kv_block_tokens, cap = 4 * B;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    float *la = malloc(sizeof(float) * (size_t)V), *lr = malloc(sizeof(float) * (size_t)V);
    REQUIRE(ids && la && lr);
    pc_ids(ids, cap, V, 41);
    accel_seq *a, *b, *r, *h, *u;
    REQUIRE(accel_seq_new(d, cap, &a) == 0 && accel_seq_new(d, cap, &b) == 0);
    REQUIRE(pc_prefill(d, a, ids, 2 * B + 1, NULL) == 0);
    accel_get_info(d, &in);
    CHECK(in.kv_blocks_used == 3 && in.mem_free == 0);
    CHECK_EQ(pc_prefill(d, b, ids, 1, la), ACCEL_ERR_NOMEM);
    CHECK_EQ(accel_seq_len(d, b), 0);
    CHECK_EQ(accel_seq_len(d, a), 2 * B + 1);
    REQUIRE(pc_decode(d, a, ids[2], la) == 0); /* inside its last block */
    REQUIRE(accel_seq_truncate(d, a, B) == 0);
    accel_get_info(d, &in);
    CHECK_EQ(in.kv_blocks_used, 1);
    REQUIRE(pc_prefill(d, b, ids, 1, NULL) == 0);
    REQUIRE(pc_prefill(d, a, ids + B, B, NULL) == 0); /* takes the third block */
    CHECK_EQ(pc_decode(d, a, ids[3], la), ACCEL_ERR_NOMEM);
    CHECK_EQ(accel_seq_len(d, a), 2 * B);
    accel_get_info(d, &in);
    CHECK_EQ(in.health, ACCEL_HEALTH_OK); /* no room is an answer, not a fault */
    accel_seq_free(d, b);
    REQUIRE(pc_decode(d, a, ids[3], la) == 0);
    accel_seq_free(d, a);
    /* the same calls with room all along */
    REQUIRE(accel_seq_new(d, cap, &r) == 0);
    REQUIRE(pc_prefill(d, r, ids, 2 * B + 1, NULL) == 0 && pc_decode(d, r, ids[2], lr) == 0);
    REQUIRE(accel_seq_truncate(d, r, B) == 0 && pc_prefill(d, r, ids + B, B, NULL) == 0);
    REQUIRE(pc_decode(d, r, ids[3], lr) == 0);
    CHECK_MSG(pc_same(la, lr, V), "a sequence after NOMEM and recovery differs");
    /* a holder: its blocks are cached once nothing else references them */
    REQUIRE(accel_seq_fork(d, r, B, B, &h) == 0 && accel_seq_hold(d, h) == 0);
    CHECK_EQ(pc_prefill(d, h, ids, 1, NULL), ACCEL_ERR_INVALID);
    accel_get_info(d, &in);
    CHECK(in.kv_blocks_used == 3 && in.kv_blocks_cached == 0);
    accel_seq_free(d, r);
    accel_get_info(d, &in);
    CHECK(in.kv_blocks_used == 1 && in.kv_blocks_cached == 1 && in.mem_free == 3 * in.kv_block_bytes);
    REQUIRE(accel_seq_fork(d, h, B, cap, &u) == 0 && pc_decode(d, u, ids[5], la) == 0);
    accel_get_info(d, &in);
    CHECK(in.kv_blocks_used == 2 && in.kv_blocks_cached == 0);
    accel_seq_free(d, u);
    accel_seq_free(d, h);
    accel_get_info(d, &in);
    CHECK(in.kv_blocks_used == 0 && in.kv_blocks_cached == 0 && in.n_seqs == 0);
    free(ids);
    free(la);
    free(lr);
}

/* ---------------------------------------------------------------- export of held KV */

/* Exported chunks, each copied whole (a sink's chunk lives only during its call). */
typedef struct pc_kv {
    int n, cap;
    proto_kv_layer *c;
} pc_kv;

static int pc_keep(void *ctx, const proto_kv_layer *c)
{
    pc_kv *st = ctx;
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 64;
        proto_kv_layer *a = realloc(st->c, sizeof *a * (size_t)cap);
        if (!a) return ACCEL_ERR_NOMEM;
        st->c = a;
        st->cap = cap;
    }
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t sb = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim) * 2;
    uint8_t *b = malloc(2 * vb + 2 * sb);
    if (!b) return ACCEL_ERR_NOMEM;
    memcpy(b, c->k, vb);
    memcpy(b + vb, c->v, vb);
    memcpy(b + 2 * vb, c->k_scale, sb);
    memcpy(b + 2 * vb + sb, c->v_scale, sb);
    proto_kv_layer k = *c;
    k.k = b;
    k.v = b + vb;
    k.k_scale = (const uint16_t *)(b + 2 * vb);
    k.v_scale = (const uint16_t *)(b + 2 * vb + sb);
    st->c[st->n++] = k;
    return 0;
}

static void pc_kv_free(pc_kv *st)
{
    for (int i = 0; i < st->n; i++) free((void *)st->c[i].k);
    free(st->c);
    memset(st, 0, sizeof *st);
}

/* Chunks that hold (layer, pos): how many, and the last one with the row of pos in it. */
static int pc_kv_find(const pc_kv *st, int layer, int pos, const proto_kv_layer **c, int *row)
{
    int n = 0;
    for (int i = 0; i < st->n; i++)
        if (st->c[i].layer == layer && pos >= st->c[i].pos0 &&
            pos < st->c[i].pos0 + st->c[i].n_tokens) {
            *c = &st->c[i];
            *row = pos - st->c[i].pos0;
            n++;
        }
    return n;
}

/* got holds positions [p0, p1) of every layer exactly once (nothing else), each row's K, V and
 * scales the bytes ref has for it. 1 when so. */
static int pc_kv_rows_equal(const pc_kv *ref, const pc_kv *got, int layers, int p0, int p1)
{
    long rows = 0;
    for (int i = 0; i < got->n; i++) rows += got->c[i].n_tokens;
    if (rows != (long)layers * (p1 - p0)) return 0;
    for (int l = 0; l < layers; l++)
        for (int p = p0; p < p1; p++) {
            const proto_kv_layer *a = NULL, *b = NULL; /* set by pc_kv_find when it returns 1 */
            int ra = 0, rb = 0;
            if (pc_kv_find(ref, l, p, &a, &ra) != 1 || pc_kv_find(got, l, p, &b, &rb) != 1)
                return 0;
            if (a->dtype != b->dtype || a->n_kv_heads != b->n_kv_heads || a->head_dim != b->head_dim)
                return 0;
            size_t vb = proto_kv_value_bytes(a->dtype, 1, a->n_kv_heads, a->head_dim);
            size_t sc = proto_kv_scale_count(a->dtype, 1, a->n_kv_heads, a->head_dim);
            if (memcmp(a->k + ra * vb, b->k + rb * vb, vb) || memcmp(a->v + ra * vb, b->v + rb * vb, vb) ||
                memcmp(a->k_scale + ra * sc, b->k_scale + rb * sc, sc * 2) ||
                memcmp(a->v_scale + ra * sc, b->v_scale + rb * sc, sc * 2))
                return 0;
        }
    return 1;
}

/* accel_kv_export of KV a sequence holds (ACCEL_CAP_KV_EXPORT_HELD) gives the bytes its prefill
 * exported: a prompt prefilled in three calls with its export kept, then exported again whole,
 * a range across a block edge, a fork's prefix, and a sequence that got the first two blocks
 * from host memory (one buffer: the loads may go as one run) and prefilled the rest — its
 * logits and its prefill's export equal the original's, and its held export too. After a
 * decode step of the same token in both, their held exports of that position are equal. Skips
 * (returns) on a device without the entry. */
static void pc_export_held(accel_dev *d, int V)
{
    accel_info in;
    accel_get_info(d, &in);
    REQUIRE(in.caps & ACCEL_CAP_PAGED);
    if (!(in.caps & ACCEL_CAP_KV_EXPORT_HELD)) SKIP("%s does not export held KV", in.name);
    const int L = accel_model(d)->cfg.n_layers;
    const int B = in.kv_block_tokens, P = 2 * B + B / 2 + 5;
    const size_t bb = in.kv_block_bytes;
    int32_t *ids = malloc(sizeof(int32_t) * (P + 1));
    float *ls = malloc(sizeof(float) * (size_t)V), *lg = malloc(sizeof(float) * (size_t)V);
    unsigned char *hb = accel_host_alloc(d, 2 * bb);
    REQUIRE(ids && ls && lg && hb);
    pc_ids(ids, P + 1, V, 71);
    pc_kv a = {0}, g = {0}, x = {0};
    accel_kv_sink ka = {pc_keep, &a}, kg = {pc_keep, &g}, kx = {pc_keep, &x};
    accel_seq *s, *f, *t;
    REQUIRE(accel_seq_new(d, P + 1, &s) == 0 && accel_seq_new(d, P + 1, &t) == 0);
    const int cut[4] = {0, B + 3, 2 * B, P};
    for (int i = 0; i < 3; i++) {
        accel_prefill_req r = {.seq = s, .ids = ids + cut[i], .n = cut[i + 1] - cut[i],
                               .logits = i == 2 ? ls : NULL, .kv = &ka};
        REQUIRE(accel_prefill(d, &r) == 0);
    }
    REQUIRE(accel_kv_export(d, s, 0, P, &kx) == 0);
    CHECK_MSG(pc_kv_rows_equal(&a, &x, L, 0, P), "held export of a prompt differs from its prefill's");
    pc_kv_free(&x);
    REQUIRE(accel_kv_export(d, s, B - 5, B + 9, &kx) == 0);
    CHECK_MSG(pc_kv_rows_equal(&a, &x, L, B - 5, 2 * B + 4), "held export of a range differs");
    pc_kv_free(&x);
    CHECK_EQ(accel_kv_export(d, s, 1, P, &kx), ACCEL_ERR_INVALID); /* past the end */
    REQUIRE(accel_seq_fork(d, s, 2 * B, P, &f) == 0);
    REQUIRE(accel_kv_export(d, f, 0, 2 * B, &kx) == 0);
    CHECK_MSG(pc_kv_rows_equal(&a, &x, L, 0, 2 * B), "held export of a fork differs");
    pc_kv_free(&x);
    accel_seq_free(d, f);
    /* the host tier: two blocks back, then the rest prefilled as s's last call was */
    REQUIRE(accel_kv_block_save(d, s, 0, hb) == 0 && accel_kv_block_save(d, s, 1, hb + bb) == 0);
    REQUIRE(accel_kv_block_load(d, t, hb) == 0 && accel_kv_block_load(d, t, hb + bb) == 0);
    accel_prefill_req rt = {.seq = t, .ids = ids + 2 * B, .n = P - 2 * B, .logits = lg, .kv = &kg};
    REQUIRE(accel_prefill(d, &rt) == 0);
    CHECK_MSG(pc_same(ls, lg, V), "prefill after blocks loaded from one buffer differs");
    CHECK_MSG(pc_kv_rows_equal(&a, &g, L, 2 * B, P), "its export differs from the original's");
    REQUIRE(accel_kv_export(d, t, 0, P, &kx) == 0);
    CHECK_MSG(pc_kv_rows_equal(&a, &x, L, 0, P), "held export after loaded blocks differs");
    pc_kv_free(&x);
    pc_kv_free(&g);
    REQUIRE(pc_decode(d, s, ids[P], ls) == 0 && pc_decode(d, t, ids[P], lg) == 0);
    REQUIRE(accel_kv_export(d, s, P, 1, &kx) == 0 && accel_kv_export(d, t, P, 1, &kg) == 0);
    CHECK_MSG(pc_kv_rows_equal(&x, &g, L, P, P + 1), "held export of a decoded position differs");
    pc_kv_free(&x);
    pc_kv_free(&g);
    pc_kv_free(&a);
    accel_seq_free(d, s);
    accel_seq_free(d, t);
    accel_host_free(d, hb);
    free(ids);
    free(ls);
    free(lg);
}

#endif
