/* model/gen/gen.h — one choice of one generation, from logits to finished text: the sampler, the
 * streaming detokenizer, the stop-string matcher and the finish rules in the one order every
 * caller needs (tandem generate/chat, the scheduler's device workers).
 *
 * Per step: sample the next token from the logits -> record it for the penalties -> decide the
 * finish (eos, stop string, max_tokens, context) -> produce the text that is now final: the
 * token's text through the UTF-8-safe stream and the stop matcher; an eos token's text is never
 * emitted, nor a stop string or anything after it; on any finish the held-back text is flushed.
 *
 * Ownership and threads: a model_gen belongs to one choice and is used by one thread at a time;
 * the tokenizer it reads (may be NULL: ids only, no text) must outlive it. */
#ifndef TANDEM_MODEL_GEN_H
#define TANDEM_MODEL_GEN_H
#include "model/gen/finish.h"
#include "model/grammar/grammar.h"
#include "model/sample/sample.h"
#include "model/tok/tokenizer.h"

typedef struct model_gen_params {
    model_sampling sampling;
    const char *const *stops; /* stop strings (copied) */
    int n_stops;
    int max_tokens;           /* <= 0: only the context bounds the generation */
    int n_ctx;                /* the context length (prompt + generated must stay below) */
    const int32_t *eos_ids;   /* copied; the model's eos ids */
    int n_eos;
    int ignore_eos;           /* keep going through eos tokens (benchmarks) */
    int skip_special;         /* special tokens produce no text (OpenAI servers do this) */
    int continuation;         /* the text continues the prompt's (completions): what decoding
                                 prompt + generated adds after the prompt's text, so a first
                                 token "\u2581named" gives " named" (model_tok_stream_skip over
                                 the prompt's last CONT_WINDOW ids, gen.c); 0: the generated ids
                                 decoded alone, as a chat reply starts its own text */
    /* Constrained decoding (both or neither): the choice's text must be a sentence of grammar
     * (a reference is taken), over the tokens of gvocab (model_gen_vocab_new; must outlive the
     * model_gen). The mask is applied before logit bias, penalties and temperature; the choice
     * finishes ("stop") as soon as the grammar can take nothing more. */
    model_grammar *grammar;
    const model_gvocab *gvocab;
} model_gen_params;

typedef struct model_gen_out {
    int32_t token;            /* the sampled token */
    const char *text;         /* final text of this step (valid until the next call), may be "" */
    size_t len;
    enum model_finish finish; /* MODEL_FINISH_NONE while generating */
    int stop_string;          /* the finish came from a stop string */
    model_logprobs lp;        /* when the sampling asked for logprobs */
} model_gen_out;

typedef struct model_gen model_gen;

/* 1 when a continuation (model_gen_params.continuation) of prompt keeps its first token's leading
 * space (the prompt has text: " named" after "...a big dog"), 0 when the decoder drops it (an
 * empty prompt, a tokenizer that never strips one), -1 on out-of-memory: a probe word through a
 * stream skipped over the prompt, as the generation's own. The grammar's matcher of such a
 * continuation is told so (model_gmatch_keep_first_space): it must see the text the client gets. */
int model_gen_keeps_first_space(const model_tok *tok, int skip_special, const int32_t *prompt,
                                int n_prompt);

/* prompt: the prompt ids (for repetition penalty and context accounting). choice: index of this
 * choice among the request's n (independent, reproducible seeds). NULL + err on bad parameters
 * (the message names the parameter). */
model_gen *model_gen_new(const model_tok *tok, const model_gen_params *p, int vocab,
                         const int32_t *prompt, int n_prompt, int choice, char *err, size_t errlen);
/* One step from the logits of the next position (modified in place). Returns 0, -1 on
 * out-of-memory, or -2 when the grammar cannot go on (no token of the vocabulary continues it,
 * or a bound of the matcher passed: model_gen_error says which). After a finish, further calls
 * are invalid. */
int model_gen_step(model_gen *g, float *logits, model_gen_out *out);
/* A choice whose next token is the plain argmax of its row (model_sample_argmax): greedy sampling
 * without logit bias, penalties or logprobs, and no grammar. Its caller may have the device pick
 * that token (accel_decode_argmax, scheduler/accel.h) and step with model_gen_step_token instead:
 * the same state, text and finish as model_gen_step on the row. */
int model_gen_plain_greedy(const model_gen *g);
/* model_gen_step given the chosen token (0 <= token < vocab) of a plain-greedy choice. Returns as
 * model_gen_step, or -3 when g is not plain greedy or the token is out of range (nothing done). */
int model_gen_step_token(model_gen *g, int32_t token, model_gen_out *out);
int model_gen_generated(const model_gen *g);
/* 1 when the choice's text is held to a grammar. */
int model_gen_has_grammar(const model_gen *g);
/* Computes the grammar's mask for the next step ahead of it (none without a grammar), so that
 * the next model_gen_step finds it cached: a thread other than the stepping one may run it while
 * that one waits for the logits (scheduler/sched_mask.c), never concurrently with another call
 * on g. An error is kept for the step to report. */
void model_gen_prefetch(model_gen *g);
/* The message of the last -2 ("" when none). */
const char *model_gen_error(const model_gen *g);

/* The grammar's view of tok's vocabulary (vocab ids; eos ids allowed where the grammar may end,
 * special tokens never): built once per tokenizer, read by any thread. NULL when out of memory. */
model_gvocab *model_gen_vocab_new(const model_tok *tok, int vocab, const int32_t *eos_ids, int n_eos);
void model_gen_free(model_gen *g);

#endif
