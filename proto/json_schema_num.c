/* proto/json_schema_num.c — "integer" and "number" nodes with their bounds (minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum, multipleOf 1) as grammar expressions.
 *
 * An integer range [lo, hi] is written the way a regular expression for a digit range is built
 * by hand: zero alone, then one alternative per count of digits, and inside one count the
 * numbers from x to y (same length, so their order is the order of their digit strings) split
 * at the first digit where x and y differ: x's first digit followed by "x's rest or more", the
 * digits strictly between followed by any digits, y's first digit followed by "y's rest or
 * less". Negative numbers are "-" and a magnitude range. The text is canonical JSON: no leading
 * zeros, no "+", zero only as "0" (never "-0"; JSON and Ajv accept "-0" as 0 too, so this is
 * narrower, not wrong).
 *
 * Magnitudes stop at 16 digits as json-integer's do, or at the digits of the largest finite
 * bound when that has more (at most 19: a bound in the 64-bit range); an open side of a range
 * ends there. A number's bounds are checked without exponents: a bounded number is written as
 * an integer part and at most 16 fraction digits, the last not zero (fewer next to an exclusive
 * bound, so that a validator's double is not the bound: close_digits). A non-integer bound of a
 * number is rounded inwards to an integer (minimum 0.5 is kept as 1), a narrower language.
 * Integers beyond 2^53 are exact here; a validator working in doubles (Ajv) may read a value
 * next to such a bound as the bound itself. */
#include "proto/json_schema_int.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef __int128 i128; /* bounds and their negations without overflow: |v| <= 10^19 - 1 */

#define DEFAULT_DIGITS 16 /* json-integer's: 10^16 - 1 is the largest magnitude it writes */
#define MAX_DIGITS     19 /* every int64 has at most 19 digits */

/* 10^d, d <= 19 (fits uint64: 10^19 < 2^64). */
static uint64_t pow10u(int d)
{
    uint64_t p = 1;
    while (d-- > 0) p *= 10;
    return p;
}

static int n_digits(uint64_t v)
{
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* Numbers of exactly n digits from x to y (decimal strings, x <= y) as a sequence of grammar
 * elements. */
static int same_len(proto_buf *b, const char *x, const char *y, size_t n)
{
    static const char nines[] = "9999999999999999999", zeros[] = "0000000000000000000";
    if (n == 0) return 0;
    if (x[0] == y[0]) {
        if (proto_buf_printf(b, "\"%c\"", x[0])) return -1;
        return n > 1 ? proto_buf_putc(b, ' ') || same_len(b, x + 1, y + 1, n - 1) : 0;
    }
    int x_low = strspn(x + 1, "0") >= n - 1, y_high = strspn(y + 1, "9") >= n - 1;
    char lo = x_low ? x[0] : (char)(x[0] + 1), hi = y_high ? y[0] : (char)(y[0] - 1);
    int rc = proto_buf_str(b, "( "), first = 1;
    if (!x_low) { /* x's first digit: the rest from x's rest up */
        rc = rc || proto_buf_printf(b, "\"%c\" ", x[0]) || same_len(b, x + 1, nines, n - 1);
        first = 0;
    }
    if (lo <= hi) { /* the digits between: any rest */
        rc = rc || (!first && proto_buf_str(b, " | ")) || proto_buf_printf(b, "[%c-%c]", lo, hi);
        if (n > 1) rc = rc || proto_buf_printf(b, " [0-9]{%zu}", n - 1);
        first = 0;
    }
    if (!y_high) { /* y's first digit: the rest up to y's rest */
        rc = rc || (!first && proto_buf_str(b, " | ")) || proto_buf_printf(b, "\"%c\" ", y[0]) ||
             same_len(b, zeros, y + 1, n - 1);
    }
    return rc || proto_buf_str(b, " )");
}

/* Magnitudes a..b (0 <= a <= b < 10^19), canonical decimal, as one parenthesized alternation. */
static int magnitudes(proto_buf *b, uint64_t a, uint64_t hi)
{
    int rc = proto_buf_str(b, "( "), first = 1;
    if (a == 0) {
        rc = rc || proto_buf_str(b, "\"0\"");
        first = 0;
        a = 1;
    }
    for (int d = n_digits(a); a <= hi && d <= MAX_DIGITS && !rc; d++) {
        uint64_t low = pow10u(d - 1), high = pow10u(d) - 1;
        uint64_t x = a > low ? a : low, y = hi < high ? hi : high;
        if (x > y) continue;
        if (!first) rc = proto_buf_str(b, " | ");
        first = 0;
        if (x == low && y == high) { /* every number of d digits and of the full counts after */
            int d2 = d;
            while (d2 < MAX_DIGITS && hi >= pow10u(d2 + 1) - 1) d2++;
            rc = rc || proto_buf_str(b, "[1-9]");
            if (d2 > 1 && d == d2)
                rc = rc || proto_buf_printf(b, " [0-9]{%d}", d - 1);
            else if (d2 > 1)
                rc = rc || proto_buf_printf(b, " [0-9]{%d,%d}", d - 1, d2 - 1);
            d = d2;
        } else {
            char xs[24], ys[24];
            snprintf(xs, sizeof xs, "%llu", (unsigned long long)x);
            snprintf(ys, sizeof ys, "%llu", (unsigned long long)y);
            rc = rc || same_len(b, xs, ys, (size_t)d);
        }
    }
    return rc || proto_buf_str(b, " )");
}

/* Integers lo..hi (|lo|, |hi| < 10^19) as alternatives appended after *first ones. */
static int int_range(proto_buf *b, i128 lo, i128 hi, int *first)
{
    int rc = 0;
    if (lo > hi) return 0;
    if (lo < 0) { /* the negatives: "-" and magnitudes max(-hi, 1) .. -lo */
        i128 a = hi < 0 ? -hi : 1;
        rc = (!*first && proto_buf_str(b, " | ")) || proto_buf_str(b, "\"-\" ") ||
             magnitudes(b, (uint64_t)a, (uint64_t)-lo);
        *first = 0;
    }
    if (hi >= 0 && !rc) {
        rc = (!*first && proto_buf_str(b, " | ")) ||
             magnitudes(b, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi);
        *first = 0;
    }
    return rc;
}

/* One side of a range as read from the schema. */
typedef struct nbound {
    int set;             /* 0: open */
    i128 v;              /* an integer */
    int excl;            /* numbers only: v itself is out */
    const char *rounded; /* numbers only: the keyword of a fractional bound rounded inwards */
} nbound;

/* x (a JSON number) as a bound: lower (1) or upper (0), exclusive or not, for an integer node or
 * a number node. 0; 1 when the bound excludes nothing the grammar could write (beyond the 64-bit
 * range on the open side); -1 (through jsc_fail) when it excludes everything. */
static int read_bound(jsc *c, json_t *x, const char *key, int lower, int excl, int integer,
                      nbound *out, const char *ptr)
{
    const double lim = 9999999999999999999.0; /* 10^19 - 1 rounds to 1e19: the 19-digit limit */
    if (!json_is_number(x)) return jsc_fail(c, ptr, "'%s' must be a number", key);
    i128 v;
    int whole = 1;
    if (json_is_integer(x)) {
        v = json_integer_value(x);
    } else {
        double d = json_real_value(x);
        if (d >= lim || d <= -lim) {
            if (lower == (d > 0))
                return jsc_fail(c, ptr, "'%s' beyond the 64-bit integer range is not supported",
                                key);
            return 1;
        }
        whole = floor(d) == d;
        /* inwards: a lower bound up, an upper one down (the same integer when d is whole) */
        v = (i128)(lower ? ceil(d) : floor(d));
    }
    if (integer) { /* an exclusive bound of an integer is the next integer inside, inclusive */
        if (excl && whole) v += lower ? 1 : -1;
        excl = 0;
    } else if (!whole) {
        excl = 0; /* rounded inwards past it: the rounded value itself is inside */
        out->rounded = key;
    }
    if (!out->set || (lower ? v > out->v : v < out->v) || (v == out->v && excl)) {
        out->set = 1;
        out->v = v;
        out->excl = excl;
    }
    return 0;
}

/* The fraction digits a number next to an exclusive integer bound b may carry: Ajv and most
 * validators compare doubles, and a decimal closer to b than half of b's ulp reads as b itself
 * ("1.9999999999999999" is 2.0, not below 2). With 15 - digits(b) digits the gap, at least
 * 10^(digits(b) - 15), passes |b| * 2^-53; 0 (no fraction) when b has 15 digits or more. */
static int close_digits(i128 b)
{
    if (b == 0) return 16; /* every nonzero fraction of 16 digits is a double apart from 0 */
    int k = 15 - n_digits((uint64_t)(b < 0 ? -b : b));
    return k > 0 ? k : 0;
}

/* Numbers with a fraction above zero and an integer part a..b ("-" first when neg), the ends'
 * fractions limited to ka / kb digits (0: none), alternatives appended after *first ones. */
static int frac_alts(proto_buf *t, int neg, i128 a, i128 b, int ka, int kb, int *first)
{
    if (a > b) return 0;
    if (a == b) ka = kb = ka < kb ? ka : kb;
    i128 ends[2] = {a, b};
    int ks[2] = {ka, kb}, rc = 0;
    i128 ma = ka < 16 ? a + 1 : a, mb = kb < 16 ? b - 1 : b;
    if (ma <= mb) { /* the middle, 16 digits */
        rc = (!*first && proto_buf_str(t, " | ")) ||
             proto_buf_printf(t, "( %s", neg ? "\"-\" " : "") ||
             magnitudes(t, (uint64_t)ma, (uint64_t)mb) ||
             proto_buf_str(t, " \".\" [0-9]{0,15} [1-9] )");
        *first = 0;
    }
    for (int e = 0; e < 2 && !rc; e++) {
        if (ks[e] == 16 || ks[e] == 0 || (e == 1 && a == b)) continue;
        char d[48];
        snprintf(d, sizeof d, "%llu", (unsigned long long)ends[e]);
        rc = (!*first && proto_buf_str(t, " | ")) ||
             proto_buf_printf(t, "( %s\"%s\" \".\" [0-9]{0,%d} [1-9] )", neg ? "\"-\" " : "", d,
                              ks[e] - 1);
        *first = 0;
    }
    return rc;
}

int jsc_number(jsc *c, json_t *s, const char *ptr, int integer, proto_buf *b)
{
    json_t *mo = json_object_get(s, "multipleOf");
    if (mo) {
        if (!json_is_number(mo) || !(json_number_value(mo) > 0))
            return jsc_fail(c, ptr, "'multipleOf' must be a number above 0");
        if (json_number_value(mo) == 1)
            integer = 1; /* whole numbers: what "integer" writes */
        else if (jsc_unenforceable(c, ptr, "multipleOf", NULL))
            return -1;
    }
    nbound lo = {0}, hi = {0};
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *xmn = json_object_get(s, "exclusiveMinimum"),
           *xmx = json_object_get(s, "exclusiveMaximum");
    /* JSON Schema draft 4 and OpenAPI 3.0: a boolean exclusiveMinimum makes "minimum" exclusive */
    int mn_excl = json_is_true(xmn), mx_excl = json_is_true(xmx);
    if (json_is_boolean(xmn)) xmn = NULL;
    if (json_is_boolean(xmx)) xmx = NULL;
    if ((mn && read_bound(c, mn, "minimum", 1, mn_excl, integer, &lo, ptr) < 0) ||
        (xmn && read_bound(c, xmn, "exclusiveMinimum", 1, 1, integer, &lo, ptr) < 0) ||
        (mx && read_bound(c, mx, "maximum", 0, mx_excl, integer, &hi, ptr) < 0) ||
        (xmx && read_bound(c, xmx, "exclusiveMaximum", 0, 1, integer, &hi, ptr) < 0))
        return -1;
    if (!lo.set && !hi.set) {
        int rc = integer ? proto_buf_str(b, "json-integer") : proto_buf_str(b, "json-number");
        return rc ? jsc_fail(c, ptr, "out of memory") : 0;
    }
    int digits = DEFAULT_DIGITS;
    if (lo.set) digits = (int)fmax(digits, n_digits((uint64_t)(lo.v < 0 ? -lo.v : lo.v)));
    if (hi.set) digits = (int)fmax(digits, n_digits((uint64_t)(hi.v < 0 ? -hi.v : hi.v)));
    const i128 cap = (i128)pow10u(digits) - 1;
    /* whole values: lo..hi with an exclusive end stepped inside */
    i128 wl = lo.set ? lo.v + lo.excl : -cap, wh = hi.set ? hi.v - hi.excl : cap;
    if (wl < -cap) wl = -cap;
    if (wh > cap) wh = cap;
    proto_buf t = {0};
    int first = 1, rc = int_range(&t, wl, wh, &first);
    if (!integer && !rc) {
        /* x = I.F with a fraction F > 0 lies strictly between I and I + 1 (or -I - 1 and -I):
         * it is above lo exactly when I >= lo, below hi exactly when I + 1 <= hi, whether the
         * bounds are exclusive or not */
        i128 pl = lo.set && lo.v > 0 ? lo.v : 0, ph = hi.set ? hi.v - 1 : cap;
        i128 nl = hi.set && hi.v < 0 ? -hi.v : 0, nh = lo.set ? -lo.v - 1 : cap;
        if (ph > cap) ph = cap;
        if (nh > cap) nh = cap;
        /* the integer part next to an exclusive bound gets fewer fraction digits (see
         * close_digits); 16 elsewhere */
        int pl_k = lo.excl && lo.v == pl ? close_digits(lo.v) : 16,
            ph_k = hi.excl && hi.v == ph + 1 ? close_digits(hi.v) : 16;
        int nl_k = hi.excl && hi.v == -nl ? close_digits(hi.v) : 16,
            nh_k = lo.excl && lo.v == -nh - 1 ? close_digits(lo.v) : 16;
        rc = frac_alts(&t, 0, pl, ph, pl_k, ph_k, &first) ||
             frac_alts(&t, 1, nl, nh, nl_k, nh_k, &first);
    }
    if (!rc && !first) rc = proto_buf_printf(b, "( %.*s )", (int)t.len, t.p);
    proto_buf_deinit(&t);
    if (rc) return jsc_fail(c, ptr, "out of memory");
    if (!first) return 0;
    if (lo.rounded || hi.rounded) { /* the range held fractions only, e.g. 0.2..0.8 */
        if (jsc_unenforceable(c, ptr, lo.rounded ? lo.rounded : hi.rounded,
                              "a fraction: the range holds no integer to round it to"))
            return -1;
        return proto_buf_str(b, "json-number") ? jsc_fail(c, ptr, "out of memory") : 0;
    }
    return jsc_fail(c, ptr,
                    "no %s lies within 'minimum'/'maximum' (the exclusive ones included): the "
                    "schema matches nothing",
                    integer ? "integer" : "number");
}
