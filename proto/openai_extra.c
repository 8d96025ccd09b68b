/* proto/openai_extra.c — see openai_extra.h. */
#include "proto/openai_extra.h"
#include "proto/utf8.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum proto_err bad(enum proto_err e, char *msg, size_t msgn, char *param, size_t paramn, const char *p,
                          const char *m)
{
    snprintf(msg, msgn, "%s", m);
    snprintf(param, paramn, "%s", p);
    return e;
}

static json_t *load_object(const char *body, size_t len, char *msg, size_t msgn)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) snprintf(msg, msgn, "invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
    else if (!json_is_object(o)) {
        json_decref(o);
        o = NULL;
        snprintf(msg, msgn, "the JSON body must be an object");
    }
    return o;
}

enum proto_err proto_tokenize_parse(const char *body, size_t len, proto_tokenize_req *out, char *msg,
                                    size_t msgn, char *param, size_t paramn)
{
    memset(out, 0, sizeof *out);
    param[0] = 0;
    json_t *o = load_object(body, len, msg, msgn);
    if (!o) return PROTO_ERR_INVALID_JSON;
    enum proto_err e = PROTO_ERR_NONE;
    json_t *c = json_object_get(o, "content"), *as = json_object_get(o, "add_special"), *wp = json_object_get(o, "with_pieces");
    if (!json_is_string(c)) e = bad(PROTO_ERR_MISSING_FIELD, msg, msgn, param, paramn, "content", "'content' (a string) is required");
    else if ((as && !json_is_boolean(as)) || (wp && !json_is_boolean(wp)))
        e = bad(PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, as && !json_is_boolean(as) ? "add_special" : "with_pieces",
                "'add_special' and 'with_pieces' must be booleans");
    if (e == PROTO_ERR_NONE) {
        out->len = json_string_length(c);
        out->content = malloc(out->len + 1);
        if (!out->content) e = bad(PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
        else memcpy(out->content, json_string_value(c), out->len + 1);
        out->add_special = !as || json_is_true(as);
        out->with_pieces = wp && json_is_true(wp);
    }
    json_decref(o);
    return e;
}

void proto_tokenize_req_deinit(proto_tokenize_req *r)
{
    free(r->content);
    memset(r, 0, sizeof *r);
}

char *proto_tokenize_json(const int32_t *ids, size_t n, const char *const *pieces, const size_t *lens)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *v;
        if (pieces) {
            char *s = proto_utf8_sanitize(pieces[i], lens[i], NULL);
            v = s ? json_pack("{s:i, s:s}", "id", ids[i], "piece", s) : NULL;
            free(s);
        } else {
            v = json_integer(ids[i]);
        }
        if (!v || json_array_append_new(a, v)) {
            json_decref(a);
            return NULL;
        }
    }
    json_t *o = a ? json_pack("{s:o}", "tokens", a) : NULL;
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

enum proto_err proto_detokenize_parse(const char *body, size_t len, int vocab, int32_t **ids, size_t *n,
                                      char *msg, size_t msgn, char *param, size_t paramn)
{
    *ids = NULL;
    *n = 0;
    param[0] = 0;
    json_t *o = load_object(body, len, msg, msgn);
    if (!o) return PROTO_ERR_INVALID_JSON;
    json_t *t = json_object_get(o, "tokens");
    enum proto_err e = PROTO_ERR_NONE;
    if (!json_is_array(t)) {
        e = bad(PROTO_ERR_MISSING_FIELD, msg, msgn, param, paramn, "tokens", "'tokens' (an array of token ids) is required");
    } else if (json_array_size(t) > PROTO_MAX_DETOKENIZE) {
        e = bad(PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tokens", "more than 1048576 tokens");
    } else if (!(*ids = malloc(sizeof **ids * (json_array_size(t) + 1)))) {
        e = bad(PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
    } else {
        for (size_t i = 0; i < json_array_size(t); i++) {
            json_t *v = json_array_get(t, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
                char m[96];
                snprintf(m, sizeof m, "'tokens' must hold token ids in [0, %d)", vocab);
                e = bad(PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tokens", m);
                break;
            }
            (*ids)[i] = (int32_t)json_integer_value(v);
        }
        *n = json_array_size(t);
    }
    if (e != PROTO_ERR_NONE) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    json_decref(o);
    return e;
}

char *proto_text_json(const char *key, const char *text, size_t len)
{
    char *s = proto_utf8_sanitize(text ? text : "", text ? len : 0, NULL);
    json_t *o = s ? json_pack("{s:s}", key, s) : NULL;
    free(s);
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return out;
}

char *proto_model_json(const char *model, long long created, int max_model_len)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", model, "object", "model", "created", (json_int_t)created,
                          "owned_by", "tandem", "max_model_len", max_model_len);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}
