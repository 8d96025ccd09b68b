/* model/sample/sample_vec.h — the sampler's passes over a whole row of logits, written with GCC
 * vector extensions (8 floats; lowered to AVX2/AVX-512 or to SSE pairs, whichever the target has)
 * so that one pass over a 128k vocabulary costs a few microseconds. Internal to model/.
 *
 * Determinism: every lane does the same IEEE single operations in the same order, tails run
 * through the same vector code (padded), and sums are accumulated in double in a fixed lane order.
 * The sampler's files forbid fused multiply-adds (a pragma; -std=c11 does too), so the results
 * are bit-identical on every IEEE machine and with any compiler: a seed gives the same tokens
 * everywhere (checked between AVX-512 and SSE2 builds). */
#ifndef TANDEM_MODEL_SAMPLE_VEC_H
#define TANDEM_MODEL_SAMPLE_VEC_H
#include <stdint.h>

/* exp(x) for x <= 0 (x > 0 is treated as 0; -inf and x < -87.33 give 0, i.e. results below the
 * smallest normal float flush to zero). Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, and the
 * degree-7 Taylor polynomial of e^r (truncation error r^8/8! < 5.2e-9, below float's 6e-8 ulp);
 * within 2 ulp of the true value (1.19 measured, tests/model/test_sample_vec.c). Monotone. */
void model_vec_exp(const float *x, float *y, int n);

typedef struct model_vec_scan {
    float max;      /* largest logit (NaN -> -inf, +inf -> FLT_MAX first) */
    int32_t argmax; /* lowest id holding max; -1 when no logit is finite */
} model_vec_scan;

/* The max in one pass, then the first position holding it (a partial pass). Rewrites NaN as -inf
 * and +inf as FLT_MAX in l (only when one is present). */
model_vec_scan model_vec_scan_row(float *l, int n);


/* model_vec_scan_row's argmax without writing l: -2 when l holds a NaN or +inf (the caller then
 * applies the rule itself), -1 when every value is -inf. */
int32_t model_vec_argmax_clean(const float *l, int n);

/* w[i] = exp((l[i] - m) * inv_t), set to 0 when below min_w; returns the sum of w in double. */
double model_vec_weights(const float *l, int n, float m, float inv_t, float min_w, float *w);

/* The same for the ids[0..n) only (w indexed by id). */
double model_vec_weights_ids(const float *l, const int32_t *ids, int n, float m, float inv_t,
                             float *w);

/* The k (<= n) largest finite values of x[0..n), best first, ties to the lowest index: writes ids
 * and values, returns how many (<= k). One pass; values that cannot enter are skipped 8 at a
 * time. */
int model_vec_topn(const float *x, int n, int k, int32_t *ids, float *vals);

/* Writes the ids i in [0, n) with x[i] >= th, in increasing order; returns how many. */
int model_vec_collect_ge(const float *x, int n, float th, int32_t *out);

/* The k-th largest of the finite values of l[0..n) (k >= 1), or -INFINITY when fewer than k are
 * finite; uses a min-heap of k floats (heap must hold k). Cost: one pass plus O(log k) per value
 * that beats the current k-th. */
float model_vec_kth(const float *l, int n, int k, float *heap);

/* The first i whose running sum w[0] + ... + w[i] exceeds u (summed in blocks of 64); -1 when the
 * total does not exceed u (rounding: the caller takes the last nonzero weight). */
int32_t model_vec_draw(const float *w, int n, double u);

#endif
