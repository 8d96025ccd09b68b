/* proto/json_schema.c — see json_schema.h. Each schema node becomes one GBNF rule; a node's
 * body is built in its own buffer and appended whole, so the rules of nested nodes land first
 * and never interleave. $ref targets get their rule name before their body is built, which is
 * what lets a schema refer to itself. */
#include "proto/json_schema_int.h"
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jsc_fail(jsc *c, const char *ptr, const char *fmt, ...)
{
    if (c->failed) return -1;
    c->failed = 1;
    char m[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(c->msg, c->msgn, "%s (at '%s' in the schema)", m, ptr[0] ? ptr : "/");
    return -1;
}

int proto_gbnf_literal(proto_buf *out, const char *s, size_t n)
{
    if (proto_buf_putc(out, '"')) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        int rc;
        if (ch == '"' || ch == '\\') rc = proto_buf_putc(out, '\\') || proto_buf_putc(out, (char)ch);
        else if (ch < 0x20 || ch == 0x7F) rc = proto_buf_printf(out, "\\x%02X", ch);
        else rc = proto_buf_putc(out, (char)ch);
        if (rc) return -1;
    }
    return proto_buf_putc(out, '"');
}

/* The generic JSON rules. \u escapes that would name a lone surrogate are left out (strict
 * parsers refuse them); whitespace is at most one space. */
int proto_jschema_common(proto_buf *out)
{
    return proto_buf_str(out,
        "ws ::= \" \"?\n"
        "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null\n"
        "json-object ::= \"{\" ws ( json-string ws \":\" ws json-value ws ( \",\" ws json-string ws \":\" ws json-value ws )* )? \"}\"\n"
        "json-array ::= \"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"\n"
        "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
        "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n"
        "json-number ::= json-integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
        "json-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
        "json-bool ::= \"true\" | \"false\"\n"
        "json-null ::= \"null\"\n");
}

static void new_name(jsc *c, char name[64])
{
    snprintf(name, 64, "%s%d", c->prefix, ++c->n_rules);
}

static int emit_rule(jsc *c, const char *name, proto_buf *body)
{
    if (c->out->len + body->len + 80 > (size_t)JSCHEMA_MAX_BYTES) {
        c->failed = 1;
        snprintf(c->msg, c->msgn, "the schema's grammar passes %d bytes", JSCHEMA_MAX_BYTES);
        return -1;
    }
    if (proto_buf_printf(c->out, "%s ::= ", name) || proto_buf_add(c->out, body->p ? body->p : "", body->len) ||
        proto_buf_putc(c->out, '\n')) {
        c->failed = 1;
        snprintf(c->msg, c->msgn, "out of memory");
        return -1;
    }
    return 0;
}

static int lit_json(jsc *c, proto_buf *b, json_t *v, const char *ptr)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) return jsc_fail(c, ptr, "out of memory");
    int rc = proto_gbnf_literal(b, s, strlen(s));
    free(s);
    return rc ? jsc_fail(c, ptr, "out of memory") : 0;
}

static int conv(jsc *c, json_t *s, const char *ptr, int depth, char name[64]);
/* ---------------------------------------------------------------- schema nodes */

/* Keywords by what the converter does with them (README's structured-output table says the
 * same for clients). Annotations are ignored: they say nothing about which documents are valid
 * ("format" is not one: it is read on string nodes). */
/* clang-format off */
static const char *const annotations[] = {
    "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "$defs",
    "definitions", "deprecated", "readOnly", "writeOnly", "strict", "$anchor", "discriminator",
    "contentEncoding", "contentMediaType", NULL};
/* Enforced by the grammar (some only for some values: see their node converters). */
static const char *const supported[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems",
    "maxItems", "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems",
    "nullable", NULL};
/* Constraints a grammar of this converter cannot say: refused under strict, else ignored. */
static const char *const unenforceable[] = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "minProperties",
    "maxProperties", "contains", "minContains", "maxContains", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems", "prefixItems",
    "additionalItems", NULL};
/* clang-format on */
/* Of the supported ones, those whose unenforceable values a non-strict schema may carry beside
 * "enum", "const", "anyOf", "allOf" or "$ref" (ignored there, as elsewhere). */
static const char *const sometimes[] = {"format", "multipleOf", "uniqueItems", NULL};

static int in_list(const char *k, const char *const *l)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(k, l[i])) return 1;
    return 0;
}

/* A keyword that may stand beside "enum", "const", "anyOf", "allOf" or "$ref" without changing
 * what they accept: an annotation, "nullable" (handled before them), or under a non-strict
 * schema one the grammar leaves out anyway. */
static int ignorable(const jsc *c, const char *key)
{
    return in_list(key, annotations) || !strcmp(key, "nullable") ||
           (!c->strict && (in_list(key, unenforceable) || in_list(key, sometimes)));
}

int jsc_unenforceable(jsc *c, const char *ptr, const char *key, const char *value)
{
    if (!c->strict) return 0;
    return jsc_fail(
        c, ptr,
        "the JSON Schema keyword '%.60s'%s%.60s%s is not enforceable by the output grammar: "
        "refused under strict true (without strict the schema is accepted, '%.60s' unchecked)",
        key, value ? " (" : "", value ? value : "", value ? ")" : "", key);
}

static int get_count(jsc *c, json_t *s, const char *key, const char *ptr, long *out)
{
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return jsc_fail(c, ptr, "'%s' must be a non-negative integer", key);
    long long x = json_integer_value(v);
    *out = x > 1000000000 ? 1000000000 : (long)x;
    return 1;
}

static void sub_ptr(char *dst, size_t n, const char *ptr, const char *a, const char *b)
{
    snprintf(dst, n, "%s/%s%s%s", ptr, a, b ? "/" : "", b ? b : "");
}

static int string_rule(jsc *c, json_t *s, const char *ptr, proto_buf *b)
{
    json_t *pat = json_object_get(s, "pattern");
    long mn = 0, mx = -1;
    if (get_count(c, s, "minLength", ptr, &mn) < 0 || get_count(c, s, "maxLength", ptr, &mx) < 0) return -1;
    json_t *fmt = json_object_get(s, "format");
    if (fmt) { /* enforced alone; beside a pattern or a length, an annotation */
        if (!json_is_string(fmt)) return jsc_fail(c, ptr, "'format' must be a string");
        if (!pat && !json_object_get(s, "minLength") && !json_object_get(s, "maxLength")) {
            int k = jsc_format(c, json_string_value(fmt), b, ptr);
            if (k <= 0) return k;
        }
        if (jsc_unenforceable(c, ptr, "format", json_string_value(fmt))) return -1;
    }
    if (pat) {
        if (!json_is_string(pat)) return jsc_fail(c, ptr, "'pattern' must be a string");
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return jsc_fail(c, ptr,
                            "'pattern' together with 'minLength'/'maxLength' is not supported");
        return jsc_pattern(c, b, json_string_value(pat), json_string_length(pat), ptr);
    }
    if (mx >= 0 && mx < mn) return jsc_fail(c, ptr, "'maxLength' is below 'minLength'");
    if (mn > JSCHEMA_MAX_REPEAT)
        return jsc_fail(c, ptr, "'minLength' above %d is not supported", JSCHEMA_MAX_REPEAT);
    if (mx > JSCHEMA_MAX_REPEAT) mx = JSCHEMA_MAX_REPEAT; /* fewer characters still validate */
    int rc;
    if (mx < 0) rc = mn ? proto_buf_printf(b, "\"\\\"\" json-char{%ld,} \"\\\"\"", mn) : proto_buf_str(b, "json-string");
    else rc = proto_buf_printf(b, "\"\\\"\" json-char{%ld,%ld} \"\\\"\"", mn, mx);
    return rc ? jsc_fail(c, ptr, "out of memory") : 0;
}

static int array_rule(jsc *c, json_t *s, const char *ptr, int depth, proto_buf *b)
{
    long mn = 0, mx = -1;
    if (get_count(c, s, "minItems", ptr, &mn) < 0 || get_count(c, s, "maxItems", ptr, &mx) < 0) return -1;
    if (mx >= 0 && mx < mn) return jsc_fail(c, ptr, "'maxItems' is below 'minItems'");
    if (mn > JSCHEMA_MAX_REPEAT)
        return jsc_fail(c, ptr, "'minItems' above %d is not supported", JSCHEMA_MAX_REPEAT);
    if (mx > JSCHEMA_MAX_REPEAT) mx = JSCHEMA_MAX_REPEAT;
    json_t *uniq = json_object_get(s, "uniqueItems");
    if (uniq && !json_is_boolean(uniq)) return jsc_fail(c, ptr, "'uniqueItems' must be a boolean");
    if (json_is_true(uniq) && mx != 0 && mx != 1 && jsc_unenforceable(c, ptr, "uniqueItems", NULL))
        return -1; /* at most one item: unique already */
    char item[64] = "json-value", p2[512];
    json_t *it = json_object_get(s, "items");
    if (it) {
        if (json_is_array(it))
            return jsc_fail(c, ptr, "'items' as an array (tuple form) is not supported");
        sub_ptr(p2, sizeof p2, ptr, "items", NULL);
        if (conv(c, it, p2, depth + 1, item)) return -1;
    }
    int rc;
    if (mx == 0) rc = proto_buf_str(b, "\"[\" ws \"]\"");
    else if (mn == 0 && mx < 0) rc = proto_buf_printf(b, "\"[\" ws ( %s ws ( \",\" ws %s ws )* )? \"]\"", item, item);
    else if (mn == 0) rc = proto_buf_printf(b, "\"[\" ws ( %s ws ( \",\" ws %s ws ){0,%ld} )? \"]\"", item, item, mx - 1);
    else if (mx < 0) rc = proto_buf_printf(b, "\"[\" ws %s ws ( \",\" ws %s ws ){%ld,} \"]\"", item, item, mn - 1);
    else rc = proto_buf_printf(b, "\"[\" ws %s ws ( \",\" ws %s ws ){%ld,%ld} \"]\"", item, item, mn - 1, mx - 1);
    return rc ? jsc_fail(c, ptr, "out of memory") : 0;
}

/* Members in the order of "properties": the rule for members i.. is R(i, comma) where comma
 * says whether one was emitted before (so that a "," comes first); a required member is always
 * there, an optional one may be skipped. */
static int object_rule(jsc *c, json_t *s, const char *ptr, int depth, proto_buf *b)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    char p2[512];
    if (props && !json_is_object(props)) return jsc_fail(c, ptr, "'properties' must be an object");
    if (req && !json_is_array(req)) return jsc_fail(c, ptr, "'required' must be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return jsc_fail(c, ptr, "'additionalProperties' must be a boolean or a schema");
    size_t n = props ? json_object_size(props) : 0;
    /* the required names as a set (hashed: a client's list of 680,000 names against 1,000
     * properties took 17 s compared pairwise); those that are not properties become members with
     * any value, after the others. A name listed twice is refused, as the specification's
     * meta-schema (uniqueItems) and Ajv refuse it. */
    size_t n_req = req ? json_array_size(req) : 0, extra = 0;
    json_t *reqs = json_object();
    if (!reqs) return jsc_fail(c, ptr, "out of memory");
    for (size_t i = 0; i < n_req; i++) {
        json_t *nm = json_array_get(req, i);
        if (!json_is_string(nm))
            return json_decref(reqs), jsc_fail(c, ptr, "'required' must list strings");
        const char *s = json_string_value(nm);
        if (json_object_get(reqs, s))
            return json_decref(reqs), jsc_fail(c, ptr, "'required' lists '%.60s' twice", s);
        if (json_object_set_new(reqs, s, json_true()))
            return json_decref(reqs), jsc_fail(c, ptr, "out of memory");
        if (!props || !json_object_get(props, s)) extra++;
        if (n + extra > 1000)
            return json_decref(reqs), jsc_fail(c, ptr, "more than 1000 properties");
    }
    if (n == 0 && extra == 0) {
        json_decref(reqs);
        if (addl && json_is_false(addl))
            return proto_buf_str(b, "\"{\" ws \"}\"") ? jsc_fail(c, ptr, "out of memory") : 0;
        if (addl && json_is_object(addl)) {
            char val[64];
            sub_ptr(p2, sizeof p2, ptr, "additionalProperties", NULL);
            if (conv(c, addl, p2, depth + 1, val)) return -1;
            return proto_buf_printf(b,
                                    "\"{\" ws ( json-string ws \":\" ws %s ws ( \",\" ws "
                                    "json-string ws \":\" ws %s ws )* )? \"}\"",
                                    val, val)
                       ? jsc_fail(c, ptr, "out of memory")
                       : 0;
        }
        return proto_buf_str(b, "json-object") ? jsc_fail(c, ptr, "out of memory") : 0;
    }
    size_t total = n + extra;
    if (total > 1000) return json_decref(reqs), jsc_fail(c, ptr, "more than 1000 properties");
    char (*kv)[64] = calloc(total, 64);
    uint8_t *required = calloc(total, 1);
    if (!kv || !required) {
        free(kv);
        free(required);
        json_decref(reqs);
        return jsc_fail(c, ptr, "out of memory");
    }
    int rc = 0;
    size_t i = 0;
    const char *key;
    json_t *sub;
    json_object_foreach(props, key, sub) {
        if (rc) break;
        char val[64];
        sub_ptr(p2, sizeof p2, ptr, "properties", key);
        if (conv(c, sub, p2, depth + 1, val)) {
            rc = -1;
            break;
        }
        required[i] = json_object_get(reqs, key) != NULL;
        proto_buf body = {0};
        json_t *ks = json_string(key);
        if (!ks || lit_json(c, &body, ks, ptr) || proto_buf_printf(&body, " ws \":\" ws %s ws", val)) rc = -1;
        json_decref(ks);
        new_name(c, kv[i]);
        if (!rc) rc = emit_rule(c, kv[i], &body);
        proto_buf_deinit(&body);
        i++;
    }
    for (size_t k = 0; k < n_req && !rc; k++) {
        const char *nm = json_string_value(json_array_get(req, k));
        if (props && json_object_get(props, nm)) continue;
        proto_buf body = {0};
        json_t *ks = json_string(nm);
        if (!ks || lit_json(c, &body, ks, ptr) || proto_buf_str(&body, " ws \":\" ws json-value ws")) rc = -1;
        json_decref(ks);
        new_name(c, kv[i]);
        required[i] = 1;
        if (!rc) rc = emit_rule(c, kv[i], &body);
        proto_buf_deinit(&body);
        i++;
    }
    /* R(i, comma) from the last member back */
    char (*rn)[2][64] = calloc(total + 1, sizeof *rn);
    if (!rn) rc = jsc_fail(c, ptr, "out of memory");
    for (long k = (long)total - 1; k >= 0 && !rc; k--) {
        for (int comma = 0; comma < 2 && !rc; comma++) {
            proto_buf body = {0};
            const char *rest = k + 1 < (long)total ? rn[k + 1][1] : NULL;
            const char *skip = k + 1 < (long)total ? rn[k + 1][comma] : NULL;
            rc = proto_buf_printf(&body, "%s%s%s%s", comma ? "\",\" ws " : "", kv[k], rest ? " " : "", rest ? rest : "");
            if (!rc && !required[k]) rc = proto_buf_printf(&body, " | %s", skip ? skip : "\"\"");
            new_name(c, rn[k][comma]);
            if (!rc) rc = emit_rule(c, rn[k][comma], &body);
            proto_buf_deinit(&body);
        }
    }
    if (!rc && proto_buf_printf(b, "\"{\" ws %s \"}\"", rn[0][0]))
        rc = jsc_fail(c, ptr, "out of memory");
    free(rn);
    free(kv);
    free(required);
    json_decref(reqs);
    return rc ? -1 : 0;
}

/* The JSON pointer ref ("#" or "#/a/b") inside the document; NULL, through jsc_fail at ptr
 * unless ptr is NULL, when it names nothing. */
static json_t *resolve(jsc *c, const char *ref, const char *ptr)
{
    if (ref[0] != '#') {
        if (ptr) jsc_fail(c, ptr, "'$ref' to another document (%.80s) is not supported", ref);
        return NULL;
    }
    json_t *v = c->root;
    const char *p = ref + 1;
    while (*p == '/' && v) {
        p++;
        char tok[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') tok[k++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') tok[k++] = '/', p += 2;
            else tok[k++] = *p++;
        }
        tok[k] = 0;
        if (json_is_object(v)) v = json_object_get(v, tok);
        else if (json_is_array(v)) v = json_array_get(v, (size_t)strtoul(tok, NULL, 10));
        else v = NULL;
    }
    if (*p || !v) {
        if (ptr) jsc_fail(c, ptr, "'$ref' %.80s does not resolve inside the schema", ref);
        return NULL;
    }
    return v;
}

/* 1 when the JSON value v is of the schema's type (a 'type' string or list; NULL: any type), 0
 * when not, -1 when type is malformed. An integer is a number without a fraction (1.0 too). */
static int of_type(json_t *type, json_t *v)
{
    if (!type) return 1;
    size_t n = json_is_array(type) ? json_array_size(type) : 1;
    if (!json_is_string(type) && (!json_is_array(type) || n == 0)) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
        if (!json_is_string(t)) return -1;
        const char *ts = json_string_value(t);
        double x = json_is_number(v) ? json_number_value(v) : 0;
        if ((!strcmp(ts, "string") && json_is_string(v)) ||
            (!strcmp(ts, "number") && json_is_number(v)) ||
            (!strcmp(ts, "integer") &&
             (json_is_integer(v) || (json_is_real(v) && floor(x) == x))) ||
            (!strcmp(ts, "boolean") && json_is_boolean(v)) ||
            (!strcmp(ts, "null") && json_is_null(v)) ||
            (!strcmp(ts, "object") && json_is_object(v)) ||
            (!strcmp(ts, "array") && json_is_array(v)))
            return 1;
    }
    return 0;
}

/* The JSON kinds of value a schema may accept, as bits (integer and number are one kind: 1 is
 * both); all of them where it cannot tell. For oneOf: members that never both match make
 * "anyOf" the same as "oneOf". */
enum { K_NULL = 1, K_BOOL = 2, K_OBJ = 4, K_ARR = 8, K_STR = 16, K_NUM = 32, K_ALL = 63 };

static int kind_of_value(json_t *v)
{
    return json_is_null(v)      ? K_NULL
           : json_is_boolean(v) ? K_BOOL
           : json_is_object(v)  ? K_OBJ
           : json_is_array(v)   ? K_ARR
           : json_is_string(v)  ? K_STR
                                : K_NUM;
}

static int kind_of_type(const char *t)
{
    static const char *const names[] = {"null",   "boolean", "object", "array",
                                        "string", "number",  "integer"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return i == 6 ? K_NUM : 1 << i;
    return K_ALL;
}

static int kinds(jsc *c, json_t *s, int *budget)
{
    if (json_is_false(s)) return 0;
    /* the budget: members that refer to each other would branch without end */
    if (!json_is_object(s) || --*budget < 0) return K_ALL;
    int k = K_ALL;
    json_t *t = json_object_get(s, "type"), *v;
    if (json_is_string(t)) k = kind_of_type(json_string_value(t));
    if (json_is_array(t)) {
        k = 0;
        for (size_t i = 0; i < json_array_size(t); i++)
            k |= json_is_string(v = json_array_get(t, i)) ? kind_of_type(json_string_value(v))
                                                          : K_ALL;
    }
    if ((v = json_object_get(s, "const"))) k &= kind_of_value(v);
    if (json_is_array(v = json_object_get(s, "enum"))) {
        int e = 0;
        for (size_t i = 0; i < json_array_size(v); i++) e |= kind_of_value(json_array_get(v, i));
        k &= e;
    }
    const char *const unions[] = {"anyOf", "oneOf"};
    for (int u = 0; u < 2; u++)
        if (json_is_array(v = json_object_get(s, unions[u]))) {
            int e = 0;
            for (size_t i = 0; i < json_array_size(v); i++)
                e |= kinds(c, json_array_get(v, i), budget);
            k &= e;
        }
    if (json_is_array(v = json_object_get(s, "allOf")))
        for (size_t i = 0; i < json_array_size(v); i++) k &= kinds(c, json_array_get(v, i), budget);
    if (json_is_string(v = json_object_get(s, "$ref")) && json_string_value(v)[0] == '#') {
        json_t *target = resolve(c, json_string_value(v), NULL);
        if (target) k &= kinds(c, target, budget);
    }
    if (json_is_true(json_object_get(s, "nullable"))) k |= K_NULL;
    return k;
}

/* s after up to 16 "$ref" hops (NULL when one does not resolve). */
static json_t *deref(jsc *c, json_t *s)
{
    for (int hops = 0; json_is_object(s) && hops < 16; hops++) {
        json_t *r = json_object_get(s, "$ref");
        if (!json_is_string(r)) return s;
        s = resolve(c, json_string_value(r), NULL);
    }
    return json_is_object(s) ? s : NULL;
}

/* The values a schema is limited to by its "const" (*one) or "enum" (*many); 0 when neither. */
static int values_of(jsc *c, json_t *s, json_t **one, json_t **many)
{
    s = deref(c, s);
    *one = s ? json_object_get(s, "const") : NULL;
    *many = s && !*one ? json_object_get(s, "enum") : NULL;
    if (*many && !json_is_array(*many)) *many = NULL;
    return *one || *many;
}

/* 1 when two value lists share no value. Numbers compare by value (1 and 1.0 are one value to
 * JSON Schema); an object or array value counts as shared (jansson's equality tells 1 from 1.0
 * inside them), as do lists too long to compare. */
static int values_disjoint(json_t *a1, json_t *am, json_t *b1, json_t *bm)
{
    size_t na = a1 ? 1 : json_array_size(am), nb = b1 ? 1 : json_array_size(bm);
    if (na * nb > 10000) return 0;
    for (size_t i = 0; i < na; i++)
        for (size_t k = 0; k < nb; k++) {
            json_t *x = a1 ? a1 : json_array_get(am, i), *y = b1 ? b1 : json_array_get(bm, k);
            if (json_is_object(x) || json_is_array(x) || json_is_object(y) || json_is_array(y))
                return 0;
            if (json_is_number(x) && json_is_number(y)
                    ? json_number_value(x) == json_number_value(y)
                    : json_equal(x, y))
                return 0;
        }
    return 1;
}

/* 1 when no document can match both members a and b: they accept different kinds of value,
 * their const/enum values differ, or both are objects that require one member (a
 * discriminator: Pydantic's tagged unions, OpenAPI's discriminator) with differing values. */
static int members_disjoint(jsc *c, json_t *a, json_t *b)
{
    int budget = 1000;
    int ka = kinds(c, a, &budget), kb = kinds(c, b, &budget);
    if (!(ka & kb)) return 1;
    json_t *a1, *am, *b1, *bm;
    if (values_of(c, a, &a1, &am) && values_of(c, b, &b1, &bm))
        return values_disjoint(a1, am, b1, bm);
    a = deref(c, a);
    b = deref(c, b);
    json_t *ra = a ? json_object_get(a, "required") : NULL,
           *rb = b ? json_object_get(b, "required") : NULL;
    json_t *pa = a ? json_object_get(a, "properties") : NULL,
           *pb = b ? json_object_get(b, "properties") : NULL;
    if (!json_is_array(ra) || !json_is_array(rb) || !json_is_object(pa) || !json_is_object(pb))
        return 0;
    /* objects only: "required" says nothing of a string, and a member whose "type" lists more
     * than "object" may write one (without a "type", properties make the grammar an object's) */
    json_t *ta = json_object_get(a, "type"), *tb = json_object_get(b, "type");
    if ((ta && !json_is_string(ta)) || (tb && !json_is_string(tb)) ||
        (ta && strcmp(json_string_value(ta), "object")) ||
        (tb && strcmp(json_string_value(tb), "object")))
        return 0;
    for (size_t i = 0; i < json_array_size(ra) && i < 64; i++) {
        const char *name = json_string_value(json_array_get(ra, i));
        int in_b = 0;
        for (size_t k = 0; name && k < json_array_size(rb) && !in_b; k++)
            in_b = json_is_string(json_array_get(rb, k)) &&
                   !strcmp(name, json_string_value(json_array_get(rb, k)));
        json_t *sa = name ? json_object_get(pa, name) : NULL,
               *sb = name ? json_object_get(pb, name) : NULL;
        if (in_b && sa && sb && values_of(c, sa, &a1, &am) && values_of(c, sb, &b1, &bm) &&
            values_disjoint(a1, am, b1, bm))
            return 1;
    }
    return 0;
}

static int one_of_disjoint(jsc *c, json_t *members)
{
    size_t n = json_array_size(members);
    if (n > 64) return 0; /* pairs to compare: bounded */
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++)
            if (!members_disjoint(c, json_array_get(members, i), json_array_get(members, k)))
                return 0;
    return 1;
}

/* OpenAPI 3.0's "nullable": true (Pydantic v1 and FastAPI write it for Optional fields): the
 * schema without it, or null — except beside "enum" or "const", whose values must list null
 * themselves (OpenAPI 3.0.3 says so, and Ajv refuses a null they do not list). */
static int conv_nullable(jsc *c, json_t *s, const char *ptr, int depth, char name[64])
{
    json_t *rest = json_copy(s);
    if (!rest || json_object_del(rest, "nullable")) {
        json_decref(rest);
        return jsc_fail(c, ptr, "out of memory");
    }
    int values = json_object_get(s, "enum") || json_object_get(s, "const");
    char inner[64];
    int rc = conv(c, rest, ptr, depth + 1, values ? name : inner);
    json_decref(rest);
    if (rc || values) return rc;
    new_name(c, name);
    proto_buf body = {0};
    rc = proto_buf_printf(&body, "%s | json-null", inner) ? jsc_fail(c, ptr, "out of memory")
                                                          : emit_rule(c, name, &body);
    proto_buf_deinit(&body);
    return rc;
}

static int conv(jsc *c, json_t *s, const char *ptr, int depth, char name[64])
{
    char p2[512];
    if (depth > JSCHEMA_MAX_DEPTH)
        return jsc_fail(c, ptr, "the schema is nested deeper than %d", JSCHEMA_MAX_DEPTH);
    if (c->n_rules > JSCHEMA_MAX_RULES)
        return jsc_fail(c, ptr, "the schema needs more than %d rules", JSCHEMA_MAX_RULES);
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        snprintf(name, 64, "json-value");
        return 0;
    }
    if (json_is_false(s)) return jsc_fail(c, ptr, "the schema false matches nothing");
    if (!json_is_object(s)) return jsc_fail(c, ptr, "a schema must be an object or a boolean");
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (in_list(key, unenforceable)) {
            if (jsc_unenforceable(c, ptr, key, NULL)) return -1;
        } else if (!in_list(key, annotations) && !in_list(key, supported)) {
            return jsc_fail(c, ptr, "the JSON Schema keyword '%.60s' is not supported", key);
        }
    }
    json_t *nullable = json_object_get(s, "nullable");
    if (nullable && !json_is_boolean(nullable))
        return jsc_fail(c, ptr, "'nullable' must be a boolean");
    if (json_is_true(nullable)) return conv_nullable(c, s, ptr, depth, name);
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return jsc_fail(c, ptr, "'$ref' must be a string");
        json_object_foreach(
            s, key,
            v) if (strcmp(key, "$ref") &&
                   !ignorable(c, key)) return jsc_fail(c, ptr,
                                                       "'%.60s' beside '$ref' is not supported",
                                                       key);
        const char *r = json_string_value(ref);
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].ref, r)) {
                memcpy(name, c->refs[i].name, 64);
                return 0;
            }
        json_t *target = resolve(c, r, ptr);
        if (!target) return -1;
        if (c->n_refs == c->cap_refs) {
            int cap = c->cap_refs ? 2 * c->cap_refs : 8;
            jref *nr = realloc(c->refs, sizeof *nr * (size_t)cap);
            if (!nr) return jsc_fail(c, ptr, "out of memory");
            c->refs = nr;
            c->cap_refs = cap;
        }
        jref *e = &c->refs[c->n_refs];
        if (!(e->ref = strdup(r))) return jsc_fail(c, ptr, "out of memory");
        new_name(c, e->name);
        c->n_refs++;
        memcpy(name, e->name, 64);
        char inner[64];
        if (conv(c, target, r + 1, depth + 1, inner)) return -1;
        proto_buf body = {0};
        int rc = proto_buf_str(&body, inner) ? jsc_fail(c, ptr, "out of memory")
                                             : emit_rule(c, name, &body);
        proto_buf_deinit(&body);
        return rc;
    }
    new_name(c, name);
    proto_buf b = {0};
    int rc = 0;
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    json_t *any = json_object_get(s, "anyOf"), *all = json_object_get(s, "allOf");
    const char *any_key = "anyOf";
    if (!any && (any = json_object_get(s, "oneOf"))) any_key = "oneOf";
    if (cst || en) {
        /* the values themselves; beside them only a 'type' (values of another type left out):
         * any other keyword would narrow them, and its grammar would be ignored */
        json_object_foreach(s, key, v) if (strcmp(key, "const") && strcmp(key, "enum") &&
                                           strcmp(key, "type") &&
                                           !ignorable(c, key)) return proto_buf_deinit(&b),
            jsc_fail(c, ptr, "'%.60s' beside '%s' is not supported", key, cst ? "const" : "enum");
        if (cst && en)
            return proto_buf_deinit(&b), jsc_fail(c, ptr, "'const' beside 'enum' is not supported");
        if (en && (!json_is_array(en) || json_array_size(en) == 0))
            return proto_buf_deinit(&b), jsc_fail(c, ptr, "'enum' must be a non-empty array");
        size_t nv = cst ? 1 : json_array_size(en), kept = 0;
        for (size_t i = 0; i < nv && !rc; i++) {
            json_t *val = cst ? cst : json_array_get(en, i);
            int ok = of_type(json_object_get(s, "type"), val);
            if (ok < 0)
                return proto_buf_deinit(&b),
                       jsc_fail(c, ptr, "'type' must be a string or an array of strings");
            if (!ok) continue;
            if (kept++ && proto_buf_str(&b, " | ")) rc = jsc_fail(c, ptr, "out of memory");
            if (!rc) rc = lit_json(c, &b, val, ptr);
        }
        if (!rc && !kept)
            return proto_buf_deinit(&b),
                   jsc_fail(c, ptr, "no value of '%s' is of its 'type': the schema matches nothing",
                            cst ? "const" : "enum");
    } else if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) {
            rc = jsc_fail(c, ptr, "'%s' must be a non-empty array", any_key);
        } else if (any_key[0] == 'o' && !one_of_disjoint(c, any) &&
                   jsc_unenforceable(c, ptr, "oneOf", "members that may overlap")) {
            rc = -1; /* members that may overlap: "exactly one" is not a grammar's to say */
        } else {
            json_object_foreach(s, key, v) if (strcmp(key, any_key) &&
                                               !ignorable(c, key)) return proto_buf_deinit(&b),
                jsc_fail(c, ptr, "'%.60s' beside '%s' is not supported", key, any_key);
            for (size_t i = 0; i < json_array_size(any) && !rc; i++) {
                char sub[64], idx[24];
                snprintf(idx, sizeof idx, "%zu", i);
                sub_ptr(p2, sizeof p2, ptr, any_key, idx);
                rc = conv(c, json_array_get(any, i), p2, depth + 1, sub);
                if (!rc && proto_buf_printf(&b, "%s%s", i ? " | " : "", sub))
                    rc = jsc_fail(c, ptr, "out of memory");
            }
        }
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) {
            rc = jsc_fail(c, ptr, "'allOf' with other than one member is not supported");
        } else {
            /* keywords beside it would be a second member (a base schema plus its own members):
             * a grammar of the one member alone would accept documents they refuse */
            json_object_foreach(s, key, v) if (strcmp(key, "allOf") &&
                                               !ignorable(c, key)) return proto_buf_deinit(&b),
                jsc_fail(c, ptr, "'%.60s' beside 'allOf' is not supported", key);
            char sub[64];
            sub_ptr(p2, sizeof p2, ptr, "allOf", "0");
            rc = conv(c, json_array_get(all, 0), p2, depth + 1, sub);
            if (!rc && proto_buf_str(&b, sub)) rc = jsc_fail(c, ptr, "out of memory");
        }
    } else {
        json_t *type = json_object_get(s, "type");
        const char *types[8];
        size_t nt = 0;
        if (json_is_string(type)) {
            types[nt++] = json_string_value(type);
        } else if (json_is_array(type) && json_array_size(type) > 0 && json_array_size(type) <= 7) {
            for (size_t i = 0; i < json_array_size(type); i++) {
                json_t *t = json_array_get(type, i);
                if (!json_is_string(t))
                    return proto_buf_deinit(&b), jsc_fail(c, ptr, "'type' must list strings");
                types[nt++] = json_string_value(t);
            }
        } else if (type) {
            rc = jsc_fail(c, ptr, "'type' must be a string or an array of strings");
        } else if (json_object_get(s, "properties") || json_object_get(s, "required") || json_object_get(s, "additionalProperties")) {
            types[nt++] = "object";
        } else if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
                   json_object_get(s, "maxItems") || json_object_get(s, "uniqueItems")) {
            types[nt++] = "array";
        } else if (json_object_get(s, "pattern") || json_object_get(s, "minLength") ||
                   json_object_get(s, "maxLength") || json_object_get(s, "format")) {
            types[nt++] = "string";
        } else if (json_object_get(s, "minimum") || json_object_get(s, "exclusiveMinimum") ||
                   json_object_get(s, "maximum") || json_object_get(s, "exclusiveMaximum") ||
                   json_object_get(s, "multipleOf")) {
            types[nt++] = "number"; /* as above: the type the bound constrains, not every value */
        } else {
            types[nt++] = "any";
        }
        for (size_t i = 0; i < nt && !rc; i++) {
            const char *t = types[i];
            if (i && proto_buf_str(&b, " | ")) rc = jsc_fail(c, ptr, "out of memory");
            if (rc) break;
            if (!strcmp(t, "string")) rc = string_rule(c, s, ptr, &b);
            else if (!strcmp(t, "integer"))
                rc = jsc_number(c, s, ptr, 1, &b);
            else if (!strcmp(t, "number"))
                rc = jsc_number(c, s, ptr, 0, &b);
            else if (!strcmp(t, "boolean")) rc = proto_buf_str(&b, "json-bool");
            else if (!strcmp(t, "null")) rc = proto_buf_str(&b, "json-null");
            else if (!strcmp(t, "object")) rc = object_rule(c, s, ptr, depth, &b);
            else if (!strcmp(t, "array")) rc = array_rule(c, s, ptr, depth, &b);
            else if (!strcmp(t, "any")) rc = proto_buf_str(&b, "json-value");
            else
                rc = jsc_fail(c, ptr, "unknown type '%.40s'", t);
            if (rc && !c->failed) rc = jsc_fail(c, ptr, "out of memory");
        }
    }
    if (!rc) rc = emit_rule(c, name, &b);
    proto_buf_deinit(&b);
    return rc ? -1 : 0;
}

int proto_jschema_rules_mode(const char *schema, size_t len, enum proto_jschema_mode mode,
                             const char *rule_name, const char *prefix, proto_buf *out, char *msg,
                             size_t msgn)
{
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) {
        snprintf(msg, msgn, "the schema is not JSON: %s", je.text);
        return -1;
    }
    jsc c = {root, out, prefix, 0, NULL, 0, 0, msg, msgn, 0, mode == PROTO_JSCHEMA_STRICT};
    char name[64];
    int rc = conv(&c, root, "", 0, name);
    if (!rc) {
        if (proto_buf_printf(out, "%s ::= %s\n", rule_name, name)) {
            snprintf(msg, msgn, "out of memory");
            rc = -1;
        }
    }
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    json_decref(root);
    return rc ? -1 : 0;
}

int proto_jschema_rules(const char *schema, size_t len, const char *rule_name, const char *prefix,
                        proto_buf *out, char *msg, size_t msgn)
{
    return proto_jschema_rules_mode(schema, len, PROTO_JSCHEMA_LAX, rule_name, prefix, out, msg,
                                    msgn);
}

int proto_jschema_grammar_mode(const char *schema, size_t len, enum proto_jschema_mode mode,
                               proto_buf *out, char *msg, size_t msgn)
{
    if (proto_jschema_common(out)) {
        snprintf(msg, msgn, "out of memory");
        return -1;
    }
    return proto_jschema_rules_mode(schema, len, mode, "root", "s", out, msg, msgn);
}

int proto_jschema_grammar(const char *schema, size_t len, proto_buf *out, char *msg, size_t msgn)
{
    return proto_jschema_grammar_mode(schema, len, PROTO_JSCHEMA_LAX, out, msg, msgn);
}
