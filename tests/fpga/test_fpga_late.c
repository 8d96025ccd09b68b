/* A slow card: a copy run (kv_gather) outlasts the watchdog and lands anyway (the emulator's
 * "late" fault). The timeout degrades the device, which keeps serving; what it serves after
 * must be what it would have served without the slow run: block loads copy the staged bytes,
 * and a copy-on-write destination the late run may still write is not handed out again. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdlib.h>
#include <string.h>

static uint64_t runs(accel_dev *d)
{
    fpga_emu_card_stats cs;
    return tf_card_stats(d, &cs) == 0 ? cs.runs_started : 0;
}

/* Card 0 opened with run number `late` (0: none) late. */
static accel_dev *open_card(const model *m, uint64_t late)
{
    char spec[64];
    snprintf(spec, sizeof spec, "card=0,run=%llu,kind=late", (unsigned long long)late);
    return tf_open_faulted(m, late ? spec : NULL);
}

/* Sequence a prefilled with n ids; 0 or a status. */
static int prefilled(accel_dev *d, const model *m, int n, int cap, accel_seq **a)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    for (int i = 0; i < n; i++) ids[i] = 1 + (i * 7) % (m->cfg.vocab - 1);
    int st = accel_seq_new(d, cap, a);
    accel_prefill_req r = {.seq = *a, .ids = ids, .n = n};
    if (!st) st = accel_prefill(d, &r);
    free(ids);
    return st;
}

/* A block save whose read run timed out: the copy run it used then copied from a bank into
 * every later block load (50,818 of 51,200 bytes wrong, the load said 0). */
TEST(fpga_late_block_save_then_load_is_exact)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    accel_info info;
    uint64_t at = 0;
    for (int pass = 0; pass < 2; pass++) { /* a dry run numbers the save's first run */
        accel_dev *d = open_card(m, at);
        REQUIRE(d);
        accel_get_info(d, &info);
        const int T = info.kv_block_tokens;
        uint8_t *good = malloc(info.kv_block_bytes), *back = malloc(info.kv_block_bytes);
        accel_seq *a, *b;
        REQUIRE(prefilled(d, m, T, 4 * T, &a) == 0);
        REQUIRE(accel_kv_block_save(d, a, 0, good) == 0);
        if (pass == 0) {
            at = runs(d) + 1;
        } else {
            CHECK_EQ(accel_kv_block_save(d, a, 0, back), ACCEL_ERR_TIMEOUT);
            CHECK_EQ(tf_health(d), ACCEL_HEALTH_DEGRADED);
            REQUIRE(accel_seq_new(d, 4 * T, &b) == 0);
            CHECK_EQ(accel_kv_block_load(d, b, good), 0);
            memset(back, 0, info.kv_block_bytes);
            CHECK_EQ(accel_kv_block_save(d, b, 0, back), 0);
            size_t diff = 0;
            for (uint64_t i = 0; i < info.kv_block_bytes; i++) diff += good[i] != back[i];
            CHECK_MSG(diff == 0, "%zu of %llu bytes differ", diff,
                      (unsigned long long)info.kv_block_bytes);
            float *la = malloc(sizeof(float) * m->cfg.vocab),
                  *lb = malloc(sizeof(float) * m->cfg.vocab);
            int32_t id = 5;
            CHECK_EQ(accel_decode(d, 1, &a, &id, la), 0);
            CHECK_EQ(accel_decode(d, 1, &b, &id, lb), 0);
            CHECK(memcmp(la, lb, sizeof(float) * m->cfg.vocab) == 0);
            free(la), free(lb);
            accel_seq_free(d, b);
        }
        accel_seq_free(d, a);
        accel_free(d);
        free(good), free(back);
    }
    model_free(m);
}

/* A copy-on-write copy that times out: the device is degraded and the copy's destination stays
 * taken while a real card may still be writing it; the fork's next step sees the late run
 * finished, which gives that block back, copies again and decodes. Before, the block was never
 * given back: one lost per copy timeout on a device that keeps serving. Then a card closed while
 * its late copy still holds a block: the pool goes with the device (no call back after it). */
TEST(fpga_late_cow_copy_block_comes_back_when_landed)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    accel_info info;
    uint64_t at = 0;
    for (int pass = 0; pass < 3; pass++) {
        accel_dev *d = open_card(m, at);
        REQUIRE(d);
        accel_get_info(d, &info);
        const int T = info.kv_block_tokens, P = T + 40;
        accel_seq *src, *f;
        REQUIRE(prefilled(d, m, P, P + 8, &src) == 0);
        REQUIRE(accel_seq_fork(d, src, P, P + 8, &f) == 0);
        float *lg = malloc(sizeof(float) * m->cfg.vocab);
        int32_t id = 3;
        if (pass == 0) {
            at = runs(d) + 1; /* the fork's step starts with the copy of its shared block */
        } else if (pass == 1) {
            CHECK_EQ(accel_decode(d, 1, &f, &id, lg), ACCEL_ERR_TIMEOUT);
            CHECK_EQ(tf_health(d), ACCEL_HEALTH_DEGRADED);
            accel_get_info(d, &info);
            CHECK_EQ(info.kv_blocks_used, 3); /* src's 2, the late copy's destination */
            CHECK_EQ(accel_seq_len(d, f), P);
            CHECK_EQ(accel_decode(d, 1, &f, &id, lg), 0);
            accel_get_info(d, &info);
            CHECK_EQ(info.kv_blocks_used, 3); /* src's 2, f's copy: the late one's came back */
            accel_seq_free(d, f);
            accel_seq_free(d, src);
            accel_get_info(d, &info);
            CHECK_EQ(info.kv_blocks_used, 0);
            f = src = NULL;
        }
        if (pass == 2) { /* closed with the late copy's block still out */
            CHECK_EQ(accel_decode(d, 1, &f, &id, lg), ACCEL_ERR_TIMEOUT);
            accel_seq_free(d, f);
            accel_seq_free(d, src);
            accel_get_info(d, &info);
            CHECK_EQ(info.kv_blocks_used, 1); /* no run since: the card has not seen it land */
            f = src = NULL;
        }
        if (f) accel_seq_free(d, f);
        if (src) accel_seq_free(d, src);
        free(lg);
        accel_free(d);
    }
    model_free(m);
}
