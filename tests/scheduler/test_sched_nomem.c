/* A device short of memory for a new request's sequence while older requests decode on it
 * (scheduler/sched_prefill.c): the real CPU backend behind a copy of its vtable whose seq_new
 * answers ACCEL_ERR_NOMEM on demand (what a full pool or a fragmented one answers). The shortage
 * must not stop the requests already decoding: the new one waits for memory, the older ones go
 * on, and once the memory is back both finish. */
#include "tests/test.h"
#include "tests/scheduler/sched_env.h"
#include "scheduler/accel_impl.h"
#include <stdatomic.h>
#include <time.h>

static struct accel_dev_i vt;
static int (*real_seq_new)(accel_dev *, int, accel_seq **);
static atomic_int no_room;      /* seq_new answers NOMEM while set */
static atomic_long nomem_calls; /* seq_new calls refused */

static int seq_new_short(accel_dev *d, int capacity, accel_seq **out)
{
    if (atomic_load(&no_room)) {
        atomic_fetch_add(&nomem_calls, 1);
        return ACCEL_ERR_NOMEM;
    }
    return real_seq_new(d, capacity, out);
}

typedef struct rec {
    int tokens, done, error, status;
} rec;

static sched_env E;
static void on_event(void *ctx, const sched_event *ev)
{
    rec *r = ctx;
    if (ev->type == SCHED_EV_TOKEN) r->tokens++;
    if (ev->type == SCHED_EV_DONE) r->done = 1;
    if (ev->type == SCHED_EV_ERROR) r->error = 1, r->status = ev->status;
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) sched_env_final(&E);
}

/* The loop, until *count reaches want or `seconds` passed (a bound: the check after it says
 * what was missing). */
static void run_until(const int *count, int want, double seconds)
{
    double t0 = sched_now();
    while (*count < want && sched_now() - t0 < seconds) {
        uv_run(&E.loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Request A decodes; B arrives while the device has no room for B's sequence, with a
 * time-between-tokens budget (the prefill loop goes on while the budget lasts). Before the fix
 * the NOMEM answer ended B's chunk without spending any of the budget, so the loop asked again
 * forever: A never got another decode step while the shortage held. */
TEST(sched_nomem_new_sequence_lets_older_decodes_run)
{
    atomic_store(&no_room, 0);
    atomic_store(&nomem_calls, 0);
    if (sched_env_open_cpu(&E) < 0) return;
    vt = *E.devs[0]->i;
    real_seq_new = vt.seq_new;
    vt.seq_new = seq_new_short;
    E.devs[0]->i = &vt;
    /* 10 ms per iteration: A is still decoding when B comes, and its pace is bounded */
    sched_config cfg = {
        .max_waiting = 8, .max_running = 4, .tbt_budget_ms = 50, .step_delay_ms = 10};
    if (sched_env_start(&E, &cfg) < 0) return;
    int32_t ida[40], idb[20];
    for (int i = 0; i < 40; i++) ida[i] = 10 + i;
    for (int i = 0; i < 20; i++) idb[i] = 200 + i;
    rec a = {0}, b = {0};
    sched_req *ra, *rb;
    char err[256];
    sched_params pa = sched_env_greedy(ida, 40, 150, 1);
    pa.ignore_eos = 1;
    REQUIRE(sched_submit(E.s, &pa, on_event, &a, &ra, err, sizeof err) == SCHED_OK);
    run_until(&a.tokens, 5, 30);
    REQUIRE(a.tokens >= 5 && !a.done);
    atomic_store(&no_room, 1);
    sched_params pb = sched_env_greedy(idb, 20, 10, 1);
    REQUIRE(sched_submit(E.s, &pb, on_event, &b, &rb, err, sizeof err) == SCHED_OK);
    run_until(&b.tokens, 1, 0.2); /* B's prefill meets the shortage */
    int a0 = a.tokens;
    run_until(&a.tokens, a0 + 20, 10); /* 20 steps: ~0.2 s at the configured pace */
    CHECK_MSG(a.tokens >= a0 + 20, "A made %d tokens in 10 s while B waited for memory",
              a.tokens - a0);
    CHECK(atomic_load(&nomem_calls) > 0); /* B did meet the shortage */
    CHECK_EQ(b.tokens, 0);
    atomic_store(&no_room, 0);
    sched_env_run(&E, 2);
    CHECK_EQ(a.done, 1);
    CHECK_EQ(a.tokens, 150);
    CHECK_EQ(b.done, 1);
    CHECK_EQ(b.tokens, 10);
    CHECK_EQ(a.error + b.error, 0);
    sched_env_close(&E);
}
