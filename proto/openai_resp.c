/* proto/openai_resp.c — see openai_resp.h. */
#include "proto/openai_resp.h"
#include "proto/utf8.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenAI reports -9999.0 for tokens whose probability underflows. */
static json_t *lp_value(float lp)
{
    return json_real(isfinite(lp) ? lp : -9999.0);
}

/* Text for JSON: valid UTF-8 stays as it is; invalid bytes become U+FFFD. */
static json_t *text_value(const char *s, size_t n)
{
    if (!n) return json_string("");
    if (proto_utf8_valid(s, n)) return json_stringn(s, n);
    size_t len;
    char *t = proto_utf8_sanitize(s, n, &len);
    json_t *v = t ? json_stringn(t, len) : NULL;
    free(t);
    return v;
}

/* A token's bytes as a display string: valid sequences kept, other bytes as "\xNN". */
static json_t *token_value(const char *s, size_t n)
{
    if (proto_utf8_valid(s, n)) return json_stringn(s, n);
    char *t = malloc(n * 4 + 1);
    if (!t) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int k = proto_utf8_seq_len(p + i, n - i);
        if (k) {
            memcpy(t + o, p + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            o += (size_t)sprintf(t + o, "\\x%02x", p[i]);
            i++;
        }
    }
    json_t *v = json_stringn(t, o);
    free(t);
    return v;
}

static json_t *bytes_value(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

static json_t *chat_logprobs(const proto_choice_out *c)
{
    json_t *content = json_array();
    for (int i = 0; content && i < c->n_lps; i++) {
        const proto_lp_token *t = &c->lps[i];
        json_t *tops = json_array();
        for (int j = 0; tops && j < t->n_top; j++)
            json_array_append_new(tops, json_pack("{s:o, s:o, s:o}", "token",
                                                  token_value(t->top[j].bytes, t->top[j].len),
                                                  "logprob", lp_value(t->top[j].logprob), "bytes",
                                                  bytes_value(t->top[j].bytes, t->top[j].len)));
        json_array_append_new(content, json_pack("{s:o, s:o, s:o, s:o}", "token",
                                                 token_value(t->bytes, t->len), "logprob",
                                                 lp_value(t->logprob), "bytes",
                                                 bytes_value(t->bytes, t->len), "top_logprobs",
                                                 tops));
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

static json_t *completion_logprobs(const proto_choice_out *c)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < c->n_lps; i++) {
        const proto_lp_token *t = &c->lps[i];
        json_array_append_new(tokens, token_value(t->bytes, t->len));
        if (t->no_logprob) {
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
            json_array_append_new(offs, json_integer((json_int_t)t->text_offset));
            continue;
        }
        json_array_append_new(lps, lp_value(t->logprob));
        json_t *top = json_object();
        /* Two alternatives may display alike (partial bytes); the first (more likely) wins. */
        for (int j = 0; top && j < t->n_top; j++) {
            json_t *k = token_value(t->top[j].bytes, t->top[j].len);
            if (k && !json_object_get(top, json_string_value(k)))
                json_object_set_new(top, json_string_value(k), lp_value(t->top[j].logprob));
            json_decref(k);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)t->text_offset));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *logprobs_value(enum proto_endpoint ep, const proto_choice_out *c)
{
    if (!c->logprobs) return json_null();
    return ep == PROTO_EP_CHAT ? chat_logprobs(c) : completion_logprobs(c);
}

static json_t *finish_value(const proto_choice_out *c)
{
    return c->finish_reason ? json_string(c->finish_reason) : json_null();
}

static json_t *usage_value(const proto_usage *u)
{
    json_t *o = json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt_tokens,
                          "completion_tokens", u->completion_tokens, "total_tokens",
                          u->prompt_tokens + u->completion_tokens, "prompt_tokens_details",
                          "cached_tokens", u->cached_tokens);
    /* tandem's extension: the FlexPrefill density (blocks computed / causal blocks) */
    if (o && u->has_prefill_density)
        json_object_set_new(o, "prefill_density", json_real(round(u->prefill_density * 1e4) / 1e4));
    if (o && u->has_decode_kv_read)
        json_object_set_new(o, "decode_kv_read_fraction", json_real(round(u->decode_kv_read * 1e4) / 1e4));
    return o;
}

static json_t *tool_calls_value(const proto_choice_out *c, int with_index)
{
    json_t *a = json_array();
    for (int i = 0; a && i < c->n_calls; i++) {
        const proto_tool_call *t = &c->calls[i];
        json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", t->id, "type", "function", "function", "name",
                              t->name, "arguments", t->arguments);
        if (o && with_index) json_object_set_new(o, "index", json_integer(c->call_base + i));
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* the functions API's one call: {"name", "arguments"} */
static json_t *function_call_value(const proto_choice_out *c)
{
    return json_pack("{s:s, s:s}", "name", c->calls[0].name, "arguments", c->calls[0].arguments);
}

static json_t *envelope(const proto_resp_meta *m, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created",
                     (json_int_t)m->created, "model", m->model);
}

static char *dump(json_t *root)
{
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

char *proto_resp_json(const proto_resp_meta *m, const proto_choice_out *choices, int n,
                      const proto_usage *u)
{
    int chat = m->ep == PROTO_EP_CHAT;
    json_t *root = envelope(m, chat ? "chat.completion" : "text_completion");
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const proto_choice_out *c = &choices[i];
        json_t *ch;
        if (chat) {
            json_t *content = (c->n_calls || c->no_content) && !c->text_len
                                  ? json_null()
                                  : text_value(c->text, c->text_len);
            /* refusal: required (nullable) in OpenAI's response message; tandem never refuses */
            ch = json_pack("{s:i, s:{s:s, s:o, s:n}, s:o, s:o}", "index", c->index, "message",
                           "role", "assistant", "content", content, "refusal", "logprobs",
                           logprobs_value(m->ep, c), "finish_reason", finish_value(c));
            if (ch && c->n_calls) {
                json_t *tc = c->function_call ? function_call_value(c) : tool_calls_value(c, 0);
                if (!tc ||
                    json_object_set_new(json_object_get(ch, "message"),
                                        c->function_call ? "function_call" : "tool_calls", tc)) {
                    json_decref(ch);
                    ch = NULL;
                }
            }
        } else
            ch = json_pack("{s:i, s:o, s:o, s:o}", "index", c->index, "text",
                           text_value(c->text, c->text_len), "logprobs", logprobs_value(m->ep, c),
                           "finish_reason", finish_value(c));
        if (!ch) {
            json_decref(arr);
            json_decref(root);
            return NULL;
        }
        json_array_append_new(arr, ch);
    }
    if (!root || !arr) {
        json_decref(arr);
        json_decref(root);
        return NULL;
    }
    json_object_set_new(root, "choices", arr);
    json_object_set_new(root, "usage", usage_value(u));
    return dump(root);
}

char *proto_chunk_json(const proto_resp_meta *m, const proto_choice_out *c, int role,
                       int usage_null)
{
    int chat = m->ep == PROTO_EP_CHAT;
    json_t *root = envelope(m, chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch;
    if (chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        /* The closing chunk of a choice has an empty delta, as OpenAI sends it. */
        if (c->text_len || (role && !c->n_calls) || (!c->finish_reason && !c->n_calls))
            json_object_set_new(delta, "content", text_value(c->text, c->text_len));
        if (c->n_calls && c->function_call)
            json_object_set_new(delta, "function_call", function_call_value(c));
        else if (c->n_calls)
            json_object_set_new(delta, "tool_calls", tool_calls_value(c, 1));
        ch = json_pack("{s:i, s:o, s:o, s:o}", "index", c->index, "delta", delta, "logprobs",
                       logprobs_value(m->ep, c), "finish_reason", finish_value(c));
    } else {
        ch = json_pack("{s:i, s:o, s:o, s:o}", "index", c->index, "text",
                       text_value(c->text, c->text_len), "logprobs", logprobs_value(m->ep, c),
                       "finish_reason", finish_value(c));
    }
    if (!root || !ch) {
        json_decref(ch);
        json_decref(root);
        return NULL;
    }
    json_object_set_new(root, "choices", json_pack("[o]", ch));
    if (usage_null) json_object_set_new(root, "usage", json_null());
    return dump(root);
}

char *proto_usage_chunk_json(const proto_resp_meta *m, const proto_usage *u)
{
    json_t *root = envelope(m, m->ep == PROTO_EP_CHAT ? "chat.completion.chunk" : "text_completion");
    if (!root) return NULL;
    json_object_set_new(root, "choices", json_array());
    json_object_set_new(root, "usage", usage_value(u));
    return dump(root);
}

char *proto_models_json(const char *model, long long created, int max_model_len)
{
    json_t *root = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object", "list", "data",
                             "id", model, "object", "model", "created", (json_int_t)created,
                             "owned_by", "tandem", "max_model_len", max_model_len);
    return dump(root);
}
