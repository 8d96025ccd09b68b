/* daemon/api_extra.h — the routes beside the OpenAI API that need no scheduler:
 * POST /tokenize, /detokenize, /apply-template (llama.cpp's names, proto/openai_extra.h) and
 * GET /v1/models/{id}. Any thread (they read the immutable tokenizer and template: a large body
 * is answered from the loop's thread pool); and the
 * prompt of a completion or chat request as token ids. */
#ifndef TANDEM_DAEMON_API_EXTRA_H
#define TANDEM_DAEMON_API_EXTRA_H
#include "daemon/serve.h"

enum dmn_extra { DMN_EXTRA_TOKENIZE, DMN_EXTRA_DETOKENIZE, DMN_EXTRA_APPLY_TEMPLATE };

/* The extra POST route of path (a trailing slash tolerated), or -1. */
int dmn_extra_route(const char *path);
/* The response body (malloc'ed JSON; NULL: out of memory) and *status for a POST to route. */
char *dmn_extra_post(dmn_serve *d, int route, const char *body, size_t len, int *status);
/* GET /v1/models/{id}: the model object when id (percent-escapes decoded) is the served name,
 * else a 404 error body (a 400 for a bad escape). */
char *dmn_model_get(dmn_serve *d, const char *id, int *status);
/* When the daemon started, as a Unix time (the models' "created"). */
long long dmn_start_time(const dmn_serve *d);

/* The prompt's ids for request q (completions: as given or through the tokenizer with its
 * special tokens; chat: through the template): *ids malloc'ed (*n of them). 0, or -1 with the
 * error in *e and its message. Any thread (reads the immutable tokenizer and template). */
int dmn_prompt_ids(dmn_serve *d, const proto_req *q, int32_t **ids, int *n, char *err, size_t errlen,
                   enum proto_err *e);

#endif
