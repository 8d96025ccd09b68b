/* proto/json_schema_rx.c — a JSON Schema "pattern" (an ECMA-262 regular expression subset) as
 * a GBNF expression over a JSON string's text; see json_schema.h for the subset. */
#include "proto/json_schema_int.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_PATTERN 1000 /* bytes of a "pattern" */
#define MAX_RX_NEST 32

typedef struct rx {
    const char *p, *e;
    jsc *c;
    const char *ptr;
    int nest;
} rx;

/* Code point ranges, for classes: subtract what a JSON string cannot hold unescaped. */
typedef struct rset {
    uint32_t lo[64], hi[64];
    int n;
} rset;

static int rset_add(rx *r, rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == 64)
        return jsc_fail(r->c, r->ptr, "pattern: a character class with more than 64 ranges");
    s->lo[s->n] = lo;
    s->hi[s->n] = hi;
    s->n++;
    return 0;
}

static int put_cp(proto_buf *b, uint32_t cp)
{
    if (cp < 0x20 || cp == '"' || cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' ||
        cp == 0x7F)
        return proto_buf_printf(b, "\\x%02X", cp);
    if (cp < 0x80) return proto_buf_putc(b, (char)cp);
    return proto_buf_printf(b, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
}

/* Emits [ranges] minus the unsafe set (controls, '"', '\\'), or [^ranges + unsafe]. */
static int emit_set(rx *r, proto_buf *b, const rset *s, int neg)
{
    static const uint32_t unsafe_lo[] = {0x00, 0x22, 0x5C}, unsafe_hi[] = {0x1F, 0x22, 0x5C};
    int rc = proto_buf_str(b, neg ? "[^" : "[");
    if (neg) {
        for (int i = 0; i < s->n && !rc; i++)
            rc = put_cp(b, s->lo[i]) || proto_buf_putc(b, '-') || put_cp(b, s->hi[i]);
        for (int k = 0; k < 3 && !rc; k++)
            rc = put_cp(b, unsafe_lo[k]) || proto_buf_putc(b, '-') || put_cp(b, unsafe_hi[k]);
    } else {
        int any = 0;
        for (int i = 0; i < s->n && !rc; i++) {
            /* [lo, hi] minus the unsafe ranges (sorted, disjoint) */
            uint32_t cur = s->lo[i], hi = s->hi[i];
            for (int k = 0; k < 3 && cur <= hi && !rc; k++) {
                if (unsafe_hi[k] < cur) continue;
                if (unsafe_lo[k] > hi) break;
                if (cur < unsafe_lo[k]) {
                    rc = put_cp(b, cur) || proto_buf_putc(b, '-') || put_cp(b, unsafe_lo[k] - 1);
                    any = 1;
                }
                cur = unsafe_hi[k] + 1;
            }
            if (cur <= hi && !rc) {
                rc = put_cp(b, cur) || proto_buf_putc(b, '-') || put_cp(b, hi);
                any = 1;
            }
        }
        if (!any && !rc)
            return jsc_fail(
                r->c, r->ptr,
                "pattern: a character class holds only characters a JSON string must escape");
    }
    if (rc || proto_buf_putc(b, ']')) return jsc_fail(r->c, r->ptr, "out of memory");
    return 0;
}

static int class_escape(rx *r, char e, rset *s, int *negated)
{
    *negated = 0;
    switch (e) {
    case 'D':
        *negated = 1; /* fall through */
    case 'd':
        return rset_add(r, s, '0', '9');
    case 'W':
        *negated = 1; /* fall through */
    case 'w':
        return rset_add(r, s, 'a', 'z') || rset_add(r, s, 'A', 'Z') || rset_add(r, s, '0', '9') ||
               rset_add(r, s, '_', '_');
    case 'S':
        *negated = 1; /* fall through */
    case 's':         /* ECMA-262's WhiteSpace and LineTerminator: the ASCII ones other than ' ' are
                       * controls a JSON string escapes; the others may stand raw in it */
        return rset_add(r, s, ' ', ' ') || rset_add(r, s, 0xA0, 0xA0) ||
               rset_add(r, s, 0x1680, 0x1680) || rset_add(r, s, 0x2000, 0x200A) ||
               rset_add(r, s, 0x2028, 0x2029) || rset_add(r, s, 0x202F, 0x202F) ||
               rset_add(r, s, 0x205F, 0x205F) || rset_add(r, s, 0x3000, 0x3000) ||
               rset_add(r, s, 0xFEFF, 0xFEFF);
    }
    return 1; /* not a class escape */
}

/* One character of a pattern at r->p (a literal or an escaped literal): its code point, or -1. */
static long rx_char(rx *r)
{
    if (r->p >= r->e) return jsc_fail(r->c, r->ptr, "pattern: unexpected end");
    unsigned char ch = (unsigned char)*r->p;
    if (ch == '\\') {
        if (r->p + 1 >= r->e) return jsc_fail(r->c, r->ptr, "pattern: a trailing backslash");
        char e = r->p[1];
        r->p += 2;
        switch (e) {
        case 'n':
            return '\n';
        case 't':
            return '\t';
        case 'r':
            return '\r';
        case 'f':
            return '\f';
        case 'v':
            return '\v';
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            return jsc_fail(r->c, r->ptr, "pattern: the escape \\%c is not supported", e);
        return (unsigned char)e;
    }
    /* UTF-8 */
    int k = ch < 0x80 ? 1 : ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 0;
    if (!k || r->p + k > r->e) return jsc_fail(r->c, r->ptr, "pattern: invalid UTF-8");
    uint32_t cp = k == 1 ? ch : ch & (0x3F >> (k - 1));
    for (int i = 1; i < k; i++) cp = cp << 6 | ((unsigned char)r->p[i] & 0x3F);
    r->p += k;
    return (long)cp;
}

/* A literal code point as a JSON string's text. */
static int emit_json_cp(proto_buf *b, uint32_t cp)
{
    char tmp[8];
    size_t n = 0;
    if (cp == '"' || cp == '\\') {
        tmp[n++] = '\\';
        tmp[n++] = (char)cp;
    } else if (cp < 0x20) {
        static const char esc[] = "btn\0fr";
        if (cp >= 8 && cp <= 13 && esc[cp - 8]) {
            tmp[n++] = '\\';
            tmp[n++] = esc[cp - 8];
        } else {
            n = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", cp);
        }
    } else if (cp < 0x80) {
        tmp[n++] = (char)cp;
    } else if (cp < 0x800) {
        tmp[n++] = (char)(0xC0 | cp >> 6);
        tmp[n++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        tmp[n++] = (char)(0xE0 | cp >> 12);
        tmp[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
        tmp[n++] = (char)(0x80 | (cp & 0x3F));
    } else {
        tmp[n++] = (char)(0xF0 | cp >> 18);
        tmp[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
        tmp[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
        tmp[n++] = (char)(0x80 | (cp & 0x3F));
    }
    return proto_gbnf_literal(b, tmp, n);
}

static int rx_alt(rx *r, proto_buf *b);

static int rx_atom(rx *r, proto_buf *b)
{
    char ch = *r->p;
    if (ch == '(') {
        if (++r->nest > MAX_RX_NEST)
            return jsc_fail(r->c, r->ptr, "pattern: groups nested deeper than %d", MAX_RX_NEST);
        r->p++;
        if (r->p < r->e && *r->p == '?') {
            if (r->p + 1 < r->e && r->p[1] == ':')
                r->p += 2;
            else
                return jsc_fail(r->c, r->ptr,
                                "pattern: lookarounds and named groups are not supported");
        }
        if (proto_buf_str(b, "( ") || rx_alt(r, b)) return -1;
        if (r->p >= r->e || *r->p != ')')
            return jsc_fail(r->c, r->ptr, "pattern: a group without ')'");
        r->p++;
        r->nest--;
        return proto_buf_str(b, " )") ? jsc_fail(r->c, r->ptr, "out of memory") : 0;
    }
    if (ch == '.') { /* ECMA-262: any character but a line terminator (\n \r U+2028 U+2029) */
        r->p++;
        return proto_buf_str(b, "[^\"\\\\\\x00-\\x1F\\u2028\\u2029]")
                   ? jsc_fail(r->c, r->ptr, "out of memory")
                   : 0;
    }
    if (ch == '[') {
        r->p++;
        int neg = 0;
        if (r->p < r->e && *r->p == '^') {
            neg = 1;
            r->p++;
        }
        /* ECMA-262, not POSIX: a ']' right after '[' or '[^' closes the class — '[]' matches
         * nothing, '[^]' any character (line terminators too) */
        if (r->p < r->e && *r->p == ']') {
            r->p++;
            if (!neg) return jsc_fail(r->c, r->ptr, "pattern: '[]' matches nothing");
            return proto_buf_str(b, "[^\"\\\\\\x00-\\x1F]")
                       ? jsc_fail(r->c, r->ptr, "out of memory")
                       : 0;
        }
        rset s = {{0}, {0}, 0};
        while (r->p < r->e && *r->p != ']') {
            if (*r->p == '\\' && r->p + 1 < r->e) {
                int sub_neg = 0;
                int k = class_escape(r, r->p[1], &s, &sub_neg);
                if (k < 0) return -1;
                if (k == 0) {
                    if (sub_neg)
                        return jsc_fail(r->c, r->ptr,
                                        "pattern: \\D \\W \\S inside a class are not supported");
                    r->p += 2;
                    continue;
                }
            }
            long lo = rx_char(r), hi = lo;
            if (lo < 0) return -1;
            if (r->p + 1 < r->e && *r->p == '-' && r->p[1] != ']') {
                r->p++;
                hi = rx_char(r);
                if (hi < 0) return -1;
                if (hi < lo) return jsc_fail(r->c, r->ptr, "pattern: a class range runs backwards");
            }
            if (rset_add(r, &s, (uint32_t)lo, (uint32_t)hi)) return -1;
        }
        if (r->p >= r->e) return jsc_fail(r->c, r->ptr, "pattern: a class without ']'");
        r->p++;
        return emit_set(r, b, &s, neg);
    }
    if (ch == '\\' && r->p + 1 < r->e) {
        rset s = {{0}, {0}, 0};
        int neg = 0;
        int k = class_escape(r, r->p[1], &s, &neg);
        if (k < 0) return -1;
        if (k == 0) {
            r->p += 2;
            return emit_set(r, b, &s, neg);
        }
    }
    if (ch == '^' || ch == '$')
        return jsc_fail(r->c, r->ptr, "pattern: '%c' is supported only at the pattern's ends", ch);
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return jsc_fail(r->c, r->ptr, "pattern: '%c' with nothing before it", ch);
    long cp = rx_char(r);
    if (cp < 0) return -1;
    return emit_json_cp(b, (uint32_t)cp) ? jsc_fail(r->c, r->ptr, "out of memory") : 0;
}

static int rx_seq(rx *r, proto_buf *b)
{
    int any = 0;
    while (r->p < r->e && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && r->p + 1 == r->e) break; /* the end anchor, handled by the caller */
        if (any && proto_buf_putc(b, ' ')) return jsc_fail(r->c, r->ptr, "out of memory");
        if (proto_buf_str(b, "( ") || rx_atom(r, b) || proto_buf_str(b, " )")) return -1;
        any = 1;
        if (r->p < r->e && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
            if (proto_buf_putc(b, *r->p)) return -1;
            r->p++;
        } else if (r->p < r->e && *r->p == '{') {
            const char *q = r->p + 1;
            long m = 0, n = -1;
            int digits = 0;
            while (q < r->e && *q >= '0' && *q <= '9' && m <= JSCHEMA_MAX_REPEAT)
                m = m * 10 + (*q++ - '0'), digits++;
            if (!digits) return jsc_fail(r->c, r->ptr, "pattern: '{' without a count");
            if (q < r->e && *q == ',') {
                q++;
                if (q < r->e && *q >= '0' && *q <= '9') {
                    n = 0;
                    while (q < r->e && *q >= '0' && *q <= '9' && n <= JSCHEMA_MAX_REPEAT)
                        n = n * 10 + (*q++ - '0');
                }
            } else {
                n = m;
            }
            if (q >= r->e || *q != '}') return jsc_fail(r->c, r->ptr, "pattern: a bad {m,n}");
            if (m > JSCHEMA_MAX_REPEAT || n > JSCHEMA_MAX_REPEAT)
                return jsc_fail(r->c, r->ptr,
                                "pattern: repetition counts above %d are not supported",
                                JSCHEMA_MAX_REPEAT);
            if (n >= 0 && n < m) return jsc_fail(r->c, r->ptr, "pattern: {m,n} with n below m");
            int rc =
                n < 0 ? proto_buf_printf(b, "{%ld,}", m) : proto_buf_printf(b, "{%ld,%ld}", m, n);
            if (rc) return jsc_fail(r->c, r->ptr, "out of memory");
            r->p = q + 1;
        }
        if (r->p < r->e && *r->p == '?') r->p++; /* a lazy quantifier matches the same strings */
        if (r->c->failed) return -1;
    }
    if (!any && proto_buf_str(b, "\"\"")) return jsc_fail(r->c, r->ptr, "out of memory");
    return 0;
}

static int rx_alt(rx *r, proto_buf *b)
{
    if (rx_seq(r, b)) return -1;
    while (r->p < r->e && *r->p == '|') {
        r->p++;
        if (proto_buf_str(b, " | ") || rx_seq(r, b)) return -1;
    }
    return 0;
}

int jsc_pattern(jsc *c, proto_buf *b, const char *pat, size_t n, const char *ptr)
{
    if (n > MAX_PATTERN) return jsc_fail(c, ptr, "a pattern longer than %d bytes", MAX_PATTERN);
    rx r = {pat, pat + n, c, ptr, 0};
    int start = n > 0 && pat[0] == '^',
        end = n > (size_t)start && pat[n - 1] == '$' && (n < 2 || pat[n - 2] != '\\');
    if (start) r.p++;
    if (proto_buf_str(b, "\"\\\"\" ")) return jsc_fail(c, ptr, "out of memory");
    if (!start && proto_buf_str(b, "json-char* ")) return jsc_fail(c, ptr, "out of memory");
    if (proto_buf_str(b, "( ") || rx_alt(&r, b)) return -1;
    if (end && r.p < r.e && *r.p == '$') r.p++;
    if (r.p != r.e) return jsc_fail(c, ptr, "pattern: unexpected '%c'", *r.p);
    if (proto_buf_str(b, " ) ")) return -1;
    if (!end && proto_buf_str(b, "json-char* ")) return -1;
    return proto_buf_str(b, "\"\\\"\"") ? jsc_fail(c, ptr, "out of memory") : 0;
}
