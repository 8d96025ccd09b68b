/* proto/cli_json.c — see cli_json.h. */
#include "proto/cli_json.h"
#include <jansson.h>

static json_t *id_array(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

char *proto_cli_generate_json(const int32_t *ids, size_t n, const char *text, size_t text_len,
                              const char *finish, int prompt_tokens, const char *devices)
{
    json_t *o = json_object();
    json_object_set_new(o, "ids", id_array(ids, n));
    json_object_set_new(o, "text", json_stringn(text ? text : "", text ? text_len : 0));
    json_object_set_new(o, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "prompt_tokens", json_integer(prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer((json_int_t)n));
    if (devices) json_object_set_new(o, "devices", json_string(devices));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *proto_cli_ids_json(const int32_t *ids, size_t n)
{
    json_t *o = json_object();
    json_object_set_new(o, "ids", id_array(ids, n));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *proto_cli_sparse_blocks_json(int block_size, int q_block0, int n_heads, int n_blocks,
                                   const int64_t *row_ptr, const int32_t *col)
{
    json_t *o = json_object(), *heads = json_array();
    for (int h = 0; h < n_heads; h++) {
        json_t *rows = json_array();
        const int64_t *rp = row_ptr + (size_t)h * (n_blocks + 1);
        for (int r = q_block0; r < n_blocks; r++) {
            json_t *ids = json_array();
            for (int64_t e = rp[r]; e < rp[r + 1]; e++) json_array_append_new(ids, json_integer(col[e]));
            json_array_append_new(rows, ids);
        }
        json_array_append_new(heads, rows);
    }
    json_object_set_new(o, "block_size", json_integer(block_size));
    json_object_set_new(o, "q_block0", json_integer(q_block0));
    json_object_set_new(o, "heads", heads);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *proto_cli_conversation_json(const char *const *roles, const char *const *contents, int n,
                                  int add_generation_prompt, const char *bos, const char *eos)
{
    json_t *o = json_object(), *msgs = json_array();
    for (int i = 0; i < n; i++) {
        /* json_pack refuses invalid UTF-8: the whole conversation is refused then */
        json_t *m = json_pack("{s:s, s:s}", "role", roles[i], "content", contents[i]);
        if (!m || json_array_append_new(msgs, m)) {
            json_decref(msgs);
            json_decref(o);
            return NULL;
        }
    }
    json_object_set_new(o, "messages", msgs);
    json_object_set_new(o, "tools", json_null());
    json_object_set_new(o, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_set_new(o, "bos_token", bos ? json_string(bos) : json_null());
    json_object_set_new(o, "eos_token", eos ? json_string(eos) : json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}
