/* daemon/api_struct.c — see api_struct.h. */
#include "daemon/api_struct.h"
#include "proto/buf.h"
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

int dmn_grammar_compile(const proto_req *q, enum proto_tool_family f, model_grammar **out,
                        enum proto_err *e, char *msg, size_t msgn, char *param, size_t paramn)
{
    *out = NULL;
    char err[400];
    if (proto_tools_constrained(q->tools)) {
        proto_buf g;
        proto_buf_init(&g);
        if (proto_tools_grammar(q->tools, f, &g, err, sizeof err)) {
            proto_buf_deinit(&g);
            *e = PROTO_ERR_INVALID_VALUE;
            snprintf(msg, msgn, "%s", err);
            snprintf(param, paramn, "tools");
            return -1;
        }
        *out = model_grammar_new(g.p, g.len, NULL, err, sizeof err);
        proto_buf_deinit(&g);
        if (*out) return 0;
        *e = PROTO_ERR_INVALID_VALUE;
        snprintf(msg, msgn, "tools: %s", err);
        snprintf(param, paramn, "tools");
        return -1;
    }
    if (q->grammar_kind == PROTO_GRAMMAR_NONE) return 0;
    const char *text = q->grammar_kind == PROTO_GRAMMAR_JSON_OBJECT ? model_grammar_json_object() : q->grammar;
    *out = model_grammar_new(text, strlen(text), NULL, err, sizeof err);
    if (*out) return 0;
    *e = PROTO_ERR_INVALID_VALUE;
    snprintf(msg, msgn, "%s", err);
    snprintf(param, paramn, "%s", q->grammar_kind == PROTO_GRAMMAR_GBNF ? "grammar" : "response_format");
    return -1;
}

int dmn_grammar_check(sched *s, model_grammar *g, char *msg, size_t msgn)
{
    const model_gvocab *v = sched_grammar_vocab(s);
    model_gmatch *m = v ? model_gmatch_new(g, v) : NULL;
    if (!m) {
        snprintf(msg, msgn, "out of memory");
        return -1;
    }
    const uint64_t *mask;
    int n = model_gmatch_mask(m, &mask, NULL);
    if (n <= 0)
        snprintf(msg, msgn, "%s", n < 0 ? model_gmatch_error(m)
                                         : "grammar: no token of the model's vocabulary can start a text of this grammar");
    model_gmatch_free(m);
    return n > 0 ? 0 : -1;
}

int dmn_tools_hold(const proto_tools *t, enum proto_tool_family f, dmn_choice_tools *ct,
                   const char *text, size_t len)
{
    if (!t || t->choice == PROTO_TOOL_CHOICE_NONE || ct->mode == DMN_TOOLS_TEXT) return 0;
    if (proto_tools_constrained(t)) return 1; /* the grammar allows nothing but calls */
    if (ct->mode == DMN_TOOLS_UNDECIDED && !proto_tools_may_start(f, text, len)) {
        ct->mode = DMN_TOOLS_TEXT;
        return 0;
    }
    return 1;
}

/* "call_" and 24 random letters and digits, as OpenAI's ids look. */
static void call_id(char out[40])
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[24];
    if (RAND_bytes(r, sizeof r) != 1) memset(r, 7, sizeof r);
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) out[5 + i] = abc[r[i] % 62];
    out[29] = 0;
}

const char *dmn_tools_finish(const proto_tools *t, enum proto_tool_family f, dmn_choice_tools *ct,
                             const char *text, size_t len, const char *finish)
{
    if (!t || t->choice == PROTO_TOOL_CHOICE_NONE || ct->mode == DMN_TOOLS_TEXT) return finish;
    if (proto_tools_parse(t, f, text ? text : "", len, &ct->calls, &ct->n_calls, &ct->content_len) != 1) {
        ct->mode = DMN_TOOLS_TEXT;
        return finish;
    }
    ct->mode = DMN_TOOLS_CALLS;
    for (int i = 0; i < ct->n_calls; i++) call_id(ct->calls[i].id);
    return finish && !strcmp(finish, "stop") ? "tool_calls" : finish;
}

void dmn_choice_tools_deinit(dmn_choice_tools *ct)
{
    proto_tool_calls_free(ct->calls, ct->n_calls);
    memset(ct, 0, sizeof *ct);
}
