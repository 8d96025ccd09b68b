/* model/tmpl/tmpl_parse.h — the parser's state, shared by tmpl_parse.c (statements, the compiled
 * template's storage) and tmpl_parse_expr.c (expressions). Internal to the parser. */
#ifndef TANDEM_MODEL_TMPL_PARSE_H
#define TANDEM_MODEL_TMPL_PARSE_H
#include "model/tmpl/tmpl_int.h"

/* Nesting bound for statements and expressions: recursion in the parser and evaluator is
 * proportional to it, so it keeps the C stack small (real templates nest < 20 deep). */
#define TMPL_MAX_NEST 200

typedef struct tmpl_parser {
    model_tmpl *t;
    const tmpl_toks *toks;
    size_t i;
    int depth;
    int loops; /* enclosing for loops in the current function body (break/continue) */
    tmpl_node *macro; /* innermost macro or call block being parsed (varargs/kwargs/caller) */
    char *err;
    size_t errlen;
} tmpl_parser;

/* A growable array of node pointers used while parsing. */
typedef struct tmpl_nodes {
    tmpl_node **v;
    uint32_t n, cap;
    int32_t *syms; /* parallel symbol ids, when used */
} tmpl_nodes;

/* Records "TemplateSyntaxError: <msg> (line N)" (or another kind) unless an error is recorded. */
int model_tmpl_p_fail(tmpl_parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int model_tmpl_p_fail_kind(tmpl_parser *P, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void *model_tmpl_p_alloc(tmpl_parser *P, size_t n);
tmpl_node *model_tmpl_p_node(tmpl_parser *P, int type, int line);
int model_tmpl_p_push(tmpl_parser *P, tmpl_nodes *a, tmpl_node *n, int32_t sym);
/* Moves a's contents into template storage. */
tmpl_node **model_tmpl_p_finish(tmpl_parser *P, tmpl_nodes *a, uint32_t *n, int32_t **syms);
int32_t model_tmpl_p_sym(tmpl_parser *P, const char *s, size_t n);
/* An immortal str constant in template storage. */
int model_tmpl_p_str(tmpl_parser *P, const char *s, size_t n, tmpl_val *out);

static inline const tmpl_tok *tmpl_cur(const tmpl_parser *P) { return &P->toks->v[P->i]; }
static inline const tmpl_tok *tmpl_peek(const tmpl_parser *P, size_t k)
{
    size_t j = P->i + k;
    return &P->toks->v[j < P->toks->n ? j : P->toks->n - 1];
}
static inline void tmpl_adv(tmpl_parser *P)
{
    if (P->i + 1 < P->toks->n) P->i++;
}
bool model_tmpl_p_is_name(const tmpl_tok *k, const char *name);
int model_tmpl_p_expect(tmpl_parser *P, int type);

/* Expressions (tmpl_parse_expr.c). extra_end: a name that also ends a tuple ("in"), or NULL. */
tmpl_node *model_tmpl_p_expr(tmpl_parser *P, bool with_condexpr);
tmpl_node *model_tmpl_p_tuple(tmpl_parser *P, bool simplified, bool with_condexpr,
                              const char *extra_end, bool explicit_parens, bool with_ns);
tmpl_node *model_tmpl_p_filter(tmpl_parser *P, tmpl_node *in, bool start_inline);
int model_tmpl_p_call_args(tmpl_parser *P, tmpl_node *n);
tmpl_node *model_tmpl_p_primary(tmpl_parser *P, bool with_ns);

#endif
