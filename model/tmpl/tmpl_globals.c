/* model/tmpl/tmpl_globals.c — the global functions templates call: range (bounded as the sandbox
 * bounds it), namespace, dict, raise_exception, strftime_now, cycler, joiner; and the attribute
 * paths ("a.b.0") that map/sort/selectattr/... look values up with. */
#include "model/tmpl/tmpl_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int model_tmpl_global_id(const char *name, size_t len)
{
    static const char *const names[] = {[TG_RANGE] = "range", [TG_NAMESPACE] = "namespace", [TG_DICT] = "dict",
                                        [TG_RAISE] = "raise_exception", [TG_STRFTIME] = "strftime_now",
                                        [TG_CYCLER] = "cycler", [TG_JOINER] = "joiner", [TG_LIPSUM] = "lipsum"};
    for (int i = 1; i < (int)(sizeof names / sizeof *names); i++)
        if (strlen(names[i]) == len && !memcmp(names[i], name, len)) return i;
    return TG_NONE;
}

/* The sandbox's limit on range() (jinja2.sandbox.MAX_RANGE). */
#define MAX_RANGE 100000

static int g_range(tmpl_rt *r, const tmpl_args *a, tmpl_val *out)
{
    if (a->nkw) return model_tmpl_fail(r, "TypeError", "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3) return model_tmpl_fail(r, "TypeError", "range expected at least 1 argument, got %zu", a->npos);
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->npos; i++)
        if (model_tmpl_int_arg(r, a->pos[i], &v[i])) return -1;
    int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
    if (step == 0) return model_tmpl_fail(r, "ValueError", "range() arg 3 must not be zero");
    __int128 count = 0;
    if (step > 0 && stop > start) count = ((__int128)stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = ((__int128)start - stop - 1) / -(__int128)step + 1;
    if (count > MAX_RANGE)
        return model_tmpl_fail(r, "OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    if (tmpl_step(r, (uint64_t)count) || model_tmpl_list_new(r, TMPL_SEQ_RANGE, (size_t)count, out)) return -1;
    tmpl_list *l = tmpl_l(*out);
    l->r_start = start;
    l->r_stop = stop;
    l->r_step = step;
    for (int64_t i = 0; i < (int64_t)count; i++) l->v[l->n++] = tmpl_int(start + i * step);
    return 0;
}

/* dict(mapping_or_pairs?, **kw) into a new dict or namespace */
static int g_dict(tmpl_rt *r, int kind, const tmpl_args *a, tmpl_val *out)
{
    if (a->npos > 1) return model_tmpl_fail(r, "TypeError", "%s expected at most 1 argument, got %zu", kind == TMPL_NS ? "namespace" : "dict", a->npos);
    if (model_tmpl_dict_new(r, kind, 0, out)) return -1;
    if (a->npos == 1) {
        tmpl_val src = a->pos[0];
        if (src.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, src); /* looks up .keys */
        if (src.kind == TMPL_DICT || src.kind == TMPL_NS) {
            tmpl_dict *d = tmpl_d(src);
            for (size_t i = 0; i < d->n; i++) {
                tmpl_incref(d->k[i]);
                tmpl_incref(d->v[i]);
                if (model_tmpl_dict_set(r, *out, d->k[i], d->v[i])) return -1;
            }
        } else {
            tmpl_val items;
            if (model_tmpl_iter(r, src, &items)) return -1;
            tmpl_list *l = tmpl_l(items);
            int rc = 0;
            for (size_t i = 0; i < l->n && !rc; i++) {
                tmpl_val p = l->v[i];
                if (p.kind != TMPL_LIST || tmpl_is_iter(p) || tmpl_l(p)->n != 2) {
                    rc = model_tmpl_fail(r, "ValueError", "dictionary update sequence element #%zu has the wrong length", i);
                    break;
                }
                tmpl_incref(tmpl_l(p)->v[0]);
                tmpl_incref(tmpl_l(p)->v[1]);
                rc = model_tmpl_dict_set(r, *out, tmpl_l(p)->v[0], tmpl_l(p)->v[1]);
            }
            tmpl_decref(r, items);
            if (rc) return -1;
        }
    }
    for (size_t i = 0; i < a->nkw; i++) {
        tmpl_val k;
        if (model_tmpl_str_new(r, a->kw_names[i], strlen(a->kw_names[i]), &k)) return -1;
        tmpl_incref(a->kw[i]);
        if (model_tmpl_dict_set(r, *out, k, a->kw[i])) return -1;
    }
    return 0;
}

int model_tmpl_global_call(tmpl_rt *r, tmpl_func *f, const tmpl_args *a, tmpl_val *out)
{
    tmpl_val x;
    switch (f->h.sub == TMPL_FN_GLOBAL ? f->id : -1) {
    case TG_RANGE: return g_range(r, a, out);
    case TG_NAMESPACE: return g_dict(r, TMPL_NS, a, out);
    case TG_DICT: return g_dict(r, TMPL_DICT, a, out);
    case TG_RAISE: {
        if (model_tmpl_arg(r, a, 0, "message", &x) <= 0) return model_tmpl_fail(r, "TypeError", "raise_exception() missing 1 required positional argument: 'message'");
        proto_buf b = {.max = 4096};
        model_tmpl_str_of(r, x, &b);
        model_tmpl_fail(r, "TemplateError", "%s", b.p ? b.p : "");
        proto_buf_deinit(&b);
        return -1;
    }
    case TG_STRFTIME: {
        if (model_tmpl_arg(r, a, 0, "format", &x) <= 0 || x.kind != TMPL_STR)
            return model_tmpl_fail(r, "TypeError", "strftime_now() argument must be str");
        struct tm tm;
        time_t now = r->now;
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = tmpl_s(x)->len ? strftime(buf, sizeof buf, tmpl_s(x)->s, &tm) : 0;
        if (!n && tmpl_s(x)->len) return model_tmpl_fail(r, "ValueError", "strftime format too long or empty result");
        return model_tmpl_str_new(r, buf, n, out);
    }
    case TG_CYCLER: {
        if (!a->npos) return model_tmpl_fail(r, "RuntimeError", "at least one item has to be provided");
        tmpl_val items;
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, a->npos, &items)) return -1;
        for (size_t i = 0; i < a->npos; i++) {
            tmpl_incref(a->pos[i]);
            model_tmpl_list_push(r, items, a->pos[i]);
        }
        int rc = model_tmpl_func_new(r, TMPL_FN_CYCLER, 0, items, out);
        tmpl_decref(r, items);
        return rc;
    }
    case TG_JOINER: {
        tmpl_val sep;
        int g = model_tmpl_arg(r, a, 0, "sep", &x);
        if (g < 0) return -1;
        if (g == 0) {
            if (model_tmpl_str_new(r, ", ", 2, &sep)) return -1;
        } else if (model_tmpl_to_str(r, x, &sep)) {
            return -1;
        }
        int rc = model_tmpl_func_new(r, TMPL_FN_JOINER, 0, sep, out);
        tmpl_decref(r, sep);
        return rc;
    }
    case TG_LIPSUM: return model_tmpl_fail(r, "TemplateRuntimeError", "lipsum() is not supported");
    }
    if (f->h.sub == TMPL_FN_JOINER) { /* "" the first time, then the separator */
        if (a->npos || a->nkw)
            return model_tmpl_fail(r, "TypeError", "Joiner.__call__() takes 1 positional argument but %zu were given", a->npos + 1);
        if (!f->state) {
            f->state = 1;
            return model_tmpl_str_new(r, "", 0, out);
        }
        *out = f->self;
        tmpl_incref(*out);
        return 0;
    }
    if (f->h.sub == TMPL_FN_CYCLER) return model_tmpl_fail(r, "TypeError", "'Cycler' object is not callable");
    return model_tmpl_fail(r, "TypeError", "object is not callable");
}

int model_tmpl_attr_path(tmpl_rt *r, tmpl_val obj, tmpl_val path, tmpl_val *out)
{
    /* "a.b.0": parts that are all digits are integer keys (jinja2's make_attrgetter) */
    tmpl_incref(obj);
    if (path.kind != TMPL_STR) {
        int rc = model_tmpl_getitem(r, obj, path, out);
        tmpl_decref(r, obj);
        return rc;
    }
    tmpl_str *p = tmpl_s(path);
    size_t i = 0;
    tmpl_val cur = obj;
    for (;;) {
        const char *dot = memchr(p->s + i, '.', p->len - i);
        size_t end = dot ? (size_t)(dot - p->s) : p->len;
        bool digits = end > i;
        int64_t num = 0;
        for (size_t k = i; k < end && digits; k++) {
            if (p->s[k] < '0' || p->s[k] > '9' || num > INT64_MAX / 10 - 9) digits = false;
            else num = num * 10 + (p->s[k] - '0');
        }
        tmpl_val key, next;
        if (digits) key = tmpl_int(num);
        else if (model_tmpl_str_new(r, p->s + i, end - i, &key)) {
            tmpl_decref(r, cur);
            return -1;
        }
        int rc = model_tmpl_getitem(r, cur, key, &next);
        tmpl_decref(r, key);
        tmpl_decref(r, cur);
        if (rc) return -1;
        cur = next;
        if (!dot) break;
        i = end + 1;
    }
    *out = cur;
    return 0;
}
