/* model/gen/finish.h — why a choice stopped generating (OpenAI's finish_reason), decided per step.
 *
 * Precedence, as vLLM checks it: an eos token, then a stop string ("stop"), then max_tokens, then
 * the context length ("length"). Pure functions; any thread. */
#ifndef TANDEM_MODEL_FINISH_H
#define TANDEM_MODEL_FINISH_H
#include <stdint.h>

enum model_finish {
    MODEL_FINISH_NONE,   /* keep going */
    MODEL_FINISH_STOP,   /* an eos token or a stop string */
    MODEL_FINISH_LENGTH, /* max_tokens reached, or the context is full */
};

/* "stop", "length"; NULL for MODEL_FINISH_NONE (JSON null: not finished yet). */
const char *model_finish_name(enum model_finish f);

/* 1 when id is one of eos_ids[0..n_eos) (a model may have several: Llama-3 lists
 * <|end_of_text|>, <|eot_id|>, ...). The caller does not emit an eos token's text. */
int model_finish_is_eos(int32_t id, const int32_t *eos_ids, int n_eos);

/* The finish after one generated token, once it has been sampled and its text pushed through the
 * stop matcher:
 *   id           the sampled token
 *   eos_ids      the model's eos ids (n_eos of them, may be 0)
 *   stop_hit     the stop matcher reported a hit for this token's text
 *   n_generated  tokens generated so far, this one included
 *   max_tokens   the request's limit; <= 0 means no limit of its own (only the context bounds it)
 *   n_past       tokens in the sequence, prompt + generated, this one included
 *   n_ctx        the context length: this token could not be fed back once n_past >= n_ctx */
enum model_finish model_finish_step(int32_t id, const int32_t *eos_ids, int n_eos, int stop_hit,
                                    int n_generated, int max_tokens, int n_past, int n_ctx);

#endif
