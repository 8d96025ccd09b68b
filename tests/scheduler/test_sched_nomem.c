/* A device short of memory for a new request's sequence while older requests decode on it
 * (scheduler/sched_prefill.c): the real CPU backend behind a copy of its vtable whose seq_new
 * answers ACCEL_ERR_NOMEM on demand (what a full pool or a fragmented one answers). The shortage
 * must not stop the requests already decoding: the new one waits for memory, the older ones go
 * on, and once the memory is back both finish. */
#include "tests/test.h"
#include "tests/scheduler/sched_env.h"
#include "scheduler/accel_impl.h"
#include <stdatomic.h>
#include <string.h>
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

/* REQUIRE in a helper that returns a status */
#define REQUIRE_RET(c)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            t_fail(__FILE__, __LINE__, "REQUIRE(%s)", #c);                                         \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

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

/* The CPU backend behind vt (the caller's hook set in it by hook()), 10 ms per iteration and
 * a 50 ms time-between-tokens budget (the prefill loop goes on while the budget lasts): A
 * decodes, the shortage starts (*shortage set), B arrives and its prefill meets it. 0, or -1
 * after reporting what failed. */
static rec A, B;
static int a_decoding_then_b(void (*hook)(void), atomic_int *shortage)
{
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    atomic_store(shortage, 0);
    if (sched_env_open_cpu(&E) < 0) return -1;
    vt = *E.devs[0]->i;
    hook();
    E.devs[0]->i = &vt;
    /* 10 ms per iteration: A is still decoding when B comes, and its pace is bounded */
    sched_config cfg = {
        .max_waiting = 8, .max_running = 4, .tbt_budget_ms = 50, .step_delay_ms = 10};
    if (sched_env_start(&E, &cfg) < 0) return -1;
    static int32_t ida[40], idb[20];
    for (int i = 0; i < 40; i++) ida[i] = 10 + i;
    for (int i = 0; i < 20; i++) idb[i] = 200 + i;
    sched_req *ra, *rb;
    char err[256];
    sched_params pa = sched_env_greedy(ida, 40, 150, 1);
    pa.ignore_eos = 1;
    REQUIRE_RET(sched_submit(E.s, &pa, on_event, &A, &ra, err, sizeof err) == SCHED_OK);
    run_until(&A.tokens, 5, 30);
    REQUIRE_RET(A.tokens >= 5 && !A.done);
    atomic_store(shortage, 1);
    sched_params pb = sched_env_greedy(idb, 20, 10, 1);
    REQUIRE_RET(sched_submit(E.s, &pb, on_event, &B, &rb, err, sizeof err) == SCHED_OK);
    run_until(&B.tokens, 1, 0.2); /* B's prefill meets the shortage */
    return 0;
}

/* The shortage ends: both requests complete, and the scheduler closes clean. */
static void both_complete(atomic_int *shortage)
{
    CHECK_EQ(B.tokens, 0);
    atomic_store(shortage, 0);
    sched_env_run(&E, 2);
    CHECK_EQ(A.done, 1);
    CHECK_EQ(A.tokens, 150);
    CHECK_EQ(B.done, 1);
    CHECK_EQ(B.tokens, 10);
    CHECK_EQ(A.error + B.error, 0);
    sched_env_close(&E);
}

static void hook_seq_new(void)
{
    real_seq_new = vt.seq_new;
    vt.seq_new = seq_new_short;
}

/* Request A decodes; B arrives while the device has no room for B's sequence. Before the fix
 * the NOMEM answer ended B's chunk without spending any of the budget, so the loop asked again
 * forever: A never got another decode step while the shortage held. */
TEST(sched_nomem_new_sequence_lets_older_decodes_run)
{
    atomic_store(&nomem_calls, 0);
    if (a_decoding_then_b(hook_seq_new, &no_room) < 0) return;
    int a0 = A.tokens;
    run_until(&A.tokens, a0 + 20, 10); /* 20 steps: ~0.2 s at the configured pace */
    CHECK_MSG(A.tokens >= a0 + 20, "A made %d tokens in 10 s while B waited for memory",
              A.tokens - a0);
    CHECK(atomic_load(&nomem_calls) > 0); /* B did meet the shortage */
    both_complete(&no_room);
}

/* The prefill call itself short of memory (the CPU backend's prefill answers NOMEM while
 * no_room_call is set): what the prefill worker can give back (a cached prefix) is given once,
 * and then the request waits for the decodes here to end. Before, every iteration tried the
 * chunk again and again until the time-between-tokens budget was spent: thousands of refused
 * device calls per decode step, each a make_room that found nothing. */
static int (*real_prefill)(accel_dev *, const accel_prefill_req *);
static atomic_int no_room_call;
static atomic_long nomem_prefills; /* prefill calls refused */

static int prefill_short(accel_dev *d, const accel_prefill_req *r)
{
    if (atomic_load(&no_room_call)) {
        atomic_fetch_add(&nomem_prefills, 1);
        return ACCEL_ERR_NOMEM;
    }
    return real_prefill(d, r);
}

static void hook_prefill(void)
{
    real_prefill = vt.prefill;
    vt.prefill = prefill_short;
}

TEST(sched_nomem_prefill_call_waits_for_decodes)
{
    atomic_store(&nomem_prefills, 0);
    if (a_decoding_then_b(hook_prefill, &no_room_call) < 0) return;
    long n0 = atomic_load(&nomem_prefills);
    int a0 = A.tokens;
    run_until(&A.tokens, a0 + 20, 10);
    long refused = atomic_load(&nomem_prefills) - n0;
    int steps = A.tokens - a0;
    CHECK_MSG(steps >= 20, "A made %d tokens in 10 s while B waited for memory", steps);
    CHECK(n0 > 0); /* B did meet the shortage */
    /* one try per iteration, and an iteration is at least one decode step of A (the bound
     * allows the iterations around the two reads) */
    CHECK_MSG(refused <= steps + 2, "%ld prefill calls refused over %d decode steps", refused,
              steps);
    both_complete(&no_room_call);
}
