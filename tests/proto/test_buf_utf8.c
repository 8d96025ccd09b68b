/* The project's one growable buffer (proto/buf.h) and one UTF-8 helper (proto/utf8.h): the
 * contracts their users rely on. Expected replacements follow the Unicode standard's "maximal
 * subpart" practice (3.9, D93b; what Python's errors="replace" produces). */
#include "proto/buf.h"
#include "proto/utf8.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>

TEST(proto_buf_appends_and_takes)
{
    proto_buf b;
    proto_buf_init(&b);
    CHECK_EQ(proto_buf_add(&b, "", 0), 0); /* an empty append still leaves a string */
    REQUIRE(b.p);
    CHECK_STR(b.p, "");
    CHECK_EQ(proto_buf_str(&b, "ab"), 0);
    CHECK_EQ(proto_buf_putc(&b, 'c'), 0);
    CHECK_EQ(proto_buf_printf(&b, "%d-%s", 42, "x"), 0);
    char big[600];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK_EQ(proto_buf_printf(&b, "%s", big), 0); /* past printf's small scratch */
    CHECK_EQ(b.len, 7 + sizeof big - 1);
    CHECK(!strncmp(b.p, "abc42-x", 7) && b.p[b.len] == 0);
    /* stream use: consume from the front, take the rest */
    proto_buf_consume(&b, 3);
    CHECK_EQ(proto_buf_pending(&b), b.len - 3);
    char *s = proto_buf_take(&b);
    REQUIRE(s);
    CHECK(!strncmp(s, "42-x", 4));
    CHECK(b.p == NULL && b.len == 0);
    free(s);
    s = proto_buf_take(&b); /* an empty buffer hands over "" */
    REQUIRE(s);
    CHECK_STR(s, "");
    free(s);
}

TEST(proto_buf_bound_and_sticky_failure)
{
    proto_buf b = {.max = 5};
    CHECK_EQ(proto_buf_add(&b, "abcde", 5), 0); /* exactly the bound */
    CHECK_EQ(proto_buf_putc(&b, 'f'), -1);      /* one past it */
    CHECK(b.oom);
    CHECK_EQ(b.len, 5);
    CHECK_STR(b.p, "abcde"); /* a failed append leaves the buffer as it was */
    b.len = 0;
    CHECK_EQ(proto_buf_add(&b, "a", 1), -1); /* sticky: the owner checks oom once */
    CHECK(proto_buf_take(&b) == NULL);       /* and take refuses, freeing */
    CHECK(b.p == NULL);

    proto_buf c = {.max = 8};
    CHECK_EQ(proto_buf_reserve(&c, 8), 0);
    memcpy(c.p, "12345678", 8); /* reserve: the caller writes in place */
    c.len = 8;
    c.p[8] = 0;
    CHECK_EQ(proto_buf_reserve(&c, 1), -1);
    CHECK_EQ(proto_buf_printf(&c, "x"), -1);
    CHECK_STR(c.p, "12345678");
    proto_buf_deinit(&c);
    CHECK(c.p == NULL && !c.oom);
}

TEST(proto_utf8_scan_maximal_subparts)
{
    size_t len;
    uint32_t cp;
    const unsigned char *u;
#define SCAN(bytes, n) (u = (const unsigned char *)(bytes), proto_utf8_scan(u, (n), &len, &cp))
    CHECK_EQ(SCAN("A", 1), PROTO_UTF8_OK);
    CHECK(len == 1 && cp == 'A');
    CHECK_EQ(SCAN("\xF0\x9F\x9A\x80", 4), PROTO_UTF8_OK); /* U+1F680 */
    CHECK(len == 4 && cp == 0x1F680);
    CHECK_EQ(SCAN("\xE2\x82", 2), PROTO_UTF8_SHORT); /* a valid but unfinished prefix */
    CHECK_EQ(len, 2);
    CHECK_EQ(SCAN("\xE2\x82z", 3), PROTO_UTF8_BAD); /* cut off by 'z': one subpart of 2 */
    CHECK_EQ(len, 2);
    CHECK_EQ(SCAN("\xC0\xAF", 2), PROTO_UTF8_BAD); /* overlong lead: alone */
    CHECK_EQ(len, 1);
    CHECK_EQ(SCAN("\xED\xA0\x80", 3), PROTO_UTF8_BAD); /* surrogate: the lead alone */
    CHECK_EQ(len, 1);
    CHECK_EQ(SCAN("\xF4\x90\x80\x80", 4), PROTO_UTF8_BAD); /* above U+10FFFF */
    CHECK_EQ(len, 1);
    CHECK_EQ(SCAN("\x80", 1), PROTO_UTF8_BAD);
    CHECK_EQ(proto_utf8_seq_len((const unsigned char *)"\xC3\xA9", 2), 2);
    CHECK_EQ(proto_utf8_seq_len((const unsigned char *)"\xC3", 1), 0);
    CHECK_EQ(proto_utf8_valid_len("abcdefghij\xC3\xA9k\xFFz", 14), 13);
#undef SCAN
}

TEST(proto_utf8_decode_encode_walk)
{
    const char *s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x9A\x80"; /* a é € 🚀 */
    size_t n = strlen(s), i = 0;
    uint32_t want[] = {'a', 0xE9, 0x20AC, 0x1F680};
    for (int k = 0; k < 4; k++) CHECK_EQ(proto_utf8_next(s, n, &i), want[k]);
    CHECK_EQ(i, n);
    CHECK_EQ(proto_utf8_prev(s, n), 6);
    CHECK_EQ(proto_utf8_prev(s, 6), 3);
    CHECK_EQ(proto_utf8_prev(s, 1), 0);
    CHECK_EQ(proto_utf8_count(s, n), 4);
    CHECK_EQ(proto_utf8_offset(s, n, 2), 3);
    CHECK_EQ(proto_utf8_offset(s, n, 9), n);
    char out[4];
    for (int k = 0; k < 4; k++) {
        char enc[4];
        size_t m = proto_utf8_put(enc, want[k]), j = 0;
        CHECK_EQ(proto_utf8_next(enc, m, &j), want[k]);
        CHECK_EQ(j, m);
    }
    CHECK_EQ(proto_utf8_put(out, 0x10FFFF), 4);
    /* an invalid sequence decodes as U+FFFD over its maximal subpart */
    const char *bad = "\xE2\x82z";
    i = 0;
    CHECK_EQ(proto_utf8_next(bad, 3, &i), 0xFFFD);
    CHECK_EQ(i, 2);
    CHECK_EQ(proto_utf8_next(bad, 3, &i), 'z');
}

TEST(proto_utf8_lossy_and_sanitize)
{
    /* lossy: one U+FFFD per maximal subpart, a trailing unfinished sequence included */
    proto_buf b = {0};
    CHECK_EQ(proto_utf8_lossy(&b, "a\xE2\x82z\xC0\xAF\xF0\x9F", 8), 0);
    CHECK_STR(b.p, "a" PROTO_UTF8_FFFD "z" PROTO_UTF8_FFFD PROTO_UTF8_FFFD PROTO_UTF8_FFFD);
    proto_buf_deinit(&b);
    /* sanitize: one U+FFFD per invalid byte (for JSON text) */
    size_t n;
    char *s = proto_utf8_sanitize("a\xE2\x82z", 4, &n);
    REQUIRE(s);
    CHECK_STR(s, "a" PROTO_UTF8_FFFD PROTO_UTF8_FFFD "z");
    CHECK_EQ(n, 8);
    free(s);
}
