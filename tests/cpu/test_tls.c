/* AsyncTLS's selection (sparse/tls.c) and the attention over it (cpu/tls.c): block scores against
 * Quest's per-head definition computed here independently in double, the labels' error bound,
 * top-k against a full sort, the selection's properties, and exact equality with dense attention
 * when the budgets cover every key. */
#include "cpu/ops.h"
#include "cpu/tls.h"
#include "sparse/tls.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>

static uint64_t rng_state;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

typedef struct kvset {
    int n, n_kv, hd, G;
    float *k, *v, *q; /* k, v (n, n_kv, hd); q (n_kv * G, hd) */
    uint16_t *ch;     /* (1, n_kv, r) */
    sparse_tls_seq *s;
} kvset;

/* n random keys; key rows get a per-block offset so blocks differ (a structure Quest can see) */
static void kvset_new(kvset *x, int n, int n_kv, int hd, int G, int r, int bs, uint64_t seed)
{
    rng_state = seed;
    *x = (kvset){.n = n, .n_kv = n_kv, .hd = hd, .G = G};
    x->k = malloc(sizeof(float) * n * n_kv * hd);
    x->v = malloc(sizeof(float) * n * n_kv * hd);
    x->q = malloc(sizeof(float) * n_kv * G * hd);
    x->ch = malloc(sizeof(uint16_t) * n_kv * r);
    for (int i = 0; i < n * n_kv * hd; i++) {
        x->k[i] = frand() + 0.5f * sinf((float)(i / (n_kv * hd) / bs) * 0.7f + (float)(i % hd));
        x->v[i] = frand();
    }
    for (int i = 0; i < n_kv * G * hd; i++) x->q[i] = frand();
    for (int g = 0; g < n_kv; g++)
        for (int i = 0; i < r; i++) x->ch[g * r + i] = (uint16_t)(i * (hd / r) + g % (hd / r));
    x->s = sparse_tls_seq_new(1, n_kv, hd, r, bs, n, x->ch);
    for (int p = 0; p < n && x->s; p++) sparse_tls_put(x->s, 0, p, x->k + (size_t)p * n_kv * hd);
}

static void kvset_free(kvset *x)
{
    free(x->k);
    free(x->v);
    free(x->q);
    free(x->ch);
    sparse_tls_seq_free(x->s);
}

TEST(tls_params_defaults_and_checks)
{
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    CHECK(p.block_size == 64 && p.block_budget == 128 && p.token_budget == 1024 &&
          p.channels == 32 && p.dense_layers == 2 && p.dense_below == -1);
    char err[128];
    CHECK_EQ(sparse_tls_params_check(&p, 128, err, sizeof err), 0);
    CHECK(sparse_tls_dense(&p, 1, 100000) && !sparse_tls_dense(&p, 2, 1025) &&
          sparse_tls_dense(&p, 2, 1024));
    sparse_tls_params b = p;
    b.channels = 33;
    CHECK(sparse_tls_params_check(&b, 128, err, sizeof err) < 0 && strstr(err, "channels"));
    b = p;
    b.channels = 256;
    CHECK(sparse_tls_params_check(&b, 128, err, sizeof err) < 0);
    b = p;
    b.block_size = 48;
    CHECK(sparse_tls_params_check(&b, 128, err, sizeof err) < 0 && strstr(err, "block_size"));
    b = p;
    b.token_budget = 0;
    CHECK(sparse_tls_params_check(&b, 128, err, sizeof err) < 0 && strstr(err, "token_budget"));
    b = p;
    b.block_budget = 0;
    CHECK(sparse_tls_params_check(&b, 128, err, sizeof err) < 0 && strstr(err, "block_budget"));
    /* offload: off by default, 0 or 1 from a spec, anything else names the key */
    CHECK(p.offload == 0);
    int on = 0;
    CHECK(sparse_tls_parse("asynctls,offload=1", 128, &b, &on, NULL, err, sizeof err) == 0 && on &&
          b.offload == 1 && b.token_budget == 1024);
    CHECK(sparse_tls_parse("asynctls,offload=2", 128, &b, &on, NULL, err, sizeof err) < 0 &&
          strstr(err, "offload"));
    /* stagger: the exact selection by default, 0 or 1 from a spec */
    CHECK(p.stagger == 0);
    CHECK(sparse_tls_parse("asynctls,stagger=1", 128, &b, &on, NULL, err, sizeof err) == 0 && on &&
          b.stagger == 1 && b.offload == 0);
    CHECK(sparse_tls_parse("asynctls,stagger=-1", 128, &b, &on, NULL, err, sizeof err) < 0 &&
          strstr(err, "stagger"));
}

/* Quest's estimate per query head (estimate.cu: sum over channels of max(q*kmax, q*kmin)),
 * from block max/min computed here, summed over the group; in double */
static double quest_ref(const kvset *x, int g, int b, int bs)
{
    double tot = 0;
    for (int h = 0; h < x->G; h++) {
        const float *q = x->q + (size_t)(g * x->G + h) * x->hd;
        for (int c = 0; c < x->hd; c++) {
            double M = -INFINITY, m = INFINITY;
            for (int p = b * bs; p < (b + 1) * bs && p < x->n; p++) {
                double kv = x->k[((size_t)p * x->n_kv + g) * x->hd + c];
                M = kv > M ? kv : M;
                m = kv < m ? kv : m;
            }
            double a = q[c] * M, bb = q[c] * m;
            tot += a > bb ? a : bb;
        }
    }
    return tot;
}

TEST(tls_block_scores_match_quest)
{
    const int n = 1000, n_kv = 2, hd = 64, G = 4, bs = 64, nb = (n + bs - 1) / bs;
    kvset x;
    kvset_new(&x, n, n_kv, hd, G, 16, bs, 7);
    REQUIRE(x.s);
    float sc[64], agg[128];
    for (int g = 0; g < n_kv; g++) {
        sparse_tls_block_scores(x.s, 0, g, x.q + (size_t)g * G * hd, G, hd, nb, sc, agg);
        for (int b = 0; b < nb; b++) {
            double ref = quest_ref(&x, g, b, bs);
            /* float sums of 2 * hd terms of magnitude <= G * 1.5 * 1: relative 1e-5 of the
             * terms' scale bounds float32 rounding (2 * 64 terms * 2^-24 * their size) */
            CHECK_NEAR(sc[b], ref, 1e-5 * (2.0 * hd * G * 1.5));
            /* an upper bound of the group's summed q . k for every key of the block */
            for (int p = b * bs; p < (b + 1) * bs && p < n; p++) {
                double qk = 0;
                for (int h = 0; h < G; h++)
                    for (int c = 0; c < hd; c++)
                        qk += (double)x.q[(size_t)(g * G + h) * hd + c] *
                              x.k[((size_t)p * n_kv + g) * hd + c];
                CHECK(sc[b] >= qk - 1e-3);
            }
        }
    }
    kvset_free(&x);
}

TEST(tls_labels_within_half_a_step)
{
    const int n = 300, n_kv = 3, hd = 32, r = 8;
    kvset x;
    kvset_new(&x, n, n_kv, hd, 2, r, 16, 11);
    REQUIRE(x.s);
    for (int p = 0; p < n; p++)
        for (int g = 0; g < n_kv; g++) {
            size_t at = (size_t)p * n_kv + g;
            float lo = x.s->lmin[at], st = x.s->lstep[at];
            for (int i = 0; i < r; i++) {
                int code = (x.s->code[at * (r / 2) + i / 2] >> (4 * (i % 2))) & 15;
                float real = x.k[((size_t)p * n_kv + g) * hd + x.ch[g * r + i]];
                CHECK(fabsf(lo + code * st - real) <= 0.5f * st * 1.0001f + 1e-6f);
            }
        }
    kvset_free(&x);
}

static int ref_before(const float *sc, int a, int b)
{
    int an = isnan(sc[a]), bn = isnan(sc[b]);
    if (an != bn) return bn;
    if (!an && sc[a] != sc[b]) return sc[a] > sc[b];
    return a < b;
}

TEST(tls_topk_matches_full_sort)
{
    rng_state = 3;
    enum { N = 500 };
    float sc[N];
    int32_t out[N], work[N], order[N];
    for (int trial = 0; trial < 40; trial++) {
        int n = 1 + trial * 12 % N, k = 1 + (trial * 37) % (n + 3);
        for (int i = 0; i < n; i++) {
            sc[i] = (float)(int)(frand() * (trial % 3 ? 5 : 1000)); /* many ties */
            if (trial % 5 == 0 && i % 17 == 3) sc[i] = NAN;
        }
        /* reference: insertion sort by the documented order */
        for (int i = 0; i < n; i++) {
            int j = i;
            order[i] = i;
            while (j > 0 && ref_before(sc, order[j], order[j - 1])) {
                int32_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
                j--;
            }
        }
        int got = sparse_tls_topk(sc, n, k, out, work);
        int want = k < n ? k : n;
        CHECK_EQ(got, want);
        char in[N] = {0};
        for (int i = 0; i < want; i++) in[order[i]] = 1;
        for (int i = 0; i < got; i++) {
            CHECK(in[out[i]]);
            if (i) CHECK(out[i] > out[i - 1]);
        }
    }
}

TEST(tls_full_budget_equals_dense_exactly)
{
    const int n = 777, n_kv = 2, hd = 64, G = 3, bs = 32;
    kvset x;
    kvset_new(&x, n, n_kv, hd, G, 16, bs, 5);
    REQUIRE(x.s);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.block_size = bs;
    p.channels = 16;
    p.block_budget = (n + bs - 1) / bs;
    p.token_budget = n;
    float *fw = malloc(sizeof(float) * sparse_tls_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_work_ints(&p, n));
    int32_t *pos = malloc(sizeof(int32_t) * n);
    float *scores = malloc(sizeof(float) * n);
    /* the KV as blocks of 16 positions of a table in reverse order (not contiguous) */
    const int blk = 16, nblk = (n + blk - 1) / blk, kvd = n_kv * hd;
    float **kb = malloc(sizeof(float *) * nblk), **vb = malloc(sizeof(float *) * nblk);
    int32_t *table = malloc(sizeof(int32_t) * nblk);
    float *kst = calloc((size_t)nblk * blk * kvd, sizeof(float));
    float *vst = calloc((size_t)nblk * blk * kvd, sizeof(float));
    for (int b = 0; b < nblk; b++) {
        table[b] = nblk - 1 - b;
        kb[table[b]] = kst + (size_t)table[b] * blk * kvd;
        vb[table[b]] = vst + (size_t)table[b] * blk * kvd;
        for (int i = 0; i < blk && b * blk + i < n; i++) {
            memcpy(kb[table[b]] + (size_t)i * kvd, x.k + (size_t)(b * blk + i) * kvd, sizeof(float) * kvd);
            memcpy(vb[table[b]] + (size_t)i * kvd, x.v + (size_t)(b * blk + i) * kvd, sizeof(float) * kvd);
        }
    }
    for (int g = 0; g < n_kv; g++) {
        sparse_tls_pick pk;
        int m = sparse_tls_select(&p, x.s, 0, g, x.q + (size_t)g * G * hd, G, hd, n, pos, fw, iw, &pk);
        CHECK_EQ(m, n);
        CHECK_EQ(pk.blocks_kept, p.block_budget);
        for (int i = 0; i < m; i++) CHECK_EQ(pos[i], i);
        for (int h = 0; h < G; h++) {
            const float *q = x.q + (size_t)(g * G + h) * hd;
            float a[64], d[64];
            cpu_tls_attend(a, q, kb, vb, table, blk, (size_t)g * hd, pos, m, kvd, hd, 0.125f, scores);
            cpu_attend(d, q, x.k + (size_t)g * hd, x.v + (size_t)g * hd, n, kvd, hd, 0.125f, scores);
            CHECK(memcmp(a, d, sizeof a) == 0);
        }
    }
    free(kb); free(vb); free(table); free(kst); free(vst);
    free(fw); free(iw); free(pos); free(scores);
    kvset_free(&x);
}

TEST(tls_selection_properties)
{
    const int n = 5000, n_kv = 2, hd = 64, G = 4, bs = 64, nb = (n + bs - 1) / bs;
    kvset x;
    kvset_new(&x, n, n_kv, hd, G, 16, bs, 9);
    REQUIRE(x.s);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.channels = 16;
    p.block_budget = 20;
    p.token_budget = 300;
    float *fw = malloc(sizeof(float) * sparse_tls_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_work_ints(&p, n));
    int32_t *pos = malloc(sizeof(int32_t) * n), *cand = malloc(sizeof(int32_t) * n);
    float bsc[128], agg[128], *tsc = malloc(sizeof(float) * n), qsel[64];
    for (int g = 0; g < n_kv; g++) {
        const float *q = x.q + (size_t)g * G * hd;
        sparse_tls_pick pk;
        int m = sparse_tls_select(&p, x.s, 0, g, q, G, hd, n, pos, fw, iw, &pk);
        CHECK_EQ(m, p.token_budget);
        CHECK_EQ(pk.blocks_kept, p.block_budget);
        sparse_tls_block_scores(x.s, 0, g, q, G, hd, nb, bsc, agg);
        /* kept blocks: the blocks of the selected tokens are among the top 20 by score */
        char kept[128] = {0};
        int nk = 0;
        for (int b = 0; b < nb; b++) {
            int better = 0;
            for (int c = 0; c < nb; c++) better += bsc[c] > bsc[b] || (bsc[c] == bsc[b] && c < b);
            if (better < p.block_budget) kept[b] = 1, nk++;
        }
        CHECK_EQ(nk, p.block_budget);
        int C = 0;
        for (int b = 0; b < nb; b++)
            for (int t = b * bs; kept[b] && t < (b + 1) * bs && t < n; t++) cand[C++] = t;
        CHECK_EQ(pk.candidates, C);
        sparse_tls_token_scores(x.s, 0, g, q, G, hd, cand, C, tsc, qsel);
        float min_sel = INFINITY;
        for (int i = 0; i < m; i++) {
            CHECK(kept[pos[i] / bs]);
            if (i) CHECK(pos[i] > pos[i - 1]);
            int j = 0;
            while (j < C && cand[j] != pos[i]) j++;
            REQUIRE(j < C);
            if (tsc[j] < min_sel) min_sel = tsc[j];
        }
        /* every candidate left out scores at most the lowest kept one */
        int above = 0;
        for (int j = 0; j < C; j++) above += tsc[j] > min_sel;
        CHECK(above < m);
    }
    free(fw); free(iw); free(pos); free(cand); free(tsc);
    kvset_free(&x);
}

/* A needle: one key per KV head aligned with the group's queries, inside noise; both levels keep
 * it and the sparse output is close to dense. */
TEST(tls_needle_kept)
{
    const int n = 8192, n_kv = 1, hd = 64, G = 4, bs = 64, r = 16, needle = 3001;
    kvset x;
    kvset_new(&x, n, n_kv, hd, G, r, bs, 21);
    REQUIRE(x.s);
    for (int h = 1; h < G; h++) memcpy(x.q + (size_t)h * hd, x.q, sizeof(float) * hd);
    for (int c = 0; c < hd; c++) x.k[(size_t)needle * hd + c] = 4.0f * x.q[c];
    for (int p = needle / bs * bs; p < (needle / bs + 1) * bs; p++)
        sparse_tls_put(x.s, 0, p, x.k + (size_t)p * hd);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.channels = r;
    p.block_budget = 16;
    p.token_budget = 128;
    float *fw = malloc(sizeof(float) * sparse_tls_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_work_ints(&p, n));
    int32_t *pos = malloc(sizeof(int32_t) * n);
    int m = sparse_tls_select(&p, x.s, 0, 0, x.q, G, hd, n, pos, fw, iw, NULL);
    int found = 0;
    for (int i = 0; i < m; i++) found |= pos[i] == needle;
    CHECK(found);
    free(fw); free(iw); free(pos);
    kvset_free(&x);
}

TEST(tls_copy_then_rebuild_equals_fresh)
{
    const int n = 200, n_kv = 2, hd = 32, r = 8, bs = 64, cut = 150;
    kvset x;
    kvset_new(&x, n, n_kv, hd, 2, r, bs, 13);
    REQUIRE(x.s);
    sparse_tls_seq *d = sparse_tls_seq_new(1, n_kv, hd, r, bs, n, x.ch);
    sparse_tls_seq *f = sparse_tls_seq_new(1, n_kv, hd, r, bs, n, x.ch);
    REQUIRE(d && f);
    sparse_tls_copy(d, x.s, cut);
    for (int p = cut / bs * bs; p < cut; p++) sparse_tls_put(d, 0, p, x.k + (size_t)p * n_kv * hd);
    for (int p = 0; p < cut; p++) sparse_tls_put(f, 0, p, x.k + (size_t)p * n_kv * hd);
    size_t bf = (size_t)((cut + bs - 1) / bs) * n_kv * hd;
    CHECK(memcmp(d->kmax, f->kmax, bf * 4) == 0 && memcmp(d->kmin, f->kmin, bf * 4) == 0);
    CHECK(memcmp(d->code, f->code, (size_t)cut * n_kv * r / 2) == 0);
    CHECK(memcmp(d->lmin, f->lmin, (size_t)cut * n_kv * 4) == 0);
    /* and the copy differs from the source in the cut block (the source has 50 more keys) */
    CHECK(memcmp(x.s->kmax, f->kmax, bf * 4) != 0);
    sparse_tls_seq_free(d);
    sparse_tls_seq_free(f);
    kvset_free(&x);
}

TEST(tls_calibration_picks_the_loud_channels)
{
    const int L = 2, H = 4, Hk = 2, hd = 16, T = 50, r = 4;
    sparse_tls_calib *c = sparse_tls_calib_new(L, H, Hk, hd);
    REQUIRE(c);
    rng_state = 17;
    float q[50 * 4 * 16], k[50 * 2 * 16];
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < T * H * hd; i++) q[i] = 0.1f * frand();
        for (int i = 0; i < T * Hk * hd; i++) k[i] = 0.1f * frand();
        for (int t = 0; t < T; t++) {
            /* kv head 0: head 0 loud on channels 1, 5; head 1 loud on 9, 12 (the max over the
             * group keeps both pairs); kv head 1: channels 3 + l, 7, 8, 15 loud in head 3 */
            int loud0[4] = {1, 5, 9, 12}, loud1[4] = {3 + l, 7, 8, 15};
            for (int i = 0; i < 4; i++) {
                q[(t * H + i / 2) * hd + loud0[i]] = 2.0f;
                k[(t * Hk + 0) * hd + loud0[i]] = 1.0f;
                q[(t * H + 3) * hd + loud1[i]] = -3.0f;
                k[(t * Hk + 1) * hd + loud1[i]] = 1.0f;
            }
        }
        sparse_tls_calib_add(c, l, q, k, T);
    }
    uint16_t out[2 * 2 * 4];
    CHECK_EQ(sparse_tls_calib_select(c, r, out), 0);
    for (int l = 0; l < L; l++) {
        uint16_t w0[4] = {1, 5, 9, 12}, w1[4] = {(uint16_t)(3 + l), 7, 8, 15};
        CHECK(memcmp(out + (l * 2 + 0) * 4, w0, 8) == 0);
        CHECK(memcmp(out + (l * 2 + 1) * 4, w1, 8) == 0);
    }
    CHECK(sparse_tls_calib_select(c, 3, out) < 0);
    sparse_tls_calib_free(c);
}
