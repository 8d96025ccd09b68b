/* model/sample/sample.c — the sampler's lifecycle: parameter validation (ranges as the OpenAI API
 * documents them), seeding, and the bookkeeping behind the penalties. The per-token pipeline is in
 * model/sample/sample_step.c; sample.h documents the semantics. */
#include "model/sample/sample_impl.h"
#include "model/sample/sample_vec.h"
/* Results must not depend on the compiler fusing a*b+c (see sample_vec.h): no contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <float.h>
#include <math.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

model_sampling model_sampling_default(void)
{
    return (model_sampling){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
}

static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* x in [lo, hi]; false for NaN. */
static int in_range(float x, float lo, float hi)
{
    return x >= lo && x <= hi;
}

static int validate(const model_sampling *p, int vocab, const int32_t *prompt_ids, int n_prompt,
                    int choice_index, char *err, size_t errlen)
{
    /* Ranges: OpenAI's API reference (temperature 0-2, top_p 0-1, penalties -2..2, logit_bias
     * -100..100 with at most 300 entries, top_logprobs 0-20, n <= 128); top_k, min_p and
     * repetition_penalty as vLLM accepts them. */
    if (!p) return bad(err, errlen, "sampling parameters missing");
    if (vocab < 1 || vocab > MODEL_MAX_VOCAB)
        return bad(err, errlen, "vocab size %d out of range 1..%d", vocab, MODEL_MAX_VOCAB);
    if (!in_range(p->temperature, 0, 2))
        return bad(err, errlen, "temperature must be between 0 and 2 (got %g)", p->temperature);
    if (!in_range(p->top_p, 0, 1))
        return bad(err, errlen, "top_p must be between 0 and 1 (got %g)", p->top_p);
    if (p->top_k < -1)
        return bad(err, errlen, "top_k must be 0 or -1 (off) or positive (got %d)", p->top_k);
    if (!in_range(p->min_p, 0, 1))
        return bad(err, errlen, "min_p must be between 0 and 1 (got %g)", p->min_p);
    if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
        return bad(err, errlen, "repetition_penalty must be positive and finite (got %g)",
                    p->repetition_penalty);
    if (!in_range(p->frequency_penalty, -2, 2))
        return bad(err, errlen, "frequency_penalty must be between -2 and 2 (got %g)",
                    p->frequency_penalty);
    if (!in_range(p->presence_penalty, -2, 2))
        return bad(err, errlen, "presence_penalty must be between -2 and 2 (got %g)",
                    p->presence_penalty);
    if (p->n_logit_bias < 0 || p->n_logit_bias > MODEL_MAX_LOGIT_BIAS)
        return bad(err, errlen, "logit_bias may hold at most %d entries (got %d)",
                    MODEL_MAX_LOGIT_BIAS, p->n_logit_bias);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return bad(err, errlen, "logit_bias entries missing");
    for (int i = 0; i < p->n_logit_bias; i++) {
        const model_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= vocab)
            return bad(err, errlen, "logit_bias token id %d out of range 0..%d", b->id, vocab - 1);
        if (!isfinite(b->bias))
            return bad(err, errlen, "logit_bias value for token %d is not a finite number", b->id);
    }
    if (p->top_logprobs < 0 || p->top_logprobs > MODEL_MAX_TOP_LOGPROBS)
        return bad(err, errlen, "top_logprobs must be between 0 and %d (got %d)",
                    MODEL_MAX_TOP_LOGPROBS, p->top_logprobs);
    if (p->top_logprobs > 0 && !p->logprobs)
        return bad(err, errlen, "top_logprobs requires logprobs");
    if (choice_index < 0 || choice_index >= MODEL_MAX_CHOICES)
        return bad(err, errlen, "choice index %d out of range 0..%d", choice_index,
                    MODEL_MAX_CHOICES - 1);
    if (n_prompt < 0 || (n_prompt > 0 && !prompt_ids))
        return bad(err, errlen, "prompt ids missing");
    for (int i = 0; i < n_prompt; i++)
        if (prompt_ids[i] < 0 || prompt_ids[i] >= vocab)
            return bad(err, errlen, "prompt token id %d out of range 0..%d", prompt_ids[i],
                        vocab - 1);
    return 0;
}

/* Adds id to the repetition set (once). */
static int rep_add(model_sampler *s, int32_t id)
{
    if (s->rep_set[id >> 3] & (1u << (id & 7))) return 0;
    if (s->n_rep == s->cap_rep) {
        int cap = s->cap_rep ? s->cap_rep * 2 : 256;
        if (cap > s->vocab) cap = s->vocab; /* distinct ids never exceed the vocabulary */
        int32_t *n = realloc(s->rep_ids, (size_t)cap * sizeof *n);
        if (!n) return -1;
        s->rep_ids = n;
        s->cap_rep = cap;
    }
    s->rep_set[id >> 3] |= (uint8_t)(1u << (id & 7));
    s->rep_ids[s->n_rep++] = id;
    return 0;
}

static uint32_t slot_of(int32_t id, int cap)
{
    return ((uint32_t)id * 0x9e3779b1u) & (uint32_t)(cap - 1); /* Fibonacci hashing */
}

static int gen_grow(model_sampler *s)
{
    int cap = s->cap_gen ? s->cap_gen * 2 : 64;
    sample_count *t = malloc((size_t)cap * sizeof *t);
    if (!t) return -1;
    for (int i = 0; i < cap; i++) t[i] = (sample_count){-1, 0};
    for (int i = 0; i < s->cap_gen; i++) {
        if (s->gen[i].id < 0) continue;
        uint32_t j = slot_of(s->gen[i].id, cap);
        while (t[j].id >= 0) j = (j + 1) & (uint32_t)(cap - 1);
        t[j] = s->gen[i];
    }
    free(s->gen);
    s->gen = t;
    s->cap_gen = cap;
    return 0;
}

static int gen_add(model_sampler *s, int32_t id)
{
    if (2 * (s->n_gen + 1) > s->cap_gen && gen_grow(s) < 0) return -1;
    uint32_t j = slot_of(id, s->cap_gen);
    while (s->gen[j].id >= 0 && s->gen[j].id != id) j = (j + 1) & (uint32_t)(s->cap_gen - 1);
    if (s->gen[j].id < 0) {
        s->gen[j].id = id;
        s->n_gen++;
    }
    s->gen[j].count++;
    return 0;
}

static int uses_rep(const model_sampler *s)
{
    return s->p.repetition_penalty != 1.0f;
}

static int uses_gen(const model_sampler *s)
{
    return s->p.frequency_penalty != 0.0f || s->p.presence_penalty != 0.0f;
}

model_sampler *model_sampler_new(const model_sampling *p, int vocab, const int32_t *prompt_ids,
                                 int n_prompt, int choice_index, char *err, size_t errlen)
{
    if (validate(p, vocab, prompt_ids, n_prompt, choice_index, err, errlen) < 0) return NULL;
    model_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        bad(err, errlen, "out of memory");
        return NULL;
    }
    s->p = *p;
    s->vocab = vocab;
    s->greedy = p->temperature < MODEL_MIN_TEMPERATURE;
    if (p->top_k < 0) s->p.top_k = 0;

    /* Logit bias: clamp, and let a repeated id take its last value (as a JSON object would). */
    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (!s->bias) goto oom;
        for (int i = 0; i < p->n_logit_bias; i++) {
            model_logit_bias b = p->logit_bias[i];
            b.bias = fminf(fmaxf(b.bias, -MODEL_LOGIT_BIAS_LIMIT), MODEL_LOGIT_BIAS_LIMIT);
            int j = 0;
            while (j < s->n_bias && s->bias[j].id != b.id) j++;
            s->bias[j] = b;
            if (j == s->n_bias) s->n_bias++;
        }
    }
    s->p.logit_bias = s->bias;
    s->p.n_logit_bias = s->n_bias;

    if (uses_rep(s)) {
        s->rep_set = calloc(((size_t)vocab + 7) / 8, 1);
        if (!s->rep_set) goto oom;
        for (int i = 0; i < n_prompt; i++)
            if (rep_add(s, prompt_ids[i]) < 0) goto oom;
    }
    if (!s->greedy || p->logprobs) {
        s->w = malloc((size_t)vocab * sizeof *s->w);
        if (!s->w) goto oom;
    }
    if (!s->greedy) {
        if ((s->p.top_k > 0 && s->p.top_k < vocab) || p->top_p < 1.0f) {
            s->cand = malloc((size_t)vocab * sizeof *s->cand);
            if (!s->cand) goto oom;
        }
    }
    if (p->logprobs) {
        s->raw = malloc((size_t)vocab * sizeof *s->raw);
        if (!s->raw) goto oom;
    }

    uint64_t seed = p->seed;
    if (!p->has_seed && RAND_bytes((unsigned char *)&seed, sizeof seed) != 1) {
        model_sampler_free(s);
        bad(err, errlen, "cannot seed the sampler: OpenSSL RAND_bytes failed");
        return NULL;
    }
    model_rng_seed(&s->rng, seed);
    for (int i = 0; i < choice_index; i++) model_rng_jump(&s->rng);
    return s;
oom:
    model_sampler_free(s);
    bad(err, errlen, "out of memory");
    return NULL;
}

int model_sampler_plain_greedy(const model_sampler *s)
{
    return s->greedy && !s->p.logprobs && !s->p.top_logprobs && s->n_bias == 0 && !uses_rep(s) &&
           !uses_gen(s);
}

int32_t model_sample_argmax(const float *x, int n)
{
    /* the common row (no NaN, no +inf): the vectorized scan; else the rule one id at a time */
    int32_t v = model_vec_argmax_clean(x, n);
    if (v >= -1) return v;
    float best = -INFINITY;
    int32_t arg = -1;
    int finite = 0;
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (!(v > -INFINITY)) continue; /* NaN, -inf: never chosen */
        if (v == INFINITY) v = FLT_MAX;  /* as model_vec_scan_row */
        else finite = 1;
        if (v > best) { /* strictly: a tie keeps the lower id (-0 == +0 ties too) */
            best = v;
            arg = i;
        }
    }
    return finite ? arg : -1;
}

int model_sampler_accept(model_sampler *s, int32_t id)
{
    if (id < 0 || id >= s->vocab) return 0;
    if (uses_rep(s) && rep_add(s, id) < 0) return -1;
    if (uses_gen(s) && gen_add(s, id) < 0) return -1;
    return 0;
}

void model_sampler_apply_penalties(const model_sampler *s, float *logits)
{
    for (int i = 0; i < s->n_bias; i++) logits[s->bias[i].id] += s->bias[i].bias;
    if (s->rep_ids) {
        float r = s->p.repetition_penalty;
        for (int i = 0; i < s->n_rep; i++) {
            float *l = &logits[s->rep_ids[i]];
            *l = *l > 0 ? *l / r : *l * r;
        }
    }
    if (s->gen) {
        float fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
        for (int i = 0; i < s->cap_gen; i++) {
            if (s->gen[i].id < 0) continue;
            float *l = &logits[s->gen[i].id];
            *l -= (float)s->gen[i].count * fp;
            *l -= pp;
        }
    }
}

void model_sampler_free(model_sampler *s)
{
    if (!s) return;
    free(s->bias);
    free(s->rep_set);
    free(s->rep_ids);
    free(s->gen);
    free(s->w);
    free(s->cand);
    free(s->raw);
    free(s);
}
