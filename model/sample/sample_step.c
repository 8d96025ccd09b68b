/* model/sample/sample_step.c — one token: bias and penalties, greedy or temperature + top-k + top-p
 * + min-p, the draw, and the raw logprobs (the order and the definitions are in sample.h).
 *
 * The whole-row passes are vectorized (model/sample/sample_vec.h); everything after the first cut
 * works on a short list of candidate ids:
 *   greedy:   scan
 *   top-k:    scan, k-th largest (a k-heap for k <= SAMPLE_HEAP_K, else the histogram search),
 *             collect the ids >= it; then weights, top-p, min-p and the draw over those ids only
 *   top-p:    scan, weights + sum Z, collect the ids with w >= (1 - p) Z / V, histogram search on
 *             them, then the draw over them. The cut is exact, not a heuristic: at most V tokens
 *             lie below it, each weighing less than (1 - p) Z / V, so together less than (1 - p) Z;
 *             the top-p set (mass of the better tokens < p Z) therefore lies entirely above it.
 *   otherwise: scan, weights (min-p applied) + sum, blocked draw.
 * Weights are floats in [0, 1]; sums are double, so summing 128k of them adds only double
 * rounding (1e-16 relative) to the weights' own float rounding. */
#include "model/sample/sample_impl.h"
/* Results must not depend on the compiler fusing a*b+c (see sample_vec.h): no contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "model/sample/sample_vec.h"
#include <float.h>
#include <math.h>
#include <string.h>

static void fill_logprobs(const model_sampler *s, int32_t chosen, model_logprobs *lp)
{
    memset(lp, 0, sizeof *lp);
    lp->id = chosen;
    if (!s->p.logprobs || chosen < 0) return;
    /* log-sum-exp of the raw row: max, then sum of exp(raw - max) (the same exp as sampling). */
    model_vec_scan sc = model_vec_scan_row(s->raw, s->vocab);
    double lse = sc.max + log(model_vec_weights(s->raw, s->vocab, sc.max, 1.0f, 0.0f, s->w));
    lp->logprob = (float)((double)s->raw[chosen] - lse);
    lp->n_top = model_vec_topn(s->raw, s->vocab, s->p.top_logprobs, lp->top_ids, lp->top_logprobs);
    for (int i = 0; i < lp->n_top; i++)
        lp->top_logprobs[i] = (float)((double)lp->top_logprobs[i] - lse);
}

/* Steps 0-8 of sample.h. probs != NULL: write the final distribution instead of drawing and
 * return the number of tokens with nonzero probability. Otherwise return the drawn id. */
static int32_t step(model_sampler *s, float *logits, float *probs, model_logprobs *lp)
{
    const int V = s->vocab;
    const model_sampling *p = &s->p;
    if (lp && p->logprobs) {
        memcpy(s->raw, logits, (size_t)V * sizeof *logits);
        model_vec_scan_row(s->raw, V); /* NaN -> -inf in the raw copy too */
    }
    model_sampler_apply_penalties(s, logits);
    model_vec_scan sc = model_vec_scan_row(logits, V);
    if (sc.argmax < 0) {
        if (lp) fill_logprobs(s, -1, lp);
        return -1;
    }

    int32_t chosen = sc.argmax;
    if (s->greedy) {
        if (probs) {
            memset(probs, 0, (size_t)V * sizeof *probs);
            probs[chosen] = 1.0f;
        }
        if (lp) fill_logprobs(s, chosen, lp);
        return probs ? 1 : chosen;
    }

    float *w = s->w;
    const float inv_t = 1.0f / p->temperature;
    const float min_w = p->min_p; /* p_i >= min_p * p_max  <=>  w_i >= min_p, as w_max = 1 */
    /* top-k: its k-th largest logit; -inf when fewer than k are finite (top-k keeps them all). */
    float th_k = -INFINITY;
    if (p->top_k > 0 && p->top_k < V)
        th_k = p->top_k <= SAMPLE_HEAP_K
                   ? model_vec_kth(logits, V, p->top_k, s->heap)
                   : model_sel_boundary(&s->sel, logits, NULL, NULL, V, -INFINITY, sc.max, p->top_k);
    int use_k = th_k > -INFINITY, use_p = p->top_p < 1.0f;
    int n_kept = 0;

    if (!use_k && !use_p) {
        /* The whole row: min-p is applied inside the weight pass. */
        double zk = model_vec_weights(logits, V, sc.max, inv_t, min_w, w);
        if (probs) {
            for (int i = 0; i < V; i++) {
                probs[i] = (float)(w[i] / zk);
                n_kept += w[i] > 0;
            }
            return n_kept;
        }
        chosen = model_vec_draw(w, V, model_rng_uniform(&s->rng) * zk);
        if (chosen < 0) /* rounding left the sum a hair short of u: the last kept token */
            for (chosen = V - 1; chosen > 0 && w[chosen] == 0; chosen--) {}
        if (lp) fill_logprobs(s, chosen, lp);
        return chosen;
    }

    /* A list of candidate ids in increasing order that contains every token kept. */
    int32_t *ids = s->cand;
    int n;
    double z;
    float lo = -INFINITY; /* a lower bound of the candidates' logits, when known */
    if (use_k) {
        n = model_vec_collect_ge(logits, V, th_k, ids);
        z = model_vec_weights_ids(logits, ids, n, sc.max, inv_t, w);
        lo = th_k;
    } else {
        z = model_vec_weights(logits, V, sc.max, inv_t, 0.0f, w);
        /* The exact cut (see the top of this file), rounded down to stay on the safe side. */
        float cut = (float)((1.0 - (double)p->top_p) * z / V);
        if ((double)cut * V > (1.0 - (double)p->top_p) * z) cut = nextafterf(cut, 0.0f);
        n = model_vec_collect_ge(w, V, cut, ids);
    }
    float th_p = -INFINITY;
    if (use_p) th_p = model_sel_boundary(&s->sel, logits, w, ids, n, lo, sc.max, (double)p->top_p * z);

    double zk = 0;
    for (int j = 0; j < n; j++) {
        int32_t id = ids[j];
        if (logits[id] >= th_p && w[id] >= min_w && w[id] > 0) {
            zk += w[id];
            n_kept++;
        }
    }
    if (probs) {
        memset(probs, 0, (size_t)V * sizeof *probs);
        for (int j = 0; j < n; j++) {
            int32_t id = ids[j];
            if (logits[id] >= th_p && w[id] >= min_w) probs[id] = (float)(w[id] / zk);
        }
        return n_kept;
    }

    /* The draw: the first kept id (in id order) whose running sum passes u. */
    double u = model_rng_uniform(&s->rng) * zk, acc = 0;
    chosen = -1;
    int32_t last = sc.argmax;
    for (int j = 0; j < n && chosen < 0; j++) {
        int32_t id = ids[j];
        if (logits[id] >= th_p && w[id] >= min_w && w[id] > 0) {
            acc += w[id];
            last = id;
            if (acc > u) chosen = id;
        }
    }
    if (chosen < 0) chosen = last; /* rounding left the sum a hair short of u */
    if (lp) fill_logprobs(s, chosen, lp);
    return chosen;
}

int32_t model_sampler_sample(model_sampler *s, float *logits, model_logprobs *lp)
{
    return step(s, logits, NULL, lp);
}

int model_sampler_dist(model_sampler *s, float *logits, float *probs)
{
    return step(s, logits, probs, NULL);
}
