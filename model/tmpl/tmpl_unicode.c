/* model/tmpl/tmpl_unicode.c — Python's character classes and case mappings, for the template
 * interpreter's str methods, filters and repr.
 *
 * Python decides whitespace, printability and case per code point. Case mappings come from the C
 * library's C.UTF-8 locale (glibc carries the full Unicode simple mappings there, and they agree
 * with Python's); the handful of one-to-many special cases Python applies (ß -> SS, ligatures,
 * final sigma) are added here. The locale object is created once and only read afterwards, so
 * every function here may run on any thread. */
#include "model/tmpl/tmpl_int.h"
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

/* ---------------------------------------------------------------------- character classes */

bool model_tmpl_py_isspace(uint32_t c)
{
    /* Python's str.isspace(): bidirectional class WS/B/S or category Zs (CPython's table). */
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static pthread_once_t loc_once = PTHREAD_ONCE_INIT;
static locale_t loc_utf8;

static void loc_init(void)
{
    loc_utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

static locale_t loc(void)
{
    pthread_once(&loc_once, loc_init);
    return loc_utf8;
}

bool model_tmpl_py_printable(uint32_t c)
{
    /* Python: not printable = categories Cc, Cf, Cs, Co, Cn, Zl, Zp, and Zs except ' '. */
    if (c < 0x80) return c >= 0x20 && c < 0x7F;
    if (c < 0xA0) return false;
    if (c == 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
        (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) ||
        (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
        (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E ||
        c == 0x8E2 || c == 0x110BD || c == 0x110CD || (c >= 0x1D173 && c <= 0x1D17A) ||
        c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F) || (c >= 0xD800 && c <= 0xF8FF) ||
        c >= 0xF0000 || (c & 0xFFFE) == 0xFFFE)
        return false;
    locale_t l = loc();
    return l ? iswprint_l((wint_t)c, l) != 0 : true;
}

bool model_tmpl_py_isalpha(uint32_t c)
{
    if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    locale_t l = loc();
    return l ? iswalpha_l((wint_t)c, l) != 0 : false;
}

bool model_tmpl_py_isdigit(uint32_t c)
{
    if (c < 0x80) return c >= '0' && c <= '9';
    locale_t l = loc();
    /* glibc's C.UTF-8 counts only ASCII digits as digit; Python's isdigit also takes the other
     * decimal digit sets, which glibc files under alnum-but-not-alpha. */
    return l ? (iswalnum_l((wint_t)c, l) && !iswalpha_l((wint_t)c, l)) : false;
}

bool model_tmpl_py_isalnum(uint32_t c)
{
    return model_tmpl_py_isalpha(c) || model_tmpl_py_isdigit(c);
}

static uint32_t to_upper(uint32_t c)
{
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    locale_t l = loc();
    return l ? (uint32_t)towupper_l((wint_t)c, l) : c;
}

static uint32_t to_lower(uint32_t c)
{
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    locale_t l = loc();
    return l ? (uint32_t)towlower_l((wint_t)c, l) : c;
}

bool model_tmpl_cp_upper(uint32_t c)
{
    if (c < 0x80) return c >= 'A' && c <= 'Z';
    locale_t l = loc();
    return l ? iswupper_l((wint_t)c, l) != 0 : false;
}

bool model_tmpl_cp_lower(uint32_t c)
{
    if (c < 0x80) return c >= 'a' && c <= 'z';
    locale_t l = loc();
    return l ? iswlower_l((wint_t)c, l) != 0 : false;
}

bool model_tmpl_cp_cased(uint32_t c)
{
    if (c < 0x80) return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    return model_tmpl_cp_upper(c) || model_tmpl_cp_lower(c) || to_upper(c) != c ||
           to_lower(c) != c;
}

/* Unicode SpecialCasing.txt's unconditional one-to-many mappings that Python applies (the
 * common ones: German sharp s, Latin/Armenian ligatures, a few Greek and Latin letters with
 * combining marks). Each: code point, upper (up to 3), lower (up to 2, 0 = simple mapping). */
static const struct {
    uint32_t cp;
    uint32_t up[3];
    uint32_t lo[2];
} special[] = {
    {0x00DF, {0x53, 0x53, 0}, {0, 0}},          {0x0130, {0, 0, 0}, {0x69, 0x307}},
    {0x0149, {0x2BC, 0x4E, 0}, {0, 0}},         {0x01F0, {0x4A, 0x30C, 0}, {0, 0}},
    {0x0390, {0x399, 0x308, 0x301}, {0, 0}},    {0x03B0, {0x3A5, 0x308, 0x301}, {0, 0}},
    {0x0587, {0x535, 0x552, 0}, {0, 0}},        {0x1E96, {0x48, 0x331, 0}, {0, 0}},
    {0x1E97, {0x54, 0x308, 0}, {0, 0}},         {0x1E98, {0x57, 0x30A, 0}, {0, 0}},
    {0x1E99, {0x59, 0x30A, 0}, {0, 0}},         {0x1E9A, {0x41, 0x2BE, 0}, {0, 0}},
    {0xFB00, {0x46, 0x46, 0}, {0, 0}},          {0xFB01, {0x46, 0x49, 0}, {0, 0}},
    {0xFB02, {0x46, 0x4C, 0}, {0, 0}},          {0xFB03, {0x46, 0x46, 0x49}, {0, 0}},
    {0xFB04, {0x46, 0x46, 0x4C}, {0, 0}},       {0xFB05, {0x53, 0x54, 0}, {0, 0}},
    {0xFB06, {0x53, 0x54, 0}, {0, 0}},          {0xFB13, {0x544, 0x546, 0}, {0, 0}},
    {0xFB14, {0x544, 0x535, 0}, {0, 0}},        {0xFB15, {0x544, 0x53B, 0}, {0, 0}},
    {0xFB16, {0x54E, 0x546, 0}, {0, 0}},        {0xFB17, {0x544, 0x53D, 0}, {0, 0}},
};

static int put_cp(proto_buf *b, uint32_t c)
{
    char u[4];
    return proto_buf_add(b, u, (size_t)proto_utf8_put(u, c));
}

static int put_upper(proto_buf *b, uint32_t c)
{
    if (c >= 0xDF)
        for (size_t k = 0; k < sizeof special / sizeof *special; k++)
            if (special[k].cp == c && special[k].up[0]) {
                for (int j = 0; j < 3 && special[k].up[j]; j++)
                    if (put_cp(b, special[k].up[j])) return -1;
                return 0;
            }
    return put_cp(b, to_upper(c));
}

/* Title case of one character: upper, except the DŽ/LJ/NJ/DZ digraphs, which have titlecase forms. */
static int put_title(proto_buf *b, uint32_t c)
{
    if (c >= 0x1C4 && c <= 0x1CC) return put_cp(b, 0x1C5 + (c - 0x1C4) / 3 * 3);
    if (c >= 0x1F1 && c <= 0x1F3) return put_cp(b, 0x1F2);
    if (c == 0xDF) return put_cp(b, 0x53) || put_cp(b, 0x73); /* ß -> Ss */
    if (c >= 0xFB00 && c <= 0xFB06) {
        static const char *t[] = {"Ff", "Fi", "Fl", "Ffi", "Ffl", "St", "St"};
        return proto_buf_add(b, t[c - 0xFB00], strlen(t[c - 0xFB00]));
    }
    return put_upper(b, c);
}

static bool final_sigma(const char *s, size_t n, size_t start, size_t end)
{
    /* Σ lowers to ς when a cased letter precedes it and none follows (case-ignorable skipped;
     * approximated by apostrophes and combining marks). */
    size_t i = start;
    bool before = false;
    while (i > 0) {
        i = proto_utf8_prev(s, i);
        size_t k = i;
        uint32_t c = proto_utf8_next(s, n, &k);
        if (c == '\'' || (c >= 0x300 && c <= 0x36F)) continue;
        before = model_tmpl_cp_cased(c);
        break;
    }
    if (!before) return false;
    i = end;
    while (i < n) {
        uint32_t c = proto_utf8_next(s, n, &i);
        if (c == '\'' || (c >= 0x300 && c <= 0x36F)) continue;
        return !model_tmpl_cp_cased(c);
    }
    return true;
}

static int put_lower(proto_buf *b, const char *s, size_t n, size_t start, size_t end, uint32_t c)
{
    if (c == 0x130) return put_cp(b, 0x69) || put_cp(b, 0x307);
    if (c == 0x3A3) return put_cp(b, final_sigma(s, n, start, end) ? 0x3C2 : 0x3C3);
    return put_cp(b, to_lower(c));
}

int model_tmpl_case(proto_buf *b, const char *s, size_t n, int mode)
{
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < n) {
        size_t start = i;
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80 && mode != 't' && mode != 'c') { /* ASCII fast path */
            char o = (char)ch;
            if ((mode == 'u' || (mode == 's' && ch >= 'a' && ch <= 'z')) && ch >= 'a' && ch <= 'z')
                o = (char)(ch - 32);
            else if ((mode == 'l' || mode == 'f' || mode == 's') && ch >= 'A' && ch <= 'Z')
                o = (char)(ch + 32);
            if (proto_buf_putc(b, o)) return -1;
            i++;
            continue;
        }
        uint32_t c = proto_utf8_next(s, n, &i);
        int rc = 0;
        switch (mode) {
        case 'u': rc = put_upper(b, c); break;
        case 'l': rc = put_lower(b, s, n, start, i, c); break;
        case 'f': rc = c == 0xDF ? proto_buf_add(b, "ss", 2) : put_lower(b, s, n, start, i, c); break;
        case 's':
            if (model_tmpl_cp_upper(c)) rc = put_lower(b, s, n, start, i, c);
            else if (model_tmpl_cp_lower(c)) rc = put_upper(b, c);
            else rc = put_cp(b, c);
            break;
        case 'c': rc = first ? put_title(b, c) : put_lower(b, s, n, start, i, c); break;
        case 't': {
            bool cased = model_tmpl_cp_cased(c);
            if (!cased) rc = put_cp(b, c);
            else if (prev_cased) rc = put_lower(b, s, n, start, i, c);
            else rc = put_title(b, c);
            prev_cased = cased;
            break;
        }
        default: rc = put_cp(b, c);
        }
        if (rc) return -1;
        first = false;
    }
    return 0;
}
