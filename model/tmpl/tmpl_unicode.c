/* model/tmpl/tmpl_unicode.c — Python's character classes and case mappings, for the template
 * interpreter's str methods, filters, repr and identifiers.
 *
 * Every class is CPython's definition (Objects/unicodectype.c, generated from the Unicode
 * database) asked of ICU, which carries the same database: no table here. Whitespace is bidi
 * class WS, B or S or category Zs; printable is ' ' or any category outside C* and Z*; alpha is
 * L*; decimal, digit and numeric are the Numeric_Type values Decimal, Decimal or Digit, and any;
 * upper, lower and cased are the derived properties Uppercase, Lowercase and Cased, title is Lt.
 * Case mappings are Unicode's full ones (SpecialCasing's unconditional one-to-many mappings, the
 * Final_Sigma condition), which CPython applies too, through ICU's root locale (no language's
 * tailoring, as Python has none).
 *
 * Threads: any. The two ICU case maps below are opened once and only read afterwards (ICU's
 * const case-mapping functions); titlecasing, whose ICU map is not const, opens its own per
 * call. */
#include "model/tmpl/tmpl_int.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unicode/ucasemap.h>
#include <unicode/uchar.h>

/* ---------------------------------------------------------------------- character classes */

bool model_tmpl_py_isspace(uint32_t c)
{
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    UCharDirection d = u_charDirection((UChar32)c);
    return u_charType((UChar32)c) == U_SPACE_SEPARATOR || d == U_WHITE_SPACE_NEUTRAL ||
           d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR;
}

bool model_tmpl_py_printable(uint32_t c)
{
    if (c < 0x80) return c >= 0x20 && c < 0x7F;
    return !(U_GET_GC_MASK((UChar32)c) & (U_GC_C_MASK | U_GC_Z_MASK));
}

bool model_tmpl_py_isalpha(uint32_t c)
{
    if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return (U_GET_GC_MASK((UChar32)c) & U_GC_L_MASK) != 0;
}

static int numeric_type(uint32_t c)
{
    if (c < 0x80) return c >= '0' && c <= '9' ? U_NT_DECIMAL : U_NT_NONE;
    return u_getIntPropertyValue((UChar32)c, UCHAR_NUMERIC_TYPE);
}

bool model_tmpl_py_isdecimal(uint32_t c)
{
    return numeric_type(c) == U_NT_DECIMAL;
}

bool model_tmpl_py_isdigit(uint32_t c)
{
    int t = numeric_type(c);
    return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}

bool model_tmpl_py_isnumeric(uint32_t c)
{
    return numeric_type(c) != U_NT_NONE;
}

bool model_tmpl_py_isalnum(uint32_t c)
{
    return model_tmpl_py_isalpha(c) || model_tmpl_py_isnumeric(c);
}

bool model_tmpl_py_isword(uint32_t c)
{
    return c == '_' || model_tmpl_py_isalnum(c);
}

bool model_tmpl_py_isident(uint32_t c, bool first)
{
    if (c < 0x80) return c == '_' || model_tmpl_py_isalpha(c) || (!first && c >= '0' && c <= '9');
    return u_hasBinaryProperty((UChar32)c, first ? UCHAR_XID_START : UCHAR_XID_CONTINUE) != 0;
}

bool model_tmpl_cp_upper(uint32_t c)
{
    if (c < 0x80) return c >= 'A' && c <= 'Z';
    return u_hasBinaryProperty((UChar32)c, UCHAR_UPPERCASE) != 0;
}

bool model_tmpl_cp_lower(uint32_t c)
{
    if (c < 0x80) return c >= 'a' && c <= 'z';
    return u_hasBinaryProperty((UChar32)c, UCHAR_LOWERCASE) != 0;
}

bool model_tmpl_cp_title(uint32_t c)
{
    return c >= 0x80 && u_charType((UChar32)c) == U_TITLECASE_LETTER;
}

bool model_tmpl_cp_cased(uint32_t c)
{
    if (c < 0x80) return model_tmpl_py_isalpha(c);
    return u_hasBinaryProperty((UChar32)c, UCHAR_CASED) != 0;
}

static bool case_ignorable(uint32_t c)
{
    return u_hasBinaryProperty((UChar32)c, UCHAR_CASE_IGNORABLE) != 0;
}

bool model_tmpl_str_is(const char *s, size_t n, int cls)
{
    if (n == 0) return false;
    /* str.islower/isupper/istitle (CPython's unicode_islower...): any title letter, or an upper
     * one (islower) or a lower one (isupper), fails; at least one cased letter is needed. */
    bool cased = false, prev_cased = false;
    for (size_t i = 0; i < n;) {
        uint32_t c = proto_utf8_next(s, n, &i);
        switch (cls) {
        case TMPL_IS_ALPHA: if (!model_tmpl_py_isalpha(c)) return false; break;
        case TMPL_IS_DECIMAL: if (!model_tmpl_py_isdecimal(c)) return false; break;
        case TMPL_IS_DIGIT: if (!model_tmpl_py_isdigit(c)) return false; break;
        case TMPL_IS_NUMERIC: if (!model_tmpl_py_isnumeric(c)) return false; break;
        case TMPL_IS_ALNUM: if (!model_tmpl_py_isalnum(c)) return false; break;
        case TMPL_IS_SPACE: if (!model_tmpl_py_isspace(c)) return false; break;
        case TMPL_IS_LOWER:
            if (model_tmpl_cp_upper(c) || model_tmpl_cp_title(c)) return false;
            cased |= model_tmpl_cp_lower(c);
            break;
        case TMPL_IS_UPPER:
            if (model_tmpl_cp_lower(c) || model_tmpl_cp_title(c)) return false;
            cased |= model_tmpl_cp_upper(c);
            break;
        case TMPL_IS_TITLE:
            if (model_tmpl_cp_upper(c) || model_tmpl_cp_title(c)) {
                if (prev_cased) return false;
                prev_cased = cased = true;
            } else if (model_tmpl_cp_lower(c)) {
                if (!prev_cased) return false;
                prev_cased = cased = true;
            } else {
                prev_cased = false;
            }
            break;
        default: return false;
        }
    }
    return cls == TMPL_IS_LOWER || cls == TMPL_IS_UPPER || cls == TMPL_IS_TITLE ? cased : true;
}

void model_tmpl_py_trim(const char *s, size_t n, size_t *b, size_t *e)
{
    size_t i = 0, j = n;
    while (i < j) {
        size_t k = i;
        if (!model_tmpl_py_isspace(proto_utf8_next(s, n, &k))) break;
        i = k;
    }
    while (j > i) {
        size_t p = proto_utf8_prev(s, j), k = p;
        if (!model_tmpl_py_isspace(proto_utf8_next(s, n, &k))) break;
        j = p;
    }
    *b = i;
    *e = j;
}

/* --------------------------------------------------------------------------- case mappings */

static pthread_once_t maps_once = PTHREAD_ONCE_INIT;
static UCaseMap *map_root, *map_fold; /* opened once, never written again */

static void maps_open(void)
{
    UErrorCode st = U_ZERO_ERROR;
    map_root = ucasemap_open("", 0, &st);
    st = U_ZERO_ERROR;
    map_fold = ucasemap_open("", U_FOLD_CASE_DEFAULT, &st);
}

enum { MAP_UPPER, MAP_LOWER, MAP_FOLD, MAP_TITLE };

/* Appends the mapping of s[0..n) to out, growing it to the length ICU asks for. t: the
 * titlecasing map (MAP_TITLE only). */
static int map_into(proto_buf *out, int how, UCaseMap *t, const char *s, size_t n)
{
    if (n > INT32_MAX / 4) return -1;
    size_t room = n + 16; /* most mappings keep the length; ICU says when not */
    if (out->max && out->len <= out->max && out->max - out->len < room) room = out->max - out->len;
    for (int tries = 0; tries < 2; tries++) {
        if (proto_buf_reserve(out, room)) return -1;
        char *d = out->p + out->len;
        UErrorCode st = U_ZERO_ERROR;
        int32_t k, cap = (int32_t)room, len = (int32_t)n;
        switch (how) {
        case MAP_UPPER: k = ucasemap_utf8ToUpper(map_root, d, cap, s, len, &st); break;
        case MAP_LOWER: k = ucasemap_utf8ToLower(map_root, d, cap, s, len, &st); break;
        case MAP_FOLD: k = ucasemap_utf8FoldCase(map_fold, d, cap, s, len, &st); break;
        default: k = ucasemap_utf8ToTitle(t, d, cap, s, len, &st);
        }
        if (U_SUCCESS(st) && k >= 0 && (size_t)k <= room) { /* a not-terminated warning: fits */
            out->len += (size_t)k;
            out->p[out->len] = 0;
            return 0;
        }
        if (st != U_BUFFER_OVERFLOW_ERROR || k < 0) return -1;
        room = (size_t)k;
    }
    return -1;
}

static int upper_of(proto_buf *out, const char *s, size_t n)
{
    return map_into(out, MAP_UPPER, NULL, s, n);
}

static int lower_of(proto_buf *out, const char *s, size_t n)
{
    return map_into(out, MAP_LOWER, NULL, s, n);
}

/* Capital sigma lowers to final sigma when a cased letter precedes it and none follows, case
 * ignorable characters skipped both ways (Unicode's Final_Sigma; CPython's handle_capital_sigma).
 * s[start..end) is the sigma, s[0..n) the whole string. */
static bool final_sigma(const char *s, size_t n, size_t start, size_t end)
{
    bool before = false;
    for (size_t i = start; i > 0;) {
        i = proto_utf8_prev(s, i);
        size_t k = i;
        uint32_t c = proto_utf8_next(s, n, &k);
        if (case_ignorable(c)) continue;
        before = model_tmpl_cp_cased(c);
        break;
    }
    if (!before) return false;
    for (size_t i = end; i < n;) {
        uint32_t c = proto_utf8_next(s, n, &i);
        if (case_ignorable(c)) continue;
        return !model_tmpl_cp_cased(c);
    }
    return true;
}

/* The lowercase of the character s[start..end) of s[0..n), in its context. */
static int lower_at(proto_buf *out, const char *s, size_t n, size_t start, size_t end, uint32_t c)
{
    if (c == 0x3A3) return proto_buf_add(out, final_sigma(s, n, start, end) ? "ς" : "σ", 2);
    return lower_of(out, s + start, end - start);
}

/* Full titlecase of the one character s[0..n) (ǆ -> ǅ, ß -> Ss, ﬁ -> Fi, ᾳ -> ᾼ): the string as
 * one word, the break exactly at its start. t is opened by the caller, one per call of
 * model_tmpl_case (ICU's titlecasing map keeps state between calls). */
static int title_of(proto_buf *out, UCaseMap *t, const char *s, size_t n)
{
    return map_into(out, MAP_TITLE, t, s, n);
}

static char ascii_upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

int model_tmpl_case(proto_buf *out, const char *s, size_t n, int mode)
{
    pthread_once(&maps_once, maps_open);
    if (!map_root || !map_fold) return -1;
    switch (mode) {
    case 'u': return upper_of(out, s, n);
    case 'l': return lower_of(out, s, n);
    case 'f': return map_into(out, MAP_FOLD, NULL, s, n);
    }
    /* title, capitalize, swapcase: one character at a time, as CPython's do_title, do_capitalize
     * and do_swapcase (ASCII without ICU) */
    UCaseMap *t = NULL;
    if (mode == 't' || mode == 'c') {
        UErrorCode st = U_ZERO_ERROR;
        t = ucasemap_open("", U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT, &st);
        if (U_FAILURE(st)) return -1;
    }
    int rc = 0;
    bool prev_cased = false;
    for (size_t i = 0; i < n && !rc;) {
        size_t start = i;
        char a = s[i];
        uint32_t c = proto_utf8_next(s, n, &i);
        bool ascii = c < 0x80;
        switch (mode) {
        case 't':
            if (ascii) rc = proto_buf_putc(out, prev_cased ? ascii_lower(a) : ascii_upper(a));
            else if (prev_cased) rc = lower_at(out, s, n, start, i, c);
            else rc = title_of(out, t, s + start, i - start);
            prev_cased = model_tmpl_cp_cased(c);
            break;
        case 'c':
            if (ascii) rc = proto_buf_putc(out, start == 0 ? ascii_upper(a) : ascii_lower(a));
            else if (start == 0) rc = title_of(out, t, s, i);
            else rc = lower_at(out, s, n, start, i, c);
            break;
        case 's':
            if (ascii) rc = proto_buf_putc(out, a >= 'a' ? ascii_upper(a) : ascii_lower(a));
            else if (model_tmpl_cp_upper(c)) rc = lower_at(out, s, n, start, i, c);
            else if (model_tmpl_cp_lower(c)) rc = upper_of(out, s + start, i - start);
            else rc = proto_buf_add(out, s + start, i - start);
            break;
        default: rc = -1;
        }
    }
    ucasemap_close(t);
    return rc;
}
