/* model/gen/finish.c — finish reasons (see finish.h). */
#include "model/gen/finish.h"
#include <stddef.h>

const char *model_finish_name(enum model_finish f)
{
    switch (f) {
    case MODEL_FINISH_STOP: return "stop";
    case MODEL_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

int model_finish_is_eos(int32_t id, const int32_t *eos_ids, int n_eos)
{
    for (int i = 0; i < n_eos && eos_ids; i++)
        if (eos_ids[i] == id) return 1;
    return 0;
}

enum model_finish model_finish_step(int32_t id, const int32_t *eos_ids, int n_eos, int stop_hit,
                                    int n_generated, int max_tokens, int n_past, int n_ctx)
{
    if (model_finish_is_eos(id, eos_ids, n_eos) || stop_hit) return MODEL_FINISH_STOP;
    if (max_tokens > 0 && n_generated >= max_tokens) return MODEL_FINISH_LENGTH;
    if (n_past >= n_ctx) return MODEL_FINISH_LENGTH;
    return MODEL_FINISH_NONE;
}
