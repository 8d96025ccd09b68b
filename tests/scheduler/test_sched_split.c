/* Tests for the scheduler's split placement on real threads: the CPU backend prefills and the
 * simulated cards of tests/scheduler/tcard.h decode from the KV shipped to them layer by layer.
 * Text at temperature 0 equals what the decode device produces for the prompt alone (cards:
 * CPU prefill + import + card decode, as `tandem generate --device <card>` runs it; CPU: the
 * golden greedy text), under concurrency and with chunked prefill; fallback to the CPU when the
 * cards are busy; failover when an import fails, a card faults or times out mid-decode;
 * cancellation at every stage frees every sequence on every device. */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/scheduler/tcard.h"
#include "devices/devices.h"
#include "model/gen/gen.h"
#include "model/ckpt/golden.h"
#include "tests/scheduler/sched_env.h"
#include <pthread.h>

#define MAX_REQS 48

typedef struct rec {
    sched_req *r;
    int placed, tokens, done, error, status, after_final, cancel_after;
    int cancel_other, cancel_other_at; /* at its cancel_other_at-th token: cancel recs[cancel_other - 1] */
    char prefill[ACCEL_NAME_MAX + 1], decode[ACCEL_NAME_MAX + 1], first_decode[ACCEL_NAME_MAX + 1];
    char text[2048];
    size_t len;
} rec;

typedef struct env {
    sched_env se; /* devs[0]: the CPU, then the cards */
    rec recs[MAX_REQS];
    int n_recs;
} env;

static env *E;

static void on_event(void *ctx, const sched_event *ev)
{
    rec *r = ctx;
    if (r->done || r->error) r->after_final++;
    switch (ev->type) {
    case SCHED_EV_PLACED:
        if (!r->placed) snprintf(r->first_decode, sizeof r->first_decode, "%s", ev->decode_dev);
        r->placed++;
        snprintf(r->prefill, sizeof r->prefill, "%s", ev->prefill_dev);
        snprintf(r->decode, sizeof r->decode, "%s", ev->decode_dev);
        break;
    case SCHED_EV_TOKEN:
        r->tokens++;
        sched_env_text(r->text, sizeof r->text, &r->len, ev);
        if (r->cancel_after && r->tokens == r->cancel_after) {
            sched_cancel(E->se.s, r->r);
            sched_env_final(&E->se);
        }
        if (r->cancel_other && r->tokens == r->cancel_other_at) {
            sched_cancel(E->se.s, E->recs[r->cancel_other - 1].r);
            sched_env_final(&E->se);
        }
        break;
    case SCHED_EV_CHOICE_DONE: break;
    case SCHED_EV_DONE: r->done++; break;
    case SCHED_EV_ERROR:
        r->error++;
        r->status = ev->status;
        break;
    }
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) sched_env_final(&E->se);
}

/* cpu + n_cards test cards (faults for card i in f[i], may be NULL; a card with f[i].gpu set
 * plays a GPU). */
static int env_open(env *e, int n_cards, const tcard_faults *f, int max_running, double tbt_ms)
{
    memset(e, 0, sizeof *e);
    E = e;
    if (sched_env_open_cpu(&e->se) < 0) return -1;
    char err[256];
    for (int i = 0; i < n_cards; i++)
        if (sched_env_add(&e->se, tcard_open(i, e->se.m, f ? &f[i] : NULL, err, sizeof err), err) < 0)
            return -1;
    sched_config cfg = {.max_waiting = 64, .max_running = max_running, .tbt_budget_ms = tbt_ms};
    return sched_env_start(&e->se, &cfg);
}

/* Every sequence freed on every device, the loop closes cleanly. */
static void env_close(env *e)
{
    sched_env_close(&e->se);
}

static const accel_sparse *submit_sparse; /* the next submits' sparse prefill (NULL: dense) */

static int submit(env *e, const int32_t *ids, int n, int max_tokens)
{
    rec *r = &e->recs[e->n_recs];
    memset(r, 0, sizeof *r);
    sched_params p = sched_env_greedy(ids, n, max_tokens, 1);
    p.sparse = submit_sparse;
    char err[256];
    int st = sched_submit(e->se.s, &p, on_event, r, &r->r, err, sizeof err);
    CHECK_MSG(st == SCHED_OK, "submit: %s", err);
    return e->n_recs++;
}

static void run_until_final(env *e, int n)
{
    sched_env_run(&e->se, n);
}

/* Runs the loop until nothing runs or waits (cancelled requests have no final event to wait
 * for), at most ~2 s; the stats then in st. */
static void run_until_idle(env *e, sched_stats *st)
{
    for (int spins = 0; spins < 2000; spins++) {
        sched_get_stats(e->se.s, st);
        if (st->n_running == 0 && st->n_waiting == 0) return;
        uv_run(&e->se.loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    sched_get_stats(e->se.s, st);
}

/* Runs the loop until recs[i] has had n tokens (or its end), at most ~2 s. */
static void run_until_tokens(env *e, int i, int n)
{
    for (int spins = 0; spins < 2000 && e->recs[i].tokens < n && !e->recs[i].done && !e->recs[i].error;
         spins++) {
        uv_run(&e->se.loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* What a card produces for ids alone: CPU prefill exporting its KV into a fresh card, the first
 * token from the prefill's logits, the rest decoded on the card; greedy, the scheduler's text
 * rules (model/gen.h). */
typedef struct ship {
    accel_dev *to;
    accel_seq *seq;
} ship;

static int ship_layer(void *ctx, const proto_kv_layer *c)
{
    ship *s = ctx;
    return accel_kv_import(s->to, s->seq, c);
}

static void card_reference(env *e, const int32_t *ids, int n, int max_tokens, char *out, size_t outlen)
{
    char err[256];
    out[0] = 0;
    accel_opts o = {.threads = 1};
    accel_dev *p = devices_open("cpu", e->se.m, &o, err, sizeof err);
    accel_dev *c = tcard_open(9, e->se.m, NULL, err, sizeof err);
    int vocab = e->se.m->cfg.vocab;
    float *lg = malloc(sizeof(float) * (size_t)vocab);
    accel_seq *ps = NULL, *cs = NULL;
    REQUIRE(p && c && lg);
    REQUIRE(accel_seq_new(p, n, &ps) == 0 && accel_seq_new(c, n + max_tokens, &cs) == 0);
    ship sh = {c, cs};
    accel_kv_sink sink = {ship_layer, &sh};
    accel_prefill_req pr = {.seq = ps, .ids = ids, .n = n, .logits = lg, .kv = &sink};
    REQUIRE(accel_prefill(p, &pr) == 0);
    model_gen_params gp = {.sampling = model_sampling_default(), .max_tokens = max_tokens,
                           .n_ctx = e->se.m->cfg.max_pos, .eos_ids = e->se.m->cfg.eos_ids,
                           .n_eos = e->se.m->cfg.n_eos, .skip_special = 1};
    gp.sampling.temperature = 0;
    model_gen *g = model_gen_new(e->se.tok, &gp, vocab, ids, n, 0, err, sizeof err);
    REQUIRE(g);
    size_t len = 0;
    for (;;) {
        model_gen_out go;
        REQUIRE(model_gen_step(g, lg, &go) == 0);
        if (len + go.len < outlen) {
            memcpy(out + len, go.text, go.len);
            len += go.len;
            out[len] = 0;
        }
        if (go.finish != MODEL_FINISH_NONE) break;
        REQUIRE(accel_decode(c, 1, &cs, &go.token, lg) == 0);
    }
    model_gen_free(g);
    accel_seq_free(p, ps);
    accel_seq_free(c, cs);
    accel_free(p);
    accel_free(c);
    free(lg);
}

static model_golden *golden[8];
static int n_golden;

static void load_golden(env *e)
{
    char **paths;
    char err[256];
    n_golden = model_golden_list("tests/data/golden/stories260K", &paths);
    for (int i = 0; i < n_golden; i++) {
        if (i < 8) golden[i] = model_golden_load(paths[i], e->se.m->cfg.vocab, err, sizeof err);
        free(paths[i]);
    }
    free(paths);
    if (n_golden > 8) n_golden = 8;
}

static void free_golden(void)
{
    for (int i = 0; i < n_golden; i++) model_golden_free(golden[i]);
}

TEST(sched_split_text_per_decode_device)
{
    env e;
    if (env_open(&e, 2, NULL, 16, 0) < 0) return;
    load_golden(&e);
    REQUIRE(n_golden >= 4);
    /* every golden prompt three times at once: the two cards take the first two, the CPU falls
     * back for the rest while they are busy, and cards free up for later ones */
    int idx[24], which[24], k = 0;
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < n_golden && k < 24; i++) {
            which[k] = i;
            idx[k++] = submit(&e, golden[i]->ids, golden[i]->n_ids, golden[i]->n_greedy);
        }
    run_until_final(&e, k);
    char ref[8][2048];
    for (int i = 0; i < n_golden; i++) card_reference(&e, golden[i]->ids, golden[i]->n_ids, golden[i]->n_greedy, ref[i], sizeof ref[i]);
    int on_cards = 0, on_cpu = 0;
    for (int j = 0; j < k; j++) {
        rec *r = &e.recs[idx[j]];
        const model_golden *g = golden[which[j]];
        CHECK_MSG(r->done == 1 && r->error == 0 && r->placed == 1, "%s: done %d error %d", g->name, r->done, r->error);
        CHECK_STR(r->prefill, "cpu");
        if (!strncmp(r->decode, "tcard:", 6)) {
            on_cards++;
            CHECK_MSG(!strcmp(r->text, ref[which[j]]), "%s on %s:\n got  %s\n want %s", g->name, r->decode, r->text, ref[which[j]]);
        } else {
            on_cpu++;
            CHECK_STR(r->decode, "cpu");
            CHECK_MSG(!strcmp(r->text, g->greedy_text), "%s on cpu:\n got  %s\n want %s", g->name, r->text, g->greedy_text);
        }
    }
    /* the devices' numerics differ (int4 KV on the card): each text is its device's */
    for (int i = 0; i < n_golden; i++) CHECK(strcmp(ref[i], golden[i]->greedy_text) != 0);
    CHECK(on_cards >= 2);
    CHECK(on_cpu >= 1);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.placements_split, (uint64_t)on_cards);
    CHECK_EQ(st.placements_fallback, (uint64_t)on_cpu);
    CHECK(st.dev[1].kv_chunks > 0 && st.dev[1].decodes > 0);
    CHECK_EQ(st.dev[0].prefills, (uint64_t)k);
    CHECK_EQ(st.moves, 0);
    free_golden();
    env_close(&e);
}

TEST(sched_split_chunked_prefill_same_text)
{
    /* A budget far below one token's time: every prefill that meets a decode on the CPU runs in
     * SCHED_CHUNK_MIN-token chunks. Chunks append to the sequence (and their KV to the card's),
     * so the texts are the same as unchunked. */
    env e;
    if (env_open(&e, 1, NULL, 16, 0.001) < 0) return;
    load_golden(&e);
    int idx[16], which[16], k = 0;
    for (int rep = 0; rep < 2; rep++)
        for (int i = 0; i < n_golden && k < 16; i++) {
            which[k] = i;
            idx[k++] = submit(&e, golden[i]->ids, golden[i]->n_ids, golden[i]->n_greedy);
        }
    run_until_final(&e, k);
    char ref[8][2048];
    for (int i = 0; i < n_golden; i++) card_reference(&e, golden[i]->ids, golden[i]->n_ids, golden[i]->n_greedy, ref[i], sizeof ref[i]);
    int chunked_prompt_tokens = 0;
    for (int j = 0; j < k; j++) {
        rec *r = &e.recs[idx[j]];
        const char *want = !strcmp(r->decode, "cpu") ? golden[which[j]]->greedy_text : ref[which[j]];
        CHECK(r->done == 1);
        CHECK_MSG(!strcmp(r->text, want), "%s on %s:\n got  %s\n want %s", golden[which[j]]->name, r->decode, r->text, want);
        chunked_prompt_tokens += golden[which[j]]->n_ids;
    }
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_MSG(st.dev[0].prefill_chunks > (uint64_t)k, "%llu chunks for %d prefills", (unsigned long long)st.dev[0].prefill_chunks, k);
    /* even the smallest chunk costs more than the budget: chunks ran a few layers per call
     * (accel.h layer-split), their KV still reached the cards layer by layer, the texts unchanged */
    CHECK_MSG(st.dev[0].prefill_split_calls > 0, "no layer-split call in %llu prefill calls",
              (unsigned long long)st.dev[0].prefill_chunks);
    /* every call beside a decode overran a 1 us budget and is counted with its overrun; the first
     * prompt's call, with nothing decoding yet, ran whole outside any budget and is not */
    CHECK_MSG(st.dev[0].prefill_over_calls > 0 && st.dev[0].prefill_over_calls < st.dev[0].prefill_chunks,
              "%llu over-budget calls of %llu", (unsigned long long)st.dev[0].prefill_over_calls,
              (unsigned long long)st.dev[0].prefill_chunks);
    CHECK(st.dev[0].prefill_over_seconds > 0 && st.dev[0].prefill_over_seconds <= st.dev[0].busy_seconds);
    free_golden();
    env_close(&e);
}

static int32_t once[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */

/* TANDEM_SCHED_TRACE's log of a worker (sched_worker.c): every line well formed, each event's
 * end at or after its start, the events in time order; *steps decode steps, *calls prefill calls
 * beside them, of which *sparse_calls of cost kind `kind` with whole blocks of `block` tokens
 * (or the sparse part's end at `send`), each planned at no less than its prediction. */
static int check_trace(const char *path, int kind, int block, int send, int *steps, int *calls, int *sparse_calls)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    double last = 0;
    int bad = 0;
    *steps = *calls = *sparse_calls = 0;
    while (fgets(line, sizeof line, f)) {
        double t0, t1, pred, left, plan;
        int rows, k, tok, pos, l0, nl, first;
        if (line[0] == 'I' && sscanf(line, "I %lf", &t0) == 1) {
            t1 = t0;
        } else if (line[0] == 'D' && sscanf(line, "D %lf %lf %d", &t0, &t1, &rows) == 3) {
            bad += rows < 1;
            ++*steps;
        } else if (line[0] == 'P' && sscanf(line, "P %lf %lf %d %d %d %d %d %lf %lf %d %lf", &t0, &t1, &k, &tok, &pos,
                                            &l0, &nl, &pred, &left, &first, &plan) == 11) {
            bad += tok < 1 || pos < 0 || l0 < 0 || nl < 0 || (first != 0 && first != 1) || plan < pred * (1 - 1e-6);
            ++*calls;
            if (k == kind) {
                bad += tok % block != 0 && pos + tok != send;
                ++*sparse_calls;
            }
        } else {
            bad++;
            continue;
        }
        bad += t1 < t0 || t0 < last;
        last = t1;
    }
    fclose(f);
    return bad ? -1 : 0;
}

TEST(sched_sparse_prompt_prefills_in_chunks_beside_decodes)
{
    /* A sparse prompt that meets a decode on the CPU (a budget far below one token's time) runs
     * in block-aligned sparse chunks (sparse/sparse.h), each attending over everything cached
     * before it: with every block kept (XAttention threshold 1) its text is the dense prompt's. */
    env e;
    char trace[512], trace0[520];
    snprintf(trace, sizeof trace, "%s/sched_trace", t_tmpdir());
    snprintf(trace0, sizeof trace0, "%s.0", trace);
    remove(trace0);
    setenv("TANDEM_SCHED_TRACE", trace, 1); /* the workers' log (sched_worker.c), checked below */
    int opened = env_open(&e, 0, NULL, 16, 0.001);
    unsetenv("TANDEM_SCHED_TRACE");
    if (opened < 0) return;
    int32_t ids[480];
    ids[0] = 1;
    for (int i = 1; i < 480; i++) ids[i] = (int32_t)((i * 37 + 11) % 500 + 3);
    sched_stats st0;
    sched_get_stats(e.se.s, &st0);
    int a = submit(&e, once, 5, 200); /* decodes while the sparse prompt prefills */
    accel_sparse sp;
    sparse_params_default(&sp.p, SPARSE_MODE_XATTN);
    sp.p.xattention_threshold = 1.0;
    sp.p.xattention_block_size = 32;
    sp.p.xattention_stride = 4;
    sp.p.num_last_dense_tokens_in_prefill = 0;
    submit_sparse = &sp;
    int b = submit(&e, ids, 480, 8);
    submit_sparse = NULL;
    run_until_final(&e, 2);
    sched_stats st1;
    sched_get_stats(e.se.s, &st1);
    int c = submit(&e, ids, 480, 8); /* dense, alone */
    run_until_final(&e, 3);
    CHECK(e.recs[a].done == 1 && e.recs[b].done == 1 && e.recs[c].done == 1);
    CHECK_MSG(!strcmp(e.recs[b].text, e.recs[c].text), "sparse %s\n dense  %s", e.recs[b].text,
              e.recs[c].text);
    uint64_t chunks = st1.dev[0].prefill_chunks - st0.dev[0].prefill_chunks;
    CHECK_MSG(chunks > 2, "%llu prefill calls: the sparse prompt was not chunked",
              (unsigned long long)chunks);
    /* and its chunks were layer-split (one block costs more than the budget), same text */
    CHECK(st1.dev[0].prefill_split_calls > st0.dev[0].prefill_split_calls);
    env_close(&e);
    /* the trace (closed when the worker ended): decode steps, and the calls beside them, the
     * sparse ones (cost kind 1 + mode) in whole 32-token blocks */
    int steps = 0, calls = 0, sparse_calls = 0;
    CHECK_MSG(check_trace(trace0, 1 + SPARSE_MODE_XATTN, 32, 480, &steps, &calls, &sparse_calls) == 0,
              "%s: a malformed or unordered line", trace0);
    CHECK_MSG(steps >= 8 && sparse_calls > 2 && calls >= sparse_calls &&
                  (uint64_t)calls <= st1.dev[0].prefill_chunks - st0.dev[0].prefill_chunks,
              "%d steps, %d calls (%d sparse) of %llu", steps, calls, sparse_calls,
              (unsigned long long)(st1.dev[0].prefill_chunks - st0.dev[0].prefill_chunks));
    remove(trace0);
}

TEST(sched_layer_split_cancel_mid_chunk)
{
    /* a long prompt prefills a few layers per call beside a decode (a budget far below one
     * call), and is cancelled once its layer-split calls are under way: the decode's text is the
     * golden one, and every sequence and KV block comes back (env_close). The decode runs past
     * eos so that it outlasts the prompt's first calls however the threads are scheduled (with
     * a decode as short as the golden one, a loaded machine finished it before the prompt's
     * first call: a whole call, no split). */
    env e;
    if (env_open(&e, 0, NULL, 16, 0.001) < 0) return;
    load_golden(&e);
    REQUIRE(n_golden >= 1);
    const model_golden *g = golden[0];
    int32_t ids[480];
    ids[0] = 1;
    for (int i = 1; i < 480; i++) ids[i] = (int32_t)((i * 41 + 7) % 500 + 3);
    sched_params pa = sched_env_greedy(g->ids, g->n_ids, g->n_greedy + 400, 1);
    pa.ignore_eos = 1;
    rec *ra = &e.recs[e.n_recs++];
    memset(ra, 0, sizeof *ra);
    char err[256];
    REQUIRE(sched_submit(e.se.s, &pa, on_event, ra, &ra->r, err, sizeof err) == SCHED_OK);
    run_until_tokens(&e, 0, 1); /* b arrives once a decodes: its prefill meets a decode */
    int b = submit(&e, ids, 480, 8);
    sched_stats st;
    for (int spins = 0; spins < 4000; spins++) { /* until b's chunks run a few layers a call */
        sched_get_stats(e.se.s, &st);
        if (st.dev[0].prefill_split_calls > 0 || ra->done || e.recs[b].done) break;
        uv_run(&e.se.loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    CHECK_MSG(st.dev[0].prefill_split_calls > 0, "no layer-split call (a done %d, b done %d)", ra->done,
              e.recs[b].done);
    sched_cancel(e.se.s, e.recs[b].r); /* mid-chunk: its pending layers are abandoned */
    run_until_final(&e, 1); /* a's end (b, cancelled, has no final event) */
    run_until_idle(&e, &st);
    CHECK(ra->done == 1);
    CHECK_MSG(!strncmp(ra->text, g->greedy_text, strlen(g->greedy_text)), "got  %s\n want %s...", ra->text,
              g->greedy_text);
    CHECK_EQ(e.recs[b].done, 0);
    free_golden();
    env_close(&e);
}

TEST(sched_split_failover_card_fault_mid_decode)
{
    /* card 0 faults on its 5th decode step; the request moves and still completes */
    tcard_faults f[2] = {{.decode_fault_at = 5}, {0}};
    env e;
    if (env_open(&e, 2, f, 16, 0) < 0) return;
    int a = submit(&e, once, 5, 40);
    run_until_final(&e, 1);
    rec *r = &e.recs[a];
    CHECK_MSG(r->done == 1 && r->error == 0, "error %d status %d", r->error, r->status);
    CHECK_STR(r->first_decode, "tcard:0");
    CHECK_EQ(r->placed, 2);
    CHECK_STR(r->decode, "tcard:1"); /* another idle card, not the fallback */
    CHECK_EQ(r->tokens, 40);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.moves, 1);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_FAILED);
    CHECK_EQ(st.dev[1].failovers, 1);
    CHECK(sched_can_serve(e.se.s, NULL));
    /* the node keeps serving on what is left */
    int b = submit(&e, once, 5, 8);
    run_until_final(&e, 2);
    CHECK(e.recs[b].done == 1);
    CHECK_STR(e.recs[b].decode, "tcard:1");
    env_close(&e);
}

TEST(sched_split_failover_import_and_timeout)
{
    /* card 0's 3rd import is corrupt; card 1 times out on its 2nd step: the first request moves
     * twice (card 0 -> card 1 -> the CPU, every card marked) and completes */
    tcard_faults f[2] = {{.import_corrupt_at = 3}, {.decode_timeout_at = 2}};
    env e;
    if (env_open(&e, 2, f, 16, 0) < 0) return;
    int a = submit(&e, once, 5, 30);
    run_until_final(&e, 1);
    rec *r = &e.recs[a];
    CHECK_MSG(r->done == 1 && r->error == 0, "error %d status %d", r->error, r->status);
    CHECK_EQ(r->placed, 3);
    CHECK_STR(r->first_decode, "tcard:0");
    CHECK_STR(r->decode, "cpu");
    CHECK_EQ(r->tokens, 30);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.moves, 2);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_DEGRADED);
    CHECK_EQ(st.dev[2].info.health, ACCEL_HEALTH_DEGRADED);
    /* (its text: the tokens made before each move, then the CPU's continuation after
     * re-prefilling prompt + those tokens; no single device's output to compare with) */
    env_close(&e);
}

TEST(sched_split_cancel_everywhere)
{
    /* slow cards: requests are caught waiting, prefilling, importing and decoding */
    tcard_faults f[2] = {{.decode_ms = 2}, {.decode_ms = 2}};
    env e;
    if (env_open(&e, 2, f, 4, 0) < 0) return;
    int n = 0;
    for (int i = 0; i < 12; i++) {
        int j = submit(&e, once, 5, 200);
        e.recs[j].cancel_after = 1 + i % 6; /* after a few tokens */
        n++;
    }
    /* and two cancelled right away (one waiting, one running) */
    int w = submit(&e, once, 5, 100);
    sched_cancel(e.se.s, e.recs[w].r);
    run_until_final(&e, n);
    /* the rest drains */
    sched_stats st;
    run_until_idle(&e, &st);
    CHECK_EQ(st.n_running, 0);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(e.recs[i].done + e.recs[i].error, 0);
        CHECK_EQ(e.recs[i].after_final, 0);
    }
    for (int i = 0; i < e.se.n_devs; i++) {
        accel_info info;
        accel_get_info(e.se.devs[i], &info);
        CHECK_MSG(info.n_seqs == 0, "%s holds %d sequences", info.name, info.n_seqs);
        CHECK_EQ(st.dev[i].running, 0);
    }
    env_close(&e);
}

TEST(sched_split_deadline_on_a_card)
{
    /* a slow card: the request's deadline passes while the card decodes it */
    tcard_faults f[1] = {{.decode_ms = 5}};
    env e;
    if (env_open(&e, 1, f, 4, 0) < 0) return;
    rec *r = &e.recs[e.n_recs];
    memset(r, 0, sizeof *r);
    /* 200 steps of >= 5 ms cannot finish in 0.1 s */
    sched_params p = sched_env_greedy(once, 5, 200, 1);
    p.deadline = sched_now() + 0.1;
    char err[256];
    REQUIRE(sched_submit(e.se.s, &p, on_event, r, &r->r, err, sizeof err) == SCHED_OK);
    e.n_recs++;
    run_until_final(&e, 1);
    CHECK_EQ(r->error, 1);
    CHECK_EQ(r->status, SCHED_ERR_TIMEOUT);
    CHECK_STR(r->decode, "tcard:0");
    CHECK(r->tokens > 0 && r->tokens < 200);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.moves, 0); /* a deadline is the request's, not the card's fault */
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_OK);
    env_close(&e);
}

TEST(sched_split_gpu_first_and_prefill_fault)
{
    /* cpu, a (test) GPU and a card: the GPU prefills and the card decodes; when the GPU faults
     * during a prefill, the request moves — the CPU prefills it for the card, or decodes it
     * itself — and the GPU is out */
    tcard_faults f[2] = {{.gpu = 1, .prefill_fault_at = 2}, {.decode_ms = 1}};
    env e;
    if (env_open(&e, 2, f, 4, 0) < 0) return;
    int a = submit(&e, once, 5, 20);
    run_until_final(&e, 1);
    CHECK_STR(e.recs[a].prefill, "tgpu:0");
    CHECK_STR(e.recs[a].decode, "tcard:1");
    int b = submit(&e, once, 5, 20);
    run_until_final(&e, 2);
    rec *r = &e.recs[b];
    CHECK_MSG(r->done == 1 && r->error == 0, "error %d status %d", r->error, r->status);
    CHECK_EQ(r->placed, 2);
    CHECK_STR(r->prefill, "cpu");
    CHECK_EQ(r->tokens, 20);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_FAILED);
    CHECK_EQ(st.dev[1].failovers, 1);
    CHECK(sched_can_serve(e.se.s, NULL));
    env_close(&e);
}

TEST(sched_split_weighs_described_curves)
{
    /* cpu, a (test) GPU and a card that describe their decode cost by batch (the issue-25
     * curves: the H200's measured one, a batched U280's modelled one): a lone request on idle
     * devices gains the most on the GPU, so the GPU decodes what it prefilled — where without
     * curves (sched_split_gpu_first_and_prefill_fault) the card takes it */
    static const accel_decode_curve gpu = {5, {1, 32, 64, 128, 256},
                                           {1 / 250.0, 32 / 4959.0, 64 / 8093.0, 128 / 11621.0,
                                            256 / 14547.0}, 1024, 3.6e-8};
    static const accel_decode_curve card = {4, {1, 2, 4, 8}, {10.58e-3, 11.01e-3, 12.23e-3, 24.33e-3},
                                            1024, 1.4e-7};
    tcard_faults f[2] = {{.gpu = 1, .curve = &gpu}, {.curve = &card}};
    env e;
    if (env_open(&e, 2, f, 4, 0) < 0) return;
    int a = submit(&e, once, 5, 20);
    run_until_final(&e, 1);
    CHECK_STR(e.recs[a].prefill, "tgpu:0");
    CHECK_STR(e.recs[a].decode, "tgpu:0");
    CHECK_EQ(e.recs[a].tokens, 20);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.dev[1].info.decode_curve.n, 5);
    env_close(&e);
}

/* A device added to a running scheduler (sched_add_device: a peer's card that joined late) is
 * placed on once warm: a request that decoded on the CPU before decodes on the new card, with
 * the card's text */
TEST(sched_split_device_added_later)
{
    env e;
    if (env_open(&e, 0, NULL, 16, 0) < 0) return;
    load_golden(&e);
    REQUIRE(n_golden >= 1);
    const model_golden *g = golden[0];
    int a = submit(&e, g->ids, g->n_ids, g->n_greedy);
    run_until_final(&e, 1);
    CHECK_STR(e.recs[a].decode, "cpu");
    char err[256];
    accel_dev *card = tcard_open(0, e.se.m, NULL, err, sizeof err);
    REQUIRE(card);
    e.se.devs[e.se.n_devs++] = card;
    int at = sched_add_device(e.se.s, card, err, sizeof err);
    CHECK_MSG(at == 1, "sched_add_device: %d %s", at, err);
    sched_stats st;
    double t0 = sched_now();
    do { /* its worker warms it up; the loop takes the WARM note */
        uv_run(&e.se.loop, UV_RUN_NOWAIT);
        sched_get_stats(e.se.s, &st);
    } while (at == 1 && !st.dev[1].warm && sched_now() - t0 < 10);
    CHECK_EQ(st.n_devices, 2);
    CHECK(st.dev[1].warm);
    int b = submit(&e, g->ids, g->n_ids, g->n_greedy);
    run_until_final(&e, 2);
    char ref[2048];
    card_reference(&e, g->ids, g->n_ids, g->n_greedy, ref, sizeof ref);
    CHECK_MSG(e.recs[b].done == 1 && !strcmp(e.recs[b].decode, st.dev[1].info.name),
              "decoded on %s, not the added %s", e.recs[b].decode, st.dev[1].info.name);
    CHECK_STR(e.recs[b].text, ref);
    free_golden();
    env_close(&e);
}

/* A device whose worker thread cannot start is not added (sched_add_device answers -1) and
 * leaves nothing counted: a request the CPU prefills and decodes afterwards is a local
 * placement, not a fallback beside a card that is not there. The thread is refused by making
 * every new thread's default stack too large to map (64 TiB) for the call. */
TEST(sched_split_device_whose_worker_cannot_start)
{
    env e;
    if (env_open(&e, 0, NULL, 16, 0) < 0) return;
    char err[256];
    accel_dev *card = tcard_open(0, e.se.m, NULL, err, sizeof err);
    REQUIRE(card);
    pthread_attr_t def, huge;
    REQUIRE(pthread_getattr_default_np(&def) == 0);
    pthread_attr_init(&huge);
    REQUIRE(pthread_attr_setstacksize(&huge, (size_t)1 << 46) == 0);
    REQUIRE(pthread_setattr_default_np(&huge) == 0);
    int at = sched_add_device(e.se.s, card, err, sizeof err);
    CHECK_EQ(pthread_setattr_default_np(&def), 0);
    pthread_attr_destroy(&huge);
    pthread_attr_destroy(&def);
    CHECK_EQ(at, -1);
    CHECK_MSG(strstr(err, "cannot start the worker thread") != NULL, "sched_add_device: %s", err);
    accel_free(card);
    int a = submit(&e, once, 5, 8);
    run_until_final(&e, 1);
    CHECK_EQ(e.recs[a].done, 1);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.n_devices, 1);
    CHECK_EQ(st.placements_local, 1);
    CHECK_EQ(st.placements_fallback, 0);
    env_close(&e);
}
