/* Corrupt KV on the live hand-over, end to end through the scheduler: the CPU prefills, an
 * emulated U280 (fpga-emu) decodes, the KV travels in the wire format with the CRCs the
 * prefill worker computed. A bit flipped in the card's HBM after a layer landed (the emulator's
 * fault injection, before the last layer's scatter run) is caught by the card's check of the
 * complete run: the request is not decoded from it, it moves to the CPU and completes with the
 * CPU's greedy text, the card is marked (DEGRADED) and the corrupt import counted. The next
 * request decodes on the card again (the fault was one run) and clears the mark. */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/fpga/fpga_util.h"
#include "devices/devices.h"
#include "model/ckpt/golden.h"
#include "tests/scheduler/sched_env.h"
#include <stdlib.h>

typedef struct krec {
    int placed, tokens, done, error, status;
    char decode[ACCEL_NAME_MAX + 1], first_decode[ACCEL_NAME_MAX + 1];
    char text[2048];
    size_t len;
} krec;

static sched_env *K;

static void on_event(void *ctx, const sched_event *ev)
{
    krec *r = ctx;
    switch (ev->type) {
    case SCHED_EV_PLACED:
        if (!r->placed++) snprintf(r->first_decode, sizeof r->first_decode, "%s", ev->decode_dev);
        snprintf(r->decode, sizeof r->decode, "%s", ev->decode_dev);
        break;
    case SCHED_EV_TOKEN:
        r->tokens++;
        sched_env_text(r->text, sizeof r->text, &r->len, ev);
        break;
    case SCHED_EV_CHOICE_DONE: break;
    case SCHED_EV_DONE: r->done++; break;
    case SCHED_EV_ERROR:
        r->error++;
        r->status = ev->status;
        break;
    }
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) sched_env_final(K);
}

static void run_one(sched_env *e, const model_golden *g, krec *r)
{
    memset(r, 0, sizeof *r);
    sched_params p = sched_env_greedy(g->ids, g->n_ids, g->n_greedy, 1);
    char err[256];
    sched_req *h;
    REQUIRE(sched_submit(e->s, &p, on_event, r, &h, err, sizeof err) == SCHED_OK);
    sched_env_run(e, e->want + 1);
}

TEST(sched_kv_flip_on_card_detected_moved_and_marked)
{
    char err[512];
    tf_cache_env();
    sched_env e;
    K = &e;
    REQUIRE(sched_env_load(&e) == 0);
    const model *m = e.m;
    model_golden *g = model_golden_load("tests/data/golden/stories260K/lily.json", m->cfg.vocab,
                                        err, sizeof err);
    REQUIRE(g);
    const int L = m->cfg.n_layers, cap = g->n_ids + g->n_greedy;
    /* Where the first request's KV will be on a fresh card: its runs while opening (the weight
     * upload), then the scheduler's warm-up (one decode run) and one scatter run per layer (the
     * prompt is one piece); its sequence is the first one placed. Flip bit 6 of a K value of
     * layer 0 (position 3, head 2) before run L of the import: layer 0 landed long before. */
    accel_opts o = {.weight_bits = 8};
    accel_dev *card = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    REQUIRE(card);
    fpga_emu_card_stats cs;
    REQUIRE(tf_card_stats(card, &cs) == 0);
    accel_seq *s;
    REQUIRE(accel_seq_new(card, cap, &s) == 0);
    char spec[160];
    tf_kv_flip_spec(card, s, 0, 3, 2, 1, 6, cs.runs_started + 1 + (uint64_t)L, 4, spec, sizeof spec);
    accel_seq_free(card, s);
    accel_free(card);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    accel_opts oc = {.threads = 1};
    REQUIRE(sched_env_add(&e, devices_open("cpu", m, &oc, err, sizeof err), err) == 0);
    REQUIRE(sched_env_add(&e, devices_open("fpga-emu:0", m, &o, err, sizeof err), err) == 0);
    sched_config cfg = {.max_waiting = 64, .max_running = 16};
    REQUIRE(sched_env_start(&e, &cfg) == 0);

    krec a;
    run_one(&e, g, &a);
    CHECK_MSG(a.done == 1 && a.error == 0, "error %d status %d", a.error, a.status);
    CHECK_STR(a.first_decode, "fpga-emu:0");
    CHECK_EQ(a.placed, 2);
    CHECK_STR(a.decode, "cpu");
    CHECK_EQ(a.tokens, g->n_greedy);
    CHECK_MSG(!strcmp(a.text, g->greedy_text), "\n got  %s\n want %s", a.text, g->greedy_text);
    sched_stats st;
    sched_get_stats(e.s, &st);
    CHECK_EQ(st.moves, 1);
    CHECK_EQ(st.dev[1].kv_corrupt, 1);
    CHECK_EQ(st.dev[1].failovers, 1);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_DEGRADED);
    CHECK_EQ(fpga_dev_card(e.devs[1])->check_runs, 1);

    /* the fault was one run: the card takes the next request, decodes it, and is OK again */
    krec b;
    run_one(&e, g, &b);
    CHECK_MSG(b.done == 1 && b.error == 0 && b.placed == 1, "error %d status %d placed %d",
              b.error, b.status, b.placed);
    CHECK_STR(b.decode, "fpga-emu:0");
    CHECK_EQ(b.tokens, g->n_greedy);
    sched_get_stats(e.s, &st);
    CHECK_EQ(st.dev[1].kv_corrupt, 1);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_OK);
    /* b's prompt came in two runs: its whole blocks from the CPU's prefix cache (the KV the
     * first request left there, exported again), then the rest as it was prefilled */
    CHECK_EQ(fpga_dev_card(e.devs[1])->check_runs, 3);

    sched_env_close(&e);
    unsetenv("TANDEM_EMU_FAULT");
    model_golden_free(g);
}
