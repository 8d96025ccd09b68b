/* proto/json_schema_num.c: integer and number bounds compile to grammars that accept exactly
 * the canonical texts of the values in range — checked with the grammar's own matcher on every
 * value in a window around each bound (and random ones between) for hundreds of random ranges,
 * with the expected answer computed here in 128-bit arithmetic, not read from the converter;
 * random documents drawn from the grammars lie in range. TANDEM_JSCHEMA_SAMPLES=FILE appends
 * the drawn documents with their schemas as JSON lines (tests/e2e/schema_ajv.sh has Ajv check
 * them). */
#include "tests/proto/jschema_util.h"
#include "tests/test.h"
#include <jansson.h>
#include <stdint.h>

typedef __int128 i128;

#define P16 ((i128)10000000000000000LL) /* 10^16: json-integer's magnitudes stop below it */

static void i128_text(i128 v, char *out)
{
    char tmp[48];
    int n = 0, neg = v < 0;
    unsigned __int128 u = neg ? -(unsigned __int128)v : (unsigned __int128)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    if (neg) *out++ = '-';
    while (n) *out++ = tmp[--n];
    *out = 0;
}

static i128 pow10i(int d)
{
    i128 p = 1;
    while (d-- > 0) p *= 10;
    return p;
}

static int digits_of(i128 v)
{
    int d = 1;
    if (v < 0) v = -v;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* A bound of varied magnitude: small, random of 1-18 digits, next to a power of ten, at the
 * int64 ends, next to json-integer's 16-digit limit, next to zero. */
static i128 rand_bound(uint64_t *rng)
{
    i128 sign = jschema_rand(rng) % 2 ? -1 : 1, delta = (i128)(jschema_rand(rng) % 7) - 3;
    switch (jschema_rand(rng) % 6) {
    case 0:
        return (i128)(jschema_rand(rng) % 201) - 100;
    case 1:
        return sign *
               (i128)(jschema_rand(rng) % (uint64_t)pow10i(1 + (int)(jschema_rand(rng) % 18)));
    case 2:
        return sign * (pow10i(1 + (int)(jschema_rand(rng) % 18)) + delta);
    case 3:
        return sign > 0 ? (i128)INT64_MAX - (delta + 3) : (i128)INT64_MIN + (delta + 3);
    case 4:
        return sign * (P16 - 1 + delta);
    default:
        return delta;
    }
}

/* Schema text of an integer range; *lo / *hi the inclusive bounds it means (set: *has_lo). */
static void int_schema(uint64_t *rng, char *schema, size_t n, int *has_lo, i128 *lo, int *has_hi,
                       i128 *hi)
{
    char a[48], b[48];
    i128 x = rand_bound(rng), y = rand_bound(rng);
    if (x > y && jschema_rand(rng) % 8) { /* mostly well-ordered; sometimes empty on purpose */
        i128 t = x;
        x = y;
        y = t;
    }
    int lk = (int)(jschema_rand(rng) % 3),
        hk = (int)(jschema_rand(rng) % 3); /* 0 none, 1 incl, 2 excl */
    if (!lk && !hk) lk = 1;
    i128_text(x, a);
    i128_text(y, b);
    int k = snprintf(schema, n, "{\"type\":\"integer\"");
    if (lk)
        k += snprintf(schema + k, n - (size_t)k, ",\"%s\":%s",
                      lk == 1 ? "minimum" : "exclusiveMinimum", a);
    if (hk)
        k += snprintf(schema + k, n - (size_t)k, ",\"%s\":%s",
                      hk == 1 ? "maximum" : "exclusiveMaximum", b);
    snprintf(schema + k, n - (size_t)k, "}");
    *has_lo = lk != 0;
    *lo = lk == 2 ? x + 1 : x;
    *has_hi = hk != 0;
    *hi = hk == 2 ? y - 1 : y;
}

/* Appends {"schema":..., "doc":...} to $TANDEM_JSCHEMA_SAMPLES when it is set. */
static void dump_sample(const char *schema, const char *doc)
{
    const char *path = getenv("TANDEM_JSCHEMA_SAMPLES");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "{\"schema\":%s,\"doc\":%s}\n", schema, doc);
    fclose(f);
}

TEST(json_schema_int_ranges)
{
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int compiled = 0, refused_empty = 0, checked = 0;
    for (int iter = 0; iter < 400; iter++) {
        char schema[256], msg[512] = "";
        int has_lo, has_hi;
        i128 lo, hi;
        int_schema(&rng, schema, sizeof schema, &has_lo, &lo, &has_hi, &hi);
        /* an open side ends at 10^16 - 1, or at the digits of the widest finite bound */
        int d = 16;
        if (has_lo && digits_of(lo) > d) d = digits_of(lo);
        if (has_hi && digits_of(hi) > d) d = digits_of(hi);
        i128 cap = pow10i(d) - 1, elo = has_lo && lo > -cap ? lo : -cap,
             ehi = has_hi && hi < cap ? hi : cap;
        /* and whole values within int64: jansson reads a longer integer as an error */
        if (elo < INT64_MIN) elo = INT64_MIN;
        if (ehi > INT64_MAX) ehi = INT64_MAX;
        model_grammar *g = jschema_grammar(schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        if (elo > ehi) {
            CHECK_MSG(!g && strstr(msg, "no integer lies within"), "%s: empty, yet '%s'", schema,
                      msg);
            refused_empty++;
            model_grammar_unref(g);
            continue;
        }
        CHECK_MSG(g, "%s refused: %s", schema, msg);
        if (!g) continue;
        compiled++;
        i128 probes[64];
        int np = 0;
        const i128 centers[] = {elo, ehi, 0, cap, -cap};
        for (int c = 0; c < 5; c++)
            for (int k = -3; k <= 3; k++) probes[np++] = centers[c] + k;
        for (int k = 0; k < 29;
             k++) { /* random values inside, when the range is narrower than 2^63 */
            i128 span = ehi - elo;
            probes[np++] = span < ((i128)1 << 62)
                               ? elo + (i128)(jschema_rand(&rng) % (uint64_t)(span + 1))
                               : elo + k;
        }
        for (int k = 0; k < np; k++) {
            char text[48];
            i128 x = probes[k];
            if (digits_of(x) > 20) continue;
            i128_text(x, text);
            int want = x >= elo && x <= ehi;
            CHECK_MSG(jschema_accepts(g, v, text) == want, "%s: %s should be %s", schema, text,
                      want ? "accepted" : "refused");
            checked++;
            if (want && x > 0) { /* the same value, not canonical: refused */
                char alt[64];
                snprintf(alt, sizeof alt, "0%s", text);
                CHECK_MSG(!jschema_accepts(g, v, alt), "%s: %s accepted", schema, alt);
                snprintf(alt, sizeof alt, "+%s", text);
                CHECK_MSG(!jschema_accepts(g, v, alt), "%s: %s accepted", schema, alt);
                snprintf(alt, sizeof alt, "%s.0", text);
                CHECK_MSG(!jschema_accepts(g, v, alt), "%s: %s accepted", schema, alt);
            }
        }
        CHECK_MSG(!jschema_accepts(g, v, "-0"), "%s: -0 accepted", schema);
        /* random documents of the grammar are integers in range */
        int for_ajv = (!has_lo || (lo > -((i128)1 << 53) && lo < ((i128)1 << 53))) &&
                      (!has_hi || (hi > -((i128)1 << 53) && hi < ((i128)1 << 53)));
        for (int k = 0; k < 8; k++) {
            char doc[64];
            REQUIRE(jschema_sample(g, v, &rng, doc, sizeof doc) == 0);
            i128 x = 0;
            int neg = doc[0] == '-';
            for (const char *p = doc + neg; *p; p++) x = x * 10 + (*p - '0');
            if (neg) x = -x;
            CHECK_MSG(x >= elo && x <= ehi, "%s: sample %s out of range", schema, doc);
            if (for_ajv) dump_sample(schema, doc);
        }
        model_grammar_unref(g);
    }
    CHECK_MSG(compiled > 300 && refused_empty > 5 && checked > 20000,
              "compiled %d, empty %d, checked %d", compiled, refused_empty, checked);
    model_gvocab_free(v);
}

/* x = q / 4 as canonical JSON text ("-1.25", "0.5", "3"). */
static void quarter_text(long q, char *out, size_t n)
{
    static const char *const frac[] = {"", ".25", ".5", ".75"};
    long a = q < 0 ? -q : q;
    snprintf(out, n, "%s%ld%s", q < 0 ? "-" : "", a / 4, frac[a % 4]);
}

/* A document "-?I(.F)?" (F at most 16 digits) in units of 10^-16, exactly: 0, or -1 when it is
 * not of that form. */
static int doc_scaled(const char *doc, i128 *out)
{
    int neg = doc[0] == '-', nf = 0;
    i128 v = 0;
    const char *p = doc + neg;
    for (; *p >= '0' && *p <= '9'; p++) v = v * 10 + (*p - '0');
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9' && nf < 16; p++, nf++) v = v * 10 + (*p - '0');
    if (*p) return -1;
    v *= pow10i(16 - nf);
    *out = neg ? -v : v;
    return 0;
}

TEST(json_schema_number_ranges)
{
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    uint64_t rng = 12345;
    int compiled = 0;
    for (int iter = 0; iter < 300; iter++) {
        /* bounds in quarters, whole or not, kept exactly */
        long l4 = (long)(jschema_rand(&rng) % 81) - 40,
             u4 = l4 + (long)(jschema_rand(&rng) % 41) - 4;
        int lk = (int)(jschema_rand(&rng) % 3), hk = (int)(jschema_rand(&rng) % 3);
        if (!lk && !hk) hk = 2;
        char a[32], b[32], schema[256], msg[512] = "";
        quarter_text(l4, a, sizeof a);
        quarter_text(u4, b, sizeof b);
        int k = snprintf(schema, sizeof schema, "{\"type\":\"number\"");
        if (lk)
            k += snprintf(schema + k, sizeof schema - (size_t)k, ",\"%s\":%s",
                          lk == 1 ? "minimum" : "exclusiveMinimum", a);
        if (hk)
            k += snprintf(schema + k, sizeof schema - (size_t)k, ",\"%s\":%s",
                          hk == 1 ? "maximum" : "exclusiveMaximum", b);
        snprintf(schema + k, sizeof schema - (size_t)k, "}");
        long L = l4, U = u4;
        int lx = lk == 2, ux = hk == 2;
        int empty = lk && hk && (L > U || (L == U && (lx || ux)));
        model_grammar *g = jschema_grammar(schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        if (empty) {
            CHECK_MSG(!g && strstr(msg, "no number lies within"), "%s: '%s'", schema, msg);
            model_grammar_unref(g);
            continue;
        }
        CHECK_MSG(g, "%s refused: %s", schema, msg);
        if (!g) continue;
        compiled++;
        for (long q = -4 * 12 - 200; q <= 200 + 4 * 12; q++) {
            char text[48];
            quarter_text(q, text, sizeof text);
            int want = (!lk || (lx ? q > L : q >= L)) && (!hk || (ux ? q < U : q <= U));
            CHECK_MSG(jschema_accepts(g, v, text) == want, "%s: %s should be %s", schema, text,
                      want ? "accepted" : "refused");
            if (q % 4 == 0) { /* a whole value with a zero fraction: never written (narrower) */
                char alt[64];
                snprintf(alt, sizeof alt, "%s.0", text);
                CHECK_MSG(!jschema_accepts(g, v, alt), "%s: %s accepted", schema, alt);
            }
        }
        CHECK_MSG(!jschema_accepts(g, v, "1e0") && !jschema_accepts(g, v, "-0"),
                  "%s: an exponent or -0 accepted", schema);
        for (int s = 0; s < 6;
             s++) { /* drawn documents (more fraction digits than quarters) in range */
            char doc[96];
            REQUIRE(jschema_sample(g, v, &rng, doc, sizeof doc) == 0);
            i128 x = 0, q = (i128)2500000000000000LL; /* a quarter in units of 10^-16 */
            CHECK_MSG(doc_scaled(doc, &x) == 0, "%s: sample %s", schema, doc);
            int lc = x < L * q ? -1 : x > L * q, uc = x < U * q ? -1 : x > U * q;
            CHECK_MSG((!lk || (lx ? lc > 0 : lc >= 0)) && (!hk || (ux ? uc < 0 : uc <= 0)),
                      "%s: sample %s out of range", schema, doc);
            dump_sample(schema, doc);
        }
        model_grammar_unref(g);
    }
    CHECK_MSG(compiled > 200, "compiled %d", compiled);
    model_gvocab_free(v);
}

/* Next to an exclusive bound a number keeps few enough fraction digits that its double is not
 * the bound's (Ajv compares doubles: "1.9999999999999999" is 2.0, not below 2): 15 less the
 * bound's digits, which leaves room (2 would allow 15). */
TEST(json_schema_number_exclusive_doubles)
{
    static const struct {
        const char *schema, *yes, *no;
    } cases[] = {
        {"{\"type\":\"number\",\"exclusiveMaximum\":2}", "1.99999999999999", "1.999999999999999"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":2}", "2.00000000000001", "2.000000000000001"},
        {"{\"type\":\"number\",\"exclusiveMaximum\":-7}", "-7.00000000000001",
         "-7.000000000000001"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-7}", "-6.99999999999999",
         "-6.999999999999999"},
        {"{\"type\":\"number\",\"exclusiveMaximum\":100000000000}", "99999999999.999",
         "99999999999.9999"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":3}", "2.5",
         "2.0000000000000001"},
        {"{\"type\":\"number\",\"exclusiveMaximum\":0}", "-0.0000000000000001", "0"},
        /* 15 digits: no fraction at all next to it, whole numbers still */
        {"{\"type\":\"number\",\"exclusiveMaximum\":100000000000000}", "99999999999999",
         "99999999999999.5"},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        model_grammar *g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        CHECK_MSG(g, "%s: %s", cases[i].schema, msg);
        const char *yes[] = {cases[i].yes}, *no[] = {cases[i].no};
        jschema_expect(g, v, cases[i].schema, yes, no, 1);
        /* and the accepted one is a double strictly inside, as a validator reads it */
        json_t *s = json_loads(cases[i].schema, 0, NULL);
        double x = strtod(cases[i].yes, NULL);
        json_t *lo = json_object_get(s, "exclusiveMinimum"),
               *hi = json_object_get(s, "exclusiveMaximum");
        CHECK_MSG((!lo || x > json_number_value(lo)) && (!hi || x < json_number_value(hi)),
                  "%s: %s", cases[i].schema, cases[i].yes);
        json_decref(s);
        model_grammar_unref(g);
    }
    model_gvocab_free(v);
}

/* The same for random exclusive bounds of 1 to 15 digits: of the texts closest to the bound that
 * the grammar accepts (the adjacent integer part with the longest run of 9s, or of 0s then a 1),
 * each is a double strictly inside, read as a validator reads it (strtod rounds as JavaScript's
 * Number does); they go to Ajv too (TANDEM_JSCHEMA_SAMPLES). */
TEST(json_schema_number_exclusive_random)
{
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    uint64_t rng = 4242;
    int checked = 0;
    for (int iter = 0; iter < 150; iter++) {
        long long mag =
            (long long)(jschema_rand(&rng) % (uint64_t)pow10i(1 + (int)(jschema_rand(&rng) % 15)));
        long long b = jschema_rand(&rng) % 2 ? -mag : mag;
        int upper = (int)(jschema_rand(&rng) % 2);
        char schema[128], msg[512] = "";
        snprintf(schema, sizeof schema, "{\"type\":\"number\",\"%s\":%lld}",
                 upper ? "exclusiveMaximum" : "exclusiveMinimum", b);
        model_grammar *g = jschema_grammar(schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        CHECK_MSG(g, "%s: %s", schema, msg);
        if (!g) continue;
        /* the integer parts on both sides of b, as text with their sign */
        long long sides[2] = {b - 1, b};
        for (int side = 0; side < 2; side++) {
            for (int run = 0; run < 2; run++) { /* 9s, or 0s then a 1 */
                char best[64] = "";
                for (int n = 16; n >= 1 && !best[0]; n--) {
                    char doc[64];
                    long long ip = sides[side];
                    /* -0.x: the integer part 0 with a minus, between -1 and 0 */
                    int k = snprintf(doc, sizeof doc, "%s%lld.",
                                     ip < 0 || (ip == 0 && side == 0 && b <= 0) ? "-" : "",
                                     ip < 0 ? -ip : ip);
                    for (int d = 0; d < n; d++) doc[k++] = run ? (d == n - 1 ? '1' : '0') : '9';
                    doc[k] = 0;
                    if (jschema_accepts(g, v, doc)) snprintf(best, sizeof best, "%s", doc);
                }
                if (!best[0]) continue;
                double x = strtod(best, NULL);
                CHECK_MSG(upper ? x < (double)b : x > (double)b, "%s: %s reads as %.17g", schema,
                          best, x);
                dump_sample(schema, best);
                checked++;
            }
        }
        model_grammar_unref(g);
    }
    CHECK_MSG(checked > 200, "checked %d", checked);
    model_gvocab_free(v);
}

/* Whole values stay within int64, whatever the bounds' digits: jansson reads a longer integer as
 * an error ("too big integer"), so a tool call writing one came back as text. The review's three
 * schemas; every drawn document is read back by jansson. */
TEST(json_schema_int64_ends)
{
    static const struct {
        const char *schema, *yes[3], *no[3];
    } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":1000000000000000000}",
         {"1000000000000000000", "9223372036854775807"},
         {"9223372036854775808", "9999999999999999999", "999999999999999999"}},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":9.5e18}",
         {"9223372036854775807", "9223372036854775808.5", "0.5"},
         {"9223372036854775808", "9499999999999999999", "9500000000000000000.5"}},
        {"{\"type\":\"integer\",\"maximum\":-1000000000000000000}",
         {"-1000000000000000000", "-9223372036854775808"},
         {"-9223372036854775809", "-9999999999999999999", "-999999999999999999"}},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    uint64_t rng = 77;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        model_grammar *g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        CHECK_MSG(g, "%s: %s", cases[i].schema, msg);
        if (!g) continue;
        jschema_expect(g, v, cases[i].schema, cases[i].yes, cases[i].no, 3);
        for (int k = 0; k < 200; k++) {
            char doc[96];
            REQUIRE(jschema_sample(g, v, &rng, doc, sizeof doc) == 0);
            json_error_t err;
            json_t *x = json_loads(doc, JSON_DECODE_ANY, &err);
            CHECK_MSG(x && json_is_number(x), "%s: sample %s: %s", cases[i].schema, doc, err.text);
            json_decref(x);
        }
        model_grammar_unref(g);
    }
    model_gvocab_free(v);
}

/* Fractional bounds are kept exactly (they were rounded inwards to integers: Pydantic's
 * confloat(ge=0, le=0.5) accepted only 0, and a range holding no integer fell back to any
 * number without strict). Both modes write the same grammar. */
TEST(json_schema_number_fraction_bounds)
{
    static const struct {
        const char *schema, *yes[7], *no[7];
    } cases[] = {
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":0.5}",
         {"0", "0.5", "0.25", "0.4999999999999999"},
         {"0.5000000000000001", "0.51", "1", "-0.1", "0.50"}},
        {"{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.9}",
         {"0.1", "0.9", "0.5", "0.1000000000000001", "0.8999999999999999"},
         {"0", "-7", "3e32", "0.09", "0.0999999999999999", "0.9000000000000001", "1"}},
        /* next to an exclusive bound below 1: 15 fraction digits (close_digits) */
        {"{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"exclusiveMaximum\":0.2}",
         {"0.100000000000001", "0.15", "0.199999999999999"},
         {"0.1", "0.2", "0.1000000000000001", "0.1999999999999999", "0.25"}},
        /* integer part 1: 14 */
        {"{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"maximum\":-1.25}",
         {"-1.49999999999999", "-1.25", "-1.3"},
         {"-1.5", "-1.2", "-1.499999999999999", "-1.2499999999999999", "1.3"}},
        {"{\"type\":\"number\",\"minimum\":-0.75,\"exclusiveMaximum\":2.5}",
         {"-0.75", "0", "-0.1", "2.49999999999999", "1"},
         {"-0.76", "-1", "2.5", "2.499999999999999", "-0"}},
        /* a bound with more digits than a double keeps is its shortest decimal, 0.3 not
         * 0.299999999999999988898 */
        {"{\"type\":\"number\",\"minimum\":0.3,\"maximum\":1e-30}", {NULL}, {"0"}},
        {"{\"type\":\"number\",\"minimum\":0.3}", {"0.3", "7"}, {"0.2999999999999999"}},
        /* an exclusive bound off the fraction grid moved onto it: the grid point is in when
         * its double is beyond the bound's (2 was refused; review21 L2) */
        {"{\"type\":\"number\",\"exclusiveMinimum\":1.999999999999999}", {"2", "2.5"}, {"1.99"}},
        {"{\"type\":\"number\",\"exclusiveMaximum\":2.000000000000001}", {"2", "1.5"}, {"2.01"}},
        {"{\"type\":\"number\",\"minimum\":2,\"exclusiveMaximum\":2.000000000000001}",
         {"2"},
         {"2.5", "1"}},
        /* empty where the upper bound's fraction is a prefix of the lower's: written 0.1 for
         * 0.125..0.1 before (review21), now refused */
        {"{\"type\":\"number\",\"minimum\":0.125,\"maximum\":0.1}", {NULL}, {"0.1"}},
        {"{\"type\":\"number\",\"minimum\":0.15,\"maximum\":0.1}", {NULL}, {"0.1"}},
        {"{\"type\":\"number\",\"minimum\":2.55,\"maximum\":2.5}", {NULL}, {"2.5"}},
        {"{\"type\":\"number\",\"minimum\":-0.1,\"maximum\":-0.15}", {NULL}, {"-0.1"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":5.100000000000001,\"maximum\":5.1}",
         {NULL},
         {"5.1"}},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int mode = 0; mode < 2; mode++) {
            char msg[512] = "";
            model_grammar *g = jschema_grammar(
                cases[i].schema, mode ? PROTO_JSCHEMA_LAX : PROTO_JSCHEMA_STRICT, msg, sizeof msg);
            if (!cases[i].yes[0]) { /* empty: refused in both modes */
                CHECK_MSG(!g && strstr(msg, "matches nothing"), "%s: '%s'", cases[i].schema, msg);
                model_grammar_unref(g);
                continue;
            }
            CHECK_MSG(g, "%s: %s", cases[i].schema, msg);
            jschema_expect(g, v, cases[i].schema, cases[i].yes, cases[i].no, 7);
            model_grammar_unref(g);
        }
    }
    model_gvocab_free(v);
}

/* v (units of 10^-16) as canonical JSON text: "-1.25", "0.5", "3", never "-0" or "0.50". */
static void scaled_text(i128 v, char *out, size_t n)
{
    char ip[48], fp[20];
    i128 a = v < 0 ? -v : v;
    i128_text(a / P16, ip);
    snprintf(fp, sizeof fp, "%016llu", (unsigned long long)(a % P16));
    size_t k = strlen(fp);
    while (k && fp[k - 1] == '0') fp[--k] = 0;
    snprintf(out, n, "%s%s%s%s", v < 0 ? "-" : "", ip, k ? "." : "", fp);
}

/* Random decimal bounds (an integer part of at most 3 digits, at most 12 fraction digits, either
 * sign, inclusive or exclusive, one side open at times) against the grammar's own matcher on
 * values next to each bound at every scale from 1 to 10^-16, and on drawn documents, the answer
 * computed here exactly in units of 10^-16. A value of at most 12 fraction digits must be
 * accepted exactly when it is in range (12: the fewest close_digits allows next to an exclusive
 * bound of 3 integer digits); a longer one, when accepted, must be in range and, next to an
 * exclusive bound, a double strictly inside as a validator reads it. Drawn documents go to Ajv
 * (TANDEM_JSCHEMA_SAMPLES). */
TEST(json_schema_number_decimal_bounds)
{
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    uint64_t rng = 2026;
    int compiled = 0, refused = 0, exact = 0, long_ok = 0;
    for (int iter = 0; iter < 250; iter++) {
        i128 b[2];
        char bt[2][48];
        for (int k = 0; k < 2; k++) {
            int nf = (int)(jschema_rand(&rng) % 13), ni = (int)(jschema_rand(&rng) % 4);
            i128 ip = (i128)(jschema_rand(&rng) % (uint64_t)pow10i(ni));
            i128 fp = (i128)(jschema_rand(&rng) % (uint64_t)pow10i(nf));
            b[k] = (ip * P16 + fp * pow10i(16 - nf)) * (jschema_rand(&rng) % 3 ? 1 : -1);
        }
        if (b[0] > b[1] && jschema_rand(&rng) % 8) { /* mostly ordered; sometimes empty */
            i128 t = b[0];
            b[0] = b[1];
            b[1] = t;
        }
        int lk = (int)(jschema_rand(&rng) % 3), hk = (int)(jschema_rand(&rng) % 3);
        if (!lk && !hk) lk = 2; /* 0 open, 1 inclusive, 2 exclusive */
        char schema[256], msg[512] = "";
        scaled_text(b[0], bt[0], sizeof bt[0]);
        scaled_text(b[1], bt[1], sizeof bt[1]);
        int n = snprintf(schema, sizeof schema, "{\"type\":\"number\"");
        if (lk)
            n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"%s\":%s",
                          lk == 1 ? "minimum" : "exclusiveMinimum", bt[0]);
        if (hk)
            n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"%s\":%s",
                          hk == 1 ? "maximum" : "exclusiveMaximum", bt[1]);
        snprintf(schema + n, sizeof schema - (size_t)n, "}");
        double dl = strtod(bt[0], NULL), dh = strtod(bt[1], NULL);
        int empty = lk && hk && (b[0] > b[1] || (b[0] == b[1] && (lk == 2 || hk == 2)));
        model_grammar *g = jschema_grammar(schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        if (empty) {
            CHECK_MSG(!g && strstr(msg, "matches nothing"), "%s: '%s'", schema, msg);
            model_grammar_unref(g);
            refused++;
            continue;
        }
        CHECK_MSG(g, "%s refused: %s", schema, msg);
        if (!g) continue;
        compiled++;
        i128 probes[200];
        int np = 0;
        static const int scales[] = {0, 1, 2, 3, 6, 11, 12, 13, 15, 16};
        const i128 centers[] = {b[0], b[1], 0};
        for (int c = 0; c < 3; c++)
            for (int s = 0; s < 10; s++)
                for (int j = -2; j <= 2; j++)
                    probes[np++] = centers[c] + j * pow10i(16 - scales[s]);
        for (int k = 0; k < 40; k++) { /* random values between, of random digits */
            i128 span = b[1] - b[0];
            if (span <= 0) break;
            i128 x = b[0] + (i128)(jschema_rand(&rng) % (uint64_t)span);
            probes[np++] = x - x % pow10i((int)(jschema_rand(&rng) % 17));
        }
        for (int k = 0; k < np; k++) {
            i128 x = probes[k];
            char text[64];
            scaled_text(x, text, sizeof text);
            const char *dot = strchr(text, '.');
            int nfrac = dot ? (int)strlen(dot + 1) : 0;
            int in = (!lk || (lk == 2 ? x > b[0] : x >= b[0])) &&
                     (!hk || (hk == 2 ? x < b[1] : x <= b[1]));
            int got = jschema_accepts(g, v, text);
            if (nfrac <= 12) {
                CHECK_MSG(got == in, "%s: %s should be %s", schema, text,
                          in ? "accepted" : "refused");
                exact++;
            } else if (got) {
                double xd = strtod(text, NULL);
                CHECK_MSG(in && (lk != 2 || xd > dl) && (hk != 2 || xd < dh),
                          "%s: %s accepted (reads as %.17g)", schema, text, xd);
                long_ok++;
            }
        }
        for (int s = 0; s < 6; s++) {
            char doc[96];
            i128 x = 0;
            REQUIRE(jschema_sample(g, v, &rng, doc, sizeof doc) == 0);
            CHECK_MSG(doc_scaled(doc, &x) == 0, "%s: sample %s", schema, doc);
            double xd = strtod(doc, NULL);
            int in = (!lk || (lk == 2 ? x > b[0] && xd > dl : x >= b[0])) &&
                     (!hk || (hk == 2 ? x < b[1] && xd < dh : x <= b[1]));
            CHECK_MSG(in, "%s: sample %s out of range", schema, doc);
            dump_sample(schema, doc);
        }
        model_grammar_unref(g);
    }
    CHECK_MSG(compiled > 200 && refused > 3 && exact > 20000 && long_ok > 1000,
              "compiled %d, empty %d, exact %d, long %d", compiled, refused, exact, long_ok);
    model_gvocab_free(v);
}
