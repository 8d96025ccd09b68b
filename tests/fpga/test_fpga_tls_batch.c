/* AsyncTLS in the batched decode run (fpga/kernels/decode_batch.c with tls_dec.h): sequences
 * decoding sparse with their own budgets, and a dense one, decoded together in one run per step
 * give bit for bit the logits and the usage counts of decoding each alone (a card capped at one
 * sequence per run, TANDEM_FPGA_BATCH=1), step after step — with AsyncTLS as it is and with the
 * staggered pipeline (TANDEM_FPGA_TLS_STAGGER=1); the batched card did run batches. */
#include "devices/devices.h"
#include "devices/tls_calib.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel_dev *open_card(const model *m, const char *name, const char *chan, const char *batch,
                            const char *stagger)
{
    const char *spec = "asynctls,block_size=16,block_budget=4,token_budget=24,dense_layers=1,"
                       "dense_below=0";
    accel_opts o = {.weight_bits = 8, .decode_sparse = spec, .sparse_channels = chan};
    char err[512];
    tf_cache_env();
    if (batch) setenv("TANDEM_FPGA_BATCH", batch, 1);
    setenv("TANDEM_FPGA_TLS_STAGGER", stagger, 1);
    accel_dev *d = devices_open(name, m, &o, err, sizeof err);
    unsetenv("TANDEM_FPGA_BATCH");
    unsetenv("TANDEM_FPGA_TLS_STAGGER");
    if (!d) t_fail(__FILE__, __LINE__, "open %s: %s", name, err);
    return d;
}

static void run(const model *m, const char *chan, const char *stagger)
{
    accel_dev *bat = open_card(m, "fpga-emu:0", chan, NULL, stagger);
    accel_dev *one = open_card(m, "fpga-emu:1", chan, "1", stagger);
    if (!bat || !one) {
        if (bat) accel_free(bat);
        if (one) accel_free(one);
        return;
    }
    enum { S = 3, STEPS = 4 };
    const int V = m->cfg.vocab, len[S] = {150, 97, 123};
    accel_seq *a[S], *b[S];
    sparse_tls_params wide = {.block_size = 16, .block_budget = 6, .token_budget = 40,
                              .channels = 4, .dense_layers = 1, .dense_below = 0};
    int32_t *ids = malloc(sizeof *ids * (200 + STEPS));
    for (int i = 0; i < 200 + STEPS; i++) ids[i] = (int32_t)((i * 29 + 3) % V);
    for (int i = 0; i < S; i++) {
        REQUIRE(accel_seq_new(bat, 200 + STEPS, &a[i]) == 0 && accel_seq_new(one, 200 + STEPS, &b[i]) == 0);
        accel_prefill_req r = {.seq = a[i], .ids = ids + i, .n = len[i]};
        REQUIRE(accel_prefill(bat, &r) == 0);
        r.seq = b[i];
        REQUIRE(accel_prefill(one, &r) == 0);
    }
    /* sequence 1: its own budgets; sequence 2: dense */
    REQUIRE(accel_seq_decode_sparse(bat, a[1], &wide) == 0 && accel_seq_decode_sparse(one, b[1], &wide) == 0);
    REQUIRE(accel_seq_decode_sparse(bat, a[2], NULL) == 0 && accel_seq_decode_sparse(one, b[2], NULL) == 0);
    float *la = malloc(sizeof(float) * V * S), *lb = malloc(sizeof(float) * V * S);
    const uint64_t runs0 = fpga_dev_card(bat)->decb_runs;
    for (int s = 0; s < STEPS; s++) {
        int32_t tok[S];
        for (int i = 0; i < S; i++) tok[i] = ids[len[i] + i + s];
        REQUIRE(accel_decode(bat, S, a, tok, la) == 0);
        int st1 = accel_decode(one, S, b, tok, lb);
        CHECK_EQ(st1, 0);
        if (st1) break;
        CHECK_MSG(memcmp(la, lb, sizeof(float) * V * S) == 0, "stagger %s step %d", stagger, s);
    }
    CHECK_EQ(fpga_dev_card(bat)->decb_runs - runs0, STEPS);
    CHECK_EQ(fpga_dev_card(one)->decb_runs, 0);
    for (int i = 0; i < S; i++) {
        accel_decode_stats da, db;
        REQUIRE(accel_seq_decode_stats(bat, a[i], &da) == 0 && accel_seq_decode_stats(one, b[i], &db) == 0);
        CHECK_EQ(da.keys_read, db.keys_read);
        CHECK_EQ(da.keys_total, db.keys_total);
        CHECK_EQ(da.blocks_new, db.blocks_new);
        CHECK_EQ(da.blocks_kept, db.blocks_kept);
        CHECK_EQ(da.steps, i < 2 ? STEPS : 0);
        if (i < 2) CHECK(da.keys_read < da.keys_total); /* sparse */
        accel_seq_free(bat, a[i]);
        accel_seq_free(one, b[i]);
    }
    free(ids), free(la), free(lb);
    accel_free(bat);
    accel_free(one);
}

TEST(fpga_tls_batch_equals_alone)
{
    char err[512];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    const char *chan = t_tls_channels(m, "fpga_batch_ch.bin");
    REQUIRE(chan);
    run(m, chan, "0");
    run(m, chan, "1");
    model_free(m);
}
