/* Stopping the scheduler (sched_free) with split requests in flight: the prefill device still
 * has their prompts queued while the cards have attached them (a sequence and a KV wire reader
 * per choice, scheduler/sched_handover.c). Each worker frees only what it owns: the cards their
 * sequences and readers, the prefill worker the rest (scheduler/sched_worker.c: stop_all). */
#include "tests/test.h"
#include "tests/scheduler/sched_env.h"
#include "tests/scheduler/tcard.h"
#include "devices/devices.h"
#include "proto/kv_wire.h"
#include "scheduler/accel_impl.h"
#include "scheduler/sched_internal.h"
#include <stdatomic.h>
#include <time.h>

/* A choice's KV wire reader belongs to the decode worker (SCHED_SEQ_IMPORT): the prefill
 * worker's final free of a split request (its seqs, all set) leaves it, the card frees it, and
 * the loop's last free (no device) takes whatever is left. */
TEST(sched_shutdown_reader_freed_by_its_owner_only)
{
    char err[256];
    model *m = model_load(SCHED_ENV_MODEL, err, sizeof err);
    REQUIRE(m);
    accel_opts o = {.threads = 1};
    accel_dev *dev = devices_open("cpu", m, &o, err, sizeof err);
    REQUIRE(dev);
    proto_kv_expect e = {.fingerprint = m->fingerprint,
                         .n_layers = m->cfg.n_layers,
                         .n_kv_heads = m->cfg.n_kv_heads,
                         .head_dim = m->cfg.head_dim,
                         .max_tokens = 16,
                         .max_pos = 16};
    sched_choice c;
    memset(&c, 0, sizeof c);
    proto_kv_reader *kvr = proto_kv_reader_new(&e, NULL, NULL);
    REQUIRE(kvr);
    c.kvr = kvr;
    /* the prefill worker of a split placement, stopping (sched_worker_seqs, all) */
    sched_choice_deinit(&c, dev, SCHED_SEQ_DECODE | SCHED_SEQ_PREFILL, 1);
    CHECK_MSG(c.kvr == kvr, "the prefill worker freed the card's reader");
    /* the card (sched_handover_stop) */
    sched_choice_deinit(&c, dev, SCHED_SEQ_IMPORT, 0);
    CHECK(c.kvr == NULL);
    /* the loop's last free of a request takes a reader no worker freed */
    c.kvr = proto_kv_reader_new(&e, NULL, NULL);
    REQUIRE(c.kvr);
    sched_choice_deinit(&c, NULL, 0, 1);
    CHECK(c.kvr == NULL);
    accel_free(dev);
    model_free(m);
}

static struct accel_dev_i vt;
static int (*real_prefill)(accel_dev *, const accel_prefill_req *);
static atomic_int slow;  /* each prefill call first sleeps 300 ms while set */
static atomic_int calls; /* prefill calls begun while slow */

static int prefill_slow(accel_dev *d, const accel_prefill_req *r)
{
    if (atomic_load(&slow)) {
        atomic_fetch_add(&calls, 1);
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
    }
    return real_prefill(d, r);
}

static sched_env E;
static void on_event(void *ctx, const sched_event *ev)
{
    (void)ctx, (void)ev;
}

/* Three split requests (the CPU prefills one prompt per iteration, each call slow), sched_free
 * while the CPU is in the second prompt's call: by then its worker has taken every request's
 * RUN, and the third request is queued there while its card holds it attached (its sequence
 * and its KV wire reader). The prefill worker's stop (stop_all: sched_worker_finish) and the
 * card's (sched_handover_stop) both ran over that choice's reader: each freed it, a double free
 * in a race that ThreadSanitizer reports (make test-tsan). Every sequence is freed once
 * (sched_env_close checks every device). */
TEST(sched_shutdown_with_split_requests_attached)
{
    atomic_store(&slow, 0);
    atomic_store(&calls, 0);
    if (sched_env_open_cpu(&E) < 0) return;
    vt = *E.devs[0]->i;
    real_prefill = vt.prefill;
    vt.prefill = prefill_slow;
    E.devs[0]->i = &vt;
    char err[256];
    for (int i = 0; i < 3; i++)
        if (sched_env_add(&E, tcard_open(i, E.m, NULL, err, sizeof err), err) < 0) return;
    sched_config cfg = {.max_waiting = 16, .max_running = 4};
    if (sched_env_start(&E, &cfg) < 0) return;
    atomic_store(&slow, 1);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 5 + (i * 7) % 500;
    for (int k = 0; k < 3; k++) {
        ids[0] = 5 + k; /* no prefix shared */
        sched_params p = sched_env_greedy(ids, 40, 50, 1);
        sched_req *r;
        REQUIRE(sched_submit(E.s, &p, on_event, NULL, &r, err, sizeof err) == SCHED_OK);
    }
    for (double t0 = sched_now(); atomic_load(&calls) < 2 && sched_now() - t0 < 30;) {
        uv_run(&E.loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    sched_stats st;
    sched_get_stats(E.s, &st);
    CHECK_EQ(st.placements_split, 3);
    CHECK_EQ(atomic_load(&calls), 2);
    int attached = 0; /* the second and third requests' cards (the first may be done) */
    for (int i = 1; i <= 3; i++) {
        accel_info info;
        accel_get_info(E.devs[i], &info);
        attached += info.n_seqs;
    }
    CHECK_MSG(attached >= 2, "%d sequences on the cards", attached);
    sched_env_close(&E);
}
