/* proto/json_schema_int.h — what the JSON Schema converter's files share (internal to
 * proto/json_schema*.c): the conversion's state, its one error path and the node converters that
 * live in their own files (string patterns, numbers and their bounds). */
#ifndef TANDEM_PROTO_JSON_SCHEMA_INT_H
#define TANDEM_PROTO_JSON_SCHEMA_INT_H
#include "proto/json_schema.h"
#include <jansson.h>

typedef struct jref {
    char *ref;
    char name[64];
} jref;

typedef struct jsc {
    json_t *root;
    proto_buf *out;
    const char *prefix;
    int n_rules;
    jref *refs;
    int n_refs, cap_refs;
    char *msg;
    size_t msgn;
    int failed;
} jsc;

/* Records the first failure in c->msg (later ones are dropped: the first names the cause) with
 * ptr, the JSON pointer of the offending node; always -1. */
__attribute__((format(printf, 3, 4))) int jsc_fail(jsc *c, const char *ptr, const char *fmt, ...);

/* A "pattern" (ECMA-262 subset, see json_schema.h) as a grammar expression for a JSON string,
 * quotes included, appended to b. 0 / -1 through jsc_fail. */
int jsc_pattern(jsc *c, proto_buf *b, const char *pat, size_t n, const char *ptr);

#endif
