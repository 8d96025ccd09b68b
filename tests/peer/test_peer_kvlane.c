/* tests/peer/test_peer_kvlane.c — a lent device's KV imports wait for that device's own calls and
 * for nothing else (peer/kv_rx.h lanes, peer/server_call.c drive turns). The node imported every
 * chunk on one kv_rx thread in push order, each under its device's drive lock: a chunk for device
 * 0, waiting behind device 0's long step, held every chunk pushed after it, device 1's too; and
 * the drive lock was a plain mutex, which the call thread, letting it go and taking it again for
 * its next queued call, could win over a waiting import again and again. Node B's devices are CPU
 * devices whose decode sleeps when asked (a big model's step on a slow device, without the big
 * model), as in test_peer_calls.c; the peers are raw ones (peer_util.h) that write their chunks
 * and calls by hand, so that what each waits for is seen. */
#include "tests/test.h"
#include "devices/devices.h"
#include "peer/kv_rx.h"
#include "peer/link.h"
#include "peer/msg.h"
#include "peer/peer.h"
#include "scheduler/accel_impl.h"
#include "tests/peer/peer_util.h"
#include "tests/util.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The wrapped device: a decode sleeps g_sleep_us while g_slow is set; the decodes started so far,
 * those running, and the count of started decodes when the first import after g_arm ran. */
static struct accel_dev_i g_lane_i;
static int (*g_decode)(accel_dev *, int, accel_seq *const *, const int32_t *, float *);
static int (*g_import_crc)(accel_dev *, accel_seq *, const proto_kv_layer *, uint32_t);
static int (*g_import)(accel_dev *, accel_seq *, const proto_kv_layer *);
static _Atomic int g_slow, g_running, g_started, g_arm, g_started_at_import;
static int g_sleep_us;

/* g_pin: the device's call thread and the thread importing into it share one core (g_cpu), the
 * importer at the lowest nice (19, which needs no privilege): when a call ends and wakes the
 * importer, the call thread runs on until it blocks, as a busy node's often does. With a plain
 * lock it then takes the device back for its next queued call before the importer runs at all,
 * where on an idle machine the importer won that race most times. (Not SCHED_IDLE: under other
 * load on that core an idle-class importer would wait for the core to go idle.) */
static _Atomic int g_pin;
static int g_cpu;

static void pin_here(int low)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(g_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (low) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19); /* this thread's */
}

static int lane_decode(accel_dev *d, int n, accel_seq *const *s, const int32_t *ids, float *lg)
{
    if (atomic_load(&g_pin)) pin_here(0);
    atomic_fetch_add(&g_started, 1);
    atomic_fetch_add(&g_running, 1);
    if (atomic_load(&g_slow)) {
        struct timespec ts = {g_sleep_us / 1000000, (long)(g_sleep_us % 1000000) * 1000L};
        nanosleep(&ts, NULL);
    }
    int st = g_decode(d, n, s, ids, lg);
    atomic_fetch_sub(&g_running, 1);
    return st;
}

static void seen_import(void)
{
    if (atomic_load(&g_pin)) pin_here(1);
    if (atomic_exchange(&g_arm, 0)) atomic_store(&g_started_at_import, atomic_load(&g_started));
}

static int lane_import_crc(accel_dev *d, accel_seq *s, const proto_kv_layer *c, uint32_t crc)
{
    seen_import();
    return g_import_crc(d, s, c, crc);
}

static int lane_import(accel_dev *d, accel_seq *s, const proto_kv_layer *c)
{
    seen_import();
    return g_import(d, s, c);
}

/* d's vtable wrapped (one table: only one device is wrapped at a time) */
static void wrap(accel_dev *d, int sleep_us)
{
    g_lane_i = *d->i;
    g_decode = g_lane_i.decode;
    g_import_crc = g_lane_i.kv_import_crc;
    g_import = g_lane_i.kv_import;
    g_lane_i.decode = lane_decode;
    if (g_import_crc) g_lane_i.kv_import_crc = lane_import_crc;
    if (g_import) g_lane_i.kv_import = lane_import;
    g_sleep_us = sleep_us;
    atomic_store(&g_slow, 0);
    atomic_store(&g_running, 0);
    atomic_store(&g_started, 0);
    atomic_store(&g_arm, 0);
    atomic_store(&g_pin, 0);
    d->i = &g_lane_i;
}

/* A DECODE of token 1 on r's sequence seq of device dev, sent (its answer not read). */
static int send_decode(raw *r, uint32_t dev, uint32_t seq)
{
    uint8_t buf[64];
    int32_t id = 1;
    if (peer_decode_bytes(1) > sizeof buf) return PEER_ERR_PROTO;
    peer_decode_write(buf, dev, 1, &seq, &id);
    return peer_conn_send(r->c, PEER_DECODE, buf, peer_decode_bytes(1), NULL, 0, 5);
}

/* A decode's answer on r within timeout_s: its frame type (PEER_LOGITS), or a peer status. */
static int decode_answer(raw *r, int vocab, double timeout_s)
{
    peer_header h;
    const uint8_t *p;
    int st = peer_conn_recv(r->c, (uint32_t)(64 + 8 * vocab), &h, &p, timeout_s);
    return st ? st : h.type;
}

/* The KV of an 8-token prompt, prefilled on a CPU device of m of its own. */
static int prompt_kv(model *m, kvcopy *kv)
{
    char err[256];
    accel_opts o = {.threads = 1};
    accel_dev *pf = devices_open("cpu", m, &o, err, sizeof err);
    if (!pf) return -1;
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297}, first;
    int st = prefill_kv(pf, ids, 8, kv, &first);
    accel_free(pf);
    return st;
}

static void kv_free(kvcopy *kv)
{
    for (int i = 0; i < kv->n; i++) free(kv->mem[i]);
}

/* Node B lends two devices. Client X's 3 s step runs on device 0; client W hands a chunk to
 * device 0 meanwhile (it waits for the step: the device is X's); then client Y hands a prompt's
 * KV, every layer, to device 1. Y's chunks are imported and answered while X's step still runs:
 * they wait for no chunk of device 0's. On main they waited behind W's chunk for the step's end. */
TEST(peer_kv_into_one_device_waits_for_no_other)
{
    two t;
    if (two_pair_open(&t)) return;
    model *m = t.m;
    kvcopy kv = {0};
    REQUIRE(prompt_kv(m, &kv) == 0 && kv.n > 1);
    wrap(t.lent, 3000 * 1000);
    REQUIRE(two_pair_serve(&t) == 0);
    raw x, w, y;
    REQUIRE(raw_open(t.addr, &x) == 0 && raw_open(t.addr, &w) == 0 && raw_open(t.addr, &y) == 0);
    uint32_t sx, sw, sy;
    REQUIRE(raw_words(&x, PEER_SEQ_NEW, 0, 16, &sx) == 0);
    REQUIRE(raw_words(&w, PEER_SEQ_NEW, 0, 16, &sw) == 0);
    REQUIRE(raw_words(&y, PEER_SEQ_NEW, 1, 16, &sy) == 0);
    size_t cap = 1 << 20;
    uint8_t *b = malloc(cap);
    REQUIRE(b);

    atomic_store(&g_slow, 1);
    REQUIRE(send_decode(&x, 0, sx) == PEER_OK);
    double t0 = peer_now();
    while (!atomic_load(&g_running) && peer_now() - t0 < 5) nap_ms(5);
    REQUIRE(atomic_load(&g_running) == 1); /* X's step runs on device 0 */
    size_t n = raw_chunk_bytes(m, &w, 0, &kv, 0, b, cap);
    REQUIRE(n);
    peer_kv kw = {0, sw, kv.crc[0], PEER_KV_RUN_START, NULL, 0, 0, 0};
    CHECK_EQ(raw_tag(&w, &kw, b, n), PEER_OK);
    nap_ms(200); /* W's chunk received and waiting for device 0 before Y's come */
    double t1 = peer_now();
    for (int l = 0; l < kv.n; l++) {
        size_t cn = raw_chunk_bytes(m, &y, 1, &kv, l, b, cap);
        REQUIRE(cn);
        peer_kv ky = {1, sy, kv.crc[l], l == 0 ? PEER_KV_RUN_START : 0, NULL, 0, 0, 0};
        CHECK_EQ(raw_tag(&y, &ky, b, cn), PEER_OK);
    }
    int ok = 1;
    for (int l = 0; l < kv.n; l++) {
        int rs = raw_reply(&y, 10);
        CHECK_MSG(rs == 0, "Y's layer %d: %d", l, rs);
        ok &= rs == 0;
    }
    double took = peer_now() - t1;
    int step_runs = atomic_load(&g_running) == 1;
    CHECK_MSG(
        ok && step_runs,
        "Y's %d chunks into device 1 answered in %.2f s, after device 0's 3 s step (started %.2f s "
        "before them) ended",
        kv.n, took, t1 - t0);
    /* W's chunk is imported once the step is done, and X gets its answer */
    CHECK_EQ(raw_reply(&w, 10), 0);
    CHECK_EQ(decode_answer(&x, m->cfg.vocab, 10), PEER_LOGITS);
    atomic_store(&g_slow, 0);
    free(b);
    kv_free(&kv);
    peer_conn_free(x.c);
    peer_conn_free(w.c);
    peer_conn_free(y.c);
    two_stop(&t);
}

/* Callers that keep device 0's queue full of 400 ms steps (each sends its next as its answer
 * comes). */
typedef struct caller {
    raw r;
    uint32_t seq;
    int vocab;
    _Atomic int *stop;
    int errors;
} caller;

static void *caller_main(void *arg)
{
    caller *c = arg;
    while (!atomic_load(c->stop))
        if (send_decode(&c->r, 0, c->seq) || decode_answer(&c->r, c->vocab, 10) != PEER_LOGITS) {
            c->errors++;
            break;
        }
    return NULL;
}

/* Three clients keep device 0's calls coming, 400 ms steps back to back (a call always queued
 * behind the one running); client W hands chunks to device 0 meanwhile, one after the other, its
 * importer sharing the call thread's core at a lower priority (g_pin). Each import runs right
 * after the step that ran when it came (at most one more step started meanwhile: the chunk's own
 * way in through the node may see one end), not after call after call: the device's turns are
 * first come, first served. On main the call thread often took the plain mutex back for its next
 * call before the waiting import ran, step after step (2 to 9 steps, or none answered within a
 * dozen). */
TEST(peer_kv_import_not_starved_by_calls)
{
    two t;
    if (two_start(&t, "cpu")) return;
    kvcopy kv = {0};
    REQUIRE(prompt_kv(t.m, &kv) == 0);
    wrap(t.lent, 400 * 1000);
    enum { CALLERS = 3 };
    caller c[CALLERS];
    _Atomic int stop = 0;
    pthread_t th[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        c[i] = (caller){.vocab = t.m->cfg.vocab, .stop = &stop};
        REQUIRE(raw_open(t.addr, &c[i].r) == 0);
        REQUIRE(raw_seq_new(&c[i].r, &c[i].seq) == 0);
    }
    raw w;
    REQUIRE(raw_open(t.addr, &w) == 0);
    enum { IMPORTS = 3 }; /* each a run of positions of its own sequence */
    uint32_t sw0, sw[IMPORTS];
    REQUIRE(raw_seq_new(&w, &sw0) == 0);
    for (int i = 0; i < IMPORTS; i++) REQUIRE(raw_seq_new(&w, &sw[i]) == 0);
    size_t cap = 1 << 20;
    uint8_t *b = malloc(cap);
    REQUIRE(b);
    size_t n = raw_chunk_bytes(t.m, &w, 0, &kv, 0, b, cap);
    REQUIRE(n);
    cpu_set_t mine;
    REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
    for (g_cpu = 0; !CPU_ISSET(g_cpu, &mine); g_cpu++) {
    }
    atomic_store(&g_pin, 1);
    /* a first import: the importing thread pinned (seen_import) */
    peer_kv k0 = {0, sw0, kv.crc[0], PEER_KV_RUN_START, NULL, 0, 0, 0};
    REQUIRE(raw_tag(&w, &k0, b, n) == PEER_OK && raw_reply(&w, 10) == 0);

    atomic_store(&g_slow, 1);
    for (int i = 0; i < CALLERS; i++)
        REQUIRE(pthread_create(&th[i], NULL, caller_main, &c[i]) == 0);
    double t0 = peer_now();
    while (atomic_load(&g_started) < 2 && peer_now() - t0 < 10) nap_ms(5);
    REQUIRE(atomic_load(&g_started) >= 2); /* the steps come back to back */
    for (int i = 0; i < IMPORTS; i++) {
        int before = atomic_load(&g_started);
        atomic_store(&g_arm, 1);
        peer_kv k = {0, sw[i], kv.crc[0], PEER_KV_RUN_START, NULL, 0, 0, 0};
        double t1 = peer_now();
        CHECK_EQ(raw_tag(&w, &k, b, n), PEER_OK);
        int rs = raw_reply(&w, 5); /* a dozen steps */
        double took = peer_now() - t1;
        CHECK_EQ(rs, 0);
        int imported = !atomic_load(&g_arm);
        int behind =
            (imported ? atomic_load(&g_started_at_import) : atomic_load(&g_started)) - before;
        CHECK_MSG(imported && behind <= 1,
                  "W's import %d %s %d steps started after it came (%.2f s; 400 ms steps)", i + 1,
                  imported ? "waited for" : "not done after", behind, took);
        if (rs) break; /* its answer still to come: the next one's would be taken for it */
    }
    atomic_store(&stop, 1);
    atomic_store(&g_slow, 0);
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(c[i].errors, 0);
        peer_conn_free(c[i].r.c);
    }
    free(b);
    kv_free(&kv);
    peer_conn_free(w.c);
    two_stop(&t);
}

/* ---------------------------------------------------------------- kv_rx's lanes themselves */

/* An apply that holds lane 0's chunks until g_gate opens (a device busy with a long step),
 * counting the chunks applied; its status is the chunk's seq. */
static _Atomic int g_gate;
typedef struct lane_log {
    pthread_mutex_t mu;
    int n;
} lane_log;

static int gated_apply(void *ctx, void *owner, const peer_kv *k)
{
    lane_log *l = ctx;
    while (k->dev == 0 && !atomic_load(&g_gate)) nap_ms(1);
    pthread_mutex_lock(&l->mu);
    (void)owner;
    l->n++;
    pthread_mutex_unlock(&l->mu);
    return (int)k->seq;
}

/* Two lanes applying with gated_apply, the gate closed. */
static int gated_rx(lane_log *l, peer_kv_rx **rx)
{
    l->n = 0;
    pthread_mutex_init(&l->mu, NULL);
    atomic_store(&g_gate, 0);
    return peer_kv_rx_new(2, gated_apply, l, NULL, NULL, rx);
}

static void gated_rx_free(lane_log *l, peer_kv_rx *rx)
{
    peer_kv_rx_free(rx);
    pthread_mutex_destroy(&l->mu);
}

static int push_one(peer_kv_rx *rx, int lane, intptr_t owner, uint32_t seq)
{
    uint8_t *b;
    int slot = peer_kv_rx_take(rx, 64, 0, &b);
    if (slot < 0) return slot;
    memset(b, 0, 64);
    peer_kv k = {(uint32_t)lane, seq, 0, 0, b, 64, 0, 0};
    peer_kv_rx_push(rx, slot, lane, (void *)owner, &k);
    return 0;
}

/* Two lanes: owner A's chunk on lane 0 is held (its device busy); owner B's chunks on lane 1 are
 * applied and their results given meanwhile; A's next chunk, on lane 1, is applied but its result
 * waits for A's first (one owner's results in its push order); lane 0 has room for fewer than
 * PEER_KV_RX_SLOTS chunks (peer_kv_rx_lane_room); once the gate opens A's come in order. */
TEST(peer_kv_rx_lanes_wait_for_their_own)
{
    lane_log l;
    peer_kv_rx *rx;
    REQUIRE(gated_rx(&l, &rx) == PEER_OK);
    const intptr_t A = 1, B = 2;
    REQUIRE(push_one(rx, 0, A, 10) == 0); /* held */
    REQUIRE(push_one(rx, 1, B, 20) == 0);
    REQUIRE(push_one(rx, 1, A, 11) == 0); /* applied, its result after A's first */
    REQUIRE(push_one(rx, 1, B, 21) == 0);
    void *o;
    int st, got[4], n = 0;
    double t0 = peer_now();
    while (n < 2 && peer_now() - t0 < 10) {
        while (n < 4 && peer_kv_rx_done(rx, &o, &st)) {
            CHECK_MSG((intptr_t)o == B, "a result of owner %ld before A's first was applied",
                      (long)(intptr_t)o);
            got[n++] = st;
        }
        nap_ms(1);
    }
    REQUIRE(n == 2);
    CHECK_EQ(got[0], 20);
    CHECK_EQ(got[1], 21);
    CHECK_EQ(peer_kv_rx_lane_room(rx, 0, 2), 1);
    CHECK_EQ(peer_kv_rx_lane_room(rx, 0, PEER_KV_RX_SLOTS - 1), 0);
    CHECK_EQ(peer_kv_rx_lane_room(rx, 1, 0), 1);
    pthread_mutex_lock(&l.mu);
    CHECK_EQ(l.n, 3); /* B's two and A's on lane 1 */
    pthread_mutex_unlock(&l.mu);
    atomic_store(&g_gate, 1);
    peer_kv_rx_sync(rx);
    CHECK(peer_kv_rx_done(rx, &o, &st) && (intptr_t)o == A && st == 10);
    CHECK(peer_kv_rx_done(rx, &o, &st) && (intptr_t)o == A && st == 11);
    CHECK(!peer_kv_rx_done(rx, &o, &st));
    gated_rx_free(&l, rx);
}

/* Results held back for their owner's older chunk (on a lane whose device is busy) are kept,
 * however many: owner A's chunk on lane 0 waits while 100 more of A's go through lane 1 (each
 * slot taken again as its chunk is applied); every take succeeds, no result comes before A's
 * first, and then all 101 come in A's push order. */
TEST(peer_kv_rx_results_held_for_their_owner_all_come_in_order)
{
    lane_log l;
    peer_kv_rx *rx;
    REQUIRE(gated_rx(&l, &rx) == PEER_OK);
    const intptr_t A = 1;
    REQUIRE(push_one(rx, 0, A, 0) == 0);
    void *o;
    int st, early = 0;
    for (uint32_t i = 1; i <= 100; i++) {
        uint8_t *b;
        int slot = peer_kv_rx_take(rx, 64, 1, &b); /* waits for a slot of lane 1's to free */
        REQUIRE(slot >= 0);
        memset(b, 0, 64);
        peer_kv k = {1, i, 0, 0, b, 64, 0, 0};
        peer_kv_rx_push(rx, slot, 1, (void *)A, &k);
        early += peer_kv_rx_done(rx, &o, &st);
    }
    CHECK_EQ(early, 0);
    atomic_store(&g_gate, 1);
    peer_kv_rx_sync(rx);
    int n = 0, in_order = 1;
    while (peer_kv_rx_done(rx, &o, &st)) in_order &= (intptr_t)o == A && st == n++;
    CHECK_EQ(n, 101);
    CHECK(in_order);
    gated_rx_free(&l, rx);
}
