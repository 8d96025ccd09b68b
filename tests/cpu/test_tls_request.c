/* AsyncTLS per sequence on the CPU (accel_seq_decode_sparse, accel_seq_decode_stats): a device
 * whose option is off but that has the channel file decodes a sequence sparse when asked (bit
 * for bit dense with budgets over the context, fewer keys with small ones) beside a dense one;
 * without the channel file it answers UNSUPPORTED (the caller decodes dense). */
#include "devices/devices.h"
#include "devices/tls_calib.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdlib.h>
#include <string.h>

#define STORIES "models/stories260K"

TEST(tls_request_per_sequence)
{
    model *m;
    accel_dev *plain;
    REQUIRE(t_open(STORIES, "cpu", &m, &plain) == 0);
    const char *chan = t_tls_channels(m, "ch.bin");
    REQUIRE(chan);
    accel_opts o = {.threads = 2, .decode_sparse = "off", .sparse_channels = chan};
    char err[512];
    accel_dev *d = devices_open("cpu", m, &o, err, sizeof err);
    REQUIRE(d);
    const int n = 300, steps = 40, V = m->cfg.vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (n + steps));
    REQUIRE(ids);
    for (int i = 0; i < n + steps; i++) ids[i] = i ? (int32_t)((i * 37 + 11) % (V - 3) + 3) : 1;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    REQUIRE(ids && a && b);
    accel_seq *sd, *ss;
    REQUIRE(accel_seq_new(d, n + steps, &sd) == 0 && accel_seq_new(d, n + steps, &ss) == 0);
    accel_prefill_req r1 = {.seq = sd, .ids = ids, .n = n, .logits = a};
    accel_prefill_req r2 = {.seq = ss, .ids = ids, .n = n, .logits = b};
    REQUIRE(accel_prefill(d, &r1) == 0 && accel_prefill(d, &r2) == 0);
    /* budgets over the context, no dense rule: both levels keep everything */
    sparse_tls_params all;
    sparse_tls_params_default(&all);
    all.block_budget = 64, all.token_budget = 1024, all.dense_below = 0;
    REQUIRE(accel_seq_decode_sparse(d, ss, &all) == 0);
    int same = 1;
    for (int i = 0; i < steps / 2; i++) {
        REQUIRE(accel_decode(d, 1, &sd, ids + n + i, a) == 0);
        REQUIRE(accel_decode(d, 1, &ss, ids + n + i, b) == 0);
        same &= memcmp(a, b, sizeof(float) * V) == 0;
    }
    CHECK_MSG(same, "every key kept: not dense's bits");
    accel_decode_stats ds;
    REQUIRE(accel_seq_decode_stats(d, ss, &ds) == 0);
    CHECK(ds.steps == steps / 2 && ds.keys_read == ds.keys_total && ds.keys_total > 0);
    /* small budgets: fewer keys (layers 0-1 dense by default) */
    sparse_tls_params small = all;
    small.block_budget = 2, small.token_budget = 32;
    REQUIRE(accel_seq_decode_sparse(d, ss, &small) == 0);
    for (int i = steps / 2; i < steps; i++) REQUIRE(accel_decode(d, 1, &ss, ids + n + i, b) == 0);
    REQUIRE(accel_seq_decode_stats(d, ss, &ds) == 0);
    CHECK_MSG(ds.keys_read < ds.keys_total && ds.keys_read > 0, "read %lld of %lld",
              (long long)ds.keys_read, (long long)ds.keys_total);
    /* the dense one counted nothing */
    REQUIRE(accel_seq_decode_stats(d, sd, &ds) == 0);
    CHECK(ds.keys_total == 0);
    /* a device without the channel file cannot: the caller decodes dense */
    accel_seq *p;
    REQUIRE(accel_seq_new(plain, 10, &p) == 0);
    CHECK_EQ(accel_seq_decode_sparse(plain, p, &small), ACCEL_ERR_UNSUPPORTED);
    CHECK_EQ(accel_seq_decode_sparse(plain, p, NULL), ACCEL_OK);
    sparse_tls_params bad = small;
    bad.token_budget = 0;
    CHECK_EQ(accel_seq_decode_sparse(d, sd, &bad), ACCEL_ERR_INVALID);
    accel_seq_free(plain, p);
    accel_seq_free(d, sd);
    accel_seq_free(d, ss);
    free(ids), free(a), free(b);
    accel_free(d);
    accel_free(plain);
    model_free(m);
}
