/* model/tmpl/tmpl_filters.c — jinja2's built-in filters on text and numbers, and the filter table
 * (sequence filters are in tmpl_filters_seq.c). Each behaves as jinja2 3.1's, including how it
 * treats undefined and non-string input (most filters take str(value) first: undefined -> "").
 * tojson is transformers' version: json.dumps(x, ensure_ascii=False, indent, separators,
 * sort_keys) — no HTML escaping. */
#include "model/tmpl/tmpl_filters.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILTER(name) static int f_##name(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out)

static int check(tmpl_rt *r, const tmpl_args *a, const char *fname, size_t max, const char *const *names)
{
    return model_tmpl_args_check(r, a, fname, max, names);
}

FILTER(trim)
{
    static const char *const names[] = {"chars", NULL};
    tmpl_val s, chars = tmpl_none();
    if (check(r, a, "trim", 1, names) || model_tmpl_arg(r, a, 0, "chars", &chars) < 0) return -1;
    if (model_tmpl_to_str(r, in, &s)) return -1;
    int rc = model_tmpl_strip(r, s, chars, 's', out);
    tmpl_decref(r, s);
    return rc;
}

static int case_filter(tmpl_rt *r, tmpl_val in, const tmpl_args *a, const char *name, int mode, tmpl_val *out)
{
    tmpl_val s;
    if (check(r, a, name, 0, NULL) || model_tmpl_to_str(r, in, &s)) return -1;
    proto_buf b = {.max = r->lim.max_output};
    int rc = model_tmpl_case(&b, tmpl_s(s)->s, tmpl_s(s)->len, mode);
    tmpl_decref(r, s);
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

FILTER(upper) { return case_filter(r, in, a, "upper", 'u', out); }
FILTER(lower) { return case_filter(r, in, a, "lower", 'l', out); }
FILTER(capitalize) { return case_filter(r, in, a, "capitalize", 'c', out); }

static bool title_sep(uint32_t c)
{
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || model_tmpl_py_isspace(c);
}

/* jinja2's title: the text split into runs of [-\s({[<] and runs of anything else, each run its
 * first character upper and the rest lower (item[0].upper() + item[1:].lower(): the rest's final
 * sigma sees the rest only) */
FILTER(title)
{
    tmpl_val s;
    if (check(r, a, "title", 0, NULL) || model_tmpl_to_str(r, in, &s)) return -1;
    tmpl_str *x = tmpl_s(s);
    proto_buf b = {.max = r->lim.max_output};
    int rc = 0;
    for (size_t i = 0; i < x->len && !rc;) {
        size_t st = i, first;
        bool sep = title_sep(proto_utf8_next(x->s, x->len, &i));
        first = i;
        while (i < x->len) {
            size_t k = i;
            if (title_sep(proto_utf8_next(x->s, x->len, &k)) != sep) break;
            i = k;
        }
        rc = model_tmpl_case(&b, x->s + st, first - st, 'u') ||
             model_tmpl_case(&b, x->s + first, i - first, 'l');
    }
    tmpl_decref(r, s);
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

FILTER(replace)
{
    static const char *const names[] = {"old", "new", "count", NULL};
    tmpl_val s, o, n, c;
    int64_t count = -1;
    if (check(r, a, "replace", 3, names)) return -1;
    if (model_tmpl_arg(r, a, 0, "old", &o) <= 0 || model_tmpl_arg(r, a, 1, "new", &n) <= 0)
        return r->ek ? -1 : model_tmpl_fail(r, "TypeError", "do_replace() missing required arguments 'old' and 'new'");
    int g = model_tmpl_arg(r, a, 2, "count", &c);
    if (g < 0) return -1;
    if (g && c.kind != TMPL_NONE) {
        if (c.kind != TMPL_INT && c.kind != TMPL_BOOL)
            return model_tmpl_fail(r, "TypeError", "'%s' object cannot be interpreted as an integer", model_tmpl_type_name(c));
        count = c.u.i;
    }
    tmpl_val os, ns;
    if (model_tmpl_to_str(r, in, &s)) return -1;
    if (model_tmpl_to_str(r, o, &os)) {
        tmpl_decref(r, s);
        return -1;
    }
    if (model_tmpl_to_str(r, n, &ns)) {
        tmpl_decref(r, s);
        tmpl_decref(r, os);
        return -1;
    }
    int rc = model_tmpl_replace(r, tmpl_s(s), tmpl_s(os), tmpl_s(ns), count, out);
    tmpl_decref(r, s);
    tmpl_decref(r, os);
    tmpl_decref(r, ns);
    return rc;
}

FILTER(default)
{
    static const char *const names[] = {"default_value", "boolean", NULL};
    tmpl_val def, boolean = tmpl_bool(false);
    if (check(r, a, "default", 2, names)) return -1;
    int g = model_tmpl_arg(r, a, 0, "default_value", &def);
    if (g < 0 || model_tmpl_arg(r, a, 1, "boolean", &boolean) < 0) return -1;
    if (in.kind == TMPL_UNDEF || (model_tmpl_truthy(boolean) && !model_tmpl_truthy(in))) {
        if (!g) return model_tmpl_str_new(r, "", 0, out);
        *out = def;
    } else {
        *out = in;
    }
    tmpl_incref(*out);
    return 0;
}

FILTER(length)
{
    size_t n;
    if (check(r, a, "length", 0, NULL) || model_tmpl_len(r, in, &n)) return -1;
    *out = tmpl_int((int64_t)n);
    return 0;
}

FILTER(string)
{
    if (check(r, a, "string", 0, NULL)) return -1;
    return model_tmpl_to_str(r, in, out);
}

FILTER(safe)
{
    tmpl_val s;
    if (check(r, a, "safe", 0, NULL) || model_tmpl_to_str(r, in, &s)) return -1;
    if (s.u.o->flags & TMPL_OF_SAFE) {
        *out = s;
        return 0;
    }
    int rc = model_tmpl_str_new(r, tmpl_s(s)->s, tmpl_s(s)->len, out);
    tmpl_decref(r, s);
    if (!rc) out->u.o->flags |= TMPL_OF_SAFE;
    return rc;
}

FILTER(escape)
{
    if (check(r, a, "escape", 0, NULL)) return -1;
    if (in.kind == TMPL_STR && (in.u.o->flags & TMPL_OF_SAFE)) {
        tmpl_incref(in);
        *out = in;
        return 0;
    }
    tmpl_val s;
    if (model_tmpl_to_str(r, in, &s)) return -1;
    tmpl_str *x = tmpl_s(s);
    proto_buf b = {.max = r->lim.max_output};
    int rc = 0;
    for (size_t i = 0; i < x->len && !rc; i++) {
        switch (x->s[i]) {
        case '&': rc = proto_buf_add(&b, "&amp;", 5); break;
        case '<': rc = proto_buf_add(&b, "&lt;", 4); break;
        case '>': rc = proto_buf_add(&b, "&gt;", 4); break;
        case '"': rc = proto_buf_add(&b, "&#34;", 5); break;
        case '\'': rc = proto_buf_add(&b, "&#39;", 5); break;
        default: rc = proto_buf_putc(&b, x->s[i]);
        }
    }
    tmpl_decref(r, s);
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    if (model_tmpl_str_from_buf(r, &b, out)) return -1;
    out->u.o->flags |= TMPL_OF_SAFE;
    return 0;
}

FILTER(abs)
{
    if (check(r, a, "abs", 0, NULL)) return -1;
    if (in.kind == TMPL_INT || in.kind == TMPL_BOOL) {
        if (in.u.i == INT64_MIN) return model_tmpl_fail_int_range(r);
        *out = tmpl_int(in.u.i < 0 ? -in.u.i : in.u.i);
        return 0;
    }
    if (in.kind == TMPL_FLOAT) {
        *out = tmpl_float(fabs(in.u.f));
        return 0;
    }
    return model_tmpl_fail(r, "TypeError", "bad operand type for abs(): '%s'", model_tmpl_type_name(in));
}

/* Python's float(str): surrounding whitespace, sign, digits with single underscores, inf/nan. */
static bool parse_float(const char *s, size_t n, double *out)
{
    size_t b, e;
    model_tmpl_py_trim(s, n, &b, &e);
    if (b == e || e - b > 400) return false;
    char buf[512];
    size_t m = 0;
    for (size_t i = b; i < e; i++) {
        char c = s[i];
        if (c == '_') {
            bool ok = i > b && i + 1 < e && s[i - 1] >= '0' && s[i - 1] <= '9' && s[i + 1] >= '0' && s[i + 1] <= '9';
            if (!ok) return false;
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", c)) return false;
        buf[m++] = c;
    }
    buf[m] = 0;
    const char *t = buf + (buf[0] == '+' || buf[0] == '-');
    if (!strcasecmp(t, "inf") || !strcasecmp(t, "infinity") || !strcasecmp(t, "nan")) {
        double v = (t[0] | 0x20) == 'n' ? NAN : INFINITY;
        *out = buf[0] == '-' ? -v : v;
        return true;
    }
    if (strpbrk(t, "xXpP") || !strpbrk(t, "0123456789")) return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

/* Python's int(str, base): PARSED_INT, NOT_INT (a ValueError), or BIG_INT (valid digits
 * whose value int64 cannot hold; Python would give the big integer). */
enum { NOT_INT, PARSED_INT, BIG_INT };
static int parse_int(const char *s, size_t n, int base, int64_t *out)
{
    if (base != 0 && (base < 2 || base > 36)) return NOT_INT; /* int(): ValueError */
    size_t b, e;
    model_tmpl_py_trim(s, n, &b, &e);
    bool neg = false;
    if (b < e && (s[b] == '+' || s[b] == '-')) neg = s[b++] == '-';
    if (b + 1 < e && s[b] == '0') {
        char p = (char)(s[b + 1] | 0x20);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            b += 2;
            if (b < e && s[b] == '_') b++;
        }
    }
    if (base == 0) {
        base = 10;
        if (e - b > 1 && s[b] == '0') { /* base 0 forbids leading zeros unless all zero */
            for (size_t i = b; i < e; i++)
                if (s[i] != '0' && s[i] != '_') return NOT_INT;
        }
    }
    if (b == e) return NOT_INT;
    unsigned __int128 v = 0;
    bool big = false; /* past int64: the remaining digits are still checked */
    for (size_t i = b; i < e; i++) {
        char c = s[i];
        if (c == '_') {
            if (i == b || i + 1 == e || s[i + 1] == '_') return NOT_INT;
            continue;
        }
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
        if (d >= base) return NOT_INT;
        if (!big) v = v * (unsigned)base + (unsigned)d;
        if (v > (unsigned __int128)INT64_MAX + 1) big = true;
    }
    if (big || (!neg && v > INT64_MAX)) return BIG_INT;
    *out = neg ? (int64_t)(0 - (uint64_t)v) : (int64_t)v;
    return PARSED_INT;
}

FILTER(int)
{
    static const char *const names[] = {"default", "base", NULL};
    tmpl_val def = tmpl_int(0), base = tmpl_int(10);
    if (check(r, a, "int", 2, names) || model_tmpl_arg(r, a, 0, "default", &def) < 0 ||
        model_tmpl_arg(r, a, 1, "base", &base) < 0)
        return -1;
    /* jinja2's do_int: int(value) (int(value, base) for a string); on a TypeError or ValueError
     * int(float(value)), and the default when that fails too (nan, and a string's inf). An
     * OverflowError of the first int() (a float inf) is not caught. */
    int64_t v;
    double f;
    switch (in.kind) {
    case TMPL_UNDEF: return model_tmpl_undef_fail(r, in); /* Undefined.__int__ raises */
    case TMPL_INT:
    case TMPL_BOOL: *out = tmpl_int(in.u.i); return 0;
    case TMPL_FLOAT:
        if (isnan(in.u.f)) break;
        if (model_tmpl_py_int_of_float(r, in.u.f, &v)) return -1;
        *out = tmpl_int(v);
        return 0;
    case TMPL_STR: {
        tmpl_str *s = tmpl_s(in);
        int b = base.kind == TMPL_INT || base.kind == TMPL_BOOL ? (base.u.i < 0 || base.u.i > 36 ? -1 : (int)base.u.i) : -1;
        int p = parse_int(s->s, s->len, b, &v);
        if (p == BIG_INT) return model_tmpl_fail_int_range(r);
        if (p == PARSED_INT) {
            *out = tmpl_int(v);
            return 0;
        }
        if (parse_float(s->s, s->len, &f) && isfinite(f)) {
            if (model_tmpl_py_int_of_float(r, f, &v)) return -1;
            *out = tmpl_int(v);
            return 0;
        }
        break;
    }
    }
    *out = def;
    tmpl_incref(def);
    return 0;
}

FILTER(float)
{
    static const char *const names[] = {"default", NULL};
    tmpl_val def = tmpl_float(0.0);
    if (check(r, a, "float", 1, names) || model_tmpl_arg(r, a, 0, "default", &def) < 0) return -1;
    double f;
    if (in.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, in); /* Undefined.__float__ raises */
    if (in.kind == TMPL_FLOAT) {
        *out = in;
        return 0;
    }
    if (in.kind == TMPL_INT || in.kind == TMPL_BOOL) {
        *out = tmpl_float((double)in.u.i);
        return 0;
    }
    if (in.kind == TMPL_STR && parse_float(tmpl_s(in)->s, tmpl_s(in)->len, &f)) {
        *out = tmpl_float(f);
        return 0;
    }
    *out = def;
    tmpl_incref(def);
    return 0;
}

FILTER(round)
{
    static const char *const names[] = {"precision", "method", NULL};
    tmpl_val p = tmpl_int(0), m = tmpl_none();
    if (check(r, a, "round", 2, names) || model_tmpl_arg(r, a, 0, "precision", &p) < 0 ||
        model_tmpl_arg(r, a, 1, "method", &m) < 0)
        return -1;
    const char *method = m.kind == TMPL_STR ? tmpl_s(m)->s : m.kind == TMPL_NONE ? "common" : "";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return model_tmpl_fail(r, "FilterArgumentError", "method must be common, ceil or floor");
    int64_t prec;
    if (!tmpl_is_num(in)) return model_tmpl_fail(r, "TypeError", "type %s doesn't define __round__ method", model_tmpl_type_name(in));
    if (model_tmpl_int_arg(r, p, &prec)) return -1;
    double f;
    if (strcmp(method, "common")) {
        if (model_tmpl_py_round_ceil_floor(r, method[0] == 'c', in, prec, &f)) return -1;
        *out = tmpl_float(f);
        return 0;
    }
    if (in.kind != TMPL_FLOAT) { /* round(int, n) stays an int */
        int64_t v;
        if (model_tmpl_py_round_int(r, in.u.i, prec, &v)) return -1;
        *out = tmpl_int(v);
        return 0;
    }
    if (model_tmpl_py_round_float(r, in.u.f, prec, &f)) return -1;
    *out = tmpl_float(f);
    return 0;
}

FILTER(center)
{
    static const char *const names[] = {"width", NULL};
    tmpl_val w = tmpl_int(80), s;
    int64_t width;
    if (check(r, a, "center", 1, names) || model_tmpl_arg(r, a, 0, "width", &w) < 0 || model_tmpl_int_arg(r, w, &width)) return -1;
    if (model_tmpl_to_str(r, in, &s)) return -1;
    int rc = model_tmpl_center(r, s, width, out);
    tmpl_decref(r, s);
    return rc;
}

FILTER(indent)
{
    static const char *const names[] = {"width", "first", "blank", NULL};
    tmpl_val w = tmpl_int(4), first = tmpl_bool(false), blank = tmpl_bool(false), s, lines;
    if (check(r, a, "indent", 3, names) || model_tmpl_arg(r, a, 0, "width", &w) < 0 ||
        model_tmpl_arg(r, a, 1, "first", &first) < 0 || model_tmpl_arg(r, a, 2, "blank", &blank) < 0)
        return -1;
    /* jinja2 starts with s += "\n": only strings get through */
    if (in.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, in);
    if (in.kind == TMPL_LIST && in.u.o->sub == TMPL_SEQ_LIST)
        return model_tmpl_fail(r, "AttributeError", "'list' object has no attribute 'splitlines'");
    if (in.kind != TMPL_STR)
        return model_tmpl_fail(r, "TypeError", "unsupported operand type(s) for +=: '%s' and 'str'", model_tmpl_type_name(in));
    proto_buf ind = {.max = r->lim.max_output};
    if (w.kind == TMPL_STR) {
        proto_buf_add(&ind, tmpl_s(w)->s, tmpl_s(w)->len);
    } else if (w.kind == TMPL_INT || w.kind == TMPL_BOOL) {
        if (w.u.i > 10000) return model_tmpl_fail_limit(r, "indent width");
        for (int64_t i = 0; i < w.u.i; i++) proto_buf_putc(&ind, ' ');
    } else {
        proto_buf_deinit(&ind);
        if (w.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, w);
        return model_tmpl_fail(r, "TypeError", "can't multiply sequence by non-int of type '%s'", model_tmpl_type_name(w));
    }
    if (model_tmpl_to_str(r, in, &s)) {
        proto_buf_deinit(&ind);
        return -1;
    }
    /* s + "\n", split into lines (the trailing newline makes splitlines keep a last empty line) */
    int rc = model_tmpl_str_cat(r, s, "\n", 1, &s);
    if (!rc) {
        rc = model_tmpl_splitlines(r, tmpl_s(s), false, &lines);
        tmpl_decref(r, s);
    }
    if (rc) {
        proto_buf_deinit(&ind);
        return -1;
    }
    tmpl_list *l = tmpl_l(lines);
    proto_buf b = {.max = r->lim.max_output};
    const char *ip = ind.p ? ind.p : "";
    bool bl = model_tmpl_truthy(blank);
    if (model_tmpl_truthy(first)) rc |= proto_buf_add(&b, ip, ind.len);
    for (size_t i = 0; i < l->n && !rc; i++) {
        tmpl_str *line = tmpl_s(l->v[i]);
        if (i) {
            rc |= proto_buf_putc(&b, '\n');
            if (bl || line->len) rc |= proto_buf_add(&b, ip, ind.len);
        }
        rc |= proto_buf_add(&b, line->s, line->len);
    }
    tmpl_decref(r, lines);
    proto_buf_deinit(&ind);
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

FILTER(tojson)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    tmpl_val ea = tmpl_bool(false), ind = tmpl_none(), sep = tmpl_none(), sk = tmpl_bool(false);
    if (check(r, a, "tojson", 4, names) || model_tmpl_arg(r, a, 0, "ensure_ascii", &ea) < 0 ||
        model_tmpl_arg(r, a, 1, "indent", &ind) < 0 || model_tmpl_arg(r, a, 2, "separators", &sep) < 0 ||
        model_tmpl_arg(r, a, 3, "sort_keys", &sk) < 0)
        return -1;
    tmpl_json_opts o = {.ensure_ascii = model_tmpl_truthy(ea), .sort_keys = model_tmpl_truthy(sk)};
    char spaces[256];
    if (ind.kind == TMPL_INT || ind.kind == TMPL_BOOL) {
        int64_t n = ind.u.i < 0 ? 0 : ind.u.i;
        if (n >= (int64_t)sizeof spaces) return model_tmpl_fail_limit(r, "indent width");
        memset(spaces, ' ', (size_t)n);
        o.indent = spaces;
        o.indent_len = (size_t)n;
    } else if (ind.kind == TMPL_STR) {
        o.indent = tmpl_s(ind)->s;
        o.indent_len = tmpl_s(ind)->len;
    } else if (ind.kind == TMPL_UNDEF) {
        if (in.kind != TMPL_STR) return model_tmpl_undef_fail(r, ind); /* ' ' * indent */
    } else if (ind.kind != TMPL_NONE) {
        if (in.kind != TMPL_STR) /* json.dumps returns early for a str */
            return model_tmpl_fail(r, "TypeError", "can't multiply sequence by non-int of type '%s'", model_tmpl_type_name(ind));
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (sep.kind == TMPL_STR && model_tmpl_str_ncp(tmpl_s(sep)) == 2) { /* unpacks into two characters */
        tmpl_str *x = tmpl_s(sep);
        size_t k = proto_utf8_offset(x->s, x->len, 1);
        o.item_sep = x->s;
        o.item_sep_len = k;
        o.key_sep = x->s + k;
        o.key_sep_len = x->len - k;
    } else if (sep.kind == TMPL_LIST && !tmpl_is_iter(sep)) {
        tmpl_list *l = tmpl_l(sep);
        if (l->n != 2 || l->v[0].kind != TMPL_STR || l->v[1].kind != TMPL_STR)
            return model_tmpl_fail(r, "ValueError", "separators must be a pair of strings");
        o.item_sep = tmpl_s(l->v[0])->s;
        o.key_sep = tmpl_s(l->v[1])->s;
        o.item_sep_len = tmpl_s(l->v[0])->len;
        o.key_sep_len = tmpl_s(l->v[1])->len;
    } else if (sep.kind != TMPL_NONE && sep.kind != TMPL_UNDEF) {
        return model_tmpl_fail(r, "ValueError", "separators must be a pair of strings");
    } else {
        o.item_sep_len = strlen(o.item_sep);
        o.key_sep_len = strlen(o.key_sep);
    }
    proto_buf b = {.max = r->lim.max_output};
    if (model_tmpl_tojson(r, in, &o, &b)) {
        proto_buf_deinit(&b);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

FILTER(format)
{
    if (a->npos && a->nkw)
        return model_tmpl_fail(r, "FilterArgumentError", "can't handle positional and keyword arguments at the same time");
    tmpl_val s, args;
    if (model_tmpl_to_str(r, in, &s)) return -1;
    int rc;
    if (a->nkw) {
        rc = model_tmpl_dict_new(r, TMPL_DICT, a->nkw, &args);
        for (size_t i = 0; i < a->nkw && !rc; i++) {
            tmpl_val k;
            if ((rc = model_tmpl_str_new(r, a->kw_names[i], strlen(a->kw_names[i]), &k))) break;
            tmpl_incref(a->kw[i]);
            rc = model_tmpl_dict_set(r, args, k, a->kw[i]);
        }
    } else {
        rc = model_tmpl_list_new(r, TMPL_SEQ_TUPLE, a->npos, &args);
        for (size_t i = 0; i < a->npos && !rc; i++) {
            tmpl_incref(a->pos[i]);
            model_tmpl_list_push(r, args, a->pos[i]);
        }
    }
    if (!rc) rc = model_tmpl_str_percent(r, s, args, out);
    tmpl_decref(r, args);
    tmpl_decref(r, s);
    return rc;
}

FILTER(wordcount)
{
    tmpl_val s;
    if (check(r, a, "wordcount", 0, NULL) || model_tmpl_to_str(r, in, &s)) return -1;
    tmpl_str *x = tmpl_s(s);
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < x->len;) {
        uint32_t c = proto_utf8_next(x->s, x->len, &i);
        bool w = model_tmpl_py_isword(c);
        if (w && !in_word) n++;
        in_word = w;
    }
    tmpl_decref(r, s);
    *out = tmpl_int(n);
    return 0;
}

FILTER(truncate)
{
    static const char *const names[] = {"length", "killwords", "end", "leeway", NULL};
    tmpl_val lenv = tmpl_int(255), kill = tmpl_bool(false), endv = tmpl_none(), lee = tmpl_none(), s;
    if (check(r, a, "truncate", 4, names) || model_tmpl_arg(r, a, 0, "length", &lenv) < 0 ||
        model_tmpl_arg(r, a, 1, "killwords", &kill) < 0 || model_tmpl_arg(r, a, 2, "end", &endv) < 0 ||
        model_tmpl_arg(r, a, 3, "leeway", &lee) < 0)
        return -1;
    if (lenv.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, lenv);
    if (lee.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, lee);
    if ((lenv.kind != TMPL_INT && lenv.kind != TMPL_BOOL) || (lee.kind != TMPL_INT && lee.kind != TMPL_BOOL && lee.kind != TMPL_NONE))
        return model_tmpl_fail(r, "TypeError", "'>=' not supported between instances of '%s' and 'int'", model_tmpl_type_name(lenv));
    const char *end = endv.kind == TMPL_STR ? tmpl_s(endv)->s : "...";
    size_t end_len = endv.kind == TMPL_STR ? tmpl_s(endv)->len : 3;
    int64_t length = lenv.kind == TMPL_INT ? lenv.u.i : 255, leeway = lee.kind == TMPL_INT ? lee.u.i : 5;
    int64_t end_cp = (int64_t)proto_utf8_count(end, end_len);
    if (length < end_cp) return model_tmpl_fail(r, "AssertionError", "expected length >= %lld, got %lld", (long long)end_cp, (long long)length);
    if (leeway < 0) return model_tmpl_fail(r, "AssertionError", "expected leeway >= 0, got %lld", (long long)leeway);
    /* jinja2 works on the value itself (len(), slicing, rsplit): strings, and short sequences */
    if (in.kind != TMPL_STR) {
        size_t n;
        if (model_tmpl_len(r, in, &n)) return -1;
        if ((int64_t)n <= length + leeway) {
            tmpl_incref(in);
            *out = in;
            return 0;
        }
        return model_tmpl_fail(r, "AttributeError", "'%s' object has no attribute 'rsplit'", model_tmpl_type_name(in));
    }
    s = in;
    tmpl_incref(s);
    tmpl_str *x = tmpl_s(s);
    if ((int64_t)model_tmpl_str_ncp(x) <= length + leeway) {
        *out = s;
        return 0;
    }
    size_t cut = proto_utf8_offset(x->s, x->len, (size_t)(length - end_cp));
    if (!model_tmpl_truthy(kill)) { /* drop the last (partial) word: rsplit(" ", 1)[0] */
        for (size_t k = cut; k-- > 0;)
            if (x->s[k] == ' ') {
                cut = k;
                break;
            }
    }
    proto_buf b = {.max = r->lim.max_output};
    int rc = proto_buf_add(&b, x->s, cut) || proto_buf_add(&b, end, end_len);
    tmpl_decref(r, s);
    if (rc) {
        proto_buf_deinit(&b);
        return model_tmpl_fail_limit(r, "string length");
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

FILTER(striptags)
{
    tmpl_val s;
    if (check(r, a, "striptags", 0, NULL) || model_tmpl_to_str(r, in, &s)) return -1;
    tmpl_str *x = tmpl_s(s);
    proto_buf t = {.max = r->lim.max_output}, b = {.max = r->lim.max_output};
    /* comments, then tags (markupsafe's order), then whitespace runs to one space */
    size_t i = 0;
    while (i < x->len) {
        const char *c = memmem(x->s + i, x->len - i, "<!--", 4);
        const char *e = c ? memmem(c, x->len - (size_t)(c - x->s), "-->", 3) : NULL;
        size_t stop = e ? (size_t)(c - x->s) : x->len;
        proto_buf_add(&t, x->s + i, stop - i);
        i = e ? (size_t)(e - x->s) + 3 : x->len;
    }
    proto_buf u = {.max = r->lim.max_output};
    const char *p = t.p ? t.p : "";
    for (i = 0; i < t.len;) {
        const char *lt = memchr(p + i, '<', t.len - i);
        const char *gt = lt ? memchr(lt, '>', t.len - (size_t)(lt - p)) : NULL;
        size_t stop = gt ? (size_t)(lt - p) : t.len;
        proto_buf_add(&u, p + i, stop - i);
        i = gt ? (size_t)(gt - p) + 1 : t.len;
    }
    proto_buf_deinit(&t);
    bool space = false, any = false;
    const char *q = u.p ? u.p : "";
    for (i = 0; i < u.len;) {
        size_t st = i;
        uint32_t c = proto_utf8_next(q, u.len, &i);
        if (model_tmpl_py_isspace(c)) {
            space = any;
            continue;
        }
        if (space) proto_buf_putc(&b, ' ');
        space = false;
        any = true;
        /* the common HTML entities (markupsafe unescapes all of HTML5's) */
        static const struct {
            const char *ent, *txt;
        } ents[] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#34;", "\""},
                    {"&#39;", "'"}, {"&apos;", "'"}, {"&nbsp;", "\xc2\xa0"}};
        bool done = false;
        if (c == '&')
            for (size_t k = 0; k < sizeof ents / sizeof *ents && !done; k++) {
                size_t l = strlen(ents[k].ent);
                if (st + l <= u.len && !memcmp(q + st, ents[k].ent, l)) {
                    proto_buf_add(&b, ents[k].txt, strlen(ents[k].txt));
                    i = st + l;
                    done = true;
                }
            }
        if (!done) proto_buf_add(&b, q + st, i - st);
    }
    proto_buf_deinit(&u);
    tmpl_decref(r, s);
    return model_tmpl_str_from_buf(r, &b, out);
}

static int url_quote(tmpl_rt *r, tmpl_val v, const char *safe, bool plus, proto_buf *b)
{
    tmpl_val s;
    if (model_tmpl_to_str(r, v, &s)) return -1;
    tmpl_str *x = tmpl_s(s);
    int rc = 0;
    for (size_t i = 0; i < x->len && !rc; i++) {
        unsigned char c = (unsigned char)x->s[i];
        if ((unsigned)((c | 0x20) - 'a') < 26u || (c >= '0' && c <= '9') || (c && (strchr("_.-~", c) || strchr(safe, c)))) {
            rc = proto_buf_putc(b, plus && c == ' ' ? '+' : (char)c);
        } else {
            rc = proto_buf_printf(b, "%%%02X", c);
        }
    }
    tmpl_decref(r, s);
    return rc ? model_tmpl_fail_limit(r, "string length") : 0;
}

FILTER(urlencode)
{
    if (check(r, a, "urlencode", 0, NULL)) return -1;
    proto_buf b = {.max = r->lim.max_output};
    int rc = 0;
    if (in.kind == TMPL_STR) {
        rc = url_quote(r, in, "/", false, &b);
    } else {
        tmpl_val items = tmpl_undef();
        if (in.kind == TMPL_DICT) rc = model_tmpl_dict_items(r, in, TMPL_SEQ_ITEMS, &items);
        else rc = model_tmpl_iter(r, in, &items);
        tmpl_list *l = rc ? NULL : tmpl_l(items);
        for (size_t i = 0; l && i < l->n && !rc; i++) {
            tmpl_val p = l->v[i];
            if (p.kind != TMPL_LIST || tmpl_l(p)->n != 2) {
                rc = model_tmpl_fail(r, "ValueError", "urlencode needs (key, value) pairs");
                break;
            }
            if (i) proto_buf_putc(&b, '&');
            rc = url_quote(r, tmpl_l(p)->v[0], " ", true, &b);
            if (!rc) rc = proto_buf_putc(&b, '=') ? model_tmpl_fail_limit(r, "string length") : 0;
            if (!rc) rc = url_quote(r, tmpl_l(p)->v[1], " ", true, &b);
        }
        tmpl_decref(r, items);
    }
    if (rc) {
        proto_buf_deinit(&b);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

FILTER(filesizeformat)
{
    static const char *const names[] = {"binary", NULL};
    tmpl_val bin = tmpl_bool(false);
    if (check(r, a, "filesizeformat", 1, names) || model_tmpl_arg(r, a, 0, "binary", &bin) < 0) return -1;
    double bytes;
    if (in.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, in);
    if (tmpl_is_num(in)) bytes = in.kind == TMPL_FLOAT ? in.u.f : (double)in.u.i;
    else if (in.kind == TMPL_STR && parse_float(tmpl_s(in)->s, tmpl_s(in)->len, &bytes)) {
    } else return model_tmpl_fail(r, "ValueError", "could not convert %s to float", model_tmpl_type_name(in));
    bool binary = model_tmpl_truthy(bin);
    double base = binary ? 1024 : 1000;
    static const char *const dec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    static const char *const bi[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    char buf[64];
    if (bytes == 1) snprintf(buf, sizeof buf, "1 Byte");
    else if (bytes < base) snprintf(buf, sizeof buf, "%lld Bytes", (long long)bytes);
    else {
        int i = 0;
        double unit = base * base;
        while (i < 7 && bytes >= unit) {
            i++;
            unit *= base;
        }
        snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, binary ? bi[i] : dec[i]);
    }
    return model_tmpl_str_new(r, buf, strlen(buf), out);
}

FILTER(attr)
{
    tmpl_val name;
    if (check(r, a, "attr", 1, NULL)) return -1;
    if (model_tmpl_arg(r, a, 0, NULL, &name) <= 0) return model_tmpl_fail(r, "TypeError", "attr() missing 1 required positional argument: 'name'");
    if (name.kind != TMPL_STR) return model_tmpl_fail(r, "TypeError", "attribute name must be string");
    if (in.kind == TMPL_UNDEF) return model_tmpl_undef_fail(r, in);
    tmpl_str *ns = tmpl_s(name);
    int method = model_tmpl_method_id(ns->s, ns->len);
    /* attributes only: a dict's keys are not attributes */
    if (in.kind == TMPL_NS && model_tmpl_dict_get_str(tmpl_d(in), ns->s, ns->len, out)) {
        tmpl_incref(*out);
        return 0;
    }
    if (in.kind == TMPL_LOOP || in.kind == TMPL_FUNC) {
        int f = model_tmpl_special_attr(r, in, ns, out);
        if (f) return f < 0 ? -1 : 0;
    }
    if (method) {
        int f = model_tmpl_method_get(r, in, method, out);
        if (f) return f < 0 ? -1 : 0;
    }
    return model_tmpl_undef_attr(r, in, name, out);
}

/* ---------------------------------------------------------------------------------- table */

static const struct {
    const char *name;
    tmpl_filter_fn fn; /* NULL: jinja2 has it, we do not (compile-time error) */
} filters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", model_tmpl_f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", model_tmpl_f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"filesizeformat", f_filesizeformat},
    {"first", model_tmpl_f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"groupby", model_tmpl_f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", model_tmpl_f_items},
    {"join", model_tmpl_f_join},
    {"last", model_tmpl_f_last},
    {"length", f_length},
    {"list", model_tmpl_f_list},
    {"lower", f_lower},
    {"map", model_tmpl_f_map},
    {"max", model_tmpl_f_max},
    {"min", model_tmpl_f_min},
    {"pprint", NULL},
    {"random", NULL},
    {"reject", model_tmpl_f_reject},
    {"rejectattr", model_tmpl_f_rejectattr},
    {"replace", f_replace},
    {"reverse", model_tmpl_f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", model_tmpl_f_select},
    {"selectattr", model_tmpl_f_selectattr},
    {"slice", model_tmpl_f_slice},
    {"sort", model_tmpl_f_sort},
    {"string", f_string},
    {"striptags", f_striptags},
    {"sum", model_tmpl_f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", model_tmpl_f_unique},
    {"upper", f_upper},
    {"urlencode", f_urlencode},
    {"urlize", NULL},
    {"wordcount", f_wordcount},
    {"wordwrap", NULL},
    {"xmlattr", NULL},
};

#define NFILTERS (int)(sizeof filters / sizeof *filters)

int model_tmpl_filter_id(const char *name, size_t len)
{
    for (int i = 0; i < NFILTERS; i++)
        if (strlen(filters[i].name) == len && !memcmp(filters[i].name, name, len)) return filters[i].fn ? i : -2;
    return -1;
}

const char *model_tmpl_filter_name(int id) { return id >= 0 && id < NFILTERS ? filters[id].name : "?"; }

int model_tmpl_filter(tmpl_rt *r, int id, tmpl_val in, const tmpl_args *a, tmpl_val *out)
{
    if (id < 0 || id >= NFILTERS || !filters[id].fn) return model_tmpl_fail(r, "TemplateRuntimeError", "no such filter");
    if (tmpl_step(r, 1)) return -1;
    return filters[id].fn(r, in, a, out);
}
