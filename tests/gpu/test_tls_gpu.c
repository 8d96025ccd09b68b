/* AsyncTLS's GPU kernels (gpu/tls_kernels.cu, gpu/tls_split.cu: reached with dlsym through the
 * test library, gpu/test/tls_test_api.cu; every case in both forms of the layer: one kernel of
 * thread-block clusters, three kernels) against the CPU reference (sparse/tls.c, cpu/tls.c) on
 * the same h16-rounded keys and queries, and the engine's sparse decode (gpu/tls.cu) through
 * accel.h.
 *
 * Selection: the GPU computes every score in the reference's arithmetic order with rounded
 * operations, so the lists must equal the CPU's exactly, ties included (the data below makes
 * exact ties at both levels: duplicated blocks and duplicated key rows) — no tie is excused.
 * Level-1 scores are compared bit for bit. Attention over the kept tokens: the decode attention's
 * bound from test_ops.c (8e-3 x max|v| in bf16: h16 inputs, float accumulation, an h16 output);
 * the one-kernel form's output is the same bits when a case runs again.
 * Engine: every key kept == dense decode within the random-weight models' logit bound (0.05,
 * tests/gpu/README.md) — another attention kernel, not the same bits; summaries recorded by the
 * decode steps themselves == summaries rebuilt from the cache (a fork, a truncation), bit for
 * bit in the logits. Skipped without the CUDA build or a device. */
#include "cpu/tls.h"
#include "cpu/ops.h"
#include "gpu/gpu.h"
#include "model/ckpt/tls_channels.h"
#include "model/tok/tokenizer.h"
#include "scheduler/sched.h"
#include "sparse/tls.h"
#include "tests/gpu/gpu_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct api {
    void *lib;
    int (*count)(void);
    int (*step)(int, int, int, int, int, int, int, int, int, int, const float *, const float *,
                const float *, const unsigned short *, int32_t *, int32_t *, float *, float *,
                unsigned long long *, int);
} api;

static int api_load(api *a, char *why, size_t n)
{
    const char *b = getenv("BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/libtandem_cuda_test.so", b && *b ? b : "build");
    a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        snprintf(why, n, "no CUDA build (%.200s)", dlerror());
        return -1;
    }
    a->count = (int (*)(void))dlsym(a->lib, "gpu_tls_test_device_count");
    *(void **)&a->step = dlsym(a->lib, "gpu_tls_test_step");
    if (!a->count || !a->step) {
        snprintf(why, n, "test library without the AsyncTLS entry points");
        return -1;
    }
    if (a->count() < 1) {
        snprintf(why, n, "no CUDA device");
        return -1;
    }
    return 0;
}

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static float bf16(float x)
{
    return model_bf16_to_f32(model_f32_to_bf16(x));
}

typedef struct tcase {
    int n_heads, n_kv, hd, n, bs, r, bb, tb, rebuilt, on;
    uint32_t seed;
} tcase;

/* Long structured synthetic KV (stated): keys uniform in [-0.5, 0.5); every 7th block a "topic"
 * block whose keys lean toward the query (+0.6 x sign of q's channel on every channel, with
 * noise), blocks 3 and 11 copies of block 5 (exact level-1 ties), and inside every 4th block
 * runs of equal rows (exact level-2 ties); values uniform in [-1, 1). Rounded to bf16. */
static void synth(const tcase *c, float *q, float *k, float *v)
{
    uint32_t s = c->seed;
    const int kvd = c->n_kv * c->hd, qd = c->n_heads * c->hd, G = c->n_heads / c->n_kv;
    for (int i = 0; i < qd; i++) q[i] = bf16(rnd(&s));
    for (int p = 0; p < c->n; p++) {
        const int blk = p / c->bs, topic = blk % 7 == 2;
        for (int g = 0; g < c->n_kv; g++)
            for (int e = 0; e < c->hd; e++) {
                float x = 0.5f * rnd(&s);
                if (topic) x = 0.6f * (q[(size_t)g * G * c->hd + e] > 0 ? 1.0f : -1.0f) + 0.3f * rnd(&s);
                k[(size_t)p * kvd + (size_t)g * c->hd + e] = bf16(x);
                v[(size_t)p * kvd + (size_t)g * c->hd + e] = bf16(rnd(&s));
            }
        if (blk % 4 == 1 && p % c->bs >= 8 && p % c->bs < 16)
            memcpy(k + (size_t)p * kvd, k + (size_t)(p - 1) * kvd, sizeof(float) * kvd);
    }
    const int nb = c->n / c->bs;
    for (int dst = 3; dst <= 11; dst += 8)
        if (nb > 11 && dst != 5)
            memcpy(k + (size_t)dst * c->bs * kvd, k + (size_t)5 * c->bs * kvd,
                   sizeof(float) * c->bs * kvd);
    /* seeds from 100: every key row one of the first 32 (a hash of the position picks it), so
     * that level 2's scores come in groups of equal ones and the k-th falls inside a group: the
     * ties the top-k's gather ranks (gpu/tls_topk.cuh tls_cl_gather: a small bucket) */
    if (c->seed >= 100)
        for (int p = 32; p < c->n; p++)
            memcpy(k + (size_t)p * kvd, k + (size_t)(((uint32_t)p * 2654435761u) >> 27) * kvd,
                   sizeof(float) * kvd);
}

/* form: the layer's one-kernel form (1; 4 / 5: in CTAs of 256 / 512 threads; 6: in clusters of 2
 * CTAs of 512) or its three kernels (2; 3: the selection's CTAs of 512 threads), gpu/tls.cuh and
 * gpu/tls_kernels.cu */
static void run_case(const api *a, const tcase *c, int form)
{
    const int kvd = c->n_kv * c->hd, qd = c->n_heads * c->hd, G = c->n_heads / c->n_kv;
    const int nb = (c->n + c->bs - 1) / c->bs;
    float *q = malloc(sizeof(float) * qd), *k = malloc(sizeof(float) * kvd * c->n),
          *v = malloc(sizeof(float) * kvd * c->n), *att = malloc(sizeof(float) * qd),
          *bsc = malloc(sizeof(float) * c->n_kv * nb);
    int32_t *idx = malloc(sizeof(int32_t) * c->n_kv * GPU_TLS_MAX_TOKENS), cnt[64];
    unsigned short *ch = malloc(sizeof(unsigned short) * c->n_kv * c->r);
    unsigned long long counters[4];
    REQUIRE(q && k && v && att && bsc && idx && ch && c->n_kv <= 64);
    synth(c, q, k, v);
    /* channels: r of them per head, ascending, spread over head_dim with a per-head offset */
    for (int g = 0; g < c->n_kv; g++)
        for (int i = 0; i < c->r; i++)
            ch[g * c->r + i] = (unsigned short)((i * c->hd) / c->r + g % (c->hd / c->r));
    int st = a->step(c->n_heads, c->n_kv, c->hd, c->n, c->bs, c->r, c->bb, c->tb, c->rebuilt,
                     c->on, q, k, v, ch, idx, cnt, att, bsc, counters, form);
    CHECK_MSG(st == 0, "gpu_tls_test_step: %d", st);
    if (st) goto out;
    if (form == 1 || form >= 4) { /* the one-kernel form: the same bits again (fixed orders) */
        float *again = malloc(sizeof(float) * qd);
        REQUIRE(again);
        st = a->step(c->n_heads, c->n_kv, c->hd, c->n, c->bs, c->r, c->bb, c->tb, c->rebuilt,
                     c->on, q, k, v, ch, idx, cnt, again, bsc, counters, form);
        CHECK_MSG(st == 0 && !memcmp(att, again, sizeof(float) * qd),
                  "case n=%d form %d: a second run's output is not the first's bits", c->n, form);
        free(again);
        if (st) goto out;
    }
    /* the reference on the same values */
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.block_size = c->bs, p.block_budget = c->bb, p.token_budget = c->tb, p.channels = c->r;
    p.dense_layers = 0;
    sparse_tls_seq *s = sparse_tls_seq_new(1, c->n_kv, c->hd, c->r, c->bs, c->n, ch);
    REQUIRE(s);
    for (int pp = 0; pp < c->n; pp++) sparse_tls_put(s, 0, pp, k + (size_t)pp * kvd);
    float *fw = malloc(sizeof(float) * sparse_tls_work_floats(&p, c->hd, c->n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_work_ints(&p, c->n));
    int32_t *pos = malloc(sizeof(int32_t) * c->n), *all = malloc(sizeof(int32_t) * c->n);
    float *ref = malloc(sizeof(float) * c->hd), *scr = malloc(sizeof(float) * c->n),
          *cs = malloc(sizeof(float) * nb), *agg = malloc(sizeof(float) * 2 * c->hd);
    REQUIRE(fw && iw && pos && all && ref && scr && cs && agg);
    for (int i = 0; i < c->n; i++) all[i] = i;
    float vmax = 0;
    for (size_t i = 0; i < (size_t)kvd * c->n; i++) vmax = fabsf(v[i]) > vmax ? fabsf(v[i]) : vmax;
    const double tol = 8e-3 * vmax;
    float *kb[1] = {k}, *vb[1] = {v};
    const int32_t table[1] = {0};
    double worst = 0;
    int64_t rows = 0;
    for (int pp = c->rebuilt; pp < c->n; pp++) rows += pp + 1;
    CHECK_MSG(counters[1] == (unsigned long long)(c->on ? rows * c->n_kv : 0),
              "keys counted %llu, want %lld", counters[1], (long long)(c->on ? rows * c->n_kv : 0));
    for (int g = 0; g < c->n_kv; g++) {
        const float *qg = q + (size_t)g * G * c->hd;
        int m;
        const int32_t *list;
        if (!c->on) {
            CHECK_MSG(cnt[g] == -c->n, "dense row: count %d, want %d", cnt[g], -c->n);
            m = c->n;
            list = all;
        } else {
            m = sparse_tls_select(&p, s, 0, g, qg, G, c->hd, c->n, pos, fw, iw, NULL);
            list = pos;
            CHECK_MSG(cnt[g] == m, "case n=%d bs=%d bb=%d tb=%d head %d: GPU kept %d, CPU %d",
                      c->n, c->bs, c->bb, c->tb, g, cnt[g], m);
            int diff = -1;
            for (int i = 0; i < m && i < cnt[g]; i++)
                if (idx[(size_t)g * GPU_TLS_MAX_TOKENS + i] != pos[i]) {
                    diff = i;
                    break;
                }
            CHECK_MSG(diff < 0, "case n=%d bs=%d bb=%d tb=%d head %d: lists differ at %d (GPU %d, CPU %d)",
                      c->n, c->bs, c->bb, c->tb, g, diff,
                      diff >= 0 ? idx[(size_t)g * GPU_TLS_MAX_TOKENS + diff] : 0, diff >= 0 ? pos[diff] : 0);
            if (nb > c->bb) {
                sparse_tls_block_scores(s, 0, g, qg, G, c->hd, nb, cs, agg);
                int bad = 0;
                for (int b = 0; b < nb; b++) bad += memcmp(&cs[b], &bsc[(size_t)g * nb + b], 4) != 0;
                CHECK_MSG(bad == 0, "head %d: %d of %d level-1 scores differ from the CPU's bits", g, bad, nb);
            }
        }
        for (int h = 0; h < G; h++) {
            cpu_tls_attend(ref, qg + (size_t)h * c->hd, kb, vb, table, c->n, (size_t)g * c->hd, list,
                           m, kvd, c->hd, 1.0f / sqrtf((float)c->hd), scr);
            for (int e = 0; e < c->hd; e++) {
                double d = fabs((double)ref[e] - att[((size_t)g * G + h) * c->hd + e]);
                worst = d > worst ? d : worst;
            }
        }
    }
    CHECK_MSG(worst <= tol, "case n=%d: attention over the kept keys off by %.3g (bound %.3g)", c->n,
              worst, tol);
    fprintf(stderr, "  tls form %d n=%d heads %d/%d hd %d bs %d bb %d tb %d rebuilt %d on %d: attention worst %.3g\n",
            form, c->n, c->n_heads, c->n_kv, c->hd, c->bs, c->bb, c->tb, c->rebuilt, c->on, worst);
    sparse_tls_seq_free(s);
    free(fw);
    free(iw);
    free(pos);
    free(all);
    free(ref);
    free(scr);
    free(cs);
    free(agg);
out:
    free(q);
    free(k);
    free(v);
    free(att);
    free(bsc);
    free(idx);
    free(ch);
}

TEST(gpu_tls_select_equals_cpu)
{
    api a;
    char why[300];
    if (api_load(&a, why, sizeof why)) SKIP("%s", why);
    const tcase cs[] = {
        /* both levels, many positions recorded by steps across block boundaries */
        {32, 8, 128, 3000, 64, 32, 8, 256, 2870, 1, 1},
        {8, 2, 128, 2100, 64, 32, 6, 200, 0, 1, 2},      /* every key recorded step by step */
        {8, 2, 128, 4096, 64, 32, 16, 1024, 4000, 1, 3}, /* level 1 ties (copied blocks) */
        {8, 2, 128, 4000, 64, 32, 100, 512, 3990, 1, 4}, /* level 1 keeps all, level 2 selects */
        {8, 2, 128, 4000, 64, 32, 12, 4096, 3990, 1, 5}, /* level 2 keeps all candidates */
        {8, 2, 128, 1500, 64, 32, 64, 4096, 1490, 1, 6}, /* every key kept: dense attention */
        {8, 2, 128, 1500, 64, 32, 8, 128, 1490, 0, 7},   /* a dense row through the list kernel */
        {4, 4, 64, 2500, 16, 16, 40, 300, 2400, 1, 8},   /* MHA, head_dim 64, block 16 */
        {16, 2, 128, 3000, 128, 32, 10, 700, 2950, 1, 9}, /* group of 8, block 128 */
        {4, 2, 96, 2000, 32, 24, 20, 333, 1950, 1, 10},  /* head_dim 96, r 24 (8-lane tail) */
        {64, 4, 128, 2000, 64, 64, 9, 400, 1990, 1, 11}, /* group of 16, r 64 */
        /* level 2 over 10,240 candidates; level 1 over 8,750 blocks, more than a CTA selects from
         * alone (gpu/tls_kernels.cu: then over the cluster) */
        {8, 2, 128, 12000, 64, 32, 160, 1024, 11990, 1, 12},
        {2, 1, 64, 140000, 16, 16, 8, 64, 139995, 1, 13},
        /* the attention's tiles (gpu/tls_kernels.cu tls_attend_tiles: 1,280 keys a CTA of 512
         * threads takes at once in a group of up to 4, 1,616 in clusters of 2, 592 in CTAs of
         * 256; 392, 512, 168 in a group of 9 to 16): dense rows of 2 to 4 tiles per CTA */
        {8, 2, 128, 12000, 64, 32, 8, 128, 11990, 0, 14},
        {64, 4, 128, 4000, 64, 64, 9, 400, 3990, 0, 15},
        /* fewer keys than an n-tile of 8 per CTA, and CTAs with none (20 keys over 8 CTAs) */
        {8, 2, 128, 60, 16, 32, 2, 20, 50, 1, 16},
        {16, 2, 96, 2000, 32, 24, 20, 333, 1950, 1, 17}, /* group of 8, head_dim 96 */
        /* kept lists longer than a tile (2,048 kept keys in a group of 16: 2 tiles a CTA of 256
         * threads and in clusters of 2), and a group of 8's dense row of 2-3 tiles (review) */
        {64, 4, 128, 6000, 64, 64, 40, 2048, 5990, 1, 18},
        {16, 2, 128, 6000, 64, 32, 8, 128, 5990, 0, 19},
        /* 32 distinct key rows: groups of equal scores at both levels, the k-th inside one */
        {8, 2, 128, 4000, 64, 32, 16, 300, 3990, 1, 101},
        {32, 8, 128, 3000, 64, 32, 20, 700, 2990, 1, 102},
    };
    for (int form = 1; form <= 6; form++)
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&a, &cs[i], form);
}

/* ---------------------------------------------------------------- the engine */

#define TLS_HD128 "--hidden 512 --layers 3 --heads 8 --kv-heads 2 --head-dim 128 --intermediate 768 " \
                  "--vocab 2000 --max-pos 8192"

static int decode1(accel_dev *d, accel_seq *s, int32_t id, float *lg)
{
    return accel_decode(d, 1, &s, &id, lg);
}

static int prefill(accel_dev *d, accel_seq *s, const int32_t *ids, int n, float *lg)
{
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg};
    return accel_prefill(d, &r);
}

/* The head_dim-128 mkmodel checkpoint with a channel file beside it, opened with opts (which
 * channels does not matter for these checks): 0, > 0 to skip (why), < 0 on failure. dense_blocks
 * (may be NULL): the KV pool's blocks of the device opened without the channel file. */
static int tls_open(const accel_opts *o, model **m, accel_dev **d, char *why, size_t n,
                    int *dense_blocks)
{
    accel_opts o0 = *o; /* the same plugin, without sparse decode (no channel file yet) */
    o0.decode_sparse = NULL;
    int r = tg_open_mkmodel(TLS_HD128, "tls128", &o0, m, d, why, n);
    if (r) return r;
    accel_info in;
    accel_get_info(*d, &in);
    if (dense_blocks) *dense_blocks = in.kv_blocks_total;
    model_channels mc = {.n_layers = (*m)->cfg.n_layers, .n_kv_heads = (*m)->cfg.n_kv_heads,
                         .head_dim = (*m)->cfg.head_dim, .r = 32, .calib_tokens = 1};
    mc.idx = malloc(sizeof(uint16_t) * mc.n_layers * mc.n_kv_heads * mc.r);
    if (!mc.idx) return -1;
    for (int i = 0; i < mc.n_layers * mc.n_kv_heads; i++)
        for (int j = 0; j < mc.r; j++) mc.idx[i * mc.r + j] = (uint16_t)(j * 4 + i % 4);
    char path[4200], dir[4200];
    snprintf(dir, sizeof dir, "%s", (*m)->dir);
    model_channels_path(dir, path, sizeof path);
    r = model_channels_save(path, &mc, why, n);
    free(mc.idx);
    accel_free(*d);
    model_free(*m);
    return r ? -1 : tg_open(dir, o, m, d, why, n);
}

TEST(gpu_tls_engine)
{
    model *m;
    accel_dev *d;
    char why[600];
    /* on by default for new sequences (layer 0 dense); each sequence set apart below */
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1"};
    int r = tls_open(&o, &m, &d, why, sizeof why, NULL);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab, N = 1000;
    int32_t *ids = tg_ids(N + 100, V, 7);
    float *l0 = malloc(sizeof(float) * V), *l1 = malloc(sizeof(float) * V),
          *l2 = malloc(sizeof(float) * V);
    REQUIRE(ids && l0 && l1 && l2);
    accel_seq *dense, *sp, *fk = NULL, *fk2 = NULL;
    REQUIRE(accel_seq_new(d, 4096, &dense) == 0 && accel_seq_new(d, 4096, &sp) == 0);
    REQUIRE(accel_seq_decode_sparse(d, dense, NULL) == 0);
    REQUIRE(prefill(d, dense, ids, N, l0) == 0 && prefill(d, sp, ids, N, l1) == 0);
    /* 1. every key kept: dense attention's result within the bound */
    sparse_tls_params all;
    sparse_tls_params_default(&all);
    all.block_budget = 64, all.token_budget = 4096, all.dense_below = 0, all.dense_layers = 1;
    REQUIRE(accel_seq_decode_sparse(d, sp, &all) == 0);
    double worst = 0;
    for (int t = 0; t < 20; t++) {
        REQUIRE(decode1(d, dense, ids[N + t], l0) == 0);
        REQUIRE(decode1(d, sp, ids[N + t], l1) == 0);
        double kl, top1, mx;
        tg_compare(l0, l1, 1, V, &kl, &top1, &mx);
        worst = mx > worst ? mx : worst;
    }
    CHECK_MSG(worst <= 0.05, "every key kept: logits off dense by %.3g (bound 0.05)", worst);
    fprintf(stderr, "  tls engine: every key kept, max |logit diff| vs dense %.3g\n", worst);
    accel_decode_stats ds;
    REQUIRE(accel_seq_decode_stats(d, sp, &ds) == 0);
    CHECK(ds.steps == 20 && ds.keys_read == ds.keys_total && ds.keys_total > 0);
    /* 2. small budgets: summaries recorded by decode steps == rebuilt from the cache */
    sparse_tls_params small = all;
    small.block_budget = 4, small.token_budget = 96;
    REQUIRE(accel_seq_decode_sparse(d, sp, &small) == 0);
    for (int t = 20; t < 90; t++) REQUIRE(decode1(d, sp, ids[N + t], l1) == 0);
    const int len = accel_seq_len(d, sp);
    REQUIRE(accel_seq_fork(d, sp, len, 4096, &fk) == 0);
    REQUIRE(decode1(d, sp, ids[N + 90], l1) == 0);
    REQUIRE(decode1(d, fk, ids[N + 90], l2) == 0);
    CHECK_MSG(memcmp(l1, l2, sizeof(float) * V) == 0, "a fork (summaries rebuilt) differs from the sequence it came from");
    /* a truncation into a block: its summaries rebuilt from the block's start */
    REQUIRE(accel_seq_truncate(d, sp, len - 3) == 0);
    REQUIRE(accel_seq_fork(d, sp, len - 3, 4096, &fk2) == 0);
    REQUIRE(decode1(d, sp, ids[N + 5], l1) == 0);
    REQUIRE(decode1(d, fk2, ids[N + 5], l2) == 0);
    CHECK_MSG(memcmp(l1, l2, sizeof(float) * V) == 0, "after a truncation the summaries differ from rebuilt ones");
    REQUIRE(accel_seq_decode_stats(d, fk, &ds) == 0);
    CHECK_MSG(ds.keys_read < ds.keys_total && ds.keys_read > 0 && ds.blocks_kept > 0,
              "stats: read %lld of %lld, blocks %lld", (long long)ds.keys_read,
              (long long)ds.keys_total, (long long)ds.blocks_kept);
    for (int i = 0; i < V; i++) CHECK(isfinite(l1[i]));
    /* 3. a batch: sparse and dense rows together == each alone (within the bound: other GEMMs) */
    accel_seq *bt[3];
    float *lb = malloc(sizeof(float) * V * 3);
    REQUIRE(lb);
    for (int i = 0; i < 3; i++) REQUIRE(accel_seq_fork(d, dense, N + 20, 4096, &bt[i]) == 0);
    REQUIRE(accel_seq_decode_sparse(d, bt[0], &small) == 0);
    REQUIRE(accel_seq_decode_sparse(d, bt[2], &small) == 0);
    int32_t bid[3] = {ids[3], ids[4], ids[5]};
    REQUIRE(accel_decode(d, 3, bt, bid, lb) == 0);
    accel_seq *solo;
    for (int i = 0; i < 3; i++) {
        REQUIRE(accel_seq_fork(d, dense, N + 20, 4096, &solo) == 0);
        if (i != 1) REQUIRE(accel_seq_decode_sparse(d, solo, &small) == 0);
        REQUIRE(decode1(d, solo, bid[i], l2) == 0);
        double kl, top1, mx;
        tg_compare(l2, lb + (size_t)i * V, 1, V, &kl, &top1, &mx);
        CHECK_MSG(mx <= 0.05, "batched row %d vs alone: %.3g", i, mx);
        accel_seq_free(d, solo);
    }
    for (int i = 0; i < 3; i++) accel_seq_free(d, bt[i]);
    free(lb);
    /* 4. a sequence that cannot: budgets past the kernels' bounds */
    sparse_tls_params big = all;
    big.token_budget = GPU_TLS_MAX_TOKENS + 1;
    CHECK(accel_seq_decode_sparse(d, dense, &big) == ACCEL_ERR_INVALID);
    accel_seq_free(d, fk);
    accel_seq_free(d, fk2);
    accel_seq_free(d, sp);
    accel_seq_free(d, dense);
    accel_free(d);
    model_free(m);
    free(ids);
    free(l0);
    free(l1);
    free(l2);
}

/* The staggered selection in the engine (stagger=1: gpu/tls.cu's per-sequence state, the
 * next-step launch after the layers in the decode graph): every key kept == dense within the
 * bound; with small budgets it decodes (finite logits, fewer keys read) and is not the exact
 * selection (some step's logits differ: the set comes from the step before); a truncation and a
 * fork restart the state: their first steps select synchronously, the same bits both ways. */
TEST(gpu_tls_stagger_engine)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1,stagger=1"};
    int r = tls_open(&o, &m, &d, why, sizeof why, NULL);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab, N = 1000;
    int32_t *ids = tg_ids(N + 100, V, 9);
    float *l0 = malloc(sizeof(float) * V), *l1 = malloc(sizeof(float) * V),
          *l2 = malloc(sizeof(float) * V);
    REQUIRE(ids && l0 && l1 && l2);
    accel_seq *dense, *st, *ex, *fk = NULL;
    REQUIRE(accel_seq_new(d, 4096, &dense) == 0 && accel_seq_new(d, 4096, &st) == 0 &&
            accel_seq_new(d, 4096, &ex) == 0);
    REQUIRE(accel_seq_decode_sparse(d, dense, NULL) == 0);
    REQUIRE(prefill(d, dense, ids, N, l0) == 0 && prefill(d, st, ids, N, l1) == 0);
    sparse_tls_params all;
    sparse_tls_params_default(&all);
    all.block_budget = 64, all.token_budget = 4096, all.dense_below = 0, all.dense_layers = 1;
    all.stagger = 1;
    REQUIRE(accel_seq_decode_sparse(d, st, &all) == 0);
    double worst = 0;
    for (int t = 0; t < 12; t++) {
        REQUIRE(decode1(d, dense, ids[N + t], l0) == 0);
        REQUIRE(decode1(d, st, ids[N + t], l1) == 0);
        double kl, top1, mx;
        tg_compare(l0, l1, 1, V, &kl, &top1, &mx);
        worst = mx > worst ? mx : worst;
    }
    CHECK_MSG(worst <= 0.05, "staggered, every key kept: logits off dense by %.3g (bound 0.05)", worst);
    /* small budgets, staggered and exact from the same state */
    sparse_tls_params small = all;
    small.block_budget = 4, small.token_budget = 96;
    REQUIRE(accel_seq_decode_sparse(d, st, &small) == 0);
    accel_seq_free(d, ex); /* exact from here: a fork of the staggered sequence */
    REQUIRE(accel_seq_fork(d, st, accel_seq_len(d, st), 4096, &ex) == 0);
    sparse_tls_params exact = small;
    exact.stagger = 0;
    REQUIRE(accel_seq_decode_sparse(d, ex, &exact) == 0);
    int differ = 0, finite = 1;
    for (int t = 12; t < 60; t++) {
        REQUIRE(decode1(d, st, ids[N + t], l1) == 0);
        REQUIRE(decode1(d, ex, ids[N + t], l2) == 0);
        differ += memcmp(l1, l2, sizeof(float) * V) != 0;
        for (int i = 0; i < V; i++) finite &= isfinite(l1[i]) != 0;
    }
    CHECK(finite);
    CHECK_MSG(differ > 0, "the staggered sequence decoded as the exact one on all 48 steps");
    accel_decode_stats ds;
    REQUIRE(accel_seq_decode_stats(d, st, &ds) == 0);
    CHECK(ds.keys_read < ds.keys_total && ds.keys_read > 0);
    /* a truncation into a block restarts the state as a fork's first step does */
    const int len = accel_seq_len(d, st);
    REQUIRE(accel_seq_truncate(d, st, len - 3) == 0);
    REQUIRE(accel_seq_fork(d, st, len - 3, 4096, &fk) == 0);
    REQUIRE(decode1(d, st, ids[N + 5], l1) == 0);
    REQUIRE(decode1(d, fk, ids[N + 5], l2) == 0);
    CHECK_MSG(memcmp(l1, l2, sizeof(float) * V) == 0, "staggered: after a truncation != a fork's first step");
    /* ... and the steps after continue alike */
    for (int t = 0; t < 4; t++) {
        REQUIRE(decode1(d, st, ids[N + 6 + t], l1) == 0);
        REQUIRE(decode1(d, fk, ids[N + 6 + t], l2) == 0);
        CHECK_MSG(memcmp(l1, l2, sizeof(float) * V) == 0, "staggered step %d after the restart differs", t);
    }
    accel_seq_free(d, fk);
    accel_seq_free(d, ex);
    accel_seq_free(d, st);
    accel_seq_free(d, dense);
    accel_free(d);
    model_free(m);
    free(ids);
    free(l0);
    free(l1);
    free(l2);
}

/* The staggered rows' next-step launches on the side stream (gpu/tls.cu, the default in steps of
 * 2 rows or more: each sparse layer's right after its attention, joined at the step's end) give
 * the bits of the one launch after the layers on the compute stream (TANDEM_TLS_NEXT=end, the
 * form gpu_tls_stagger_equals_cpu checks against the CPU): the logits of two staggered sequences
 * with small budgets, decoded as a batch of 2 (the side stream) and then one at a time (a step
 * of one row launches after the layers either way), equal step for step. */
static int stagger_run(const char *mode, float *out, int steps, char *why, size_t n)
{
    model *m;
    accel_dev *d;
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1,stagger=1"};
    const char *was = getenv("TANDEM_TLS_NEXT"); /* the caller's, put back after the open */
    char keep[16];
    snprintf(keep, sizeof keep, "%s", was ? was : "");
    setenv("TANDEM_TLS_NEXT", mode, 1);
    int r = tls_open(&o, &m, &d, why, n, NULL);
    if (was) setenv("TANDEM_TLS_NEXT", keep, 1);
    else unsetenv("TANDEM_TLS_NEXT");
    if (r) return r;
    const int V = m->cfg.vocab, N = 1000;
    int32_t *ids = tg_ids(N + steps, V, 11), *ids2 = tg_ids(N + 40 + steps, V, 12);
    float *lg = malloc(sizeof(float) * 2 * V);
    accel_seq *s[2] = {NULL, NULL};
    r = ids && ids2 && lg ? 0 : -1;
    if (!r) r = accel_seq_new(d, 4096, &s[0]) || accel_seq_new(d, 4096, &s[1]) ? -1 : 0;
    if (!r) r = prefill(d, s[0], ids, N, lg) || prefill(d, s[1], ids2, N + 40, lg) ? -1 : 0;
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.block_budget = 4, p.token_budget = 96, p.dense_below = 0, p.dense_layers = 1, p.stagger = 1;
    for (int i = 0; i < 2 && !r; i++) r = accel_seq_decode_sparse(d, s[i], &p) ? -1 : 0;
    for (int t = 0; t < steps && !r; t++) {
        int32_t tok[2] = {ids[N + t], ids2[N + 40 + t]};
        if (t < steps / 2) { /* a batch of 2, then each alone */
            r = accel_decode(d, 2, s, tok, lg) ? -1 : 0;
            if (!r) memcpy(out + (size_t)t * 2 * V, lg, sizeof(float) * 2 * V);
        } else {
            for (int i = 0; i < 2 && !r; i++) {
                r = decode1(d, s[i], tok[i], lg) ? -1 : 0;
                if (!r) memcpy(out + ((size_t)t * 2 + i) * V, lg, sizeof(float) * V);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (s[i]) accel_seq_free(d, s[i]);
    accel_free(d);
    model_free(m);
    free(ids);
    free(ids2);
    free(lg);
    return r;
}

TEST(gpu_tls_stagger_side)
{
    char why[600];
    const int steps = 16;
    model *m;
    accel_dev *d;
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1,stagger=1"};
    int r = tls_open(&o, &m, &d, why, sizeof why, NULL);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const size_t V = (size_t)m->cfg.vocab;
    accel_free(d);
    model_free(m);
    const size_t sz = sizeof(float) * steps * 2 * V, row2 = 2 * V;
    float *a = malloc(sz), *b = malloc(sz), *c = malloc(sz);
    REQUIRE(a && b && c);
    REQUIRE(stagger_run("end", a, steps, why, sizeof why) == 0);
    REQUIRE(stagger_run("side", b, steps, why, sizeof why) == 0);
    /* the check can fail: without the next-step launch (stale sets) some step differs */
    REQUIRE(stagger_run("0", c, steps, why, sizeof why) == 0);
    int stale = 0;
    for (int t = 0; t < steps; t++) {
        CHECK_MSG(memcmp(a + t * row2, b + t * row2, sizeof(float) * row2) == 0,
                  "staggered step %d: the side stream's logits != the launch after the layers", t);
        stale += memcmp(a + t * row2, c + t * row2, sizeof(float) * row2) != 0;
    }
    CHECK_MSG(stale > 0, "the stale sets decoded as the fresh ones on all %d steps", steps);
    free(a);
    free(b);
    free(c);
}

/* Two sequences' stats equal in what both count (the selections' traces). */
static int same_trace(const accel_decode_stats *a, const accel_decode_stats *b)
{
    return a->keys_read == b->keys_read && a->keys_total == b->keys_total &&
           a->blocks_new == b->blocks_new && a->blocks_kept == b->blocks_kept &&
           a->steps == b->steps;
}

/* The KV offloaded to host memory (sparse_tls_params.offload, gpu/tls_off.cu): an offloaded
 * sequence decodes bit for bit as the same sequence from the pool (the same kernels on the same
 * values; its sparse layers read from host memory in place), alone, in a batch beside pool rows,
 * after a truncation into a block (summaries rebuilt from host memory) and on a step where it
 * attends densely; its selections' counts equal, and the keys it read from host memory are
 * exactly its sparse layers' attended keys; what it can no longer do is refused. Both plugins
 * (bf16, fp16). */
static void tls_offload_case(enum accel_gpu_half half);
TEST(gpu_tls_offload)
{
    /* the host pool's memory and page layout (gpu/tls_hmem.cuh; an asked kind is not replaced
     * by another where it fails): cudaHostRegister'ed anonymous memory, K then V of every layer */
    setenv("TANDEM_TLS_HPOOL", "register", 1);
    setenv("TANDEM_TLS_HLAYOUT", "far", 1);
    tls_offload_case(ACCEL_GPU_HALF_BF16);
    /* the fp16 plugin with the three-kernel form's selection in CTAs of 512 threads (opt-in:
     * gpu_tls_split_layer in gpu/tls.cuh), VMM host memory, K and V side by side */
    setenv("TANDEM_TLS_SEL_THREADS", "512", 1);
    setenv("TANDEM_TLS_HPOOL", "vmm", 1);
    setenv("TANDEM_TLS_HLAYOUT", "near", 1);
    tls_offload_case(ACCEL_GPU_HALF_F16);
    unsetenv("TANDEM_TLS_SEL_THREADS");
    /* cudaHostAlloc'ed memory, K and V side by side */
    setenv("TANDEM_TLS_HPOOL", "hostalloc", 1);
    tls_offload_case(ACCEL_GPU_HALF_BF16);
    unsetenv("TANDEM_TLS_HPOOL");
    unsetenv("TANDEM_TLS_HLAYOUT");
}

static void tls_offload_case(enum accel_gpu_half half)
{
    model *m;
    accel_dev *d;
    char why[600];
    /* the host pool (gpu/tls_off.cu): 7 offloaded sequences of 4,096 positions at 8 MiB each */
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1", .gpu_half = half,
                    .gpu_tune = "offload_pool_mb=64"};
    int dense_blocks = 0;
    int r = tls_open(&o, &m, &d, why, sizeof why, &dense_blocks);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab, N = 1000, Ld = 1, n_kv = m->cfg.n_kv_heads;
    /* the summaries come from the pool's blocks as sequences need them: the channel file costs
     * the pool only the engine's scratch (it gave up 7.8 % here when they were set aside) */
    accel_info in;
    accel_get_info(d, &in);
    CHECK_MSG(in.kv_blocks_total >= dense_blocks - dense_blocks / 100,
              "pool with a channel file %d blocks, without %d", in.kv_blocks_total, dense_blocks);
    int32_t *ids = tg_ids(N + 200, V, 11);
    float *la = malloc(sizeof(float) * V * 3), *lb = malloc(sizeof(float) * V * 3);
    REQUIRE(ids && la && lb);
    accel_seq *base, *res, *off, *x;
    REQUIRE(accel_seq_new(d, 4096, &base) == 0);
    REQUIRE(prefill(d, base, ids, N, la) == 0);
    sparse_tls_params sp;
    sparse_tls_params_default(&sp);
    sp.block_budget = 4, sp.token_budget = 96, sp.dense_below = 0, sp.dense_layers = Ld;
    sparse_tls_params so = sp;
    so.offload = 1;
    REQUIRE(accel_seq_fork(d, base, N, 4096, &res) == 0);
    REQUIRE(accel_seq_fork(d, base, N, 4096, &off) == 0);
    REQUIRE(accel_seq_decode_sparse(d, res, &sp) == 0);
    REQUIRE(accel_seq_decode_sparse(d, off, &so) == 0);
    accel_get_info(d, &in);
    const int used0 = in.kv_blocks_used;
    /* 1. alone, 60 steps (level-1 blocks change, two new blocks begin) */
    int64_t keys = 0; /* keys of the rows, summed over steps (the dense layer reads them all) */
    int diff = 0;
    for (int t = 0; t < 60; t++) {
        REQUIRE(decode1(d, res, ids[N + t], la) == 0);
        REQUIRE(decode1(d, off, ids[N + t], lb) == 0);
        diff += memcmp(la, lb, sizeof(float) * V) != 0;
        keys += N + t + 1;
    }
    CHECK_MSG(diff == 0, "offloaded vs pool: %d of 60 steps' logits differ", diff);
    /* res: a copy of the shared partial block and its summaries' chunk; off: its dense layer's
     * and summaries' chunks (its KV blocks went back) */
    accel_get_info(d, &in);
    CHECK_MSG(in.kv_blocks_used >= used0 + 3, "pool blocks used %d, %d before the sparse steps",
              in.kv_blocks_used, used0);
    accel_decode_stats a, b;
    REQUIRE(accel_seq_decode_stats(d, res, &a) == 0 && accel_seq_decode_stats(d, off, &b) == 0);
    CHECK_MSG(b.offloaded == 1 && a.offloaded == 0, "offloaded flags %d / %d", b.offloaded, a.offloaded);
    CHECK_MSG(same_trace(&a, &b), "stats: read %lld / %lld, new blocks %lld / %lld",
              (long long)a.keys_read, (long long)b.keys_read, (long long)a.blocks_new,
              (long long)b.blocks_new);
    CHECK_MSG(a.host_keys == 0 && b.host_keys == b.keys_read - (int64_t)Ld * n_kv * keys &&
                  b.host_keys > 0 && b.host_keys < b.keys_total / 4,
              "host keys %lld of %lld read", (long long)b.host_keys, (long long)b.keys_read);
    fprintf(stderr, "  tls offload (%s, %s, %s): 60 steps bit for bit; keys from host memory %lld "
            "(%.1f%% of the rows' keys), level-1 blocks new %lld of %lld kept\n",
            half == ACCEL_GPU_HALF_F16 ? "fp16" : "bf16", getenv("TANDEM_TLS_HPOOL"),
            getenv("TANDEM_TLS_HLAYOUT"), (long long)b.host_keys,
            100.0 * (double)b.host_keys / (double)b.keys_total, (long long)b.blocks_new,
            (long long)b.blocks_kept);
    /* what an offloaded sequence cannot do */
    CHECK(accel_seq_fork(d, off, N, 4096, &x) == ACCEL_ERR_UNSUPPORTED);
    CHECK(prefill(d, off, ids, 4, la) == ACCEL_ERR_UNSUPPORTED);
    /* 2. in a batch beside pool rows, 18 rows (past the one-kernel form's clusters: the three
     * kernels of gpu/tls_split.cu): {pool, offloaded, dense} x 6 == {pool, pool, dense} x 6 */
    enum { BR = 18 };
    accel_seq *bx[BR], *by[BR];
    float *lx = malloc(sizeof(float) * V * BR), *ly = malloc(sizeof(float) * V * BR);
    REQUIRE(lx && ly);
    for (int i = 0; i < BR; i++) {
        REQUIRE(accel_seq_fork(d, base, N, 4096, &bx[i]) == 0);
        REQUIRE(accel_seq_fork(d, base, N, 4096, &by[i]) == 0);
        const sparse_tls_params *px = i % 3 == 0 ? &sp : i % 3 == 1 ? &so : NULL;
        REQUIRE(accel_seq_decode_sparse(d, bx[i], px) == 0);
        REQUIRE(accel_seq_decode_sparse(d, by[i], i % 3 == 2 ? NULL : &sp) == 0);
    }
    diff = 0;
    for (int t = 0; t < 20; t++) {
        int32_t bid[BR];
        for (int i = 0; i < BR; i++) bid[i] = ids[N + (7 * i + t) % 200];
        REQUIRE(accel_decode(d, BR, bx, bid, lx) == 0);
        REQUIRE(accel_decode(d, BR, by, bid, ly) == 0);
        diff += memcmp(lx, ly, sizeof(float) * V * BR) != 0;
    }
    CHECK_MSG(diff == 0, "a batch with offloaded rows: %d of 20 steps differ", diff);
    /* the row cache (gpu/tls_off.cu): the offloaded rows read over PCIe only the keys it did not
     * hold, some of the ones they attended in their sparse layers */
    int64_t bkeys = 0; /* a row's keys summed over the 20 steps (its dense layer reads them all) */
    for (int t = 0; t < 20; t++) bkeys += N + t + 1;
    int64_t held = 0, att = 0;
    for (int i = 1; i < BR; i += 3) {
        REQUIRE(accel_seq_decode_stats(d, bx[i], &a) == 0 && accel_seq_decode_stats(d, by[i], &b) == 0);
        CHECK(a.offloaded == 1 && b.offloaded == 0 && same_trace(&a, &b));
        const int64_t sk = a.keys_read - (int64_t)Ld * n_kv * bkeys; /* attended, sparse layers */
        CHECK_MSG(a.host_keys > 0 && a.host_keys < sk, "row %d: %lld keys over PCIe of %lld attended",
                  i, (long long)a.host_keys, (long long)sk);
        held += sk - a.host_keys, att += sk;
    }
    /* a truncation (positions rewritten with other tokens: the cache empties), then steps
     * without the cache (TANDEM_TLS_ROWCACHE=0: every attended key over PCIe), each still bit
     * for bit as the pool rows */
    for (int i = 0; i < BR; i++)
        REQUIRE(accel_seq_truncate(d, bx[i], N + 10) == 0 && accel_seq_truncate(d, by[i], N + 10) == 0);
    int64_t hk0[BR], rk0[BR];
    for (int ph = 0; ph < 2; ph++) {
        if (ph == 1) {
            setenv("TANDEM_TLS_ROWCACHE", "0", 1);
            for (int i = 1; i < BR; i += 3) {
                REQUIRE(accel_seq_decode_stats(d, bx[i], &a) == 0);
                hk0[i] = a.host_keys, rk0[i] = a.keys_read;
            }
        }
        diff = 0;
        for (int t = 0; t < 8; t++) {
            int32_t bid[BR];
            for (int i = 0; i < BR; i++) bid[i] = ids[N + (11 * i + 5 * t + 3 + ph * 40) % 200];
            REQUIRE(accel_decode(d, BR, bx, bid, lx) == 0);
            REQUIRE(accel_decode(d, BR, by, bid, ly) == 0);
            diff += memcmp(lx, ly, sizeof(float) * V * BR) != 0;
        }
        CHECK_MSG(diff == 0, "%s: %d of 8 steps differ", ph ? "without the row cache" : "after a truncation", diff);
    }
    unsetenv("TANDEM_TLS_ROWCACHE");
    int64_t dkeys = 0;
    for (int t = 0; t < 8; t++) dkeys += N + 10 + 8 + t + 1;
    for (int i = 1; i < BR; i += 3) {
        REQUIRE(accel_seq_decode_stats(d, bx[i], &a) == 0);
        CHECK_MSG(a.host_keys - hk0[i] == a.keys_read - rk0[i] - (int64_t)Ld * n_kv * dkeys,
                  "row %d without the row cache: %lld keys over PCIe, %lld attended", i,
                  (long long)(a.host_keys - hk0[i]),
                  (long long)(a.keys_read - rk0[i] - (int64_t)Ld * n_kv * dkeys));
    }
    fprintf(stderr, "  tls offload (%s): 18 rows x 20 steps bit for bit; the row cache held %.1f%% of "
            "the offloaded rows' %lld attended keys; after a truncation and without it, bit for bit\n",
            half == ACCEL_GPU_HALF_F16 ? "fp16" : "bf16", att ? 100.0 * (double)held / (double)att : 0.0,
            (long long)att);
    /* 3. a truncation into a block: its summaries rebuilt, the sparse layers' from host memory */
    const int len = accel_seq_len(d, off);
    REQUIRE(accel_seq_truncate(d, off, len - 37) == 0 && accel_seq_truncate(d, res, len - 37) == 0);
    diff = 0;
    for (int t = 0; t < 10; t++) {
        REQUIRE(decode1(d, res, ids[N + 150 + t], la) == 0);
        REQUIRE(decode1(d, off, ids[N + 150 + t], lb) == 0);
        diff += memcmp(la, lb, sizeof(float) * V) != 0;
    }
    CHECK_MSG(diff == 0, "after a truncation: %d of 10 steps differ", diff);
    /* 4. dense steps (the decode attention reading the sparse layers from host memory) */
    REQUIRE(accel_seq_decode_sparse(d, off, NULL) == 0 && accel_seq_decode_sparse(d, res, NULL) == 0);
    diff = 0;
    for (int t = 0; t < 5; t++) {
        REQUIRE(decode1(d, res, ids[N + 170 + t], la) == 0);
        REQUIRE(decode1(d, off, ids[N + 170 + t], lb) == 0);
        diff += memcmp(la, lb, sizeof(float) * V) != 0;
    }
    CHECK_MSG(diff == 0, "dense steps of an offloaded sequence: %d of 5 differ", diff);
    for (int i = 0; i < V; i++) CHECK(isfinite(lb[i]));
    for (int i = 0; i < BR; i++) accel_seq_free(d, bx[i]), accel_seq_free(d, by[i]);
    free(lx);
    free(ly);
    accel_seq_free(d, off);
    accel_seq_free(d, res);
    accel_seq_free(d, base);
    accel_get_info(d, &in);
    CHECK_MSG(in.kv_blocks_used == 0, "%d pool blocks still used after every sequence is freed",
              in.kv_blocks_used);
    accel_free(d);
    model_free(m);
    free(ids);
    free(la);
    free(lb);
}

/* The offload's pinned host pool (gpu/tls_off.cu), taken when the device opens: what the device
 * reports of it (accel_info.offload_bytes, offload_per_token, offload_any with decode_sparse's
 * default offload=1), sequences moved into its pages until they run out, the next one refused
 * cleanly (it stays in the KV pool and decodes as before), and pages coming back when a sequence
 * is freed. Every row decodes bit for bit as its twin that never leaves the KV pool. */
TEST(gpu_tls_offload_pool)
{
    model *m;
    accel_dev *d;
    char why[600];
    /* pages of 128 positions x 2 sparse layers x 2 KV heads x 128 x (K, V) h16 = 256 KiB: 80 of
     * them in 20 MiB, a 4,096-position sequence takes 32: two fit, a third does not */
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1,offload=1,"
                                     "block_budget=4,token_budget=96,dense_below=0",
                    .gpu_tune = "offload_pool_mb=20"};
    int r = tls_open(&o, &m, &d, why, sizeof why, NULL);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab, N = 1000, C = 4096, Ld = 1;
    const uint64_t page = 2ull * (uint64_t)(m->cfg.n_layers - Ld) * (uint64_t)m->cfg.n_kv_heads *
                          128 * (uint64_t)m->cfg.head_dim * 2;
    accel_info in;
    accel_get_info(d, &in);
    CHECK_MSG(in.offload_bytes == (20ull << 20) / page * page && in.offload_per_token == page / 128 &&
                  in.offload_any == 1,
              "offload_bytes %llu per_token %llu any %d (page %llu)",
              (unsigned long long)in.offload_bytes, (unsigned long long)in.offload_per_token,
              in.offload_any, (unsigned long long)page);
    int32_t *ids = tg_ids(N + 100, V, 13);
    float *la = malloc(sizeof(float) * V * 3), *lb = malloc(sizeof(float) * V * 3);
    REQUIRE(ids && la && lb);
    accel_seq *base, *s[4], *t[4];
    REQUIRE(accel_seq_new(d, C, &base) == 0);
    REQUIRE(prefill(d, base, ids, N, la) == 0);
    sparse_tls_params sp;
    sparse_tls_params_default(&sp);
    sp.block_budget = 4, sp.token_budget = 96, sp.dense_below = 0, sp.dense_layers = Ld;
    for (int i = 0; i < 4; i++) {
        /* s: the device's default (offload=1); t: the same kept in the KV pool */
        REQUIRE(accel_seq_fork(d, base, N, C, &s[i]) == 0);
        REQUIRE(accel_seq_fork(d, base, N, C, &t[i]) == 0);
        REQUIRE(accel_seq_decode_sparse(d, t[i], &sp) == 0);
    }
    int diff = 0;
    for (int k = 0; k < 8; k++) {
        int32_t bid[3];
        for (int i = 0; i < 3; i++) bid[i] = ids[N + (5 * i + k) % 100];
        REQUIRE(accel_decode(d, 3, s, bid, la) == 0);
        REQUIRE(accel_decode(d, 3, t, bid, lb) == 0);
        diff += memcmp(la, lb, sizeof(float) * V * 3) != 0;
    }
    CHECK_MSG(diff == 0, "three rows, two offloaded: %d of 8 steps differ", diff);
    accel_decode_stats st[4];
    for (int i = 0; i < 3; i++) REQUIRE(accel_seq_decode_stats(d, s[i], &st[i]) == 0);
    CHECK_MSG(st[0].offloaded == 1 && st[1].offloaded == 1 && st[2].offloaded == 0,
              "offloaded %d %d %d: the pool holds two", st[0].offloaded, st[1].offloaded,
              st[2].offloaded);
    CHECK(st[0].host_keys > 0 && st[2].host_keys == 0);
    /* one freed: its pages take the next one */
    accel_seq_free(d, s[0]);
    accel_seq_free(d, t[0]);
    s[0] = s[3], t[0] = t[3];
    diff = 0;
    for (int k = 0; k < 8; k++) {
        int32_t bid[3];
        for (int i = 0; i < 3; i++) bid[i] = ids[N + (3 * i + k + 40) % 100];
        REQUIRE(accel_decode(d, 3, s, bid, la) == 0);
        REQUIRE(accel_decode(d, 3, t, bid, lb) == 0);
        diff += memcmp(la, lb, sizeof(float) * V * 3) != 0;
    }
    CHECK_MSG(diff == 0, "after a free: %d of 8 steps differ", diff);
    for (int i = 0; i < 3; i++) REQUIRE(accel_seq_decode_stats(d, s[i], &st[i]) == 0);
    CHECK_MSG(st[0].offloaded == 1 && st[1].offloaded == 1 && st[2].offloaded == 0,
              "after a free: offloaded %d %d %d", st[0].offloaded, st[1].offloaded, st[2].offloaded);
    fprintf(stderr, "  tls offload pool: %llu bytes (%d pages); 2 sequences in, the third refused "
            "and decoding from the KV pool, a freed one's pages reused; bit for bit\n",
            (unsigned long long)in.offload_bytes, (int)(in.offload_bytes / page));
    for (int i = 0; i < 3; i++) accel_seq_free(d, s[i]), accel_seq_free(d, t[i]);
    accel_seq_free(d, base);
    accel_get_info(d, &in);
    CHECK_MSG(in.kv_blocks_used == 0, "%d pool blocks still used", in.kv_blocks_used);
    accel_free(d);
    model_free(m);
    free(ids);
    free(la);
    free(lb);
}

/* The admission of offloaded sequences, through the scheduler on the GPU (scheduler/
 * sched_policy.c with accel_info from the cuda device: offload_any, resident_*, offload_bytes,
 * offload_per_token): with decode_sparse's default offload=1 and a host pool of 80 pages, twelve
 * requests of 1,048 positions (9 pages each) submitted at once: eight are placed, the tier's
 * room, and four wait although the device's memory would hold them whole; each of the eight
 * moves out at its first decode step (the pool's pages in use climb to 8 x 9), the waiting ones
 * run as the first end, nothing is preempted, and every page and block comes back. */
#define OS_REQ 12
#define OS_TOK 40
static struct {
    uv_loop_t loop;
    accel_dev *d;
    int warm, finals, n_tok[OS_REQ], done[OS_REQ], err[OS_REQ];
    uint64_t peak;
} OS;

static void os_warm(void *ctx, int ok)
{
    OS.warm = ok ? 1 : -1;
    uv_stop(&OS.loop);
}

static void os_event(void *ctx, const sched_event *ev)
{
    const int i = (int)(intptr_t)ctx;
    accel_info in;
    if (ev->type == SCHED_EV_TOKEN) {
        OS.n_tok[i]++;
        accel_get_info(OS.d, &in);
        if (in.offload_used > OS.peak) OS.peak = in.offload_used;
    }
    if (ev->type == SCHED_EV_DONE) OS.done[i]++;
    if (ev->type == SCHED_EV_ERROR) OS.err[i]++;
    if ((ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) && ++OS.finals >= OS_REQ)
        uv_stop(&OS.loop);
}

TEST(gpu_tls_offload_sched)
{
    model *m;
    char why[600];
    accel_opts o = {.decode_sparse = "asynctls,block_size=64,dense_layers=1,offload=1,"
                                     "block_budget=4,token_budget=96,dense_below=0",
                    .gpu_tune = "offload_pool_mb=20"};
    memset(&OS, 0, sizeof OS);
    int r = tls_open(&o, &m, &OS.d, why, sizeof why, NULL);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int N = 1008, V = m->cfg.vocab;
    model_tok *tok = model_tok_load("build/data/tokenizer/llama3/tokenizer.json", NULL, why, sizeof why);
    if (!tok) fprintf(stderr, "  tokenizer: %s\n", why);
    REQUIRE(tok);
    accel_info in;
    accel_get_info(OS.d, &in);
    const uint64_t seq = 9 * 128 * in.offload_per_token; /* one request's pages */
    CHECK(in.offload_any && in.offload_bytes / seq == 8);
    uv_loop_init(&OS.loop);
    sched_config cfg = {.max_waiting = 64, .max_running = 64, .no_prefix_cache = 1};
    sched *s = sched_new(&OS.loop, &OS.d, 1, tok, &cfg, os_warm, NULL, why, sizeof why);
    if (!s) fprintf(stderr, "  sched_new: %s\n", why);
    REQUIRE(s);
    uv_run(&OS.loop, UV_RUN_DEFAULT);
    REQUIRE(OS.warm == 1);
    int32_t *ids = tg_ids(N * OS_REQ, V, 17);
    REQUIRE(ids);
    for (int i = 0; i < OS_REQ; i++) {
        sched_params p = {0};
        p.prompt = ids + i * N;
        p.n_prompt = N;
        p.max_tokens = OS_TOK;
        p.n = 1;
        p.sampling = model_sampling_default();
        p.sampling.temperature = 0;
        p.ignore_eos = 1;
        sched_req *q;
        REQUIRE(sched_submit(s, &p, os_event, (void *)(intptr_t)i, &q, why, sizeof why) == SCHED_OK);
    }
    sched_stats st;
    sched_get_stats(s, &st);
    CHECK_MSG(st.n_running == 8 && st.n_waiting == OS_REQ - 8,
              "placed %d, waiting %d: the host pool holds 8", st.n_running, st.n_waiting);
    uv_run(&OS.loop, UV_RUN_DEFAULT);
    int ok = 0;
    for (int i = 0; i < OS_REQ; i++) ok += OS.done[i] == 1 && !OS.err[i] && OS.n_tok[i] == OS_TOK;
    CHECK_MSG(ok == OS_REQ, "%d of %d requests done with %d tokens", ok, OS_REQ, OS_TOK);
    sched_get_stats(s, &st);
    CHECK_MSG(st.dev[0].preemptions == 0, "%llu preemptions", (unsigned long long)st.dev[0].preemptions);
    CHECK_MSG(OS.peak >= 3 * seq && OS.peak <= 8 * seq,
              "host pool in use at most %.1f sequences' pages", (double)OS.peak / (double)seq);
    fprintf(stderr, "  tls offload sched: %d requests, 8 placed then 4 as they ended; host pool "
            "peak %.0f of 8 sequences' pages, %llu preemptions\n", OS_REQ, (double)OS.peak / (double)seq,
            (unsigned long long)st.dev[0].preemptions);
    sched_free(s);
    uv_run(&OS.loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&OS.loop), 0);
    accel_get_info(OS.d, &in);
    CHECK_MSG(in.offload_used == 0 && in.kv_blocks_used == 0, "left: %llu host bytes, %d blocks",
              (unsigned long long)in.offload_used, in.kv_blocks_used);
    accel_free(OS.d);
    model_tok_free(tok);
    model_free(m);
    free(ids);
}
