/* daemon/http_parse.c — HTTP/1.1 request heads and chunked bodies (see http_parse.h). */
#include "daemon/http_parse.h"
#include <string.h>
#include <strings.h>

/* RFC 9110 §5.6.2 tchar */
static int is_tchar(unsigned char c)
{
    if (c >= '0' && c <= '9') return 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-value bytes: VCHAR, SP, HTAB, obs-text; never CTLs (NUL, CR, LF among them) */
static int is_vchar(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

long dmn_http_head_end(const char *buf, size_t len)
{
    size_t i = 0;
    /* skip leading empty lines (a client may send a CRLF after a body) */
    while (i + 1 < len && buf[i] == '\r' && buf[i + 1] == '\n') i += 2;
    for (; i < len; i++) {
        if (buf[i] != '\n') continue;
        if (i == 0 || buf[i - 1] != '\r') return -1; /* bare LF */
        if (i >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r') return (long)(i + 1);
    }
    return 0;
}

/* "a, b ,c": is token t (case-insensitive) one of the comma-separated list items? */
static int list_has(const char *v, const char *t)
{
    size_t tl = strlen(t);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *s = v;
        while (*v && *v != ',') v++;
        const char *e = v;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
        if ((size_t)(e - s) == tl && !strncasecmp(s, t, tl)) return 1;
    }
    return 0;
}

const char *dmn_http_head_get(const dmn_http_head *h, const char *name)
{
    for (int i = 0; i < h->n_hdrs; i++)
        if (!strcasecmp(h->name[i], name)) return h->value[i];
    return NULL;
}

#define REFUSE(st, msg)                                                                            \
    do {                                                                                           \
        *why = (msg);                                                                              \
        return (st);                                                                               \
    } while (0)

static int parse_request_line(char *p, char *end, dmn_http_head *h, const char **why)
{
    /* method SP request-target SP HTTP-version */
    char *s = p;
    while (p < end && is_tchar((unsigned char)*p)) p++;
    if (p == s || p - s > 15 || p >= end || *p != ' ') REFUSE(400, "malformed request line (method)");
    *p++ = 0;
    h->method = s;
    s = p;
    while (p < end && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f) p++;
    if (p - s > DMN_HTTP_MAX_TARGET) REFUSE(414, "the request target is too long");
    if (p == s || p >= end || *p != ' ') REFUSE(400, "malformed request line (target)");
    *p++ = 0;
    h->target = s;
    if (s[0] != '/') REFUSE(400, "the request target must be an absolute path (origin-form)");
    if (end - p != 8 || strncmp(p, "HTTP/", 5) != 0 || p[6] != '.' || p[5] < '0' || p[5] > '9' ||
        p[7] < '0' || p[7] > '9')
        REFUSE(400, "malformed request line (version)");
    if (p[5] != '1' || (p[7] != '0' && p[7] != '1')) REFUSE(505, "only HTTP/1.0 and HTTP/1.1 are served");
    h->minor = p[7] - '0';
    *end = 0;
    return 0;
}

int dmn_http_parse_head(char *buf, size_t len, unsigned long long max_body, dmn_http_head *h,
                        const char **why)
{
    memset(h, 0, sizeof *h);
    h->content_length = -1;
    *why = "";
    char *p = buf, *end = buf + len;
    while (end - p >= 2 && p[0] == '\r' && p[1] == '\n') p += 2;
    char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol || eol == p || eol[-1] != '\r') REFUSE(400, "malformed request line");
    int st = parse_request_line(p, eol - 1, h, why);
    if (st) return st;
    p = eol + 1;
    int n_cl = 0, n_host = 0, has_te = 0;
    for (;;) {
        eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol || eol == p || eol[-1] != '\r') REFUSE(400, "malformed header line");
        char *le = eol - 1; /* the CR */
        if (le == p) { /* the empty line: end of the head */
            p = eol + 1;
            break;
        }
        if (*p == ' ' || *p == '\t') REFUSE(400, "folded header lines (obs-fold) are not accepted");
        if (h->n_hdrs == DMN_HTTP_MAX_HEADERS) REFUSE(431, "too many header fields");
        char *s = p;
        while (p < le && is_tchar((unsigned char)*p)) p++;
        if (p == s || p >= le || *p != ':') REFUSE(400, "malformed header field name");
        *p++ = 0;
        while (p < le && (*p == ' ' || *p == '\t')) p++;
        char *v = p;
        for (; p < le; p++)
            if (!is_vchar((unsigned char)*p)) REFUSE(400, "a control character in a header value");
        char *ve = le;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        *ve = 0;
        h->name[h->n_hdrs] = s;
        h->value[h->n_hdrs] = v;
        h->n_hdrs++;
        p = eol + 1;

        if (!strcasecmp(s, "Content-Length")) {
            if (!*v) REFUSE(400, "an empty Content-Length");
            unsigned long long cl = 0;
            for (const char *q = v; *q; q++) {
                if (*q < '0' || *q > '9') REFUSE(400, "Content-Length is not a number");
                if (cl > 99999999999999999ULL) REFUSE(413, "the request body is larger than this server accepts");
                cl = cl * 10 + (unsigned)(*q - '0');
            }
            if (n_cl++ && (unsigned long long)h->content_length != cl)
                REFUSE(400, "conflicting Content-Length headers");
            h->content_length = (long long)cl;
        } else if (!strcasecmp(s, "Transfer-Encoding")) {
            if (has_te++) REFUSE(400, "more than one Transfer-Encoding header");
            if (strcasecmp(v, "chunked") != 0) REFUSE(501, "only the chunked transfer coding is accepted");
            h->chunked = 1;
        } else if (!strcasecmp(s, "Host")) {
            n_host++;
        } else if (!strcasecmp(s, "Expect")) {
            if (!strcasecmp(v, "100-continue")) h->expect_continue = 1;
        }
    }
    if (p != end) REFUSE(400, "bytes after the end of the head");
    if (n_cl && has_te) REFUSE(400, "conflicting Content-Length / Transfer-Encoding headers");
    if (has_te && h->minor == 0) REFUSE(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (h->minor == 1 && n_host != 1) REFUSE(400, "an HTTP/1.1 request needs exactly one Host header");
    if (n_cl && (unsigned long long)h->content_length > max_body)
        REFUSE(413, "the request body is larger than this server accepts");
    const char *conn = dmn_http_head_get(h, "Connection");
    h->keep_alive = h->minor == 1 ? !(conn && list_has(conn, "close")) : (conn && list_has(conn, "keep-alive"));
    return 0;
}

/* ---------------------------------------------------------------- chunked bodies */

enum { CK_SIZE, CK_EXT, CK_SIZE_LF, CK_DATA, CK_DATA_CR, CK_DATA_LF, CK_TRAILER, CK_TRAILER_LF, CK_DONE };

/* A chunk-size line (size + extensions) and each trailer line are bounded: extensions are not
 * used by any client we serve, trailers are ignored. */
#define CK_LINE_MAX 1024
#define CK_TRAILER_MAX 8192

int dmn_http_chunked_feed(dmn_http_chunked *c, const char *in, size_t n, size_t *used,
                          unsigned long long *total, unsigned long long max_body,
                          void (*emit)(void *ctx, const char *data, size_t len), void *ctx,
                          const char **why)
{
    size_t i = 0;
    *why = "";
    while (i < n) {
        unsigned char ch = (unsigned char)in[i];
        switch (c->state) {
        case CK_SIZE:
            if ((ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')) {
                if (c->digits == 15) goto bad; /* past any body we would take */
                int d = ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
                c->left = c->left * 16 + (unsigned)d;
                c->digits++;
                i++;
                break;
            }
            if (!c->digits) goto bad;
            if (ch == '\r') {
                c->state = CK_SIZE_LF;
                i++;
            } else if (ch == ';' || ch == ' ' || ch == '\t') {
                c->state = CK_EXT;
                c->line = 0;
            } else {
                goto bad;
            }
            break;
        case CK_EXT:
            if (ch == '\r') {
                c->state = CK_SIZE_LF;
            } else if (ch == '\n' || ++c->line > CK_LINE_MAX) {
                goto bad;
            }
            i++;
            break;
        case CK_SIZE_LF:
            if (ch != '\n') goto bad;
            i++;
            if (c->left == 0) {
                c->state = CK_TRAILER;
                c->line = 0;
            } else {
                if (*total + c->left > max_body) {
                    *used = i;
                    *why = "the request body is larger than this server accepts";
                    return 413;
                }
                c->state = CK_DATA;
            }
            break;
        case CK_DATA: {
            size_t k = n - i;
            if (k > c->left) k = (size_t)c->left;
            emit(ctx, in + i, k);
            *total += k;
            c->left -= k;
            i += k;
            if (!c->left) c->state = CK_DATA_CR;
            break;
        }
        case CK_DATA_CR:
            if (ch != '\r') goto bad;
            c->state = CK_DATA_LF;
            i++;
            break;
        case CK_DATA_LF:
            if (ch != '\n') goto bad;
            c->state = CK_SIZE;
            c->digits = 0;
            c->left = 0;
            i++;
            break;
        case CK_TRAILER:
            /* trailer fields are read and dropped; an empty line ends the body */
            if (ch == '\r') {
                c->state = CK_TRAILER_LF;
            } else if (ch == '\n' || ++c->line > CK_LINE_MAX || ++c->trailer > CK_TRAILER_MAX) {
                goto bad;
            }
            i++;
            break;
        case CK_TRAILER_LF:
            if (ch != '\n') goto bad;
            i++;
            if (c->line == 0) {
                c->state = CK_DONE;
                *used = i;
                return 1;
            }
            c->line = 0;
            c->state = CK_TRAILER;
            break;
        default:
            *used = i;
            return 1;
        }
    }
    *used = i;
    return c->state == CK_DONE;
bad:
    *used = i;
    *why = "malformed chunked encoding";
    return 400;
}

const char *dmn_http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}
