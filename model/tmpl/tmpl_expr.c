/* model/tmpl/tmpl_expr.c — evaluating expressions: names, literals, operators with Python's numeric
 * and sequence rules, attribute and item access as jinja2's sandbox does them (attribute first
 * for `.`, item first for `[]`, each falling back to the other), slices, and calls.
 *
 * Every function returns 0 with a new reference in *out, or -1 with the error recorded in r. */
#include "model/tmpl/tmpl_int.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------ arithmetic */

static const char *op_sym(int op)
{
    static const char *s[] = {"+", "-", "*", "/", "//", "%", "**"};
    return op >= 0 && op < (int)(sizeof s / sizeof *s) ? s[op] : "?";
}

static int unsupported(tmpl_rt *r, int op, tmpl_val a, tmpl_val b)
{
    return model_tmpl_fail(r, "TypeError", "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
                           model_tmpl_type_name(a), model_tmpl_type_name(b));
}

static int overflow(tmpl_rt *r)
{
    return model_tmpl_fail_int_range(r);
}

static double as_f(tmpl_val v) { return v.kind == TMPL_FLOAT ? v.u.f : (double)v.u.i; }

static int repeat(tmpl_rt *r, tmpl_val seq, int64_t times, tmpl_val *out)
{
    if (times < 0) times = 0;
    if (seq.kind == TMPL_STR) {
        tmpl_str *s = tmpl_s(seq);
        if (!s->len) times = 0; /* '' * N is '': no N empty appends (1e18 of them never ended) */
        if (s->len && (uint64_t)times > r->lim.max_output / s->len) return model_tmpl_fail_limit(r, "string length");
        proto_buf b = {.max = r->lim.max_output};
        for (int64_t i = 0; i < times; i++)
            if (proto_buf_add(&b, s->s, s->len)) {
                proto_buf_deinit(&b);
                return model_tmpl_fail(r, "MemoryError", "out of memory");
            }
        return model_tmpl_str_from_buf(r, &b, out);
    }
    tmpl_list *l = tmpl_l(seq);
    if (!l->n) times = 0;
    if (l->n && (uint64_t)times > r->lim.max_memory / sizeof(tmpl_val) / l->n) return model_tmpl_fail_limit(r, "memory");
    if (tmpl_step(r, (uint64_t)times * l->n)) return -1;
    if (model_tmpl_list_new(r, l->h.sub, (size_t)times * l->n, out)) return -1;
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < l->n; j++) {
            tmpl_incref(l->v[j]);
            model_tmpl_list_push(r, *out, l->v[j]);
        }
    return 0;
}

static bool is_seq(tmpl_val v) { return v.kind == TMPL_LIST && (v.u.o->sub == TMPL_SEQ_LIST || v.u.o->sub == TMPL_SEQ_TUPLE); }

int model_tmpl_binop(tmpl_rt *r, int op, tmpl_val a, tmpl_val b, tmpl_val *out)
{
    if (a.kind == TMPL_STR && op == TB_MOD) return model_tmpl_str_percent(r, a, b, out); /* str.__mod__ first */
    if (a.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, a);
    if (b.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, b);
    bool nums = tmpl_is_num(a) && tmpl_is_num(b);
    bool ints = nums && a.kind != TMPL_FLOAT && b.kind != TMPL_FLOAT;
    int64_t x = a.u.i, y = b.u.i, z;
    switch (op) {
    case TB_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z)) return overflow(r);
            *out = tmpl_int(z);
            return 0;
        }
        if (nums) {
            *out = tmpl_float(as_f(a) + as_f(b));
            return 0;
        }
        if (a.kind == TMPL_STR && b.kind == TMPL_STR) {
            tmpl_incref(a);
            return model_tmpl_str_cat(r, a, tmpl_s(b)->s, tmpl_s(b)->len, out);
        }
        if (is_seq(a) && is_seq(b) && a.u.o->sub == b.u.o->sub) {
            tmpl_list *p = tmpl_l(a), *q = tmpl_l(b);
            if (tmpl_step(r, p->n + q->n) || model_tmpl_list_new(r, p->h.sub, p->n + q->n, out)) return -1;
            for (size_t i = 0; i < p->n; i++) {
                tmpl_incref(p->v[i]);
                model_tmpl_list_push(r, *out, p->v[i]);
            }
            for (size_t i = 0; i < q->n; i++) {
                tmpl_incref(q->v[i]);
                model_tmpl_list_push(r, *out, q->v[i]);
            }
            return 0;
        }
        if (a.kind == TMPL_STR || is_seq(a))
            return model_tmpl_fail(r, "TypeError", "can only concatenate %s (not \"%s\") to %s", model_tmpl_type_name(a),
                                   model_tmpl_type_name(b), model_tmpl_type_name(a));
        return unsupported(r, op, a, b);
    case TB_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &z)) return overflow(r);
            *out = tmpl_int(z);
            return 0;
        }
        if (nums) {
            *out = tmpl_float(as_f(a) - as_f(b));
            return 0;
        }
        return unsupported(r, op, a, b);
    case TB_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &z)) return overflow(r);
            *out = tmpl_int(z);
            return 0;
        }
        if (nums) {
            *out = tmpl_float(as_f(a) * as_f(b));
            return 0;
        }
        if ((a.kind == TMPL_STR || is_seq(a)) && (b.kind == TMPL_INT || b.kind == TMPL_BOOL)) return repeat(r, a, y, out);
        if ((b.kind == TMPL_STR || is_seq(b)) && (a.kind == TMPL_INT || a.kind == TMPL_BOOL)) return repeat(r, b, x, out);
        if (a.kind == TMPL_STR || is_seq(a) || b.kind == TMPL_STR || is_seq(b))
            return model_tmpl_fail(r, "TypeError", "can't multiply sequence by non-int of type '%s'",
                                   model_tmpl_type_name(a.kind == TMPL_STR || is_seq(a) ? b : a));
        return unsupported(r, op, a, b);
    case TB_DIV:
        if (!nums) return unsupported(r, op, a, b);
        if (as_f(b) == 0) return model_tmpl_fail(r, "ZeroDivisionError", ints ? "division by zero" : "float division by zero");
        *out = tmpl_float(as_f(a) / as_f(b));
        return 0;
    case TB_FLOORDIV:
    case TB_MOD:
        if (a.kind == TMPL_STR && op == TB_MOD) return model_tmpl_str_percent(r, a, b, out);
        if (!nums) return unsupported(r, op, a, b);
        if (ints) {
            if (y == 0)
                return model_tmpl_fail(r, "ZeroDivisionError", op == TB_MOD ? "integer modulo by zero" : "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == TB_FLOORDIV) return overflow(r);
                *out = tmpl_int(0);
                return 0;
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            *out = tmpl_int(op == TB_FLOORDIV ? q : m);
            return 0;
        }
        {
            double p = as_f(a), q = as_f(b);
            if (q == 0)
                return model_tmpl_fail(r, "ZeroDivisionError", op == TB_MOD ? "float modulo" : "float floor division by zero");
            double m = fmod(p, q);
            if (m != 0 && ((m < 0) != (q < 0))) m += q;
            if (op == TB_MOD) {
                *out = tmpl_float(m == 0 ? copysign(0.0, q) : m);
            } else {
                double d = (p - m) / q;
                double fl = floor(d);
                if (d - fl > 0.5) fl += 1.0;
                *out = tmpl_float(fl);
            }
            return 0;
        }
    case TB_POW:
        if (!nums) return unsupported(r, op, a, b);
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            int64_t e = y;
            while (e) {
                if (e & 1 && __builtin_mul_overflow(acc, base, &acc)) return overflow(r);
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return overflow(r);
            }
            *out = tmpl_int(acc);
            return 0;
        }
        {
            double p = as_f(a), q = as_f(b);
            if (p == 0 && q < 0) return model_tmpl_fail(r, "ZeroDivisionError", "0.0 cannot be raised to a negative power");
            if (p < 0 && q != floor(q)) return model_tmpl_fail(r, "ValueError", "complex results are not supported");
            double v = pow(p, q);
            if (isinf(v) && isfinite(p) && isfinite(q)) return model_tmpl_fail(r, "OverflowError", "(34, 'Numerical result out of range')");
            *out = tmpl_float(v);
            return 0;
        }
    }
    return unsupported(r, op, a, b);
}

int model_tmpl_contains(tmpl_rt *r, tmpl_val c, tmpl_val item, bool *res)
{
    switch (c.kind) {
    case TMPL_UNDEF: *res = false; return 0;
    case TMPL_STR: {
        if (item.kind != TMPL_STR)
            return model_tmpl_fail(r, "TypeError", "'in <string>' requires string as left operand, not %s",
                                   model_tmpl_type_name(item));
        tmpl_str *h = tmpl_s(c), *n = tmpl_s(item);
        *res = n->len == 0 || memmem(h->s, h->len, n->s, n->len) != NULL;
        return 0;
    }
    case TMPL_LIST: {
        tmpl_list *l = tmpl_l(c);
        size_t start = tmpl_is_iter(c) ? l->pos : 0;
        *res = false;
        for (size_t i = start; i < l->n; i++) {
            int e = model_tmpl_eq(r, item, l->v[i], 0);
            if (e < 0) return -1;
            if (e) {
                *res = true;
                if (tmpl_is_iter(c)) l->pos = i + 1;
                break;
            }
        }
        if (!*res && tmpl_is_iter(c)) {
            l->pos = l->n;
            if (model_tmpl_gen_exhausted(r, l)) return -1;
        }
        return tmpl_step(r, l->n - start);
    }
    case TMPL_DICT: {
        tmpl_val v;
        int f = model_tmpl_dict_get(r, tmpl_d(c), item, &v);
        if (f < 0) return -1;
        *res = f > 0;
        return 0;
    }
    }
    return model_tmpl_fail(r, "TypeError", "argument of type '%s' is not iterable", model_tmpl_type_name(c));
}

int model_tmpl_compare(tmpl_rt *r, int op, tmpl_val a, tmpl_val b, bool *res)
{
    int v;
    switch (op) {
    case TC_EQ:
    case TC_NE:
        if ((v = model_tmpl_eq(r, a, b, 0)) < 0) return -1;
        *res = op == TC_EQ ? v : !v;
        return 0;
    case TC_LT: v = model_tmpl_lt(r, a, b); break;
    case TC_GT: v = model_tmpl_lt(r, b, a); break;
    case TC_LE:
    case TC_GE: {
        tmpl_val x = op == TC_LE ? a : b, y = op == TC_LE ? b : a;
        if ((v = model_tmpl_lt(r, x, y)) < 0) return -1;
        if (!v) {
            if ((v = model_tmpl_eq(r, x, y, 0)) < 0) return -1;
            if (v && x.kind == TMPL_FLOAT && isnan(x.u.f)) v = 0;
        }
        break;
    }
    case TC_IN:
    case TC_NOTIN: {
        bool in;
        if (model_tmpl_contains(r, b, a, &in)) return -1;
        *res = op == TC_IN ? in : !in;
        return 0;
    }
    default: return model_tmpl_fail(r, "TypeError", "bad comparison");
    }
    if (v < 0) return -1;
    *res = v;
    return 0;
}

/* --------------------------------------------------------------------- attributes and items */

/* Special attributes every Python object (Undefined included) has: found, then hidden by the
 * sandbox. */
static bool is_dunder(tmpl_str *ns)
{
    static const char *const names[] = {
        "__class__", "__doc__", "__module__", "__init__", "__new__", "__repr__", "__str__", "__hash__",
        "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__iter__",
        "__getattr__", "__getattribute__", "__setattr__", "__delattr__", "__getitem__", "__call__",
        "__format__", "__reduce__", "__reduce_ex__", "__sizeof__", "__dir__", "__init_subclass__",
        "__subclasshook__", "__slots__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
        "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pos__",
        "__neg__", "__int__", "__float__", "__complex__", "__pow__", "__rpow__", "__contains__", NULL};
    if (ns->len < 5 || memcmp(ns->s, "__", 2)) return false;
    for (const char *const *n = names; *n; n++)
        if (!strcmp(*n, ns->s)) return true;
    return false;
}

static int unsafe(tmpl_rt *r, tmpl_val obj, tmpl_str *ns, tmpl_val *out)
{
    char msg[300];
    snprintf(msg, sizeof msg, "access to attribute '%.200s' of '%s' object is unsafe.", ns->s, model_tmpl_type_name(obj));
    return model_tmpl_undef_msg(r, TMPL_UH_UNSAFE, msg, out);
}

int model_tmpl_getattr(tmpl_rt *r, tmpl_val obj, tmpl_val name, int method, tmpl_val *out)
{
    tmpl_str *ns = tmpl_s(name);
    if (obj.kind == TMPL_UNDEF) {
        /* Python finds its special attributes on any object, Undefined included; the sandbox
         * then hides them. Anything else on an undefined value is an UndefinedError. */
        if (is_dunder(ns)) return unsafe(r, obj, ns, out);
        return model_tmpl_undef_fail(r, obj);
    }
    int f;
    switch (obj.kind) {
    case TMPL_DICT:
        if (method && (f = model_tmpl_method_get(r, obj, method, out))) return f < 0 ? -1 : 0;
        if (model_tmpl_dict_get_str(tmpl_d(obj), ns->s, ns->len, out)) {
            tmpl_incref(*out);
            return 0;
        }
        break;
    case TMPL_NS:
        if (model_tmpl_dict_get_str(tmpl_d(obj), ns->s, ns->len, out)) {
            tmpl_incref(*out);
            return 0;
        }
        break;
    case TMPL_LOOP:
    case TMPL_FUNC:
        if ((f = model_tmpl_special_attr(r, obj, ns, out))) return f < 0 ? -1 : 0;
        if (method && (f = model_tmpl_method_get(r, obj, method, out))) return f < 0 ? -1 : 0;
        break;
    default:
        if (obj.kind == TMPL_LIST && (obj.u.o->flags & TMPL_OF_GROUP) &&
            (!strcmp(ns->s, "grouper") || !strcmp(ns->s, "list"))) {
            *out = tmpl_l(obj)->v[ns->s[0] == 'l'];
            tmpl_incref(*out);
            return 0;
        }
        if (method && (f = model_tmpl_method_get(r, obj, method, out))) return f < 0 ? -1 : 0;
    }
    if (is_dunder(ns)) return unsafe(r, obj, ns, out); /* the sandbox hides special attributes */
    return model_tmpl_undef_attr(r, obj, name, out);
}

static bool hashable(tmpl_val v, int depth)
{
    if (v.kind == TMPL_DICT || depth > 64) return false;
    if (v.kind != TMPL_LIST) return true;
    if (v.u.o->sub != TMPL_SEQ_TUPLE) return false;
    tmpl_list *l = tmpl_l(v);
    for (size_t i = 0; i < l->n; i++)
        if (!hashable(l->v[i], depth + 1)) return false;
    return true;
}

static bool index_of(tmpl_val key, size_t n, size_t *at)
{
    if (key.kind != TMPL_INT && key.kind != TMPL_BOOL) return false;
    int64_t i = key.u.i;
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *at = (size_t)i;
    return true;
}

int model_tmpl_getitem(tmpl_rt *r, tmpl_val obj, tmpl_val key, tmpl_val *out)
{
    if (obj.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, obj);
    size_t at;
    switch (obj.kind) {
    case TMPL_DICT: {
        /* an unhashable key is a TypeError, which the sandbox turns into undefined */
        if (!hashable(key, 0)) return model_tmpl_undef_attr(r, obj, key, out);
        int f = model_tmpl_dict_get(r, tmpl_d(obj), key, out);
        if (f < 0) return -1;
        if (f) {
            tmpl_incref(*out);
            return 0;
        }
        break;
    }
    case TMPL_LIST: {
        tmpl_list *l = tmpl_l(obj);
        int sub = l->h.sub;
        if (sub == TMPL_SEQ_LIST || sub == TMPL_SEQ_TUPLE || sub == TMPL_SEQ_RANGE) {
            if (index_of(key, l->n, &at)) {
                *out = l->v[at];
                tmpl_incref(*out);
                return 0;
            }
            if (key.kind == TMPL_INT || key.kind == TMPL_BOOL) return model_tmpl_undef_attr(r, obj, key, out);
        }
        break;
    }
    case TMPL_STR: {
        tmpl_str *s = tmpl_s(obj);
        if (index_of(key, model_tmpl_str_ncp(s), &at)) {
            size_t off = s->ncp == s->len ? at : proto_utf8_offset(s->s, s->len, at), end = off;
            proto_utf8_next(s->s, s->len, &end);
            return model_tmpl_str_new(r, s->s + off, end - off, out);
        }
        if (key.kind == TMPL_INT || key.kind == TMPL_BOOL) return model_tmpl_undef_attr(r, obj, key, out);
        break;
    }
    }
    if (key.kind == TMPL_STR) {
        /* obj[name] failed: the sandbox tries the attribute */
        tmpl_str *ks = tmpl_s(key);
        int method = model_tmpl_method_id(ks->s, ks->len);
        if (obj.kind == TMPL_NS) {
            if (model_tmpl_dict_get_str(tmpl_d(obj), ks->s, ks->len, out)) {
                tmpl_incref(*out);
                return 0;
            }
        } else if (obj.kind == TMPL_LOOP || obj.kind == TMPL_FUNC) {
            int f = model_tmpl_special_attr(r, obj, ks, out);
            if (f) return f < 0 ? -1 : 0;
        }
        if (method) {
            int f = model_tmpl_method_get(r, obj, method, out);
            if (f) return f < 0 ? -1 : 0;
        }
    }
    return model_tmpl_undef_attr(r, obj, key, out);
}

static bool slice_index(tmpl_val v, int64_t *i, bool *given)
{
    if (v.kind == TMPL_NONE) {
        *given = false;
        return true;
    }
    if (v.kind != TMPL_INT && v.kind != TMPL_BOOL) return false;
    *given = true;
    *i = v.u.i;
    return true;
}

int model_tmpl_slice(tmpl_rt *r, tmpl_val obj, tmpl_val start, tmpl_val stop, tmpl_val step, tmpl_val *out)
{
    /* jinja2 compiles x[a:b] to a plain Python subscript (not the sandbox's getitem): errors
     * propagate */
    if (obj.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, obj);
    bool is_str = obj.kind == TMPL_STR;
    if (!is_str && !(obj.kind == TMPL_LIST && (obj.u.o->sub == TMPL_SEQ_LIST || obj.u.o->sub == TMPL_SEQ_TUPLE ||
                                                obj.u.o->sub == TMPL_SEQ_RANGE))) {
        if (obj.kind == TMPL_DICT) return model_tmpl_fail(r, "TypeError", "unhashable type: 'slice'");
        return model_tmpl_fail(r, "TypeError", "'%s' object is not subscriptable", model_tmpl_type_name(obj));
    }
    int64_t b = 0, e = 0, st = 1;
    bool hb, he, hs;
    if (!slice_index(start, &b, &hb) || !slice_index(stop, &e, &he) || !slice_index(step, &st, &hs))
        return model_tmpl_fail(r, "TypeError", "slice indices must be integers or None or have an __index__ method");
    if (!hs) st = 1;
    if (st == 0) return model_tmpl_fail(r, "ValueError", "slice step cannot be zero");
    if (st == INT64_MIN) st = -INT64_MAX;
    int64_t len = is_str ? (int64_t)model_tmpl_str_ncp(tmpl_s(obj)) : (int64_t)tmpl_l(obj)->n;
    /* PySlice_AdjustIndices */
    if (!hb) b = st < 0 ? len - 1 : 0;
    else if (b < 0) {
        b += len;
        if (b < 0) b = st < 0 ? -1 : 0;
    } else if (b >= len) b = st < 0 ? len - 1 : len;
    if (!he) e = st < 0 ? -1 : len;
    else if (e < 0) {
        e += len;
        if (e < 0) e = st < 0 ? -1 : 0;
    } else if (e >= len) e = st < 0 ? len - 1 : len;
    int64_t count = 0;
    if (st > 0 && e > b) count = (e - b - 1) / st + 1;
    if (st < 0 && e < b) count = (b - e - 1) / (-st) + 1;
    if (tmpl_step(r, (uint64_t)count)) return -1;
    if (is_str) {
        tmpl_str *s = tmpl_s(obj);
        if (st == 1 && count > 0) {
            size_t from = s->ncp == s->len ? (size_t)b : proto_utf8_offset(s->s, s->len, (size_t)b);
            size_t to = s->ncp == s->len ? (size_t)e : from + proto_utf8_offset(s->s + from, s->len - from, (size_t)(e - b));
            return model_tmpl_str_new(r, s->s + from, to - from, out);
        }
        /* general step: collect the code points' offsets */
        size_t *offs = malloc(((size_t)len + 1) * sizeof *offs);
        if (!offs) return model_tmpl_fail(r, "MemoryError", "out of memory");
        size_t i = 0, k = 0;
        while (i < s->len) {
            offs[k++] = i;
            proto_utf8_next(s->s, s->len, &i);
        }
        offs[k] = s->len;
        proto_buf buf = {.max = r->lim.max_output};
        int rc = 0;
        for (int64_t c = 0, j = b; c < count && !rc; c++, j += st)
            rc = proto_buf_add(&buf, s->s + offs[j], offs[j + 1] - offs[j]);
        free(offs);
        if (rc) {
            proto_buf_deinit(&buf);
            return model_tmpl_fail_limit(r, "string length");
        }
        return model_tmpl_str_from_buf(r, &buf, out);
    }
    tmpl_list *l = tmpl_l(obj);
    int sub = l->h.sub == TMPL_SEQ_TUPLE ? TMPL_SEQ_TUPLE : l->h.sub == TMPL_SEQ_RANGE ? TMPL_SEQ_RANGE : TMPL_SEQ_LIST;
    if (model_tmpl_list_new(r, sub, (size_t)count, out)) return -1;
    for (int64_t c = 0, j = b; c < count; c++, j += st) {
        tmpl_incref(l->v[j]);
        model_tmpl_list_push(r, *out, l->v[j]);
    }
    if (sub == TMPL_SEQ_RANGE) { /* range(10)[2:5] is range(2, 5) */
        tmpl_list *o = tmpl_l(*out);
        o->r_start = l->r_start + b * l->r_step;
        o->r_stop = l->r_start + e * l->r_step;
        o->r_step = l->r_step * st;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------- calls */

int model_tmpl_call(tmpl_rt *r, tmpl_val fn, const tmpl_args *a, tmpl_val *out)
{
    if (fn.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, fn);
    if (fn.kind == TMPL_LOOP) return model_tmpl_loop_call(r, tmpl_lp(fn), a, out);
    if (fn.kind != TMPL_FUNC)
        return model_tmpl_fail(r, "TypeError", "'%s' object is not callable", model_tmpl_type_name(fn));
    tmpl_func *f = tmpl_fn(fn);
    switch (f->h.sub) {
    case TMPL_FN_MACRO:
    case TMPL_FN_CALLER: return model_tmpl_macro_call(r, f, a, out);
    case TMPL_FN_METHOD: return model_tmpl_method_call(r, f, a, out);
    default: return model_tmpl_global_call(r, f, a, out);
    }
}

/* Arguments of a call/filter/test node, evaluated (with *args and **kwargs expanded). */
typedef struct argv_t {
    tmpl_args a;
    tmpl_val pos[8], kw[8];
    const char *names[8];
    size_t cap_pos, cap_kw;
    tmpl_val kwdict; /* the dict of **kwargs: kw_names point into its keys */
} argv_t;

static void args_free(tmpl_rt *r, argv_t *v)
{
    tmpl_decref(r, v->kwdict);
    for (size_t i = 0; i < v->a.npos; i++) tmpl_decref(r, v->a.pos[i]);
    for (size_t i = 0; i < v->a.nkw; i++) tmpl_decref(r, v->a.kw[i]);
    if (v->a.pos != v->pos) free(v->a.pos);
    if (v->a.kw != v->kw) {
        free(v->a.kw);
        free(v->a.kw_names);
    }
}

static int add_pos(tmpl_rt *r, argv_t *v, tmpl_val x)
{
    if (v->a.npos == v->cap_pos) {
        size_t cap = v->cap_pos * 2;
        tmpl_val *p = v->a.pos == v->pos ? malloc(cap * sizeof *p) : realloc(v->a.pos, cap * sizeof *p);
        if (!p) {
            tmpl_decref(r, x);
            return model_tmpl_fail(r, "MemoryError", "out of memory");
        }
        if (v->a.pos == v->pos) memcpy(p, v->pos, sizeof v->pos);
        v->a.pos = p;
        v->cap_pos = cap;
    }
    v->a.pos[v->a.npos++] = x;
    return 0;
}

static int add_kw(tmpl_rt *r, argv_t *v, const char *name, tmpl_val x)
{
    for (size_t i = 0; i < v->a.nkw; i++)
        if (!strcmp(v->a.kw_names[i], name)) {
            tmpl_decref(r, x);
            return model_tmpl_fail(r, "TypeError", "got multiple values for keyword argument '%s'", name);
        }
    if (v->a.nkw == v->cap_kw) {
        size_t cap = v->cap_kw * 2;
        bool inl = v->a.kw == v->kw;
        tmpl_val *k = inl ? malloc(cap * sizeof *k) : realloc(v->a.kw, cap * sizeof *k);
        if (k && inl) memcpy(k, v->kw, sizeof v->kw);
        if (k) v->a.kw = k;
        const char **n = k ? (inl ? malloc(cap * sizeof *n) : realloc(v->a.kw_names, cap * sizeof *n)) : NULL;
        if (n && inl) memcpy(n, v->names, sizeof v->names);
        if (n) v->a.kw_names = n;
        if (!k || !n) {
            tmpl_decref(r, x);
            return model_tmpl_fail(r, "MemoryError", "out of memory");
        }
        v->cap_kw = cap;
    }
    v->a.kw_names[v->a.nkw] = name;
    v->a.kw[v->a.nkw++] = x;
    return 0;
}

static int eval_args(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, argv_t *v)
{
    memset(&v->a, 0, sizeof v->a);
    v->kwdict = tmpl_undef();
    v->a.pos = v->pos;
    v->a.kw = v->kw;
    v->a.kw_names = v->names;
    v->cap_pos = v->cap_kw = 8;
    for (uint32_t i = 0; i < n->nkids; i++) {
        tmpl_val x;
        if (model_tmpl_eval(r, s, n->kids[i], &x) || add_pos(r, v, x)) return -1;
    }
    if (n->c) { /* *args */
        tmpl_val x, items;
        if (model_tmpl_eval(r, s, n->c, &x)) return -1;
        int rc = model_tmpl_iter(r, x, &items);
        tmpl_decref(r, x);
        if (rc) return -1;
        tmpl_list *l = tmpl_l(items);
        for (size_t i = 0; i < l->n && !rc; i++) {
            tmpl_incref(l->v[i]);
            rc = add_pos(r, v, l->v[i]);
        }
        tmpl_decref(r, items);
        if (rc) return -1;
    }
    for (uint32_t i = 0; i < n->nkids2; i++) {
        tmpl_val x;
        if (model_tmpl_eval(r, s, n->kids2[i], &x) || add_kw(r, v, r->t->names[n->syms[i]], x)) return -1;
    }
    if (n->b) { /* **kwargs: str keys of a dict, kept alive while the names are in use */
        if (model_tmpl_eval(r, s, n->b, &v->kwdict)) return -1;
        if (v->kwdict.kind != TMPL_DICT)
            return model_tmpl_fail(r, "TypeError", "argument after ** must be a mapping, not %s",
                                   model_tmpl_type_name(v->kwdict));
        tmpl_dict *d = tmpl_d(v->kwdict);
        for (size_t i = 0; i < d->n; i++) {
            if (d->k[i].kind != TMPL_STR) return model_tmpl_fail(r, "TypeError", "keywords must be strings");
            tmpl_incref(d->v[i]);
            if (add_kw(r, v, tmpl_s(d->k[i])->s, d->v[i])) return -1;
        }
    }
    return 0;
}

static int eval_call(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, tmpl_val *out)
{
    tmpl_val fn;
    if (model_tmpl_eval(r, s, n->a, &fn)) return -1;
    argv_t v;
    int rc = eval_args(r, s, n, &v);
    if (!rc) rc = model_tmpl_call(r, fn, &v.a, out);
    args_free(r, &v);
    tmpl_decref(r, fn);
    return rc;
}

int model_tmpl_eval_call_with(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, const char *name, tmpl_val extra,
                              tmpl_val *out)
{
    tmpl_val fn;
    if (model_tmpl_eval(r, s, n->a, &fn)) return -1;
    argv_t v;
    int rc = eval_args(r, s, n, &v);
    tmpl_incref(extra);
    if (!rc) rc = add_kw(r, &v, name, extra);
    else tmpl_decref(r, extra);
    if (!rc) rc = model_tmpl_call(r, fn, &v.a, out);
    args_free(r, &v);
    tmpl_decref(r, fn);
    return rc;
}

/* Evaluates a filter chain; `in` (borrowed) stands for the innermost NULL input (filter blocks). */
static int eval_filter(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, tmpl_val in, tmpl_val *out)
{
    tmpl_val x;
    if (n->a) {
        if (n->a->type == TN_FILTER ? eval_filter(r, s, n->a, in, &x) : model_tmpl_eval(r, s, n->a, &x)) return -1;
    } else {
        x = in;
        tmpl_incref(x);
    }
    if (n->sym < 0) { /* unknown where jinja2 defers the error to run time (inside an if) */
        tmpl_decref(r, x);
        r->line = n->line;
        if (n->sym == -2) return model_tmpl_fail(r, "TemplateRuntimeError", "the '%s' filter is not supported", tmpl_s(n->val)->s);
        return model_tmpl_fail(r, "TemplateRuntimeError", "No filter named '%s' found.", tmpl_s(n->val)->s);
    }
    argv_t v;
    int rc = eval_args(r, s, n, &v);
    r->line = n->line;
    if (!rc) rc = model_tmpl_filter(r, n->sym, x, &v.a, out);
    args_free(r, &v);
    tmpl_decref(r, x);
    return rc;
}

int model_tmpl_filter_chain(tmpl_rt *r, tmpl_scope *s, const tmpl_node *chain, tmpl_val in, tmpl_val *out)
{
    return eval_filter(r, s, chain, in, out);
}

/* ---------------------------------------------------------------------------- the evaluator */

static int eval_seq(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, int seq, tmpl_val *out)
{
    if (model_tmpl_list_new(r, seq, n->nkids, out)) return -1;
    for (uint32_t i = 0; i < n->nkids; i++) {
        tmpl_val x;
        if (model_tmpl_eval(r, s, n->kids[i], &x)) {
            tmpl_decref(r, *out);
            return -1;
        }
        model_tmpl_list_push(r, *out, x);
    }
    return 0;
}

int model_tmpl_eval(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, tmpl_val *out)
{
    if (tmpl_step(r, 1)) return -1;
    r->line = n->line;
    tmpl_val a, b;
    int rc;
    switch (n->type) {
    case TN_CONST: *out = n->val; return 0; /* immediates and immortals need no count */
    case TN_NAME:
        for (tmpl_scope *p = s; p; p = p->parent)
            if (model_tmpl_scope_get(p, n->sym, out)) {
                tmpl_incref(*out);
                return 0;
            }
        if (n->op) return model_tmpl_func_new(r, TMPL_FN_GLOBAL, n->op, tmpl_none(), out);
        *out = model_tmpl_undef_name(r->t->name_vals[n->sym]);
        return 0;
    case TN_GETATTR:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        r->line = n->line;
        rc = model_tmpl_getattr(r, a, n->val, n->op, out);
        tmpl_decref(r, a);
        return rc;
    case TN_GETITEM:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        if (n->b->type == TN_SLICE) {
            tmpl_val p[3] = {tmpl_none(), tmpl_none(), tmpl_none()};
            const tmpl_node *parts[3] = {n->b->a, n->b->b, n->b->c};
            bool folded = n->a->type == TN_CONST; /* jinja2 evaluates all-constant slices when */
            rc = 0;                              /* compiling, through the sandbox's getitem */
            for (int i = 0; i < 3 && !rc; i++)
                if (parts[i]) {
                    folded &= parts[i]->type == TN_CONST;
                    rc = model_tmpl_eval(r, s, parts[i], &p[i]);
                }
            r->line = n->line;
            if (!rc) rc = model_tmpl_slice(r, a, p[0], p[1], p[2], out);
            if (rc && folded && r->ek == TMPL_EK_RUNTIME && !strncmp(r->err, "TypeError", 9)) {
                r->ek = TMPL_EK_NONE; /* ...where a TypeError makes an undefined value */
                r->err[0] = 0;
                rc = model_tmpl_undef_msg(r, TMPL_UH_MSG, "a constant that cannot be sliced", out);
            }
            for (int i = 0; i < 3; i++) tmpl_decref(r, p[i]);
            tmpl_decref(r, a);
            return rc;
        }
        if (model_tmpl_eval(r, s, n->b, &b)) {
            tmpl_decref(r, a);
            return -1;
        }
        r->line = n->line;
        rc = model_tmpl_getitem(r, a, b, out);
        tmpl_decref(r, a);
        tmpl_decref(r, b);
        return rc;
    case TN_CALL: return eval_call(r, s, n, out);
    case TN_FILTER: return eval_filter(r, s, n, tmpl_undef(), out);
    case TN_TEST: {
        if (n->sym < 0) return model_tmpl_fail(r, "TemplateRuntimeError", "No test named '%s' found.", tmpl_s(n->val)->s);
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        argv_t v;
        bool res = false;
        rc = eval_args(r, s, n, &v);
        r->line = n->line;
        if (!rc) rc = model_tmpl_test(r, n->sym, a, &v.a, &res);
        args_free(r, &v);
        tmpl_decref(r, a);
        *out = tmpl_bool(res);
        return rc;
    }
    case TN_BINOP:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        if (model_tmpl_eval(r, s, n->b, &b)) {
            tmpl_decref(r, a);
            return -1;
        }
        r->line = n->line;
        if (n->op == TB_ADD && a.kind == TMPL_STR && b.kind == TMPL_STR) {
            /* the common '...' + x + '...' chain: append in place when a is a temporary */
            rc = model_tmpl_str_cat(r, a, tmpl_s(b)->s, tmpl_s(b)->len, out);
            tmpl_decref(r, b);
            return rc;
        }
        rc = model_tmpl_binop(r, n->op, a, b, out);
        tmpl_decref(r, a);
        tmpl_decref(r, b);
        return rc;
    case TN_CONCAT: {
        proto_buf buf = {.max = r->lim.max_output};
        for (uint32_t i = 0; i < n->nkids; i++) {
            if (model_tmpl_eval(r, s, n->kids[i], &a)) {
                proto_buf_deinit(&buf);
                return -1;
            }
            rc = model_tmpl_str_of(r, a, &buf);
            tmpl_decref(r, a);
            if (rc) {
                proto_buf_deinit(&buf);
                return -1;
            }
        }
        return model_tmpl_str_from_buf(r, &buf, out);
    }
    case TN_NEG:
    case TN_POS:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        r->line = n->line;
        if (a.kind == TMPL_UNDEF) {
            rc = model_tmpl_undef_fail(r, a);
        } else if (a.kind == TMPL_INT || a.kind == TMPL_BOOL) {
            if (n->type == TN_NEG && a.u.i == INT64_MIN) rc = overflow(r);
            else {
                *out = tmpl_int(n->type == TN_NEG ? -a.u.i : a.u.i);
                rc = 0;
            }
        } else if (a.kind == TMPL_FLOAT) {
            *out = tmpl_float(n->type == TN_NEG ? -a.u.f : a.u.f);
            rc = 0;
        } else {
            rc = model_tmpl_fail(r, "TypeError", "bad operand type for unary %c: '%s'", n->type == TN_NEG ? '-' : '+',
                                 model_tmpl_type_name(a));
        }
        tmpl_decref(r, a);
        return rc;
    case TN_NOT:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        *out = tmpl_bool(!model_tmpl_truthy(a));
        tmpl_decref(r, a);
        return 0;
    case TN_AND:
    case TN_OR:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        if (model_tmpl_truthy(a) == (n->type == TN_OR)) {
            *out = a;
            return 0;
        }
        tmpl_decref(r, a);
        return model_tmpl_eval(r, s, n->b, out);
    case TN_COMPARE: {
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        bool res = true;
        for (uint32_t i = 0; i < n->nkids && res; i++) {
            if (model_tmpl_eval(r, s, n->kids[i], &b)) {
                tmpl_decref(r, a);
                return -1;
            }
            r->line = n->line;
            rc = model_tmpl_compare(r, n->syms[i], a, b, &res);
            tmpl_decref(r, a);
            a = b;
            if (rc) {
                tmpl_decref(r, a);
                return -1;
            }
        }
        tmpl_decref(r, a);
        *out = tmpl_bool(res);
        return 0;
    }
    case TN_CONDEXPR:
        if (model_tmpl_eval(r, s, n->a, &a)) return -1;
        rc = model_tmpl_truthy(a);
        tmpl_decref(r, a);
        if (rc) return model_tmpl_eval(r, s, n->b, out);
        if (n->c) return model_tmpl_eval(r, s, n->c, out);
        {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
            return model_tmpl_undef_msg(r, TMPL_UH_MSG, msg, out);
        }
    case TN_LIST: return eval_seq(r, s, n, TMPL_SEQ_LIST, out);
    case TN_TUPLE: return eval_seq(r, s, n, TMPL_SEQ_TUPLE, out);
    case TN_DICT:
        if (model_tmpl_dict_new(r, TMPL_DICT, n->nkids, out)) return -1;
        for (uint32_t i = 0; i < n->nkids; i++) {
            if (model_tmpl_eval(r, s, n->kids[i], &a)) goto dict_fail;
            if (model_tmpl_eval(r, s, n->kids2[i], &b)) {
                tmpl_decref(r, a);
                goto dict_fail;
            }
            if (model_tmpl_dict_set(r, *out, a, b)) goto dict_fail;
        }
        return 0;
    dict_fail:
        tmpl_decref(r, *out);
        return -1;
    default: return model_tmpl_fail(r, "TemplateRuntimeError", "this node cannot be evaluated as an expression");
    }
}
