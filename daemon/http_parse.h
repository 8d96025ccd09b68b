/* daemon/http_parse.h — HTTP/1.1 request framing: the request head and chunked bodies.
 *
 * Pure functions over bytes, no I/O: daemon/http.c feeds them what the socket delivered, and
 * tests/fuzz/ feeds them anything. Strict where leniency lets a request be read two ways by two
 * parsers (request smuggling through a proxy in front of us, RFC 9112 §6.3 and §11.2): a header
 * folded over lines, whitespace before a header's colon, a bare LF, a Content-Length that is not
 * all digits, two different Content-Lengths, Content-Length with Transfer-Encoding, and any
 * transfer coding other than a lone "chunked" are all refused, never guessed at.
 *
 * Every refusal carries the HTTP status and a one-line reason, which http.c turns into an
 * OpenAI-style JSON error (proto/errors.h): no error a client sees is written by anyone else.
 *
 * Threads: any; the structs belong to their caller. */
#ifndef TANDEM_DMN_HTTP_PARSE_H
#define TANDEM_DMN_HTTP_PARSE_H
#include <stddef.h>
#include <stdint.h>

/* More header lines than any client sends (curl sends 3-6, browsers ~20; nginx's own buffers fit
 * ~100 typical lines): past this the head is refused with 431 whatever its size. */
#define DMN_HTTP_MAX_HEADERS 100
/* A request target longer than this gets 414 (nginx's large_client_header_buffers is 8 KiB per
 * line; our routes are short paths). */
#define DMN_HTTP_MAX_TARGET 8192

typedef struct dmn_http_head {
    /* All strings point into the caller's buffer, NUL-terminated in place. */
    char *method;
    char *target; /* origin-form: starts with '/' */
    int minor;    /* HTTP/1.minor: 0 or 1 */
    int n_hdrs;
    char *name[DMN_HTTP_MAX_HEADERS];
    char *value[DMN_HTTP_MAX_HEADERS]; /* without leading/trailing whitespace */
    /* framing, derived from the headers */
    long long content_length; /* -1: none */
    int chunked;
    int keep_alive;      /* the connection may carry another request after this one */
    int expect_continue; /* Expect: 100-continue */
} dmn_http_head;

/* Where the head ends: the offset just past its terminating empty line (CRLF CRLF), 0 when
 * buf[0..len) does not hold a whole head yet, or -1 when it cannot be a valid head (a bare LF
 * line end). Leading empty lines (RFC 9112 §2.2 lets a server skip them) are part of the head. */
long dmn_http_head_end(const char *buf, size_t len);

/* Parses buf[0..len) (a whole head as found by dmn_http_head_end), in place. max_body bounds
 * Content-Length. Returns 0, or the HTTP status to refuse the request with (400, 413, 414, 431,
 * 501, 505) and *why a static one-line reason. */
int dmn_http_parse_head(char *buf, size_t len, unsigned long long max_body, dmn_http_head *h,
                        const char **why);

/* The first value of header name (case-insensitive), or NULL. */
const char *dmn_http_head_get(const dmn_http_head *h, const char *name);

/* Chunked transfer coding (RFC 9112 §7.1), decoded incrementally. */
typedef struct dmn_http_chunked {
    int state;
    unsigned long long left; /* data bytes left in this chunk */
    size_t line;             /* bytes of the current size/extension/trailer line */
    size_t trailer;          /* bytes of trailer fields so far */
    int digits;
} dmn_http_chunked;

/* Feeds in[0..n): appends decoded data through emit(ctx, data, len), never more than max_body
 * bytes in total (total: decoded so far, kept by the caller). Sets *used to the bytes consumed.
 * Returns 1 when the body ended (bytes after it belong to the next request), 0 when more is
 * needed, or a refusal status (400 malformed, 413 over max_body) with *why. */
int dmn_http_chunked_feed(dmn_http_chunked *c, const char *in, size_t n, size_t *used,
                          unsigned long long *total, unsigned long long max_body,
                          void (*emit)(void *ctx, const char *data, size_t len), void *ctx,
                          const char **why);

/* The reason phrase of a status ("Bad Request"), "Unknown" for codes we never send. */
const char *dmn_http_reason(int status);

#endif
