/* model/sample/sample.h — choosing the next token from a row of logits, as the OpenAI API promises
 * and as Hugging Face transformers / vLLM implement it.
 *
 * Order of operations (each step sees the previous step's output):
 *   0. NaN logits are treated as -inf (a NaN can never be chosen).
 *   1. logit bias:          l[id] += bias                       (OpenAI `logit_bias`)
 *   2. repetition penalty:  for every distinct id in prompt + generated tokens,
 *                           l = l > 0 ? l / r : l * r            (HF/CTRL; vLLM does the same)
 *   3. frequency/presence:  for every id generated c > 0 times (tokens given to accept()),
 *                           l -= c * frequency_penalty; then l -= presence_penalty
 *                                                                (OpenAI's formula, float arithmetic)
 *   4. temperature 0 (or below 1e-5, vLLM's threshold, where 1/T would overflow the exponent):
 *      greedy — the argmax of the penalized logits, ties to the lowest id; steps 5-8 are skipped
 *      and the RNG is not consumed. Otherwise p ∝ w = exp((l - max l) / T), computed in float as
 *      exp_f((l - max l) * (1 / T)) with our own exp (model/sample/sample_vec.h: within 2 ulp,
 *      weights below 2^-126 are 0), so the weights are bit-identical on every machine.
 *   5. top-k (k > 0):  keeps every token whose logit is >= the k-th largest logit. Ties at the
 *      boundary are all kept (so the set can exceed k), as HF's TopKLogitsWarper and vLLM do; the
 *      kept set never depends on token order. k >= vocab keeps everything.
 *   6. top-p (p < 1):  over the tokens top-k kept, renormalized: sort by logit descending; find the
 *      first rank r whose cumulative probability (ranks 0..r) reaches p; keep every token whose
 *      logit is >= the logit at rank r (ties with the boundary token are all kept, as in 5).
 *      Equivalently: a token is kept when the mass of strictly better tokens is < p (HF's rule).
 *      p = 0 keeps only the top logit (and its ties); p = 1 is off.
 *   7. min-p (m > 0):  over the survivors, keeps tokens with p_i >= m * p_max. Since renormalizing
 *      does not change p_i / p_max and the top token weighs exactly 1, this is w_i >= m. m = 1
 *      keeps the top logit and its ties. (HF applies it after top-p as well; vLLM applies it
 *      before top-k/top-p.)
 *   8. draw: u = uniform[0,1) * (sum of the kept weights); walk the kept tokens in increasing id
 *      order and take the first whose running sum exceeds u. Exactly one RNG draw per token.
 *   The maximum logit always survives 5-7, so at least one token is always kept.
 *
 * Log-probabilities (when requested) describe the model's own distribution: log-softmax of the
 * logits as given (NaN as -inf), before bias, penalties, temperature and truncation — vLLM's
 * default ("raw_logprobs"). The chosen token's value is reported even when it is not among the
 * top alternatives; the alternatives are the top_logprobs best raw logits, ties to the lowest id.
 *
 * Random numbers: model/sample/rng.h (xoshiro256**). With has_seed the stream is a pure function of
 * (seed, choice_index); without, the seed comes from OpenSSL's RAND_bytes. Same seed + same
 * choice_index + same logits => same tokens on every machine.
 *
 * Cost (vocab V), all whole-row passes vectorized (model/sample/sample_vec.h): greedy is a max pass
 * plus the sparse bias/penalty updates; top-k (k <= 256) adds a heap pass and then works on the k
 * candidates; top-p adds one exp pass over the row (the sum Z needs every weight) and then works
 * on the tokens above a provably safe cut; the boundaries come from value histograms, never a
 * sort of the vocabulary (at most 32 tokens are ever sorted). Logprobs add a copy of the row, an
 * exp pass (the log-sum-exp) and a top-N pass. Measured by tools/bench_sample.c.
 *
 * Threads: a sampler has no shared state; one thread at a time per instance (one instance per
 * choice). Memory per instance, allocated by model_sampler_new for the paths its parameters use:
 * one row of V floats (weights) unless greedy, one of V ids (top-k or top-p), one of V floats
 * (logprobs), ~35 KiB of selection scratch, and for penalties a V-bit set plus the distinct ids.
 */
#ifndef TANDEM_MODEL_SAMPLE_H
#define TANDEM_MODEL_SAMPLE_H
#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_LOGIT_BIAS 300   /* OpenAI's limit on logit_bias entries */
#define MODEL_LOGIT_BIAS_LIMIT 100 /* biases are clamped to [-100, 100] (OpenAI's range) */
#define MODEL_MAX_TOP_LOGPROBS 20  /* OpenAI's limit on top_logprobs */
#define MODEL_MAX_CHOICES 128      /* OpenAI's limit on n; bounds choice_index */
#define MODEL_MAX_VOCAB (1 << 24)  /* far above any real vocabulary (Llama-3: 128256) */
#define MODEL_MIN_TEMPERATURE 1e-5f /* below this, sampling is greedy (vLLM's _SAMPLING_EPS) */

typedef struct model_logit_bias {
    int32_t id;
    float bias;
} model_logit_bias;

/* Valid ranges (checked by model_sampler_new):
 *   temperature 0..2; top_p 0..1; top_k >= 0 (-1 also means off, as in vLLM); min_p 0..1;
 *   repetition_penalty > 0 and finite; frequency/presence_penalty -2..2; logit_bias: at most
 *   MODEL_MAX_LOGIT_BIAS entries, ids in [0, vocab), finite biases (clamped to +-100; a repeated id
 *   takes its last value, as a JSON object would); top_logprobs 0..20 and only with logprobs. */
typedef struct model_sampling {
    float temperature;        /* 0: greedy (argmax, ties -> lowest id) */
    float top_p;              /* 1: off */
    int top_k;                /* 0: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; HF/CTRL style over prompt + generated tokens */
    float frequency_penalty;  /* OpenAI, over generated tokens, -2..2 */
    float presence_penalty;   /* OpenAI, over generated tokens, -2..2 */
    uint64_t seed;
    int has_seed; /* no seed: seeded from a CSPRNG (OpenSSL RAND_bytes) */
    const model_logit_bias *logit_bias;
    int n_logit_bias;
    int logprobs;     /* return the chosen token's logprob */
    int top_logprobs; /* 0..MODEL_MAX_TOP_LOGPROBS alternatives */
} model_sampling;

/* The defaults of the OpenAI API: temperature 1, top_p 1, everything else off. */
model_sampling model_sampling_default(void);

typedef struct model_logprobs {
    int32_t id;    /* the chosen token */
    float logprob; /* its raw log-probability */
    int n_top;
    int32_t top_ids[MODEL_MAX_TOP_LOGPROBS]; /* best first */
    float top_logprobs[MODEL_MAX_TOP_LOGPROBS];
} model_logprobs;

typedef struct model_sampler model_sampler;

/* Validates p and copies everything it needs (p, its logit_bias array and prompt_ids may be freed
 * afterwards). choice_index (0..MODEL_MAX_CHOICES-1) makes the n choices of one request
 * independent but reproducible: same seed + same index => same stream. prompt_ids (n_prompt
 * entries, each in [0, vocab)) feed the repetition penalty. Returns NULL with a one-line message
 * naming the offending parameter in err (or "out of memory", or a CSPRNG failure). The caller owns
 * the result (model_sampler_free). */
model_sampler *model_sampler_new(const model_sampling *p, int vocab, const int32_t *prompt_ids,
                                 int n_prompt, int choice_index, char *err, size_t errlen);

/* Picks the next token from logits[vocab] (modified in place: NaN -> -inf, bias, penalties).
 * When lp is non-NULL and the sampler was made with logprobs, fills *lp (see above); when lp is
 * non-NULL without logprobs, sets lp->id and zeroes the rest. Returns the token id, or -1 when no
 * logit is finite (every token masked: a model fault). Allocates nothing. Does not record the
 * token: call model_sampler_accept() with the id actually used. */
int32_t model_sampler_sample(model_sampler *s, float *logits, model_logprobs *lp);

/* The distribution the next sample() would draw from: the same steps 0-7 on logits (modified in
 * place the same way), probs[vocab] receives the final probabilities (0 for removed tokens; a
 * one-hot row for greedy). Consumes no random numbers. Returns the number of tokens kept, or -1 as
 * sample() does. For tests and tools. */
int model_sampler_dist(model_sampler *s, float *logits, float *probs);

/* Records a generated token for the penalties (ids outside [0, vocab) are ignored). Returns 0, or
 * -1 when memory for the bookkeeping ran out (the token is then not counted). */
int model_sampler_accept(model_sampler *s, int32_t id);

void model_sampler_free(model_sampler *s);

/* The token a greedy step takes from a row nothing has changed (no bias, no penalties): NaN is
 * never chosen, +inf counts as FLT_MAX, ties go to the lowest id (the scan of step 4); -1 when no
 * logit is finite (a row the scheduler refuses as a device's garbage before sampling). A device
 * that picks greedy tokens itself (accel_decode_argmax, scheduler/accel.h) must give exactly
 * this. Pure; any thread. */
int32_t model_sample_argmax(const float *logits, int vocab);

/* 1 when model_sampler_sample(s, row, NULL) returns model_sample_argmax(row) for every row with a
 * finite logit, and records nothing but the token: greedy, no logit bias, no repetition /
 * frequency / presence penalty, no logprobs. */
int model_sampler_plain_greedy(const model_sampler *s);

#endif
