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
 * bound when that has more (at most 19); an open side of a range ends there, and whole values
 * stay within int64 (jansson reads a longer integer as an error, so a tool call writing one would
 * come back as text). A number is written without an exponent: an integer part and at most 16
 * fraction digits, the last not zero. Its bounds are kept as decimals of at most 15 fraction
 * digits (a bound with more is rounded inwards there; a double's shortest decimal is the bound,
 * 0.1 not 0.1000000000000000055): an integer part strictly inside the range takes any fraction,
 * one equal to a bound's a fraction compared digit by digit with the bound's (tails), so
 * confloat(ge=0, le=0.5) is 0 to 0.5 exactly. Next to an exclusive bound a number has fewer
 * fraction digits, so that a validator's double of it is not the bound's (close_digits).
 * Inclusive bounds need no such care: a decimal at or above the bound's reads as a double at or
 * above it (rounding to doubles keeps order). Integers beyond 2^53 are exact here; a validator
 * working in doubles (Ajv) may read a value next to such a bound as the bound itself. */
#include "proto/json_schema_int.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Fraction tails s after an integer part: digit strings of at most m digits, empty or ending in
 * 1-9 (canonical: "0.5", never "0.50"), with 0.s >= 0.a (> when !ain) and 0.s <= 0.b (< when
 * !bin). a and b are digit strings without trailing zeros, NULL where that side is free; nz
 * leaves the empty tail out (after a "0", or right after the "."). Writes one expression of the
 * non-empty tails, or nothing when there are none; returns 1 when it wrote one, | 2 when the
 * empty tail is in; -1 out of memory. The digit-by-digit split is same_len's, over strings of
 * unequal length compared as if padded with zeros. */
static int tails(proto_buf *t, const char *a, int ain, const char *b, int bin, int m, int nz)
{
    if (a && !*a) { /* 0.s >= 0 always; 0.s > 0 exactly when s is not empty */
        if (!ain) nz = 1;
        a = NULL;
    }
    if (b && !*b) return bin && !nz ? 2 : 0; /* 0.s <= 0: only the empty tail */
    int empty = !a && !nz ? 2 : 0;           /* a, when set, is above 0 */
    if (m == 0) return empty;
    if (!a && !b) {
        int rc =
            m == 1 ? proto_buf_str(t, "[1-9]") : proto_buf_printf(t, "[0-9]{0,%d} [1-9]", m - 1);
        return rc ? -1 : 1 | empty;
    }
    int a0 = a ? a[0] - '0' : 0, b0 = b ? b[0] - '0' : 9, any = 0, rc = 0;
    proto_buf alts = {0};
    for (int d = a0; d <= b0 && !rc;) {
        /* a run of digits whose tails are alike: 0 (its tail may not be empty), a's first digit
         * and b's (their tails bounded), or the digits between */
        int special = d == 0 || (a && d == a0) || (b && d == b0), e = d;
        while (!special && e + 1 <= b0 && !(b && e + 1 == b0) && !(a && e + 1 == a0)) e++;
        proto_buf sub = {0};
        int r = tails(&sub, a && d == a0 ? a + 1 : NULL, ain, b && d == b0 ? b + 1 : NULL, bin,
                      m - 1, d == 0);
        if (r < 0) rc = -1;
        if (r > 0) {
            rc = (any && proto_buf_str(&alts, " | ")) ||
                 (d == e ? proto_buf_printf(&alts, "\"%d\"", d)
                         : proto_buf_printf(&alts, "[%d-%d]", d, e));
            if (r & 1)
                rc = rc ||
                     proto_buf_printf(&alts, r & 2 ? " ( %.*s )?" : " %.*s", (int)sub.len, sub.p);
            any = 1;
        }
        proto_buf_deinit(&sub);
        d = e + 1;
    }
    if (!rc && any) rc = proto_buf_printf(t, "( %.*s )", (int)alts.len, alts.p);
    proto_buf_deinit(&alts);
    return rc ? -1 : (any ? 1 : 0) | empty;
}

#define FRAC_DIGITS 15 /* a bound's fraction digits kept: the double-safe rule (close_digits) */
static const i128 SCALE = 1000000000000000LL; /* 10^FRAC_DIGITS: a bound in units of 10^-15 */

static i128 floor_div(i128 a, i128 d)
{
    i128 q = a / d;
    return q * d > a ? q - 1 : q;
}

static i128 ceil_div(i128 a, i128 d)
{
    return -floor_div(-a, d);
}

/* One side of a range as read from the schema. */
typedef struct nbound {
    int set;   /* 0: open */
    i128 v;    /* the bound in units of 10^-15, rounded inwards */
    int excl;  /* v itself is out */
    double d;  /* as read, for telling an empty range from one too narrow to write */
    int exact; /* v is the bound's value (an integer in the schema): compare v, not d */
} nbound;

/* The whole number nearest x inside the range: at or above a lower bound, at or below an upper. */
static i128 whole_in(const nbound *x, int lower)
{
    if (lower) return x->excl ? floor_div(x->v, SCALE) + 1 : ceil_div(x->v, SCALE);
    return x->excl ? ceil_div(x->v, SCALE) - 1 : floor_div(x->v, SCALE);
}

/* d (|d| < 10^19) in units of 10^-15, rounded up (up = 1) or down: d's shortest decimal (the one
 * that reads back as d, as a validator's and JavaScript's reading of the bound gives d) is the
 * bound's value, so "minimum": 0.1 is 0.1 and not 0.1000000000000000055. */
static i128 scaled(double d, int up)
{
    char s[48];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, d);
        if (strtod(s, NULL) == d) break;
    }
    snprintf(s, sizeof s, "%.*e", p - 1, d);
    int neg = s[0] == '-';
    uint64_t mant = 0;
    const char *q = s + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') mant = mant * 10 + (uint64_t)(*q - '0');
    int shift = atoi(q + 1) - (p - 1) + FRAC_DIGITS; /* value = mant * 10^(shift - 15) */
    i128 v;
    if (shift >= 0) {
        v = mant; /* |d| < 10^19: below 10^34 */
        while (shift-- > 0) v *= 10;
    } else {
        i128 div = shift < -19 ? 0 : (i128)pow10u(-shift);
        i128 quot = div ? (i128)mant / div : 0;
        int inexact = div ? (i128)mant % div != 0 : mant != 0;
        v = quot + (inexact && (neg ? !up : up));
    }
    return neg ? -v : v;
}

/* x (a JSON number) as a bound: lower (1) or upper (0), exclusive or not. 0; 1 when the bound
 * excludes nothing the grammar could write (beyond the 64-bit range on the open side); -1
 * (through jsc_fail) when it excludes everything. */
static int read_bound(jsc *c, json_t *x, const char *key, int lower, int excl, nbound *out,
                      const char *ptr)
{
    const double lim = 9999999999999999999.0; /* 10^19 - 1 rounds to 1e19: the 19-digit limit */
    if (!json_is_number(x)) return jsc_fail(c, ptr, "'%s' must be a number", key);
    i128 v;
    double d = json_number_value(x);
    if (json_is_integer(x)) {
        v = (i128)json_integer_value(x) * SCALE;
    } else {
        if (d >= lim || d <= -lim) {
            if (lower == (d > 0))
                return jsc_fail(c, ptr, "'%s' beyond the 64-bit integer range is not supported",
                                key);
            return 1;
        }
        v = scaled(d, lower); /* inwards: a lower bound up, an upper one down */
    }
    if (!out->set || (lower ? v > out->v : v < out->v) || (v == out->v && excl)) {
        out->set = 1;
        out->v = v;
        out->excl = excl;
        out->d = d;
        out->exact = json_is_integer(x);
    }
    return 0;
}

/* The fraction digits a number next to an exclusive bound v (units of 10^-15) may carry:
 * validators compare doubles, and a decimal closer to the bound than its ulp may read as the
 * bound itself ("1.9999999999999999" is 2.0, not below 2). With 15 - digits(integer part) digits
 * the gap, at least 10^(digits - 15), passes the bound's ulp, at most |v| * 2^-52; 15 below 1
 * (ulp <= 2^-53); 16 at 0 (every nonzero fraction of 16 digits is a double apart from 0); 0 (no
 * fraction) for integer parts of 15 digits or more. */
static int close_digits(i128 v)
{
    if (v == 0) return 16;
    i128 w = (v < 0 ? -v : v) / SCALE;
    if (w == 0) return FRAC_DIGITS;
    int k = 15 - n_digits((uint64_t)w);
    return k > 0 ? k : 0;
}

/* An exclusive bound moved inwards onto the grid of the fraction digits a number next to it may
 * have: the numbers on that grid beyond it are then at least a grid step from the bound's value
 * (close_digits); the grid point itself is in when it moved and its double is inside. */
static void excl_grid(nbound *x, int lower)
{
    if (!x->set || !x->excl) return;
    int k = close_digits(x->v);
    i128 step = k >= FRAC_DIGITS ? 1 : (i128)pow10u(FRAC_DIGITS - k);
    i128 v = (lower ? ceil_div(x->v, step) : floor_div(x->v, step)) * step;
    if (v != x->v) {
        /* moved: the grid point itself is in when its double is strictly inside the bound's
         * (exclusiveMinimum 1.999999999999999 moved to 2 kept 2 out, which a validator takes;
         * review21). Every decimal beyond it then reads as a double beyond it too. */
        i128 a = v < 0 ? -v : v;
        char txt[64];
        snprintf(txt, sizeof txt, "%s%llu.%015llu", v < 0 ? "-" : "",
                 (unsigned long long)(a / SCALE), (unsigned long long)(a % SCALE));
        double g = strtod(txt, NULL);
        if (lower ? g > x->d : g < x->d) x->excl = 0;
    }
    x->v = v;
}

/* The fraction digits of v (units of 10^-15, v >= 0) without trailing zeros, into f[16]. */
static void frac_text(i128 v, char *f)
{
    snprintf(f, 16, "%015llu", (unsigned long long)(v % SCALE));
    size_t n = strlen(f);
    while (n && f[n - 1] == '0') f[--n] = 0;
}

/* "I" "." and a tail for the integer part I (a magnitude, "-" first when neg), the tail bounded
 * as tails() says; appended after *first ones, nothing when no tail fits. */
static int frac_alt(proto_buf *t, int neg, i128 ip, const char *a, int ain, const char *b, int bin,
                    int m, int *first)
{
    proto_buf sub = {0};
    int r = tails(&sub, a, ain, b, bin, m, 1), rc = r < 0;
    if (r == 1)
        rc = (!*first && proto_buf_str(t, " | ")) ||
             proto_buf_printf(t, "( %s\"%llu\" \".\" %.*s )", neg ? "\"-\" " : "",
                              (unsigned long long)ip, (int)sub.len, sub.p);
    if (r == 1) *first = 0;
    proto_buf_deinit(&sub);
    return rc;
}

static int no_number(jsc *c, const char *ptr, int integer)
{
    return jsc_fail(c, ptr,
                    "no %s lies within 'minimum'/'maximum' (the exclusive ones included): the "
                    "schema matches nothing",
                    integer ? "integer" : "number");
}

/* Magnitudes from lo to hi (units of 10^-15, both >= 0; lo unset: from 0; hi unset: up to cap),
 * "-" first when neg (then never 0 itself): whole ones canonical and within the 64-bit range
 * (jansson reads a longer integer as an error, not a number), then, for numbers, the ones with a
 * fraction of at most 16 digits, fewer next to an exclusive bound. */
static int side(proto_buf *t, int neg, const nbound *lo, const nbound *hi, i128 cap, int integer,
                int *first)
{
    const i128 whole_max = neg ? -(i128)INT64_MIN : (i128)INT64_MAX;
    i128 wl = lo->set ? whole_in(lo, 1) : 0, wh = hi->set ? whole_in(hi, 0) : cap;
    if (neg && wl < 1) wl = 1;
    if (wh > cap) wh = cap;
    if (wh > whole_max) wh = whole_max;
    int rc = 0;
    if (wl <= wh) {
        rc = (!*first && proto_buf_str(t, " | ")) || (neg && proto_buf_str(t, "\"-\" ")) ||
             magnitudes(t, (uint64_t)wl, (uint64_t)wh);
        *first = 0;
    }
    if (integer || rc) return rc;
    char lf[16] = "", hf[16] = "";
    i128 il = lo->set ? floor_div(lo->v, SCALE) : 0, ih = cap;
    int lm = lo->set && lo->excl ? close_digits(lo->v) : 16, hm = 16, hfree = 1;
    if (lo->set) frac_text(lo->v, lf);
    if (hi->set && floor_div(hi->v, SCALE) <= cap) {
        ih = floor_div(hi->v, SCALE);
        hfree = 0;
        if (hi->excl) hm = close_digits(hi->v);
        frac_text(hi->v, hf);
        if (!hf[0] && hi->excl) hfree = 1, ih--; /* below a whole I: I - 1 and any fraction */
    }
    const char *a = lo->set ? lf : NULL, *b = hfree ? NULL : hf;
    int ain = !lo->excl, bin = !hi->excl;
    if (il > ih) return 0;
    if (il == ih) return frac_alt(t, neg, il, a, ain, b, bin, lm < hm ? lm : hm, first);
    rc = frac_alt(t, neg, il, a, ain, NULL, 1, lm, first);
    if (!rc && il + 1 <= ih - 1) { /* the integer parts between: any fraction */
        rc = (!*first && proto_buf_str(t, " | ")) ||
             proto_buf_printf(t, "( %s", neg ? "\"-\" " : "") ||
             magnitudes(t, (uint64_t)(il + 1), (uint64_t)(ih - 1)) ||
             proto_buf_str(t, " \".\" [0-9]{0,15} [1-9] )");
        *first = 0;
    }
    return rc || frac_alt(t, neg, ih, NULL, 1, b, bin, hm, first);
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
    if ((mn && read_bound(c, mn, "minimum", 1, mn_excl, &lo, ptr) < 0) ||
        (xmn && read_bound(c, xmn, "exclusiveMinimum", 1, 1, &lo, ptr) < 0) ||
        (mx && read_bound(c, mx, "maximum", 0, mx_excl, &hi, ptr) < 0) ||
        (xmx && read_bound(c, xmx, "exclusiveMaximum", 0, 1, &hi, ptr) < 0))
        return -1;
    if (!lo.set && !hi.set) {
        int rc = integer ? proto_buf_str(b, "json-integer") : proto_buf_str(b, "json-number");
        return rc ? jsc_fail(c, ptr, "out of memory") : 0;
    }
    int empty = lo.set && hi.set &&
                (lo.exact && hi.exact ? lo.v > hi.v || (lo.v == hi.v && (lo.excl || hi.excl))
                                      : lo.d > hi.d || (lo.d == hi.d && (lo.excl || hi.excl)));
    /* an empty range matches nothing whatever the rules below would write: tails() can take
     * "1" for a bound's fraction when the upper one's is a prefix of the lower's (0.125 to 0.1
     * wrote 0.1; review21) */
    if (empty) return no_number(c, ptr, integer);
    if (!integer) {
        excl_grid(&lo, 1);
        excl_grid(&hi, 0);
    }
    /* an open side ends at the digits of the widest whole value inside a finite bound */
    int digits = DEFAULT_DIGITS;
    for (int k = 0; k < 2; k++) {
        const nbound *x = k ? &hi : &lo;
        i128 w = x->set ? whole_in(x, !k) : 0;
        if (w < 0) w = -w;
        if (w > 0 && n_digits((uint64_t)w) > digits) digits = n_digits((uint64_t)w);
    }
    const i128 cap = (i128)pow10u(digits) - 1;
    /* x >= 0 between max(lo, 0) and hi; x < 0 as "-" and |x| between max(-hi, 0) and -lo */
    nbound pl = lo.set && lo.v >= 0 ? lo : (nbound){0}, ph = hi;
    nbound nl = hi.set && hi.v <= 0 ? hi : (nbound){0}, nh = lo;
    nl.v = -nl.v;
    nh.v = -nh.v;
    proto_buf t = {0};
    int first = 1, rc = 0;
    if (!lo.set || lo.v < 0) rc = side(&t, 1, &nl, &nh, cap, integer, &first);
    if (!rc && (!hi.set || hi.v >= 0)) rc = side(&t, 0, &pl, &ph, cap, integer, &first);
    if (!rc && !first) rc = proto_buf_printf(b, "( %.*s )", (int)t.len, t.p);
    proto_buf_deinit(&t);
    if (rc) return jsc_fail(c, ptr, "out of memory");
    if (!first) return 0;
    if (!integer && !empty) /* e.g. 0.1234567890123451 to 0.1234567890123452 */
        return jsc_fail(c, ptr,
                        "no number of at most 16 fraction digits lies within "
                        "'minimum'/'maximum' (at most 15 of a bound's fraction digits are "
                        "kept): the range is too narrow to be written");
    return no_number(c, ptr, integer);
}
