/* model/tmpl/tmpl_strfmt.c — Python string formatting: str.format() with the format-spec
 * mini-language ([[fill]align][sign][#][0][width][,|_][.precision][type]) and printf-style
 * `fmt % args` (what jinja2's |format filter uses). Numbers go through C's printf, whose
 * %e/%f/%g/%x output matches Python's for the same precision. */
#include "model/tmpl/tmpl_int.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spec {
    char fill[5];
    char align; /* < > ^ = or 0 */
    char sign;  /* + - space or 0 */
    bool alt, zero;
    int64_t width, prec; /* -1: none */
    char group;          /* , _ or 0 */
    char type;           /* 0: none */
} spec;

static int parse_spec(tmpl_rt *r, const char *s, size_t n, spec *p)
{
    memset(p, 0, sizeof *p);
    p->width = p->prec = -1;
    strcpy(p->fill, " ");
    size_t i = 0;
    size_t k = 0;
    if (n) {
        proto_utf8_next(s, n, &k);
        if (k < n && strchr("<>^=", s[k])) {
            memcpy(p->fill, s, k);
            p->fill[k] = 0;
            p->align = s[k];
            i = k + 1;
        } else if (strchr("<>^=", s[0])) {
            p->align = s[0];
            i = 1;
        }
    }
    if (i < n && strchr("+- ", s[i])) p->sign = s[i++];
    if (i < n && s[i] == '#') p->alt = true, i++;
    if (i < n && s[i] == '0') p->zero = true, i++;
    if (i < n && s[i] >= '0' && s[i] <= '9') {
        p->width = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9' && p->width < 1000000) p->width = p->width * 10 + (s[i++] - '0');
    }
    if (i < n && (s[i] == ',' || s[i] == '_')) p->group = s[i++];
    if (i < n && s[i] == '.') {
        i++;
        p->prec = 0;
        if (i >= n || s[i] < '0' || s[i] > '9') return model_tmpl_fail(r, "ValueError", "Format specifier missing precision");
        while (i < n && s[i] >= '0' && s[i] <= '9' && p->prec < 1000) p->prec = p->prec * 10 + (s[i++] - '0');
    }
    if (i < n) p->type = s[i++];
    if (i < n) return model_tmpl_fail(r, "ValueError", "Invalid format specifier '%.*s'", (int)n, s);
    if (p->width > 100000 || p->prec > 1000) return model_tmpl_fail_limit(r, "format width");
    if (p->zero && !p->align) {
        p->align = '=';
        strcpy(p->fill, "0");
    }
    return 0;
}

/* Pads body (sign/prefix kept before fill for '=') into b. */
static int pad_out(proto_buf *b, const spec *p, const char *pre, const char *body, size_t blen, char def_align)
{
    size_t plen = strlen(pre);
    size_t len = plen + proto_utf8_count(body, blen);
    int64_t fill = p->width > (int64_t)len ? p->width - (int64_t)len : 0;
    char align = p->align ? p->align : def_align;
    int64_t left = align == '>' || align == '=' ? fill : align == '^' ? fill / 2 : 0, right = fill - left;
    size_t fl = strlen(p->fill);
    int rc = 0;
    if (align == '=') rc |= proto_buf_add(b, pre, plen);
    for (int64_t i = 0; i < left && !rc; i++) rc |= proto_buf_add(b, p->fill, fl);
    if (align != '=') rc |= proto_buf_add(b, pre, plen);
    rc |= proto_buf_add(b, body, blen);
    for (int64_t i = 0; i < right && !rc; i++) rc |= proto_buf_add(b, p->fill, fl);
    return rc;
}

static void group_digits(char *digits, char sep, int every)
{
    /* inserts sep into the integer part of digits (in place; buffer has room) */
    char *dot = digits;
    while (*dot >= '0' && *dot <= '9') dot++;
    size_t ilen = (size_t)(dot - digits), rest = strlen(dot);
    if (ilen <= (size_t)every) return;
    size_t seps = (ilen - 1) / (size_t)every;
    memmove(digits + ilen + seps, dot, rest + 1);
    char *w = digits + ilen + seps;
    for (size_t i = 0; i < ilen; i++) {
        if (i && i % (size_t)every == 0) *--w = sep;
        *--w = digits[ilen - 1 - i];
    }
}

static int fmt_number(tmpl_rt *r, tmpl_val v, const spec *p, proto_buf *b)
{
    /* the longest: 1e308 with precision 1000 (its bound) and ',' groups, 309 + 102 + 1 + 1000 */
    char body[1536], pre[8] = "";
    char type = p->type;
    bool neg;
    if (v.kind == TMPL_FLOAT || (type && strchr("eEfFgG%", type))) {
        double f = v.kind == TMPL_FLOAT ? v.u.f : (double)v.u.i;
        if (type && !strchr("eEfFgG%", type))
            return model_tmpl_fail(r, "ValueError", "Unknown format code '%c' for object of type 'float'", type);
        neg = signbit(f) && !isnan(f);
        f = fabs(f);
        int prec = p->prec < 0 ? 6 : (int)p->prec;
        if (isinf(f) || isnan(f)) {
            snprintf(body, sizeof body, "%s", isnan(f) ? (type && type < 'a' ? "NAN" : "nan") : (type && type < 'a' ? "INF" : "inf"));
        } else if (!type) {
            if (p->prec < 0) model_tmpl_float_repr(f, body);
            else {
                snprintf(body, sizeof body, p->alt ? "%#.*g" : "%.*g", p->prec ? (int)p->prec : 1, f);
                if (!strpbrk(body, ".e")) strcat(body, ".0");
            }
        } else if (type == '%') {
            snprintf(body, sizeof body, p->alt ? "%#.*f%%" : "%.*f%%", prec, f * 100);
        } else {
            char cf[8];
            snprintf(cf, sizeof cf, "%%%s.*%c", p->alt ? "#" : "", type);
            snprintf(body, sizeof body, cf, prec, f);
        }
    } else {
        int64_t i = v.u.i;
        neg = i < 0;
        uint64_t u = neg ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
        if (v.kind == TMPL_BOOL && !type) {
            snprintf(body, sizeof body, "%s", i ? "True" : "False");
            neg = false;
        } else
            switch (type) {
            case 0:
            case 'd':
            case 'n': snprintf(body, sizeof body, "%llu", (unsigned long long)u); break;
            case 'x': snprintf(body, sizeof body, "%llx", (unsigned long long)u); if (p->alt) strcpy(pre, "0x"); break;
            case 'X': snprintf(body, sizeof body, "%llX", (unsigned long long)u); if (p->alt) strcpy(pre, "0X"); break;
            case 'o': snprintf(body, sizeof body, "%llo", (unsigned long long)u); if (p->alt) strcpy(pre, "0o"); break;
            case 'b': {
                char t[80];
                int n = 0;
                do t[n++] = (char)('0' + (u & 1)); while ((u >>= 1));
                for (int k = 0; k < n; k++) body[k] = t[n - 1 - k];
                body[n] = 0;
                if (p->alt) strcpy(pre, "0b");
                break;
            }
            case 'c': {
                if (i < 0 || i > 0x10FFFF) return model_tmpl_fail(r, "OverflowError", "%%c arg not in range(0x110000)");
                int n = proto_utf8_put(body, (uint32_t)i);
                body[n] = 0;
                neg = false;
                break;
            }
            default:
                return model_tmpl_fail(r, "ValueError", "Unknown format code '%c' for object of type '%s'", type, model_tmpl_type_name(v));
            }
    }
    if (p->group) group_digits(body, p->group, 3);
    char sign[2] = {0};
    if (neg) sign[0] = '-';
    else if (p->sign == '+' || p->sign == ' ') sign[0] = p->sign;
    char full[16];
    snprintf(full, sizeof full, "%s%s", sign, pre);
    return pad_out(b, p, full, body, strlen(body), '>') ? model_tmpl_fail_limit(r, "string length") : 0;
}

/* format(value, spec) */
static int format_value(tmpl_rt *r, tmpl_val v, const char *s, size_t n, proto_buf *b)
{
    if (!n) return model_tmpl_str_of(r, v, b);
    spec p;
    if (parse_spec(r, s, n, &p)) return -1;
    if (tmpl_is_num(v)) return fmt_number(r, v, &p, b);
    if (v.kind == TMPL_STR) {
        if (p.type && p.type != 's') return model_tmpl_fail(r, "ValueError", "Unknown format code '%c' for object of type 'str'", p.type);
        if (p.group) return model_tmpl_fail(r, "ValueError", "Cannot specify '%c' with 's'.", p.group);
        if (p.sign) return model_tmpl_fail(r, "ValueError", "Sign not allowed in string format specifier");
        if (p.align == '=') return model_tmpl_fail(r, "ValueError", "'=' alignment not allowed in string format specifier");
        tmpl_str *x = tmpl_s(v);
        size_t len = x->len;
        if (p.prec >= 0) len = proto_utf8_offset(x->s, x->len, (size_t)p.prec);
        return pad_out(b, &p, "", x->s, len, '<') ? model_tmpl_fail_limit(r, "string length") : 0;
    }
    return model_tmpl_fail(r, "TypeError", "unsupported format string passed to %s.__format__", model_tmpl_type_name(v));
}

int model_tmpl_str_format(tmpl_rt *r, tmpl_val fmtv, const tmpl_args *a, tmpl_val *out)
{
    tmpl_str *f = tmpl_s(fmtv);
    const char *s = f->s;
    size_t n = f->len, auto_idx = 0;
    bool manual = false;
    proto_buf b = {.max = r->lim.max_output};
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (c == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                if (proto_buf_putc(&b, '}')) goto limit;
                i += 2;
                continue;
            }
            model_tmpl_fail(r, "ValueError", "Single '}' encountered in format string");
            goto fail;
        }
        if (c != '{') {
            size_t j = i;
            while (j < n && s[j] != '{' && s[j] != '}') j++;
            if (proto_buf_add(&b, s + i, j - i)) goto limit;
            i = j;
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            if (proto_buf_putc(&b, '{')) goto limit;
            i += 2;
            continue;
        }
        /* {field!conv:spec} */
        size_t j = i + 1, depth = 1;
        while (j < n && depth) {
            if (s[j] == '{') depth++;
            else if (s[j] == '}') depth--;
            if (depth) j++;
        }
        if (j >= n) {
            model_tmpl_fail(r, "ValueError", "expected '}' before end of string");
            goto fail;
        }
        const char *field = s + i + 1;
        size_t flen = j - i - 1;
        size_t name_end = 0;
        while (name_end < flen && field[name_end] != '!' && field[name_end] != ':') name_end++;
        char conv = 0;
        size_t spec_at = name_end;
        if (name_end < flen && field[name_end] == '!') {
            conv = name_end + 1 < flen ? field[name_end + 1] : 0;
            spec_at = name_end + 2;
        }
        const char *sp = spec_at < flen && field[spec_at] == ':' ? field + spec_at + 1 : "";
        size_t splen = spec_at < flen && field[spec_at] == ':' ? flen - spec_at - 1 : 0;
        /* the argument: index, name, or automatic; then .attr / [key] parts */
        size_t k = 0;
        while (k < name_end && field[k] != '.' && field[k] != '[') k++;
        tmpl_val v;
        if (k == 0) {
            if (manual) {
                model_tmpl_fail(r, "ValueError", "cannot switch from manual field specification to automatic field numbering");
                goto fail;
            }
            if (auto_idx >= a->npos) {
                model_tmpl_fail(r, "IndexError", "Replacement index %zu out of range for positional args tuple", auto_idx);
                goto fail;
            }
            v = a->pos[auto_idx++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t idx = 0;
            for (size_t q = 0; q < k; q++) idx = idx * 10 + (size_t)(field[q] - '0');
            manual = true;
            if (idx >= a->npos) {
                model_tmpl_fail(r, "IndexError", "Replacement index %zu out of range for positional args tuple", idx);
                goto fail;
            }
            v = a->pos[idx];
        } else {
            size_t q;
            for (q = 0; q < a->nkw; q++)
                if (strlen(a->kw_names[q]) == k && !memcmp(a->kw_names[q], field, k)) break;
            if (q == a->nkw) {
                model_tmpl_fail(r, "KeyError", "'%.*s'", (int)k, field);
                goto fail;
            }
            v = a->kw[q];
        }
        tmpl_incref(v);
        while (k < name_end) { /* .attr or [key] */
            tmpl_val key, next;
            size_t e;
            int rc;
            if (field[k] == '.') {
                e = k + 1;
                while (e < name_end && field[e] != '.' && field[e] != '[') e++;
                if (model_tmpl_str_new(r, field + k + 1, e - k - 1, &key)) goto fail_v;
                rc = model_tmpl_getattr(r, v, key, model_tmpl_method_id(field + k + 1, e - k - 1), &next);
                k = e;
            } else {
                e = k + 1;
                while (e < name_end && field[e] != ']') e++;
                bool digits = e > k + 1;
                int64_t num = 0;
                for (size_t q = k + 1; q < e && digits; q++) {
                    if (field[q] < '0' || field[q] > '9' || num > 1000000000) digits = false;
                    else num = num * 10 + (field[q] - '0');
                }
                if (digits) key = tmpl_int(num);
                else if (model_tmpl_str_new(r, field + k + 1, e - k - 1, &key)) goto fail_v;
                rc = model_tmpl_getitem(r, v, key, &next);
                k = e + 1;
            }
            tmpl_decref(r, key);
            tmpl_decref(r, v);
            if (rc) goto fail;
            v = next;
        }
        int rc = 0;
        proto_buf sb = {.max = 4096};
        if (memchr(sp, '{', splen)) { /* nested fields in the spec, e.g. {:{width}} */
            tmpl_val inner, spec_fmt;
            rc = model_tmpl_str_new(r, sp, splen, &spec_fmt);
            if (!rc) {
                rc = model_tmpl_str_format(r, spec_fmt, a, &inner);
                tmpl_decref(r, spec_fmt);
            }
            if (!rc) {
                proto_buf_add(&sb, tmpl_s(inner)->s, tmpl_s(inner)->len);
                tmpl_decref(r, inner);
                sp = sb.p ? sb.p : "";
                splen = sb.len;
            }
        }
        if (!rc) {
            if (conv == 'r' || conv == 'a') {
                proto_buf rb = {.max = r->lim.max_output};
                rc = model_tmpl_repr(r, v, &rb, 0);
                tmpl_val rs;
                if (!rc) rc = model_tmpl_str_from_buf(r, &rb, &rs);
                else proto_buf_deinit(&rb);
                if (!rc) {
                    rc = format_value(r, rs, sp, splen, &b);
                    tmpl_decref(r, rs);
                }
            } else if (conv == 's' || conv == 0) {
                tmpl_val ss = v;
                if (conv == 's') rc = model_tmpl_to_str(r, v, &ss);
                else tmpl_incref(ss);
                if (!rc) {
                    rc = format_value(r, ss, sp, splen, &b);
                    tmpl_decref(r, ss);
                }
            } else {
                rc = model_tmpl_fail(r, "ValueError", "Unknown conversion specifier %c", conv);
            }
        }
        proto_buf_deinit(&sb);
        tmpl_decref(r, v);
        if (rc) goto fail;
        i = j + 1;
        continue;
    fail_v:
        tmpl_decref(r, v);
        goto fail;
    }
    return model_tmpl_str_from_buf(r, &b, out);
limit:
    model_tmpl_fail_limit(r, "string length");
fail:
    proto_buf_deinit(&b);
    return -1;
}

/* The arguments of `fmt % args` as conversions take them: a tuple's items in order, a single
 * argument once, or the value of the last %(key) once. */
typedef struct pct_args {
    tmpl_val args;
    tmpl_list *tl; /* args' items when it is a tuple */
    size_t nargs, used;
    tmpl_val keyed; /* borrowed */
    bool have_keyed;
} pct_args;

static int next_arg(tmpl_rt *r, pct_args *c, tmpl_val *v)
{
    if (c->have_keyed) {
        *v = c->keyed;
        c->have_keyed = false;
        c->used = c->nargs; /* Python's cursor moves to the keyed value, which is then spent */
        return 0;
    }
    if (c->used >= c->nargs)
        return model_tmpl_fail(r, "TypeError", "not enough arguments for format string");
    *v = c->tl ? c->tl->v[c->used] : c->args;
    c->used++;
    return 0;
}

/* One more decimal digit of a width or precision; stops growing past any bound (a caller checks
 * the bound once all digits are read) */
static int64_t add_digit(int64_t v, char c)
{
    return v > 1000000 ? v : v * 10 + (c - '0');
}

/* '*': a width or a precision from the arguments, an int (bool counts) */
static int star_arg(tmpl_rt *r, pct_args *c, int64_t *out)
{
    tmpl_val v = tmpl_undef();
    if (next_arg(r, c, &v)) return -1;
    if (v.kind != TMPL_INT && v.kind != TMPL_BOOL)
        return model_tmpl_fail(r, "TypeError", "* wants int");
    *out = v.u.i;
    return 0;
}

/* printf-style: fmt % args */
int model_tmpl_str_percent(tmpl_rt *r, tmpl_val fmtv, tmpl_val args, tmpl_val *out)
{
    tmpl_str *f = tmpl_s(fmtv);
    const char *s = f->s;
    size_t n = f->len;
    bool is_tuple = args.kind == TMPL_LIST && args.u.o->sub == TMPL_SEQ_TUPLE;
    /* Python treats any non-tuple argument with __getitem__ as a mapping: %(key)s looks keys up
     * in it, %s takes the whole object, and unused arguments are no error */
    bool is_map = !is_tuple && (args.kind == TMPL_DICT || args.kind == TMPL_UNDEF ||
                                (args.kind == TMPL_LIST && !tmpl_is_iter(args)));
    pct_args cur = {.args = args,
                    .tl = is_tuple ? tmpl_l(args) : NULL,
                    .nargs = is_tuple ? tmpl_l(args)->n : 1};
    proto_buf b = {.max = r->lim.max_output};
    for (size_t i = 0; i < n;) {
        if (s[i] != '%') {
            const char *pct = memchr(s + i, '%', n - i);
            size_t j = pct ? (size_t)(pct - s) : n;
            if (proto_buf_add(&b, s + i, j - i)) goto limit;
            i = j;
            continue;
        }
        size_t start = i++;
        tmpl_val v = tmpl_undef();
        if (i < n && s[i] == '(') { /* %(key)s */
            size_t e = i + 1;
            while (e < n && s[e] != ')') e++;
            if (e >= n || !is_map) {
                model_tmpl_fail(r, "TypeError", "format requires a mapping");
                goto fail;
            }
            if (args.kind != TMPL_DICT) {
                if (args.kind == TMPL_UNDEF) model_tmpl_undef_fail(r, args);
                else model_tmpl_fail(r, "TypeError", "%s indices must be integers or slices, not str", model_tmpl_type_name(args));
                goto fail;
            }
            if (!model_tmpl_dict_get_str(tmpl_d(args), s + i + 1, e - i - 1, &v)) {
                model_tmpl_fail(r, "KeyError", "'%.*s'", (int)(e - i - 1), s + i + 1);
                goto fail;
            }
            /* the key's value serves the next conversion (or its '*'), once */
            cur.keyed = v;
            cur.have_keyed = true;
            i = e + 1;
        }
        spec p;
        memset(&p, 0, sizeof p);
        p.width = p.prec = -1;
        strcpy(p.fill, " ");
        bool left = false;
        while (i < n && strchr("-+ #0", s[i])) {
            switch (s[i++]) {
            case '-': left = true; break;
            case '+': p.sign = '+'; break;
            case ' ': if (p.sign != '+') p.sign = ' '; break;
            case '#': p.alt = true; break;
            case '0': p.zero = true; break;
            }
        }
        /* a width and a precision: digits, or '*' for the next argument (Python's own order:
         * they are taken before the value); bounded as format()'s are */
        if (i < n && s[i] == '*') {
            i++;
            if (star_arg(r, &cur, &p.width)) goto fail;
            if (p.width < 0) { /* a negative width from the arguments left-justifies */
                left = true;
                p.width = p.width == INT64_MIN ? INT64_MAX : -p.width;
            }
        } else {
            while (i < n && s[i] >= '0' && s[i] <= '9')
                p.width = add_digit(p.width < 0 ? 0 : p.width, s[i++]);
        }
        if (i < n && s[i] == '.') {
            i++;
            p.prec = 0;
            if (i < n && s[i] == '*') {
                i++;
                if (star_arg(r, &cur, &p.prec)) goto fail;
                if (p.prec < 0) p.prec = 0;
            } else {
                while (i < n && s[i] >= '0' && s[i] <= '9') p.prec = add_digit(p.prec, s[i++]);
            }
        }
        if (p.width > 100000 || p.prec > 1000) {
            model_tmpl_fail_limit(r, "format width");
            goto fail;
        }
        if (i >= n) {
            model_tmpl_fail(r, "ValueError", "incomplete format");
            goto fail;
        }
        size_t conv_at = i;
        char conv = s[i++];
        /* "%%" is a literal '%'; with a key, flags or a width between, '%' is a conversion that
         * takes an argument and is then rejected, as in Python */
        if (conv == '%' && conv_at == start + 1) {
            if (proto_buf_putc(&b, '%')) goto limit;
            continue;
        }
        if (next_arg(r, &cur, &v)) goto fail;
        /* zeros pad numbers only ('%05s' and '%05c' pad with spaces), and %c has no sign */
        bool numeric = conv != 's' && conv != 'r' && conv != 'a' && conv != 'c';
        p.align = left ? '<' : p.zero && numeric ? '=' : '>';
        if (p.align == '=') strcpy(p.fill, "0");
        if (conv == 'c') p.sign = 0;
        int rc;
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            proto_buf t = {.max = r->lim.max_output};
            rc = conv == 's' ? model_tmpl_str_of(r, v, &t) : model_tmpl_repr(r, v, &t, 0);
            if (!rc) {
                size_t len = t.len;
                if (p.prec >= 0) len = proto_utf8_offset(t.p ? t.p : "", t.len, (size_t)p.prec);
                rc = pad_out(&b, &p, "", t.p ? t.p : "", len, '>') ? model_tmpl_fail_limit(r, "string length") : 0;
            }
            proto_buf_deinit(&t);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o':
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
        case 'c': {
            if (v.kind == TMPL_UNDEF) {
                rc = model_tmpl_undef_fail(r, v);
                break;
            }
            /* Python's own words per conversion */
            if (conv == 'c' &&
                !(v.kind == TMPL_INT || v.kind == TMPL_BOOL ||
                  (v.kind == TMPL_STR && proto_utf8_count(tmpl_s(v)->s, tmpl_s(v)->len) == 1))) {
                rc = model_tmpl_fail(r, "TypeError", "%%c requires int or char");
                break;
            }
            if (!tmpl_is_num(v) && conv != 'c') {
                const char *t = model_tmpl_type_name(v);
                if (strchr("eEfFgG", conv))
                    rc = model_tmpl_fail(r, "TypeError", "must be real number, not %s", t);
                else if (strchr("xXo", conv))
                    rc = model_tmpl_fail(r, "TypeError",
                                         "%%%c format: an integer is required, not %s", conv, t);
                else
                    rc = model_tmpl_fail(r, "TypeError",
                                         "%%%c format: a real number is required, not %s", conv, t);
                break;
            }
            if (conv == 'c' && v.kind == TMPL_STR) {
                rc = pad_out(&b, &p, "", tmpl_s(v)->s, tmpl_s(v)->len, '>') ? model_tmpl_fail_limit(r, "string length") : 0;
                break;
            }
            tmpl_val x = v;
            char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            if ((c == 'd' || c == 'x' || c == 'X' || c == 'o' || c == 'c') && x.kind == TMPL_FLOAT) {
                if (c != 'd') {
                    rc = model_tmpl_fail(r, "TypeError", "%%%c format: an integer is required, not float", conv);
                    break;
                }
                int64_t i;
                if ((rc = model_tmpl_py_int_of_float(r, x.u.f, &i)))
                    break; /* '%d' % f prints int(f) */
                x = tmpl_int(i);
            }
            if (x.kind == TMPL_BOOL) x = tmpl_int(x.u.i);
            p.type = c;
            rc = fmt_number(r, x, &p, &b);
            break;
        }
        default: {
            size_t k = conv_at;
            uint32_t cp = proto_utf8_next(s, n, &k);
            i = k; /* past the whole character */
            rc = model_tmpl_fail(
                r, "ValueError", "unsupported format character '%c' (0x%x) at index %zu",
                cp >= 31 && cp <= 126 ? (char)cp : '?', (unsigned)cp, proto_utf8_count(s, conv_at));
        }
        }
        if (rc) goto fail;
    }
    if (!is_map && cur.used < cur.nargs) {
        model_tmpl_fail(r, "TypeError", "not all arguments converted during string formatting");
        goto fail;
    }
    return model_tmpl_str_from_buf(r, &b, out);
limit:
    model_tmpl_fail_limit(r, "string length");
fail:
    proto_buf_deinit(&b);
    return -1;
}
