/* The sampler's vectorized passes: exp against libm, the scan against a plain loop (NaN, inf,
 * ties, tails), k-th largest and the blocked draw against brute force. */
#include "model/sample/sample_vec.h"
#include "tests/model/sample_util.h"
#include "tests/test.h"
#include <float.h>

TEST(sample_vec_exp_accuracy)
{
    enum { N = 200003 }; /* odd: exercises the padded tail */
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -87.0f * (float)i / (N - 1);
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = -1e-30f;
    x[3] = 3.0f; /* > 0 is treated as 0 */
    model_vec_exp(x, y, N);
    /* Error in units in the last place of the float nearest the true value. */
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double want = exp(fmin((double)x[i], 0.0));
        float wf = (float)want;
        double ulp = (double)nextafterf(wf, INFINITY) - wf;
        double err = fabs(y[i] - want) / ulp;
        if (err > worst) worst = err;
    }
    /* The header promises 2 ulp; this construction measures 1.19 (degree-7 truncation 5e-9 plus
     * one rounding per Horner step). */
    CHECK_MSG(worst < 2.0, "worst error %.3f ulp", worst);
    CHECK(y[0] == 1.0f && y[1] == 1.0f && y[3] == 1.0f);
    /* Below the normal range and -inf: exactly 0. */
    float u[5] = {-88.0f, -100.0f, -1e30f, -INFINITY, -87.3f}, v[5];
    model_vec_exp(u, v, 5);
    CHECK(v[0] == 0 && v[1] == 0 && v[2] == 0 && v[3] == 0);
    CHECK(v[4] > 0 && fabs(v[4] - exp((double)u[4])) / exp((double)u[4]) < 1e-6);
    /* Monotone: a larger input never gives a smaller weight (the top-p cut relies on it). */
    int mono = 1;
    for (int i = 5; i + 1 < N; i++) mono &= y[i + 1] <= y[i];
    CHECK(mono);
}

TEST(sample_vec_scan_matches_loop)
{
    for (int n = 1; n < 70; n++) { /* below, at and past the 4-vector unroll (32) */
        float l[70], c[70];
        su_gauss(l, n, 2.0f, (uint64_t)n);
        for (int i = 0; i < n; i++) l[i] = roundf(l[i]); /* ties */
        if (n > 5) l[n / 2] = NAN;
        if (n > 7) l[n - 1] = -INFINITY;
        memcpy(c, l, sizeof c);
        model_vec_scan s = model_vec_scan_row(c, n);
        float mx = -INFINITY;
        int am = -1;
        for (int i = 0; i < n; i++) {
            float v = l[i] != l[i] ? -INFINITY : l[i];
            if (v > mx) mx = v, am = i;
        }
        CHECK_EQ(s.argmax, am);
        CHECK(s.max == mx);
        if (n > 5) CHECK(c[n / 2] == -INFINITY);
    }
    float a[3] = {1, INFINITY, INFINITY};
    model_vec_scan s = model_vec_scan_row(a, 3);
    CHECK_EQ(s.argmax, 1);
    CHECK(a[1] == FLT_MAX && a[2] == FLT_MAX);
    float b[9] = {-INFINITY, NAN, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, NAN};
    s = model_vec_scan_row(b, 9);
    CHECK_EQ(s.argmax, -1);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

TEST(sample_vec_kth_and_draw)
{
    enum { V = 5003 };
    static float l[V], sorted[V], heap[256];
    su_gauss(l, V, 3.0f, 3);
    for (int i = 0; i < V; i += 3) l[i] = roundf(l[i]); /* ties */
    l[10] = -INFINITY;
    int nf = 0;
    for (int i = 0; i < V; i++)
        if (l[i] > -INFINITY) sorted[nf++] = l[i];
    qsort(sorted, (size_t)nf, sizeof *sorted, cmp_desc);
    const int ks[] = {1, 2, 40, 255, 256};
    for (int i = 0; i < 5; i++) CHECK(model_vec_kth(l, V, ks[i], heap) == sorted[ks[i] - 1]);
    /* Fewer finite values than k: -inf, whatever the heap held before. */
    for (int i = 0; i < 256; i++) heap[i] = 1e30f;
    float few[20];
    for (int i = 0; i < 20; i++) few[i] = i % 4 ? -INFINITY : (float)i;
    CHECK(model_vec_kth(few, 20, 6, heap) == -INFINITY);
    CHECK(model_vec_kth(few, 20, 5, heap) == 0.0f);
    /* Ascending input: every value enters the heap. */
    static float asc[V];
    for (int i = 0; i < V; i++) asc[i] = (float)i;
    CHECK(model_vec_kth(asc, V, 40, heap) == (float)(V - 40));

    /* The blocked draw equals a plain running sum (away from rounding ties). */
    static float w[V];
    model_rng r;
    model_rng_seed(&r, 9);
    double total = 0;
    for (int i = 0; i < V; i++) total += w[i] = (float)model_rng_uniform(&r);
    for (int t = 0; t < 200; t++) {
        double u = model_rng_uniform(&r) * total, acc = 0;
        int want = -1;
        for (int i = 0; i < V && want < 0; i++)
            if ((acc += w[i]) > u) want = i;
        CHECK_EQ(model_vec_draw(w, V, u), want);
    }
    CHECK_EQ(model_vec_draw(w, V, total * 2), -1);
}
