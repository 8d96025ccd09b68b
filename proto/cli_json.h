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
/* A conversation as model_tmpl_render_conversation takes it: {"messages":[{"role","content"}...],
 * "tools":null,"add_generation_prompt":true,"bos_token":..,"eos_token":..}. roles/contents are
 * n pairs of NUL-terminated UTF-8 strings. bos/eos may be NULL. malloc'ed; NULL on OOM. */
char *proto_cli_conversation_json(const char *const *roles, const char *const *contents, int n,
                                  int add_generation_prompt, const char *bos, const char *eos);
/* {"block_size":B,"q_block0":Q,"heads":[[[col...] per row Q .. n_blocks - 1] per head]} from
 * CSR lists (row_ptr (n_heads, n_blocks + 1) absolute into col): tandem sparse-index's output. */
char *proto_cli_sparse_blocks_json(int block_size, int q_block0, int n_heads, int n_blocks,
                                   const int64_t *row_ptr, const int32_t *col);
/* {"ids":[...]} */
char *proto_cli_ids_json(const int32_t *ids, size_t n);

#endif
