/* Import pieces in flight that fail (the emulator's faults) are settled where they belong: a
 * piece that timed out makes the drain report a timeout whatever failed beside it, and a freed
 * sequence is named by no piece in flight. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdint.h>
#include <stdlib.h>

enum { NT = 37 };

static int health(accel_dev *d)
{
    accel_info i;
    accel_get_info(d, &i);
    return i.health;
}

/* Card 0 opened with TANDEM_EMU_FAULT spec (NULL: none). */
static accel_dev *open_card(const model *m, const char *spec)
{
    char err[256];
    if (spec)
        setenv("TANDEM_EMU_FAULT", spec, 1);
    else
        unsetenv("TANDEM_EMU_FAULT");
    accel_opts o = {.weight_bits = 8, .threads = 1};
    tf_cache_env();
    accel_dev *d = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    if (!d) t_fail(__FILE__, __LINE__, "%s", err);
    return d;
}

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
    accel_dev *d = open_card(m, NULL);
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
    d = open_card(m, spec);
    REQUIRE(d);
    accel_seq *a, *b;
    REQUIRE(accel_seq_new(d, 64, &a) == 0);
    CHECK_EQ(accel_kv_import(d, a, &kv.chunks[0]), 0); /* in flight, not yet checked */
    CHECK_EQ(accel_kv_import(d, a, &kv.chunks[1]), 0);
    uintptr_t was = (uintptr_t)a;
    accel_seq_free(d, a);
    CHECK_EQ(health(d), ACCEL_HEALTH_FAILED);
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
