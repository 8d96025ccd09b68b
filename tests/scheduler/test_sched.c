/* Tests for the scheduler (scheduler/sched_*.c) with the real CPU backend and stories260K on a
 * real libuv loop: event order, golden greedy text under concurrency (continuous batching must
 * change nothing), n choices, cancellation (waiting and running; KV freed), queue-full, bad
 * parameters, deadlines, and a clean shutdown (every loop handle closed). */
#include "tests/test.h"
#include "tests/util.h"
#include "model/ckpt/golden.h"
#include "tests/scheduler/sched_env.h"

#define MAX_REQS 32

typedef struct rec {
    sched_req *r;
    int placed, tokens, choice_done, done, error, status, after_final, cancelled;
    int order_ok;            /* PLACED first, nothing after DONE/ERROR */
    char text[4][2048];
    size_t len[4];
    enum model_finish finish[4];
    int prompt_tokens, completion_tokens;
    int lp_events, lp_greedy_top; /* TOKEN events with logprobs; of those, chosen == best */
    char lp_text[2048];           /* the chosen tokens' bytes, concatenated */
    size_t lp_len;
} rec;

typedef struct env {
    sched_env se;
    rec recs[MAX_REQS];
    int n_recs;
    uv_timer_t timer;
    void (*on_tick)(struct env *e);
} env;

static void on_event(void *ctx, const sched_event *ev)
{
    rec *r = ctx;
    if (r->done || r->error) r->after_final++;
    if (!r->placed && ev->type != SCHED_EV_PLACED && ev->type != SCHED_EV_ERROR) r->order_ok = 0;
    switch (ev->type) {
    case SCHED_EV_PLACED:
        r->placed++;
        if (strcmp(ev->prefill_dev, "cpu") || strcmp(ev->decode_dev, "cpu")) r->order_ok = 0;
        break;
    case SCHED_EV_TOKEN:
        r->tokens++;
        if (ev->has_logprobs) {
            r->lp_events++;
            if (ev->n_top == 2 && ev->top[0].logprob == ev->token.logprob &&
                ev->top[0].len == ev->token.len && !memcmp(ev->top[0].bytes, ev->token.bytes, ev->token.len) &&
                ev->top[1].logprob <= ev->top[0].logprob && ev->token.logprob <= 0)
                r->lp_greedy_top++;
            if (r->lp_len + ev->token.len < sizeof r->lp_text) {
                memcpy(r->lp_text + r->lp_len, ev->token.bytes, ev->token.len);
                r->lp_len += ev->token.len;
            }
        }
        if (ev->choice >= 0 && ev->choice < 4)
            sched_env_text(r->text[ev->choice], sizeof r->text[0], &r->len[ev->choice], ev);
        break;
    case SCHED_EV_CHOICE_DONE:
        r->choice_done++;
        if (ev->choice >= 0 && ev->choice < 4) r->finish[ev->choice] = ev->finish;
        break;
    case SCHED_EV_DONE:
        r->done++;
        r->prompt_tokens = ev->prompt_tokens;
        r->completion_tokens = ev->completion_tokens;
        if (!(ev->t_arrival <= ev->t_started && ev->t_started <= ev->t_first_token &&
              ev->t_first_token <= ev->t_done))
            r->order_ok = 0;
        break;
    case SCHED_EV_ERROR:
        r->error++;
        r->status = ev->status;
        break;
    }
}

/* Counts finals through a wrapper context: rec pointers are inside env. */
static env *E;
static void on_event_count(void *ctx, const sched_event *ev)
{
    on_event(ctx, ev);
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) sched_env_final(&E->se);
}

static int env_open(env *e, int max_running, int max_waiting, double step_delay_ms)
{
    memset(e, 0, sizeof *e);
    E = e;
    sched_config cfg = {.max_waiting = max_waiting, .max_running = max_running,
                        .step_delay_ms = step_delay_ms};
    if (sched_env_open_cpu(&e->se) < 0 || sched_env_start(&e->se, &cfg) < 0) return -1;
    uv_timer_init(&e->se.loop, &e->timer);
    return 0;
}

static void env_close(env *e)
{
    uv_close((uv_handle_t *)&e->timer, NULL);
    sched_env_close(&e->se);
}

static int submit(env *e, const sched_params *p, int *status)
{
    rec *r = &e->recs[e->n_recs];
    memset(r, 0, sizeof *r);
    r->order_ok = 1;
    char err[256];
    *status = sched_submit(e->se.s, p, on_event_count, r, &r->r, err, sizeof err);
    if (*status != SCHED_OK) return -1;
    return e->n_recs++;
}

TEST(sched_golden_text_under_concurrency)
{
    env e;
    if (env_open(&e, 16, 64, 0) < 0) return;
    char **paths;
    int n = model_golden_list("tests/data/golden/stories260K", &paths);
    REQUIRE(n >= 5);
    model_golden *g[8] = {0};
    int idx[8][2];
    char err[256];
    /* every golden prompt twice at once: once alone, once with n = 2 */
    for (int i = 0; i < n && i < 8; i++) {
        g[i] = model_golden_load(paths[i], e.se.m->cfg.vocab, err, sizeof err);
        REQUIRE(g[i]);
        int st;
        sched_params p = sched_env_greedy(g[i]->ids, g[i]->n_ids, g[i]->n_greedy, 1);
        idx[i][0] = submit(&e, &p, &st);
        CHECK_EQ(st, SCHED_OK);
        p.n = 2;
        idx[i][1] = submit(&e, &p, &st);
        CHECK_EQ(st, SCHED_OK);
    }
    sched_env_run(&e.se, e.n_recs);
    for (int i = 0; i < n && i < 8; i++) {
        for (int k = 0; k < 2; k++) {
            rec *r = &e.recs[idx[i][k]];
            CHECK_MSG(r->done == 1 && r->error == 0, "%s: done %d error %d status %d", g[i]->name, r->done, r->error, r->status);
            CHECK(r->order_ok);
            CHECK_EQ(r->placed, 1);
            CHECK_EQ(r->after_final, 0);
            CHECK_EQ(r->choice_done, k + 1);
            CHECK_EQ(r->prompt_tokens, g[i]->n_ids);
            CHECK_EQ(r->completion_tokens, g[i]->n_greedy * (k + 1));
            for (int c = 0; c <= k; c++) {
                r->text[c][r->len[c]] = 0;
                CHECK_MSG(!strcmp(r->text[c], g[i]->greedy_text), "%s choice %d:\n got  %s\n want %s",
                          g[i]->name, c, r->text[c], g[i]->greedy_text);
                CHECK_EQ(r->finish[c], MODEL_FINISH_LENGTH);
            }
        }
        model_golden_free(g[i]);
    }
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.n_running, 0);
    CHECK_EQ(st.n_waiting, 0);
    CHECK(st.dev[0].steps > 0 && st.dev[0].warm);
    env_close(&e);
}

static void cancel_tick(env *e)
{
    /* cancel the running request once it produced tokens */
    rec *a = &e->recs[0];
    if (a->tokens >= 2 && !a->cancelled) {
        sched_cancel(e->se.s, a->r);
        a->cancelled = 1;
    }
    sched_stats st;
    sched_get_stats(e->se.s, &st);
    accel_info info;
    accel_get_info(e->se.devs[0], &info);
    if (a->cancelled && st.n_running == 0 && info.n_seqs == 0) uv_stop(&e->se.loop);
}

static void on_timer(uv_timer_t *t)
{
    env *e = E;
    e->on_tick(e);
}

TEST(sched_cancel_waiting_and_running)
{
    env e;
    if (env_open(&e, 1, 4, 20) < 0) return;
    int32_t ids[] = {1, 403, 407, 261, 378};
    int st;
    sched_params p = sched_env_greedy(ids, 5, 400, 1);
    submit(&e, &p, &st);
    CHECK_EQ(st, SCHED_OK);
    submit(&e, &p, &st); /* waits: max_running 1 */
    CHECK_EQ(st, SCHED_OK);
    sched_stats s;
    sched_get_stats(e.se.s, &s);
    CHECK_EQ(s.n_waiting, 1);
    sched_cancel(e.se.s, e.recs[1].r); /* freed at once, no event */
    sched_get_stats(e.se.s, &s);
    CHECK_EQ(s.n_waiting, 0);
    e.on_tick = cancel_tick;
    uv_timer_start(&e.timer, on_timer, 10, 10);
    uv_run(&e.se.loop, UV_RUN_DEFAULT);
    uv_timer_stop(&e.timer);
    rec *a = &e.recs[0], *b = &e.recs[1];
    CHECK(a->cancelled);
    CHECK(a->tokens >= 2 && a->tokens < 400);
    CHECK_EQ(a->done + a->error, 0); /* nothing after the cancel, no final event */
    CHECK_EQ(b->placed + b->tokens + b->done + b->error, 0);
    accel_info info;
    accel_get_info(e.se.devs[0], &info);
    CHECK_EQ(info.n_seqs, 0);
    CHECK_EQ(info.mem_free, info.mem_total);
    env_close(&e);
}

TEST(sched_queue_full_and_bad_params)
{
    env e;
    if (env_open(&e, 1, 1, 20) < 0) return;
    int32_t ids[] = {1, 403, 407};
    int st;
    sched_params p = sched_env_greedy(ids, 3, 3, 1);
    submit(&e, &p, &st);
    CHECK_EQ(st, SCHED_OK); /* runs */
    submit(&e, &p, &st);
    CHECK_EQ(st, SCHED_OK); /* waits */
    submit(&e, &p, &st);
    CHECK_EQ(st, SCHED_ERR_QUEUE_FULL);
    char err[256];
    sched_req *r;
    sched_params bad = p;
    bad.sampling.temperature = 5;
    CHECK_EQ(sched_submit(e.se.s, &bad, on_event_count, &e.recs[9], &r, err, sizeof err), SCHED_ERR_INVALID);
    CHECK_MSG(strstr(err, "temperature") != NULL, "%s", err);
    bad = p;
    bad.max_tokens = 510;
    CHECK_EQ(sched_submit(e.se.s, &bad, on_event_count, &e.recs[9], &r, err, sizeof err), SCHED_ERR_TOO_LARGE);
    int32_t oob[] = {1, 512};
    bad = sched_env_greedy(oob, 2, 1, 1);
    CHECK_EQ(sched_submit(e.se.s, &bad, on_event_count, &e.recs[9], &r, err, sizeof err), SCHED_ERR_INVALID);
    bad = p;
    bad.n = 2; /* two sequences never fit max_running 1 */
    CHECK_EQ(sched_submit(e.se.s, &bad, on_event_count, &e.recs[9], &r, err, sizeof err), SCHED_ERR_TOO_LARGE);
    sched_env_run(&e.se, 2);
    CHECK(e.recs[0].done == 1 && e.recs[1].done == 1);
    /* FCFS: the first finished before the second started */
    env_close(&e);
}

TEST(sched_deadline)
{
    env e;
    if (env_open(&e, 1, 4, 30) < 0) return;
    int32_t ids[] = {1, 403};
    int st;
    sched_params p = sched_env_greedy(ids, 2, 400, 1);
    p.deadline = sched_now() + 0.3; /* 400 tokens at >= 30 ms each cannot make it */
    submit(&e, &p, &st);
    CHECK_EQ(st, SCHED_OK);
    sched_env_run(&e.se, 1);
    CHECK_EQ(e.recs[0].error, 1);
    CHECK_EQ(e.recs[0].status, SCHED_ERR_TIMEOUT);
    CHECK(e.recs[0].tokens > 0);
    env_close(&e);
}

TEST(sched_stop_strings_and_logprobs)
{
    env e;
    if (env_open(&e, 4, 4, 0) < 0) return;
    int32_t ids[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */
    int st;
    sched_params p = sched_env_greedy(ids, 5, 64, 1);
    const char *stops[] = {"Lily"};
    p.stop = stops;
    p.n_stop = 1;
    p.sampling.logprobs = 1;
    p.sampling.top_logprobs = 2;
    submit(&e, &p, &st);
    CHECK_EQ(st, SCHED_OK);
    sched_env_run(&e.se, 1);
    rec *r = &e.recs[0];
    r->text[0][r->len[0]] = 0;
    CHECK_STR(r->text[0], ", there was a little girl named ");
    CHECK_EQ(r->finish[0], MODEL_FINISH_STOP);
    /* greedy: every chosen token is the best alternative; the tokens' bytes spell the text and
     * then the stop string ("Lily" is one token here or several: its bytes follow the text) */
    CHECK_EQ(r->lp_events, r->tokens);
    CHECK_EQ(r->lp_greedy_top, r->tokens);
    r->lp_text[r->lp_len] = 0;
    CHECK_MSG(!strncmp(r->lp_text, ", there was a little girl named Lily", 36), "%s", r->lp_text);
    env_close(&e);
}
