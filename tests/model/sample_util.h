/* Helpers shared by the sampler tests. */
#ifndef TANDEM_TEST_SAMPLE_UTIL_H
#define TANDEM_TEST_SAMPLE_UTIL_H
#include "model/sample/rng.h"
#include <math.h>
#include <stdio.h>
#include "model/sample/sample.h"

/* A sampler from p with a fixed seed; the test fails (and NULL returns) when p is rejected. */
static inline model_sampler *su_new(model_sampling p, int vocab, uint64_t seed)
{
    char err[256] = "";
    p.seed = seed;
    p.has_seed = 1;
    model_sampler *s = model_sampler_new(&p, vocab, NULL, 0, 0, err, sizeof err);
    if (!s) fprintf(stderr, "  sampler rejected: %s\n", err);
    return s;
}

/* Logits N(0, sigma^2) from our generator (Box-Muller), reproducible. */
static inline void su_gauss(float *l, int n, float sigma, uint64_t seed)
{
    model_rng r;
    model_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        double u1 = model_rng_uniform(&r), u2 = model_rng_uniform(&r);
        l[i] = (float)(sigma * sqrt(-2 * log(1 - u1)) * cos(6.283185307179586 * u2));
    }
}

/* Log of each probability: logits whose softmax is p. */
static inline void su_logp(float *l, const double *p, int n)
{
    for (int i = 0; i < n; i++) l[i] = (float)log(p[i]);
}

/* Pearson's chi-square of counts against expected probabilities (n draws). */
static inline double su_chi2(const int *count, const double *prob, int k, int n)
{
    double c2 = 0;
    for (int i = 0; i < k; i++) {
        double e = prob[i] * n;
        if (e > 0) c2 += (count[i] - e) * (count[i] - e) / e;
        else if (count[i]) return INFINITY;
    }
    return c2;
}
#endif
