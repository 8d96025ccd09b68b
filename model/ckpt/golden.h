/* model/ckpt/golden.h — reference cases produced by Hugging Face transformers (float64, eager
 * attention; see tests/data/golden and ../shared/README.md for the format). Used by the tests and
 * by `tandem eval`, which measure a device against them. */
#ifndef TANDEM_MODEL_GOLDEN_H
#define TANDEM_MODEL_GOLDEN_H
#include <stddef.h>
#include <stdint.h>

typedef struct model_golden {
    char name[64];
    int32_t *ids;        /* input ids, BOS included */
    int n_ids;
    int topk;            /* top entries per position */
    int32_t *top_ids;    /* (n_ids, topk) */
    float *top_logits;   /* (n_ids, topk) */
    float *logsumexp;    /* (n_ids) */
    int32_t *greedy_ids; /* greedy continuation (no EOS stop) */
    int n_greedy;
    char *greedy_text;
    float greedy_min_margin;
    float *last_logits;  /* (vocab) or NULL */
    float *all_logits;   /* (n_ids, vocab) or NULL (only some models ship them) */
    int vocab;           /* length of last_logits rows */
} model_golden;

/* Loads <path>.json and the .f32 files it names (same directory). vocab bounds the .f32 rows.
 * NULL with a message in err on failure. */
model_golden *model_golden_load(const char *json_path, int vocab, char *err, size_t errlen);
void model_golden_free(model_golden *g);

/* The *.json case files of a directory, sorted; returns the count (or -1), fills paths (caller
 * frees each and the array). */
int model_golden_list(const char *dir, char ***paths);

#endif
