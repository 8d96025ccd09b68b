/* model/tmpl/tmpl_parse_expr.c — expressions, with jinja2's grammar and precedence (lowest first):
 * inline if, or, and, not, comparisons and `in` (chained), + -, ~, * / // %, **, unary - +,
 * then primaries with postfix . [] () and the filter/test chain (| and is). */
#include "model/tmpl/tmpl_parse.h"
#include <string.h>

typedef tmpl_parser P_t;
#define P_FAIL(...) (model_tmpl_p_fail(P, __VA_ARGS__), (tmpl_node *)NULL)

static tmpl_node *p_or(P_t *P);
static tmpl_node *p_unary(P_t *P, bool with_filter);

static bool enter(P_t *P)
{
    if (++P->depth > TMPL_MAX_NEST) {
        model_tmpl_p_fail(P, "expression nested too deeply (more than %d levels)", TMPL_MAX_NEST);
        return false;
    }
    return true;
}

static tmpl_node *leave(P_t *P, tmpl_node *n)
{
    P->depth--;
    return n;
}

/* Each link of a left-nested chain (a + b + c, x.y.z, v|f|g) deepens the tree that evaluation
 * walks recursively: it counts against the same nesting bound as parser recursion. */
static bool chain(P_t *P, int *links)
{
    (*links)++;
    return enter(P);
}

static tmpl_node *unchain(P_t *P, int links, tmpl_node *n)
{
    P->depth -= links;
    return n;
}

tmpl_node *model_tmpl_p_expr(P_t *P, bool with_condexpr)
{
    if (!enter(P)) return NULL;
    int line = tmpl_cur(P)->line;
    tmpl_node *e = p_or(P);
    if (!e) return leave(P, NULL);
    int links = 0;
    while (with_condexpr && model_tmpl_p_is_name(tmpl_cur(P), "if")) {
        if (!chain(P, &links)) return unchain(P, links, leave(P, NULL));
        tmpl_adv(P);
        tmpl_node *c = model_tmpl_p_node(P, TN_CONDEXPR, line);
        if (!c) return unchain(P, links, leave(P, NULL));
        c->b = e;
        if (!(c->a = p_or(P))) return unchain(P, links, leave(P, NULL));
        if (model_tmpl_p_is_name(tmpl_cur(P), "else")) {
            tmpl_adv(P);
            if (!(c->c = model_tmpl_p_expr(P, true))) return unchain(P, links, leave(P, NULL));
        }
        e = c;
        line = tmpl_cur(P)->line;
    }
    return unchain(P, links, leave(P, e));
}

static tmpl_node *binary(P_t *P, int type, tmpl_node *a, tmpl_node *b, int line)
{
    if (!a || !b) return NULL;
    tmpl_node *n = model_tmpl_p_node(P, type, line);
    if (n) {
        n->a = a;
        n->b = b;
    }
    return n;
}

static tmpl_node *p_compare(P_t *P);

static tmpl_node *p_not(P_t *P)
{
    if (model_tmpl_p_is_name(tmpl_cur(P), "not")) {
        int line = tmpl_cur(P)->line;
        tmpl_adv(P);
        if (!enter(P)) return NULL;
        tmpl_node *a = p_not(P);
        leave(P, NULL);
        if (!a) return NULL;
        tmpl_node *n = model_tmpl_p_node(P, TN_NOT, line);
        if (n) n->a = a;
        return n;
    }
    return p_compare(P);
}

static tmpl_node *p_and(P_t *P)
{
    tmpl_node *l = p_not(P);
    int links = 0;
    while (l && model_tmpl_p_is_name(tmpl_cur(P), "and")) {
        int line = tmpl_cur(P)->line;
        if (!chain(P, &links)) return unchain(P, links, NULL);
        tmpl_adv(P);
        l = binary(P, TN_AND, l, p_not(P), line);
    }
    return unchain(P, links, l);
}

static tmpl_node *p_or(P_t *P)
{
    tmpl_node *l = p_and(P);
    int links = 0;
    while (l && model_tmpl_p_is_name(tmpl_cur(P), "or")) {
        int line = tmpl_cur(P)->line;
        if (!chain(P, &links)) return unchain(P, links, NULL);
        tmpl_adv(P);
        l = binary(P, TN_OR, l, p_and(P), line);
    }
    return unchain(P, links, l);
}

static tmpl_node *p_math1(P_t *P);

static tmpl_node *p_compare(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_node *e = p_math1(P);
    if (!e) return NULL;
    tmpl_nodes ops = {0};
    for (;;) {
        const tmpl_tok *k = tmpl_cur(P);
        int op = -1;
        switch (k->type) {
        case TOK_EQ: op = TC_EQ; break;
        case TOK_NE: op = TC_NE; break;
        case TOK_LT: op = TC_LT; break;
        case TOK_LTEQ: op = TC_LE; break;
        case TOK_GT: op = TC_GT; break;
        case TOK_GTEQ: op = TC_GE; break;
        }
        if (op >= 0) {
            tmpl_adv(P);
        } else if (model_tmpl_p_is_name(k, "in")) {
            tmpl_adv(P);
            op = TC_IN;
        } else if (model_tmpl_p_is_name(k, "not") && model_tmpl_p_is_name(tmpl_peek(P, 1), "in")) {
            tmpl_adv(P);
            tmpl_adv(P);
            op = TC_NOTIN;
        } else {
            break;
        }
        tmpl_node *r = p_math1(P);
        if (!r || model_tmpl_p_push(P, &ops, r, op)) return NULL;
        line = tmpl_cur(P)->line;
    }
    if (!ops.n) return e;
    tmpl_node *n = model_tmpl_p_node(P, TN_COMPARE, line);
    if (!n) return NULL;
    n->a = e;
    n->kids = model_tmpl_p_finish(P, &ops, &n->nkids, &n->syms);
    n->nsyms = n->nkids;
    return n->kids ? n : NULL;
}

static tmpl_node *p_concat(P_t *P);

static tmpl_node *p_math1(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_node *l = p_concat(P);
    int links = 0;
    while (l && (tmpl_cur(P)->type == TOK_ADD || tmpl_cur(P)->type == TOK_SUB)) {
        int op = tmpl_cur(P)->type == TOK_ADD ? TB_ADD : TB_SUB;
        if (!chain(P, &links)) return unchain(P, links, NULL);
        tmpl_adv(P);
        l = binary(P, TN_BINOP, l, p_concat(P), line);
        if (l) l->op = (uint8_t)op;
        line = tmpl_cur(P)->line;
    }
    return unchain(P, links, l);
}

static tmpl_node *p_math2(P_t *P);

static tmpl_node *p_concat(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_node *first = p_math2(P);
    if (!first || tmpl_cur(P)->type != TOK_TILDE) return first;
    tmpl_nodes args = {0};
    if (model_tmpl_p_push(P, &args, first, 0)) return NULL;
    while (tmpl_cur(P)->type == TOK_TILDE) {
        tmpl_adv(P);
        tmpl_node *r = p_math2(P);
        if (!r || model_tmpl_p_push(P, &args, r, 0)) return NULL;
    }
    tmpl_node *n = model_tmpl_p_node(P, TN_CONCAT, line);
    if (!n) return NULL;
    n->kids = model_tmpl_p_finish(P, &args, &n->nkids, NULL);
    return n->kids ? n : NULL;
}

static tmpl_node *p_pow(P_t *P);

static tmpl_node *p_math2(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_node *l = p_pow(P);
    int links = 0;
    for (;;) {
        int t = tmpl_cur(P)->type, op;
        if (t == TOK_MUL) op = TB_MUL;
        else if (t == TOK_DIV) op = TB_DIV;
        else if (t == TOK_FLOORDIV) op = TB_FLOORDIV;
        else if (t == TOK_MOD) op = TB_MOD;
        else break;
        if (!l || !chain(P, &links)) return unchain(P, links, NULL);
        tmpl_adv(P);
        l = binary(P, TN_BINOP, l, p_pow(P), line);
        if (l) l->op = (uint8_t)op;
        line = tmpl_cur(P)->line;
    }
    return unchain(P, links, l);
}

static tmpl_node *p_pow(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_node *l = p_unary(P, true);
    int links = 0;
    while (l && tmpl_cur(P)->type == TOK_POW) {
        if (!chain(P, &links)) return unchain(P, links, NULL);
        tmpl_adv(P);
        l = binary(P, TN_BINOP, l, p_unary(P, true), line);
        if (l) l->op = TB_POW;
        line = tmpl_cur(P)->line;
    }
    return unchain(P, links, l);
}

static tmpl_node *p_postfix(P_t *P, tmpl_node *n);
static tmpl_node *p_filter_expr(P_t *P, tmpl_node *n);

static tmpl_node *p_unary(P_t *P, bool with_filter)
{
    if (!enter(P)) return NULL;
    const tmpl_tok *k = tmpl_cur(P);
    tmpl_node *n;
    if (k->type == TOK_SUB || k->type == TOK_ADD) {
        int type = k->type == TOK_SUB ? TN_NEG : TN_POS;
        int line = k->line;
        tmpl_adv(P);
        tmpl_node *a = p_unary(P, false);
        if (!a) return leave(P, NULL);
        if (a->type == TN_CONST && (a->val.kind == TMPL_INT || a->val.kind == TMPL_FLOAT) &&
            !(a->val.kind == TMPL_INT && a->val.u.i == INT64_MIN)) {
            n = a; /* fold -1, +2.5 */
            if (type == TN_NEG) {
                if (n->val.kind == TMPL_INT) n->val.u.i = -n->val.u.i;
                else n->val.u.f = -n->val.u.f;
            }
        } else {
            if (!(n = model_tmpl_p_node(P, type, line))) return leave(P, NULL);
            n->a = a;
        }
    } else {
        n = model_tmpl_p_primary(P, false);
    }
    if (n) n = p_postfix(P, n);
    if (n && with_filter) n = p_filter_expr(P, n);
    return leave(P, n);
}

static tmpl_node *p_list(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_adv(P); /* [ */
    tmpl_nodes items = {0};
    while (tmpl_cur(P)->type != TOK_RBRACKET) {
        if (items.n && model_tmpl_p_expect(P, TOK_COMMA)) return NULL;
        if (tmpl_cur(P)->type == TOK_RBRACKET) break;
        tmpl_node *e = model_tmpl_p_expr(P, true);
        if (!e || model_tmpl_p_push(P, &items, e, 0)) return NULL;
    }
    if (model_tmpl_p_expect(P, TOK_RBRACKET)) return NULL;
    tmpl_node *n = model_tmpl_p_node(P, TN_LIST, line);
    if (!n) return NULL;
    n->kids = model_tmpl_p_finish(P, &items, &n->nkids, NULL);
    return n;
}

static tmpl_node *p_dict(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_adv(P); /* { */
    tmpl_nodes keys = {0}, vals = {0};
    while (tmpl_cur(P)->type != TOK_RBRACE) {
        if (keys.n && model_tmpl_p_expect(P, TOK_COMMA)) return NULL;
        if (tmpl_cur(P)->type == TOK_RBRACE) break;
        tmpl_node *k = model_tmpl_p_expr(P, true);
        if (!k || model_tmpl_p_expect(P, TOK_COLON)) return NULL;
        tmpl_node *v = model_tmpl_p_expr(P, true);
        if (!v || model_tmpl_p_push(P, &keys, k, 0) || model_tmpl_p_push(P, &vals, v, 0)) return NULL;
    }
    if (model_tmpl_p_expect(P, TOK_RBRACE)) return NULL;
    tmpl_node *n = model_tmpl_p_node(P, TN_DICT, line);
    if (!n) return NULL;
    n->kids = model_tmpl_p_finish(P, &keys, &n->nkids, NULL);
    n->kids2 = model_tmpl_p_finish(P, &vals, &n->nkids2, NULL);
    return n;
}

tmpl_node *model_tmpl_p_primary(P_t *P, bool with_ns)
{
    const tmpl_tok *k = tmpl_cur(P);
    tmpl_node *n;
    switch (k->type) {
    case TOK_NAME: {
        tmpl_adv(P);
        if (model_tmpl_p_is_name(k, "true") || model_tmpl_p_is_name(k, "True") ||
            model_tmpl_p_is_name(k, "false") || model_tmpl_p_is_name(k, "False")) {
            if (!(n = model_tmpl_p_node(P, TN_CONST, k->line))) return NULL;
            n->val = tmpl_bool(k->s[0] == 't' || k->s[0] == 'T');
            return n;
        }
        if (model_tmpl_p_is_name(k, "none") || model_tmpl_p_is_name(k, "None")) {
            if (!(n = model_tmpl_p_node(P, TN_CONST, k->line))) return NULL;
            n->val = tmpl_none();
            return n;
        }
        int32_t sym = model_tmpl_p_sym(P, k->s, k->len);
        if (sym < 0) return NULL;
        if (with_ns && tmpl_cur(P)->type == TOK_DOT) {
            tmpl_adv(P);
            const tmpl_tok *attr = tmpl_cur(P);
            if (model_tmpl_p_expect(P, TOK_NAME)) return NULL;
            if (!(n = model_tmpl_p_node(P, TN_NSREF, k->line))) return NULL;
            n->sym = sym;
            if (model_tmpl_p_str(P, attr->s, attr->len, &n->val)) return NULL;
            return n;
        }
        if (!(n = model_tmpl_p_node(P, TN_NAME, k->line))) return NULL;
        n->sym = sym;
        n->op = (uint8_t)model_tmpl_global_id(k->s, k->len);
        if (P->macro) {
            model_tmpl *t = P->t;
            if (sym == t->sym_varargs) P->macro->flags |= TNF_VARARGS;
            if (sym == t->sym_kwargs) P->macro->flags |= TNF_KWARGS;
            if (sym == t->sym_caller) P->macro->flags |= TNF_CALLER;
        }
        return n;
    }
    case TOK_STRING: {
        int line = k->line;
        /* adjacent literals concatenate: "a" "b" */
        size_t total = 0, j = P->i;
        while (P->toks->v[j].type == TOK_STRING) total += P->toks->v[j++].len;
        char *s = model_tmpl_p_alloc(P, total + 1);
        if (!s) return NULL;
        size_t m = 0;
        while (tmpl_cur(P)->type == TOK_STRING) {
            memcpy(s + m, tmpl_cur(P)->s, tmpl_cur(P)->len);
            m += tmpl_cur(P)->len;
            tmpl_adv(P);
        }
        if (!(n = model_tmpl_p_node(P, TN_CONST, line))) return NULL;
        if (model_tmpl_p_str(P, s, m, &n->val)) return NULL;
        return n;
    }
    case TOK_INT:
    case TOK_FLOAT:
        tmpl_adv(P);
        if (!(n = model_tmpl_p_node(P, TN_CONST, k->line))) return NULL;
        n->val = k->type == TOK_INT ? tmpl_int(k->i) : tmpl_float(k->f);
        return n;
    case TOK_LPAREN:
        tmpl_adv(P);
        if (!(n = model_tmpl_p_tuple(P, false, true, NULL, true, false))) return NULL;
        if (model_tmpl_p_expect(P, TOK_RPAREN)) return NULL;
        return n;
    case TOK_LBRACKET: return p_list(P);
    case TOK_LBRACE: return p_dict(P);
    default:
        if (k->type == TOK_EOF || k->type == TOK_VAR_END || k->type == TOK_BLOCK_END)
            return P_FAIL("unexpected '%s'", model_tmpl_tok_name(k->type));
        return P_FAIL("unexpected '%.*s'", (int)(k->len ? k->len : 1),
                      k->len ? k->s : model_tmpl_tok_name(k->type));
    }
}

static bool is_tuple_end(P_t *P, const char *extra_end)
{
    /* jinja2 3.1 passes its extra end rules to test_any() as one tuple, which never matches:
     * `for a, in x` is therefore a syntax error there, and so here */
    (void)extra_end;
    int t = tmpl_cur(P)->type;
    return t == TOK_VAR_END || t == TOK_BLOCK_END || t == TOK_RPAREN;
}

tmpl_node *model_tmpl_p_tuple(P_t *P, bool simplified, bool with_condexpr, const char *extra_end,
                              bool explicit_parens, bool with_ns)
{
    int line = tmpl_cur(P)->line;
    tmpl_nodes items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && model_tmpl_p_expect(P, TOK_COMMA)) return NULL;
        if (is_tuple_end(P, extra_end)) break;
        tmpl_node *e = simplified ? model_tmpl_p_primary(P, with_ns) : model_tmpl_p_expr(P, with_condexpr);
        if (!e || model_tmpl_p_push(P, &items, e, 0)) return NULL;
        if (tmpl_cur(P)->type == TOK_COMMA) is_tuple = true;
        else break;
        line = tmpl_cur(P)->line;
    }
    if (!is_tuple) {
        if (items.n) {
            return items.v[0];
        }
        if (!explicit_parens) {
            const tmpl_tok *k = tmpl_cur(P);
            return P_FAIL("Expected an expression, got '%s'", k->type == TOK_NAME ? "name" : model_tmpl_tok_name(k->type));
        }
    }
    tmpl_node *n = model_tmpl_p_node(P, TN_TUPLE, line);
    if (!n) return NULL;
    n->kids = model_tmpl_p_finish(P, &items, &n->nkids, NULL);
    return n;
}

static tmpl_node *p_subscribed(P_t *P)
{
    int line = tmpl_cur(P)->line;
    tmpl_node *parts[3] = {NULL, NULL, NULL};
    if (tmpl_cur(P)->type == TOK_COLON) {
        tmpl_adv(P);
    } else {
        tmpl_node *e = model_tmpl_p_expr(P, true);
        if (!e) return NULL;
        if (tmpl_cur(P)->type != TOK_COLON) return e;
        tmpl_adv(P);
        parts[0] = e;
    }
    int t = tmpl_cur(P)->type;
    if (t != TOK_COLON && t != TOK_RBRACKET && t != TOK_COMMA)
        if (!(parts[1] = model_tmpl_p_expr(P, true))) return NULL;
    if (tmpl_cur(P)->type == TOK_COLON) {
        tmpl_adv(P);
        t = tmpl_cur(P)->type;
        if (t != TOK_RBRACKET && t != TOK_COMMA)
            if (!(parts[2] = model_tmpl_p_expr(P, true))) return NULL;
    }
    tmpl_node *n = model_tmpl_p_node(P, TN_SLICE, line);
    if (!n) return NULL;
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return n;
}

static tmpl_node *p_subscript(P_t *P, tmpl_node *obj)
{
    const tmpl_tok *k = tmpl_cur(P);
    int line = k->line;
    tmpl_adv(P);
    tmpl_node *n;
    if (k->type == TOK_DOT) {
        const tmpl_tok *a = tmpl_cur(P);
        tmpl_adv(P);
        if (a->type == TOK_NAME) {
            if (!(n = model_tmpl_p_node(P, TN_GETATTR, line))) return NULL;
            n->a = obj;
            n->op = (uint8_t)model_tmpl_method_id(a->s, a->len);
            if (model_tmpl_p_str(P, a->s, a->len, &n->val)) return NULL;
            return n;
        }
        if (a->type != TOK_INT) return P_FAIL("expected name or number");
        tmpl_node *key = model_tmpl_p_node(P, TN_CONST, a->line);
        if (!key || !(n = model_tmpl_p_node(P, TN_GETITEM, line))) return NULL;
        key->val = tmpl_int(a->i);
        n->a = obj;
        n->b = key;
        return n;
    }
    /* [ */
    tmpl_nodes args = {0};
    while (tmpl_cur(P)->type != TOK_RBRACKET) {
        if (args.n && model_tmpl_p_expect(P, TOK_COMMA)) return NULL;
        tmpl_node *e = p_subscribed(P);
        if (!e || model_tmpl_p_push(P, &args, e, 0)) return NULL;
    }
    if (model_tmpl_p_expect(P, TOK_RBRACKET)) return NULL;
    if (!(n = model_tmpl_p_node(P, TN_GETITEM, line))) return NULL; /* x[] is x[()] */
    n->a = obj;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        tmpl_node *t = model_tmpl_p_node(P, TN_TUPLE, line);
        if (!t) return NULL;
        t->kids = model_tmpl_p_finish(P, &args, &t->nkids, NULL);
        n->b = t;
    }
    return n;
}

int model_tmpl_p_call_args(P_t *P, tmpl_node *n)
{
    if (model_tmpl_p_expect(P, TOK_LPAREN)) return -1;
    tmpl_nodes pos = {0}, kw = {0};
    bool need_comma = false;
    while (tmpl_cur(P)->type != TOK_RPAREN) {
        if (need_comma) {
            if (model_tmpl_p_expect(P, TOK_COMMA)) return -1;
            if (tmpl_cur(P)->type == TOK_RPAREN) break;
        }
        const tmpl_tok *k = tmpl_cur(P);
        if (k->type == TOK_MUL || k->type == TOK_POW) {
            bool star = k->type == TOK_MUL;
            tmpl_adv(P);
            if ((star && (n->c || n->b)) || (!star && n->b)) {
                model_tmpl_p_fail(P, "invalid syntax for function call expression");
                return -1;
            }
            tmpl_node *e = model_tmpl_p_expr(P, true);
            if (!e) return -1;
            if (star) n->c = e;
            else n->b = e;
            n->flags |= TNF_DYNARGS;
        } else if (k->type == TOK_NAME && tmpl_peek(P, 1)->type == TOK_ASSIGN) {
            if (n->b) {
                model_tmpl_p_fail(P, "invalid syntax for function call expression");
                return -1;
            }
            int32_t sym = model_tmpl_p_sym(P, k->s, k->len);
            tmpl_adv(P);
            tmpl_adv(P);
            tmpl_node *e = model_tmpl_p_expr(P, true);
            if (sym < 0 || !e || model_tmpl_p_push(P, &kw, e, sym)) return -1;
        } else {
            if (n->b || n->c || kw.n) {
                model_tmpl_p_fail(P, "invalid syntax for function call expression");
                return -1;
            }
            tmpl_node *e = model_tmpl_p_expr(P, true);
            if (!e || model_tmpl_p_push(P, &pos, e, 0)) return -1;
        }
        need_comma = true;
    }
    if (model_tmpl_p_expect(P, TOK_RPAREN)) return -1;
    n->kids = model_tmpl_p_finish(P, &pos, &n->nkids, NULL);
    n->kids2 = model_tmpl_p_finish(P, &kw, &n->nkids2, &n->syms);
    n->nsyms = n->nkids2;
    return 0;
}

static tmpl_node *p_call(P_t *P, tmpl_node *fn)
{
    tmpl_node *n = model_tmpl_p_node(P, TN_CALL, tmpl_cur(P)->line);
    if (!n) return NULL;
    n->a = fn;
    return model_tmpl_p_call_args(P, n) ? NULL : n;
}

static tmpl_node *p_postfix(P_t *P, tmpl_node *n)
{
    int links = 0;
    for (;;) {
        int t = tmpl_cur(P)->type;
        if (t != TOK_DOT && t != TOK_LBRACKET && t != TOK_LPAREN) return unchain(P, links, n);
        if (!chain(P, &links)) return unchain(P, links, NULL);
        n = t == TOK_LPAREN ? p_call(P, n) : p_subscript(P, n);
        if (!n) return unchain(P, links, NULL);
    }
}

/* name or dotted.name (filters and tests) */
static int dotted_name(P_t *P, char *buf, size_t cap)
{
    const tmpl_tok *k = tmpl_cur(P);
    if (model_tmpl_p_expect(P, TOK_NAME)) return -1;
    size_t m = 0;
    if (k->len >= cap) return model_tmpl_p_fail(P, "name too long");
    memcpy(buf, k->s, k->len);
    m = k->len;
    while (tmpl_cur(P)->type == TOK_DOT) {
        tmpl_adv(P);
        k = tmpl_cur(P);
        if (model_tmpl_p_expect(P, TOK_NAME)) return -1;
        if (m + 1 + k->len >= cap) return model_tmpl_p_fail(P, "name too long");
        buf[m++] = '.';
        memcpy(buf + m, k->s, k->len);
        m += k->len;
    }
    buf[m] = 0;
    return 0;
}

tmpl_node *model_tmpl_p_filter(P_t *P, tmpl_node *in, bool start_inline)
{
    int links = 0;
    while (tmpl_cur(P)->type == TOK_PIPE || start_inline) {
        if (!chain(P, &links)) return unchain(P, links, NULL);
        if (!start_inline) tmpl_adv(P);
        start_inline = false;
        int line = tmpl_cur(P)->line;
        char name[128];
        if (dotted_name(P, name, sizeof name)) return unchain(P, links, NULL);
        /* an unknown (-1) or unsupported (-2) filter is checked after parsing: inside an if, it
         * is an error only if it runs (model_tmpl_p_check_unknown) */
        int id = model_tmpl_filter_id(name, strlen(name));
        tmpl_node *n = model_tmpl_p_node(P, TN_FILTER, line);
        if (!n || model_tmpl_p_str(P, name, strlen(name), &n->val)) return unchain(P, links, NULL);
        n->a = in;
        n->sym = id;
        if (tmpl_cur(P)->type == TOK_LPAREN && model_tmpl_p_call_args(P, n)) return unchain(P, links, NULL);
        in = n;
    }
    return unchain(P, links, in);
}

static tmpl_node *p_test(P_t *P, tmpl_node *in)
{
    int line = tmpl_cur(P)->line;
    tmpl_adv(P); /* is */
    bool negated = false;
    if (model_tmpl_p_is_name(tmpl_cur(P), "not")) {
        tmpl_adv(P);
        negated = true;
    }
    char name[128];
    if (dotted_name(P, name, sizeof name)) return NULL;
    int id = model_tmpl_test_id(name, strlen(name));
    tmpl_node *n = model_tmpl_p_node(P, TN_TEST, line);
    if (!n || model_tmpl_p_str(P, name, strlen(name), &n->val)) return NULL;
    n->a = in;
    n->sym = id;
    const tmpl_tok *k = tmpl_cur(P);
    if (k->type == TOK_LPAREN) {
        if (model_tmpl_p_call_args(P, n)) return NULL;
    } else if ((k->type == TOK_NAME || k->type == TOK_STRING || k->type == TOK_INT ||
                k->type == TOK_FLOAT || k->type == TOK_LBRACKET || k->type == TOK_LBRACE) &&
               !model_tmpl_p_is_name(k, "else") && !model_tmpl_p_is_name(k, "or") &&
               !model_tmpl_p_is_name(k, "and")) {
        if (model_tmpl_p_is_name(k, "is")) return P_FAIL("You cannot chain multiple tests with is");
        tmpl_node *arg = model_tmpl_p_primary(P, false);
        if (!arg || !(arg = p_postfix(P, arg))) return NULL;
        n->kids = model_tmpl_p_alloc(P, sizeof *n->kids);
        if (!n->kids) return NULL;
        n->kids[0] = arg;
        n->nkids = 1;
    }
    if (negated) {
        tmpl_node *no = model_tmpl_p_node(P, TN_NOT, line);
        if (!no) return NULL;
        no->a = n;
        n = no;
    }
    return n;
}

static tmpl_node *p_filter_expr(P_t *P, tmpl_node *n)
{
    int links = 0;
    for (;;) {
        const tmpl_tok *k = tmpl_cur(P);
        bool is = model_tmpl_p_is_name(k, "is");
        if (k->type != TOK_PIPE && !is && k->type != TOK_LPAREN) return unchain(P, links, n);
        if (!chain(P, &links)) return unchain(P, links, NULL);
        if (k->type == TOK_PIPE) n = model_tmpl_p_filter(P, n, false);
        else if (is) n = p_test(P, n);
        else n = p_call(P, n);
        if (!n) return unchain(P, links, NULL);
    }
}
