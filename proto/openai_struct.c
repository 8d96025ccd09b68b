/* proto/openai_struct.c — see openai_struct.h. */
#include "proto/openai_struct.h"
#include "proto/json_schema.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GRAMMAR_BYTES (1 << 20) /* model/grammar's MODEL_GRAMMAR_MAX_TEXT */

static int bad(enum proto_err *e, enum proto_err code, char *msg, size_t msgn, char *param, size_t paramn,
               const char *p, const char *m)
{
    *e = code;
    snprintf(msg, msgn, "%s", m);
    snprintf(param, paramn, "%s", p);
    return -1;
}

int proto_struct_parse(json_t *o, enum proto_endpoint ep, proto_req *r, enum proto_err *e, char *msg,
                       size_t msgn, char *param, size_t paramn)
{
    (void)ep;
    json_t *rf = json_object_get(o, "response_format"), *gr = json_object_get(o, "grammar");
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr))
            return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "grammar", "'grammar' must be a string of GBNF rules");
        if (json_string_length(gr) > MAX_GRAMMAR_BYTES)
            return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "grammar", "'grammar' is longer than 1 MiB");
        r->grammar = strdup(json_string_value(gr));
        if (!r->grammar) return bad(e, PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
        r->grammar_kind = PROTO_GRAMMAR_GBNF;
    }
    if (!rf || json_is_null(rf)) return 0;
    json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    if (!json_is_string(t))
        return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "response_format",
                   "'response_format' must be an object with a string 'type'");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return 0;
    if (r->grammar_kind)
        return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "grammar",
                   "'grammar' and a 'response_format' other than text cannot be combined");
    if (!strcmp(type, "json_object")) {
        r->grammar_kind = PROTO_GRAMMAR_JSON_OBJECT;
        return 0;
    }
    if (strcmp(type, "json_schema") != 0) {
        char m[160];
        snprintf(m, sizeof m, "'response_format' type '%.40s' is not one of text, json_object, json_schema", type);
        return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "response_format", m);
    }
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "response_format",
                   "'response_format' of type json_schema needs a 'json_schema' object");
    json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    json_t *schema = json_object_get(js, "schema");
    if (name && !json_is_string(name))
        return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "response_format", "'json_schema.name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "response_format", "'json_schema.strict' must be a boolean");
    if (!schema) schema = json_true(); /* OpenAI: absent schema means any JSON */
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "response_format", "'json_schema.schema' must be an object");
    char *text = json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) return bad(e, PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
    proto_buf g;
    proto_buf_init(&g);
    char m[400];
    /* strict true: every output validates, so a keyword the grammar cannot enforce is refused;
     * without it (OpenAI accepts any schema then) such a keyword is only an annotation */
    enum proto_jschema_mode mode = json_is_true(strict) ? PROTO_JSCHEMA_STRICT : PROTO_JSCHEMA_LAX;
    int rc = proto_jschema_grammar_mode(text, strlen(text), mode, &g, m, sizeof m);
    free(text);
    if (rc) {
        proto_buf_deinit(&g);
        char m2[480];
        snprintf(m2, sizeof m2, "response_format.json_schema: %s", m);
        return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "response_format", m2);
    }
    r->grammar = proto_buf_take(&g);
    if (!r->grammar) return bad(e, PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
    r->grammar_kind = PROTO_GRAMMAR_JSON_SCHEMA;
    return 0;
}
