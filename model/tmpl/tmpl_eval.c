/* model/tmpl/tmpl_eval.c — executing statements: output, if, for (with jinja2's scoping), set,
 * macros and call blocks, filter/with/block bodies.
 *
 * Scoping follows jinja2: `if` opens no scope; every for-loop iteration, macro call, call-block
 * body, with/filter/set-block body and block runs in a fresh child scope, so a `set` there is
 * gone afterwards (that is what namespace() is for). A scope is a counted object: a macro keeps
 * the scope it was defined in alive (it reads that scope's variables when called), everything
 * else drops it when the body ends. */
#include "model/tmpl/tmpl_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EX_BREAK 1
#define EX_CONTINUE 2

/* ---------------------------------------------------------------------------------- scopes */

tmpl_scope *model_tmpl_scope_new(tmpl_rt *r, tmpl_scope *parent)
{
    tmpl_scope *s = model_tmpl_obj_new(r, TMPL_SCOPE, sizeof *s);
    if (!s) return NULL;
    s->parent = parent;
    if (parent) parent->h.refs++;
    return s;
}

bool model_tmpl_scope_get(const tmpl_scope *s, int32_t sym, tmpl_val *v)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->syms[i] == sym) {
            *v = s->vals[i];
            return true;
        }
    return false;
}

int model_tmpl_scope_set(tmpl_rt *r, tmpl_scope *s, int32_t sym, tmpl_val v)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->syms[i] == sym) {
            tmpl_val old = s->vals[i];
            s->vals[i] = v;
            tmpl_decref(r, old);
            return 0;
        }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        size_t per = sizeof(int32_t) + sizeof(tmpl_val);
        if (model_tmpl_account(r, &s->h, s->cap * per, cap * per)) goto fail;
        int32_t *syms = realloc(s->syms, cap * sizeof *syms);
        if (syms) s->syms = syms;
        tmpl_val *vals = syms ? realloc(s->vals, cap * sizeof *vals) : NULL;
        if (vals) s->vals = vals;
        if (!syms || !vals) {
            model_tmpl_account(r, &s->h, cap * per, s->cap * per);
            model_tmpl_fail(r, "MemoryError", "out of memory");
            goto fail;
        }
        s->cap = cap;
    }
    s->syms[s->n] = sym;
    s->vals[s->n++] = v;
    return 0;
fail:
    tmpl_decref(r, v);
    return -1;
}

void model_tmpl_scope_clear(tmpl_rt *r, tmpl_scope *s)
{
    uint32_t n = s->n;
    s->n = 0;
    for (uint32_t i = 0; i < n; i++) tmpl_decref(r, s->vals[i]);
}

static void scope_drop(tmpl_rt *r, tmpl_scope *s)
{
    if (s) tmpl_decref_obj(r, &s->h);
}

/* ------------------------------------------------------------------------------ assignment */

static int assign(tmpl_rt *r, tmpl_scope *s, const tmpl_node *t, tmpl_val v);

static int unpack(tmpl_rt *r, tmpl_scope *s, const tmpl_node *t, tmpl_val v)
{
    if (v.kind != TMPL_LIST && v.kind != TMPL_STR && v.kind != TMPL_DICT) {
        int rc = model_tmpl_fail(r, "TypeError", "cannot unpack non-iterable %s object", model_tmpl_type_name(v));
        tmpl_decref(r, v);
        return rc;
    }
    tmpl_val items;
    int rc = model_tmpl_iter(r, v, &items);
    tmpl_decref(r, v);
    if (rc) return -1;
    tmpl_list *l = tmpl_l(items);
    if (l->n != t->nkids) {
        if (l->n > t->nkids) rc = model_tmpl_fail(r, "ValueError", "too many values to unpack (expected %u)", t->nkids);
        else rc = model_tmpl_fail(r, "ValueError", "not enough values to unpack (expected %u, got %zu)", t->nkids, l->n);
    }
    for (uint32_t i = 0; i < t->nkids && !rc; i++) {
        tmpl_incref(l->v[i]);
        rc = assign(r, s, t->kids[i], l->v[i]);
    }
    tmpl_decref(r, items);
    return rc;
}

/* Binds target t to v (consumed) in scope s. */
static int assign(tmpl_rt *r, tmpl_scope *s, const tmpl_node *t, tmpl_val v)
{
    switch (t->type) {
    case TN_NAME: return model_tmpl_scope_set(r, s, t->sym, v);
    case TN_TUPLE: return unpack(r, s, t, v);
    case TN_NSREF: {
        tmpl_val ns = tmpl_undef();
        for (tmpl_scope *p = s; p; p = p->parent)
            if (model_tmpl_scope_get(p, t->sym, &ns)) break;
        if (ns.kind != TMPL_NS) {
            tmpl_decref(r, v);
            return model_tmpl_fail(r, "TemplateRuntimeError", "cannot assign attribute on non-namespace object");
        }
        return model_tmpl_dict_set(r, ns, t->val, v); /* the name is immortal: no count */
    }
    }
    tmpl_decref(r, v);
    return model_tmpl_fail(r, "TemplateRuntimeError", "cannot assign to this target");
}

/* ---------------------------------------------------------------------------------- output */

static int emit(tmpl_rt *r, const char *s, size_t n)
{
    if (proto_buf_add(r->out, s, n)) return model_tmpl_fail_limit(r, "output size");
    return 0;
}

static int emit_val(tmpl_rt *r, tmpl_val v)
{
    if (v.kind == TMPL_STR) return emit(r, tmpl_s(v)->s, tmpl_s(v)->len);
    return model_tmpl_str_of(r, v, r->out);
}

/* Runs body in scope s with output captured into a new str (*out). */
static int capture(tmpl_rt *r, tmpl_scope *s, tmpl_node *const *body, uint32_t n, tmpl_val *out)
{
    proto_buf buf = {.max = r->lim.max_output};
    proto_buf *saved = r->out;
    r->out = &buf;
    int rc = model_tmpl_exec_body(r, s, body, n);
    r->out = saved;
    if (rc < 0) {
        proto_buf_deinit(&buf);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &buf, out);
}

static int capture_child(tmpl_rt *r, tmpl_scope *s, tmpl_node *const *body, uint32_t n, tmpl_val *out)
{
    tmpl_scope *c = model_tmpl_scope_new(r, s);
    if (!c) return -1;
    int rc = capture(r, c, body, n, out);
    scope_drop(r, c);
    return rc;
}

/* ----------------------------------------------------------------------------------- loops */

/* Runs the for node n over `it` (consumed) at recursion depth `depth`. */
static int run_loop(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, tmpl_val it, int depth)
{
    tmpl_val items;
    int rc = model_tmpl_iter(r, it, &items);
    tmpl_decref(r, it);
    if (rc) return -1;
    if (n->c) { /* for x in seq if cond: the condition sees the target, not `loop` */
        tmpl_val kept;
        tmpl_scope *fs = model_tmpl_scope_new(r, s);
        if (!fs || model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, &kept)) {
            scope_drop(r, fs);
            tmpl_decref(r, items);
            return -1;
        }
        tmpl_list *l = tmpl_l(items);
        for (size_t i = 0; i < l->n && !rc; i++) {
            model_tmpl_scope_clear(r, fs);
            tmpl_incref(l->v[i]);
            tmpl_val c;
            if ((rc = assign(r, fs, n->a, l->v[i])) || (rc = model_tmpl_eval(r, fs, n->c, &c))) break;
            if (model_tmpl_truthy(c)) {
                tmpl_incref(l->v[i]);
                rc = model_tmpl_list_push(r, kept, l->v[i]);
            }
            tmpl_decref(r, c);
        }
        scope_drop(r, fs);
        tmpl_decref(r, items);
        items = kept;
        if (rc) {
            tmpl_decref(r, items);
            return -1;
        }
    }
    tmpl_list *l = tmpl_l(items);
    if (l->n == 0) {
        tmpl_decref(r, items);
        if (!n->nkids2) return 0;
        tmpl_scope *es = model_tmpl_scope_new(r, s);
        if (!es) return -1;
        rc = model_tmpl_exec_body(r, es, n->kids2, n->nkids2);
        scope_drop(r, es);
        return rc;
    }
    tmpl_loop *lp = model_tmpl_obj_new(r, TMPL_LOOP, sizeof *lp);
    if (!lp) {
        tmpl_decref(r, items);
        return -1;
    }
    lp->seq = items; /* the loop owns the items now */
    lp->n = l->n;
    lp->depth = depth;
    lp->node = n;
    lp->scope = s;
    s->h.refs++;
    tmpl_val loopv = tmpl_obj_val(&lp->h);
    tmpl_scope *is = NULL;
    rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        if ((rc = tmpl_step(r, 1))) break;
        if (is && is->h.refs == 1) {
            model_tmpl_scope_clear(r, is);
        } else {
            scope_drop(r, is); /* captured by a macro: leave it to the macro */
            if (!(is = model_tmpl_scope_new(r, s))) {
                rc = -1;
                break;
            }
        }
        lp->i = i;
        tmpl_incref(l->v[i]);
        if ((rc = assign(r, is, n->a, l->v[i]))) break;
        tmpl_incref(loopv);
        if ((rc = model_tmpl_scope_set(r, is, r->t->sym_loop, loopv))) break;
        rc = model_tmpl_exec_body(r, is, n->kids, n->nkids);
        if (rc == EX_BREAK) {
            rc = 0;
            break;
        }
        if (rc == EX_CONTINUE) rc = 0;
        if (rc) break;
    }
    scope_drop(r, is);
    tmpl_decref(r, loopv);
    return rc;
}

int model_tmpl_loop_call(tmpl_rt *r, tmpl_loop *l, const tmpl_args *a, tmpl_val *out)
{
    if (!(l->node->flags & TNF_RECURSIVE))
        return model_tmpl_fail(r, "TypeError", "Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (a->npos != 1 || a->nkw)
        return model_tmpl_fail(r, "TypeError", "loop() takes exactly one argument (%zu given)", a->npos + a->nkw);
    if (r->depth >= r->lim.max_depth) return model_tmpl_fail_limit(r, "recursion depth");
    proto_buf buf = {.max = r->lim.max_output};
    proto_buf *saved = r->out;
    r->out = &buf;
    r->depth++;
    tmpl_incref(a->pos[0]);
    int rc = run_loop(r, l->scope, l->node, a->pos[0], l->depth + 1);
    r->depth--;
    r->out = saved;
    if (rc < 0) {
        proto_buf_deinit(&buf);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &buf, out);
}

/* ---------------------------------------------------------------------------------- macros */

int model_tmpl_macro_call(tmpl_rt *r, tmpl_func *f, const tmpl_args *a, tmpl_val *out)
{
    const tmpl_node *m = f->node;
    const model_tmpl *t = r->t;
    const char *mname = m->type == TN_MACRO ? t->names[m->sym] : "caller";
    if (r->depth >= r->lim.max_depth) return model_tmpl_fail_limit(r, "macro recursion depth");
    uint32_t np = m->nsyms, nd = m->nkids2, first_default = np - nd;
    bool used_small[16], *used = a->nkw <= 16 ? used_small : calloc(a->nkw, sizeof *used);
    if (!used) return model_tmpl_fail(r, "MemoryError", "out of memory");
    memset(used, 0, a->nkw <= 16 ? sizeof used_small : 0);
    tmpl_scope *ms = model_tmpl_scope_new(r, f->scope);
    int rc = ms ? 0 : -1;
    bool caller_param = false;
    for (uint32_t i = 0; i < np && !rc; i++) {
        int32_t sym = m->syms[i];
        if (sym == t->sym_caller) caller_param = true;
        tmpl_val v;
        bool have = false;
        if (i < a->npos) {
            v = a->pos[i];
            tmpl_incref(v);
            have = true;
        } else {
            for (size_t j = 0; j < a->nkw; j++)
                if (!used[j] && !strcmp(a->kw_names[j], t->names[sym])) {
                    used[j] = true;
                    v = a->kw[j];
                    tmpl_incref(v);
                    have = true;
                    break;
                }
        }
        if (!have) {
            if (i >= first_default) {
                if ((rc = model_tmpl_eval(r, ms, m->kids2[i - first_default], &v))) break;
            } else {
                v = model_tmpl_undef_name(t->name_vals[sym]);
            }
        }
        rc = model_tmpl_scope_set(r, ms, sym, v);
    }
    if (!rc && m->type == TN_MACRO && (m->flags & TNF_CALLER) && !caller_param) {
        tmpl_val c = tmpl_undef();
        bool have = false;
        for (size_t j = 0; j < a->nkw; j++)
            if (!used[j] && !strcmp(a->kw_names[j], "caller")) {
                used[j] = true;
                c = a->kw[j];
                tmpl_incref(c);
                have = true;
                break;
            }
        if (!have) rc = model_tmpl_undef_msg(r, TMPL_UH_MSG, "No caller defined", &c);
        if (!rc) rc = model_tmpl_scope_set(r, ms, t->sym_caller, c);
    }
    if (!rc) { /* keyword arguments left over */
        tmpl_val kw = tmpl_undef();
        if ((m->flags & TNF_KWARGS) && (rc = model_tmpl_dict_new(r, TMPL_DICT, 0, &kw)) == 0) {
            tmpl_val name;
            for (size_t j = 0; j < a->nkw && !rc; j++)
                if (!used[j]) {
                    if ((rc = model_tmpl_str_new(r, a->kw_names[j], strlen(a->kw_names[j]), &name))) break;
                    tmpl_incref(a->kw[j]);
                    rc = model_tmpl_dict_set(r, kw, name, a->kw[j]);
                }
            if (!rc) rc = model_tmpl_scope_set(r, ms, t->sym_kwargs, kw);
            else tmpl_decref(r, kw);
        } else if (!(m->flags & TNF_KWARGS)) {
            for (size_t j = 0; j < a->nkw; j++)
                if (!used[j]) {
                    rc = model_tmpl_fail(r, "TypeError", "macro '%s' takes no keyword argument '%s'", mname, a->kw_names[j]);
                    break;
                }
        }
    }
    if (!rc) { /* positional arguments left over */
        if (m->flags & TNF_VARARGS) {
            tmpl_val va;
            size_t extra = a->npos > np ? a->npos - np : 0;
            if (!(rc = model_tmpl_list_new(r, TMPL_SEQ_TUPLE, extra, &va))) {
                for (size_t j = np; j < a->npos; j++) {
                    tmpl_incref(a->pos[j]);
                    model_tmpl_list_push(r, va, a->pos[j]);
                }
                rc = model_tmpl_scope_set(r, ms, t->sym_varargs, va);
            }
        } else if (a->npos > np) {
            rc = model_tmpl_fail(r, "TypeError", "macro '%s' takes not more than %u argument(s)", mname, np);
        }
    }
    if (used != used_small) free(used);
    if (!rc) {
        r->depth++;
        rc = capture(r, ms, m->kids, m->nkids, out);
        r->depth--;
    }
    scope_drop(r, ms);
    return rc < 0 ? -1 : 0;
}

/* {% call(args) fn(...) %}body{% endcall %}: fn is called with caller = the body. */
static int exec_callblock(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n)
{
    tmpl_val caller, res;
    if (model_tmpl_func_new(r, TMPL_FN_CALLER, 0, tmpl_none(), &caller)) return -1;
    tmpl_fn(caller)->node = n;
    tmpl_fn(caller)->scope = s;
    s->h.refs++;
    int rc = model_tmpl_eval_call_with(r, s, n->a, "caller", caller, &res);
    tmpl_decref(r, caller);
    if (rc) return -1;
    rc = emit_val(r, res);
    tmpl_decref(r, res);
    return rc;
}

/* ------------------------------------------------------------------------------ statements */

static int exec_node(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n)
{
    if (tmpl_step(r, 1)) return -1;
    r->line = n->line;
    tmpl_val v, res;
    int rc;
    switch (n->type) {
    case TN_TEXT: return emit(r, tmpl_s(n->val)->s, tmpl_s(n->val)->len);
    case TN_PRINT:
        if (model_tmpl_eval(r, s, n->a, &v)) return -1;
        rc = emit_val(r, v);
        tmpl_decref(r, v);
        return rc;
    case TN_IF:
        if (model_tmpl_eval(r, s, n->a, &v)) return -1;
        rc = model_tmpl_truthy(v);
        tmpl_decref(r, v);
        return rc ? model_tmpl_exec_body(r, s, n->kids, n->nkids) : model_tmpl_exec_body(r, s, n->kids2, n->nkids2);
    case TN_FOR:
        if (model_tmpl_eval(r, s, n->b, &v)) return -1;
        return run_loop(r, s, n, v, 1);
    case TN_SET:
        if (model_tmpl_eval(r, s, n->b, &v)) return -1;
        r->line = n->line;
        return assign(r, s, n->a, v);
    case TN_SETBLOCK:
        if (capture_child(r, s, n->kids, n->nkids, &v)) return -1;
        if (n->b) {
            rc = model_tmpl_filter_chain(r, s, n->b, v, &res);
            tmpl_decref(r, v);
            if (rc) return -1;
            v = res;
        }
        r->line = n->line;
        return assign(r, s, n->a, v);
    case TN_FILTERBLK:
        if (capture_child(r, s, n->kids, n->nkids, &v)) return -1;
        rc = model_tmpl_filter_chain(r, s, n->b, v, &res);
        tmpl_decref(r, v);
        if (rc) return -1;
        rc = emit_val(r, res);
        tmpl_decref(r, res);
        return rc;
    case TN_MACRO:
        if (model_tmpl_func_new(r, TMPL_FN_MACRO, 0, tmpl_none(), &v)) return -1;
        tmpl_fn(v)->node = n;
        tmpl_fn(v)->scope = s;
        s->h.refs++;
        return model_tmpl_scope_set(r, s, n->sym, v);
    case TN_CALLBLOCK: return exec_callblock(r, s, n);
    case TN_WITH: {
        tmpl_scope *ws = model_tmpl_scope_new(r, s);
        if (!ws) return -1;
        rc = 0;
        for (uint32_t i = 0; i < n->nkids2 && !rc; i++) {
            if ((rc = model_tmpl_eval(r, s, n->kids2[i], &v))) break;
            rc = assign(r, ws, n->a->kids[i], v);
        }
        if (!rc) rc = model_tmpl_exec_body(r, ws, n->kids, n->nkids);
        scope_drop(r, ws);
        return rc;
    }
    case TN_SCOPED: {
        tmpl_scope *bs = model_tmpl_scope_new(r, s);
        if (!bs) return -1;
        rc = model_tmpl_exec_body(r, bs, n->kids, n->nkids);
        scope_drop(r, bs);
        return rc;
    }
    case TN_BREAK: return EX_BREAK;
    case TN_CONTINUE: return EX_CONTINUE;
    }
    return model_tmpl_fail(r, "TemplateRuntimeError", "unknown statement");
}

int model_tmpl_exec_body(tmpl_rt *r, tmpl_scope *s, tmpl_node *const *body, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int rc = exec_node(r, s, body[i]);
        if (rc) return rc;
    }
    return 0;
}
