/* model/tmpl/tmpl_pynum.c — Python's numeric conversions that jinja2's filters rely on, exactly:
 * int(float) (|int, '%d' % x), round(float, n) and round(int, n) (|round), and the ceil/floor
 * arithmetic of jinja2's do_round.
 *
 * Python's integers have no bound; ours are 64-bit. Where Python's answer is an integer outside
 * int64 we raise an OverflowError (model_tmpl_fail_int_range) instead of printing a wrong number.
 * Decimal rounding goes through glibc's printf and strtod, which are exact (printf prints a
 * double's exact decimal value, rounded half-to-even at the asked place; strtod rounds a decimal
 * string correctly), as CPython's dtoa-based round() is. */
#include "model/tmpl/tmpl_int.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_tmpl_fail_int_range(tmpl_rt *r)
{
    return model_tmpl_fail(r, "OverflowError",
                           "integer result outside the 64-bit range (not supported)");
}

int model_tmpl_py_int_of_float(tmpl_rt *r, double f, int64_t *out)
{
    if (isnan(f)) return model_tmpl_fail(r, "ValueError", "cannot convert float NaN to integer");
    if (isinf(f))
        return model_tmpl_fail(r, "OverflowError", "cannot convert float infinity to integer");
    if (!tmpl_f_fits_i64(f)) return model_tmpl_fail_int_range(r);
    *out = (int64_t)f; /* C truncates toward zero, as int() does */
    return 0;
}

/* Rounds the decimal integer digits d (no sign, d[0] != '0' unless d is "0") at k places from the
 * right, half to even, where frac says a nonzero fraction followed the digits (then a tie is not
 * a tie). Writes the kept digits (or "0") to q, which has room for strlen(d) + 2. */
static void round_digits(const char *d, int k, bool frac, char *q)
{
    int n = (int)strlen(d);
    if (k > n) { /* the whole number is below half a unit */
        strcpy(q, "0");
        return;
    }
    int keep = n - k;
    /* compare the dropped digits with 5000...0 */
    int cmp = d[keep] - '5';
    for (int i = keep + 1; i < n && cmp == 0; i++)
        if (d[i] != '0') cmp = 1;
    if (cmp == 0 && frac) cmp = 1;
    bool odd = keep > 0 && (d[keep - 1] - '0') % 2;
    if (keep == 0)
        strcpy(q, "0");
    else {
        memcpy(q, d, (size_t)keep);
        q[keep] = 0;
    }
    if (cmp > 0 || (cmp == 0 && odd)) { /* add one to q */
        int i = (int)strlen(q) - 1;
        while (i >= 0 && q[i] == '9') q[i--] = '0';
        if (i >= 0)
            q[i]++;
        else {
            memmove(q + 1, q, strlen(q) + 1);
            q[0] = '1';
        }
    }
}

/* CPython's bounds (floatobject.c): past NDIGITS_MAX decimals no double changes; below
 * NDIGITS_MIN every double rounds to zero. */
enum { PY_NDIGITS_MAX = 323, PY_NDIGITS_MIN = -308 };

int model_tmpl_py_round_float(tmpl_rt *r, double x, int64_t nd, double *out)
{
    if (!isfinite(x) || nd > PY_NDIGITS_MAX) {
        *out = x;
        return 0;
    }
    if (nd < PY_NDIGITS_MIN) {
        *out = 0.0 * x; /* zero with x's sign, as Python */
        return 0;
    }
    /* the longest: 309 integer digits, a sign, the point and 323 decimals */
    char buf[720];
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
    } else {
        double t = trunc(x);
        char digits[340], q[344];
        snprintf(digits, sizeof digits, "%.0f", fabs(t)); /* exact: t is an integer */
        round_digits(digits, (int)-nd, t != x, q);
        snprintf(buf, sizeof buf, "%s%se%d", signbit(x) ? "-" : "", q, (int)-nd);
    }
    double v = strtod(buf, NULL);
    if (isinf(v))
        return model_tmpl_fail(r, "OverflowError", "rounded value too large to represent");
    *out = v;
    return 0;
}

int model_tmpl_py_round_int(tmpl_rt *r, int64_t v, int64_t nd, int64_t *out)
{
    /* |v| < 10^19: from -20 on every int64 rounds to 0 */
    if (nd >= 0 || nd < -19) {
        *out = nd >= 0 ? v : 0;
        return 0;
    }
    __int128 unit = 1;
    for (int64_t i = 0; i < -nd; i++) unit *= 10;
    __int128 q = v / unit, rem = v % unit;
    if (rem < 0) {
        rem += unit;
        q--;
    }
    if (rem * 2 > unit || (rem * 2 == unit && (q & 1))) q++;
    __int128 res = q * unit;
    if (res > INT64_MAX || res < INT64_MIN) return model_tmpl_fail_int_range(r);
    *out = (int64_t)res;
    return 0;
}

/* math.ceil / math.floor of a float: Python returns an int, so inf and nan fail. */
static int ceil_floor(tmpl_rt *r, bool up, double v, double *out)
{
    if (isnan(v)) return model_tmpl_fail(r, "ValueError", "cannot convert float NaN to integer");
    if (isinf(v))
        return model_tmpl_fail(r, "OverflowError", "cannot convert float infinity to integer");
    *out = up ? ceil(v) : floor(v);
    if (*out == 0) *out = 0.0; /* an int has no negative zero */
    return 0;
}

int model_tmpl_py_round_ceil_floor(tmpl_rt *r, bool up, tmpl_val in, int64_t prec, double *out)
{
    /* jinja2: func(value * (10**precision)) / (10**precision) */
    if (prec < 0) {
        /* 10**-n is a float (libm's pow, as CPython's float power), and so is every step */
        double s = pow(10.0, (double)prec), c = 0;
        if (ceil_floor(r, up, (in.kind == TMPL_FLOAT ? in.u.f : (double)in.u.i) * s, &c)) return -1;
        if (s == 0) return model_tmpl_fail(r, "ZeroDivisionError", "float division by zero");
        *out = c / s;
        return 0;
    }
    if (in.kind != TMPL_FLOAT) { /* int * 10**n is exact, and so is its division back */
        *out = (double)in.u.i;
        return 0;
    }
    /* 10**n is an int: multiplying a float converts it to the nearest double (too large from
     * 10**309 on), and int / int divides exactly, rounded once */
    if (prec > 308) return model_tmpl_fail(r, "OverflowError", "int too large to convert to float");
    char buf[360];
    snprintf(buf, sizeof buf, "1e%d", (int)prec);
    double c = 0;
    if (ceil_floor(r, up, in.u.f * strtod(buf, NULL), &c)) return -1;
    snprintf(buf, sizeof buf, "%.0fe-%d", c, (int)prec);
    *out = strtod(buf, NULL);
    return 0;
}
