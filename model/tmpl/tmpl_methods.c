/* model/tmpl/tmpl_methods.c — methods of Python values that templates call (str, dict, list, tuple,
 * the loop context, cycler), attributes of loop/cycler, and argument helpers. The globals
 * (range, namespace, ...) are in tmpl_globals.c.
 *
 * The sandbox rules of ImmutableSandboxedEnvironment apply: methods that modify a list or dict
 * (append, update, pop, ...) are visible but unsafe — using them raises SecurityError, exactly
 * as transformers' renderer does. */
#include "model/tmpl/tmpl_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------ arguments */

int model_tmpl_arg(tmpl_rt *r, const tmpl_args *a, size_t pos, const char *name, tmpl_val *v)
{
    bool have = pos < a->npos;
    if (name)
        for (size_t i = 0; i < a->nkw; i++)
            if (!strcmp(a->kw_names[i], name)) {
                if (have) return model_tmpl_fail(r, "TypeError", "got multiple values for argument '%s'", name);
                *v = a->kw[i];
                return 1;
            }
    if (have) {
        *v = a->pos[pos];
        return 1;
    }
    return 0;
}

int model_tmpl_args_check(tmpl_rt *r, const tmpl_args *a, const char *fname, size_t max, const char *const *names)
{
    if (a->npos > max)
        return model_tmpl_fail(r, "TypeError", "%s() takes at most %zu argument(s) (%zu given)", fname, max, a->npos);
    for (size_t i = 0; i < a->nkw; i++) {
        bool ok = false;
        for (const char *const *n = names; n && *n && !ok; n++) ok = !strcmp(*n, a->kw_names[i]);
        if (!ok) return model_tmpl_fail(r, "TypeError", "%s() got an unexpected keyword argument '%s'", fname, a->kw_names[i]);
    }
    return 0;
}

/* Python's builtins reject an Undefined argument like any other wrong type (TypeError). */
static int need_str(tmpl_rt *r, tmpl_val v, const char *what)
{
    if (v.kind == TMPL_STR) return 0;
    return model_tmpl_fail(r, "TypeError", "%s must be str, not %s", what, model_tmpl_type_name(v));
}

int model_tmpl_int_arg(tmpl_rt *r, tmpl_val v, int64_t *i)
{
    if (v.kind == TMPL_INT || v.kind == TMPL_BOOL) {
        *i = v.u.i;
        return 0;
    }
    return model_tmpl_fail(r, "TypeError", "'%s' object cannot be interpreted as an integer", model_tmpl_type_name(v));
}

static int need_int(tmpl_rt *r, tmpl_val v, const char *what, int64_t *i)
{
    (void)what;
    return model_tmpl_int_arg(r, v, i);
}

/* -------------------------------------------------------------------------------- methods */

enum {
    M_NONE,
    /* str */
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH, M_UPPER,
    M_LOWER, M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_CASEFOLD, M_REPLACE, M_FIND, M_RFIND, M_INDEX,
    M_RINDEX, M_COUNT, M_JOIN, M_CENTER, M_LJUST, M_RJUST, M_ZFILL, M_ISALPHA, M_ISDIGIT, M_ISALNUM,
    M_ISSPACE, M_ISLOWER, M_ISUPPER, M_ISTITLE, M_ISDECIMAL, M_ISNUMERIC, M_PARTITION, M_RPARTITION,
    M_REMOVEPREFIX, M_REMOVESUFFIX, M_FORMAT, M_ENCODE, M_EXPANDTABS,
    /* dict */
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY, M_POP, M_POPITEM, M_SETDEFAULT, M_UPDATE, M_CLEAR,
    /* list */
    M_APPEND, M_EXTEND, M_INSERT, M_REMOVE, M_REVERSE, M_SORT,
    /* loop, cycler */
    M_CYCLE, M_CHANGED, M_NEXT, M_RESET,
    M_COUNT_ALL
};

static const char *const method_names[M_COUNT_ALL] = {
    [M_STRIP] = "strip", [M_LSTRIP] = "lstrip", [M_RSTRIP] = "rstrip", [M_SPLIT] = "split",
    [M_RSPLIT] = "rsplit", [M_SPLITLINES] = "splitlines", [M_STARTSWITH] = "startswith",
    [M_ENDSWITH] = "endswith", [M_UPPER] = "upper", [M_LOWER] = "lower", [M_TITLE] = "title",
    [M_CAPITALIZE] = "capitalize", [M_SWAPCASE] = "swapcase", [M_CASEFOLD] = "casefold",
    [M_REPLACE] = "replace", [M_FIND] = "find", [M_RFIND] = "rfind", [M_INDEX] = "index",
    [M_RINDEX] = "rindex", [M_COUNT] = "count", [M_JOIN] = "join", [M_CENTER] = "center",
    [M_LJUST] = "ljust", [M_RJUST] = "rjust", [M_ZFILL] = "zfill", [M_ISALPHA] = "isalpha",
    [M_ISDIGIT] = "isdigit", [M_ISALNUM] = "isalnum", [M_ISSPACE] = "isspace", [M_ISLOWER] = "islower",
    [M_ISUPPER] = "isupper", [M_ISTITLE] = "istitle", [M_ISDECIMAL] = "isdecimal",
    [M_ISNUMERIC] = "isnumeric", [M_PARTITION] = "partition", [M_RPARTITION] = "rpartition",
    [M_REMOVEPREFIX] = "removeprefix", [M_REMOVESUFFIX] = "removesuffix", [M_FORMAT] = "format",
    [M_ENCODE] = "encode", [M_EXPANDTABS] = "expandtabs", [M_GET] = "get", [M_ITEMS] = "items",
    [M_KEYS] = "keys", [M_VALUES] = "values", [M_COPY] = "copy", [M_POP] = "pop",
    [M_POPITEM] = "popitem", [M_SETDEFAULT] = "setdefault", [M_UPDATE] = "update", [M_CLEAR] = "clear",
    [M_APPEND] = "append", [M_EXTEND] = "extend", [M_INSERT] = "insert", [M_REMOVE] = "remove",
    [M_REVERSE] = "reverse", [M_SORT] = "sort", [M_CYCLE] = "cycle", [M_CHANGED] = "changed",
    [M_NEXT] = "next", [M_RESET] = "reset",
};

int model_tmpl_method_id(const char *name, size_t len)
{
    for (int i = 1; i < M_COUNT_ALL; i++)
        if (strlen(method_names[i]) == len && !memcmp(method_names[i], name, len)) return i;
    return 0;
}

static bool str_has(int id) { return id >= M_STRIP && id <= M_EXPANDTABS; }

int model_tmpl_method_get(tmpl_rt *r, tmpl_val obj, int id, tmpl_val *out)
{
    bool ok = false, unsafe = false;
    int seq = tmpl_seq_kind(obj);
    switch (obj.kind) {
    case TMPL_STR: ok = str_has(id); break;
    case TMPL_DICT:
        ok = id == M_GET || id == M_ITEMS || id == M_KEYS || id == M_VALUES || id == M_COPY;
        unsafe = id == M_POP || id == M_POPITEM || id == M_SETDEFAULT || id == M_UPDATE || id == M_CLEAR;
        break;
    case TMPL_LIST:
        if (seq == TMPL_SEQ_LIST) {
            ok = id == M_COUNT || id == M_INDEX || id == M_COPY;
            unsafe = id == M_APPEND || id == M_EXTEND || id == M_INSERT || id == M_POP || id == M_REMOVE ||
                     id == M_REVERSE || id == M_SORT || id == M_CLEAR;
        } else if (seq == TMPL_SEQ_TUPLE || seq == TMPL_SEQ_RANGE) {
            ok = id == M_COUNT || id == M_INDEX;
        }
        break;
    case TMPL_LOOP: ok = id == M_CYCLE || id == M_CHANGED; break;
    case TMPL_FUNC: ok = obj.u.o->sub == TMPL_FN_CYCLER && (id == M_NEXT || id == M_RESET); break;
    }
    if (unsafe) {
        char msg[160];
        snprintf(msg, sizeof msg, "access to attribute '%s' of '%s' object is unsafe.", method_names[id],
                 model_tmpl_type_name(obj));
        if (model_tmpl_undef_msg(r, TMPL_UH_UNSAFE, msg, out)) return -1;
        return 1;
    }
    if (!ok) return 0;
    return model_tmpl_func_new(r, TMPL_FN_METHOD, id, obj, out) ? -1 : 1;
}

/* Is c one of the code points strip() removes: those in `chars`, or Python whitespace (NULL)? */
static bool strip_hit(const tmpl_str *chars, uint32_t c)
{
    if (!chars) return model_tmpl_py_isspace(c);
    char u[4];
    int m = proto_utf8_put(u, c);
    return chars->len && memmem(chars->s, chars->len, u, (size_t)m) != NULL;
}

/* Strips code points in `chars` (NULL: Python whitespace) from the ends of s. */
static void strip_range(const char *s, size_t n, const tmpl_str *chars, bool left, bool right, size_t *b, size_t *e)
{
    size_t i = 0, j = n;
    if (left)
        while (i < j) {
            size_t k = i;
            uint32_t c = proto_utf8_next(s, n, &k);
            if (!strip_hit(chars, c)) break;
            i = k;
        }
    if (right)
        while (j > i) {
            size_t p = proto_utf8_prev(s, j), k = p;
            uint32_t c = proto_utf8_next(s, n, &k);
            if (!strip_hit(chars, c)) break;
            j = p;
        }
    *b = i;
    *e = j;
}

int model_tmpl_strip(tmpl_rt *r, tmpl_val s, tmpl_val chars, int which, tmpl_val *out)
{
    if (chars.kind != TMPL_NONE && chars.kind != TMPL_STR)
        return model_tmpl_fail(r, "TypeError", "%sstrip arg must be None or str", which == 'l' ? "l" : which == 'r' ? "r" : "");
    tmpl_str *x = tmpl_s(s);
    size_t b, e;
    strip_range(x->s, x->len, chars.kind == TMPL_STR ? tmpl_s(chars) : NULL, which != 'r', which != 'l', &b, &e);
    if (b == 0 && e == x->len) {
        tmpl_incref(s);
        *out = s;
        return 0;
    }
    return model_tmpl_str_new(r, x->s + b, e - b, out);
}

static int push_str(tmpl_rt *r, tmpl_val list, const char *s, size_t n)
{
    tmpl_val v;
    if (model_tmpl_str_new(r, s, n, &v)) return -1;
    return model_tmpl_list_push(r, list, v);
}

/* n bytes of s backwards (malloc'd; NULL: out of memory). */
static char *reversed(const char *s, size_t n)
{
    char *r = malloc(n ? n : 1);
    for (size_t i = 0; r && i < n; i++) r[i] = s[n - 1 - i];
    return r;
}

/* The byte offset of the last occurrence of nd[0..nn) in h[0..hn), -1 when none, -2 out of
 * memory: the first one in the reversed strings, so that glibc's memmem keeps it linear (a
 * backwards scan with memcmp at every place was O(hn * nn): a 400 KB text and a 200 KB needle
 * took 2 s a call). */
static int64_t last_of(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn > hn) return -1;
    char *rh = reversed(h, hn), *rn = reversed(nd, nn);
    const char *hit = rh && rn ? memmem(rh, hn, rn, nn) : NULL;
    int64_t at = !rh || !rn ? -2 : hit ? (int64_t)(hn - (size_t)(hit - rh) - nn) : -1;
    free(rh);
    free(rn);
    return at;
}

/* str.split / str.rsplit */
static int split(tmpl_rt *r, tmpl_str *x, tmpl_val sep, int64_t maxsplit, bool from_right, tmpl_val *out)
{
    if (sep.kind == TMPL_STR && tmpl_s(sep)->len == 0) return model_tmpl_fail(r, "ValueError", "empty separator");
    if (sep.kind != TMPL_STR && sep.kind != TMPL_NONE)
        return model_tmpl_fail(r, "TypeError", "must be str or None, not %s", model_tmpl_type_name(sep));
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    if (tmpl_step(r, x->len)) return -1;
    const char *s = x->s;
    size_t n = x->len;
    if (sep.kind == TMPL_STR) {
        tmpl_str *p = tmpl_s(sep);
        if (!from_right) {
            size_t i = 0;
            while (maxsplit != 0) {
                const char *hit = memmem(s + i, n - i, p->s, p->len);
                if (!hit) break;
                if (push_str(r, *out, s + i, (size_t)(hit - s) - i)) return -1;
                i = (size_t)(hit - s) + p->len;
                if (maxsplit > 0) maxsplit--;
            }
            return push_str(r, *out, s + i, n - i);
        }
        /* from the right: collect pieces backwards, then reverse. The occurrences from the
         * right are the reversed string's from the left (memmem: linear; a backwards memcmp at
         * every place was O(n * len)) */
        char *rs = reversed(s, n), *rp = reversed(p->s, p->len);
        if (!rs || !rp) {
            free(rs);
            free(rp);
            return model_tmpl_fail(r, "MemoryError", "out of memory");
        }
        size_t j = n, i = 0; /* s[0, j) left; rs[i, n) is it reversed */
        int rc = 0;
        while (maxsplit != 0 && !rc) {
            const char *hit = memmem(rs + i, n - i, rp, p->len);
            if (!hit) break;
            size_t ri = (size_t)(hit - rs), found = n - ri - p->len;
            rc = push_str(r, *out, s + found + p->len, j - found - p->len);
            j = found;
            i = ri + p->len;
            if (maxsplit > 0) maxsplit--;
        }
        free(rs);
        free(rp);
        if (rc || push_str(r, *out, s, j)) return -1;
    } else {
        /* whitespace runs; empty pieces dropped */
        if (!from_right) {
            size_t i = 0;
            for (;;) {
                while (i < n) {
                    size_t k = i;
                    if (!model_tmpl_py_isspace(proto_utf8_next(s, n, &k))) break;
                    i = k;
                }
                if (i >= n) break;
                if (maxsplit == 0) return push_str(r, *out, s + i, n - i); /* the rest, as it is */
                size_t st = i;
                while (i < n) {
                    size_t k = i;
                    if (model_tmpl_py_isspace(proto_utf8_next(s, n, &k))) break;
                    i = k;
                }
                if (push_str(r, *out, s + st, i - st)) return -1;
                if (maxsplit > 0) maxsplit--;
            }
            return 0;
        }
        size_t j = n;
        for (;;) {
            while (j > 0) {
                size_t p = proto_utf8_prev(s, j), k = p;
                if (!model_tmpl_py_isspace(proto_utf8_next(s, n, &k))) break;
                j = p;
            }
            if (j == 0) break;
            if (maxsplit == 0) {
                if (push_str(r, *out, s, j)) return -1;
                break;
            }
            size_t end = j;
            while (j > 0) {
                size_t p = proto_utf8_prev(s, j), k = p;
                if (model_tmpl_py_isspace(proto_utf8_next(s, n, &k))) break;
                j = p;
            }
            if (push_str(r, *out, s + j, end - j)) return -1;
            if (maxsplit > 0) maxsplit--;
        }
    }
    tmpl_list *l = tmpl_l(*out); /* reverse the right-to-left pieces */
    for (size_t i = 0; i < l->n / 2; i++) {
        tmpl_val t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return 0;
}

static size_t line_break_at(const char *s, size_t n, size_t i, uint32_t *cp)
{
    size_t k = i;
    uint32_t c = proto_utf8_next(s, n, &k);
    *cp = c;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 || c == 0x2029) return k - i;
    if (c == '\r') return k < n && s[k] == '\n' ? 2 : 1;
    return 0;
}

int model_tmpl_splitlines(tmpl_rt *r, tmpl_str *x, bool keepends, tmpl_val *out)
{
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, 0, out)) return -1;
    size_t i = 0, st = 0;
    while (i < x->len) {
        uint32_t c;
        size_t br = line_break_at(x->s, x->len, i, &c);
        if (!br) {
            proto_utf8_next(x->s, x->len, &i);
            continue;
        }
        if (push_str(r, *out, x->s + st, (keepends ? i + br : i) - st)) return -1;
        i += br;
        st = i;
    }
    if (st < x->len && push_str(r, *out, x->s + st, x->len - st)) return -1;
    return 0;
}

/* Python str.replace(old, new, count) */
int model_tmpl_replace(tmpl_rt *r, tmpl_str *s, tmpl_str *old, tmpl_str *new, int64_t count, tmpl_val *out)
{
    proto_buf b = {.max = r->lim.max_output};
    int rc = 0;
    if (old->len == 0) { /* insert new before every character and at the end */
        size_t i = 0;
        while (!rc && (count < 0 || count-- > 0)) {
            rc = proto_buf_add(&b, new->s, new->len);
            if (i >= s->len) break;
            size_t k = i;
            proto_utf8_next(s->s, s->len, &k);
            if (!rc) rc = proto_buf_add(&b, s->s + i, k - i);
            i = k;
        }
        if (!rc && i < s->len) rc = proto_buf_add(&b, s->s + i, s->len - i);
    } else {
        size_t i = 0;
        while (!rc && count != 0) {
            const char *hit = memmem(s->s + i, s->len - i, old->s, old->len);
            if (!hit) break;
            size_t at = (size_t)(hit - s->s);
            rc = proto_buf_add(&b, s->s + i, at - i) || proto_buf_add(&b, new->s, new->len);
            i = at + old->len;
            if (count > 0) count--;
        }
        if (!rc) rc = proto_buf_add(&b, s->s + i, s->len - i);
    }
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    if (tmpl_step(r, s->len / 16)) {
        proto_buf_deinit(&b);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

/* *at: the index (in code points) of the first/last occurrence of sub, or -1. The bytes it
 * reads are charged as steps (a call is linear in s; a loop of them is bounded by the budget). */
static int find(tmpl_rt *r, tmpl_str *s, tmpl_str *sub, bool last, int64_t *at)
{
    if (tmpl_step(r, 1 + s->len / 16)) return -1;
    int64_t off = -1;
    if (!last) {
        const char *hit = memmem(s->s, s->len, sub->s, sub->len);
        off = hit ? hit - s->s : -1;
    } else if ((off = last_of(s->s, s->len, sub->s, sub->len)) == -2) {
        return model_tmpl_fail(r, "MemoryError", "out of memory");
    }
    *at = off < 0 ? -1 : (int64_t)proto_utf8_count(s->s, (size_t)off);
    return 0;
}

static int pad(tmpl_rt *r, tmpl_val self, int64_t width, tmpl_val fill, int how, tmpl_val *out)
{
    tmpl_str *s = tmpl_s(self);
    const char *f = " ";
    size_t fl = 1;
    if (fill.kind == TMPL_STR) {
        if (model_tmpl_str_ncp(tmpl_s(fill)) != 1)
            return model_tmpl_fail(r, "TypeError", "The fill character must be exactly one character long");
        f = tmpl_s(fill)->s;
        fl = tmpl_s(fill)->len;
    } else if (fill.kind != TMPL_NONE) {
        return model_tmpl_fail(r, "TypeError", "The fill character must be a unicode character, not %s", model_tmpl_type_name(fill));
    }
    int64_t len = (int64_t)model_tmpl_str_ncp(s);
    if (width <= len) {
        tmpl_incref(self);
        *out = self;
        return 0;
    }
    if ((uint64_t)width > r->lim.max_output / 4) return model_tmpl_fail_limit(r, "string length");
    int64_t total = width - len, left;
    if (how == 'l') left = 0;
    else if (how == 'r') left = total;
    else left = total / 2 + (total & width & 1); /* CPython's centering rule */
    proto_buf b = {.max = r->lim.max_output};
    int rc = 0;
    for (int64_t i = 0; i < left && !rc; i++) rc = proto_buf_add(&b, f, fl);
    if (!rc) rc = proto_buf_add(&b, s->s, s->len);
    for (int64_t i = left; i < total && !rc; i++) rc = proto_buf_add(&b, f, fl);
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

int model_tmpl_center(tmpl_rt *r, tmpl_val self, int64_t width, tmpl_val *out)
{
    return pad(r, self, width, tmpl_none(), 'c', out);
}

static bool str_class(tmpl_str *s, int id)
{
    int cls = id == M_ISALPHA     ? TMPL_IS_ALPHA
              : id == M_ISDECIMAL ? TMPL_IS_DECIMAL
              : id == M_ISDIGIT   ? TMPL_IS_DIGIT
              : id == M_ISNUMERIC ? TMPL_IS_NUMERIC
              : id == M_ISALNUM   ? TMPL_IS_ALNUM
              : id == M_ISSPACE   ? TMPL_IS_SPACE
              : id == M_ISLOWER   ? TMPL_IS_LOWER
              : id == M_ISUPPER   ? TMPL_IS_UPPER
                                  : TMPL_IS_TITLE;
    return model_tmpl_str_is(s->s, s->len, cls);
}

static int prefix_match(tmpl_rt *r, tmpl_str *s, tmpl_val p, bool end, bool *res)
{
    if (p.kind == TMPL_LIST && p.u.o->sub == TMPL_SEQ_TUPLE) {
        tmpl_list *l = tmpl_l(p);
        *res = false;
        for (size_t i = 0; i < l->n && !*res; i++)
            if (prefix_match(r, s, l->v[i], end, res)) return -1;
        return 0;
    }
    if (p.kind != TMPL_STR)
        return model_tmpl_fail(r, "TypeError", "%s first arg must be str or a tuple of str, not %s",
                               end ? "endswith" : "startswith", model_tmpl_type_name(p));
    tmpl_str *x = tmpl_s(p);
    *res = x->len <= s->len && !memcmp(end ? s->s + s->len - x->len : s->s, x->s, x->len);
    return 0;
}

static int str_method(tmpl_rt *r, int id, tmpl_val self, const tmpl_args *a, tmpl_val *out)
{
    tmpl_str *s = tmpl_s(self);
    tmpl_val x = tmpl_none(), y = tmpl_none();
    int64_t n = -1;
    int g;
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        if (model_tmpl_args_check(r, a, method_names[id], 1, NULL) || model_tmpl_arg(r, a, 0, NULL, &x) < 0) return -1;
        return model_tmpl_strip(r, self, x, id == M_STRIP ? 's' : id == M_LSTRIP ? 'l' : 'r', out);
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const names[] = {"sep", "maxsplit", NULL};
        if (model_tmpl_args_check(r, a, method_names[id], 2, names)) return -1;
        if ((g = model_tmpl_arg(r, a, 0, "sep", &x)) < 0) return -1;
        if (g && x.kind != TMPL_STR && x.kind != TMPL_NONE)
            return model_tmpl_fail(r, "TypeError", "must be str or None, not %s", model_tmpl_type_name(x));
        if ((g = model_tmpl_arg(r, a, 1, "maxsplit", &y)) < 0) return -1;
        if (g && need_int(r, y, "maxsplit", &n)) return -1;
        return split(r, s, x, n, id == M_RSPLIT, out);
    }
    case M_SPLITLINES: {
        static const char *const names[] = {"keepends", NULL};
        if (model_tmpl_args_check(r, a, "splitlines", 1, names) || (g = model_tmpl_arg(r, a, 0, "keepends", &x)) < 0) return -1;
        if (g && model_tmpl_int_arg(r, x, &n)) return -1;
        return model_tmpl_splitlines(r, s, g && n, out);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        if (model_tmpl_args_check(r, a, method_names[id], 1, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0)
            return model_tmpl_fail(r, "TypeError", "%s() takes at least 1 argument (0 given)", method_names[id]);
        bool res;
        if (prefix_match(r, s, x, id == M_ENDSWITH, &res)) return -1;
        *out = tmpl_bool(res);
        return 0;
    }
    case M_UPPER:
    case M_LOWER:
    case M_TITLE:
    case M_CAPITALIZE:
    case M_SWAPCASE:
    case M_CASEFOLD: {
        if (model_tmpl_args_check(r, a, method_names[id], 0, NULL)) return -1;
        int mode = id == M_UPPER ? 'u' : id == M_LOWER ? 'l' : id == M_TITLE ? 't' : id == M_CAPITALIZE ? 'c' : id == M_SWAPCASE ? 's' : 'f';
        proto_buf b = {.max = r->lim.max_output};
        if (model_tmpl_case(&b, s->s, s->len, mode)) {
            proto_buf_deinit(&b);
            return model_tmpl_fail_limit(r, "string length");
        }
        return model_tmpl_str_from_buf(r, &b, out);
    }
    case M_REPLACE: {
        tmpl_val c;
        if (model_tmpl_args_check(r, a, "replace", 3, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0 || model_tmpl_arg(r, a, 1, NULL, &y) <= 0)
            return model_tmpl_fail(r, "TypeError", "replace expected at least 2 arguments");
        if (need_str(r, x, "replace() argument 1") || need_str(r, y, "replace() argument 2")) return -1;
        if (model_tmpl_arg(r, a, 2, NULL, &c) > 0 && need_int(r, c, "count", &n)) return -1;
        return model_tmpl_replace(r, s, tmpl_s(x), tmpl_s(y), n, out);
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: {
        if (model_tmpl_args_check(r, a, method_names[id], 1, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0) return model_tmpl_fail(r, "TypeError", "%s() takes at least 1 argument", method_names[id]);
        if (need_str(r, x, "argument")) return -1;
        tmpl_str *sub = tmpl_s(x);
        if (id == M_COUNT) {
            int64_t c = 0;
            if (!sub->len) c = (int64_t)model_tmpl_str_ncp(s) + 1;
            else
                for (const char *p = s->s; (p = memmem(p, s->len - (size_t)(p - s->s), sub->s, sub->len)); p += sub->len) c++;
            *out = tmpl_int(c);
            return 0;
        }
        int64_t at;
        if (find(r, s, sub, id == M_RFIND || id == M_RINDEX, &at)) return -1;
        if (at < 0 && (id == M_INDEX || id == M_RINDEX)) return model_tmpl_fail(r, "ValueError", "substring not found");
        *out = tmpl_int(at);
        return 0;
    }
    case M_JOIN: {
        if (model_tmpl_args_check(r, a, "join", 1, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0) return model_tmpl_fail(r, "TypeError", "join() takes exactly one argument (0 given)");
        tmpl_val items;
        if (model_tmpl_iter(r, x, &items)) return -1;
        tmpl_list *l = tmpl_l(items);
        proto_buf b = {.max = r->lim.max_output};
        int rc = 0;
        for (size_t i = 0; i < l->n && !rc; i++) {
            if (l->v[i].kind != TMPL_STR) {
                rc = model_tmpl_fail(r, "TypeError", "sequence item %zu: expected str instance, %s found", i, model_tmpl_type_name(l->v[i]));
                break;
            }
            if ((i && proto_buf_add(&b, s->s, s->len)) || proto_buf_add(&b, tmpl_s(l->v[i])->s, tmpl_s(l->v[i])->len))
                rc = model_tmpl_fail_limit(r, "string length");
        }
        tmpl_decref(r, items);
        if (rc) {
            proto_buf_deinit(&b);
            return -1;
        }
        return model_tmpl_str_from_buf(r, &b, out);
    }
    case M_CENTER:
    case M_LJUST:
    case M_RJUST:
    case M_ZFILL: {
        if (model_tmpl_args_check(r, a, method_names[id], id == M_ZFILL ? 1 : 2, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0 || need_int(r, x, "width", &n)) return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "%s() takes at least 1 argument", method_names[id]);
        if (id == M_ZFILL) {
            int64_t len = (int64_t)model_tmpl_str_ncp(s);
            if (n <= len) {
                tmpl_incref(self);
                *out = self;
                return 0;
            }
            proto_buf b = {.max = r->lim.max_output};
            size_t sign = s->len && (s->s[0] == '+' || s->s[0] == '-');
            int rc = proto_buf_add(&b, s->s, sign);
            for (int64_t i = len; i < n && !rc; i++) rc = proto_buf_putc(&b, '0');
            if (!rc) rc = proto_buf_add(&b, s->s + sign, s->len - sign);
            if (rc) {
                proto_buf_deinit(&b);
                return model_tmpl_fail_limit(r, "string length");
            }
            return model_tmpl_str_from_buf(r, &b, out);
        }
        y = tmpl_none();
        model_tmpl_arg(r, a, 1, NULL, &y);
        return pad(r, self, n, y, id == M_CENTER ? 'c' : id == M_LJUST ? 'l' : 'r', out);
    }
    case M_ISALPHA:
    case M_ISDIGIT:
    case M_ISALNUM:
    case M_ISSPACE:
    case M_ISLOWER:
    case M_ISUPPER:
    case M_ISTITLE:
    case M_ISDECIMAL:
    case M_ISNUMERIC:
        if (model_tmpl_args_check(r, a, method_names[id], 0, NULL)) return -1;
        *out = tmpl_bool(str_class(s, id));
        return 0;
    case M_PARTITION:
    case M_RPARTITION: {
        if (model_tmpl_args_check(r, a, method_names[id], 1, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0 || need_str(r, x, "sep")) return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "partition() takes exactly one argument");
        tmpl_str *sep = tmpl_s(x);
        if (!sep->len) return model_tmpl_fail(r, "ValueError", "empty separator");
        int64_t at;
        if (find(r, s, sep, id == M_RPARTITION, &at)) return -1;
        if (model_tmpl_list_new(r, TMPL_SEQ_TUPLE, 3, out)) return -1;
        if (at < 0) {
            if (id == M_PARTITION) return push_str(r, *out, s->s, s->len) || push_str(r, *out, "", 0) || push_str(r, *out, "", 0) ? -1 : 0;
            return push_str(r, *out, "", 0) || push_str(r, *out, "", 0) || push_str(r, *out, s->s, s->len) ? -1 : 0;
        }
        size_t off = proto_utf8_offset(s->s, s->len, (size_t)at);
        return push_str(r, *out, s->s, off) || push_str(r, *out, sep->s, sep->len) ||
                       push_str(r, *out, s->s + off + sep->len, s->len - off - sep->len)
                   ? -1 : 0;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if (model_tmpl_args_check(r, a, method_names[id], 1, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0 || need_str(r, x, "argument")) return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "%s() takes exactly one argument", method_names[id]);
        bool hit;
        prefix_match(r, s, x, id == M_REMOVESUFFIX, &hit);
        if (!hit) {
            tmpl_incref(self);
            *out = self;
            return 0;
        }
        size_t k = tmpl_s(x)->len;
        return model_tmpl_str_new(r, id == M_REMOVEPREFIX ? s->s + k : s->s, s->len - k, out);
    }
    case M_FORMAT: return model_tmpl_str_format(r, self, a, out);
    case M_EXPANDTABS: {
        int64_t tab = 8;
        if (model_tmpl_arg(r, a, 0, "tabsize", &x) > 0 && need_int(r, x, "tabsize", &tab)) return -1;
        proto_buf b = {.max = r->lim.max_output};
        int64_t col = 0;
        int rc = 0;
        for (size_t i = 0; i < s->len && !rc;) {
            size_t st = i;
            uint32_t c = proto_utf8_next(s->s, s->len, &i);
            if (c == '\t') {
                int64_t k = tab > 0 ? tab - col % tab : 0;
                for (int64_t j = 0; j < k && !rc; j++) rc = proto_buf_putc(&b, ' ');
                col += k;
            } else {
                rc = proto_buf_add(&b, s->s + st, i - st);
                col = c == '\n' || c == '\r' ? 0 : col + 1;
            }
        }
        if (rc) {
            proto_buf_deinit(&b);
            return model_tmpl_fail_limit(r, "string length");
        }
        return model_tmpl_str_from_buf(r, &b, out);
    }
    case M_ENCODE: return model_tmpl_fail(r, "TypeError", "str.encode() is not supported (templates produce text)");
    }
    return model_tmpl_fail(r, "AttributeError", "'str' object has no attribute '%s'", method_names[id]);
}

static int view(tmpl_rt *r, tmpl_dict *d, int kind, tmpl_val *out)
{
    if (model_tmpl_list_new(r, kind, d->n, out)) return -1;
    for (size_t i = 0; i < d->n; i++) {
        tmpl_val v;
        if (kind == TMPL_SEQ_ITEMS) {
            if (model_tmpl_list_new(r, TMPL_SEQ_TUPLE, 2, &v)) return -1;
            tmpl_incref(d->k[i]);
            tmpl_incref(d->v[i]);
            model_tmpl_list_push(r, v, d->k[i]);
            model_tmpl_list_push(r, v, d->v[i]);
        } else {
            v = kind == TMPL_SEQ_KEYS ? d->k[i] : d->v[i];
            tmpl_incref(v);
        }
        model_tmpl_list_push(r, *out, v);
    }
    return tmpl_step(r, d->n);
}

int model_tmpl_dict_items(tmpl_rt *r, tmpl_val d, int seq_kind, tmpl_val *out)
{
    if (view(r, tmpl_d(d), TMPL_SEQ_ITEMS, out)) return -1;
    out->u.o->sub = (uint8_t)seq_kind;
    return 0;
}

static int dict_method(tmpl_rt *r, int id, tmpl_val self, const tmpl_args *a, tmpl_val *out)
{
    tmpl_dict *d = tmpl_d(self);
    tmpl_val k, def = tmpl_none();
    switch (id) {
    case M_GET:
        if (model_tmpl_args_check(r, a, "get", 2, NULL)) return -1;
        if (model_tmpl_arg(r, a, 0, NULL, &k) <= 0) return model_tmpl_fail(r, "TypeError", "get expected at least 1 argument, got 0");
        model_tmpl_arg(r, a, 1, NULL, &def);
        {
            int f = model_tmpl_dict_get(r, d, k, out);
            if (f < 0) return -1;
            if (!f) *out = def;
            tmpl_incref(*out);
            return 0;
        }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES:
        if (model_tmpl_args_check(r, a, method_names[id], 0, NULL)) return -1;
        return view(r, d, id == M_ITEMS ? TMPL_SEQ_ITEMS : id == M_KEYS ? TMPL_SEQ_KEYS : TMPL_SEQ_VALUES, out);
    case M_COPY:
        if (model_tmpl_dict_new(r, TMPL_DICT, d->n, out)) return -1;
        for (size_t i = 0; i < d->n; i++) {
            tmpl_incref(d->k[i]);
            tmpl_incref(d->v[i]);
            if (model_tmpl_dict_set(r, *out, d->k[i], d->v[i])) return -1;
        }
        return 0;
    }
    return model_tmpl_fail(r, "AttributeError", "'dict' object has no attribute '%s'", method_names[id]);
}

static int list_method(tmpl_rt *r, int id, tmpl_val self, const tmpl_args *a, tmpl_val *out)
{
    tmpl_list *l = tmpl_l(self);
    tmpl_val x;
    if (id == M_COPY) {
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, l->n, out)) return -1;
        for (size_t i = 0; i < l->n; i++) {
            tmpl_incref(l->v[i]);
            model_tmpl_list_push(r, *out, l->v[i]);
        }
        return 0;
    }
    if (model_tmpl_args_check(r, a, method_names[id], 1, NULL)) return -1;
    if (model_tmpl_arg(r, a, 0, NULL, &x) <= 0) return model_tmpl_fail(r, "TypeError", "%s() takes exactly one argument (0 given)", method_names[id]);
    int64_t c = 0;
    for (size_t i = 0; i < l->n; i++) {
        int e = model_tmpl_eq(r, l->v[i], x, 0);
        if (e < 0) return -1;
        if (e && id == M_INDEX) {
            *out = tmpl_int((int64_t)i);
            return 0;
        }
        c += e;
    }
    if (id == M_INDEX) return model_tmpl_fail(r, "ValueError", "value is not in list");
    *out = tmpl_int(c);
    return tmpl_step(r, l->n);
}

static int loop_method(tmpl_rt *r, int id, tmpl_val self, const tmpl_args *a, tmpl_val *out)
{
    tmpl_loop *l = tmpl_lp(self);
    if (id == M_CYCLE) {
        if (!a->npos) return model_tmpl_fail(r, "TypeError", "no items for cycling given");
        *out = a->pos[l->i % a->npos];
        tmpl_incref(*out);
        return 0;
    }
    /* changed(*values): true when the values differ from the previous call's */
    tmpl_val now;
    if (model_tmpl_list_new(r, TMPL_SEQ_LIST, a->npos, &now)) return -1;
    for (size_t i = 0; i < a->npos; i++) {
        tmpl_incref(a->pos[i]);
        model_tmpl_list_push(r, now, a->pos[i]);
    }
    int same = l->changed_set ? model_tmpl_eq(r, now, l->changed_last, 0) : 0;
    if (same < 0) {
        tmpl_decref(r, now);
        return -1;
    }
    if (!same) {
        if (l->changed_set) tmpl_decref(r, l->changed_last);
        l->changed_last = now;
        l->changed_set = true;
    } else {
        tmpl_decref(r, now);
    }
    *out = tmpl_bool(!same);
    return 0;
}

int model_tmpl_method_call(tmpl_rt *r, tmpl_func *f, const tmpl_args *a, tmpl_val *out)
{
    if (tmpl_step(r, 1)) return -1;
    switch (f->self.kind) {
    case TMPL_STR: return str_method(r, f->id, f->self, a, out);
    case TMPL_DICT: return dict_method(r, f->id, f->self, a, out);
    case TMPL_LIST: return list_method(r, f->id, f->self, a, out);
    case TMPL_LOOP: return loop_method(r, f->id, f->self, a, out);
    case TMPL_FUNC: { /* cycler.next() / cycler.reset() */
        tmpl_func *c = tmpl_fn(f->self);
        tmpl_list *items = tmpl_l(c->self);
        if (a->npos || a->nkw)
            return model_tmpl_fail(r, "TypeError", "Cycler.%s() takes 1 positional argument but %zu were given", method_names[f->id], a->npos + 1);
        if (f->id == M_RESET) {
            c->state = 0;
            *out = tmpl_none();
            return 0;
        }
        *out = items->v[c->state];
        tmpl_incref(*out);
        c->state = (c->state + 1) % (int64_t)items->n;
        return 0;
    }
    }
    return model_tmpl_fail(r, "TypeError", "bad method call");
}

int model_tmpl_special_attr(tmpl_rt *r, tmpl_val obj, tmpl_str *name, tmpl_val *out)
{
    const char *s = name->s;
    if (obj.kind == TMPL_LOOP) {
        tmpl_loop *l = tmpl_lp(obj);
        int64_t i = (int64_t)l->i, n = (int64_t)l->n;
        if (!strcmp(s, "index")) *out = tmpl_int(i + 1);
        else if (!strcmp(s, "index0")) *out = tmpl_int(i);
        else if (!strcmp(s, "revindex")) *out = tmpl_int(n - i);
        else if (!strcmp(s, "revindex0")) *out = tmpl_int(n - i - 1);
        else if (!strcmp(s, "first")) *out = tmpl_bool(i == 0);
        else if (!strcmp(s, "last")) *out = tmpl_bool(i == n - 1);
        else if (!strcmp(s, "length")) *out = tmpl_int(n);
        else if (!strcmp(s, "depth")) *out = tmpl_int(l->depth);
        else if (!strcmp(s, "depth0")) *out = tmpl_int(l->depth - 1);
        else if (!strcmp(s, "previtem") || !strcmp(s, "nextitem")) {
            bool prev = s[0] == 'p';
            int64_t j = prev ? i - 1 : i + 1;
            if (j < 0 || j >= n)
                return model_tmpl_undef_msg(r, TMPL_UH_MSG, prev ? "there is no previous item" : "there is no next item", out) ? -1 : 1;
            *out = tmpl_l(l->seq)->v[j];
            tmpl_incref(*out);
        } else return 0;
        return 1;
    }
    if (obj.kind == TMPL_FUNC && obj.u.o->sub == TMPL_FN_CYCLER && !strcmp(s, "current")) {
        tmpl_func *c = tmpl_fn(obj);
        *out = tmpl_l(c->self)->v[c->state];
        tmpl_incref(*out);
        return 1;
    }
    return 0;
}
