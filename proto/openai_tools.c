/* proto/openai_tools.c — see openai_tools.h. */
#include "proto/openai_tools.h"
#include "proto/json_schema.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(enum proto_err *e, enum proto_err code, char *msg, size_t msgn, char *param, size_t paramn,
               const char *p, const char *m)
{
    *e = code;
    snprintf(msg, msgn, "%s", m);
    snprintf(param, paramn, "%s", p);
    return -1;
}

void proto_tools_free(proto_tools *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->names[i]);
        free(t->params[i]);
    }
    free(t->names);
    free(t->params);
    free(t->strict);
    free(t);
}

int proto_tools_from_json(json_t *o, proto_tools **out, enum proto_err *e, char *msg, size_t msgn,
                          char *param, size_t paramn)
{
    *out = NULL;
    json_t *tools = json_object_get(o, "tools"), *tc = json_object_get(o, "tool_choice");
    json_t *par = json_object_get(o, "parallel_tool_calls");
    char m[256];
    if (par && !json_is_null(par) && !json_is_boolean(par))
        return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    int choice = PROTO_TOOL_CHOICE_AUTO;
    const char *named = NULL;
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "none")) choice = PROTO_TOOL_CHOICE_NONE;
            else if (!strcmp(s, "auto")) choice = PROTO_TOOL_CHOICE_AUTO;
            else if (!strcmp(s, "required")) choice = PROTO_TOOL_CHOICE_REQUIRED;
            else {
                snprintf(m, sizeof m, "'tool_choice' must be none, auto, required or a function, not '%.40s'", s);
                return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tool_choice", m);
            }
        } else if (json_is_object(tc)) {
            json_t *fn = json_object_get(tc, "function"), *nm = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
            if (!json_is_string(nm))
                return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tool_choice",
                           "'tool_choice' as an object needs {\"type\": \"function\", \"function\": {\"name\": ...}}");
            choice = PROTO_TOOL_CHOICE_NAMED;
            named = json_string_value(nm);
        } else {
            return bad(e, PROTO_ERR_INVALID_TYPE, msg, msgn, param, paramn, "tool_choice", "'tool_choice' must be a string or an object");
        }
    }
    if (!tools || json_is_null(tools)) {
        if (choice == PROTO_TOOL_CHOICE_REQUIRED || choice == PROTO_TOOL_CHOICE_NAMED)
            return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tool_choice", "'tool_choice' requires 'tools'");
        return 0;
    }
    if (!json_is_array(tools)) return 0; /* proto/openai_req.c reports the type */
    size_t n = json_array_size(tools);
    if (n > PROTO_MAX_TOOLS) {
        snprintf(m, sizeof m, "at most %d tools per request", PROTO_MAX_TOOLS);
        return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tools", m);
    }
    if (n == 0) return 0;
    proto_tools *t = calloc(1, sizeof *t);
    if (!t || !(t->names = calloc(n, sizeof *t->names)) ||
        !(t->params = calloc(n, sizeof *t->params)) || !(t->strict = calloc(n, 1))) {
        proto_tools_free(t);
        return bad(e, PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
    }
    t->choice = choice;
    t->parallel = !par || json_is_null(par) || json_is_true(par);
    t->named = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *tool = json_array_get(tools, i), *ty = json_is_object(tool) ? json_object_get(tool, "type") : NULL;
        json_t *fn = json_is_object(tool) ? json_object_get(tool, "function") : NULL;
        json_t *nm = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        json_t *ps = json_is_object(fn) ? json_object_get(fn, "parameters") : NULL;
        json_t *st = json_is_object(fn) ? json_object_get(fn, "strict") : NULL;
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") ||
            !json_is_string(nm) || json_string_length(nm) == 0 || json_string_length(nm) > 64 ||
            (ps && !json_is_object(ps) && !json_is_null(ps)) ||
            (st && !json_is_boolean(st) && !json_is_null(st))) {
            snprintf(
                m, sizeof m,
                "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": a string of "
                "1-64 bytes, \"parameters\": a schema object, \"strict\": a boolean}}",
                i);
            proto_tools_free(t);
            return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tools", m);
        }
        t->names[i] = strdup(json_string_value(nm));
        t->strict[i] = json_is_true(st);
        if (ps && json_is_object(ps)) t->params[i] = json_dumps(ps, JSON_COMPACT);
        t->n = (int)i + 1;
        if (!t->names[i] || (ps && json_is_object(ps) && !t->params[i])) {
            proto_tools_free(t);
            return bad(e, PROTO_ERR_INTERNAL, msg, msgn, param, paramn, "", "out of memory");
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(t->names[k], t->names[i])) {
                snprintf(m, sizeof m, "two tools are named '%.64s'", t->names[i]);
                proto_tools_free(t);
                return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tools", m);
            }
        if (named && !strcmp(named, t->names[i])) t->named = (int)i;
    }
    if (choice == PROTO_TOOL_CHOICE_NAMED && t->named < 0) {
        snprintf(m, sizeof m, "'tool_choice' names '%.64s', which is not among the tools", named);
        proto_tools_free(t);
        return bad(e, PROTO_ERR_INVALID_VALUE, msg, msgn, param, paramn, "tool_choice", m);
    }
    *out = t;
    return 0;
}

enum proto_tool_family proto_tool_family_of(const char *src)
{
    if (!src) return PROTO_TOOLS_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return PROTO_TOOLS_MISTRAL;
    if (strstr(src, "<tool_call>")) return PROTO_TOOLS_HERMES;
    if (strstr(src, "\"parameters\"") && strstr(src, "<|eot_id|>")) return PROTO_TOOLS_LLAMA3;
    return PROTO_TOOLS_HERMES;
}

const char *proto_tool_family_name(enum proto_tool_family f)
{
    return f == PROTO_TOOLS_LLAMA3 ? "llama3_json" : f == PROTO_TOOLS_MISTRAL ? "mistral" : "hermes";
}

int proto_tools_constrained(const proto_tools *t)
{
    return t && (t->choice == PROTO_TOOL_CHOICE_REQUIRED || t->choice == PROTO_TOOL_CHOICE_NAMED);
}

int proto_tools_grammar(const proto_tools *t, enum proto_tool_family f, proto_buf *out, char *msg,
                        size_t msgn)
{
    if (proto_jschema_common(out)) goto oom;
    const char *args_key = f == PROTO_TOOLS_LLAMA3 ? "parameters" : "arguments";
    /* call ::= one alternative per allowed function */
    proto_buf call;
    proto_buf_init(&call);
    int first = 1;
    for (int i = 0; i < t->n; i++) {
        if (t->choice == PROTO_TOOL_CHOICE_NAMED && i != t->named) continue;
        char rule[32], prefix[32], m[400];
        snprintf(rule, sizeof rule, "t%d-args", i);
        snprintf(prefix, sizeof prefix, "t%d-", i);
        if (t->params[i]) {
            enum proto_jschema_mode mode = t->strict[i] ? PROTO_JSCHEMA_STRICT : PROTO_JSCHEMA_LAX;
            if (proto_jschema_rules_mode(t->params[i], strlen(t->params[i]), mode, rule, prefix,
                                         out, m, sizeof m)) {
                snprintf(msg, msgn, "tools: the parameters of '%.64s': %s", t->names[i], m);
                proto_buf_deinit(&call);
                return -1;
            }
        } else if (proto_buf_printf(out, "%s ::= \"{}\"\n", rule)) { /* no parameters: no arguments */
            goto oom_call;
        }
        /* {"name": "f", "arguments": ARGS} — the name as a JSON string inside a GBNF literal */
        /* (sized by the name: a 64-byte name of control characters is 384 bytes as JSON) */
        proto_buf head = {0};
        json_t *js = json_string(t->names[i]);
        char *jn = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        int bad = !jn || proto_buf_printf(&head, "{\"name\": %s, \"%s\": ", jn, args_key);
        free(jn);
        bad = bad || proto_buf_str(&call, first ? "" : " | ") || proto_buf_str(&call, "( ") ||
              proto_gbnf_literal(&call, head.p, head.len) ||
              proto_buf_printf(&call, " %s \"}\" )", rule);
        proto_buf_deinit(&head);
        if (bad) goto oom_call;
        first = 0;
    }
    if (proto_buf_str(out, "call ::= ") || proto_buf_add(out, call.p, call.len) || proto_buf_putc(out, '\n')) goto oom_call;
    proto_buf_deinit(&call);
    /* several calls when parallel_tool_calls allows them, else exactly one */
    const char *more = t->parallel ? "*" : "{0}";
    int rc;
    switch (f) {
    case PROTO_TOOLS_LLAMA3: rc = proto_buf_printf(out, "root ::= call ( \"; \" call )%s\n", more); break;
    case PROTO_TOOLS_MISTRAL: rc = proto_buf_printf(out, "root ::= \"[\" call ( \", \" call )%s \"]\"\n", more); break;
    default:
        rc = proto_buf_printf(out, "block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\nroot ::= block ( \"\\n\" block )%s\n", more);
        break;
    }
    if (rc) goto oom;
    return 0;
oom_call:
    proto_buf_deinit(&call);
oom:
    snprintf(msg, msgn, "out of memory");
    return -1;
}

void proto_tool_calls_free(proto_tool_call *calls, int n)
{
    for (int i = 0; calls && i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

/* One call object {"name": ..., "arguments"|"parameters": {...}} into calls[*n]. 1 taken, 0 not
 * a call of t's functions, -1 out of memory. */
static int take_call(const proto_tools *t, json_t *o, proto_tool_call *calls, int *n)
{
    if (!json_is_object(o) || *n >= PROTO_MAX_TOOL_CALLS) return 0;
    json_t *nm = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_string(nm)) return 0;
    int known = 0;
    for (int i = 0; i < t->n; i++) known |= !strcmp(t->names[i], json_string_value(nm));
    if (!known) return 0;
    if (json_is_string(args)) { /* some models write the arguments as a JSON string */
        json_t *parsed = json_loads(json_string_value(args), 0, NULL);
        int ok = json_is_object(parsed);
        char *s = ok ? json_dumps(parsed, JSON_COMPACT) : NULL;
        json_decref(parsed);
        if (!ok) return 0;
        calls[*n].arguments = s;
    } else if (!args || json_is_object(args)) {
        calls[*n].arguments = args ? json_dumps(args, JSON_COMPACT) : strdup("{}");
    } else {
        return 0;
    }
    calls[*n].name = strdup(json_string_value(nm));
    calls[*n].id[0] = 0;
    (*n)++;
    return calls[*n - 1].name && calls[*n - 1].arguments ? 1 : -1;
}

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

int proto_tools_parse(const proto_tools *t, enum proto_tool_family f, const char *text, size_t len,
                      proto_tool_call **calls_out, int *n_out, size_t *content_len)
{
    *calls_out = NULL;
    *n_out = 0;
    *content_len = 0;
    if (!t || !t->n) return 0;
    proto_tool_call *calls = calloc(PROTO_MAX_TOOL_CALLS, sizeof *calls);
    if (!calls) return -1;
    int n = 0, rc = 0, ok = 1;
    const char *p = text, *e = text + len;
    if (f == PROTO_TOOLS_HERMES) {
        const char *open = "<tool_call>", *close = "</tool_call>";
        const char *first = memmem(p, len, open, strlen(open));
        if (!first) ok = 0;
        else *content_len = (size_t)(first - text);
        for (const char *q = first; ok && q && q < e;) {
            const char *body = q + strlen(open);
            const char *end = memmem(body, (size_t)(e - body), close, strlen(close));
            if (!end) {
                ok = 0;
                break;
            }
            json_t *o = json_loadb(body, (size_t)(end - body), 0, NULL);
            int k = take_call(t, o, calls, &n);
            json_decref(o);
            if (k <= 0) {
                ok = 0;
                rc = k;
                break;
            }
            q = skip_ws(end + strlen(close), e);
            if (q < e && (size_t)(e - q) >= strlen(open) && !memcmp(q, open, strlen(open))) continue;
            if (q != e) ok = 0; /* text after the calls: not a clean call list */
            break;
        }
    } else {
        p = skip_ws(p, e);
        const char *marker = f == PROTO_TOOLS_MISTRAL ? "[TOOL_CALLS]" : "<|python_tag|>";
        if ((size_t)(e - p) >= strlen(marker) && !memcmp(p, marker, strlen(marker))) p = skip_ws(p + strlen(marker), e);
        if (f == PROTO_TOOLS_MISTRAL) {
            json_t *a = json_loadb(p, (size_t)(e - p), 0, NULL);
            if (!json_is_array(a) || json_array_size(a) == 0) ok = 0;
            for (size_t i = 0; ok && i < json_array_size(a); i++) {
                int k = take_call(t, json_array_get(a, i), calls, &n);
                if (k <= 0) ok = 0, rc = k;
            }
            json_decref(a);
        } else {
            /* objects separated by ";" */
            while (ok && p < e) {
                json_error_t je;
                json_t *o = json_loadb(p, (size_t)(e - p), JSON_DISABLE_EOF_CHECK, &je);
                if (!o) {
                    ok = 0;
                    break;
                }
                int k = take_call(t, o, calls, &n);
                json_decref(o);
                if (k <= 0) {
                    ok = 0;
                    rc = k;
                    break;
                }
                p = skip_ws(p + je.position, e);
                if (p < e && *p == ';') p = skip_ws(p + 1, e);
                else if (p < e) ok = 0;
            }
            if (n == 0) ok = 0;
        }
    }
    if (!ok || n == 0) {
        proto_tool_calls_free(calls, n);
        *content_len = 0;
        return rc < 0 ? -1 : 0;
    }
    *calls_out = calls;
    *n_out = n;
    return 1;
}

int proto_tools_may_start(enum proto_tool_family f, const char *text, size_t len)
{
    const char *p = skip_ws(text, text + len), *e = text + len;
    const char *open = f == PROTO_TOOLS_MISTRAL ? "[" : f == PROTO_TOOLS_LLAMA3 ? "{" : "<tool_call>";
    size_t n = (size_t)(e - p), k = strlen(open);
    if (f == PROTO_TOOLS_MISTRAL && n >= 12 && !memcmp(p, "[TOOL_CALLS]", 12)) return 1;
    if (f == PROTO_TOOLS_LLAMA3 && n <= 14 && !memcmp(p, "<|python_tag|>", n)) return 1;
    if (f == PROTO_TOOLS_LLAMA3 && n >= 14 && !memcmp(p, "<|python_tag|>", 14)) return 1;
    return !memcmp(p, open, n < k ? n : k);
}

size_t proto_tools_content_len(const char *text, size_t len, size_t from)
{
    static const char open[] = "<tool_call>";
    const size_t k = sizeof open - 1;
    if (from > len) from = len;
    const char *m = memmem(text + from, len - from, open, k);
    if (m) return (size_t)(m - text);
    /* the longest tail that is a beginning of the marker is held */
    for (size_t t = k - 1 < len - from ? k - 1 : len - from; t > 0; t--)
        if (!memcmp(text + len - t, open, t)) return len - t;
    return len;
}
