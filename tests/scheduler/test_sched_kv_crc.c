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
#include "model/tok/tokenizer.h"
#include "scheduler/sched.h"
#include <stdlib.h>

typedef struct krec {
    int placed, tokens, done, error, status;
    char decode[32], first_decode[32];
    char text[2048];
    size_t len;
} krec;

typedef struct kenv {
    uv_loop_t loop;
    int warm, finals, want;
} kenv;

static kenv *K;

static void on_warm(void *ctx, int ok)
{
    kenv *e = ctx;
    e->warm = ok ? 1 : -1;
    uv_stop(&e->loop);
}

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
        if (r->len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->len, ev->text, ev->text_len);
            r->len += ev->text_len;
            r->text[r->len] = 0;
        }
        break;
    case SCHED_EV_CHOICE_DONE: break;
    case SCHED_EV_DONE: r->done++; break;
    case SCHED_EV_ERROR:
        r->error++;
        r->status = ev->status;
        break;
    }
    if ((ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) && ++K->finals >= K->want)
        uv_stop(&K->loop);
}

static void run_one(kenv *e, sched *s, const model_golden *g, krec *r)
{
    memset(r, 0, sizeof *r);
    sched_params p = {0};
    p.prompt = g->ids;
    p.n_prompt = g->n_ids;
    p.max_tokens = g->n_greedy;
    p.n = 1;
    p.sampling = model_sampling_default();
    p.sampling.temperature = 0;
    char err[256];
    sched_req *h;
    REQUIRE(sched_submit(s, &p, on_event, r, &h, err, sizeof err) == SCHED_OK);
    e->want++;
    if (e->finals < e->want) uv_run(&e->loop, UV_RUN_DEFAULT);
}

TEST(sched_kv_flip_on_card_detected_moved_and_marked)
{
    char err[512];
    tf_cache_env();
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    model_golden *g = model_golden_load("tests/data/golden/stories260K/lily.json", m->cfg.vocab,
                                        err, sizeof err);
    model_tok *tok = model_tok_load_dir(TF_MODEL, err, sizeof err);
    REQUIRE(g && tok);
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
    accel_dev *devs[2] = {devices_open("cpu", m, &oc, err, sizeof err),
                          devices_open("fpga-emu:0", m, &o, err, sizeof err)};
    REQUIRE(devs[0] && devs[1]);
    kenv e = {0};
    K = &e;
    uv_loop_init(&e.loop);
    sched_config cfg = {.max_waiting = 64, .max_running = 16};
    sched *sc = sched_new(&e.loop, devs, 2, tok, &cfg, on_warm, &e, err, sizeof err);
    REQUIRE(sc);
    uv_run(&e.loop, UV_RUN_DEFAULT);
    REQUIRE(e.warm == 1);

    krec a;
    run_one(&e, sc, g, &a);
    CHECK_MSG(a.done == 1 && a.error == 0, "error %d status %d", a.error, a.status);
    CHECK_STR(a.first_decode, "fpga-emu:0");
    CHECK_EQ(a.placed, 2);
    CHECK_STR(a.decode, "cpu");
    CHECK_EQ(a.tokens, g->n_greedy);
    CHECK_MSG(!strcmp(a.text, g->greedy_text), "\n got  %s\n want %s", a.text, g->greedy_text);
    sched_stats st;
    sched_get_stats(sc, &st);
    CHECK_EQ(st.moves, 1);
    CHECK_EQ(st.dev[1].kv_corrupt, 1);
    CHECK_EQ(st.dev[1].failovers, 1);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_DEGRADED);
    CHECK_EQ(fpga_dev_card(devs[1])->check_runs, 1);

    /* the fault was one run: the card takes the next request, decodes it, and is OK again */
    krec b;
    run_one(&e, sc, g, &b);
    CHECK_MSG(b.done == 1 && b.error == 0 && b.placed == 1, "error %d status %d placed %d",
              b.error, b.status, b.placed);
    CHECK_STR(b.decode, "fpga-emu:0");
    CHECK_EQ(b.tokens, g->n_greedy);
    sched_get_stats(sc, &st);
    CHECK_EQ(st.dev[1].kv_corrupt, 1);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_OK);
    /* b's prompt came in two runs: its whole blocks from the CPU's prefix cache (the KV the
     * first request left there, exported again), then the rest as it was prefilled */
    CHECK_EQ(fpga_dev_card(devs[1])->check_runs, 3);

    sched_free(sc);
    uv_run(&e.loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&e.loop), 0);
    for (int i = 0; i < 2; i++) {
        accel_info info;
        accel_get_info(devs[i], &info);
        CHECK_MSG(info.n_seqs == 0, "%s: %d sequences left", info.name, info.n_seqs);
        accel_free(devs[i]);
    }
    unsetenv("TANDEM_EMU_FAULT");
    model_tok_free(tok);
    model_golden_free(g);
    model_free(m);
}
