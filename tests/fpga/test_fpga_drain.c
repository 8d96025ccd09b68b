/* Import pieces in flight that fail (the emulator's faults) are settled where they belong: a
 * piece that timed out makes the drain report a timeout whatever failed beside it, and a freed
 * sequence is named by no piece in flight; a piece that arrived corrupt fails its own sequence,
 * not an unrelated call that happened to drain it. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 37 };

/* The CPU's int8 KV of NT positions, a chunk per layer. */
static int cpu_kv(const model *m, tf_kv *kv)
{
    char err[256];
    accel_opts o = {.threads = 1};
    accel_dev *cpu = devices_open("cpu", m, &o, err, sizeof err);
    if (!cpu) return -1;
    int32_t ids[NT];
    for (int i = 0; i < NT; i++) ids[i] = 1 + (i * 3) % (m->cfg.vocab - 1);
    int st = tf_cpu_kv(cpu, ids, NT, NULL, kv);
    accel_free(cpu);
    return st;
}

/* A's layer-0 piece arrives corrupt, its layer-1 piece hangs. Freeing A drains both: the
 * timeout must come out (the card may still write A's blocks: the device fails and keeps them)
 * rather than the corruption ahead of it, and the hung piece must not name freed A (the next
 * scatter into its staging group marked A's memory failed: a use after free). */
TEST(fpga_drain_timeout_not_hidden_by_corrupt_piece)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    tf_kv kv;
    REQUIRE(cpu_kv(m, &kv) == 0 && kv.n_chunks >= 2);
    accel_dev *d = tf_open_faulted(m, NULL);
    REQUIRE(d);
    fpga_emu_card_stats cs;
    REQUIRE(tf_card_stats(d, &cs) == 0);
    uint64_t r0 = cs.runs_started; /* the weight upload's */
    accel_free(d);
    char spec[160];
    snprintf(spec, sizeof spec,
             "card=0,run=%llu,kind=bitflip,arg=0,byte=3;card=0,run=%llu,kind=hang",
             (unsigned long long)r0 + 1, (unsigned long long)r0 + 2);
    setenv("TANDEM_FPGA_TIMEOUT_MS", "200", 1);
    d = tf_open_faulted(m, spec);
    REQUIRE(d);
    accel_seq *a, *b;
    REQUIRE(accel_seq_new(d, 64, &a) == 0);
    CHECK_EQ(accel_kv_import(d, a, &kv.chunks[0]), 0); /* in flight, not yet checked */
    CHECK_EQ(accel_kv_import(d, a, &kv.chunks[1]), 0);
    uintptr_t was = (uintptr_t)a;
    accel_seq_free(d, a);
    CHECK_EQ(tf_health(d), ACCEL_HEALTH_FAILED);
    fpga_card *c = fpga_dev_card(d);
    for (int g = 0; g < FPGA_CARD_GROUPS; g++) CHECK((uintptr_t)c->pend[g].owner != was);
    /* before, the device went on: B's pieces reached the hung group (ASan: use after free) */
    if (accel_seq_new(d, 64, &b) == 0) {
        accel_kv_import(d, b, &kv.chunks[0]);
        accel_kv_import(d, b, &kv.chunks[1]);
        accel_seq_free(d, b);
    }
    accel_free(d);
    tf_kv_free(&kv);
    model_free(m);
}

/* A's layer-0 piece arrives corrupt while B, untouched, saves a block (a card-level read that
 * drains first): B's save succeeds with B's bytes, and A is the one marked (its next layer
 * fails at once). Before, B got CORRUPT and A's layers imported "ok" until its last. */
TEST(fpga_drain_failed_piece_is_its_owners)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    tf_kv kv;
    REQUIRE(cpu_kv(m, &kv) == 0 && kv.n_chunks >= 2);
    uint8_t *good = NULL, *got = NULL;
    char spec[96] = "";
    for (int pass = 0; pass < 2; pass++) { /* a dry run numbers A's first piece */
        accel_dev *d = tf_open_faulted(m, pass ? spec : NULL);
        REQUIRE(d);
        accel_info info;
        accel_get_info(d, &info);
        const int T = info.kv_block_tokens;
        if (!good) good = malloc(info.kv_block_bytes), got = malloc(info.kv_block_bytes);
        int32_t *ids = malloc(sizeof *ids * (size_t)T);
        for (int i = 0; i < T; i++) ids[i] = 1 + (i * 5) % (m->cfg.vocab - 1);
        accel_seq *a, *b;
        REQUIRE(accel_seq_new(d, 2 * T, &b) == 0);
        accel_prefill_req r = {.seq = b, .ids = ids, .n = T};
        REQUIRE(accel_prefill(d, &r) == 0);
        REQUIRE(accel_seq_new(d, 64, &a) == 0);
        if (pass == 0) {
            fpga_emu_card_stats cs;
            REQUIRE(tf_card_stats(d, &cs) == 0);
            snprintf(spec, sizeof spec, "card=0,run=%llu,kind=bitflip,arg=0,byte=5",
                     (unsigned long long)cs.runs_started + 1);
            REQUIRE(accel_kv_block_save(d, b, 0, good) == 0);
        } else {
            CHECK_EQ(accel_kv_import(d, a, &kv.chunks[0]), 0); /* in flight */
            CHECK_EQ(accel_kv_block_save(d, b, 0, got), 0);
            CHECK(memcmp(got, good, info.kv_block_bytes) == 0);
            CHECK_EQ(accel_kv_import(d, a, &kv.chunks[1]), ACCEL_ERR_CORRUPT);
            CHECK_EQ(tf_health(d), ACCEL_HEALTH_OK);
        }
        accel_seq_free(d, a);
        accel_seq_free(d, b);
        accel_free(d);
        free(ids);
    }
    free(good), free(got);
    tf_kv_free(&kv);
    model_free(m);
}

/* fpga-emu:0 whose run number `after` + 1 (after 0: none) is `kind`; a hang with a 200 ms
 * watchdog (each wait on it then costs that long, not the default 30 s). A late run times out
 * whatever the watchdog (fpga/emu/emu_fault.c), which is left as it is: a slow build (TSan)
 * needs its long one for the other runs. */
static accel_dev *open_with(const model *m, uint64_t after, const char *kind)
{
    char spec[96];
    if (!after) return tf_open_faulted(m, NULL);
    if (!strcmp(kind, "hang")) setenv("TANDEM_FPGA_TIMEOUT_MS", "200", 1);
    snprintf(spec, sizeof spec, "card=0,run=%llu,kind=%s", (unsigned long long)after + 1, kind);
    return tf_open_faulted(m, spec);
}

static uint64_t runs(accel_dev *d)
{
    fpga_emu_card_stats cs;
    return tf_card_stats(d, &cs) == 0 ? cs.runs_started : 0;
}

/* A's piece hangs. The first call that drains it times out (DEGRADED); the next finds it still
 * running: the card is stuck and FAILED at once, as after any other run that timed out and still
 * runs (fpga/card.h). Before, each later call waited the watchdog out again and timed out again,
 * and the card stayed DEGRADED with a hung kernel. */
TEST(fpga_drain_hung_piece_fails_the_card_next_call)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    tf_kv kv;
    REQUIRE(cpu_kv(m, &kv) == 0);
    accel_dev *d = open_with(m, 0, NULL);
    REQUIRE(d);
    uint64_t r0 = runs(d); /* the weight upload's */
    accel_free(d);
    d = open_with(m, r0, "hang");
    REQUIRE(d);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *a, *b;
    REQUIRE(accel_seq_new(d, 64, &a) == 0);
    REQUIRE(accel_seq_new(d, 16, &b) == 0);
    CHECK_EQ(accel_kv_import(d, a, &kv.chunks[0]), 0); /* in flight: it hangs */
    int32_t id = 1;
    CHECK_EQ(accel_decode(d, 1, &b, &id, lg), ACCEL_ERR_TIMEOUT);
    CHECK_EQ(tf_health(d), ACCEL_HEALTH_DEGRADED);
    CHECK_EQ(accel_decode(d, 1, &b, &id, lg), ACCEL_ERR_DEVICE);
    CHECK_EQ(tf_health(d), ACCEL_HEALTH_FAILED);
    accel_seq_free(d, a);
    accel_seq_free(d, b);
    accel_free(d);
    free(lg);
    tf_kv_free(&kv);
    model_free(m);
}

/* F, a fork sharing a partial block with S, imports into that block while A's piece is in flight
 * and late: the copy-on-write drains first and finds A's piece timed out, so no copy started and
 * the block taken for it goes back at once. Before, it stayed taken as if a late copy might
 * still write it: one block lost each time, never returned. */
TEST(fpga_drain_timeout_before_a_copy_gives_its_block_back)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    tf_kv kv;
    REQUIRE(cpu_kv(m, &kv) == 0);
    uint64_t at = 0;
    for (int pass = 0; pass < 2; pass++) { /* a dry run numbers A's piece */
        accel_dev *d = open_with(m, at, "late");
        REQUIRE(d);
        accel_info info;
        accel_get_info(d, &info);
        const int T = info.kv_block_tokens, P = T + 8;
        REQUIRE(T >= 16); /* F's 8 positions after P stay in the shared block */
        int32_t *ids = malloc(sizeof *ids * (size_t)P);
        for (int i = 0; i < P; i++) ids[i] = 1 + (i * 5) % (m->cfg.vocab - 1);
        accel_seq *s, *f, *a;
        REQUIRE(accel_seq_new(d, P, &s) == 0);
        accel_prefill_req r = {.seq = s, .ids = ids, .n = P};
        REQUIRE(accel_prefill(d, &r) == 0);
        REQUIRE(accel_seq_fork(d, s, P, P + 8, &f) == 0);
        REQUIRE(accel_seq_new(d, 64, &a) == 0);
        if (pass == 0) {
            at = runs(d);
        } else {
            CHECK_EQ(accel_kv_import(d, a, &kv.chunks[0]), 0); /* in flight: late */
            accel_get_info(d, &info);
            const int used = info.kv_blocks_used;
            proto_kv_layer c = kv.chunks[0];
            c.pos0 = P, c.n_tokens = 8;
            CHECK_EQ(accel_kv_import(d, f, &c), ACCEL_ERR_TIMEOUT);
            CHECK_EQ(tf_health(d), ACCEL_HEALTH_DEGRADED);
            accel_get_info(d, &info);
            CHECK_EQ(info.kv_blocks_used, used);
        }
        accel_seq_free(d, a);
        accel_seq_free(d, f);
        accel_seq_free(d, s);
        accel_get_info(d, &info);
        CHECK_EQ(info.kv_blocks_used, 0);
        accel_free(d);
        free(ids);
    }
    tf_kv_free(&kv);
    model_free(m);
}
