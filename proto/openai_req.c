/* proto/openai_req.c — see openai_req.h. */
#include "proto/openai_req.h"
#include "proto/openai_msg.h"
#include "proto/openai_struct.h"
#include "proto/openai_tools.h"
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void proto_limits_default(proto_limits *l)
{
    l->vocab = 0;
    l->max_context = 0;
    l->max_n = 16;
    l->max_stop = 4;          /* OpenAI: "Up to 4 sequences" */
    l->max_stop_bytes = 256;
    l->max_logit_bias = 300;  /* OpenAI rejects more than 300 logit_bias entries */
    l->max_messages = 1024;
    l->max_depth = 32;        /* a chat body with tools needs ~8; 32 leaves room */
    l->max_user_bytes = 256;
    l->tool_family = PROTO_TOOLS_HERMES;
    l->developer_role = 0;
}

void proto_limits_template(proto_limits *l, const char *src)
{
    l->tool_family = proto_tool_family_of(src);
    /* "developer" anywhere: a template written for the role (none we ship is) handles it */
    l->developer_role = src && strstr(src, "developer") != NULL;
}

int proto_json_depth(const char *s, size_t n, int stop_at)
{
    int depth = 0, max = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        else if (c == '[' || c == '{') {
            if (++depth > max) max = depth;
            if (max > stop_at) return max;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return max;
}

/* The parse context: limits and where the first error goes. */
typedef struct pctx {
    const proto_limits *lim;
    enum proto_err err;
    char *msg;
    size_t msgn;
    char *param;
    size_t paramn;
    char fn_id[24]; /* the functions API's last call in the history (proto_msg_legacy) */
} pctx;

__attribute__((format(printf, 4, 5))) static int fail(pctx *c, enum proto_err e, const char *param,
                                                      const char *fmt, ...)
{
    if (c->err != PROTO_ERR_NONE) return -1; /* keep the first error */
    c->err = e;
    snprintf(c->param, c->paramn, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msgn, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Field getters: 0 absent (or null), 1 present and valid, -1 error recorded. */
static int get_number(pctx *c, json_t *o, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(c, PROTO_ERR_INVALID_TYPE, key, "'%s' must be a number, not %s", key, type_name(v));
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return fail(c, PROTO_ERR_INVALID_VALUE, key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = d;
    return 1;
}

static int get_int(pctx *c, json_t *o, const char *key, long long lo, long long hi, long long *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    /* Clients (Python's json) send 5.0 for 5 sometimes; accept reals with no fraction. */
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9.0e15) {
        x = (long long)json_real_value(v);
    } else {
        return fail(c, PROTO_ERR_INVALID_TYPE, key, "'%s' must be an integer, not %s", key, type_name(v));
    }
    if (x < lo || x > hi)
        return fail(c, PROTO_ERR_INVALID_VALUE, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    return 1;
}

static int get_bool(pctx *c, json_t *o, const char *key, int *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return fail(c, PROTO_ERR_INVALID_TYPE, key, "'%s' must be a boolean, not %s", key, type_name(v));
    *out = json_is_true(v);
    return 1;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* "sparse_prefill": true | false | an object: the method ("mode") and its parameters. Each
 * member is bounded here (budgets and token counts up to 16M); how they fit together (a stride
 * that divides the block, counts in whole blocks) is checked where the parameters are resolved
 * (sparse/sparse.h, at submission), which names the key the same way. */
static const char *const sparse_members[] = {
    "mode", "gamma", "tau", "min_budget", "max_budget", "dense_below", "xattention_threshold",
    "xattention_block_size", "xattention_stride", "num_retained_start_tokens_in_cache",
    "num_retained_recent_tokens_in_cache", "num_last_dense_tokens_in_prefill"};
static const char *const sparse_modes[] = {"flexprefill", "xattention", "trishape"};

static int parse_sparse(pctx *c, json_t *o, proto_req *r)
{
    r->sparse = r->sparse_mode = -1;
    r->sparse_gamma = r->sparse_tau = r->sparse_xattn_threshold = NAN;
    r->sparse_min_budget = r->sparse_max_budget = r->sparse_dense_below = LLONG_MIN;
    r->sparse_xattn_block = r->sparse_xattn_stride = LLONG_MIN;
    r->sparse_start = r->sparse_recent = r->sparse_last_dense = LLONG_MIN;
    json_t *v = json_object_get(o, "sparse_prefill");
    if (!v || json_is_null(v)) return 0;
    if (json_is_boolean(v)) {
        r->sparse = json_is_true(v);
        return 0;
    }
    if (!json_is_object(v))
        return fail(c, PROTO_ERR_INVALID_TYPE, "sparse_prefill", "'sparse_prefill' must be a boolean or an object, not %s", type_name(v));
    const char *key;
    json_t *m;
    json_object_foreach(v, key, m)
    {
        size_t i = 0, n = sizeof sparse_members / sizeof sparse_members[0];
        while (i < n && strcmp(key, sparse_members[i])) i++;
        if (i == n)
            return fail(c, PROTO_ERR_INVALID_VALUE, "sparse_prefill", "'sparse_prefill' has no member '%.40s' (mode, gamma, tau, min_budget, max_budget, dense_below, xattention_threshold, xattention_block_size, xattention_stride, num_retained_start_tokens_in_cache, num_retained_recent_tokens_in_cache, num_last_dense_tokens_in_prefill)", key);
    }
    r->sparse = 1;
    json_t *mv = json_object_get(v, "mode");
    if (mv && !json_is_null(mv)) {
        if (!json_is_string(mv))
            return fail(c, PROTO_ERR_INVALID_TYPE, "mode", "'mode' must be a string, not %s", type_name(mv));
        for (int i = 0; i < 3; i++)
            if (!strcmp(json_string_value(mv), sparse_modes[i])) r->sparse_mode = i;
        if (r->sparse_mode < 0)
            return fail(c, PROTO_ERR_INVALID_VALUE, "mode", "'mode' must be flexprefill, xattention or trishape");
    }
    double d;
    long long x;
    int k;
    if ((k = get_number(c, v, "gamma", 0, 1, &d)) < 0) return -1;
    if (k && d == 0) return fail(c, PROTO_ERR_INVALID_VALUE, "gamma", "'gamma' must be greater than 0");
    if (k) r->sparse_gamma = d;
    if ((k = get_number(c, v, "tau", 0, 1, &d)) < 0) return -1;
    if (k) r->sparse_tau = d;
    if ((k = get_int(c, v, "min_budget", 1, 1 << 24, &x)) < 0) return -1;
    if (k) r->sparse_min_budget = x;
    if ((k = get_int(c, v, "max_budget", 0, 1 << 24, &x)) < 0) return -1;
    if (k) r->sparse_max_budget = x;
    if ((k = get_int(c, v, "dense_below", -1, 1 << 24, &x)) < 0) return -1;
    if (k) r->sparse_dense_below = x;
    if ((k = get_number(c, v, "xattention_threshold", 0, 1, &d)) < 0) return -1;
    if (k && d == 0) return fail(c, PROTO_ERR_INVALID_VALUE, "xattention_threshold", "'xattention_threshold' must be greater than 0");
    if (k) r->sparse_xattn_threshold = d;
    if ((k = get_int(c, v, "xattention_block_size", 16, 128, &x)) < 0) return -1;
    if (k) r->sparse_xattn_block = x;
    if ((k = get_int(c, v, "xattention_stride", 1, 128, &x)) < 0) return -1;
    if (k) r->sparse_xattn_stride = x;
    if ((k = get_int(c, v, "num_retained_start_tokens_in_cache", 0, 1 << 24, &x)) < 0) return -1;
    if (k) r->sparse_start = x;
    if ((k = get_int(c, v, "num_retained_recent_tokens_in_cache", 0, 1 << 24, &x)) < 0) return -1;
    if (k) r->sparse_recent = x;
    if ((k = get_int(c, v, "num_last_dense_tokens_in_prefill", 0, 1 << 24, &x)) < 0) return -1;
    if (k) r->sparse_last_dense = x;
    return 0;
}

/* "sparse_decode": true | false | {"mode": "asynctls" | "off", "token_budget": N,
 * "block_budget": N, "stagger": bool} (AsyncTLS, sparse/tls.h; absent members take the server's
 * configuration, resolved with sparse_tls_resolve). Budgets bounded here as there. */
static int parse_decode_sparse(pctx *c, json_t *o, proto_req *r)
{
    r->decode_sparse = -1;
    r->decode_sparse_token_budget = r->decode_sparse_block_budget = 0;
    r->decode_sparse_stagger = 0;
    json_t *v = json_object_get(o, "sparse_decode");
    if (!v || json_is_null(v)) return 0;
    if (json_is_boolean(v)) {
        r->decode_sparse = json_is_true(v);
        return 0;
    }
    if (!json_is_object(v))
        return fail(c, PROTO_ERR_INVALID_TYPE, "sparse_decode", "'sparse_decode' must be a boolean or an object, not %s", type_name(v));
    const char *key;
    json_t *m;
    json_object_foreach(v, key, m)
    {
        if (strcmp(key, "mode") && strcmp(key, "token_budget") && strcmp(key, "block_budget") &&
            strcmp(key, "stagger"))
            return fail(c, PROTO_ERR_INVALID_VALUE, "sparse_decode", "'sparse_decode' has no member '%.40s' (mode, token_budget, block_budget, stagger)", key);
    }
    r->decode_sparse = 1;
    json_t *mv = json_object_get(v, "mode");
    if (mv && !json_is_null(mv)) {
        if (!json_is_string(mv))
            return fail(c, PROTO_ERR_INVALID_TYPE, "mode", "'mode' must be a string, not %s", type_name(mv));
        if (!strcmp(json_string_value(mv), "off")) r->decode_sparse = 0;
        else if (strcmp(json_string_value(mv), "asynctls"))
            return fail(c, PROTO_ERR_INVALID_VALUE, "mode", "'sparse_decode' 'mode' must be asynctls or off");
    }
    long long x;
    int k;
    if ((k = get_int(c, v, "token_budget", 1, 1 << 20, &x)) < 0) return -1;
    if (k) r->decode_sparse_token_budget = x;
    if ((k = get_int(c, v, "block_budget", 1, 1 << 16, &x)) < 0) return -1;
    if (k) r->decode_sparse_block_budget = x;
    json_t *sv = json_object_get(v, "stagger");
    if (sv && !json_is_null(sv)) {
        if (!json_is_boolean(sv))
            return fail(c, PROTO_ERR_INVALID_TYPE, "stagger", "'stagger' must be a boolean, not %s", type_name(sv));
        r->decode_sparse_stagger = json_is_true(sv) ? 2 : 1;
    }
    return 0;
}

static int parse_stop(pctx *c, json_t *o, proto_req *r)
{
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    size_t n = 1;
    if (json_is_array(v)) n = json_array_size(v);
    else if (!json_is_string(v))
        return fail(c, PROTO_ERR_INVALID_TYPE, "stop", "'stop' must be a string or an array of strings, not %s", type_name(v));
    if (n > (size_t)c->lim->max_stop)
        return fail(c, PROTO_ERR_INVALID_VALUE, "stop", "'stop' takes at most %d sequences, got %zu", c->lim->max_stop, n);
    if (n == 0) return 0;
    r->stop = calloc(n, sizeof *r->stop);
    if (!r->stop) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s))
            return fail(c, PROTO_ERR_INVALID_TYPE, "stop", "'stop' entries must be strings, not %s", type_name(s));
        size_t len = json_string_length(s);
        if (len == 0) return fail(c, PROTO_ERR_INVALID_VALUE, "stop", "'stop' entries must not be empty");
        if (len > (size_t)c->lim->max_stop_bytes)
            return fail(c, PROTO_ERR_INVALID_VALUE, "stop", "'stop' entries are limited to %d bytes", c->lim->max_stop_bytes);
        r->stop[i] = dup_n(json_string_value(s), len);
        if (!r->stop[i]) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
        r->n_stop = (int)i + 1;
    }
    return 1;
}

/* A token id from a JSON value (integer) or a logit_bias key (decimal string). */
static int token_id_ok(pctx *c, long long id, const char *param)
{
    if (id < 0 || id >= c->lim->vocab)
        return fail(c, PROTO_ERR_INVALID_VALUE, param, "token id %lld is out of range [0, %d)", id, c->lim->vocab);
    return 1;
}

static int parse_logit_bias(pctx *c, json_t *o, proto_req *r)
{
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return fail(c, PROTO_ERR_INVALID_TYPE, "logit_bias", "'logit_bias' must be an object, not %s", type_name(v));
    size_t n = json_object_size(v);
    if (n > (size_t)c->lim->max_logit_bias)
        return fail(c, PROTO_ERR_INVALID_VALUE, "logit_bias", "'logit_bias' takes at most %d entries", c->lim->max_logit_bias);
    if (n == 0) return 0;
    r->logit_bias = calloc(n, sizeof *r->logit_bias);
    if (!r->logit_bias) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        char *end;
        errno = 0;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || errno)
            return fail(c, PROTO_ERR_INVALID_VALUE, "logit_bias", "'logit_bias' keys must be token ids, got '%.32s'", key);
        if (token_id_ok(c, id, "logit_bias") < 0) return -1;
        if (!json_is_number(val))
            return fail(c, PROTO_ERR_INVALID_TYPE, "logit_bias", "'logit_bias' values must be numbers, not %s", type_name(val));
        double b = json_number_value(val);
        if (!(b >= -100 && b <= 100))
            return fail(c, PROTO_ERR_INVALID_VALUE, "logit_bias", "'logit_bias' values must be between -100 and 100, got %g", b);
        r->logit_bias[r->n_logit_bias].id = (int32_t)id;
        r->logit_bias[r->n_logit_bias].bias = (float)b;
        r->n_logit_bias++;
    }
    return 1;
}

void proto_context_msg(char *buf, size_t n, enum proto_endpoint ep, long long max_context,
                       long long prompt, long long completion)
{
    const char *what = ep == PROTO_EP_CHAT ? "messages" : "prompt";
    int k = snprintf(buf, n, "This model's maximum context length is %lld tokens. However, ",
                     max_context);
    if (k < 0 || (size_t)k >= n) return;
    if (prompt < 0)
        snprintf(buf + k, n - (size_t)k,
                 "you requested %lld tokens in the completion alone. Please reduce the completion "
                 "length ('max_tokens').",
                 completion);
    else if (completion <= 0)
        snprintf(buf + k, n - (size_t)k,
                 "your %s resulted in %lld tokens. Please reduce the length of the %s.", what,
                 prompt, what);
    else
        snprintf(buf + k, n - (size_t)k,
                 "you requested %lld tokens (%lld in the %s, %lld in the completion). Please "
                 "reduce the length of the %s or completion.",
                 prompt + completion, prompt, what, completion, what);
}

static int parse_ids(pctx *c, json_t *a, int32_t **out, int *n_out)
{
    size_t n = json_array_size(a);
    if (n > (size_t)c->lim->max_context) {
        char m[256];
        proto_context_msg(m, sizeof m, PROTO_EP_COMPLETIONS, c->lim->max_context, (long long)n, 0);
        return fail(c, PROTO_ERR_CONTEXT_LENGTH, "prompt", "%s", m);
    }
    int32_t *ids = *out = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e))
            return fail(c, PROTO_ERR_INVALID_TYPE, "prompt", "token prompts must be arrays of integers");
        if (token_id_ok(c, json_integer_value(e), "prompt") < 0) return -1;
        ids[i] = (int32_t)json_integer_value(e);
    }
    *n_out = (int)n;
    if (n == 0) return fail(c, PROTO_ERR_INVALID_VALUE, "prompt", "the token prompt is empty");
    return 1;
}

/* One entry of the batch form: a string or an array of token ids. */
static int parse_one(pctx *c, json_t *e, char **text, size_t *len, int32_t **ids, int *n_ids)
{
    if (json_is_string(e)) {
        *len = json_string_length(e);
        *text = dup_n(json_string_value(e), *len);
        return *text ? 1 : fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    }
    if (json_is_array(e)) return parse_ids(c, e, ids, n_ids);
    return fail(c, PROTO_ERR_INVALID_TYPE, "prompt", "'prompt' entries must be strings or arrays of token ids, not %s", type_name(e));
}

/* prompt: "text" | [id, ...] | ["text", ...] | [[id, ...], ...] (the batch form: several
 * prompts, the first into prompt / prompt_ids, the rest into more). */
static int parse_prompt(pctx *c, json_t *o, proto_req *r)
{
    json_t *v = json_object_get(o, "prompt");
    if (!v || json_is_null(v)) return fail(c, PROTO_ERR_MISSING_FIELD, "prompt", "'prompt' is required");
    if (json_is_string(v)) {
        r->prompt_len = json_string_length(v);
        r->prompt = dup_n(json_string_value(v), r->prompt_len);
        return r->prompt ? 1 : fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    }
    if (!json_is_array(v))
        return fail(c, PROTO_ERR_INVALID_TYPE, "prompt", "'prompt' must be a string, an array of token ids, or an array with one of those, not %s", type_name(v));
    if (json_array_size(v) == 0) return fail(c, PROTO_ERR_INVALID_VALUE, "prompt", "'prompt' is empty");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) return parse_ids(c, v, &r->prompt_ids, &r->n_prompt_ids);
    size_t n = json_array_size(v);
    if (n > PROTO_MAX_PROMPTS)
        return fail(c, PROTO_ERR_INVALID_VALUE, "prompt", "'prompt' holds %zu prompts; at most %d are taken in one request", n, PROTO_MAX_PROMPTS);
    if (parse_one(c, first, &r->prompt, &r->prompt_len, &r->prompt_ids, &r->n_prompt_ids) < 0) return -1;
    if (n > 1 && !(r->more = calloc(n - 1, sizeof *r->more))) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 1; i < n; i++) {
        proto_prompt *p = &r->more[r->n_more++];
        if (parse_one(c, json_array_get(v, i), &p->text, &p->len, &p->ids, &p->n_ids) < 0) return -1;
    }
    return 1;
}

/* "function": the deprecated functions API's result message (a tool message for the template) */
static const char *const roles[] = {"system", "developer", "user", "assistant",
                                    "tool",   "function",  NULL};

/* One message, validated, with its content normalized to a string (or null for an assistant
 * message that only carries tool calls). Returns a new reference or NULL (error recorded). */
static json_t *message_copy(pctx *c, json_t *m, size_t idx)
{
    char pname[48];
    snprintf(pname, sizeof pname, "messages[%zu]", idx);
    if (!json_is_object(m)) {
        fail(c, PROTO_ERR_INVALID_TYPE, pname, "'%s' must be an object, not %s", pname, type_name(m));
        return NULL;
    }
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) {
        fail(c, role ? PROTO_ERR_INVALID_TYPE : PROTO_ERR_MISSING_FIELD, pname, "'%s.role' must be a string", pname);
        return NULL;
    }
    int known = 0;
    for (int i = 0; roles[i]; i++) known |= !strcmp(json_string_value(role), roles[i]);
    if (!known) {
        fail(c, PROTO_ERR_INVALID_VALUE, pname,
             "'%s.role' must be one of system, developer, user, assistant, tool (or function)",
             pname);
        return NULL;
    }
    json_t *out = json_deep_copy(m);
    if (!out) {
        fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    json_t *content = json_object_get(m, "content");
    if (json_is_array(content)) {
        /* Join the text parts. Sizes are bounded by the body limit already. */
        size_t total = 0, n = json_array_size(content);
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_array_get(content, i);
            json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
            if (!json_is_object(p) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0) {
                json_decref(out);
                fail(c, PROTO_ERR_UNSUPPORTED, pname, "'%s.content' parts other than {\"type\": \"text\"} are not supported", pname);
                return NULL;
            }
            if (!json_is_string(text)) {
                json_decref(out);
                fail(c, PROTO_ERR_INVALID_TYPE, pname, "'%s.content' text parts need a string 'text'", pname);
                return NULL;
            }
            total += json_string_length(text);
        }
        char *buf = malloc(total + 1);
        if (!buf) {
            json_decref(out);
            fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
            return NULL;
        }
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *text = json_object_get(json_array_get(content, i), "text");
            memcpy(buf + o, json_string_value(text), json_string_length(text));
            o += json_string_length(text);
        }
        json_object_set_new(out, "content", json_stringn(buf, o));
        free(buf);
    } else if (content && !json_is_string(content) && !json_is_null(content)) {
        json_decref(out);
        fail(c, PROTO_ERR_INVALID_TYPE, pname, "'%s.content' must be a string or an array of text parts, not %s", pname, type_name(content));
        return NULL;
    } else if (!content || json_is_null(content)) {
        int has_calls = json_object_get(m, "tool_calls") != NULL ||
                        json_is_object(json_object_get(m, "function_call"));
        if (!has_calls || strcmp(json_string_value(role), "assistant") != 0) {
            json_decref(out);
            fail(c, PROTO_ERR_MISSING_FIELD, pname, "'%s.content' is required", pname);
            return NULL;
        }
    }
    if (proto_msg_legacy(out, idx, c->fn_id) || proto_msg_normalize(out, c->lim)) {
        json_decref(out);
        fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    return out;
}

static int parse_messages(pctx *c, json_t *o, proto_req *r, const char *bos, const char *eos)
{
    json_t *v = json_object_get(o, "messages");
    if (!v || json_is_null(v)) return fail(c, PROTO_ERR_MISSING_FIELD, "messages", "'messages' is required");
    if (!json_is_array(v)) return fail(c, PROTO_ERR_INVALID_TYPE, "messages", "'messages' must be an array, not %s", type_name(v));
    size_t n = json_array_size(v);
    if (n == 0) return fail(c, PROTO_ERR_INVALID_VALUE, "messages", "'messages' must not be empty");
    if (n > (size_t)c->lim->max_messages)
        return fail(c, PROTO_ERR_INVALID_VALUE, "messages", "'messages' takes at most %d entries", c->lim->max_messages);
    json_t *msgs = json_array();
    json_t *ctx = json_object();
    if (!msgs || !ctx) {
        json_decref(msgs);
        json_decref(ctx);
        return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    }
    json_object_set_new(ctx, "messages", msgs);
    for (size_t i = 0; i < n; i++) {
        json_t *m = message_copy(c, json_array_get(v, i), i);
        if (!m) {
            json_decref(ctx);
            return -1;
        }
        json_array_append_new(msgs, m);
    }
    json_t *tools = json_object_get(o, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            json_decref(ctx);
            return fail(c, PROTO_ERR_INVALID_TYPE, "tools", "'tools' must be an array, not %s", type_name(tools));
        }
        json_t *seen = proto_msg_tools(tools);
        if (!seen) {
            json_decref(ctx);
            return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
        }
        json_object_set_new(ctx, "tools", seen);
    }
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", json_string(bos ? bos : ""));
    json_object_set_new(ctx, "eos_token", json_string(eos ? eos : ""));
    r->chat_context = json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    return r->chat_context ? 1 : fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
}

/* Fields that OpenAI defines and tandem does not implement: refusing them is better than
 * silently answering something else than the client asked for. */
static int check_unsupported(pctx *c, json_t *o, enum proto_endpoint ep)
{
    json_t *v;
    if ((v = json_object_get(o, "echo")) && json_is_true(v) && ep == PROTO_EP_CHAT)
        return fail(c, PROTO_ERR_UNSUPPORTED, "echo", "'echo' is a /v1/completions field");
    if ((v = json_object_get(o, "suffix")) && !json_is_null(v))
        return fail(c, PROTO_ERR_UNSUPPORTED, "suffix", "'suffix' is not supported");
    /* 1.0 is 1, as get_int takes every integer field */
    if ((v = json_object_get(o, "best_of")) && !json_is_null(v) && json_number_value(v) != 1.0)
        return fail(c, PROTO_ERR_UNSUPPORTED, "best_of", "'best_of' other than 1 is not supported");
    (void)ep;
    return 0;
}

static int parse_fields(pctx *c, json_t *o, enum proto_endpoint ep, proto_req *r, const char *bos,
                        const char *eos)
{
    const proto_limits *lim = c->lim;
    json_t *v = json_object_get(o, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return fail(c, PROTO_ERR_INVALID_TYPE, "model", "'model' must be a string, not %s", type_name(v));
        r->model = dup_n(json_string_value(v), json_string_length(v));
        if (!r->model) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    }
    if (check_unsupported(c, o, ep) < 0) return -1;
    /* the deprecated functions API, as tools from here on (o rewritten) */
    int functions = 0;
    if (ep == PROTO_EP_CHAT) {
        char m[256];
        const char *fparam = NULL;
        functions = proto_msg_functions(o, m, sizeof m, &fparam);
        if (functions == -2) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
        if (functions < 0) return fail(c, PROTO_ERR_INVALID_VALUE, fparam, "%s", m);
    }
    if (ep == PROTO_EP_COMPLETIONS) {
        if (parse_prompt(c, o, r) < 0) return -1;
    } else {
        if (parse_messages(c, o, r, bos, eos) < 0) return -1;
    }
    long long x;
    int k;
    r->max_tokens = -1;
    /* max_completion_tokens replaces the deprecated max_tokens on chat; it wins when both are
     * given. More than the context can never be generated: that is a context error. */
    static const char *const mt[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++) {
        /* /v1/completions takes 0 (OpenAI's minimum: with echo and logprobs it scores the
         * prompt, what lm-eval's loglikelihood asks); a chat reply of nothing is no reply */
        if ((k = get_int(c, o, mt[i], ep == PROTO_EP_COMPLETIONS ? 0 : 1, INT32_MAX, &x)) < 0)
            return -1;
        if (k && x > lim->max_context) {
            char m[256];
            proto_context_msg(m, sizeof m, ep, lim->max_context, -1, x);
            return fail(c, PROTO_ERR_CONTEXT_LENGTH, mt[i], "%s", m);
        }
        if (k) r->max_tokens = (int)x;
    }
    r->n = 1;
    if ((k = get_int(c, o, "n", 1, lim->max_n, &x)) < 0) return -1;
    if (k) r->n = (int)x;
    if (get_bool(c, o, "stream", &r->stream) < 0) return -1;
    /* llama.cpp's per-request switch of prompt caching (default on) */
    r->cache_prompt = 1;
    if (get_bool(c, o, "cache_prompt", &r->cache_prompt) < 0) return -1;
    v = json_object_get(o, "stream_options");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return fail(c, PROTO_ERR_INVALID_TYPE, "stream_options", "'stream_options' must be an object, not %s", type_name(v));
        if (!r->stream)
            return fail(c, PROTO_ERR_INVALID_VALUE, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (get_bool(c, v, "include_usage", &r->include_usage) < 0) return -1;
    }
    r->temperature = 1.0;
    r->top_p = 1.0;
    r->top_k = -1;
    r->repetition_penalty = 1.0;
    if (get_number(c, o, "temperature", 0, 2, &r->temperature) < 0) return -1;
    if (get_number(c, o, "top_p", 0, 1, &r->top_p) < 0) return -1;
    if (get_number(c, o, "min_p", 0, 1, &r->min_p) < 0) return -1;
    if ((k = get_int(c, o, "top_k", -1, lim->vocab, &x)) < 0) return -1;
    if (k) r->top_k = (int)x;
    if (get_number(c, o, "presence_penalty", -2, 2, &r->presence_penalty) < 0) return -1;
    if (get_number(c, o, "frequency_penalty", -2, 2, &r->frequency_penalty) < 0) return -1;
    if ((k = get_number(c, o, "repetition_penalty", 0, 2, &r->repetition_penalty)) < 0) return -1;
    if (k && r->repetition_penalty == 0)
        return fail(c, PROTO_ERR_INVALID_VALUE, "repetition_penalty", "'repetition_penalty' must be greater than 0");
    if ((k = get_int(c, o, "seed", INT64_MIN, INT64_MAX, &x)) < 0) return -1;
    if (k) {
        r->has_seed = 1;
        r->seed = (uint64_t)x;
    }
    if (parse_stop(c, o, r) < 0) return -1;
    if (parse_logit_bias(c, o, r) < 0) return -1;
    /* logprobs: an integer count on /v1/completions, a boolean plus top_logprobs on chat. */
    if (ep == PROTO_EP_COMPLETIONS) {
        if ((k = get_int(c, o, "logprobs", 0, PROTO_MAX_COMPLETION_LOGPROBS, &x)) < 0) return -1;
        if (k) {
            r->logprobs = 1;
            r->top_logprobs = (int)x;
        }
    } else {
        if (get_bool(c, o, "logprobs", &r->logprobs) < 0) return -1;
        if ((k = get_int(c, o, "top_logprobs", 0, PROTO_MAX_TOP_LOGPROBS, &x)) < 0) return -1;
        if (k) {
            if (!r->logprobs)
                return fail(c, PROTO_ERR_INVALID_VALUE, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
            r->top_logprobs = (int)x;
        }
    }
    if (r->n_more && (r->n_more + 1) * r->n > PROTO_MAX_CHOICES)
        return fail(c, PROTO_ERR_INVALID_VALUE, "n", "%d prompts with 'n' %d make %d choices; at most %d are taken in one request",
                    r->n_more + 1, r->n, (r->n_more + 1) * r->n, PROTO_MAX_CHOICES);
    if (get_bool(c, o, "echo", &r->echo) < 0) return -1;
    /* the prompt's log-probabilities come with the whole response (the prefill's logits of every
     * position, known when the request is done), not in a stream's first chunk */
    if (r->echo && r->logprobs && r->stream)
        return fail(c, PROTO_ERR_UNSUPPORTED, "echo", "'echo' with 'logprobs' is not supported in a stream: send it with \"stream\": false");
    if (parse_sparse(c, o, r) < 0) return -1;
    if (parse_decode_sparse(c, o, r) < 0) return -1;
    if (proto_struct_parse(o, ep, r, &c->err, c->msg, c->msgn, c->param, c->paramn) < 0) return -1;
    if (ep == PROTO_EP_CHAT && proto_tools_from_json(o, &r->tools, &c->err, c->msg, c->msgn, c->param, c->paramn) < 0)
        return -1;
    if (functions && r->tools) r->tools->legacy = 1;
    v = json_object_get(o, "user");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return fail(c, PROTO_ERR_INVALID_TYPE, "user", "'user' must be a string, not %s", type_name(v));
        if (json_string_length(v) > (size_t)lim->max_user_bytes)
            return fail(c, PROTO_ERR_INVALID_VALUE, "user", "'user' is limited to %d bytes", lim->max_user_bytes);
        r->user = dup_n(json_string_value(v), json_string_length(v));
        if (!r->user) return fail(c, PROTO_ERR_INTERNAL, NULL, "out of memory");
    }
    return 0;
}

enum proto_err proto_req_parse(enum proto_endpoint ep, const char *body, size_t len,
                               const proto_limits *lim, const char *bos, const char *eos,
                               proto_req *out, char *msg, size_t msgn, char *param, size_t paramn)
{
    memset(out, 0, sizeof *out);
    out->ep = ep;
    pctx c = {.lim = lim,
              .err = PROTO_ERR_NONE,
              .msg = msg,
              .msgn = msgn,
              .param = param,
              .paramn = paramn};
    if (msgn) msg[0] = 0;
    if (paramn) param[0] = 0;
    if (proto_json_depth(body, len, lim->max_depth) > lim->max_depth) {
        fail(&c, PROTO_ERR_INVALID_JSON, NULL, "the JSON body is nested deeper than %d levels", lim->max_depth);
        return c.err;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        fail(&c, PROTO_ERR_INVALID_JSON, NULL, "invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
        return c.err;
    }
    if (!json_is_object(root)) {
        fail(&c, PROTO_ERR_INVALID_JSON, NULL, "the JSON body must be an object, not %s", type_name(root));
    } else {
        parse_fields(&c, root, ep, out, bos, eos);
    }
    json_decref(root);
    if (c.err != PROTO_ERR_NONE) {
        proto_req_deinit(out);
        out->ep = ep;
    }
    return c.err;
}

void proto_req_deinit(proto_req *r)
{
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_more; i++) {
        free(r->more[i].text);
        free(r->more[i].ids);
    }
    free(r->more);
    free(r->chat_context);
    free(r->logit_bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->user);
    free(r->grammar);
    proto_tools_free(r->tools);
    memset(r, 0, sizeof *r);
}
