/* model/gen/gen_vocab.c — the tokenizer's vocabulary as the grammar engine sees it: each token's
 * bytes (model_tok_token_bytes), special tokens never allowed, eos ids allowed where the grammar
 * may end, and whether the decoder drops a generation's first space. */
#include "model/gen/gen.h"
#include <stdlib.h>
#include <string.h>

model_gvocab *model_gen_vocab_new(const model_tok *tok, int vocab, const int32_t *eos_ids, int n_eos)
{
    if (vocab < 1 || vocab > MODEL_MAX_VOCAB) return NULL;
    int byte_level = model_tok_is_byte_level(tok);
    size_t total = 0;
    for (int id = 0; id < vocab; id++) {
        const char *p = model_tok_piece(tok, id);
        total += p ? strlen(p) : 0;
    }
    char *blob = malloc(total + 1);
    const char **bytes = malloc(sizeof *bytes * (size_t)vocab);
    size_t *lens = malloc(sizeof *lens * (size_t)vocab);
    uint8_t *never = calloc((size_t)vocab, 1);
    model_gvocab *v = NULL;
    if (blob && bytes && lens && never) {
        size_t o = 0;
        for (int id = 0; id < vocab; id++) {
            bytes[id] = blob + o;
            lens[id] = model_tok_token_bytes(tok, id, byte_level, blob + o);
            o += lens[id];
            never[id] = (uint8_t)(model_tok_is_special(tok, id) || !model_tok_piece(tok, id));
        }
        v = model_gvocab_new(vocab, bytes, lens, never, eos_ids, n_eos, model_tok_strips_first_space(tok));
    }
    free(blob);
    free(bytes);
    free(lens);
    free(never);
    return v;
}
