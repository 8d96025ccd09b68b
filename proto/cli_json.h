/* proto/cli_json.h — JSON lines the CLI prints (JSON stays in proto/). */
#ifndef TANDEM_PROTO_CLI_JSON_H
#define TANDEM_PROTO_CLI_JSON_H
#include <stddef.h>
#include <stdint.h>

/* {"ids":[...],"text":"...","finish_reason":"...","prompt_tokens":N,"completion_tokens":N,
 *  "devices":"prefill=..; decode=.."} as a malloc'ed string (NULL on out-of-memory). text must be
 * valid UTF-8 (the detokenizer guarantees it). finish may be NULL. */
char *proto_cli_generate_json(const int32_t *ids, size_t n, const char *text, size_t text_len,
                              const char *finish, int prompt_tokens, const char *devices);
/* {"ids":[...]} */
char *proto_cli_ids_json(const int32_t *ids, size_t n);

#endif
