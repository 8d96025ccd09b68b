/* The per-request sparse decode switch resolved once (sparse/tls.h, sparse_tls_resolve): the
 * request over the configuration over the defaults, and a bad value naming its API key. */
#include "sparse/tls.h"
#include "tests/test.h"
#include <string.h>

TEST(tls_resolve_request_over_config)
{
    sparse_tls_params p;
    int on = -1;
    const char *key = NULL;
    char err[200];
    sparse_tls_req absent = {.given = -1}, off = {.given = 0}, yes = {.given = 1};
    /* absent: the configuration decides */
    CHECK_EQ(sparse_tls_resolve(&absent, "", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK_EQ(on, 0);
    CHECK_EQ(sparse_tls_resolve(&absent, "asynctls,token_budget=2048", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK(on == 1 && p.token_budget == 2048 && p.block_budget == 128);
    /* the request wins both ways */
    CHECK_EQ(sparse_tls_resolve(&off, "asynctls", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK_EQ(on, 0);
    CHECK_EQ(sparse_tls_resolve(&yes, "off", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK(on == 1 && p.token_budget == 1024 && p.block_budget == 128 && p.block_size == 64);
    /* its budgets over the configuration's */
    sparse_tls_req b = {.given = 1, .token_budget = 512, .block_budget = 32};
    CHECK_EQ(sparse_tls_resolve(&b, "asynctls,token_budget=2048,dense_layers=1", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK(on == 1 && p.token_budget == 512 && p.block_budget == 32 && p.dense_layers == 1);
    /* stagger: the request's over the configuration's, absent keeps it */
    CHECK_EQ(sparse_tls_resolve(&b, "asynctls,stagger=1", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK_EQ(p.stagger, 1);
    b.stagger = 1;
    CHECK_EQ(sparse_tls_resolve(&b, "asynctls,stagger=1", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK_EQ(p.stagger, 0);
    b.stagger = 2;
    CHECK_EQ(sparse_tls_resolve(&b, "asynctls", 128, &p, &on, err, sizeof err, &key), 0);
    CHECK_EQ(p.stagger, 1);
    /* bad values name the key */
    sparse_tls_req bad = {.given = 1, .token_budget = -3};
    CHECK_EQ(sparse_tls_resolve(&bad, "", 128, &p, &on, err, sizeof err, &key), SPARSE_TLS_ERR_INVALID);
    CHECK_STR(key, "token_budget");
    CHECK(strstr(err, "token_budget") != NULL);
    bad = (sparse_tls_req){.given = 1, .block_budget = 1 << 20};
    CHECK_EQ(sparse_tls_resolve(&bad, "", 128, &p, &on, err, sizeof err, &key), SPARSE_TLS_ERR_INVALID);
    CHECK_STR(key, "block_budget");
    CHECK_EQ(sparse_tls_resolve(&absent, "quest", 128, &p, &on, err, sizeof err, &key), SPARSE_TLS_ERR_INVALID);
    CHECK_STR(key, "sparse_decode");
}
