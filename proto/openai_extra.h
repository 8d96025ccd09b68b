/* proto/openai_extra.h — the utility endpoints beside the OpenAI API (llama.cpp's server names
 * and shapes): POST /tokenize {"content", "add_special" (default true), "with_pieces"} ->
 * {"tokens": [ids]} or {"tokens": [{"id", "piece"}]}; POST /detokenize {"tokens": [ids]} ->
 * {"content"}; POST /apply-template {"messages": ...} -> {"prompt"} (its body is a chat request:
 * proto_req_parse reads it); GET /v1/models/{id} -> one model object.
 *
 * Threads: pure functions, any thread. JSON results are malloc'ed (NULL: out of memory). */
#ifndef TANDEM_PROTO_OPENAI_EXTRA_H
#define TANDEM_PROTO_OPENAI_EXTRA_H
#include "proto/errors.h"
#include <stddef.h>
#include <stdint.h>

#define PROTO_MAX_DETOKENIZE (1 << 20) /* ids per /detokenize request */

typedef struct proto_tokenize_req {
    char *content;
    size_t len;
    int add_special;
    int with_pieces;
} proto_tokenize_req;

enum proto_err proto_tokenize_parse(const char *body, size_t len, proto_tokenize_req *out, char *msg,
                                    size_t msgn, char *param, size_t paramn);
void proto_tokenize_req_deinit(proto_tokenize_req *r);
/* pieces: each id's bytes (lens[i] bytes; shown with U+FFFD for bytes that are not UTF-8), or
 * NULL for plain ids. */
char *proto_tokenize_json(const int32_t *ids, size_t n, const char *const *pieces, const size_t *lens);

/* The ids of a /detokenize body, each in [0, vocab): *ids (malloc'ed, caller frees), *n. */
enum proto_err proto_detokenize_parse(const char *body, size_t len, int vocab, int32_t **ids, size_t *n,
                                      char *msg, size_t msgn, char *param, size_t paramn);

/* {"<key>": text} (text made valid UTF-8). */
char *proto_text_json(const char *key, const char *text, size_t len);

/* GET /v1/models/{id}: {"id", "object": "model", "created", "owned_by", "max_model_len"}. */
char *proto_model_json(const char *model, long long created, int max_model_len);

#endif
