/* proto/json_schema.h — JSON Schema to a GBNF grammar (model/grammar's input notation), for
 * response_format {"type": "json_schema"} and for tool calls' arguments.
 *
 * Every text the grammar accepts is JSON that validates against the schema: where the schema
 * allows more than the grammar can say cheaply, the grammar says less (object members come in
 * the order of "properties" and only those; whitespace is at most one space; integers have at
 * most 16 digits, exponents two; strings and arrays at most MAX_REPEAT items beyond their
 * minimum) — a narrower language, never a wider one.
 *
 * Supported: type (one or a list), properties, required, additionalProperties (false, true or a
 * schema when there are no properties), enum, const, items, minItems/maxItems,
 * minLength/maxLength, nested objects, anyOf, allOf with one member, $ref to "#" or a JSON
 * pointer into the same document (recursion allowed), integer/number minimum 0 or 1 and
 * exclusiveMinimum 0, and a string "pattern" subset (literals, ., classes, \d \w \s, groups,
 * |, * + ? {m,n}, ^ and $ at the ends). Annotations (title, description, default, examples,
 * $schema, $id, $comment, $defs/definitions, deprecated, readOnly, writeOnly, format) are
 * ignored, as JSON Schema 2020-12 treats format. Any other keyword is refused, naming it.
 *
 * Bounds: nesting depth, number of rules and grammar bytes (JSCHEMA_MAX_*); a schema past one is
 * refused. Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_JSON_SCHEMA_H
#define TANDEM_PROTO_JSON_SCHEMA_H
#include "proto/buf.h"
#include <stddef.h>

#define JSCHEMA_MAX_DEPTH 64
#define JSCHEMA_MAX_RULES 4096
#define JSCHEMA_MAX_BYTES (512 * 1024)
#define JSCHEMA_MAX_REPEAT 1000 /* model/grammar's MODEL_GRAMMAR_MAX_REPEAT */

/* The generic rules every grammar below may use: json-value, json-object, json-array,
 * json-string, json-number, json-integer, json-bool, json-null, ws, json-char. */
int proto_jschema_common(proto_buf *out);

/* Appends rules for schema (JSON text, len bytes) to out, the schema's own rule named
 * rule_name (callers put "root ::= <rule_name>" or use it inside their own rules); prefix keeps
 * the generated rule names of several schemas in one grammar apart. The common rules are not
 * included (proto_jschema_common adds them once). 0, or -1 with a message in msg naming the
 * offending keyword (its JSON pointer in the schema). */
int proto_jschema_rules(const char *schema, size_t len, const char *rule_name, const char *prefix,
                        proto_buf *out, char *msg, size_t msgn);

/* A whole grammar whose root is the schema: common rules + the schema's rules. 0 / -1 as above. */
int proto_jschema_grammar(const char *schema, size_t len, proto_buf *out, char *msg, size_t msgn);

/* Appends s (n bytes) as a GBNF string literal, quotes included. 0 / -1 (out of memory). */
int proto_gbnf_literal(proto_buf *out, const char *s, size_t n);

#endif
