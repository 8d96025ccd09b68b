/* model/tmpl/tmpl_parse.c — tokens to the statement tree (jinja2's parser: subparse, the statement
 * tags, assignment targets), plus the compiled template's storage and symbol table.
 *
 * Every node, array and constant is allocated into the template (t->allocs) and freed with it;
 * a failed compile frees everything the same way, so error paths never leak. */
#include "model/tmpl/tmpl_parse.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef tmpl_parser P_t;

static int vfail(P_t *P, const char *kind, const char *fmt, va_list ap)
{
    if (P->err[0]) return -1; /* keep the first error */
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(P->err, P->errlen, "%s: %s (line %d)", kind, msg, tmpl_cur(P)->line);
    return -1;
}

int model_tmpl_p_fail(P_t *P, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(P, "TemplateSyntaxError", fmt, ap);
    va_end(ap);
    return -1;
}

int model_tmpl_p_fail_kind(P_t *P, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(P, kind, fmt, ap);
    va_end(ap);
    return -1;
}

void *model_tmpl_p_alloc(P_t *P, size_t n)
{
    model_tmpl *t = P->t;
    if (t->nallocs == t->cap_allocs) {
        size_t cap = t->cap_allocs ? t->cap_allocs * 2 : 256;
        void **a = realloc(t->allocs, cap * sizeof *a);
        if (!a) goto oom;
        t->allocs = a;
        t->cap_allocs = cap;
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) goto oom;
    t->allocs[t->nallocs++] = p;
    return p;
oom:
    model_tmpl_p_fail(P, "out of memory");
    return NULL;
}

tmpl_node *model_tmpl_p_node(P_t *P, int type, int line)
{
    tmpl_node *n = model_tmpl_p_alloc(P, sizeof *n);
    if (!n) return NULL;
    n->type = (uint8_t)type;
    n->line = line;
    n->sym = -1;
    return n;
}

int model_tmpl_p_push(P_t *P, tmpl_nodes *a, tmpl_node *n, int32_t sym)
{
    if (a->n == a->cap) {
        uint32_t cap = a->cap ? a->cap * 2 : 4;
        tmpl_node **v = model_tmpl_p_alloc(P, cap * sizeof *v);
        int32_t *s = model_tmpl_p_alloc(P, cap * sizeof *s);
        if (!v || !s) return -1;
        if (a->n) {
            memcpy(v, a->v, a->n * sizeof *v);
            memcpy(s, a->syms, a->n * sizeof *s);
        }
        a->v = v;
        a->syms = s;
        a->cap = cap;
    }
    a->syms[a->n] = sym;
    a->v[a->n++] = n;
    return 0;
}

tmpl_node **model_tmpl_p_finish(P_t *P, tmpl_nodes *a, uint32_t *n, int32_t **syms)
{
    (void)P;
    *n = a->n;
    if (syms) *syms = a->syms;
    return a->v;
}

/* --------------------------------------------------------------------------------- symbols */

/* Strings' hashes start from a random value drawn once a process (set before main: every
 * template and render of the process hashes alike), then a finalizer folds every bit into the
 * low ones a table uses. Dict keys come from clients (a request's tools turn into dicts): with a
 * fixed FNV-1a, keys that collide are cheap to make, and 60,000 of them in a 4 MB body took 20 s
 * of a request thread (each insert walks one probe chain). */
static uint64_t g_hash_seed = 0xcbf29ce484222325ull;

__attribute__((constructor)) static void hash_seed_init(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        g_hash_seed ^= v;
    else
        g_hash_seed ^=
            (uint64_t)(uintptr_t)&v ^ (uint64_t)time(NULL); /* early boot: still varies */
}

uint32_t model_tmpl_str_hash(const char *s, size_t n)
{
    uint64_t h = g_hash_seed; /* FNV-1a, 64-bit */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return (uint32_t)h ? (uint32_t)h : 1;
}

int32_t model_tmpl_sym_find(const model_tmpl *t, const char *name, size_t len)
{
    if (!t->name_idx_cap) return -1;
    uint32_t mask = t->name_idx_cap - 1;
    for (uint32_t i = model_tmpl_str_hash(name, len) & mask;; i = (i + 1) & mask) {
        uint32_t slot = t->name_idx[i];
        if (!slot) return -1;
        uint32_t id = slot - 1;
        if (t->name_len[id] == len && !memcmp(t->names[id], name, len)) return (int32_t)id;
    }
}

static int sym_index_grow(model_tmpl *t)
{
    uint32_t cap = t->name_idx_cap ? t->name_idx_cap * 2 : 64;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return -1;
    for (uint32_t id = 0; id < t->nnames; id++) {
        uint32_t i = model_tmpl_str_hash(t->names[id], t->name_len[id]) & (cap - 1);
        while (idx[i]) i = (i + 1) & (cap - 1);
        idx[i] = id + 1;
    }
    free(t->name_idx);
    t->name_idx = idx;
    t->name_idx_cap = cap;
    return 0;
}

int32_t model_tmpl_p_sym(P_t *P, const char *s, size_t n)
{
    model_tmpl *t = P->t;
    int32_t id = model_tmpl_sym_find(t, s, n);
    if (id >= 0) return id;
    if ((t->nnames + 1) * 2 > t->name_idx_cap && sym_index_grow(t)) goto oom;
    if (t->nnames == 0 || (t->nnames >= 16 && (t->nnames & (t->nnames - 1)) == 0)) { /* 16, 32, 64... */
        uint32_t cap = t->nnames ? t->nnames * 2 : 16;
        char **names = realloc(t->names, cap * sizeof *names);
        if (!names) goto oom;
        t->names = names;
        tmpl_val *vals = realloc(t->name_vals, cap * sizeof *vals);
        if (!vals) goto oom;
        t->name_vals = vals;
        uint32_t *lens = realloc(t->name_len, cap * sizeof *lens);
        if (!lens) goto oom;
        t->name_len = lens;
    }
    tmpl_val v;
    if (model_tmpl_p_str(P, s, n, &v)) return -1;
    id = (int32_t)t->nnames++;
    t->names[id] = tmpl_s(v)->s;
    t->name_vals[id] = v;
    t->name_len[id] = (uint32_t)n;
    uint32_t mask = t->name_idx_cap - 1;
    uint32_t i = model_tmpl_str_hash(s, n) & mask;
    while (t->name_idx[i]) i = (i + 1) & mask;
    t->name_idx[i] = (uint32_t)id + 1;
    return id;
oom:
    model_tmpl_p_fail(P, "out of memory");
    return -1;
}

int model_tmpl_p_str(P_t *P, const char *s, size_t n, tmpl_val *out)
{
    tmpl_str *o = model_tmpl_p_alloc(P, sizeof *o + n + 1);
    if (!o) return -1;
    o->h.refs = TMPL_IMMORTAL;
    o->h.kind = TMPL_STR;
    o->len = n;
    o->cap = n + 1;
    memcpy(o->s, s, n);
    o->s[n] = 0;
    o->ncp = proto_utf8_count(s, n);
    o->hash = model_tmpl_str_hash(s, n);
    *out = tmpl_obj_val(&o->h);
    return 0;
}

bool model_tmpl_p_is_name(const tmpl_tok *k, const char *name)
{
    size_t n = strlen(name);
    return k->type == TOK_NAME && k->len == n && !memcmp(k->s, name, n);
}

static void describe(const tmpl_tok *k, char *buf, size_t cap)
{
    if (k->type == TOK_NAME) snprintf(buf, cap, "%.*s", (int)k->len, k->s);
    else snprintf(buf, cap, "%s", model_tmpl_tok_name(k->type));
}

int model_tmpl_p_expect(P_t *P, int type)
{
    const tmpl_tok *k = tmpl_cur(P);
    if (k->type == type) {
        tmpl_adv(P);
        return 0;
    }
    char got[64];
    describe(k, got, sizeof got);
    if (k->type == TOK_EOF)
        return model_tmpl_p_fail(P, "unexpected end of template, expected '%s'.", model_tmpl_tok_name(type));
    return model_tmpl_p_fail(P, "expected token '%s', got '%s'", model_tmpl_tok_name(type), got);
}

/* ------------------------------------------------------------------------------ statements */

static int subparse(P_t *P, const char *const *end, tmpl_nodes *body);

static bool at_end_name(P_t *P, const char *const *end)
{
    for (; end && *end; end++)
        if (model_tmpl_p_is_name(tmpl_cur(P), *end)) return true;
    return false;
}

/* Body of a block statement up to one of `end` (left as the current token). */
static tmpl_node **statements(P_t *P, const char *const *end, uint32_t *n)
{
    if (tmpl_cur(P)->type == TOK_COLON) tmpl_adv(P);
    if (model_tmpl_p_expect(P, TOK_BLOCK_END)) return NULL;
    if (++P->depth > TMPL_MAX_NEST) {
        model_tmpl_p_fail(P, "statements nested too deeply (more than %d levels)", TMPL_MAX_NEST);
        return NULL;
    }
    tmpl_nodes body = {0};
    if (subparse(P, end, &body)) return NULL;
    P->depth--;
    if (tmpl_cur(P)->type == TOK_EOF) {
        char want[256];
        size_t m = 0;
        for (const char *const *e = end; *e && m < sizeof want - 40; e++)
            m += (size_t)snprintf(want + m, sizeof want - m, "%s'%s'", e == end ? "" : " or ", *e);
        model_tmpl_p_fail(P, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
        return NULL;
    }
    static tmpl_node *empty_body[1]; /* an empty body is n == 0 with a non-NULL array */
    tmpl_node **v = model_tmpl_p_finish(P, &body, n, NULL);
    return v ? v : empty_body;
}

static bool assignable(const tmpl_node *n, bool ns_ok)
{
    if (n->type == TN_NAME) return true;
    if (n->type == TN_NSREF) return ns_ok;
    if (n->type == TN_TUPLE) {
        for (uint32_t i = 0; i < n->nkids; i++)
            if (!assignable(n->kids[i], ns_ok)) return false;
        return true;
    }
    return false;
}

static tmpl_node *assign_target(P_t *P, const char *extra_end, bool with_ns)
{
    tmpl_node *n = model_tmpl_p_tuple(P, true, true, extra_end, false, with_ns);
    if (!n) return NULL;
    if (!assignable(n, with_ns)) {
        static const char *what[] = {[TN_CONST] = "const", [TN_LIST] = "list", [TN_DICT] = "dict",
                                     [TN_GETATTR] = "getattr", [TN_GETITEM] = "getitem"};
        const char *w = n->type < sizeof what / sizeof *what && what[n->type] ? what[n->type] : "expression";
        model_tmpl_p_fail(P, "can't assign to '%s'", w);
        return NULL;
    }
    return n;
}

static int signature(P_t *P, tmpl_node *n)
{
    if (model_tmpl_p_expect(P, TOK_LPAREN)) return -1;
    tmpl_nodes params = {0}, defs = {0};
    while (tmpl_cur(P)->type != TOK_RPAREN) {
        if (params.n && model_tmpl_p_expect(P, TOK_COMMA)) return -1;
        const tmpl_tok *k = tmpl_cur(P);
        if (model_tmpl_p_expect(P, TOK_NAME)) return -1;
        int32_t sym = model_tmpl_p_sym(P, k->s, k->len);
        if (sym < 0) return -1;
        if (tmpl_cur(P)->type == TOK_ASSIGN) {
            tmpl_adv(P);
            tmpl_node *d = model_tmpl_p_expr(P, true);
            if (!d || model_tmpl_p_push(P, &defs, d, sym)) return -1;
        } else if (defs.n) {
            return model_tmpl_p_fail(P, "non-default argument follows default argument");
        }
        if (model_tmpl_p_push(P, &params, NULL, sym)) return -1;
    }
    if (model_tmpl_p_expect(P, TOK_RPAREN)) return -1;
    uint32_t np;
    model_tmpl_p_finish(P, &params, &np, &n->syms);
    n->nsyms = np;
    n->kids2 = model_tmpl_p_finish(P, &defs, &n->nkids2, NULL);
    return 0;
}

/* Parses a body as a function (macro or caller): own varargs/kwargs/caller flags, no loop. */
static tmpl_node **function_body(P_t *P, tmpl_node *fn, const char *const *end, uint32_t *n)
{
    tmpl_node *outer = P->macro;
    P->macro = fn;
    tmpl_node **body = statements(P, end, n);
    P->macro = outer;
    return body;
}

static tmpl_node *p_for(P_t *P, int line, int *loops)
{
    static const char *const end_body[] = {"endfor", "else", NULL}, *const end_else[] = {"endfor", NULL};
    tmpl_node *n = model_tmpl_p_node(P, TN_FOR, line);
    if (!n || !(n->a = assign_target(P, "in", false))) return NULL;
    if (!model_tmpl_p_is_name(tmpl_cur(P), "in")) {
        char got[64];
        describe(tmpl_cur(P), got, sizeof got);
        model_tmpl_p_fail(P, "expected token 'in', got '%s'", got);
        return NULL;
    }
    tmpl_adv(P);
    if (!(n->b = model_tmpl_p_tuple(P, false, false, "recursive", false, false))) return NULL;
    if (model_tmpl_p_is_name(tmpl_cur(P), "if")) {
        tmpl_adv(P);
        if (!(n->c = model_tmpl_p_expr(P, true))) return NULL;
    }
    if (model_tmpl_p_is_name(tmpl_cur(P), "recursive")) {
        tmpl_adv(P);
        n->flags |= TNF_RECURSIVE;
    }
    (*loops)++;
    n->kids = statements(P, end_body, &n->nkids);
    (*loops)--;
    if (!n->kids) return NULL;
    if (model_tmpl_p_is_name(tmpl_cur(P), "else")) {
        tmpl_adv(P);
        if (!(n->kids2 = statements(P, end_else, &n->nkids2))) return NULL;
    }
    tmpl_adv(P); /* endfor */
    return n;
}

static tmpl_node *p_if(P_t *P, int line)
{
    static const char *const end_body[] = {"elif", "else", "endif", NULL}, *const end_else[] = {"endif", NULL};
    tmpl_node *top = model_tmpl_p_node(P, TN_IF, line), *n = top;
    if (!top) return NULL;
    for (;;) {
        if (!(n->a = model_tmpl_p_tuple(P, false, false, NULL, false, false))) return NULL;
        if (!(n->kids = statements(P, end_body, &n->nkids))) return NULL;
        if (model_tmpl_p_is_name(tmpl_cur(P), "elif")) {
            tmpl_node *e = model_tmpl_p_node(P, TN_IF, tmpl_cur(P)->line);
            tmpl_adv(P);
            if (!e || !(n->kids2 = model_tmpl_p_alloc(P, sizeof *n->kids2))) return NULL;
            n->kids2[0] = e;
            n->nkids2 = 1;
            n = e;
            continue;
        }
        if (model_tmpl_p_is_name(tmpl_cur(P), "else")) {
            tmpl_adv(P);
            if (!(n->kids2 = statements(P, end_else, &n->nkids2))) return NULL;
        }
        tmpl_adv(P); /* endif */
        return top;
    }
}

static tmpl_node *p_statement(P_t *P, int *loops)
{
    static const char *const end_set[] = {"endset", NULL}, *const end_macro[] = {"endmacro", NULL},
                              *const end_call[] = {"endcall", NULL}, *const end_filter[] = {"endfilter", NULL},
                              *const end_with[] = {"endwith", NULL}, *const end_block[] = {"endblock", NULL},
                              *const end_gen[] = {"endgeneration", NULL};
    const tmpl_tok *k = tmpl_cur(P);
    int line = k->line;
    if (k->type != TOK_NAME) {
        model_tmpl_p_fail(P, "tag name expected");
        return NULL;
    }
    tmpl_node *n;
    if (model_tmpl_p_is_name(k, "for")) {
        tmpl_adv(P);
        return p_for(P, line, loops);
    }
    if (model_tmpl_p_is_name(k, "if")) {
        tmpl_adv(P);
        return p_if(P, line);
    }
    if (model_tmpl_p_is_name(k, "set")) {
        tmpl_adv(P);
        tmpl_node *target = assign_target(P, NULL, true);
        if (!target) return NULL;
        if (tmpl_cur(P)->type == TOK_ASSIGN) {
            tmpl_adv(P);
            if (!(n = model_tmpl_p_node(P, TN_SET, line))) return NULL;
            n->a = target;
            if (!(n->b = model_tmpl_p_tuple(P, false, true, NULL, false, false))) return NULL;
            return n;
        }
        if (!(n = model_tmpl_p_node(P, TN_SETBLOCK, line))) return NULL;
        n->a = target;
        if (tmpl_cur(P)->type == TOK_PIPE && !(n->b = model_tmpl_p_filter(P, NULL, false))) return NULL;
        if (!(n->kids = statements(P, end_set, &n->nkids))) return NULL;
        tmpl_adv(P);
        return n;
    }
    if (model_tmpl_p_is_name(k, "macro")) {
        tmpl_adv(P);
        const tmpl_tok *name = tmpl_cur(P);
        if (model_tmpl_p_expect(P, TOK_NAME)) return NULL;
        if (!(n = model_tmpl_p_node(P, TN_MACRO, line))) return NULL;
        if ((n->sym = model_tmpl_p_sym(P, name->s, name->len)) < 0 || signature(P, n)) return NULL;
        int saved = *loops;
        *loops = 0;
        n->kids = function_body(P, n, end_macro, &n->nkids);
        *loops = saved;
        if (!n->kids) return NULL;
        tmpl_adv(P);
        return n;
    }
    if (model_tmpl_p_is_name(k, "call")) {
        tmpl_adv(P);
        if (!(n = model_tmpl_p_node(P, TN_CALLBLOCK, line))) return NULL;
        n->sym = P->t->sym_caller;
        if (tmpl_cur(P)->type == TOK_LPAREN && signature(P, n)) return NULL;
        if (!(n->a = model_tmpl_p_expr(P, true))) return NULL;
        if (n->a->type != TN_CALL) {
            model_tmpl_p_fail(P, "expected call");
            return NULL;
        }
        int saved = *loops;
        *loops = 0;
        n->kids = function_body(P, n, end_call, &n->nkids);
        *loops = saved;
        if (!n->kids) return NULL;
        tmpl_adv(P);
        return n;
    }
    if (model_tmpl_p_is_name(k, "filter")) {
        tmpl_adv(P);
        if (!(n = model_tmpl_p_node(P, TN_FILTERBLK, line))) return NULL;
        if (!(n->b = model_tmpl_p_filter(P, NULL, true))) return NULL;
        if (!(n->kids = statements(P, end_filter, &n->nkids))) return NULL;
        tmpl_adv(P);
        return n;
    }
    if (model_tmpl_p_is_name(k, "with")) {
        tmpl_adv(P);
        if (!(n = model_tmpl_p_node(P, TN_WITH, line))) return NULL;
        tmpl_nodes targets = {0}, vals = {0};
        while (tmpl_cur(P)->type != TOK_BLOCK_END) {
            if (targets.n && model_tmpl_p_expect(P, TOK_COMMA)) return NULL;
            tmpl_node *t = assign_target(P, NULL, false);
            if (!t || model_tmpl_p_expect(P, TOK_ASSIGN)) return NULL;
            tmpl_node *v = model_tmpl_p_expr(P, true);
            if (!v || model_tmpl_p_push(P, &targets, t, 0) || model_tmpl_p_push(P, &vals, v, 0)) return NULL;
        }
        n->c = NULL;
        n->kids2 = model_tmpl_p_finish(P, &vals, &n->nkids2, NULL);
        uint32_t nt;
        tmpl_node **tv = model_tmpl_p_finish(P, &targets, &nt, NULL);
        /* targets go in a tuple node so that unpacking works as for `set` */
        if (!(n->a = model_tmpl_p_node(P, TN_TUPLE, line))) return NULL;
        n->a->kids = tv;
        n->a->nkids = nt;
        if (!(n->kids = statements(P, end_with, &n->nkids))) return NULL;
        tmpl_adv(P);
        return n;
    }
    if (model_tmpl_p_is_name(k, "block") || model_tmpl_p_is_name(k, "generation")) {
        bool block = k->s[0] == 'b';
        tmpl_adv(P);
        const tmpl_tok *name = tmpl_cur(P);
        if (block) {
            if (model_tmpl_p_expect(P, TOK_NAME)) return NULL;
            if (model_tmpl_p_is_name(tmpl_cur(P), "scoped")) tmpl_adv(P);
            if (model_tmpl_p_is_name(tmpl_cur(P), "required")) tmpl_adv(P);
        }
        if (!(n = model_tmpl_p_node(P, TN_SCOPED, line))) return NULL;
        if (!(n->kids = statements(P, block ? end_block : end_gen, &n->nkids))) return NULL;
        tmpl_adv(P);
        if (block && tmpl_cur(P)->type == TOK_NAME && tmpl_cur(P)->len == name->len &&
            !memcmp(tmpl_cur(P)->s, name->s, name->len))
            tmpl_adv(P);
        return n;
    }
    if (model_tmpl_p_is_name(k, "print")) {
        tmpl_adv(P);
        tmpl_nodes items = {0};
        while (tmpl_cur(P)->type != TOK_BLOCK_END) {
            if (items.n && model_tmpl_p_expect(P, TOK_COMMA)) return NULL;
            tmpl_node *e = model_tmpl_p_expr(P, true);
            if (!e || model_tmpl_p_push(P, &items, e, 0)) return NULL;
        }
        /* several expressions print one after the other: a scope-less body of prints */
        if (!(n = model_tmpl_p_node(P, TN_IF, line))) return NULL; /* if true: prints */
        if (!(n->a = model_tmpl_p_node(P, TN_CONST, line))) return NULL;
        n->a->val = tmpl_bool(true);
        if (!(n->kids = model_tmpl_p_alloc(P, (items.n ? items.n : 1) * sizeof *n->kids))) return NULL;
        for (uint32_t i = 0; i < items.n; i++) {
            tmpl_node *p = model_tmpl_p_node(P, TN_PRINT, line);
            if (!p) return NULL;
            p->a = items.v[i];
            n->kids[i] = p;
        }
        n->nkids = items.n;
        return n;
    }
    if (model_tmpl_p_is_name(k, "break") || model_tmpl_p_is_name(k, "continue")) {
        bool brk = k->s[0] == 'b';
        if (!*loops) {
            model_tmpl_p_fail(P, "'%s' outside loop", brk ? "break" : "continue");
            return NULL;
        }
        tmpl_adv(P);
        return model_tmpl_p_node(P, brk ? TN_BREAK : TN_CONTINUE, line);
    }
    static const char *const unsupported[] = {"extends", "include", "import", "from", "autoescape", NULL};
    for (const char *const *u = unsupported; *u; u++)
        if (model_tmpl_p_is_name(k, *u)) {
            model_tmpl_p_fail(P, "the '%s' tag is not supported in chat templates", *u);
            return NULL;
        }
    model_tmpl_p_fail(P, "Encountered unknown tag '%.*s'.", (int)k->len, k->s);
    return NULL;
}

static int subparse(P_t *P, const char *const *end, tmpl_nodes *body)
{
    for (;;) {
        const tmpl_tok *k = tmpl_cur(P);
        tmpl_node *n = NULL;
        switch (k->type) {
        case TOK_EOF: return 0;
        case TOK_DATA:
            if (!(n = model_tmpl_p_node(P, TN_TEXT, k->line))) return -1;
            if (model_tmpl_p_str(P, k->s, k->len, &n->val)) return -1;
            tmpl_adv(P);
            break;
        case TOK_VAR_BEGIN: {
            tmpl_adv(P);
            if (!(n = model_tmpl_p_node(P, TN_PRINT, k->line))) return -1;
            if (!(n->a = model_tmpl_p_tuple(P, false, true, NULL, false, false))) return -1;
            if (model_tmpl_p_expect(P, TOK_VAR_END)) return -1;
            break;
        }
        case TOK_BLOCK_BEGIN:
            tmpl_adv(P);
            if (at_end_name(P, end)) return 0;
            if (!(n = p_statement(P, &P->loops))) return -1;
            if (model_tmpl_p_expect(P, TOK_BLOCK_END)) return -1;
            break;
        default: {
            char got[64];
            describe(k, got, sizeof got);
            return model_tmpl_p_fail(P, "unexpected '%s'", got);
        }
        }
        if (model_tmpl_p_push(P, body, n, 0)) return -1;
    }
}

/* Unknown filters and tests: jinja2 rejects them when compiling, except inside an if (test,
 * bodies) or an inline if, where it defers the error to the moment they run; for loops, macros
 * and the other bodies with their own frame start afresh. */
static int check_unknown(tmpl_parser *P, const tmpl_node *n, bool soft);

static int check_list(tmpl_parser *P, tmpl_node *const *v, uint32_t k, bool soft)
{
    for (uint32_t i = 0; i < k; i++)
        if (v[i] && check_unknown(P, v[i], soft)) return -1;
    return 0;
}

static int check_unknown(tmpl_parser *P, const tmpl_node *n, bool soft)
{
    if ((n->type == TN_FILTER || n->type == TN_TEST) && n->sym < 0 && !soft) {
        const char *name = tmpl_s(n->val)->s;
        snprintf(P->err, P->errlen,
                 n->sym == -2 ? "TemplateSyntaxError: the '%s' filter is not supported (line %d)"
                 : n->type == TN_FILTER ? "TemplateAssertionError: No filter named '%s'. (line %d)"
                                        : "TemplateAssertionError: No test named '%s'. (line %d)",
                 name, n->line);
        return -1;
    }
    bool inner = false, all_soft = false;
    switch (n->type) {
    case TN_IF:
    case TN_CONDEXPR: all_soft = true; break;
    case TN_FOR: /* the iterable is evaluated outside the loop's frame */
        if (n->b && check_unknown(P, n->b, soft)) return -1;
        if (n->a && check_unknown(P, n->a, false)) return -1;
        if (n->c && check_unknown(P, n->c, false)) return -1;
        return check_list(P, n->kids, n->nkids, false) || check_list(P, n->kids2, n->nkids2, false) ? -1 : 0;
    case TN_CALLBLOCK:
        if (n->a && check_unknown(P, n->a, soft)) return -1;
        return check_list(P, n->kids2, n->nkids2, false) || check_list(P, n->kids, n->nkids, false) ? -1 : 0;
    case TN_WITH:
        if (check_list(P, n->kids2, n->nkids2, soft)) return -1;
        return check_list(P, n->kids, n->nkids, false);
    case TN_MACRO:
    case TN_SETBLOCK:
    case TN_FILTERBLK:
    case TN_SCOPED: inner = true; break;
    }
    bool s = all_soft ? true : inner ? false : soft;
    if ((n->a && check_unknown(P, n->a, n->type == TN_SETBLOCK ? soft : s)) || (n->b && check_unknown(P, n->b, s)) ||
        (n->c && check_unknown(P, n->c, s)))
        return -1;
    return check_list(P, n->kids, n->nkids, s) || check_list(P, n->kids2, n->nkids2, s) ? -1 : 0;
}

int model_tmpl_parse(model_tmpl *t, const tmpl_toks *toks, char *err, size_t errlen)
{
    tmpl_parser P = {.t = t, .toks = toks, .err = err, .errlen = errlen};
    err[0] = 0;
    if ((t->sym_loop = model_tmpl_p_sym(&P, "loop", 4)) < 0 ||
        (t->sym_varargs = model_tmpl_p_sym(&P, "varargs", 7)) < 0 ||
        (t->sym_kwargs = model_tmpl_p_sym(&P, "kwargs", 6)) < 0 ||
        (t->sym_caller = model_tmpl_p_sym(&P, "caller", 6)) < 0)
        return -1;
    tmpl_nodes body = {0};
    if (subparse(&P, NULL, &body)) return -1;
    t->body = model_tmpl_p_finish(&P, &body, &t->nbody, NULL);
    return check_list(&P, t->body, t->nbody, false);
}
