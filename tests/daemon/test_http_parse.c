/* Tests for daemon/http_parse.c: request heads and chunked bodies, accepted and refused. The
 * refusals are the request-smuggling vectors of RFC 9112 §11.2 and the inputs the hardening
 * review sent (Content-Length abc / -1 / 20 digits). */
#include "tests/test.h"
#include "daemon/http_parse.h"
#include <stdlib.h>
#include <string.h>

static int parse(const char *text, unsigned long long max_body, dmn_http_head *h, const char **why)
{
    static char buf[8192];
    size_t n = strlen(text);
    memcpy(buf, text, n + 1);
    long e = dmn_http_head_end(buf, n);
    if (e <= 0) return e == 0 ? -2 : -1;
    return dmn_http_parse_head(buf, (size_t)e, max_body, h, why);
}

TEST(http_parse_accepts)
{
    dmn_http_head h;
    const char *why;
    CHECK_EQ(parse("POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n"
                   "X-Thing:   spaced value  \r\nConnection: keep-alive, Upgrade\r\n\r\n",
                   100, &h, &why),
             0);
    CHECK_STR(h.method, "POST");
    CHECK_STR(h.target, "/v1/completions?x=1");
    CHECK_EQ(h.minor, 1);
    CHECK_EQ(h.content_length, 12);
    CHECK_EQ(h.keep_alive, 1);
    CHECK_STR(dmn_http_head_get(&h, "x-thing"), "spaced value");
    /* leading empty lines are skipped; HTTP/1.0 closes unless it asks for keep-alive */
    CHECK_EQ(parse("\r\n\r\nGET /health HTTP/1.0\r\n\r\n", 0, &h, &why), 0);
    CHECK_EQ(h.keep_alive, 0);
    CHECK_EQ(h.content_length, -1);
    CHECK_EQ(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0, &h, &why), 0);
    CHECK_EQ(h.keep_alive, 1);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 0, &h, &why), 0);
    CHECK_EQ(h.keep_alive, 0);
    CHECK_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\nExpect: 100-continue\r\n\r\n", 0, &h, &why), 0);
    CHECK_EQ(h.chunked, 1);
    CHECK_EQ(h.expect_continue, 1);
    /* the same Content-Length twice is one length (RFC 9112 §6.3) */
    CHECK_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 10, &h, &why), 0);
    /* incomplete heads are not errors */
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n", 0, &h, &why), -2);
}

TEST(http_parse_refuses)
{
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},               /* space before the colon */
        {"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400},     /* obs-fold */
        {"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", 400},   /* a control byte */
        {"GET / HTTP/1.1\r\n\r\n", 400},                            /* no Host */
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
        {"GET / HTTP/1.7\r\nHost: x\r\n\r\n", 505},
        {"GET / HTTQ/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400},
        {"GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dmn_http_head h;
        const char *why = NULL;
        int st = parse(cases[i].head, 100, &h, &why);
        CHECK_MSG(st == cases[i].status, "case %zu: got %d want %d (%s)", i, st, cases[i].status, why ? why : "");
        CHECK(why && *why);
    }
    /* a bare LF is found before the head is parsed */
    CHECK_EQ(dmn_http_head_end("GET / HTTP/1.1\nHost: x\n\n", 24), -1);
    /* 101 header fields: 431 */
    static char big[8192];
    size_t o = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < DMN_HTTP_MAX_HEADERS; i++) o += (size_t)sprintf(big + o, "X-%d: y\r\n", i);
    sprintf(big + o, "\r\n");
    dmn_http_head h;
    const char *why;
    CHECK_EQ(parse(big, 0, &h, &why), 431);
}

static void collect(void *ctx, const char *d, size_t n)
{
    strncat((char *)ctx, d, n);
}

/* feeds s one byte at a time (the worst split), returns the status */
static int chunked(const char *s, char *out, unsigned long long max, size_t *rest)
{
    dmn_http_chunked c = {0};
    unsigned long long total = 0;
    out[0] = 0;
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        size_t used;
        const char *why;
        int st = dmn_http_chunked_feed(&c, s + i, 1, &used, &total, max, collect, out, &why);
        if (st) {
            *rest = n - i - used;
            return st;
        }
    }
    *rest = 0;
    return 0;
}

TEST(http_parse_chunked)
{
    char out[256];
    size_t rest;
    CHECK_EQ(chunked("5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\nNEXT", out, 100, &rest), 1);
    CHECK_STR(out, "hello, world");
    CHECK_EQ(rest, 4); /* "NEXT" belongs to the next request */
    /* whole-buffer feeding gives the same */
    dmn_http_chunked c = {0};
    unsigned long long total = 0;
    size_t used;
    const char *why;
    const char *s = "A\r\n0123456789\r\n0\r\n\r\n";
    out[0] = 0;
    CHECK_EQ(dmn_http_chunked_feed(&c, s, strlen(s), &used, &total, 100, collect, out, &why), 1);
    CHECK_EQ(used, strlen(s));
    CHECK_STR(out, "0123456789");
    /* refusals */
    CHECK_EQ(chunked("zz\r\nabc\r\n", out, 100, &rest), 400);
    CHECK_EQ(chunked("5\r\nhelloX\r\n", out, 100, &rest), 400);
    CHECK_EQ(chunked("5\nhello\r\n", out, 100, &rest), 400);
    CHECK_EQ(chunked("\r\n", out, 100, &rest), 400);
    CHECK_EQ(chunked("ffffffffffffffffff\r\n", out, 1ULL << 40, &rest), 400);
    CHECK_EQ(chunked("65\r\n", out, 100, &rest), 413); /* 101 bytes against 100 */
    CHECK_EQ(chunked("40\r\n", out, 100, &rest), 0);   /* 64: fine so far */
}
