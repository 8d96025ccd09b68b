/* scheduler/sched_token.c — the bytes each token contributes to text, for logprobs ("token" and
 * "bytes" in OpenAI's logprobs objects), computed once per scheduler from the vocabulary with
 * model_tok_token_bytes (model/tok/tokenizer.h says how a piece maps to bytes).
 *
 * (Streaming text never uses this table: it comes from the tokenizer's own decoder. This only
 * labels logprob entries, where a token's bytes are shown one token at a time.) */
#include "scheduler/sched_internal.h"
#include "proto/utf8.h"
#include <stdlib.h>
#include <string.h>

int sched_token_table_init(sched_token_table *t, const model_tok *tok, int vocab)
{
    memset(t, 0, sizeof *t);
    int byte_level = model_tok_is_byte_level(tok);
    size_t total = 0;
    for (int id = 0; id < vocab; id++) {
        const char *p = model_tok_piece(tok, id);
        total += p ? strlen(p) : 0;
    }
    t->blob = malloc(total + 1);
    t->off = malloc(sizeof(uint32_t) * ((size_t)vocab + 1));
    if (!t->blob || !t->off || total > UINT32_MAX) {
        sched_token_table_deinit(t);
        return -1;
    }
    /* Every mapping (model_tok_token_bytes) only shrinks a piece (a 3-byte "▁" -> 1 byte, "<0xNN>" -> 1 byte, a
     * stand-in character -> 1 byte), so the blob never outgrows the pieces' total. */
    size_t o = 0;
    for (int id = 0; id < vocab; id++) {
        t->off[id] = (uint32_t)o;
        o += model_tok_token_bytes(tok, id, byte_level, t->blob + o);
    }
    t->off[vocab] = (uint32_t)o;
    t->vocab = vocab;
    return 0;
}

void sched_token_table_deinit(sched_token_table *t)
{
    free(t->blob);
    free(t->off);
    memset(t, 0, sizeof *t);
}
