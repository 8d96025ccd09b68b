/* Stop strings: caught across pushes and never emitted, partial matches released, overlapping
 * stops, multi-byte UTF-8, a stop at the very start, flush, bounds; and every way of splitting a
 * text into pushes against a brute-force reference. */
#include "model/sample/rng.h"
#include "model/gen/stop.h"
#include "tests/test.h"

typedef struct run {
    char out[4096];
    size_t n;
    int hit;      /* the push that hit (1-based), 0 if none */
    int pushes;
    int split_char; /* an output piece ended inside a UTF-8 character */
} run;

static void feed(model_stop *s, run *r, const char *piece)
{
    size_t n;
    int hit = 0;
    const char *o = model_stop_push(s, piece, strlen(piece), &n, &hit);
    r->pushes++;
    if (!o) return;
    /* A piece must end on a character boundary: its last lead byte has all its continuations. */
    size_t i = n;
    while (i > 0 && ((unsigned char)o[i - 1] & 0xC0) == 0x80) i--;
    if (i > 0) {
        unsigned c = (unsigned char)o[i - 1];
        size_t need = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
        if (n - i != need) r->split_char = 1;
    }
    memcpy(r->out + r->n, o, n);
    r->n += n;
    r->out[r->n] = '\0';
    if (hit && !r->hit) r->hit = r->pushes;
}

static void flush(model_stop *s, run *r)
{
    size_t n;
    const char *o = model_stop_flush(s, &n);
    memcpy(r->out + r->n, o, n);
    r->n += n;
    r->out[r->n] = '\0';
}

static model_stop *mk(const char *const *stops, int n)
{
    char err[256] = "";
    model_stop *s = model_stop_new(stops, n, err, sizeof err);
    if (!s) fprintf(stderr, "  rejected: %s\n", err);
    return s;
}

TEST(stop_split_across_many_pushes)
{
    const char *stops[] = {"<|im_end|>"};
    model_stop *s = mk(stops, 1);
    REQUIRE(s);
    run r = {0};
    const char *pieces[] = {"Hello", " world", "<", "|", "im", "_", "end", "|", ">", " never"};
    for (int i = 0; i < 10; i++) {
        feed(s, &r, pieces[i]);
        if (i == 1) CHECK_STR(r.out, "Hello world");
        if (i >= 2 && i < 8) CHECK_STR(r.out, "Hello world"); /* "<|im_end|" is held */
    }
    CHECK_STR(r.out, "Hello world");
    CHECK_EQ(r.hit, 9);
    /* After the hit nothing more comes out, and flush has nothing held. */
    flush(s, &r);
    CHECK_STR(r.out, "Hello world");
    model_stop_free(s);
}

TEST(stop_partial_match_released)
{
    const char *stops[] = {"<|im_end|>"};
    model_stop *s = mk(stops, 1);
    REQUIRE(s);
    run r = {0};
    feed(s, &r, "a<|im");
    CHECK_STR(r.out, "a");
    feed(s, &r, "_start|>b");
    CHECK_STR(r.out, "a<|im_start|>b");
    feed(s, &r, "<<|im_e"); /* the first '<' fails, the second may still start the stop */
    CHECK_STR(r.out, "a<|im_start|>b<");
    feed(s, &r, "nd|");
    flush(s, &r); /* finished for another reason: the held text comes out */
    CHECK_STR(r.out, "a<|im_start|>b<<|im_end|");
    CHECK_EQ(r.hit, 0);
    model_stop_free(s);
}

TEST(stop_overlapping_stops)
{
    /* "bcx" completes before "abcd" could: the earliest completion wins. */
    const char *a[] = {"abcd", "bcx"};
    model_stop *s = mk(a, 2);
    REQUIRE(s);
    run r = {0};
    feed(s, &r, "ab");
    feed(s, &r, "c");
    CHECK_STR(r.out, ""); /* "abc" may still become "abcd" */
    feed(s, &r, "x");
    CHECK_STR(r.out, "a");
    CHECK_EQ(r.hit, 3);
    model_stop_free(s);

    /* A stop overlapping itself: "aab" in "aaab". */
    const char *b[] = {"aab"};
    s = mk(b, 1);
    REQUIRE(s);
    memset(&r, 0, sizeof r);
    feed(s, &r, "xa");
    feed(s, &r, "a");
    feed(s, &r, "a");
    CHECK_STR(r.out, "xa");
    feed(s, &r, "by");
    CHECK_STR(r.out, "xa");
    CHECK_EQ(r.hit, 4);
    model_stop_free(s);

    /* Two stops ending on the same byte: the longer one wins, in either list order. */
    const char *c1[] = {"b", "ab"}, *c2[] = {"ab", "b"};
    for (int k = 0; k < 2; k++) {
        s = mk(k ? c2 : c1, 2);
        REQUIRE(s);
        memset(&r, 0, sizeof r);
        feed(s, &r, "xa");
        feed(s, &r, "bz");
        CHECK_STR(r.out, "x");
        model_stop_free(s);
    }
}

TEST(stop_utf8_never_split)
{
    /* "€" is E2 82 AC; the stop shares its first two bytes with "₂" (E2 82 82). */
    const char *stops[] = {"€!"};
    model_stop *s = mk(stops, 1);
    REQUIRE(s);
    run r = {0};
    feed(s, &r, "a€");
    CHECK_STR(r.out, "a"); /* the whole "€" is held, never part of it */
    feed(s, &r, "₂");
    CHECK_STR(r.out, "a€₂");
    feed(s, &r, "€");
    feed(s, &r, "€");
    CHECK_STR(r.out, "a€₂€");
    feed(s, &r, "!tail");
    CHECK_STR(r.out, "a€₂€");
    CHECK_EQ(r.hit, 5);
    CHECK_EQ(r.split_char, 0);
    model_stop_free(s);

    /* A stop inside a 4-byte character stream. */
    const char *t[] = {"😀😀"};
    s = mk(t, 1);
    REQUIRE(s);
    memset(&r, 0, sizeof r);
    feed(s, &r, "é😀");
    feed(s, &r, "x😀");
    feed(s, &r, "😀y");
    CHECK_STR(r.out, "é😀x");
    CHECK_EQ(r.split_char, 0);
    model_stop_free(s);
}

TEST(stop_at_the_very_start)
{
    const char *stops[] = {"Hi"};
    model_stop *s = mk(stops, 1);
    REQUIRE(s);
    run r = {0};
    feed(s, &r, "Hi there");
    CHECK_EQ(r.n, 0);
    CHECK_EQ(r.hit, 1);
    model_stop_free(s);

    s = mk(stops, 1);
    REQUIRE(s);
    memset(&r, 0, sizeof r);
    feed(s, &r, "H");
    feed(s, &r, "i");
    feed(s, &r, "!");
    CHECK_EQ(r.n, 0);
    CHECK_EQ(r.hit, 2);
    model_stop_free(s);
}

TEST(stop_flush_and_no_stops)
{
    const char *stops[] = {"STOP"};
    model_stop *s = mk(stops, 1);
    REQUIRE(s);
    run r = {0};
    feed(s, &r, "abc ST");
    CHECK_STR(r.out, "abc ");
    flush(s, &r);
    CHECK_STR(r.out, "abc ST");
    /* After a flush the matcher starts afresh: "OP" does not complete the earlier "ST". */
    feed(s, &r, "OP");
    CHECK_STR(r.out, "abc STOP");
    CHECK_EQ(r.hit, 0);
    model_stop_free(s);

    s = mk(NULL, 0);
    REQUIRE(s);
    memset(&r, 0, sizeof r);
    feed(s, &r, "anything <|im_end|> goes");
    CHECK_STR(r.out, "anything <|im_end|> goes");
    feed(s, &r, "");
    flush(s, &r);
    CHECK_STR(r.out, "anything <|im_end|> goes");
    model_stop_free(s);
}

TEST(stop_bounds_rejected)
{
    char err[256];
    char long_stop[MODEL_MAX_STOP_LEN + 2];
    memset(long_stop, 'x', sizeof long_stop - 1);
    long_stop[sizeof long_stop - 1] = '\0';
    const char *too_long[] = {"ok", long_stop};
    CHECK(!model_stop_new(too_long, 2, err, sizeof err) && strstr(err, "stop[1]"));
    long_stop[MODEL_MAX_STOP_LEN] = '\0'; /* exactly the limit */
    model_stop *s = model_stop_new(too_long, 2, err, sizeof err);
    CHECK(s);
    model_stop_free(s);
    const char *empty[] = {""};
    CHECK(!model_stop_new(empty, 1, err, sizeof err) && strstr(err, "stop[0]"));
    const char *null[] = {NULL};
    CHECK(!model_stop_new(null, 1, err, sizeof err));
    const char *bad_utf8[] = {"a\xC3"}, *surrogate[] = {"\xED\xA0\x80"}, *overlong[] = {"\xC0\xAF"};
    CHECK(!model_stop_new(bad_utf8, 1, err, sizeof err) && strstr(err, "UTF-8"));
    CHECK(!model_stop_new(surrogate, 1, err, sizeof err));
    CHECK(!model_stop_new(overlong, 1, err, sizeof err));
    const char *many[MODEL_MAX_STOPS + 1];
    for (int i = 0; i <= MODEL_MAX_STOPS; i++) many[i] = "s";
    CHECK(!model_stop_new(many, MODEL_MAX_STOPS + 1, err, sizeof err));
    s = model_stop_new(many, MODEL_MAX_STOPS, err, sizeof err);
    CHECK(s);
    model_stop_free(s);
    CHECK(!model_stop_new(many, -1, err, sizeof err));
}

/* The reference: where the first stop completes in the whole text (longest on a tie), by brute
 * force. Returns the length of the text to emit, and *hit. */
static size_t ref_stop(const char *text, const char *const *stops, int n, int *hit)
{
    size_t len = strlen(text);
    for (size_t end = 1; end <= len; end++) {
        size_t best = 0;
        for (int j = 0; j < n; j++) {
            size_t sl = strlen(stops[j]);
            if (sl <= end && memcmp(text + end - sl, stops[j], sl) == 0 && sl > best) best = sl;
        }
        if (best) {
            *hit = 1;
            return end - best;
        }
    }
    *hit = 0;
    return len;
}

TEST(stop_any_split_matches_reference)
{
    /* Small alphabets make partial and overlapping matches frequent. */
    static const char *alpha[] = {"a", "b", "é", "€"};
    const char *stops[] = {"aab", "ba", "é€a", "€€€", "abababb"};
    model_rng g;
    model_rng_seed(&g, 5);
    for (int trial = 0; trial < 400; trial++) {
        char text[512] = "";
        size_t tl = 0;
        int chars = 1 + (int)(model_rng_next(&g) % 40);
        size_t offs[64];
        for (int c = 0; c < chars; c++) {
            const char *ch = alpha[model_rng_next(&g) % 4];
            offs[c] = tl;
            memcpy(text + tl, ch, strlen(ch));
            tl += strlen(ch);
        }
        text[tl] = '\0';
        int n_stops = 1 + (int)(model_rng_next(&g) % 5);
        int hit_ref;
        size_t want = ref_stop(text, stops, n_stops, &hit_ref);

        /* Split at random character boundaries. */
        model_stop *s = mk(stops, n_stops);
        REQUIRE(s);
        run r = {0};
        int c = 0;
        while (c < chars) {
            int take = 1 + (int)(model_rng_next(&g) % 6);
            if (c + take > chars) take = chars - c;
            size_t a = offs[c], b = c + take < chars ? offs[c + take] : tl;
            char piece[512];
            memcpy(piece, text + a, b - a);
            piece[b - a] = '\0';
            feed(s, &r, piece);
            c += take;
        }
        if (!r.hit) flush(s, &r);
        CHECK_MSG(r.n == want && memcmp(r.out, text, want) == 0 && !!r.hit == hit_ref,
                  "text \"%s\": emitted \"%s\" (hit %d), want %zu bytes (hit %d)", text, r.out,
                  r.hit, want, hit_ref);
        CHECK_EQ(r.split_char, 0);
        model_stop_free(s);
        if (t_failed()) return;
    }
}

TEST(stop_long_text_linear)
{
    /* A 255-byte run of 'a' before 'b' against a megabyte of 'a': KMP never rescans, and the
     * held-back text is exactly the 255 bytes that could still start the stop. */
    char stop[257];
    memset(stop, 'a', 255);
    stop[255] = 'b';
    stop[256] = '\0';
    const char *stops[] = {stop};
    model_stop *s = mk(stops, 1);
    REQUIRE(s);
    enum { CHUNK = 4096, N = 256 };
    static char chunk[CHUNK];
    memset(chunk, 'a', CHUNK);
    size_t total = 0, n;
    int hit = 0;
    for (int i = 0; i < N; i++) {
        const char *o = model_stop_push(s, chunk, CHUNK, &n, &hit);
        REQUIRE(o && !hit);
        total += n;
    }
    CHECK_EQ(total, (size_t)CHUNK * N - 255);
    const char *o = model_stop_push(s, "b", 1, &n, &hit);
    CHECK(o && hit && n == 0);
    model_stop_free(s);
}
