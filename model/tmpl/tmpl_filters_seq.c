/* model/tmpl/tmpl_filters_seq.c — jinja2's filters over sequences:
 * first/last/list/join/reverse/items, sort/dictsort/unique/min/max/sum/groupby,
 * map/select/reject/selectattr/rejectattr, batch/slice.
 *
 * Where jinja2 returns a generator (map, select*, reject*, unique, items, batch, slice) the
 * result here is a TMPL_SEQ_GEN list: computed at once, but with a generator's behaviour where
 * templates can see it (always true, no length, iterates once, prints as a generator). Sorting is
 * a stable merge sort using Python's `<`, so ties and errors come out as in sorted(). */
#include "model/tmpl/tmpl_filters.h"
#include <stdlib.h>
#include <string.h>

void model_tmpl_as_generator(tmpl_val items)
{
    items.u.o->sub = TMPL_SEQ_GEN;
    tmpl_l(items)->pos = 0;
}

/* Finishes a generator filter: the items made so far become a generator; an error while making
 * them is kept in it and raised when the generator is consumed past them, as jinja2's lazy
 * generators do (a generator nobody iterates never fails). Limits are not deferred. */
static int finish_gen(tmpl_rt *r, int rc, tmpl_val *out)
{
    if (out->kind != TMPL_LIST) return rc ? -1 : 0;
    if (rc) {
        char *err = r->ek == TMPL_EK_RUNTIME ? strdup(r->err) : NULL;
        if (!err) {
            tmpl_decref(r, *out);
            return -1;
        }
        tmpl_l(*out)->deferred = err;
        r->ek = TMPL_EK_NONE;
        r->err[0] = 0;
    }
    model_tmpl_as_generator(*out);
    return 0;
}

int model_tmpl_ignore_case(tmpl_rt *r, tmpl_val v, tmpl_val *out)
{
    if (v.kind != TMPL_STR) {
        tmpl_incref(v);
        *out = v;
        return 0;
    }
    proto_buf b = {.max = r->lim.max_output};
    if (model_tmpl_case(&b, tmpl_s(v)->s, tmpl_s(v)->len, 'l')) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

/* The items of in as a fresh list this filter may modify (a new reference). */
static int fresh_items(tmpl_rt *r, tmpl_val in, tmpl_val *out)
{
    tmpl_val it;
    if (model_tmpl_iter(r, in, &it)) return -1;
    if (it.u.o->refs == 1 && it.u.o != in.u.o) {
        it.u.o->sub = TMPL_SEQ_LIST;
        *out = it;
        return 0;
    }
    tmpl_list *l = tmpl_l(it);
    int rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, l->n, out);
    for (size_t i = 0; i < l->n && !rc; i++) {
        tmpl_incref(l->v[i]);
        model_tmpl_list_push(r, *out, l->v[i]);
    }
    tmpl_decref(r, it);
    return rc;
}

/* key of item: attribute path (or the item), lowered for case-insensitive comparisons */
static int key_of(tmpl_rt *r, tmpl_val item, tmpl_val attr, bool ignore_case, tmpl_val def, tmpl_val *out)
{
    tmpl_val k;
    if (attr.kind == TMPL_NONE) {
        k = item;
        tmpl_incref(k);
    } else {
        if (model_tmpl_attr_path(r, item, attr, &k)) return -1;
        if (k.kind == TMPL_UNDEF && def.kind != TMPL_NONE && def.kind != TMPL_UNDEF) {
            tmpl_decref(r, k);
            k = def;
            tmpl_incref(k);
        }
    }
    if (!ignore_case) {
        *out = k;
        return 0;
    }
    int rc = model_tmpl_ignore_case(r, k, out);
    tmpl_decref(r, k);
    return rc;
}

/* sort()'s key (jinja2's make_multi_attrgetter): always a list, one key per comma-separated
 * attribute. Lists compare element by element with == before <, so equal keys never meet <
 * (which matters for keys like undefined values, whose < fails). */
static int multi_key(tmpl_rt *r, tmpl_val item, tmpl_val attr, bool ignore_case, tmpl_val *out)
{
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    if (attr.kind != TMPL_STR || !memchr(tmpl_s(attr)->s, ',', tmpl_s(attr)->len)) {
        tmpl_val k;
        if (key_of(r, item, attr, ignore_case, tmpl_none(), &k)) return -1;
        return model_tmpl_list_push(r, *out, k);
    }
    tmpl_str *a = tmpl_s(attr);
    size_t i = 0;
    for (;;) {
        const char *c = memchr(a->s + i, ',', a->len - i);
        size_t e = c ? (size_t)(c - a->s) : a->len;
        tmpl_val part, k;
        if (model_tmpl_str_new(r, a->s + i, e - i, &part)) return -1;
        int rc = key_of(r, item, part, ignore_case, tmpl_none(), &k);
        tmpl_decref(r, part);
        if (rc || model_tmpl_list_push(r, *out, k)) return -1;
        if (!c) return 0;
        i = e + 1;
    }
}

/* Stable merge sort of idx[0..n) by keys (reverse: descending, ties keep their order). */
static int merge_sort(tmpl_rt *r, size_t *idx, size_t *tmp, size_t n, const tmpl_val *keys, bool reverse)
{
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(r, idx, tmp, h, keys, reverse) || merge_sort(r, idx + h, tmp, n - h, keys, reverse)) return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        /* take the right one first only when it is strictly before the left one */
        int lt = reverse ? model_tmpl_lt(r, keys[idx[i]], keys[idx[j]]) : model_tmpl_lt(r, keys[idx[j]], keys[idx[i]]);
        if (lt < 0) return -1;
        tmp[k++] = lt ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return tmpl_step(r, n);
}

/* Sorts the fresh list `items` in place by keys computed with key(). */
static int sort_list(tmpl_rt *r, tmpl_val items, tmpl_val attr, tmpl_val def, bool ignore_case, bool reverse, bool multi)
{
    tmpl_list *l = tmpl_l(items);
    if (l->n < 2) return 0;
    tmpl_val *keys = calloc(l->n, sizeof *keys);
    size_t *idx = malloc(l->n * sizeof *idx), *tmp = malloc(l->n * sizeof *tmp);
    tmpl_val *vals = malloc(l->n * sizeof *vals);
    int rc = keys && idx && tmp && vals ? 0 : model_tmpl_fail(r, "MemoryError", "out of memory");
    size_t made = 0;
    for (; made < l->n && !rc; made++) {
        idx[made] = made;
        rc = multi ? multi_key(r, l->v[made], attr, ignore_case, &keys[made])
                   : key_of(r, l->v[made], attr, ignore_case, def, &keys[made]);
        if (rc) break;
    }
    if (!rc) rc = merge_sort(r, idx, tmp, l->n, keys, reverse);
    if (!rc) {
        memcpy(vals, l->v, l->n * sizeof *vals);
        for (size_t i = 0; i < l->n; i++) l->v[i] = vals[idx[i]];
    }
    for (size_t i = 0; keys && i < made; i++) tmpl_decref(r, keys[i]);
    free(keys);
    free(idx);
    free(tmp);
    free(vals);
    return rc;
}

int model_tmpl_f_sort(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
    tmpl_val rev = tmpl_bool(false), cs = tmpl_bool(false), attr = tmpl_none();
    if (model_tmpl_args_check(r, a, "sort", 3, names) || model_tmpl_arg(r, a, 0, "reverse", &rev) < 0 ||
        model_tmpl_arg(r, a, 1, "case_sensitive", &cs) < 0 || model_tmpl_arg(r, a, 2, "attribute", &attr) < 0)
        return -1;
    int64_t reverse;
    if (model_tmpl_int_arg(r, rev, &reverse)) return -1;
    if (fresh_items(r, in, out)) return -1;
    if (sort_list(r, *out, attr, tmpl_none(), !model_tmpl_truthy(cs), reverse != 0, true)) {
        tmpl_decref(r, *out);
        return -1;
    }
    return 0;
}

int model_tmpl_f_dictsort(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
    tmpl_val cs = tmpl_bool(false), by = tmpl_none(), rev = tmpl_bool(false);
    if (model_tmpl_args_check(r, a, "dictsort", 3, names) || model_tmpl_arg(r, a, 0, "case_sensitive", &cs) < 0 ||
        model_tmpl_arg(r, a, 1, "by", &by) < 0 || model_tmpl_arg(r, a, 2, "reverse", &rev) < 0)
        return -1;
    int pos = 0;
    if (by.kind == TMPL_STR && !strcmp(tmpl_s(by)->s, "value")) pos = 1;
    else if (by.kind != TMPL_NONE && !(by.kind == TMPL_STR && !strcmp(tmpl_s(by)->s, "key")))
        return model_tmpl_fail(r, "FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
    if (in.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, in);
    if (in.kind != TMPL_DICT) return model_tmpl_fail(r, "AttributeError", "'%s' object has no attribute 'items'", model_tmpl_type_name(in));
    int64_t reverse;
    if (model_tmpl_int_arg(r, rev, &reverse)) return -1;
    if (model_tmpl_dict_items(r, in, TMPL_SEQ_LIST, out)) return -1;
    tmpl_val path = tmpl_int(pos);
    if (sort_list(r, *out, path, tmpl_none(), !model_tmpl_truthy(cs), reverse != 0, false)) {
        tmpl_decref(r, *out);
        return -1;
    }
    return 0;
}

int model_tmpl_f_unique(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    tmpl_val cs = tmpl_bool(false), attr = tmpl_none(), items, seen = tmpl_undef();
    *out = tmpl_undef();
    if (model_tmpl_args_check(r, a, "unique", 2, names) || model_tmpl_arg(r, a, 0, "case_sensitive", &cs) < 0 ||
        model_tmpl_arg(r, a, 1, "attribute", &attr) < 0)
        return -1;
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    if (model_tmpl_iter(r, in, &items)) return finish_gen(r, -1, out);
    int rc = model_tmpl_dict_new(r, TMPL_DICT, 0, &seen);
    tmpl_list *l = tmpl_l(items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        tmpl_val k, dummy;
        if ((rc = key_of(r, l->v[i], attr, !model_tmpl_truthy(cs), tmpl_none(), &k))) break;
        int f = model_tmpl_dict_get(r, tmpl_d(seen), k, &dummy);
        if (f < 0) {
            tmpl_decref(r, k);
            rc = -1;
        } else if (f) {
            tmpl_decref(r, k);
        } else if (!(rc = model_tmpl_dict_set(r, seen, k, tmpl_none()))) {
            tmpl_incref(l->v[i]);
            rc = model_tmpl_list_push(r, *out, l->v[i]);
        }
    }
    tmpl_decref(r, items);
    if (seen.kind == TMPL_DICT) tmpl_decref(r, seen);
    return finish_gen(r, rc, out);
}

static int min_max(tmpl_rt *r, tmpl_val in, const tmpl_args *a, bool max, tmpl_val *out)
{
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    tmpl_val cs = tmpl_bool(false), attr = tmpl_none(), items;
    if (model_tmpl_args_check(r, a, max ? "max" : "min", 2, names) || model_tmpl_arg(r, a, 0, "case_sensitive", &cs) < 0 ||
        model_tmpl_arg(r, a, 1, "attribute", &attr) < 0)
        return -1;
    if (model_tmpl_iter(r, in, &items)) return -1;
    tmpl_list *l = tmpl_l(items);
    if (!l->n) {
        tmpl_decref(r, items);
        return model_tmpl_undef_msg(r, TMPL_UH_MSG, "No aggregated item, sequence was empty.", out);
    }
    size_t best = 0;
    tmpl_val bk;
    int rc = key_of(r, l->v[0], attr, !model_tmpl_truthy(cs), tmpl_none(), &bk);
    for (size_t i = 1; i < l->n && !rc; i++) {
        tmpl_val k;
        if ((rc = key_of(r, l->v[i], attr, !model_tmpl_truthy(cs), tmpl_none(), &k))) break;
        int better = max ? model_tmpl_lt(r, bk, k) : model_tmpl_lt(r, k, bk);
        if (better < 0) rc = -1;
        else if (better) {
            tmpl_decref(r, bk);
            bk = k;
            best = i;
            continue;
        }
        tmpl_decref(r, k);
    }
    if (!rc) tmpl_decref(r, bk);
    if (!rc) {
        *out = l->v[best];
        tmpl_incref(*out);
    }
    tmpl_decref(r, items);
    return rc;
}

int model_tmpl_f_max(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out) { return min_max(r, in, a, true, out); }
int model_tmpl_f_min(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out) { return min_max(r, in, a, false, out); }

int model_tmpl_f_sum(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"attribute", "start", NULL};
    tmpl_val attr = tmpl_none(), start = tmpl_int(0), items;
    if (model_tmpl_args_check(r, a, "sum", 2, names) || model_tmpl_arg(r, a, 0, "attribute", &attr) < 0 ||
        model_tmpl_arg(r, a, 1, "start", &start) < 0)
        return -1;
    if (start.kind == TMPL_STR) return model_tmpl_fail(r, "TypeError", "sum() can't sum strings [use ''.join(seq) instead]");
    if (model_tmpl_iter(r, in, &items)) return -1;
    tmpl_list *l = tmpl_l(items);
    tmpl_val acc = start;
    tmpl_incref(acc);
    int rc = 0;
    for (size_t i = 0; i < l->n && !rc; i++) {
        tmpl_val k, next;
        if ((rc = key_of(r, l->v[i], attr, false, tmpl_none(), &k))) break;
        rc = model_tmpl_binop(r, TB_ADD, acc, k, &next);
        tmpl_decref(r, k);
        tmpl_decref(r, acc);
        acc = rc ? tmpl_none() : next;
    }
    tmpl_decref(r, items);
    if (rc) {
        tmpl_decref(r, acc);
        return -1;
    }
    *out = acc;
    return 0;
}

int model_tmpl_f_groupby(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"attribute", "default", "case_sensitive", NULL};
    tmpl_val attr, def = tmpl_none(), cs = tmpl_bool(false), items;
    if (model_tmpl_args_check(r, a, "groupby", 3, names)) return -1;
    if (model_tmpl_arg(r, a, 0, "attribute", &attr) <= 0)
        return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "groupby() missing 1 required positional argument: 'attribute'");
    if (model_tmpl_arg(r, a, 1, "default", &def) < 0 || model_tmpl_arg(r, a, 2, "case_sensitive", &cs) < 0) return -1;
    bool ic = !model_tmpl_truthy(cs);
    if (fresh_items(r, in, &items)) return -1;
    int rc = sort_list(r, items, attr, def, ic, false, false);
    if (!rc) rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out);
    tmpl_list *l = tmpl_l(items);
    tmpl_val cur_key = tmpl_undef(), group = tmpl_undef();
    for (size_t i = 0; i <= l->n && !rc; i++) {
        tmpl_val k = tmpl_undef();
        int same = 0;
        if (i < l->n) {
            if ((rc = key_of(r, l->v[i], attr, ic, def, &k))) break;
            if (group.kind == TMPL_LIST && (same = model_tmpl_eq(r, k, cur_key, 0)) < 0) rc = -1;
        }
        if (!rc && group.kind == TMPL_LIST && !same) { /* close the group: (grouper, list) */
            tmpl_val t, grouper;
            tmpl_list *g = tmpl_l(group);
            rc = key_of(r, g->v[0], attr, false, def, &grouper); /* the real key, not the lowered one */
            if (!rc) rc = model_tmpl_list_new(r, TMPL_SEQ_TUPLE, 2, &t);
            if (!rc) {
                t.u.o->flags |= TMPL_OF_GROUP;
                model_tmpl_list_push(r, t, grouper);
                model_tmpl_list_push(r, t, group);
                group = tmpl_undef();
                rc = model_tmpl_list_push(r, *out, t);
            }
            tmpl_decref(r, cur_key);
            cur_key = tmpl_undef();
        }
        if (!rc && i < l->n) {
            if (group.kind != TMPL_LIST) {
                rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, &group);
                cur_key = k;
                tmpl_incref(k);
            }
            tmpl_incref(l->v[i]);
            if (!rc) rc = model_tmpl_list_push(r, group, l->v[i]);
        }
        tmpl_decref(r, k);
    }
    tmpl_decref(r, cur_key);
    tmpl_decref(r, group);
    tmpl_decref(r, items);
    return rc;
}

/* ------------------------------------------------------------- map, select and friends */

/* map/select/... are generator functions in jinja2: apart from the call signature, everything
 * they check happens when they are iterated, so those errors go through finish_gen() too. */
static int map_args(tmpl_rt *r, const tmpl_args *a, tmpl_val *attr, tmpl_val *def, int *fid, tmpl_args *sub)
{
    *sub = *a;
    if (!a->npos && model_tmpl_arg(r, a, 99, "attribute", attr) > 0) {
        model_tmpl_arg(r, a, 99, "default", def);
        for (size_t i = 0; i < a->nkw; i++)
            if (strcmp(a->kw_names[i], "attribute") && strcmp(a->kw_names[i], "default"))
                return model_tmpl_fail(r, "FilterArgumentError", "Unexpected keyword argument '%s'", a->kw_names[i]);
        return 0;
    }
    if (!a->npos) return r->ek ? -1 : model_tmpl_fail(r, "FilterArgumentError", "map requires a filter argument");
    tmpl_val name = a->pos[0];
    if (name.kind != TMPL_STR) return model_tmpl_fail(r, "TemplateRuntimeError", "No filter named %s.", model_tmpl_type_name(name));
    *fid = model_tmpl_filter_id(tmpl_s(name)->s, tmpl_s(name)->len);
    if (*fid < 0) return model_tmpl_fail(r, "TemplateRuntimeError", "No filter named '%s'.", tmpl_s(name)->s);
    sub->pos = a->pos + 1;
    sub->npos = a->npos - 1;
    return 0;
}

int model_tmpl_f_map(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    tmpl_val items, attr = tmpl_undef(), def = tmpl_none();
    int fid = -1;
    tmpl_args sub;
    *out = tmpl_undef();
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    if (!model_tmpl_truthy(in)) return finish_gen(r, 0, out); /* jinja2: `if value:` before anything */
    if (map_args(r, a, &attr, &def, &fid, &sub)) return finish_gen(r, -1, out);
    int rc = model_tmpl_iter(r, in, &items);
    tmpl_list *l = rc ? NULL : tmpl_l(items);
    for (size_t i = 0; l && i < l->n && !rc; i++) {
        tmpl_val v;
        if (fid >= 0) rc = model_tmpl_filter(r, fid, l->v[i], &sub, &v);
        else rc = key_of(r, l->v[i], attr, false, def, &v);
        if (!rc) rc = model_tmpl_list_push(r, *out, v);
    }
    if (l) tmpl_decref(r, items);
    return finish_gen(r, rc, out);
}

static int select_args(tmpl_rt *r, const tmpl_args *a, bool attr_mode, tmpl_val *attr, int *tid, tmpl_args *sub)
{
    size_t off = 0;
    *sub = *a;
    if (attr_mode) {
        if (!a->npos) return model_tmpl_fail(r, "FilterArgumentError", "Missing parameter for attribute name");
        *attr = a->pos[0];
        off = 1;
    }
    if (a->npos > off) {
        tmpl_val name = a->pos[off];
        if (name.kind != TMPL_STR) return model_tmpl_fail(r, "TemplateRuntimeError", "No test named %s.", model_tmpl_type_name(name));
        *tid = model_tmpl_test_id(tmpl_s(name)->s, tmpl_s(name)->len);
        if (*tid < 0) return model_tmpl_fail(r, "TemplateRuntimeError", "No test named '%s'.", tmpl_s(name)->s);
        sub->pos = a->pos + off + 1;
        sub->npos = a->npos - off - 1;
    }
    return 0;
}

static int select_impl(tmpl_rt *r, tmpl_val in, const tmpl_args *a, bool attr_mode, bool keep, tmpl_val *out)
{
    tmpl_val attr = tmpl_undef(), items;
    int tid = -1;
    tmpl_args sub;
    *out = tmpl_undef();
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    if (!model_tmpl_truthy(in)) return finish_gen(r, 0, out); /* jinja2: `if value:` before anything */
    if (select_args(r, a, attr_mode, &attr, &tid, &sub)) return finish_gen(r, -1, out);
    int rc = model_tmpl_iter(r, in, &items);
    if (rc) return finish_gen(r, rc, out);
    tmpl_list *l = tmpl_l(items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        tmpl_val x;
        bool res;
        if ((rc = attr_mode ? model_tmpl_attr_path(r, l->v[i], attr, &x) : (tmpl_incref(l->v[i]), x = l->v[i], 0))) break;
        if (tid >= 0) rc = model_tmpl_test(r, tid, x, &sub, &res);
        else res = model_tmpl_truthy(x);
        tmpl_decref(r, x);
        if (!rc && res == keep) {
            tmpl_incref(l->v[i]);
            rc = model_tmpl_list_push(r, *out, l->v[i]);
        }
    }
    tmpl_decref(r, items);
    return finish_gen(r, rc, out);
}

int model_tmpl_f_select(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out) { return select_impl(r, in, a, false, true, out); }
int model_tmpl_f_reject(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out) { return select_impl(r, in, a, false, false, out); }
int model_tmpl_f_selectattr(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out) { return select_impl(r, in, a, true, true, out); }
int model_tmpl_f_rejectattr(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out) { return select_impl(r, in, a, true, false, out); }

/* ------------------------------------------------------------------------ simple sequences */

int model_tmpl_f_list(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    if (model_tmpl_args_check(r, a, "list", 0, NULL)) return -1;
    return fresh_items(r, in, out);
}

int model_tmpl_f_first(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    if (model_tmpl_args_check(r, a, "first", 0, NULL)) return -1;
    if (tmpl_is_iter(in)) { /* a generator gives up one item */
        tmpl_list *l = tmpl_l(in);
        if (l->pos < l->n) {
            *out = l->v[l->pos++];
            tmpl_incref(*out);
            return 0;
        }
        if (model_tmpl_gen_exhausted(r, l)) return -1;
        return model_tmpl_undef_msg(r, TMPL_UH_MSG, "No first item, sequence was empty.", out);
    }
    if (in.kind == TMPL_LIST && tmpl_l(in)->n) {
        *out = tmpl_l(in)->v[0];
        tmpl_incref(*out);
        return 0;
    }
    tmpl_val items;
    if (model_tmpl_iter(r, in, &items)) return -1;
    int rc;
    if (tmpl_l(items)->n) {
        *out = tmpl_l(items)->v[0];
        tmpl_incref(*out);
        rc = 0;
    } else {
        rc = model_tmpl_undef_msg(r, TMPL_UH_MSG, "No first item, sequence was empty.", out);
    }
    tmpl_decref(r, items);
    return rc;
}

int model_tmpl_f_last(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    if (model_tmpl_args_check(r, a, "last", 0, NULL)) return -1;
    if (tmpl_is_iter(in) || !(in.kind == TMPL_LIST || in.kind == TMPL_STR || in.kind == TMPL_DICT || in.kind == TMPL_UNDEF))
        return model_tmpl_fail(r, "TypeError", "'%s' object is not reversible", model_tmpl_type_name(in));
    tmpl_val items;
    if (model_tmpl_iter(r, in, &items)) return -1;
    tmpl_list *l = tmpl_l(items);
    int rc = 0;
    if (l->n) {
        *out = l->v[l->n - 1];
        tmpl_incref(*out);
    } else {
        rc = model_tmpl_undef_msg(r, TMPL_UH_MSG, "No last item, sequence was empty.", out);
    }
    tmpl_decref(r, items);
    return rc;
}

int model_tmpl_f_reverse(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    if (model_tmpl_args_check(r, a, "reverse", 0, NULL)) return -1;
    if (in.kind == TMPL_STR) {
        tmpl_str *s = tmpl_s(in);
        proto_buf b = {.max = r->lim.max_output};
        for (size_t i = s->len; i > 0;) {
            size_t p = proto_utf8_prev(s->s, i);
            if (proto_buf_add(&b, s->s + p, i - p)) {
                proto_buf_deinit(&b);
                return model_tmpl_fail_limit(r, "string length");
            }
            i = p;
        }
        return model_tmpl_str_from_buf(r, &b, out);
    }
    bool reversible = !tmpl_is_iter(in) && (in.kind == TMPL_LIST || in.kind == TMPL_DICT || in.kind == TMPL_UNDEF);
    if (!reversible && !tmpl_is_iter(in)) return model_tmpl_fail(r, "FilterArgumentError", "argument must be iterable");
    if (fresh_items(r, in, out)) return -1;
    tmpl_list *l = tmpl_l(*out);
    for (size_t i = 0; i < l->n / 2; i++) {
        tmpl_val t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    if (reversible) out->u.o->sub = TMPL_SEQ_REVITER; /* reversed(): an iterator */
    return 0;
}

int model_tmpl_f_items(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    if (model_tmpl_args_check(r, a, "items", 0, NULL)) return -1;
    if (in.kind == TMPL_DICT) {
        if (model_tmpl_dict_items(r, in, TMPL_SEQ_LIST, out)) return -1;
        return finish_gen(r, 0, out);
    }
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    if (in.kind == TMPL_UNDEF) return finish_gen(r, 0, out);
    return finish_gen(r, model_tmpl_fail(r, "TypeError", "Can only get item pairs from a mapping."), out);
}

int model_tmpl_f_join(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"d", "attribute", NULL};
    tmpl_val d = tmpl_none(), attr = tmpl_none(), items, sep;
    if (model_tmpl_args_check(r, a, "join", 2, names)) return -1;
    int g = model_tmpl_arg(r, a, 0, "d", &d);
    if (g < 0 || model_tmpl_arg(r, a, 1, "attribute", &attr) < 0) return -1;
    if (g) {
        if (model_tmpl_to_str(r, d, &sep)) return -1;
    } else if (model_tmpl_str_new(r, "", 0, &sep)) {
        return -1;
    }
    if (model_tmpl_iter(r, in, &items)) {
        tmpl_decref(r, sep);
        return -1;
    }
    tmpl_list *l = tmpl_l(items);
    proto_buf b = {.max = r->lim.max_output};
    int rc = 0;
    for (size_t i = 0; i < l->n && !rc; i++) {
        tmpl_val k;
        if ((rc = key_of(r, l->v[i], attr, false, tmpl_none(), &k))) break;
        if (i && proto_buf_add(&b, tmpl_s(sep)->s, tmpl_s(sep)->len)) rc = model_tmpl_fail_limit(r, "string length");
        if (!rc) rc = model_tmpl_str_of(r, k, &b);
        tmpl_decref(r, k);
    }
    tmpl_decref(r, items);
    tmpl_decref(r, sep);
    if (rc) {
        proto_buf_deinit(&b);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

static int fill_list(tmpl_rt *r, tmpl_val list, tmpl_val fill, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        tmpl_incref(fill);
        if (model_tmpl_list_push(r, list, fill)) return -1;
    }
    return 0;
}

int model_tmpl_f_batch(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"linecount", "fill_with", NULL};
    tmpl_val lc, fill = tmpl_none(), items, cur = tmpl_undef();
    if (model_tmpl_args_check(r, a, "batch", 2, names)) return -1;
    if (model_tmpl_arg(r, a, 0, "linecount", &lc) <= 0)
        return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "do_batch() missing 1 required positional argument: 'linecount'");
    int g = model_tmpl_arg(r, a, 1, "fill_with", &fill);
    if (g < 0) return -1;
    /* a linecount that is not a number never equals a batch's length: one batch */
    int64_t n = lc.kind == TMPL_INT || lc.kind == TMPL_BOOL ? lc.u.i : INT64_MAX;
    if (g && fill.kind != TMPL_NONE && n == INT64_MAX && lc.kind != TMPL_INT) {
        if (lc.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, lc);
        return model_tmpl_fail(r, "TypeError", "'<' not supported between instances of 'int' and '%s'", model_tmpl_type_name(lc));
    }
    if (model_tmpl_iter(r, in, &items)) return -1;
    int rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out);
    tmpl_list *l = tmpl_l(items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        if (cur.kind == TMPL_LIST && (int64_t)tmpl_l(cur)->n == n) {
            rc = model_tmpl_list_push(r, *out, cur);
            cur = tmpl_undef();
        }
        if (!rc && cur.kind != TMPL_LIST) rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, &cur);
        if (!rc) {
            tmpl_incref(l->v[i]);
            rc = model_tmpl_list_push(r, cur, l->v[i]);
        }
    }
    if (!rc && cur.kind == TMPL_LIST && tmpl_l(cur)->n) {
        if (g && fill.kind != TMPL_NONE && (int64_t)tmpl_l(cur)->n < n) rc = fill_list(r, cur, fill, n - (int64_t)tmpl_l(cur)->n);
        if (!rc) {
            rc = model_tmpl_list_push(r, *out, cur);
            cur = tmpl_undef();
        }
    }
    tmpl_decref(r, cur);
    tmpl_decref(r, items);
    if (rc) return -1;
    model_tmpl_as_generator(*out);
    return 0;
}

int model_tmpl_f_slice(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    static const char *const names[] = {"slices", "fill_with", NULL};
    tmpl_val sv, fill = tmpl_none(), items;
    if (model_tmpl_args_check(r, a, "slice", 2, names)) return -1;
    if (model_tmpl_arg(r, a, 0, "slices", &sv) <= 0)
        return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "sync_do_slice() missing 1 required positional argument: 'slices'");
    if (sv.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, sv); /* len(seq) // slices */
    if (sv.kind != TMPL_INT && sv.kind != TMPL_BOOL)
        return model_tmpl_fail(r, "TypeError", "unsupported operand type(s) for //: 'int' and '%s'", model_tmpl_type_name(sv));
    int g = model_tmpl_arg(r, a, 1, "fill_with", &fill);
    if (g < 0) return -1;
    int64_t slices = sv.u.i;
    if (slices > 100000) return model_tmpl_fail_limit(r, "slice count");
    if (model_tmpl_iter(r, in, &items)) return -1;
    if (slices == 0) { /* len(seq) // 0, raised when the generator is first consumed */
        tmpl_decref(r, items);
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
        return finish_gen(
            r, model_tmpl_fail(r, "ZeroDivisionError", "integer division or modulo by zero"), out);
    }
    tmpl_list *l = tmpl_l(items);
    int64_t len = (int64_t)l->n, per = slices > 0 ? len / slices : 0, extra = slices > 0 ? len % slices : 0, offset = 0;
    int rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out);
    for (int64_t k = 0; k < slices && !rc; k++) {
        int64_t start = offset + k * per;
        if (k < extra) offset++;
        int64_t end = offset + (k + 1) * per;
        tmpl_val part;
        if ((rc = model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, &part))) break;
        for (int64_t i = start; i < end && i < len && !rc; i++) {
            tmpl_incref(l->v[i]);
            rc = model_tmpl_list_push(r, part, l->v[i]);
        }
        if (!rc && g && fill.kind != TMPL_NONE && k >= extra) rc = fill_list(r, part, fill, 1);
        if (!rc) rc = model_tmpl_list_push(r, *out, part);
        else tmpl_decref(r, part);
    }
    tmpl_decref(r, items);
    if (rc) return -1;
    model_tmpl_as_generator(*out);
    return 0;
}
