/* proto/json_schema.h — JSON Schema to a GBNF grammar (model/grammar's input notation), for
 * response_format {"type": "json_schema"} and for tool calls' arguments.
 *
 * Every text the grammar accepts is JSON that validates against the schema's enforced keywords:
 * where the schema allows more than the grammar can say cheaply, the grammar says less (object
 * members come in the order of "properties" and only those; whitespace is at most one space;
 * integers have at most 16 digits (19 where a bound has more), exponents two, a bounded number
 * none; strings and arrays at most MAX_REPEAT items beyond their minimum; a number's fractional
 * bound is rounded inwards to an integer) — a narrower language, never a wider one.
 *
 * Enforced: type (one or a list), properties, required, additionalProperties (false, true or a
 * schema when there are no properties), enum, const, items, minItems/maxItems,
 * minLength/maxLength, nested objects, anyOf, allOf with one member, $ref to "#" or a JSON
 * pointer into the same document (recursion allowed), minimum/maximum/exclusiveMinimum/
 * exclusiveMaximum on integers and numbers (any values in the 64-bit range; draft 4's boolean
 * exclusiveMinimum too), multipleOf 1, nullable (OpenAPI 3.0: the schema or null), oneOf whose
 * members no document can match two of (disjoint kinds of value, differing const/enum values,
 * objects with a required tag of differing values), uniqueItems false or with
 * maxItems <= 1, format date, time, date-time, uuid, ipv4, email, hostname (json_schema_fmt.c),
 * and a string "pattern" subset (literals, ., classes, \d \w \s, groups, |, * + ? {m,n}, ^ and
 * $ at the ends).
 * Annotations, ignored: title, description, default, examples, example, $schema, $id, $comment,
 * $defs/definitions, deprecated, readOnly, writeOnly, $anchor, discriminator, contentEncoding,
 * contentMediaType.
 * Not enforceable (PROTO_JSCHEMA_STRICT refuses them naming the keyword; PROTO_JSCHEMA_LAX
 * accepts them as annotations, so the grammar accepts a wider language than the schema): other
 * multipleOf values, uniqueItems true, other formats (or a format beside pattern/minLength/
 * maxLength), oneOf with members that may overlap (generated as anyOf), a number range that holds
 * no integer, not, if/then/else, patternProperties, propertyNames, min/maxProperties,
 * contains/min/maxContains, dependentRequired/dependentSchemas/dependencies,
 * unevaluatedProperties/unevaluatedItems, prefixItems, additionalItems.
 * Any other keyword is refused, naming it, in both modes.
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

/* What a keyword the grammar cannot enforce does: STRICT refuses the schema (OpenAI's
 * json_schema strict true: the output is guaranteed to validate); LAX keeps it as an annotation
 * (strict absent or false: OpenAI accepts such a schema without the guarantee). */
enum proto_jschema_mode { PROTO_JSCHEMA_STRICT, PROTO_JSCHEMA_LAX };

/* The generic rules every grammar below may use: json-value, json-object, json-array,
 * json-string, json-number, json-integer, json-bool, json-null, ws, json-char. */
int proto_jschema_common(proto_buf *out);

/* Appends rules for schema (JSON text, len bytes) to out, the schema's own rule named
 * rule_name (callers put "root ::= <rule_name>" or use it inside their own rules); prefix keeps
 * the generated rule names of several schemas in one grammar apart. The common rules are not
 * included (proto_jschema_common adds them once). 0, or -1 with a message in msg naming the
 * offending keyword (its JSON pointer in the schema). */
int proto_jschema_rules_mode(const char *schema, size_t len, enum proto_jschema_mode mode,
                             const char *rule_name, const char *prefix, proto_buf *out, char *msg,
                             size_t msgn);
/* The same in PROTO_JSCHEMA_LAX mode: it accepts every schema the converter accepted before the
 * modes existed, and enforces at least what it did (a format it ignored may now be enforced). */
int proto_jschema_rules(const char *schema, size_t len, const char *rule_name, const char *prefix,
                        proto_buf *out, char *msg, size_t msgn);

/* A whole grammar whose root is the schema: common rules + the schema's rules. 0 / -1 as above. */
int proto_jschema_grammar_mode(const char *schema, size_t len, enum proto_jschema_mode mode,
                               proto_buf *out, char *msg, size_t msgn);
/* The same in PROTO_JSCHEMA_LAX mode. */
int proto_jschema_grammar(const char *schema, size_t len, proto_buf *out, char *msg, size_t msgn);

/* Appends s (n bytes) as a GBNF string literal, quotes included. 0 / -1 (out of memory). */
int proto_gbnf_literal(proto_buf *out, const char *s, size_t n);

#endif
