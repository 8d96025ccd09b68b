/* daemon/http_cors.h — CORS for the API listener (the Fetch standard's CORS protocol), opt-in.
 *
 * A browser lets a page read a response from another origin only when the response names that
 * origin (Access-Control-Allow-Origin). Before a request that is not "simple" — a POST of JSON, or
 * any request with an Authorization header, i.e. every API call — it first sends a preflight:
 * OPTIONS with Origin, Access-Control-Request-Method and Access-Control-Request-Headers, and no
 * Authorization; the real request follows only when the answer allows that method and those
 * headers.
 *
 * The operator lists the origins (cors_origins, daemon/config.h): "" (the default) sends no CORS
 * header at all, so no page of another origin can read the API; "*" lets any origin read it; else
 * a comma list of scheme://host[:port] origins, checked at load. With a list, an allowed origin is
 * echoed back and every response carries Vary: Origin (a cache must not hand one origin's answer
 * to another); with "*" every response carries "*" and no Vary (the Fetch standard's advice for a
 * static value).
 *
 * A request from an origin not listed is served exactly as with cors_origins empty: no
 * Access-Control-* header and no error (the browser keeps the response from the page).
 * Access-Control-Allow-Credentials is never sent: the API key travels in an Authorization header
 * that the page's script sets itself, which needs no credentials mode, and the API sets no
 * cookies. The admin listener has no CORS (it is not for browsers).
 *
 * Threads: the functions that take a dmn_http_req are the HTTP layer's (loop thread); the others
 * are pure functions over strings (any thread). */
#ifndef TANDEM_DMN_HTTP_CORS_H
#define TANDEM_DMN_HTTP_CORS_H
#include "daemon/http.h"
#include <stddef.h>

/* Bounds on cors_origins, checked at load (daemon/config.c): an operator's list, not a
 * registry; each origin is echoed in a header, so its length bounds that header too. 253 is
 * the longest DNS name, plus a scheme and a port. */
#define DMN_CORS_MAX_ORIGINS 16
#define DMN_CORS_ORIGIN_MAX  280
/* How long a browser may reuse a preflight's answer (seconds). 600 is Starlette's default (vLLM's
 * --allowed-origins); Chromium caps any value at 7200, Firefox at 86400. */
#define DMN_CORS_MAX_AGE 600
/* Header names echoed from one Access-Control-Request-Headers, and their bytes: a browser lists
 * what the page sets (the OpenAI JavaScript client sends ~10 x-stainless-* names); past either
 * bound only the base list is allowed. */
#define DMN_CORS_REQ_HEADERS_MAX   32
#define DMN_CORS_REQ_HEADERS_BYTES 1024
/* What every preflight allows, whatever the browser asked: the API's own request headers. */
#define DMN_CORS_BASE_HEADERS "Authorization, Content-Type"
/* Response headers a page may read beyond the CORS-safelisted ones (Content-Type and the like):
 * the request's id, where it ran, and how long to wait after a 429 or 503. */
#define DMN_CORS_EXPOSE "x-request-id, x-tandem-devices, Retry-After"

/* The Access-Control-Allow-Origin value for a request whose Origin header is origin (NULL when it
 * has none) under the list origins: "*" for "*", origin itself when the list names it (scheme
 * and host compared case-insensitively, as browsers serialize them in lower case), else NULL.
 * The returned pointer is a static "*" or origin. */
const char *dmn_http_cors_allow_origin(const char *origins, const char *origin);

/* The Access-Control-Allow-Headers value of a preflight that asked for requested (the
 * Access-Control-Request-Headers value, NULL when absent): DMN_CORS_BASE_HEADERS, then each
 * requested name not already there, when every requested name is an HTTP token (RFC 9110 §5.6.2)
 * and the list is within DMN_CORS_REQ_HEADERS_MAX / _BYTES; otherwise the base list alone. Writes
 * a NUL-terminated string into out (n >= 64 + DMN_CORS_REQ_HEADERS_BYTES always fits). Returns 1
 * when the requested names were taken, 0 when only the base list was. */
int dmn_http_cors_allow_headers(const char *requested, char *out, size_t n);

/* Whether a response header is one of the CORS ones this module adds (Access-Control-*, Vary):
 * the listener copies those onto an error it writes itself for a request a handler saw (a body
 * too large, a body too slow), so the page can read that error too. */
int dmn_http_cors_header(const char *name);

/* Adds the headers every response to r carries under origins (nothing when origins is ""):
 * the listener's, for every request whose head it parsed (dmn_http_handler.cors_origins), before
 * the handler sees it. Loop thread. */
void dmn_http_cors_add(dmn_http_req *r, const char *origins);

/* The handler's: answers r when it is a preflight under origins: OPTIONS with an Origin the list
 * allows and an Access-Control-Request-Method, on a route whose methods are `methods` ("POST",
 * "GET, HEAD"; NULL for no route). The answer is 204 with the allow headers beside those the
 * listener added (dmn_http_cors_add); it needs no API key (a preflight carries none). Returns 1
 * when it answered, 0 when r is not such a preflight (the caller serves it as any request).
 * Loop thread. */
int dmn_http_cors_preflight(dmn_http_req *r, const char *origins, const char *methods);

#endif
