/* Faults injected into an emulated card in the middle of a decode (TANDEM_EMU_FAULT) come out
 * of the accel interface as statuses and mark the device: a hung run times out (DEGRADED) and,
 * still hung at the next call, fails the device; a run that errors or a card that disappears
 * fails it at once. Calls on a FAILED device fail fast; the other card and the process go on. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdlib.h>

/* Runs a card makes while it opens (the weight upload), so that a fault can target the n-th
 * decode step after it. */
static uint64_t runs_at_open(const char *device, const model *m)
{
    char err[256];
    accel_opts o = {.weight_bits = 8};
    tf_cache_env();
    accel_dev *d = devices_open(device, m, &o, err, sizeof err);
    if (!d) {
        t_fail(__FILE__, __LINE__, "%s", err);
        return 0;
    }
    fpga_emu_card_stats cs;
    uint64_t n = tf_card_stats(d, &cs) == 0 ? cs.runs_started : 0;
    accel_free(d);
    return n;
}

static int health(accel_dev *d)
{
    accel_info i;
    accel_get_info(d, &i);
    return i.health;
}

static void fault(int card, uint64_t run, const char *kind)
{
    char spec[128];
    snprintf(spec, sizeof spec, "card=%d,run=%llu,kind=%s", card, (unsigned long long)run, kind);
    setenv("TANDEM_EMU_FAULT", spec, 1);
}

TEST(fpga_fault_hang_times_out_then_fails)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    uint64_t r0 = runs_at_open("fpga-emu", m);
    REQUIRE(r0 > 0);
    model_free(m);
    fault(0, r0 + 3, "hang"); /* the third decode step never completes */
    setenv("TANDEM_FPGA_TIMEOUT_MS", "200", 1);
    accel_dev *d, *other;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 16, &s) == 0);
    int32_t id = 1;
    CHECK_EQ(accel_decode(d, 1, &s, &id, lg), 0);
    CHECK_EQ(accel_decode(d, 1, &s, &id, lg), 0);
    CHECK_EQ(accel_decode(d, 1, &s, &id, lg), ACCEL_ERR_TIMEOUT);
    CHECK_EQ(health(d), ACCEL_HEALTH_DEGRADED);
    CHECK_EQ(accel_seq_len(d, s), 2);
    /* still hung: the card is stuck */
    CHECK_EQ(accel_decode(d, 1, &s, &id, lg), ACCEL_ERR_DEVICE);
    CHECK_EQ(health(d), ACCEL_HEALTH_FAILED);
    accel_seq *s2;
    CHECK_EQ(accel_seq_new(d, 16, &s2), ACCEL_ERR_DEVICE);
    CHECK_EQ(accel_warmup(d), ACCEL_ERR_DEVICE);
    accel_seq_free(d, s);
    /* the other card decodes */
    accel_opts o = {.weight_bits = 8};
    other = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(other);
    CHECK_EQ(accel_warmup(other), 0);
    CHECK_EQ(health(other), ACCEL_HEALTH_OK);
    accel_free(other);
    accel_free(d); /* tears the hung card down without waiting for it */
    free(lg);
    model_free(m);
}

TEST(fpga_fault_error_and_gone_fail_the_device)
{
    char err[256];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    uint64_t r0 = runs_at_open("fpga-emu", m);
    uint64_t r1 = runs_at_open("fpga-emu:1", m);
    REQUIRE(r0 > 0 && r1 > 0);
    char spec[200];
    snprintf(spec, sizeof spec, "card=0,run=%llu,kind=error;card=1,run=%llu,kind=gone",
             (unsigned long long)r0 + 2, (unsigned long long)r1 + 1);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    accel_opts o = {.weight_bits = 8};
    accel_dev *d0 = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    accel_dev *d1 = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(d0 && d1);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *s0, *s1;
    REQUIRE(accel_seq_new(d0, 16, &s0) == 0 && accel_seq_new(d1, 16, &s1) == 0);
    int32_t id = 1;
    CHECK_EQ(accel_decode(d0, 1, &s0, &id, lg), 0);
    CHECK_EQ(accel_decode(d0, 1, &s0, &id, lg), ACCEL_ERR_DEVICE); /* the run ended in ERROR */
    CHECK_EQ(health(d0), ACCEL_HEALTH_FAILED);
    CHECK_EQ(accel_decode(d0, 1, &s0, &id, lg), ACCEL_ERR_DEVICE);
    CHECK_EQ(accel_decode(d1, 1, &s1, &id, lg), ACCEL_ERR_DEVICE); /* the card disappeared */
    CHECK_EQ(health(d1), ACCEL_HEALTH_FAILED);
    accel_seq_free(d0, s0);
    accel_seq_free(d1, s1);
    accel_free(d0);
    accel_free(d1);
    /* a card that disappeared stays gone; one whose run failed is usable again after a reset */
    CHECK(devices_open("fpga-emu:1", m, &o, err, sizeof err) == NULL);
    unsetenv("TANDEM_EMU_FAULT");
    d0 = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    REQUIRE(d0);
    CHECK_EQ(accel_warmup(d0), 0);
    accel_free(d0);
    free(lg);
    model_free(m);
}
