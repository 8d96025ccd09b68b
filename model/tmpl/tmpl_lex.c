/* model/tmpl/tmpl_lex.c — template source to tokens, following jinja2's lexer with the settings
 * transformers uses: trim_blocks (the first newline after a block or comment tag is removed),
 * lstrip_blocks (spaces and tabs from the start of a line up to a block or comment tag are
 * removed), `-` (strip all whitespace on that side) and `+` (keep it) modifiers, raw blocks,
 * newline normalization and the single trailing newline dropped (keep_trailing_newline off).
 *
 * Whitespace here is Python's (str.isspace), since jinja2 strips with Python's regex \s and
 * str.rstrip(). */
#include "model/tmpl/tmpl_int.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    const char *s; /* normalized source */
    size_t n;
    size_t pos;
    int line;
    size_t line_pos; /* position up to which `line` counts newlines */
    tmpl_toks *t;
    char *err;
    size_t errlen;
} lexer;

static int lex_fail(lexer *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lex_fail(lexer *L, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(L->err, L->errlen, "TemplateSyntaxError: %s (line %d)", msg, L->line);
    return -1;
}

static int line_at(lexer *L, size_t pos)
{
    if (pos < L->line_pos) { /* never goes back by design; recount defensively */
        L->line = 1;
        L->line_pos = 0;
    }
    for (size_t i = L->line_pos; i < pos && i < L->n; i++) L->line += L->s[i] == '\n';
    L->line_pos = pos;
    return L->line;
}

static int push(lexer *L, int type, size_t at, const char *s, size_t len, tmpl_tok **out)
{
    tmpl_toks *t = L->t;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        tmpl_tok *v = realloc(t->v, cap * sizeof *v);
        if (!v) return lex_fail(L, "out of memory");
        t->v = v;
        t->cap = cap;
    }
    tmpl_tok *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->type = (uint8_t)type;
    k->line = line_at(L, at);
    k->s = s;
    k->len = len;
    if (out) *out = k;
    return 0;
}

/* Python whitespace at s[i]: its byte length, or 0. */
static size_t ws_len(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return model_tmpl_py_isspace(c) ? 1 : 0;
    size_t k = i;
    uint32_t cp = proto_utf8_next(s, n, &k);
    return model_tmpl_py_isspace(cp) ? k - i : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    size_t w;
    while (i < n && (w = ws_len(s, n, i))) i += w;
    return i;
}

/* End of `text` after Python's str.rstrip(). */
static size_t rstrip_end(const char *s, size_t start, size_t end)
{
    while (end > start) {
        size_t p = proto_utf8_prev(s, end);
        if (p < start) break;
        if (ws_len(s, end, p) != end - p) break;
        end = p;
    }
    return end;
}

/* Emits the text s[start, end) before a tag with sign ('-', '+' or 0), applying `-` and
 * lstrip_blocks (is_var: the tag is {{, which lstrip_blocks leaves alone). */
static int emit_text(lexer *L, size_t start, size_t end, int sign, bool is_var, bool line_starting)
{
    if (sign == '-') {
        end = rstrip_end(L->s, start, end);
    } else if (sign != '+' && !is_var) {
        size_t l = end;
        while (l > start && L->s[l - 1] != '\n') l--;
        if (l > start || line_starting) {
            bool all_ws = l < end;
            for (size_t i = l; i < end && all_ws;) {
                size_t w = ws_len(L->s, end, i);
                if (!w) all_ws = false;
                i += w ? w : 1;
            }
            if (all_ws) end = l;
        }
    }
    if (end > start) return push(L, TOK_DATA, start, L->s + start, end - start, NULL);
    return 0;
}

/* Matches a block end at i: "+%}", "-%}\s*" or "%}\n?" (trim_blocks). Returns the end of the
 * match or 0. */
static size_t block_end_at(const lexer *L, size_t i)
{
    const char *s = L->s;
    size_t n = L->n;
    if (i + 3 <= n && s[i] == '+' && s[i + 1] == '%' && s[i + 2] == '}') return i + 3;
    if (i + 3 <= n && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}') return skip_ws(s, n, i + 3);
    if (i + 2 <= n && s[i] == '%' && s[i + 1] == '}') return i + 2 < n && s[i + 2] == '\n' ? i + 3 : i + 2;
    return 0;
}

static size_t var_end_at(const lexer *L, size_t i)
{
    const char *s = L->s;
    size_t n = L->n;
    if (i + 3 <= n && s[i] == '-' && s[i + 1] == '}' && s[i + 2] == '}') return skip_ws(s, n, i + 3);
    if (i + 2 <= n && s[i] == '}' && s[i + 1] == '}') return i + 2;
    return 0;
}

/* A character of jinja2's name pattern: \w and the other identifier characters (XID_Continue);
 * ASCII digits never start one (numbers are lexed first). The run must then be an identifier. */
static size_t name_char_len(const char *s, size_t n, size_t i, bool first)
{
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80)
        return c == '_' || (unsigned)((c | 0x20) - 'a') < 26u || (!first && c >= '0' && c <= '9');
    size_t k = i;
    uint32_t cp = proto_utf8_next(s, n, &k);
    return model_tmpl_py_isword(cp) || model_tmpl_py_isident(cp, false) ? k - i : 0;
}

static bool is_identifier(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        bool first = i == 0;
        if (!model_tmpl_py_isident(proto_utf8_next(s, n, &i), first)) return false;
    }
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* digits with single underscores between them: (\d+_)*\d+ ; returns end or 0 */
static size_t digits_at(const char *s, size_t n, size_t i)
{
    if (i >= n || !is_digit(s[i])) return 0;
    while (i < n) {
        while (i < n && is_digit(s[i])) i++;
        if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) i++;
        else break;
    }
    return i;
}

static size_t float_at(const lexer *L, size_t i)
{
    const char *s = L->s;
    size_t n = L->n;
    if (i > 0 && s[i - 1] == '.') return 0; /* (?<!\.) */
    size_t e = digits_at(s, n, i);
    if (!e) return 0;
    size_t frac = 0;
    if (e < n && s[e] == '.') frac = digits_at(s, n, e + 1);
    size_t after = frac ? frac : e;
    if (after < n && (s[after] | 0x20) == 'e') {
        size_t k = after + 1;
        if (k < n && (s[k] == '+' || s[k] == '-')) k++;
        size_t x = digits_at(s, n, k);
        if (x) return x;
    }
    return frac;
}

static size_t int_at(const lexer *L, size_t i, int *base)
{
    const char *s = L->s;
    size_t n = L->n;
    if (i >= n || !is_digit(s[i])) return 0;
    if (s[i] == '0' && i + 1 < n) {
        char p = (char)(s[i + 1] | 0x20);
        int b = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
        if (b) {
            size_t k = i + 2, last = 0;
            for (;;) {
                size_t j = k;
                if (j < n && s[j] == '_') j++;
                if (j >= n) break;
                char c = (char)(s[j] | 0x20);
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99;
                if (d >= b) break;
                k = j + 1;
                last = k;
            }
            if (last) {
                *base = b;
                return last;
            }
        }
    }
    *base = 10;
    if (s[i] == '0') { /* 0(_?0)* */
        size_t k = i + 1;
        for (;;) {
            size_t j = k;
            if (j < n && s[j] == '_') j++;
            if (j < n && s[j] == '0') k = j + 1;
            else break;
        }
        return k;
    }
    return digits_at(s, n, i);
}

/* Python's unicode-escape decoding of a string literal body, after jinja2's
 * encode("ascii", "backslashreplace"): a backslash before a non-ASCII character keeps the
 * backslash and spells the character as an escape. */
static int unescape(lexer *L, const char *s, size_t n, tmpl_tok *k)
{
    tmpl_toks *t = L->t;
    char *o = t->store + t->store_n;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            o[m++] = s[i++];
            continue;
        }
        if (i + 1 >= n) return lex_fail(L, "\\ at end of string");
        char c = s[i + 1];
        i += 2;
        uint32_t cp;
        int nd = 0;
        switch (c) {
        case '\n': continue;
        case '\\': o[m++] = '\\'; continue;
        case '\'': o[m++] = '\''; continue;
        case '"': o[m++] = '"'; continue;
        case 'a': o[m++] = '\a'; continue;
        case 'b': o[m++] = '\b'; continue;
        case 'f': o[m++] = '\f'; continue;
        case 'n': o[m++] = '\n'; continue;
        case 'r': o[m++] = '\r'; continue;
        case 't': o[m++] = '\t'; continue;
        case 'v': o[m++] = '\v'; continue;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        case 'N': return lex_fail(L, "\\N{...} escapes are not supported");
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int j = 0; j < 2 && i < n && s[i] >= '0' && s[i] <= '7'; j++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                m += (size_t)proto_utf8_put(o + m, cp);
                continue;
            }
            if ((unsigned char)c >= 0x80) { /* backslashreplace quirk */
                size_t st = i - 1;
                uint32_t u = proto_utf8_next(s, n, &st);
                i = st;
                m += (size_t)sprintf(o + m, u < 0x100 ? "\\x%02x" : u < 0x10000 ? "\\u%04x" : "\\U%08x", u);
                continue;
            }
            o[m++] = '\\'; /* unknown escapes stay as written */
            o[m++] = c;
            continue;
        }
        cp = 0;
        for (int j = 0; j < nd; j++) {
            char h = i < n ? (char)(s[i] | 0x20) : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
            if (d < 0) return lex_fail(L, "truncated \\%cXX escape in string", c);
            cp = cp << 4 | (uint32_t)d;
            i++;
        }
        if (cp > 0x10FFFF) return lex_fail(L, "illegal Unicode character in string");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return lex_fail(L, "surrogate escape \\%c%04x in a string is not supported", c, cp);
        m += (size_t)proto_utf8_put(o + m, cp);
    }
    k->s = o;
    k->len = m;
    t->store_n += m + 1;
    o[m] = 0;
    return 0;
}

static const struct {
    const char *op;
    int type;
} ops[] = {
    {"//", TOK_FLOORDIV}, {"**", TOK_POW}, {"==", TOK_EQ}, {"!=", TOK_NE}, {">=", TOK_GTEQ},
    {"<=", TOK_LTEQ},     {"+", TOK_ADD},  {"-", TOK_SUB}, {"/", TOK_DIV}, {"*", TOK_MUL},
    {"%", TOK_MOD},       {"~", TOK_TILDE}, {"[", TOK_LBRACKET}, {"]", TOK_RBRACKET},
    {"(", TOK_LPAREN},    {")", TOK_RPAREN}, {"{", TOK_LBRACE}, {"}", TOK_RBRACE},
    {">", TOK_GT},        {"<", TOK_LT},   {"=", TOK_ASSIGN}, {".", TOK_DOT}, {":", TOK_COLON},
    {"|", TOK_PIPE},      {",", TOK_COMMA}, {";", TOK_SEMICOLON},
};

const char *model_tmpl_tok_name(int type)
{
    switch (type) {
    case TOK_EOF: return "end of template";
    case TOK_DATA: return "template data / text";
    case TOK_VAR_BEGIN: return "begin of print statement";
    case TOK_VAR_END: return "end of print statement";
    case TOK_BLOCK_BEGIN: return "begin of statement block";
    case TOK_BLOCK_END: return "end of statement block";
    case TOK_NAME: return "name";
    case TOK_STRING: return "string";
    case TOK_INT: return "integer";
    case TOK_FLOAT: return "float";
    }
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ops[i].type == type) return ops[i].op;
    return "?";
}

/* Tokens inside {% %} or {{ }} until the matching end; returns 0 with L->pos after the end and
 * *ended_nl telling whether the end match finished with a newline. */
static int lex_tag(lexer *L, bool block, bool *ended_nl)
{
    const char *s = L->s;
    size_t n = L->n;
    char stack[256];
    int depth = 0;
    for (;;) {
        size_t i = L->pos;
        if (i >= n) return 0; /* the parser reports the missing end */
        if (depth == 0) {
            size_t e = block ? block_end_at(L, i) : var_end_at(L, i);
            if (e) {
                if (push(L, block ? TOK_BLOCK_END : TOK_VAR_END, i, NULL, 0, NULL)) return -1;
                *ended_nl = s[e - 1] == '\n';
                L->pos = e;
                return 0;
            }
        }
        size_t w = ws_len(s, n, i);
        if (w) {
            L->pos = skip_ws(s, n, i);
            continue;
        }
        tmpl_tok *k;
        size_t e;
        int base;
        if ((e = float_at(L, i))) {
            char num[128];
            size_t m = 0;
            for (size_t j = i; j < e && m < sizeof num - 1; j++)
                if (s[j] != '_') num[m++] = s[j];
            num[m] = 0;
            if (push(L, TOK_FLOAT, i, s + i, e - i, &k)) return -1;
            k->f = strtod(num, NULL);
            L->pos = e;
            continue;
        }
        if ((e = int_at(L, i, &base))) {
            char num[128];
            size_t m = 0;
            for (size_t j = base == 10 ? i : i + 2; j < e && m < sizeof num - 1; j++)
                if (s[j] != '_') num[m++] = s[j];
            num[m] = 0;
            errno = 0;
            unsigned long long v = strtoull(num, NULL, base);
            if (errno || v > INT64_MAX || m >= sizeof num - 1)
                return lex_fail(L, "integer literal %.*s is out of the 64-bit range", (int)(e - i), s + i);
            if (push(L, TOK_INT, i, s + i, e - i, &k)) return -1;
            k->i = (int64_t)v;
            L->pos = e;
            continue;
        }
        if ((e = name_char_len(s, n, i, true)) > 0) {
            bool ascii = e == 1;
            e += i;
            for (size_t l; e < n && (l = name_char_len(s, n, e, false)) > 0; e += l)
                ascii &= l == 1;
            if (!ascii && !is_identifier(s + i, e - i)) /* jinja2 checks str.isidentifier() */
                return lex_fail(L, "Invalid character in identifier");
            if (push(L, TOK_NAME, i, s + i, e - i, NULL)) return -1;
            L->pos = e;
            continue;
        }
        if (s[i] == '\'' || s[i] == '"') {
            char q = s[i];
            e = i + 1;
            while (e < n && s[e] != q) e += s[e] == '\\' && e + 1 < n ? 2 : 1;
            if (e >= n) return lex_fail(L, "unexpected char %c at %zu (unterminated string)", q, i);
            if (push(L, TOK_STRING, i, NULL, 0, &k)) return -1;
            if (unescape(L, s + i + 1, e - i - 1, k)) return -1;
            L->pos = e + 1;
            continue;
        }
        int type = -1;
        size_t olen = 0;
        for (size_t j = 0; j < sizeof ops / sizeof *ops; j++) {
            size_t l = strlen(ops[j].op);
            if (i + l <= n && !memcmp(s + i, ops[j].op, l)) {
                type = ops[j].type;
                olen = l;
                break;
            }
        }
        if (type < 0) {
            size_t k2 = i, at = proto_utf8_count(s, i); /* jinja2 counts characters */
            uint32_t cp = proto_utf8_next(s, n, &k2);
            if (cp < 0x80) return lex_fail(L, "unexpected char '%c' at %zu", (char)cp, at);
            if (model_tmpl_py_printable(cp)) /* as Python's repr() shows it */
                return lex_fail(L, "unexpected char '%.*s' at %zu", (int)(k2 - i), s + i, at);
            return lex_fail(L, cp < 0x100 ? "unexpected char '\\x%02x' at %zu"
                               : cp < 0x10000 ? "unexpected char '\\u%04x' at %zu"
                                              : "unexpected char '\\U%08x' at %zu",
                            (unsigned)cp, at);
        }
        if (type == TOK_LBRACE || type == TOK_LPAREN || type == TOK_LBRACKET) {
            if (depth == (int)sizeof stack) return lex_fail(L, "brackets nested too deeply");
            stack[depth++] = type == TOK_LBRACE ? '}' : type == TOK_LPAREN ? ')' : ']';
        } else if (type == TOK_RBRACE || type == TOK_RPAREN || type == TOK_RBRACKET) {
            if (!depth) return lex_fail(L, "unexpected '%c'", s[i]);
            char want = stack[--depth];
            if (want != s[i]) return lex_fail(L, "unexpected '%c', expected '%c'", s[i], want);
        }
        if (push(L, type, i, s + i, olen, NULL)) return -1;
        L->pos = i + olen;
    }
}

/* Looks for "{%[-+]?\s*raw\s*(-%}\s*|%})" at i; returns its end and sign. */
static size_t raw_begin_at(const lexer *L, size_t i, int *sign)
{
    const char *s = L->s;
    size_t n = L->n, k = i + 2;
    *sign = 0;
    if (k < n && (s[k] == '-' || s[k] == '+')) *sign = s[k++];
    k = skip_ws(s, n, k);
    if (k + 3 > n || memcmp(s + k, "raw", 3)) return 0;
    k = skip_ws(s, n, k + 3);
    if (k + 3 <= n && !memcmp(s + k, "-%}", 3)) return skip_ws(s, n, k + 3);
    if (k + 2 <= n && !memcmp(s + k, "%}", 2)) return k + 2;
    return 0;
}

/* Finds the end of a raw block from i: "{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)". */
static size_t endraw_at(const lexer *L, size_t i, int *sign, size_t *tag_start)
{
    const char *s = L->s;
    size_t n = L->n;
    for (size_t p = i; p + 1 < n; p++) {
        if (s[p] != '{' || s[p + 1] != '%') continue;
        size_t k = p + 2;
        int sg = 0;
        if (k < n && (s[k] == '-' || s[k] == '+')) sg = s[k++];
        k = skip_ws(s, n, k);
        if (k + 6 > n || memcmp(s + k, "endraw", 6)) continue;
        k = skip_ws(s, n, k + 6);
        size_t e = block_end_at(L, k);
        if (!e) continue;
        *sign = sg;
        *tag_start = p;
        return e;
    }
    return 0;
}

int model_tmpl_lex(const char *src, size_t len, tmpl_toks *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (memchr(src, 0, len)) {
        snprintf(err, errlen, "TemplateSyntaxError: the template contains a NUL byte");
        return -1;
    }
    /* newlines: \r\n and \r become \n; one trailing newline is dropped */
    char *s = malloc(len + 1);
    out->store_cap = 2 * len + 16;
    out->store = malloc(out->store_cap);
    if (!s || !out->store) {
        free(s);
        snprintf(err, errlen, "TemplateSyntaxError: out of memory");
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    out->src = s;

    lexer L = {.s = s, .n = n, .line = 1, .t = out, .err = err, .errlen = errlen};
    bool line_starting = true;
    while (L.pos < n) {
        /* the earliest of {{ {% {# */
        size_t p = L.pos;
        const char *hit = NULL;
        while (p + 1 < n) {
            const char *q = memchr(s + p, '{', n - p - 1);
            if (!q) break;
            char c = q[1];
            if (c == '{' || c == '%' || c == '#') {
                hit = q;
                break;
            }
            p = (size_t)(q - s) + 1;
        }
        if (!hit) {
            if (push(&L, TOK_DATA, L.pos, s + L.pos, n - L.pos, NULL)) goto fail;
            break;
        }
        size_t at = (size_t)(hit - s);
        char kind = hit[1];
        int sign = 0;
        size_t after = at + 2;
        if (kind == '%') {
            size_t re = raw_begin_at(&L, at, &sign);
            if (re) {
                if (emit_text(&L, L.pos, at, sign, false, line_starting)) goto fail;
                int esign;
                size_t tag;
                size_t e = endraw_at(&L, re, &esign, &tag);
                if (!e) {
                    line_at(&L, at);
                    lex_fail(&L, "Missing end of raw directive");
                    goto fail;
                }
                bool ls = s[re - 1] == '\n';
                if (emit_text(&L, re, tag, esign, false, ls)) goto fail;
                line_starting = s[e - 1] == '\n';
                L.pos = e;
                continue;
            }
        }
        if (after < n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        if (emit_text(&L, L.pos, at, sign, kind == '{', line_starting)) goto fail;
        if (kind == '#') {
            size_t e = 0;
            for (size_t q = after; q + 1 < n; q++) {
                if (s[q] == '+' && q + 2 < n && s[q + 1] == '#' && s[q + 2] == '}') {
                    e = q + 3;
                    break;
                }
                if (s[q] == '-' && q + 2 < n && s[q + 1] == '#' && s[q + 2] == '}') {
                    e = skip_ws(s, n, q + 3);
                    break;
                }
                if (s[q] == '#' && s[q + 1] == '}') {
                    e = q + 2 < n && s[q + 2] == '\n' ? q + 3 : q + 2;
                    break;
                }
            }
            if (!e) {
                line_at(&L, at);
                lex_fail(&L, "Missing end of comment tag");
                goto fail;
            }
            line_starting = s[e - 1] == '\n';
            L.pos = e;
            continue;
        }
        bool block = kind == '%';
        if (push(&L, block ? TOK_BLOCK_BEGIN : TOK_VAR_BEGIN, at, NULL, 0, NULL)) goto fail;
        L.pos = after;
        bool nl = false;
        if (lex_tag(&L, block, &nl)) goto fail;
        line_starting = nl;
    }
    if (push(&L, TOK_EOF, n, NULL, 0, NULL)) goto fail;
    return 0;
fail:
    model_tmpl_toks_free(out);
    return -1;
}

void model_tmpl_toks_free(tmpl_toks *t)
{
    free(t->v);
    free(t->src);
    free(t->store);
    memset(t, 0, sizeof *t);
}
