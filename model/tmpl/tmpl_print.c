/* model/tmpl/tmpl_print.c — values as text: Python's str() (what {{ v }} prints) and repr() (how
 * values look inside printed containers), float repr (shortest round-trip digits), and
 * json.dumps as transformers' tojson filter calls it.
 *
 * Objects whose Python repr carries a memory address (generators, bound methods) print without
 * one: no template can depend on an address. */
#include "model/tmpl/tmpl_int.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_tmpl_float_repr(double f, char out[32])
{
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        strcpy(out, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    /* the fewest significant digits that read back as f (Python's repr) */
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    char digits[24];
    int nd = 0;
    const char *s = buf;
    bool neg = *s == '-';
    if (neg) s++;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp < -4 || exp >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        return;
    }
    int decpt = exp + 1;
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else if (decpt >= nd) {
        memcpy(o, digits, (size_t)nd);
        o += nd;
        for (int i = nd; i < decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    }
    *o = 0;
}

/* A full buffer: the output (r->out) or a string being built. */
static int full(tmpl_rt *r, proto_buf *b)
{
    return model_tmpl_fail_limit(r, b == r->out ? "output size" : "string length");
}

static int put(tmpl_rt *r, proto_buf *b, const char *s, size_t n)
{
    return proto_buf_add(b, s, n) ? full(r, b) : 0;
}

#define PUTS(b, lit) put(r, b, lit, sizeof(lit) - 1)

static int str_repr(tmpl_rt *r, tmpl_str *s, proto_buf *b)
{
    bool sq = memchr(s->s, '\'', s->len) != NULL, dq = memchr(s->s, '"', s->len) != NULL;
    char q = sq && !dq ? '"' : '\'';
    if (put(r, b, &q, 1)) return -1;
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < s->len;) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[16];
        int en = 0;
        size_t st = i;
        if (c < 0x80) {
            i++;
            if (c == (unsigned char)q || c == '\\') en = sprintf(esc, "\\%c", c);
            else if (c == '\n') en = sprintf(esc, "\\n");
            else if (c == '\r') en = sprintf(esc, "\\r");
            else if (c == '\t') en = sprintf(esc, "\\t");
            else if (c < 0x20 || c == 0x7F) en = sprintf(esc, "\\x%02x", c);
        } else {
            uint32_t cp = proto_utf8_next(s->s, s->len, &i);
            if (!model_tmpl_py_printable(cp))
                en = sprintf(esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        }
        if (!en) {
            run += i - st;
            continue;
        }
        if (put(r, b, s->s + st - run, run) || put(r, b, esc, (size_t)en)) return -1;
        run = 0;
    }
    if (put(r, b, s->s + s->len - run, run)) return -1;
    return put(r, b, &q, 1);
}

static int items_repr(tmpl_rt *r, tmpl_list *l, proto_buf *b, int depth)
{
    for (size_t i = 0; i < l->n; i++) {
        if (i && PUTS(b, ", ")) return -1;
        if (model_tmpl_repr(r, l->v[i], b, depth + 1)) return -1;
    }
    return 0;
}

static int dict_repr(tmpl_rt *r, tmpl_dict *d, proto_buf *b, int depth)
{
    if (PUTS(b, "{")) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (i && PUTS(b, ", ")) return -1;
        if (model_tmpl_repr(r, d->k[i], b, depth + 1) || PUTS(b, ": ") ||
            model_tmpl_repr(r, d->v[i], b, depth + 1))
            return -1;
    }
    return PUTS(b, "}");
}

static int func_repr(tmpl_rt *r, tmpl_func *f, proto_buf *b)
{
    switch (f->h.sub) {
    case TMPL_FN_MACRO:
        return proto_buf_printf(b, "<Macro '%s'>", r->t->names[f->node->sym]) ? full(r, b) : 0;
    case TMPL_FN_CALLER: return PUTS(b, "<Macro 'caller'>");
    case TMPL_FN_METHOD:
        return proto_buf_printf(b, "<built-in method of %s object>", model_tmpl_type_name(f->self))
                   ? full(r, b) : 0;
    case TMPL_FN_CYCLER: return PUTS(b, "<jinja2.utils.Cycler object>");
    case TMPL_FN_JOINER: return PUTS(b, "<jinja2.utils.Joiner object>");
    default: return PUTS(b, "<function>");
    }
}

int model_tmpl_repr(tmpl_rt *r, tmpl_val v, proto_buf *b, int depth)
{
    if (depth > r->lim.max_depth) return model_tmpl_fail_limit(r, "nesting depth");
    switch (v.kind) {
    case TMPL_UNDEF: return PUTS(b, "Undefined");
    case TMPL_STR: return str_repr(r, tmpl_s(v), b);
    case TMPL_LIST: {
        tmpl_list *l = tmpl_l(v);
        switch (l->h.sub) {
        case TMPL_SEQ_TUPLE:
            if (PUTS(b, "(") || items_repr(r, l, b, depth)) return -1;
            return l->n == 1 ? PUTS(b, ",)") : PUTS(b, ")");
        case TMPL_SEQ_GEN: return PUTS(b, "<generator object>");
        case TMPL_SEQ_REVITER: return PUTS(b, "<list_reverseiterator object>");
        case TMPL_SEQ_RANGE:
            if (l->r_step == 1)
                return proto_buf_printf(b, "range(%lld, %lld)", (long long)l->r_start, (long long)l->r_stop)
                           ? full(r, b) : 0;
            return proto_buf_printf(b, "range(%lld, %lld, %lld)", (long long)l->r_start,
                                         (long long)l->r_stop, (long long)l->r_step)
                       ? full(r, b) : 0;
        case TMPL_SEQ_KEYS:
        case TMPL_SEQ_VALUES:
        case TMPL_SEQ_ITEMS: {
            const char *name = l->h.sub == TMPL_SEQ_KEYS ? "dict_keys([" : l->h.sub == TMPL_SEQ_VALUES ? "dict_values([" : "dict_items([";
            if (put(r, b, name, strlen(name)) || items_repr(r, l, b, depth)) return -1;
            return PUTS(b, "])");
        }
        default:
            if (PUTS(b, "[") || items_repr(r, l, b, depth)) return -1;
            return PUTS(b, "]");
        }
    }
    case TMPL_DICT: return dict_repr(r, tmpl_d(v), b, depth);
    case TMPL_NS:
        if (PUTS(b, "<Namespace ") || dict_repr(r, tmpl_d(v), b, depth)) return -1;
        return PUTS(b, ">");
    case TMPL_FUNC: return func_repr(r, tmpl_fn(v), b);
    case TMPL_LOOP: {
        tmpl_loop *l = tmpl_lp(v);
        return proto_buf_printf(b, "<LoopContext %zu/%zu>", l->i + 1, l->n) ? full(r, b) : 0;
    }
    default: return model_tmpl_str_of(r, v, b);
    }
}

int model_tmpl_str_of(tmpl_rt *r, tmpl_val v, proto_buf *b)
{
    switch (v.kind) {
    case TMPL_UNDEF: return 0;
    case TMPL_NONE: return PUTS(b, "None");
    case TMPL_BOOL: return v.u.i ? PUTS(b, "True") : PUTS(b, "False");
    case TMPL_INT: {
        char tmp[24];
        int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        return put(r, b, tmp, (size_t)n);
    }
    case TMPL_FLOAT: {
        char tmp[32];
        model_tmpl_float_repr(v.u.f, tmp);
        return put(r, b, tmp, strlen(tmp));
    }
    case TMPL_STR: return put(r, b, tmpl_s(v)->s, tmpl_s(v)->len);
    default: return model_tmpl_repr(r, v, b, 0);
    }
}

int model_tmpl_to_str(tmpl_rt *r, tmpl_val v, tmpl_val *out)
{
    if (v.kind == TMPL_STR) {
        tmpl_incref(v);
        *out = v;
        return 0;
    }
    proto_buf b = {.max = r->lim.max_output};
    if (model_tmpl_str_of(r, v, &b)) {
        proto_buf_deinit(&b);
        return -1;
    }
    return model_tmpl_str_from_buf(r, &b, out);
}

/* ------------------------------------------------------------------------------- json.dumps */

static int json_str(tmpl_rt *r, const char *s, size_t n, bool ascii, proto_buf *b)
{
    if (PUTS(b, "\"")) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t st = i;
        char esc[16];
        int en = 0;
        if (c < 0x80) {
            i++;
            switch (c) {
            case '"': en = sprintf(esc, "\\\""); break;
            case '\\': en = sprintf(esc, "\\\\"); break;
            case '\n': en = sprintf(esc, "\\n"); break;
            case '\r': en = sprintf(esc, "\\r"); break;
            case '\t': en = sprintf(esc, "\\t"); break;
            case '\b': en = sprintf(esc, "\\b"); break;
            case '\f': en = sprintf(esc, "\\f"); break;
            default:
                if (c < 0x20 || (ascii && c == 0x7F)) en = sprintf(esc, "\\u%04x", c);
            }
        } else if (ascii) {
            uint32_t cp = proto_utf8_next(s, n, &i);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                en = sprintf(esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                en = sprintf(esc, "\\u%04x", cp);
            }
        } else {
            i++;
        }
        if (!en) {
            run += i - st;
            continue;
        }
        if (put(r, b, s + st - run, run) || put(r, b, esc, (size_t)en)) return -1;
        run = 0;
    }
    if (put(r, b, s + n - run, run)) return -1;
    return PUTS(b, "\"");
}

static int json_newline(tmpl_rt *r, const tmpl_json_opts *o, proto_buf *b, int level)
{
    if (PUTS(b, "\n")) return -1;
    for (int i = 0; i < level; i++)
        if (put(r, b, o->indent, o->indent_len)) return -1;
    return 0;
}

static int json_value(tmpl_rt *r, tmpl_val v, const tmpl_json_opts *o, proto_buf *b, int level);

static int json_key(tmpl_rt *r, tmpl_val k, const tmpl_json_opts *o, proto_buf *b)
{
    switch (k.kind) {
    case TMPL_STR: return json_str(r, tmpl_s(k)->s, tmpl_s(k)->len, o->ensure_ascii, b);
    case TMPL_NONE: return PUTS(b, "\"null\"");
    case TMPL_BOOL: return k.u.i ? PUTS(b, "\"true\"") : PUTS(b, "\"false\"");
    case TMPL_INT:
    case TMPL_FLOAT:
        if (PUTS(b, "\"") || json_value(r, k, o, b, 0)) return -1;
        return PUTS(b, "\"");
    }
    return model_tmpl_fail(r, "TypeError", "keys must be str, int, float, bool or None, not %s",
                           model_tmpl_type_name(k));
}

static int json_value(tmpl_rt *r, tmpl_val v, const tmpl_json_opts *o, proto_buf *b, int level)
{
    if (level > r->lim.max_depth) return model_tmpl_fail_limit(r, "nesting depth");
    switch (v.kind) {
    case TMPL_NONE: return PUTS(b, "null");
    case TMPL_BOOL: return v.u.i ? PUTS(b, "true") : PUTS(b, "false");
    case TMPL_INT: return model_tmpl_str_of(r, v, b);
    case TMPL_FLOAT:
        if (isnan(v.u.f)) return PUTS(b, "NaN");
        if (isinf(v.u.f)) return v.u.f > 0 ? PUTS(b, "Infinity") : PUTS(b, "-Infinity");
        return model_tmpl_str_of(r, v, b);
    case TMPL_STR: return json_str(r, tmpl_s(v)->s, tmpl_s(v)->len, o->ensure_ascii, b);
    case TMPL_LIST:
        if (v.u.o->sub == TMPL_SEQ_LIST || v.u.o->sub == TMPL_SEQ_TUPLE) {
            tmpl_list *l = tmpl_l(v);
            if (!l->n) return PUTS(b, "[]");
            if (PUTS(b, "[")) return -1;
            for (size_t i = 0; i < l->n; i++) {
                if (i && put(r, b, o->item_sep, o->item_sep_len)) return -1;
                if (o->indent && json_newline(r, o, b, level + 1)) return -1;
                if (json_value(r, l->v[i], o, b, level + 1)) return -1;
            }
            if (o->indent && json_newline(r, o, b, level)) return -1;
            return PUTS(b, "]");
        }
        break;
    case TMPL_DICT: {
        tmpl_dict *d = tmpl_d(v);
        if (!d->n) return PUTS(b, "{}");
        size_t *order = malloc(d->n * sizeof *order);
        if (!order) return model_tmpl_fail(r, "MemoryError", "out of memory");
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        int rc = 0;
        if (o->sort_keys) /* insertion sort: stable, and errors surface like Python's sorted() */
            for (size_t i = 1; i < d->n && !rc; i++)
                for (size_t j = i; j > 0; j--) {
                    int lt = model_tmpl_lt(r, d->k[order[j]], d->k[order[j - 1]]);
                    if (lt < 0) {
                        rc = -1;
                        break;
                    }
                    if (!lt) break;
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        if (!rc) rc = PUTS(b, "{");
        for (size_t i = 0; i < d->n && !rc; i++) {
            if (i && put(r, b, o->item_sep, o->item_sep_len)) rc = -1;
            else if (o->indent && json_newline(r, o, b, level + 1)) rc = -1;
            else if (json_key(r, d->k[order[i]], o, b) || put(r, b, o->key_sep, o->key_sep_len) ||
                     json_value(r, d->v[order[i]], o, b, level + 1))
                rc = -1;
        }
        free(order);
        if (rc) return -1;
        if (o->indent && json_newline(r, o, b, level)) return -1;
        return PUTS(b, "}");
    }
    }
    return model_tmpl_fail(r, "TypeError", "Object of type %s is not JSON serializable", model_tmpl_type_name(v));
}

int model_tmpl_tojson(tmpl_rt *r, tmpl_val v, const tmpl_json_opts *o, proto_buf *b)
{
    return json_value(r, v, o, b, 0);
}
