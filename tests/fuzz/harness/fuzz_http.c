/* tests/fuzz/harness/fuzz_http.c — libFuzzer harness for the HTTP/1.1 request framing
 * (daemon/http_parse.c), the first parser every byte from a client meets.
 *
 * Input: byte 0 configures the run, the rest is what a client sends on one connection.
 *   bits 0-2  the piece size the chunked body arrives in: all at once, 1, 2, 3, 7, 16, 64, 512
 *   bits 3-4  max_body: 0, 16, 1000, 1 MiB
 * The bytes are framed as daemon/http.c does: heads found with dmn_http_head_end, parsed in place
 * with dmn_http_parse_head, a Content-Length body skipped, a chunked one decoded; then the next
 * request on the same connection, until the bytes run out or a refusal. Every promise of the
 * header is checked: statuses are the documented ones, strings lie inside the head and hold no
 * CR/LF/NUL, the framing fields agree with the headers, the decoder never emits more than
 * max_body nor consumes more than it was given. */
#include "daemon/http_parse.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const size_t pieces[8] = {0, 1, 2, 3, 7, 16, 64, 512};
static const unsigned long long bodies[4] = {0, 16, 1000, 1 << 20};

static unsigned long long emitted;
static volatile unsigned sink; /* keeps the reads of every emitted byte alive */
static void emit(void *ctx, const char *d, size_t n)
{
    for (size_t i = 0; i < n; i++) sink += (unsigned char)d[i]; /* every byte is readable */
    emitted += n;
}

static int in_head(const char *s, const char *buf, size_t len)
{
    return s >= buf && s < buf + len && strlen(s) < len;
}

static int clean(const char *s)
{
    return strpbrk(s, "\r\n") == NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t piece = pieces[data[0] & 7];
    unsigned long long max_body = bodies[(data[0] >> 3) & 3];
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    for (int req = 0; req < 64 && n; req++) {
        long e = dmn_http_head_end(p, n);
        CHECK(e >= -1 && e <= (long)n);
        if (e <= 0) return 0;
        char *buf = malloc((size_t)e + 1);
        memcpy(buf, p, (size_t)e);
        buf[e] = 0;
        dmn_http_head h;
        const char *why = NULL;
        int st = dmn_http_parse_head(buf, (size_t)e, max_body, &h, &why);
        CHECK(why != NULL);
        if (st) {
            CHECK(st == 400 || st == 413 || st == 414 || st == 431 || st == 501 || st == 505);
            CHECK(*why);
            free(buf);
            return 0;
        }
        CHECK(in_head(h.method, buf, (size_t)e) && clean(h.method) && *h.method);
        CHECK(in_head(h.target, buf, (size_t)e) && clean(h.target) && h.target[0] == '/');
        CHECK(h.minor == 0 || h.minor == 1);
        CHECK(h.n_hdrs >= 0 && h.n_hdrs <= DMN_HTTP_MAX_HEADERS);
        for (int i = 0; i < h.n_hdrs; i++) {
            CHECK(in_head(h.name[i], buf, (size_t)e) && clean(h.name[i]) && *h.name[i]);
            CHECK(in_head(h.value[i], buf, (size_t)e) && clean(h.value[i]));
            CHECK(!strchr(h.name[i], ':') && !strchr(h.name[i], ' '));
        }
        CHECK(!(h.chunked && h.content_length >= 0));
        CHECK(h.content_length < 0 || (unsigned long long)h.content_length <= max_body);
        CHECK(!h.chunked || (dmn_http_head_get(&h, "Transfer-Encoding") && h.minor == 1));
        CHECK(h.minor == 0 || dmn_http_head_get(&h, "Host"));
        p += e;
        n -= (size_t)e;
        if (h.content_length > 0) {
            size_t k = (size_t)h.content_length < n ? (size_t)h.content_length : n;
            p += k;
            n -= k;
        } else if (h.chunked) {
            dmn_http_chunked c = {0};
            unsigned long long total = 0;
            emitted = 0;
            int done = 0;
            while (!done && n) {
                size_t give = piece && piece < n ? piece : n, used = 0;
                done = dmn_http_chunked_feed(&c, p, give, &used, &total, max_body, emit, NULL, &why);
                CHECK(used <= give);
                CHECK(emitted == total && total <= max_body);
                p += used;
                n -= used;
                if (done > 1) {
                    CHECK(done == 400 || done == 413);
                    free(buf);
                    return 0;
                }
                if (!done) CHECK(used == give); /* wanting more means everything was taken */
            }
            if (!done) {
                free(buf);
                return 0;
            }
        }
        free(buf);
        if (!h.keep_alive) return 0;
    }
    return 0;
}
