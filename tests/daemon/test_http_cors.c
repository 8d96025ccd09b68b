/* Tests for daemon/http_cors.c (origin matching, the preflight's Allow-Headers and its bounds)
 * and cors_origins' check at load (daemon/config.c). The headers on the wire are
 * tests/daemon/test_http.c's (the listener) and tests/e2e/serve_cors.sh's (the daemon). */
#include "tests/test.h"
#include "daemon/config.h"
#include "daemon/http_cors.h"
#include <stdio.h>
#include <string.h>

TEST(http_cors_allow_origin)
{
    const char *list = "http://localhost:5173, https://ui.example.com";
    /* unset: nothing, whatever the origin */
    CHECK(dmn_http_cors_allow_origin("", "https://ui.example.com") == NULL);
    CHECK(dmn_http_cors_allow_origin(NULL, "https://ui.example.com") == NULL);
    /* listed: the request's own Origin is echoed */
    const char *o = "https://ui.example.com";
    CHECK(dmn_http_cors_allow_origin(list, o) == o);
    CHECK_STR(dmn_http_cors_allow_origin(list, "http://localhost:5173"), "http://localhost:5173");
    CHECK_STR(dmn_http_cors_allow_origin(list, "HTTPS://UI.EXAMPLE.COM"), "HTTPS://UI.EXAMPLE.COM");
    /* not listed: a prefix, a longer name, another port or scheme, no Origin */
    CHECK(dmn_http_cors_allow_origin(list, "https://ui.example.co") == NULL);
    CHECK(dmn_http_cors_allow_origin(list, "https://ui.example.com.evil.net") == NULL);
    CHECK(dmn_http_cors_allow_origin(list, "http://localhost:5174") == NULL);
    CHECK(dmn_http_cors_allow_origin(list, "http://ui.example.com") == NULL);
    CHECK(dmn_http_cors_allow_origin(list, "https://ui.example.com,") == NULL);
    CHECK(dmn_http_cors_allow_origin(list, "") == NULL);
    CHECK(dmn_http_cors_allow_origin(list, NULL) == NULL);
    CHECK(dmn_http_cors_allow_origin(list, "null") == NULL);
    /* any: "*", with or without an Origin */
    CHECK_STR(dmn_http_cors_allow_origin("*", "https://x.example"), "*");
    CHECK_STR(dmn_http_cors_allow_origin(" * ", NULL), "*");
}

TEST(http_cors_allow_headers)
{
    char out[64 + DMN_CORS_REQ_HEADERS_BYTES];
    /* what a browser sends: lower case, sorted, the base names among them */
    CHECK_EQ(
        dmn_http_cors_allow_headers("authorization,content-type,x-stainless-os", out, sizeof out),
        1);
    CHECK_STR(out, "Authorization, Content-Type, x-stainless-os");
    CHECK_EQ(dmn_http_cors_allow_headers(NULL, out, sizeof out), 0);
    CHECK_STR(out, DMN_CORS_BASE_HEADERS);
    /* list syntax: spaces around names and empty elements */
    CHECK_EQ(dmn_http_cors_allow_headers(" x-a ,, x-b\t", out, sizeof out), 1);
    CHECK_STR(out, "Authorization, Content-Type, x-a, x-b");
    CHECK_EQ(dmn_http_cors_allow_headers("", out, sizeof out), 1);
    CHECK_STR(out, DMN_CORS_BASE_HEADERS);
    /* a name that is not a token (a space inside, a separator, a byte past ASCII): the base list
     * alone, none of the others */
    const char *bad[] = {"x-a, x b", "x-a,x(b)", "x-a,\"x\"", "x-a,x\xc3\xa9", "x-a,x/b", "x:a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(dmn_http_cors_allow_headers(bad[i], out, sizeof out) == 0, "case %zu", i);
        CHECK_STR(out, DMN_CORS_BASE_HEADERS);
    }
    /* the bounds: DMN_CORS_REQ_HEADERS_MAX names taken, one more refused */
    char list[4096];
    size_t n = 0;
    for (int i = 0; i < DMN_CORS_REQ_HEADERS_MAX; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%sx-%d", i ? "," : "", i);
    CHECK_EQ(dmn_http_cors_allow_headers(list, out, sizeof out), 1);
    CHECK(strstr(out, "x-31") != NULL);
    snprintf(list + n, sizeof list - n, ",x-32");
    CHECK_EQ(dmn_http_cors_allow_headers(list, out, sizeof out), 0);
    CHECK_STR(out, DMN_CORS_BASE_HEADERS);
    /* ... and DMN_CORS_REQ_HEADERS_BYTES bytes taken (all fitting the documented buffer), one
     * more refused */
    memset(list, 'a', DMN_CORS_REQ_HEADERS_BYTES);
    list[DMN_CORS_REQ_HEADERS_BYTES] = 0;
    CHECK_EQ(dmn_http_cors_allow_headers(list, out, sizeof out), 1);
    CHECK_EQ(strlen(out), strlen(DMN_CORS_BASE_HEADERS) + 2 + DMN_CORS_REQ_HEADERS_BYTES);
    list[DMN_CORS_REQ_HEADERS_BYTES] = 'a';
    list[DMN_CORS_REQ_HEADERS_BYTES + 1] = 0;
    CHECK_EQ(dmn_http_cors_allow_headers(list, out, sizeof out), 0);
    /* a buffer smaller than documented is never overrun */
    char small[40];
    CHECK_EQ(dmn_http_cors_allow_headers("x-aaaaaaaaaaaaaaaa", small, sizeof small), 0);
    CHECK(strlen(small) < sizeof small);
}

TEST(http_cors_header_names)
{
    CHECK(dmn_http_cors_header("Access-Control-Allow-Origin"));
    CHECK(dmn_http_cors_header("access-control-expose-headers"));
    CHECK(dmn_http_cors_header("Vary"));
    CHECK(!dmn_http_cors_header("Retry-After"));
    CHECK(!dmn_http_cors_header("x-request-id"));
    CHECK(!dmn_http_cors_header("Access-Control"));
}

/* cors_origins is checked at load: the forms browsers send in Origin, within the bounds. */
TEST(config_cors_origins)
{
    char *env[] = {NULL};
    char err[256];
    dmn_config c;
    const char *good[] = {"",
                          "*",
                          " * ",
                          "https://ui.example.com",
                          "http://localhost:5173, https://a.b",
                          "http://127.0.0.1:8080",
                          "http://[::1]:3000",
                          "chrome-extension://abcdefgh",
                          "https://A.Example.COM:8443"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char *argv[] = {"serve", "--cors-origins", (char *)good[i], NULL};
        err[0] = 0;
        CHECK_MSG(dmn_config_load(&c, 3, argv, env, err, sizeof err) == 0, "'%s': %s", good[i],
                  err);
        CHECK_STR(c.cors_origins, good[i]);
        dmn_config_deinit(&c);
    }
    /* the default is none */
    char *argv0[] = {"serve", NULL};
    CHECK_EQ(dmn_config_load(&c, 1, argv0, env, err, sizeof err), 0);
    CHECK_STR(c.cors_origins, "");
    dmn_config_deinit(&c);

    static char many[2048], longest[DMN_CORS_ORIGIN_MAX + 2];
    size_t n = 0;
    for (int i = 0; i <= DMN_CORS_MAX_ORIGINS; i++)
        n += (size_t)snprintf(many + n, sizeof many - n, "%shttps://h%d.example", i ? "," : "", i);
    snprintf(longest, sizeof longest, "https://");
    memset(longest + 8, 'a', DMN_CORS_ORIGIN_MAX + 1 - 8);
    longest[DMN_CORS_ORIGIN_MAX + 1] = 0;
    struct {
        const char *v, *want;
    } bad[] = {
        {"https://ui.example.com/", "has a path"},
        {"https://ui.example.com/app", "has a path"},
        {"https://*.example.com", "is not an origin"},
        {"ui.example.com", "is not an origin"},
        {"https://", "is not an origin"},
        {"https://a b.example", "is not an origin"},
        {"https://a:0", "is not an origin"},
        {"https://a:0443", "is not an origin"},
        {"https://a:65536", "is not an origin"},
        {"https://a:", "is not an origin"},
        {"http://[]:80", "is not an origin"},
        {"https://ui.example.com:443", "default port"},
        {"http://ui.example.com:80", "default port"},
        {"null", "'null'"},
        {"*, https://a.example", "stands alone"},
        {"https://a.example, *", "stands alone"},
        {"https://a.example,", "empty origin"},
        {"https://a.example,,https://b.example", "empty origin"},
        {many, "more than 16"},
        {longest, "at most 280"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"serve", "--cors-origins", (char *)bad[i].v, NULL};
        err[0] = 0;
        CHECK_MSG(dmn_config_load(&c, 3, argv, env, err, sizeof err) == -1, "case %zu accepted", i);
        CHECK_MSG(strstr(err, "cors_origins") && strstr(err, bad[i].want),
                  "case %zu: '%s' lacks '%s'", i, err, bad[i].want);
        dmn_config_deinit(&c);
    }
    /* exactly at the bounds: accepted */
    many[n - strlen(",https://h16.example")] = 0;
    longest[DMN_CORS_ORIGIN_MAX] = 0;
    const char *edge[] = {many, longest};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {"serve", "--cors-origins", (char *)edge[i], NULL};
        CHECK_MSG(dmn_config_load(&c, 3, argv, env, err, sizeof err) == 0, "edge %d: %s", i, err);
        dmn_config_deinit(&c);
    }
}
