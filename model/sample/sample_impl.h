/* model/sample/sample_impl.h — the sampler's state, shared by model/sample/sample.c (lifecycle,
 * validation, penalty bookkeeping) and model/sample/sample_step.c (the per-token pipeline).
 * Internal to model/. */
#ifndef TANDEM_MODEL_SAMPLE_IMPL_H
#define TANDEM_MODEL_SAMPLE_IMPL_H
#include "model/sample/rng.h"
#include "model/sample/sample.h"
#include "model/sample/sample_select.h"

/* Top-k up to this finds its k-th logit with a k-heap in one pass (k log k work on the few values
 * that beat the current k-th); larger k use the histogram search of sample_select.h. */
#define SAMPLE_HEAP_K 256

/* One generated id and how often it was generated (frequency/presence penalties). */
typedef struct sample_count {
    int32_t id; /* -1: empty slot */
    uint32_t count;
} sample_count;

struct model_sampler {
    model_sampling p; /* validated copy; p.logit_bias points at bias below */
    int vocab;
    int greedy; /* temperature below MODEL_MIN_TEMPERATURE */
    model_logit_bias *bias; /* n_bias entries, distinct ids, clamped */
    int n_bias;
    model_rng rng;

    /* Repetition penalty: the distinct ids of prompt + generated (a V-bit set and its members). */
    uint8_t *rep_set;
    int32_t *rep_ids;
    int n_rep, cap_rep;

    /* Frequency/presence penalties: open-addressing table (linear probing, power-of-two size,
     * at most half full) from generated id to count. */
    sample_count *gen;
    int cap_gen, n_gen;

    /* Scratch rows of vocab entries, allocated by model_sampler_new for the paths p needs. */
    float *w;      /* exp((l - max) / T) of the candidates (sampling; logprobs) */
    int32_t *cand; /* candidate ids (top-k or top-p) */
    float *raw;    /* the logits as given (logprobs) */
    float heap[SAMPLE_HEAP_K]; /* the k best logits, for top-k <= SAMPLE_HEAP_K */
    model_sel sel;
};

/* Adds bias and penalties to logits in place (steps 1-3 of sample.h). */
void model_sampler_apply_penalties(const model_sampler *s, float *logits);

#endif
