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
