/* Top-k, top-p, min-p and temperature: the kept sets on hand-made distributions (ties, p = 0/1,
 * k > vocab, min_p = 1), the same against a sort-based reference on 32k/128k vocabularies (the
 * sampler itself never sorts the vocabulary), and the draws against the distribution they should
 * follow (chi-square with a fixed seed). */
#include "model/sample/sample_vec.h"
#include "tests/model/sample_util.h"
#include "tests/test.h"

/* The final distribution for p on a copy of logits; returns the kept count (-2 if p rejected). */
static int dist(model_sampling p, const float *logits, int V, float *probs)
{
    model_sampler *s = su_new(p, V, 1);
    if (!s) return -2;
    float *l = malloc((size_t)V * sizeof *l);
    memcpy(l, logits, (size_t)V * sizeof *l);
    int n = model_sampler_dist(s, l, probs);
    free(l);
    model_sampler_free(s);
    return n;
}

/* probs > 0 exactly on ids[0..n), and equal to exp((l - max)/T) renormalized over them. */
static void check_kept(const float *probs, const float *l, int V, float T, const int *ids, int n,
                       const char *what)
{
    double z = 0, m = -INFINITY;
    for (int i = 0; i < V; i++) m = fmax(m, l[i]);
    for (int j = 0; j < n; j++) z += exp((l[ids[j]] - m) / T);
    for (int i = 0; i < V; i++) {
        int in = 0;
        for (int j = 0; j < n; j++) in |= ids[j] == i;
        double want = in ? exp((l[i] - m) / T) / z : 0;
        CHECK_MSG(fabs(probs[i] - want) <= 1e-6, "%s: token %d has p=%.7g, want %.7g", what, i,
                  probs[i], want);
    }
}

#define KEPT(p, l, V, T, what, ...)                                                                \
    do {                                                                                           \
        float probs_[V];                                                                           \
        const int ids_[] = {__VA_ARGS__};                                                          \
        int n_ = (int)(sizeof ids_ / sizeof ids_[0]);                                              \
        CHECK_MSG(dist(p, l, V, probs_) == n_, "%s: kept count", what);                            \
        check_kept(probs_, l, V, T, ids_, n_, what);                                               \
    } while (0)

TEST(sample_topk_keeps_exactly)
{
    enum { V = 7 };
    const float l[V] = {5, 1, 3, 3, 4, 0, 3}; /* sorted: 5 4 3 3 3 1 0 */
    model_sampling p = model_sampling_default();
    p.top_k = 1;
    KEPT(p, l, V, 1, "k=1", 0);
    p.top_k = 2;
    KEPT(p, l, V, 1, "k=2", 0, 4);
    p.top_k = 3; /* the 3rd largest is 3, tied three ways: all ties kept (HF/vLLM rule) */
    KEPT(p, l, V, 1, "k=3 ties", 0, 2, 3, 4, 6);
    p.top_k = 5;
    KEPT(p, l, V, 1, "k=5", 0, 2, 3, 4, 6);
    p.top_k = 6;
    KEPT(p, l, V, 1, "k=6", 0, 1, 2, 3, 4, 6);
    p.top_k = 7;
    KEPT(p, l, V, 1, "k=V", 0, 1, 2, 3, 4, 5, 6);
    p.top_k = 1000;
    KEPT(p, l, V, 1, "k>V", 0, 1, 2, 3, 4, 5, 6);
    p.top_k = 0;
    KEPT(p, l, V, 1, "k=0", 0, 1, 2, 3, 4, 5, 6);
    p.top_k = -1;
    KEPT(p, l, V, 1, "k=-1", 0, 1, 2, 3, 4, 5, 6);
    /* -inf tokens never count and are never kept; with fewer finite tokens than k, all finite. */
    const float m[V] = {-INFINITY, 2, NAN, 1, -INFINITY, 0, -1};
    p.top_k = 2;
    KEPT(p, m, V, 1, "k=2 masked", 1, 3);
    p.top_k = 5;
    KEPT(p, m, V, 1, "k=5 masked", 1, 3, 5, 6);
}

TEST(sample_topp_keeps_exactly)
{
    enum { V = 4 };
    float l[V];
    su_logp(l, (const double[]){0.5, 0.3, 0.15, 0.05}, V);
    model_sampling p = model_sampling_default();
    /* Keep a token when the mass of strictly better tokens is below top_p. */
    p.top_p = 0.4f;
    KEPT(p, l, V, 1, "p=0.4", 0);
    p.top_p = 0.7f;
    KEPT(p, l, V, 1, "p=0.7", 0, 1);
    p.top_p = 0.85f;
    KEPT(p, l, V, 1, "p=0.85", 0, 1, 2);
    p.top_p = 0.97f;
    KEPT(p, l, V, 1, "p=0.97", 0, 1, 2, 3);
    p.top_p = 0;
    KEPT(p, l, V, 1, "p=0", 0);
    p.top_p = 1;
    KEPT(p, l, V, 1, "p=1", 0, 1, 2, 3);
    /* Order in the id space does not matter. */
    float r[V];
    su_logp(r, (const double[]){0.05, 0.15, 0.3, 0.5}, V);
    p.top_p = 0.7f;
    KEPT(p, r, V, 1, "p=0.7 reversed", 2, 3);

    /* Ties at the boundary are all kept: 0.4 0.2 0.2 0.2, the boundary falls in the tie. */
    float t[V];
    su_logp(t, (const double[]){0.2, 0.4, 0.2, 0.2}, V);
    p.top_p = 0.5f;
    KEPT(p, t, V, 1, "p=0.5 ties", 0, 1, 2, 3);
    p.top_p = 0.3f;
    KEPT(p, t, V, 1, "p=0.3 ties", 1);
    /* p = 0 with a tied maximum keeps both. */
    float u[V] = {1, 3, 3, 2};
    p.top_p = 0;
    KEPT(p, u, V, 1, "p=0 tied max", 1, 2);
}

TEST(sample_minp_keeps_exactly)
{
    enum { V = 5 };
    float l[V];
    su_logp(l, (const double[]){0.05, 0.5, 0.25, 0.15, 0.05}, V);
    model_sampling p = model_sampling_default();
    p.min_p = 0.45f; /* p >= 0.225 */
    KEPT(p, l, V, 1, "min_p=0.45", 1, 2);
    p.min_p = 0.25f; /* p >= 0.125 */
    KEPT(p, l, V, 1, "min_p=0.25", 1, 2, 3);
    p.min_p = 0.09f; /* p >= 0.045 */
    KEPT(p, l, V, 1, "min_p=0.09", 0, 1, 2, 3, 4);
    p.min_p = 1;
    KEPT(p, l, V, 1, "min_p=1", 1);
    float t[V] = {2, 1, 2, 0, -1};
    KEPT(p, t, V, 1, "min_p=1 tied max", 0, 2);
    /* min-p measures against the temperature-scaled distribution: at T = 0.5 the ratios square,
     * 0.25/0.5 = 0.5 becomes 0.25 < 0.3. */
    p.min_p = 0.3f;
    p.temperature = 0.5f;
    KEPT(p, l, V, 0.5f, "min_p=0.3 T=0.5", 1);
    p.temperature = 1;
    KEPT(p, l, V, 1, "min_p=0.3 T=1", 1, 2);
}

TEST(sample_filter_order)
{
    enum { V = 4 };
    float l[V];
    su_logp(l, (const double[]){0.4, 0.3, 0.2, 0.1}, V);
    model_sampling p = model_sampling_default();
    /* top-p after top-k, renormalized: over all four tokens 0.75 keeps 3 (0.7 < 0.75); over the
     * top 3 renormalized (0.444 0.333 0.222) the mass before rank 2 is 0.778: only 2 kept. */
    p.top_p = 0.75f;
    KEPT(p, l, V, 1, "top-p alone", 0, 1, 2);
    p.top_k = 3;
    KEPT(p, l, V, 1, "top-k then top-p", 0, 1);
    /* temperature before top-p: at T = 0.5 the distribution is .533 .3 .133 .033. */
    p.top_k = 0;
    p.top_p = 0.8f;
    KEPT(p, l, V, 1, "top-p T=1", 0, 1, 2);
    p.temperature = 0.5f;
    KEPT(p, l, V, 0.5f, "top-p T=0.5", 0, 1);
    /* min-p after top-p (HF's order; vLLM runs min-p first): min_p 0.3 removes token 3 (0.1 <
     * 0.12). Top-p 0.75 over all four keeps 0..2 (0.7 < 0.75) and min-p then leaves them; min-p
     * first would renormalize to .444 .333 .222 and top-p would drop token 2. */
    p.temperature = 1;
    p.top_p = 0.75f;
    p.min_p = 0.3f;
    KEPT(p, l, V, 1, "top-p then min-p", 0, 1, 2);
}

/* ---- against a sort-based reference on real-size vocabularies ---- */

static const float *cmp_l;
static int cmp_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (cmp_l[x] != cmp_l[y]) return cmp_l[x] > cmp_l[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* The definitions of sample.h, computed the slow, obvious way over `order` (l sorted descending,
 * NaN already -inf). Weights are computed with the same exp as the sampler, so the sets must
 * agree exactly. */
static void ref_dist(const float *l, const int32_t *order, int V, model_sampling p, float *probs,
                     uint8_t *keep)
{
    float m = l[order[0]];
    int n_finite = 0;
    for (int i = 0; i < V; i++) n_finite += l[i] > -INFINITY;
    for (int i = 0; i < V; i++) keep[i] = l[i] > -INFINITY;
    if (p.top_k > 0 && p.top_k < n_finite) {
        float th = l[order[p.top_k - 1]];
        for (int i = 0; i < V; i++) keep[i] = l[i] >= th;
    }
    /* The weights with the sampler's own exp (its accuracy is tested in test_sample_vec.c). */
    const float inv_t = 1.0f / p.temperature;
    float *w = calloc((size_t)V, sizeof *w), *x = malloc((size_t)V * sizeof *x);
    for (int i = 0; i < V; i++) x[i] = (l[i] - m) * inv_t;
    model_vec_exp(x, w, V);
    free(x);
    double z = 0;
    for (int i = 0; i < V; i++) {
        if (!keep[i]) w[i] = 0;
        z += w[i];
    }
    if (p.top_p < 1) {
        double target = (double)p.top_p * z, cum = 0;
        float th = -INFINITY;
        if (target <= 0) th = m;
        for (int r = 0; r < V && th == -INFINITY; r++) {
            if (!keep[order[r]]) continue;
            cum += w[order[r]];
            if (cum >= target) th = l[order[r]];
        }
        for (int i = 0; i < V; i++) keep[i] &= l[i] >= th;
    }
    double zk = 0;
    for (int i = 0; i < V; i++) {
        keep[i] &= w[i] >= p.min_p && w[i] > 0;
        if (keep[i]) zk += w[i];
    }
    for (int i = 0; i < V; i++) probs[i] = keep[i] ? (float)(w[i] / zk) : 0;
    free(w);
}

static void compare_at_scale(int V, const char *name, float *l)
{
    int32_t *order = malloc((size_t)V * sizeof *order);
    float *got = malloc((size_t)V * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    uint8_t *keep = malloc((size_t)V);
    for (int i = 0; i < V; i++) {
        if (l[i] != l[i]) l[i] = -INFINITY; /* the reference's view of NaN */
        order[i] = i;
    }
    cmp_l = l;
    qsort(order, (size_t)V, sizeof *order, cmp_desc);
    const float temps[] = {1.0f, 0.6f, 1.7f};
    const int ks[] = {0, 1, 40, 1000, 50000};
    const float ps[] = {1.0f, 0.9f, 0.5f, 0.1f, 0.0f};
    const float mps[] = {0.0f, 0.05f};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++)
                for (int d = 0; d < 2; d++) {
                    model_sampling p = model_sampling_default();
                    p.temperature = temps[a];
                    p.top_k = ks[b];
                    p.top_p = ps[c];
                    p.min_p = mps[d];
                    int n = dist(p, l, V, got);
                    ref_dist(l, order, V, p, want, keep);
                    int n_ref = 0, bad = -1;
                    for (int i = 0; i < V; i++) {
                        n_ref += keep[i];
                        if (bad < 0 && ((got[i] > 0) != keep[i] || fabsf(got[i] - want[i]) > 1e-6f))
                            bad = i;
                    }
                    CHECK_MSG(n == n_ref && bad < 0,
                              "%s V=%d T=%g k=%d p=%g min_p=%g: kept %d, reference %d; first "
                              "difference at token %d (%g vs %g)",
                              name, V, temps[a], ks[b], ps[c], mps[d], n, n_ref, bad,
                              bad >= 0 ? got[bad] : 0, bad >= 0 ? want[bad] : 0);
                    if (t_failed()) goto out;
                }
out:
    free(order);
    free(got);
    free(want);
    free(keep);
}

TEST(sample_filters_match_reference_at_scale)
{
    const int vs[] = {32000, 128256};
    for (int v = 0; v < 2; v++) {
        int V = vs[v];
        float *l = malloc((size_t)V * sizeof *l);
        /* Gaussian logits with a few masked tokens. */
        su_gauss(l, V, 3.0f, 11 + (uint64_t)v);
        l[7] = -INFINITY;
        l[V - 1] = NAN;
        compare_at_scale(V, "gauss", l);
        /* Quantized to steps of 0.5: boundaries fall inside large groups of ties. */
        su_gauss(l, V, 3.0f, 21 + (uint64_t)v);
        for (int i = 0; i < V; i++) l[i] = roundf(l[i] * 2) / 2;
        compare_at_scale(V, "ties", l);
        /* Nearly flat: many histogram rounds to separate the values. */
        su_gauss(l, V, 1e-3f, 31 + (uint64_t)v);
        compare_at_scale(V, "flat", l);
        /* One token far above a flat rest. */
        for (int i = 0; i < V; i++) l[i] = (float)(i % 7) * 1e-4f;
        l[V / 2] = 12.0f;
        compare_at_scale(V, "spike", l);
        /* Mostly masked: 500 finite tokens, so top-k 1000 and 50000 keep every finite one. */
        su_gauss(l, V, 2.0f, 41 + (uint64_t)v);
        for (int i = 0; i < V; i++)
            if (i % (V / 500) || i / (V / 500) >= 500) l[i] = -INFINITY;
        compare_at_scale(V, "masked", l);
        /* All equal. */
        for (int i = 0; i < V; i++) l[i] = 0.25f;
        compare_at_scale(V, "equal", l);
        free(l);
        if (t_failed()) return;
    }
}

/* ---- the draws ---- */

TEST(sample_temperature_chi_square)
{
    enum { V = 6, N = 20000 };
    const float base[V] = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f};
    const float T = 0.7f;
    model_sampling p = model_sampling_default();
    p.temperature = T;
    model_sampler *s = su_new(p, V, 2024);
    REQUIRE(s);
    int count[V] = {0};
    for (int t = 0; t < N; t++) {
        float l[V];
        memcpy(l, base, sizeof l);
        int32_t id = model_sampler_sample(s, l, NULL);
        REQUIRE(id >= 0 && id < V);
        count[id]++;
    }
    model_sampler_free(s);
    double want[V], at_one[V], z = 0, z1 = 0;
    for (int i = 0; i < V; i++) z += want[i] = exp(base[i] / T), z1 += at_one[i] = exp(base[i]);
    for (int i = 0; i < V; i++) want[i] /= z, at_one[i] /= z1;
    /* 5 degrees of freedom: P(chi2 > 30) = 1.5e-5, so a correct sampler passes (the seed is
     * fixed) and a wrong temperature cannot: against T = 1 the statistic is in the thousands. */
    double c2 = su_chi2(count, want, V, N), c2_wrong = su_chi2(count, at_one, V, N);
    CHECK_MSG(c2 < 30, "chi2 = %g against softmax(l / %g)", c2, T);
    CHECK_MSG(c2_wrong > 100, "chi2 = %g against softmax(l): the test has no power", c2_wrong);
}

TEST(sample_draws_follow_the_filtered_distribution)
{
    enum { V = 20, N = 40000 };
    float base[V];
    su_gauss(base, V, 1.5f, 77);
    model_sampling p = model_sampling_default();
    p.temperature = 0.8f;
    p.top_k = 12;
    p.top_p = 0.9f;
    p.min_p = 0.02f;
    float probs[V];
    int kept = dist(p, base, V, probs);
    CHECK(kept > 3 && kept < 12); /* the filters actually bite on this row */
    model_sampler *s = su_new(p, V, 99);
    REQUIRE(s);
    int count[V] = {0};
    for (int t = 0; t < N; t++) {
        float l[V];
        memcpy(l, base, sizeof l);
        int32_t id = model_sampler_sample(s, l, NULL);
        REQUIRE(id >= 0 && id < V);
        CHECK_MSG(probs[id] > 0, "drew token %d, which the filters remove", id);
        if (t_failed()) break;
        count[id]++;
    }
    model_sampler_free(s);
    double want[V];
    for (int i = 0; i < V; i++) want[i] = probs[i];
    /* At most 10 degrees of freedom here: P(chi2 > 45) < 2e-6. */
    double c2 = su_chi2(count, want, V, N);
    CHECK_MSG(c2 < 45, "chi2 = %g", c2);
}
