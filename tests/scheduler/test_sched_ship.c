/* The two sides of a split placement while the KV is shipped (scheduler/sched_prefill.c,
 * scheduler/sched_handover.c): the CPU backend prefills, a test card (tcard.h) decodes.
 *   - The card's ATTACH reserves its sequences while the prefill worker runs: it must read
 *     nothing the prefill worker writes (a choice's finish, set when its first token ends it).
 *     A card slow to reserve (tcard seq_new_ms) holds the ATTACH until both choices have ended
 *     at their first token: under ThreadSanitizer (make test-tsan) the read of finish that the
 *     ATTACH made was a data race with the prefill worker's write.
 *   - KV that cannot leave the prefill side (a chunk the wire cannot carry, injected in the CPU
 *     backend's KV sink) is the prefill device's failure: the card stays healthy and is not
 *     avoided; the request fails as a prefill that failed with that status does. */
#include "tests/test.h"
#include "tests/scheduler/sched_env.h"
#include "tests/scheduler/tcard.h"
#include "scheduler/accel_impl.h"
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef struct rec {
    int tokens, done, error, status;
    char decode[ACCEL_NAME_MAX + 1], message[ACCEL_NAME_MAX + 200];
} rec;

static sched_env E;

static void on_event(void *ctx, const sched_event *ev)
{
    rec *r = ctx;
    switch (ev->type) {
    case SCHED_EV_PLACED:
        snprintf(r->decode, sizeof r->decode, "%s", ev->decode_dev);
        break;
    case SCHED_EV_TOKEN:
        r->tokens++;
        break;
    case SCHED_EV_DONE:
        r->done++;
        break;
    case SCHED_EV_ERROR:
        r->error++;
        r->status = ev->status;
        snprintf(r->message, sizeof r->message, "%s", ev->message ? ev->message : "");
        break;
    default:
        break;
    }
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) sched_env_final(&E);
}

/* The CPU and one test card with faults f; 0, or -1 after reporting a failure. */
static int open_env(const tcard_faults *f)
{
    char err[256];
    if (sched_env_open_cpu(&E) < 0) return -1;
    if (sched_env_add(&E, tcard_open(0, E.m, f, err, sizeof err), err) < 0) return -1;
    return 0;
}

static int start_env(void)
{
    sched_config cfg = {.max_waiting = 8, .max_running = 4};
    return sched_env_start(&E, &cfg);
}

/* 0, or -1 after reporting why the scheduler refused it */
static int submit(const sched_params *p, rec *r)
{
    sched_req *req;
    char err[256];
    int st = sched_submit(E.s, p, on_event, r, &req, err, sizeof err);
    CHECK_MSG(st == SCHED_OK, "submit: %s", err);
    return st == SCHED_OK ? 0 : -1;
}

static const int32_t prompt[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */

TEST(sched_split_attach_reads_no_prefill_state)
{
    /* 100 ms per reservation: stories260K's two prefills (and the first token of each, which
     * ends the choice at max_tokens 1) are over long before the second one starts */
    tcard_faults f = {.max_batch = 2, .seq_new_ms = 100};
    if (open_env(&f) < 0 || start_env() < 0) return;
    rec a = {0};
    sched_params p = sched_env_greedy(prompt, 5, 1, 2);
    REQUIRE(submit(&p, &a) == 0);
    sched_env_run(&E, 1);
    CHECK_MSG(a.done == 1 && a.error == 0, "error %d status %d: %s", a.error, a.status, a.message);
    CHECK_STR(a.decode, "tcard:0");
    CHECK_EQ(a.tokens, 2); /* one per choice */
    sched_stats st;
    sched_get_stats(E.s, &st);
    CHECK_EQ(st.moves, 0);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_OK);
    sched_env_close(&E); /* and every sequence the card reserved was freed */
}

/* The CPU backend's prefill behind a copy of its vtable whose KV sink hands layer 1's chunk on
 * with a dtype the wire does not have, while bad_kv is set. */
static struct accel_dev_i vt;
static int (*real_prefill)(accel_dev *, const accel_prefill_req *);
static atomic_int bad_kv, bad_chunks;

static int bad_layer(void *ctx, const proto_kv_layer *c)
{
    const accel_kv_sink *real = ctx;
    if (c->layer != 1 || !atomic_load(&bad_kv)) return real->layer(real->ctx, c);
    atomic_fetch_add(&bad_chunks, 1);
    proto_kv_layer x = *c;
    x.dtype = (enum proto_kv_dtype)9;
    return real->layer(real->ctx, &x);
}

static int prefill_bad_kv(accel_dev *d, const accel_prefill_req *r)
{
    if (!r->kv) return real_prefill(d, r);
    accel_kv_sink sink = {bad_layer, (void *)r->kv};
    accel_prefill_req x = *r;
    x.kv = &sink;
    return real_prefill(d, &x);
}

TEST(sched_split_ship_failure_blames_the_prefill_side)
{
    atomic_store(&bad_kv, 1);
    atomic_store(&bad_chunks, 0);
    if (open_env(NULL) < 0) return;
    vt = *E.devs[0]->i;
    real_prefill = vt.prefill;
    vt.prefill = prefill_bad_kv;
    E.devs[0]->i = &vt;
    if (start_env() < 0) return;
    rec a = {0}, b = {0};
    sched_params p = sched_env_greedy(prompt, 5, 8, 1);
    REQUIRE(submit(&p, &a) == 0);
    sched_env_run(&E, 1);
    CHECK_STR(a.decode, "tcard:0"); /* placed once: no move */
    CHECK(atomic_load(&bad_chunks) > 0);
    /* a prefill that failed with ACCEL_ERR_INVALID (not a device fault: nothing is marked) */
    CHECK_MSG(a.error == 1 && a.status == ACCEL_ERR_INVALID, "error %d status %d: %s", a.error,
              a.status, a.message);
    CHECK_MSG(!strncmp(a.message, "cpu: prefill failed", 19), "message \"%s\"", a.message);
    sched_stats st;
    sched_get_stats(E.s, &st);
    CHECK_EQ(st.moves, 0);
    CHECK_EQ(st.dev[1].info.health, ACCEL_HEALTH_OK); /* was DEGRADED: the card was blamed */
    CHECK_EQ(st.dev[1].failovers, 0);
    CHECK_EQ(st.dev[0].info.health, ACCEL_HEALTH_OK);
    /* the card still takes the next split */
    atomic_store(&bad_kv, 0);
    REQUIRE(submit(&p, &b) == 0);
    sched_env_run(&E, 2);
    CHECK_MSG(b.done == 1 && b.error == 0, "error %d status %d: %s", b.error, b.status, b.message);
    CHECK_STR(b.decode, "tcard:0");
    CHECK_EQ(b.tokens, 8);
    sched_env_close(&E);
}
