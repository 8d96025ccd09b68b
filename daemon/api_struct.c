/* daemon/api_struct.c — see api_struct.h. */
#include "daemon/api_struct.h"
#include <stdio.h>
#include <string.h>

int dmn_grammar_compile(const proto_req *q, model_grammar **out, enum proto_err *e, char *msg,
                        size_t msgn, char *param, size_t paramn)
{
    *out = NULL;
    if (q->grammar_kind == PROTO_GRAMMAR_NONE) return 0;
    const char *text = q->grammar_kind == PROTO_GRAMMAR_JSON_OBJECT ? model_grammar_json_object() : q->grammar;
    char err[300];
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
