/* daemon/http_cors.c — CORS for the API listener (see http_cors.h). */
#include "daemon/http_cors.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The next element of a comma list from *p: its start and length with the spaces and tabs around
 * it left out (RFC 9110 §5.6.1 lists), *p moved past its comma. 0 at the end of the list. */
static int list_next(const char **p, const char **start, size_t *len)
{
    const char *s = *p;
    if (!*s) return 0;
    const char *comma = strchr(s, ',');
    const char *end = comma ? comma : s + strlen(s);
    *p = comma ? comma + 1 : end;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t')) end--;
    *start = s;
    *len = (size_t)(end - s);
    return 1;
}

const char *dmn_http_cors_allow_origin(const char *origins, const char *origin)
{
    if (!origins || !*origins) return NULL;
    const char *p = origins, *e;
    size_t n;
    /* the list was checked at load: "*" stands alone */
    if (list_next(&p, &e, &n) && n == 1 && *e == '*') return "*";
    if (!origin || !*origin) return NULL;
    size_t olen = strlen(origin);
    for (p = origins; list_next(&p, &e, &n);)
        if (n == olen && !strncasecmp(e, origin, n)) return origin;
    return NULL;
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_token(const char *s, size_t n)
{
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i])) return 0;
    return 1;
}

/* Whether the base list already names s[0..n). */
static int in_base(const char *s, size_t n)
{
    const char *p = DMN_CORS_BASE_HEADERS, *e;
    size_t k;
    while (list_next(&p, &e, &k))
        if (k == n && !strncasecmp(e, s, n)) return 1;
    return 0;
}

int dmn_http_cors_allow_headers(const char *requested, char *out, size_t n)
{
    snprintf(out, n, "%s", DMN_CORS_BASE_HEADERS);
    if (!requested || strlen(requested) > DMN_CORS_REQ_HEADERS_BYTES) return 0;
    /* every name checked before any is taken: a list with one bad name is refused whole */
    const char *p = requested, *e;
    size_t k;
    int names = 0;
    while (list_next(&p, &e, &k)) {
        if (!k) continue; /* an empty element ("a,,b") is allowed by the list syntax */
        if (!is_token(e, k) || ++names > DMN_CORS_REQ_HEADERS_MAX) return 0;
    }
    size_t len = strlen(out);
    for (p = requested; list_next(&p, &e, &k);) {
        if (!k || in_base(e, k)) continue;
        if (len + 2 + k + 1 > n) return 0; /* out smaller than the documented size */
        memcpy(out + len, ", ", 2);
        memcpy(out + len + 2, e, k);
        len += 2 + k;
        out[len] = 0;
    }
    return 1;
}

int dmn_http_cors_header(const char *name)
{
    return !strncasecmp(name, "Access-Control-", 15) || !strcasecmp(name, "Vary");
}

void dmn_http_cors_add(dmn_http_req *r, const char *origins)
{
    if (!origins || !*origins) return;
    const char *allow = dmn_http_cors_allow_origin(origins, dmn_http_header(r, "Origin"));
    int any = allow && !strcmp(allow, "*");
    /* with a list the answer depends on Origin, whether or not this one is allowed */
    if (!any) dmn_http_add_header(r, "Vary", "Origin");
    if (!allow) return;
    dmn_http_add_header(r, "Access-Control-Allow-Origin", allow);
    dmn_http_add_header(r, "Access-Control-Expose-Headers", DMN_CORS_EXPOSE);
}

int dmn_http_cors_preflight(dmn_http_req *r, const char *origins, const char *methods)
{
    if (!methods || !origins || !*origins || strcmp(dmn_http_method(r), "OPTIONS") != 0) return 0;
    const char *allow = dmn_http_cors_allow_origin(origins, dmn_http_header(r, "Origin"));
    /* without Access-Control-Request-Method it is a plain OPTIONS (served as any request); a browser
     * sends a preflight with Origin always, so "*" does not stand in for a missing one */
    if (!allow || !dmn_http_header(r, "Origin") ||
        !dmn_http_header(r, "Access-Control-Request-Method"))
        return 0;
    char hdrs[64 + DMN_CORS_REQ_HEADERS_BYTES];
    dmn_http_cors_allow_headers(dmn_http_header(r, "Access-Control-Request-Headers"), hdrs,
                                sizeof hdrs);
    /* the listener added Allow-Origin (and with a list Vary: Origin, dmn_http_cors_add); the
     * answer also depends on the requested headers, echoed (a second Vary adds to the first) */
    dmn_http_add_header(r, "Vary", "Access-Control-Request-Headers");
    /* the route's methods whatever was asked: the browser compares them with its request and
     * refuses a method not listed itself */
    dmn_http_add_header(r, "Access-Control-Allow-Methods", methods);
    dmn_http_add_header(r, "Access-Control-Allow-Headers", hdrs);
    char age[16];
    snprintf(age, sizeof age, "%d", DMN_CORS_MAX_AGE);
    dmn_http_add_header(r, "Access-Control-Max-Age", age);
    dmn_http_respond(r, 204, NULL, "", 0);
    return 1;
}
