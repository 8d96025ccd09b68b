/* The batched decode kernel (fpga/kernels/decode_batch.c): a batch of sequences on the emulated
 * card gives each sequence exactly the logits the single-sequence kernel gives it alone on a
 * fresh card — whatever the other sequences' lengths, when sequences join or leave between
 * steps — and a fault in a batched run fails the step for every sequence of the batch, leaving
 * each where it was. The equality holds at W8A8 and at W4A8. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include "fpga/dec_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t tok(int i, int salt, int vocab)
{
    return (int32_t)((i * 31 + salt * 7 + 3) % vocab);
}

/* The logits of decoding tok(0..n, salt) one run per token on a fresh card (card 1: the tests'
 * own device is card 0) at wbits-bit weights. */
static void alone(const model *m, int wbits, int n, int salt, float *lg)
{
    char err[256];
    accel_opts o = {.weight_bits = wbits};
    accel_dev *d = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(d);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n + 1, &s) == 0);
    for (int i = 0; i < n; i++) {
        int32_t id = tok(i, salt, m->cfg.vocab);
        REQUIRE(accel_decode(d, 1, &s, &id, lg) == 0);
    }
    accel_seq_free(d, s);
    accel_free(d);
}

typedef struct bseq {
    accel_seq *s;
    int salt, len;
} bseq;

/* One batched step over the live entries of v (len < 0: not in the batch); logits per entry. */
static int bstep(accel_dev *d, bseq *v, int n, float *lg, int *rows)
{
    accel_seq *seqs[16] = {0}; /* zeroed: gcc -O1 (the ASan build) saw them maybe unset */
    int32_t ids[16] = {0};
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (v[i].len < 0) continue;
        if (k == 16) return ACCEL_ERR_INVALID; /* more than the arrays hold */
        seqs[k] = v[i].s;
        ids[k] = tok(v[i].len, v[i].salt, accel_model(d)->cfg.vocab);
        rows[i] = k++;
    }
    int st = accel_decode(d, k, seqs, ids, lg);
    if (!st)
        for (int i = 0; i < n; i++)
            if (v[i].len >= 0) v[i].len++;
    return st;
}

/* Sequences of very different lengths (1 to 300 positions, some across KV blocks) stepped
 * together: every step's logits of every sequence equal its decode alone, with W8A8 and with
 * W4A8 weights (g128). */
static void equals_alone(int wbits)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", wbits, &m, &d)) return;
    accel_info info;
    accel_get_info(d, &info);
    REQUIRE(info.max_batch >= 6);
    char want[16];
    snprintf(want, sizeof want, "W%dA8", wbits); /* the image runs at the width asked */
    CHECK_MSG(strstr(info.desc, want) != NULL, "%s: not %s", info.desc, want);
    const int V = m->cfg.vocab, NS = 6, STEPS = 4;
    const int start[6] = {1, 300, 17, 129, 2, 64};
    bseq v[6];
    float *lg = malloc(sizeof(float) * V * 16), *r = malloc(sizeof(float) * V);
    for (int i = 0; i < NS; i++) {
        v[i] = (bseq){.salt = i + 1, .len = 0};
        REQUIRE(accel_seq_new(d, start[i] + STEPS + 1, &v[i].s) == 0);
        /* the history one token per run, as alone() does */
        for (int p = 0; p < start[i]; p++) {
            int32_t id = tok(p, v[i].salt, V);
            REQUIRE(accel_decode(d, 1, &v[i].s, &id, lg) == 0);
        }
        v[i].len = start[i];
    }
    fpga_card *c = fpga_dev_card(d);
    uint64_t runs0 = c->decb_runs, dec0 = c->dec_runs;
    float *keep = malloc(sizeof(float) * V * NS);
    int rows[6];
    for (int k = 0; k < STEPS; k++) REQUIRE(bstep(d, v, NS, lg, rows) == 0);
    for (int i = 0; i < NS; i++) memcpy(keep + (size_t)i * V, lg + (size_t)rows[i] * V, sizeof(float) * V);
    /* the timing model prices the last run command for command (blocks interleaved by the
     * sequences' histories, so several runs per stream) */
    {
        fpga_dec_kvmap km[6];
        uint32_t pos[6];
        for (int i = 0; i < NS; i++) {
            REQUIRE(fpga_dev_seq_kvmap(d, v[i].s, &km[i]) == 0);
            pos[i] = (uint32_t)v[i].len - 1;
        }
        fpga_dec_cost mc;
        fpga_dec_model_step_batch(&c->desc, NS, pos, km, &mc);
        const fpga_emu_run_stats *e = &c->last_decb;
        int chans = 0;
        for (int ch = 0; ch < FPGA_DEC_CH; ch++)
            chans += mc.chan_bytes[ch] != e->chan_bytes[ch] || mc.chan_cmds[ch] != e->chan_cmds[ch];
        CHECK_EQ(chans, 0);
        CHECK_EQ(mc.compute_ns, e->compute_ns);
        CHECK_EQ(mc.stall_ns, e->stall_ns);
        CHECK_EQ(mc.modeled_ns, e->modeled_ns);
    }
    CHECK_EQ(c->decb_runs - runs0, (uint64_t)STEPS); /* one run per step, */
    CHECK_EQ(c->dec_runs, dec0);                     /* not one per sequence */
    for (int i = 0; i < NS; i++) {
        alone(m, wbits, start[i] + STEPS, v[i].salt, r);
        CHECK_MSG(memcmp(keep + (size_t)i * V, r, sizeof(float) * V) == 0,
                  "W%d: sequence %d (length %d) differs from alone", wbits, i, start[i]);
    }
    for (int i = 0; i < NS; i++) accel_seq_free(d, v[i].s);
    free(lg), free(r), free(keep);
    accel_free(d);
    model_free(m);
}

TEST(fpga_batch_equals_alone_mixed_lengths)
{
    equals_alone(8);
}

TEST(fpga_batch_equals_alone_w4)
{
    equals_alone(4);
}

/* Continuous batching on the card: the batch grows and shrinks between steps (joins, leaves,
 * a lone sequence, all back); each sequence's last logits equal its decode alone. */
TEST(fpga_batch_joins_and_leaves)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    const int V = m->cfg.vocab, NS = 5;
    bseq v[5];
    float *lg = malloc(sizeof(float) * V * 16), *r = malloc(sizeof(float) * V);
    float *last = malloc(sizeof(float) * V * NS);
    for (int i = 0; i < NS; i++) {
        v[i] = (bseq){.salt = 10 + i, .len = -1};
        REQUIRE(accel_seq_new(d, 64, &v[i].s) == 0);
    }
    /* which sequences are in the batch at each step: 1 = in */
    static const char plan[9][6] = {"11000", "11100", "11111", "01111", "00100",
                                    "10110", "11011", "00011", "11111"};
    int rows[5];
    for (int k = 0; k < 9; k++) {
        for (int i = 0; i < NS; i++) {
            int in = plan[k][i] == '1';
            if (in && v[i].len < 0) v[i].len = v[i].len == -1 ? 0 : -(v[i].len + 2); /* join */
            if (!in && v[i].len >= 0) v[i].len = -(v[i].len + 2);                    /* leave */
        }
        REQUIRE(bstep(d, v, NS, lg, rows) == 0);
        for (int i = 0; i < NS; i++)
            if (v[i].len >= 0) memcpy(last + (size_t)i * V, lg + (size_t)rows[i] * V, sizeof(float) * V);
    }
    for (int i = 0; i < NS; i++) {
        int len = v[i].len >= 0 ? v[i].len : -(v[i].len + 2);
        alone(m, 8, len, v[i].salt, r);
        CHECK_MSG(memcmp(last + (size_t)i * V, r, sizeof(float) * V) == 0, "sequence %d differs", i);
        accel_seq_free(d, v[i].s);
    }
    free(lg), free(r), free(last);
    accel_free(d);
    model_free(m);
}

/* A batched run that fails on the card: the step fails for every sequence of the batch with
 * ACCEL_ERR_DEVICE, none of them advances, and the device is FAILED (the scheduler then moves
 * each of them elsewhere: tests/e2e/serve_card_batch.sh). */
TEST(fpga_batch_fault_fails_every_sequence)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu:1", 8, &m, &d)) return;
    const int V = m->cfg.vocab;
    fpga_emu_card_stats cs;
    REQUIRE(tf_card_stats(d, &cs) == 0);
    bseq v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = (bseq){.salt = i, .len = 0};
        REQUIRE(accel_seq_new(d, 32, &v[i].s) == 0);
    }
    float *lg = malloc(sizeof(float) * V * 16);
    int rows[4];
    REQUIRE(bstep(d, v, 4, lg, rows) == 0);
    REQUIRE(tf_card_stats(d, &cs) == 0);
    for (int i = 0; i < 4; i++) accel_seq_free(d, v[i].s);
    accel_free(d);
    /* the same again on a fresh card, its second run (the second batched step) ends in error */
    char spec[96], err[256];
    snprintf(spec, sizeof spec, "card=1,run=%llu,kind=error", (unsigned long long)cs.runs_started + 1);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    accel_opts o = {.weight_bits = 8};
    d = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    unsetenv("TANDEM_EMU_FAULT");
    REQUIRE(d);
    for (int i = 0; i < 4; i++) {
        v[i] = (bseq){.salt = i, .len = 0};
        REQUIRE(accel_seq_new(d, 32, &v[i].s) == 0);
    }
    REQUIRE(bstep(d, v, 4, lg, rows) == 0);
    CHECK_EQ(bstep(d, v, 4, lg, rows), ACCEL_ERR_DEVICE);
    for (int i = 0; i < 4; i++) CHECK_EQ(accel_seq_len(d, v[i].s), 1);
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.health, ACCEL_HEALTH_FAILED);
    for (int i = 0; i < 4; i++) accel_seq_free(d, v[i].s);
    free(lg);
    accel_free(d);
    model_free(m);
}
