/* model/tok/tok_json.h — small jansson helpers for the tokenizer loaders (model/tok/tok_load.c,
 * model/tok/tok_pipeline.c). Internal. */
#ifndef TANDEM_MODEL_TOK_JSON_H
#define TANDEM_MODEL_TOK_JSON_H
#include <jansson.h>
#include <stdio.h>

/* Formats the error and returns -1 from the calling loader. */
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return -1;                                                                                 \
    } while (0)

/* A string member (NULL when absent or not a string); *len gets its length (NULs included). */
static inline const char *jstr(json_t *o, const char *key, size_t *len)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return NULL;
    if (len) *len = json_string_length(v);
    return json_string_value(v);
}

static inline int jbool(json_t *o, const char *key, int def)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static inline const char *jtype(json_t *o)
{
    const char *s = jstr(o, "type", NULL);
    return s ? s : "(no type)";
}

#endif
