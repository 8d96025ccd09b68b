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
    int strict; /* 1: a keyword the grammar cannot enforce is refused; 0: it is an annotation */
} jsc;

/* Records the first failure in c->msg (later ones are dropped: the first names the cause) with
 * ptr, the JSON pointer of the offending node; always -1. */
__attribute__((format(printf, 3, 4))) int jsc_fail(jsc *c, const char *ptr, const char *fmt, ...);

/* A "pattern" (ECMA-262 subset, see json_schema.h) as a grammar expression for a JSON string,
 * quotes included, appended to b. 0 / -1 through jsc_fail. */
int jsc_pattern(jsc *c, proto_buf *b, const char *pat, size_t n, const char *ptr);

/* For a keyword (key; value, when not NULL, the value that makes it so) whose meaning the grammar
 * cannot enforce: -1 through jsc_fail when c->strict, else 0 (the caller goes on without it: the
 * grammar accepts a wider language). */
int jsc_unenforceable(jsc *c, const char *ptr, const char *key, const char *value);

/* An "integer" (integer 1) or "number" node with its bounds and multipleOf, appended to b as one
 * grammar expression. 0 / -1 through jsc_fail. */
int jsc_number(jsc *c, json_t *s, const char *ptr, int integer, proto_buf *b);

/* The string format name (date, time, date-time, uuid, ipv4, email, hostname) as a grammar
 * expression for a JSON string, quotes included, appended to b: 0; 1 when the format is not one
 * of them (b untouched); -1 through jsc_fail. */
int jsc_format(jsc *c, const char *name, proto_buf *b, const char *ptr);

#endif
