/* model/tmpl/tmpl_value.c — the values of a render: allocation against the render's limits,
 * reference counts, strings, lists, dicts, undefined values, and Python's truthiness, equality,
 * ordering, hashing, len() and iteration.
 *
 * Freeing is iterative: an object whose count drops to zero goes on r->pending and the outermost
 * free drains that list, so releasing a deeply nested value never recurses on the C stack. */
#include "model/tmpl/tmpl_int.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------- life cycle */

static void link_live(tmpl_rt *r, tmpl_obj *o)
{
    o->prev = &r->live;
    o->next = r->live.next;
    r->live.next->prev = o;
    r->live.next = o;
}

static void unlink_live(tmpl_obj *o)
{
    o->prev->next = o->next;
    o->next->prev = o->prev;
}

void *model_tmpl_obj_new(tmpl_rt *r, int kind, size_t size)
{
    if (size > r->lim.max_memory || r->mem > r->lim.max_memory - size) {
        model_tmpl_fail_limit(r, "memory");
        return NULL;
    }
    tmpl_obj *o = calloc(1, size);
    if (!o) {
        model_tmpl_fail(r, "MemoryError", "out of memory");
        return NULL;
    }
    o->refs = 1;
    o->kind = (uint8_t)kind;
    o->bytes = size;
    r->mem += size;
    if (r->mem > r->peak) r->peak = r->mem;
    link_live(r, o);
    return o;
}

int model_tmpl_account(tmpl_rt *r, tmpl_obj *o, size_t old_extra, size_t new_extra)
{
    if (new_extra > old_extra) {
        size_t add = new_extra - old_extra;
        if (add > r->lim.max_memory || r->mem > r->lim.max_memory - add)
            return model_tmpl_fail_limit(r, "memory");
        r->mem += add;
        o->bytes += add;
        if (r->mem > r->peak) r->peak = r->mem;
    } else {
        r->mem -= old_extra - new_extra;
        o->bytes -= old_extra - new_extra;
    }
    return 0;
}

/* Releases what o owns (children are decref'ed: they may join r->pending). */
static void release(tmpl_rt *r, tmpl_obj *o, bool children)
{
    switch (o->kind) {
    case TMPL_LIST: {
        tmpl_list *l = (tmpl_list *)o;
        if (children)
            for (size_t i = 0; i < l->n; i++) tmpl_decref(r, l->v[i]);
        free(l->v);
        free(l->deferred);
        break;
    }
    case TMPL_DICT:
    case TMPL_NS: {
        tmpl_dict *d = (tmpl_dict *)o;
        if (children)
            for (size_t i = 0; i < d->n; i++) {
                tmpl_decref(r, d->k[i]);
                tmpl_decref(r, d->v[i]);
            }
        free(d->k);
        free(d->v);
        free(d->idx);
        break;
    }
    case TMPL_FUNC: {
        tmpl_func *f = (tmpl_func *)o;
        if (children) {
            tmpl_decref(r, f->self);
            if (f->scope) tmpl_decref_obj(r, &f->scope->h);
        }
        break;
    }
    case TMPL_LOOP: {
        tmpl_loop *l = (tmpl_loop *)o;
        if (children) {
            tmpl_decref(r, l->seq);
            if (l->changed_set) tmpl_decref(r, l->changed_last);
            if (l->scope) tmpl_decref_obj(r, &l->scope->h);
        }
        break;
    }
    case TMPL_SCOPE: {
        tmpl_scope *s = (tmpl_scope *)o;
        if (children) {
            for (uint32_t i = 0; i < s->n; i++) tmpl_decref(r, s->vals[i]);
            if (s->parent) tmpl_decref_obj(r, &s->parent->h);
        }
        free(s->syms);
        free(s->vals);
        break;
    }
    case TMPL_UNDEF: /* never an object kind */
    default: break;
    }
}

void model_tmpl_obj_free(tmpl_rt *r, tmpl_obj *o)
{
    unlink_live(o);
    o->next = r->pending;
    r->pending = o;
    if (r->freeing) return;
    r->freeing = true;
    while ((o = r->pending)) {
        r->pending = o->next;
        release(r, o, true);
        r->mem -= o->bytes;
        free(o);
    }
    r->freeing = false;
}

size_t model_tmpl_sweep(tmpl_rt *r)
{
    size_t n = 0;
    /* whatever is still live (cycles through namespaces, temporaries of a failed render) goes
     * without touching counts: everything it points to is in this list too */
    tmpl_obj *o = r->live.next;
    while (o != &r->live) {
        tmpl_obj *next = o->next;
        release(r, o, false);
        r->mem -= o->bytes;
        free(o);
        o = next;
        n++;
    }
    r->live.next = r->live.prev = &r->live;
    return n;
}

/* --------------------------------------------------------------------------------- strings */

int model_tmpl_str_new(tmpl_rt *r, const char *s, size_t n, tmpl_val *out)
{
    if (n > r->lim.max_output) return model_tmpl_fail_limit(r, "string length");
    tmpl_str *o = model_tmpl_obj_new(r, TMPL_STR, sizeof *o + n + 1);
    if (!o) return -1;
    o->len = n;
    o->cap = n + 1;
    o->ncp = SIZE_MAX;
    if (n) memcpy(o->s, s, n);
    o->s[n] = 0;
    *out = tmpl_obj_val(&o->h);
    return 0;
}

int model_tmpl_str_from_buf(tmpl_rt *r, proto_buf *b, tmpl_val *out)
{
    int rc = model_tmpl_str_new(r, b->p ? b->p : "", b->len, out);
    proto_buf_deinit(b);
    return rc;
}

int model_tmpl_str_cat(tmpl_rt *r, tmpl_val a, const char *s, size_t n, tmpl_val *out)
{
    tmpl_str *x = tmpl_s(a);
    if (x->len + n > r->lim.max_output || n > r->lim.max_output) {
        tmpl_decref(r, a);
        return model_tmpl_fail_limit(r, "string length");
    }
    size_t len = x->len + n;
    if (x->h.refs == 1) { /* sole owner: append in place (amortized growth) */
        if (len + 1 > x->cap) {
            size_t cap = x->cap * 2 > len + 1 ? x->cap * 2 : len + 1;
            if (model_tmpl_account(r, &x->h, x->cap, cap)) {
                tmpl_decref(r, a);
                return -1;
            }
            tmpl_str *y = realloc(x, sizeof *y + cap);
            if (!y) {
                model_tmpl_account(r, &x->h, cap, x->cap);
                tmpl_decref(r, a);
                return model_tmpl_fail(r, "MemoryError", "out of memory");
            }
            y->h.prev->next = &y->h;
            y->h.next->prev = &y->h;
            y->cap = cap;
            x = y;
        }
        memcpy(x->s + x->len, s, n);
        x->len = len;
        x->s[len] = 0;
        x->ncp = SIZE_MAX;
        x->hash = 0;
        *out = tmpl_obj_val(&x->h);
        return 0;
    }
    tmpl_str *o = model_tmpl_obj_new(r, TMPL_STR, sizeof *o + len + 1);
    if (!o) {
        tmpl_decref(r, a);
        return -1;
    }
    o->len = len;
    o->cap = len + 1;
    o->ncp = SIZE_MAX;
    memcpy(o->s, x->s, x->len);
    memcpy(o->s + x->len, s, n);
    o->s[len] = 0;
    tmpl_decref(r, a);
    *out = tmpl_obj_val(&o->h);
    return 0;
}

size_t model_tmpl_str_ncp(tmpl_str *s)
{
    if (s->ncp == SIZE_MAX) s->ncp = proto_utf8_count(s->s, s->len);
    return s->ncp;
}

/* ------------------------------------------------------------------------ lists and dicts */

int model_tmpl_list_new(tmpl_rt *r, int seq, size_t cap, tmpl_val *out)
{
    tmpl_list *l = model_tmpl_obj_new(r, TMPL_LIST, sizeof *l);
    if (!l) return -1;
    l->h.sub = (uint8_t)seq;
    *out = tmpl_obj_val(&l->h);
    if (cap) {
        if (cap > r->lim.max_memory / sizeof(tmpl_val) || model_tmpl_account(r, &l->h, 0, cap * sizeof(tmpl_val))) {
            tmpl_decref(r, *out);
            return r->ek ? -1 : model_tmpl_fail_limit(r, "memory");
        }
        l->v = malloc(cap * sizeof(tmpl_val));
        if (!l->v) {
            tmpl_decref(r, *out);
            return model_tmpl_fail(r, "MemoryError", "out of memory");
        }
        l->cap = cap;
    }
    return 0;
}

int model_tmpl_list_push(tmpl_rt *r, tmpl_val list, tmpl_val item)
{
    tmpl_list *l = tmpl_l(list);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > r->lim.max_memory / sizeof(tmpl_val) ||
            model_tmpl_account(r, &l->h, l->cap * sizeof(tmpl_val), cap * sizeof(tmpl_val))) {
            tmpl_decref(r, item);
            return r->ek ? -1 : model_tmpl_fail_limit(r, "memory");
        }
        tmpl_val *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            model_tmpl_account(r, &l->h, cap * sizeof(tmpl_val), l->cap * sizeof(tmpl_val));
            tmpl_decref(r, item);
            return model_tmpl_fail(r, "MemoryError", "out of memory");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = item;
    return 0;
}

int model_tmpl_dict_new(tmpl_rt *r, int kind, size_t cap, tmpl_val *out)
{
    tmpl_dict *d = model_tmpl_obj_new(r, kind, sizeof *d);
    if (!d) return -1;
    *out = tmpl_obj_val(&d->h);
    if (!cap) return 0;
    size_t bytes = cap * 2 * sizeof(tmpl_val);
    if (cap > r->lim.max_memory / (2 * sizeof(tmpl_val)) || model_tmpl_account(r, &d->h, 0, bytes)) {
        tmpl_decref(r, *out);
        return r->ek ? -1 : model_tmpl_fail_limit(r, "memory");
    }
    d->k = malloc(cap * sizeof *d->k);
    d->v = malloc(cap * sizeof *d->v);
    if (!d->k || !d->v) {
        tmpl_decref(r, *out); /* frees k and v, and the accounted bytes with the object */
        return model_tmpl_fail(r, "MemoryError", "out of memory");
    }
    d->cap = cap;
    return 0;
}

/* Dicts up to this size are searched linearly: cheaper than hashing for chat messages. */
#define DICT_LINEAR_MAX 8

int model_tmpl_hash(tmpl_rt *r, tmpl_val v, uint32_t *h, int depth)
{
    if (depth > r->lim.max_depth) return model_tmpl_fail_limit(r, "nesting depth");
    switch (v.kind) {
    case TMPL_NONE: *h = 0x9e3779b9u; return 0;
    case TMPL_BOOL:
    case TMPL_INT: {
        uint64_t x = (uint64_t)v.u.i * 0x9E3779B97F4A7C15ull;
        *h = (uint32_t)(x >> 32) | 1;
        return 0;
    }
    case TMPL_FLOAT:
        if (v.u.f == floor(v.u.f) && tmpl_f_fits_i64(v.u.f))
            return model_tmpl_hash(r, tmpl_int((int64_t)v.u.f), h, depth); /* 1.0 == 1 */
        {
            uint64_t bits;
            double f = v.u.f;
            memcpy(&bits, &f, sizeof bits);
            *h = (uint32_t)(bits ^ bits >> 32) | 1;
        }
        return 0;
    case TMPL_STR: *h = tmpl_str_hash(tmpl_s(v)); return 0;
    case TMPL_LIST:
        if (v.u.o->sub == TMPL_SEQ_TUPLE) {
            tmpl_list *l = tmpl_l(v);
            uint32_t acc = 0x345678u;
            for (size_t i = 0; i < l->n; i++) {
                uint32_t e;
                if (model_tmpl_hash(r, l->v[i], &e, depth + 1)) return -1;
                acc = (acc ^ e) * 1000003u;
            }
            *h = acc | 1;
            return 0;
        }
        break;
    case TMPL_FUNC:
    case TMPL_LOOP:
    case TMPL_NS: *h = (uint32_t)((uintptr_t)v.u.o >> 4) | 1; return 0;
    case TMPL_UNDEF: *h = 0x12345u; return 0;
    }
    return model_tmpl_fail(r, "TypeError", "unhashable type: '%s'", model_tmpl_type_name(v));
}

static int index_insert(tmpl_dict *d, size_t entry, uint32_t h)
{
    size_t mask = d->idx_cap - 1;
    size_t i = h & mask;
    while (d->idx[i]) i = (i + 1) & mask;
    d->idx[i] = (uint32_t)entry + 1;
    return 0;
}

static int index_build(tmpl_rt *r, tmpl_dict *d, size_t cap)
{
    if (model_tmpl_account(r, &d->h, d->idx_cap * sizeof(uint32_t), cap * sizeof(uint32_t))) return -1;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) {
        model_tmpl_account(r, &d->h, cap * sizeof(uint32_t), d->idx_cap * sizeof(uint32_t));
        return model_tmpl_fail(r, "MemoryError", "out of memory");
    }
    free(d->idx);
    d->idx = idx;
    d->idx_cap = cap;
    for (size_t e = 0; e < d->n; e++) {
        uint32_t h;
        if (model_tmpl_hash(r, d->k[e], &h, 0)) return -1;
        index_insert(d, e, h);
    }
    return 0;
}

static bool key_eq_fast(tmpl_val a, tmpl_val b, int *res)
{
    if (a.kind == TMPL_STR && b.kind == TMPL_STR) {
        tmpl_str *x = tmpl_s(a), *y = tmpl_s(b);
        *res = x == y || (x->len == y->len && !memcmp(x->s, y->s, x->len));
        return true;
    }
    if (a.kind == TMPL_STR || b.kind == TMPL_STR) {
        *res = 0;
        return true;
    }
    return false;
}

/* Entry index of key in d, -1 absent, -2 error. */
static long dict_find(tmpl_rt *r, tmpl_dict *d, tmpl_val key)
{
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++) {
            int eq;
            if (!key_eq_fast(key, d->k[i], &eq) && (eq = model_tmpl_eq(r, key, d->k[i], 0)) < 0) return -2;
            if (eq) return (long)i;
        }
        return -1;
    }
    uint32_t h;
    if (model_tmpl_hash(r, key, &h, 0)) return -2;
    size_t mask = d->idx_cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t slot = d->idx[i];
        if (!slot) return -1;
        int eq;
        if (!key_eq_fast(key, d->k[slot - 1], &eq) && (eq = model_tmpl_eq(r, key, d->k[slot - 1], 0)) < 0)
            return -2;
        if (eq) return (long)slot - 1;
    }
}

int model_tmpl_dict_get(tmpl_rt *r, tmpl_dict *d, tmpl_val key, tmpl_val *val)
{
    long i = dict_find(r, d, key);
    if (i == -2) return -1;
    if (i < 0) return 0;
    *val = d->v[i];
    return 1;
}

int model_tmpl_dict_get_str(tmpl_dict *d, const char *s, size_t n, tmpl_val *val)
{
    for (size_t i = 0; i < d->n; i++) {
        if (d->k[i].kind != TMPL_STR) continue;
        tmpl_str *k = tmpl_s(d->k[i]);
        if (k->len == n && !memcmp(k->s, s, n)) {
            *val = d->v[i];
            return 1;
        }
    }
    return 0;
}

int model_tmpl_dict_set(tmpl_rt *r, tmpl_val dv, tmpl_val key, tmpl_val val)
{
    tmpl_dict *d = tmpl_d(dv);
    uint32_t h;
    if (model_tmpl_hash(r, key, &h, 0)) goto fail;
    long i = dict_find(r, d, key);
    if (i == -2) goto fail;
    if (i >= 0) { /* Python keeps the first key object and position, replaces the value */
        tmpl_decref(r, d->v[i]);
        d->v[i] = val;
        tmpl_decref(r, key);
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (model_tmpl_account(r, &d->h, d->cap * 2 * sizeof(tmpl_val), cap * 2 * sizeof(tmpl_val))) goto fail;
        tmpl_val *k = realloc(d->k, cap * sizeof *k);
        if (k) d->k = k;
        tmpl_val *v = k ? realloc(d->v, cap * sizeof *v) : NULL;
        if (v) d->v = v;
        if (!k || !v) {
            model_tmpl_account(r, &d->h, cap * 2 * sizeof(tmpl_val), d->cap * 2 * sizeof(tmpl_val));
            model_tmpl_fail(r, "MemoryError", "out of memory");
            goto fail;
        }
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    if (d->n > DICT_LINEAR_MAX) {
        if (d->n * 2 > d->idx_cap) {
            size_t cap = 32;
            while (cap < d->n * 4) cap *= 2;
            if (index_build(r, d, cap)) return -1; /* the entry is in: the dict owns it */
        } else {
            index_insert(d, d->n - 1, h);
        }
    }
    return 0;
fail:
    tmpl_decref(r, key);
    tmpl_decref(r, val);
    return -1;
}

int model_tmpl_func_new(tmpl_rt *r, int fn, int id, tmpl_val self, tmpl_val *out)
{
    tmpl_func *f = model_tmpl_obj_new(r, TMPL_FUNC, sizeof *f);
    if (!f) return -1;
    f->h.sub = (uint8_t)fn;
    f->id = id;
    f->self = self;
    tmpl_incref(self);
    *out = tmpl_obj_val(&f->h);
    return 0;
}

/* ------------------------------------------------------------------------------ undefined */

tmpl_val model_tmpl_undef_name(tmpl_val name)
{
    tmpl_val u = {.kind = TMPL_UNDEF, .hint = TMPL_UH_NAME};
    if (name.kind == TMPL_STR) {
        u.u.o = name.u.o;
        tmpl_incref(name);
    }
    return u;
}

static int owner_code(tmpl_val obj)
{
    return obj.kind == TMPL_LIST ? 16 + obj.u.o->sub : obj.kind;
}

static const char *owner_type(int code)
{
    if (code >= 16) {
        static const char *seq[] = {"list", "tuple", "generator", "list_reverseiterator",
                                    "dict_keys", "dict_values", "dict_items", "range"};
        return code - 16 < 8 ? seq[code - 16] : "list";
    }
    switch (code) {
    case TMPL_NONE: return "NoneType";
    case TMPL_BOOL: return "bool";
    case TMPL_INT: return "int";
    case TMPL_FLOAT: return "float";
    case TMPL_STR: return "str";
    case TMPL_DICT: return "dict";
    case TMPL_NS: return "jinja2.utils.Namespace";
    case TMPL_FUNC: return "jinja2.runtime.Macro";
    case TMPL_LOOP: return "jinja2.runtime.LoopContext";
    }
    return "object";
}

int model_tmpl_undef_attr(tmpl_rt *r, tmpl_val obj, tmpl_val name, tmpl_val *out)
{
    if (name.kind == TMPL_STR) {
        *out = (tmpl_val){.kind = TMPL_UNDEF, .hint = TMPL_UH_ATTR, .owner = (uint8_t)owner_code(obj), .u.o = name.u.o};
        tmpl_incref(name);
        return 0;
    }
    proto_buf b = {.max = 4096};
    const char *t = obj.kind == TMPL_NONE ? "None" : owner_type(owner_code(obj));
    proto_buf_printf(&b, obj.kind == TMPL_NONE ? "%s has no element " : "%s object has no element ", t);
    model_tmpl_repr(r, name, &b, 0);
    int rc = model_tmpl_undef_msg(r, TMPL_UH_MSG, b.p ? b.p : "", out);
    proto_buf_deinit(&b);
    return rc;
}

int model_tmpl_undef_msg(tmpl_rt *r, int hint, const char *msg, tmpl_val *out)
{
    tmpl_val s;
    if (model_tmpl_str_new(r, msg, strlen(msg), &s)) return -1;
    *out = (tmpl_val){.kind = TMPL_UNDEF, .hint = (uint8_t)hint, .u.o = s.u.o};
    return 0;
}

int model_tmpl_undef_fail(tmpl_rt *r, tmpl_val u)
{
    tmpl_str *s = u.u.o ? (tmpl_str *)u.u.o : NULL;
    switch (u.hint) {
    case TMPL_UH_NAME:
        if (s) return model_tmpl_fail(r, "UndefinedError", "'%s' is undefined", s->s);
        break;
    case TMPL_UH_ATTR:
        if (s) {
            if (u.owner == TMPL_NONE)
                return model_tmpl_fail(r, "UndefinedError", "'None' has no attribute '%s'", s->s);
            return model_tmpl_fail(r, "UndefinedError", "'%s object' has no attribute '%s'",
                                   owner_type(u.owner), s->s);
        }
        break;
    case TMPL_UH_ITEM:
    case TMPL_UH_MSG:
        if (s) return model_tmpl_fail(r, "UndefinedError", "%s", s->s);
        break;
    case TMPL_UH_UNSAFE:
        if (s) return model_tmpl_fail(r, "SecurityError", "%s", s->s);
        break;
    }
    return model_tmpl_fail(r, "UndefinedError", "a value is undefined");
}

/* ------------------------------------------------------------------------ Python semantics */

bool model_tmpl_truthy(tmpl_val v)
{
    switch (v.kind) {
    case TMPL_UNDEF:
    case TMPL_NONE: return false;
    case TMPL_BOOL:
    case TMPL_INT: return v.u.i != 0;
    case TMPL_FLOAT: return v.u.f != 0.0;
    case TMPL_STR: return tmpl_s(v)->len != 0;
    case TMPL_LIST: return tmpl_is_iter(v) || tmpl_l(v)->n != 0;
    case TMPL_DICT: return tmpl_d(v)->n != 0;
    default: return true;
    }
}

const char *model_tmpl_type_name(tmpl_val v)
{
    switch (v.kind) {
    case TMPL_UNDEF: return "Undefined";
    case TMPL_LIST: return owner_type(owner_code(v));
    case TMPL_NS: return "Namespace";
    case TMPL_LOOP: return "LoopContext";
    case TMPL_FUNC:
        switch (v.u.o->sub) {
        case TMPL_FN_MACRO:
        case TMPL_FN_CALLER: return "Macro";
        case TMPL_FN_METHOD: return "builtin_function_or_method";
        case TMPL_FN_CYCLER: return "Cycler";
        case TMPL_FN_JOINER: return "Joiner";
        default: return "function";
        }
    default: return owner_type(v.kind);
    }
}

/* Compares numbers exactly as Python does (int vs float without rounding the int). */
static int num_cmp(tmpl_val a, tmpl_val b)
{
    if (a.kind != TMPL_FLOAT && b.kind != TMPL_FLOAT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
    if (a.kind == TMPL_FLOAT && b.kind == TMPL_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) return 2; /* unordered */
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    }
    bool swap = a.kind != TMPL_FLOAT; /* make a the float */
    double f = swap ? b.u.f : a.u.f;
    int64_t i = swap ? a.u.i : b.u.i;
    int c;
    if (isnan(f)) return 2;
    if (f >= 9223372036854775808.0) c = 1;
    else if (f < -9223372036854775808.0) c = -1;
    else {
        double fl = floor(f);
        int64_t fi = (int64_t)fl;
        if (fi != i) c = fi < i ? -1 : 1;
        else c = f > fl ? 1 : 0;
    }
    return swap ? -c : c;
}

static bool seq_comparable(tmpl_val a, tmpl_val b)
{
    int x = a.u.o->sub, y = b.u.o->sub;
    if (x != y) return false;
    return x == TMPL_SEQ_LIST || x == TMPL_SEQ_TUPLE || x == TMPL_SEQ_RANGE || x == TMPL_SEQ_VALUES ||
           x == TMPL_SEQ_KEYS || x == TMPL_SEQ_ITEMS;
}

int model_tmpl_eq(tmpl_rt *r, tmpl_val a, tmpl_val b, int depth)
{
    if (depth > r->lim.max_depth) return model_tmpl_fail_limit(r, "nesting depth");
    if (tmpl_is_num(a) && tmpl_is_num(b)) return num_cmp(a, b) == 0;
    if (a.kind != b.kind) return 0;
    switch (a.kind) {
    case TMPL_UNDEF:
    case TMPL_NONE: return 1;
    case TMPL_STR: {
        tmpl_str *x = tmpl_s(a), *y = tmpl_s(b);
        return x == y || (x->len == y->len && !memcmp(x->s, y->s, x->len));
    }
    case TMPL_LIST: {
        if (a.u.o == b.u.o) return 1;
        if (!seq_comparable(a, b)) return 0;
        tmpl_list *x = tmpl_l(a), *y = tmpl_l(b);
        if (x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            int e = model_tmpl_eq(r, x->v[i], y->v[i], depth + 1);
            if (e <= 0) return e;
        }
        return 1;
    }
    case TMPL_DICT: {
        if (a.u.o == b.u.o) return 1;
        tmpl_dict *x = tmpl_d(a), *y = tmpl_d(b);
        if (x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            tmpl_val other;
            int f = model_tmpl_dict_get(r, y, x->k[i], &other);
            if (f <= 0) return f;
            int e = model_tmpl_eq(r, x->v[i], other, depth + 1);
            if (e <= 0) return e;
        }
        return 1;
    }
    default: return a.u.o == b.u.o;
    }
}

int model_tmpl_lt(tmpl_rt *r, tmpl_val a, tmpl_val b)
{
    if (a.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, a);
    if (b.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, b);
    if (tmpl_is_num(a) && tmpl_is_num(b)) return num_cmp(a, b) == -1;
    if (a.kind == TMPL_STR && b.kind == TMPL_STR) {
        tmpl_str *x = tmpl_s(a), *y = tmpl_s(b);
        size_t m = x->len < y->len ? x->len : y->len;
        int c = memcmp(x->s, y->s, m); /* UTF-8 byte order is code point order */
        return c < 0 || (c == 0 && x->len < y->len);
    }
    if (a.kind == TMPL_LIST && b.kind == TMPL_LIST && a.u.o->sub == b.u.o->sub &&
        (a.u.o->sub == TMPL_SEQ_LIST || a.u.o->sub == TMPL_SEQ_TUPLE)) {
        tmpl_list *x = tmpl_l(a), *y = tmpl_l(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            int e = model_tmpl_eq(r, x->v[i], y->v[i], 0);
            if (e < 0) return -1;
            if (!e) return model_tmpl_lt(r, x->v[i], y->v[i]);
        }
        return x->n < y->n;
    }
    return model_tmpl_fail(r, "TypeError", "'<' not supported between instances of '%s' and '%s'",
                           model_tmpl_type_name(a), model_tmpl_type_name(b));
}

int model_tmpl_len(tmpl_rt *r, tmpl_val v, size_t *n)
{
    switch (v.kind) {
    case TMPL_UNDEF: *n = 0; return 0;
    case TMPL_STR: *n = model_tmpl_str_ncp(tmpl_s(v)); return 0;
    case TMPL_LIST:
        if (!tmpl_is_iter(v)) {
            *n = tmpl_l(v)->n;
            return 0;
        }
        break;
    case TMPL_DICT: *n = tmpl_d(v)->n; return 0;
    case TMPL_LOOP: *n = tmpl_lp(v)->n; return 0;
    }
    return model_tmpl_fail(r, "TypeError", "object of type '%s' has no len()", model_tmpl_type_name(v));
}

int model_tmpl_gen_exhausted(tmpl_rt *r, tmpl_list *l)
{
    if (!l->deferred) return 0;
    int rc = model_tmpl_fail_again(r, l->deferred);
    free(l->deferred);
    l->deferred = NULL;
    return rc;
}

int model_tmpl_iter(tmpl_rt *r, tmpl_val v, tmpl_val *out)
{
    switch (v.kind) {
    case TMPL_UNDEF: return model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out);
    case TMPL_LIST: {
        tmpl_list *l = tmpl_l(v);
        if (!tmpl_is_iter(v)) {
            tmpl_incref(v);
            *out = v;
            return 0;
        }
        size_t n = l->n - l->pos;
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, n, out)) return -1;
        for (size_t i = l->pos; i < l->n; i++) {
            tmpl_incref(l->v[i]);
            model_tmpl_list_push(r, *out, l->v[i]);
        }
        l->pos = l->n;
        if (model_tmpl_gen_exhausted(r, l)) {
            tmpl_decref(r, *out);
            return -1;
        }
        return tmpl_step(r, n);
    }
    case TMPL_DICT: {
        tmpl_dict *d = tmpl_d(v);
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, d->n, out)) return -1;
        for (size_t i = 0; i < d->n; i++) {
            tmpl_incref(d->k[i]);
            model_tmpl_list_push(r, *out, d->k[i]);
        }
        return tmpl_step(r, d->n);
    }
    case TMPL_STR: {
        tmpl_str *s = tmpl_s(v);
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, model_tmpl_str_ncp(s), out)) return -1;
        for (size_t i = 0; i < s->len;) {
            size_t st = i;
            proto_utf8_next(s->s, s->len, &i);
            tmpl_val c;
            if (model_tmpl_str_new(r, s->s + st, i - st, &c) || model_tmpl_list_push(r, *out, c)) {
                tmpl_decref(r, *out);
                return -1;
            }
        }
        return tmpl_step(r, s->len);
    }
    }
    return model_tmpl_fail(r, "TypeError", "'%s' object is not iterable", model_tmpl_type_name(v));
}
