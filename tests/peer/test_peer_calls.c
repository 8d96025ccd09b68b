/* tests/peer/test_peer_calls.c — a lent device's calls run on a thread of that device, not on the
 * node's loop (peer/server_call.c): one peer's slow step holds neither another peer's heartbeat
 * nor another device's calls, and a connection that closes while its call runs leaves nothing
 * behind. Node B's devices are CPU devices whose decode sleeps when asked (a big model on a slow
 * device, without the big model). */
#include "tests/test.h"
#include "devices/devices.h"
#include "peer/link.h"
#include "peer/msg.h"
#include "peer/peer.h"
#include "scheduler/accel_impl.h"
#include "tests/peer/peer_util.h"
#include "tests/util.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The wrapped devices: a decode sleeps g_sleep_us once g_slow is set (each decode while it is);
 * the decodes running at once and the most seen; the sequences alive. */
static struct accel_dev_i g_slow_i;
static int (*g_decode)(accel_dev *, int, accel_seq *const *, const int32_t *, float *);
static int (*g_seq_new)(accel_dev *, int, accel_seq **);
static void (*g_seq_free)(accel_dev *, accel_seq *);
static _Atomic int g_slow, g_running, g_running_max, g_seqs;
static int g_sleep_us;

static int slow_decode(accel_dev *d, int n, accel_seq *const *s, const int32_t *ids, float *lg)
{
    int now = atomic_fetch_add(&g_running, 1) + 1;
    for (int m = atomic_load(&g_running_max);
         now > m && !atomic_compare_exchange_weak(&g_running_max, &m, now);) {
    }
    if (atomic_load(&g_slow)) usleep((useconds_t)g_sleep_us);
    int st = g_decode(d, n, s, ids, lg);
    atomic_fetch_sub(&g_running, 1);
    return st;
}

static int counted_seq_new(accel_dev *d, int cap, accel_seq **out)
{
    int st = g_seq_new(d, cap, out);
    if (!st) atomic_fetch_add(&g_seqs, 1);
    return st;
}

static void counted_seq_free(accel_dev *d, accel_seq *s)
{
    atomic_fetch_sub(&g_seqs, 1);
    g_seq_free(d, s);
}

/* d's vtable wrapped (every wrapped device shares one table: they are all CPU devices) */
static void wrap(accel_dev *d, int sleep_us)
{
    g_slow_i = *d->i;
    g_decode = g_slow_i.decode;
    g_seq_new = g_slow_i.seq_new;
    g_seq_free = g_slow_i.seq_free;
    g_slow_i.decode = slow_decode;
    g_slow_i.seq_new = counted_seq_new;
    g_slow_i.seq_free = counted_seq_free;
    g_sleep_us = sleep_us;
    atomic_store(&g_slow, 0);
    atomic_store(&g_running_max, 0);
    atomic_store(&g_seqs, 0);
    d->i = &g_slow_i;
}

/* A client's decode of token 1 on a fresh sequence of rd, on a thread of its own. */
typedef struct job {
    accel_dev *rd;
    int vocab;
    int st;
    float *lg;
} job;

static void *decode_main(void *arg)
{
    job *j = arg;
    accel_seq *s;
    int32_t id = 1;
    j->st = accel_seq_new(j->rd, 16, &s);
    if (!j->st) {
        j->st = accel_decode(j->rd, 1, &s, &id, j->lg);
        accel_seq_free(j->rd, s);
    }
    return NULL;
}

/* The logits of token 1 at position 0 on d itself: what a remote decode must give back. */
static int ref_logits(accel_dev *d, float *lg)
{
    accel_seq *s;
    int32_t id = 1;
    int st = accel_seq_new(d, 16, &s);
    if (st) return st;
    st = accel_decode(d, 1, &s, &id, lg);
    accel_seq_free(d, s);
    return st;
}

/* Client X's step takes 4.5 s on node B (under its own 8 s call timeout); client Y, idle, holds
 * a sequence there. The node's loop ran X's step inline and answered nobody meanwhile: Y's
 * heartbeat declared the node dead after PEER_DEAD_S, failed its device and lost its sequence
 * (an audit's reproducer). Now the step runs on the device's thread: Y sees the node up all
 * along, its sequence still there, and X gets the right logits. */
TEST(peer_slow_call_holds_no_one)
{
    two t;
    if (two_start(&t, "cpu")) return;
    int vocab = t.m->cfg.vocab;
    float *ref = malloc(sizeof(float) * (size_t)vocab);
    REQUIRE(ref && ref_logits(t.lent, ref) == 0);
    wrap(t.lent, 4500 * 1000);
    peer_node *nx, *ny;
    accel_dev *rx, *ry;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &nx, &rx) == 0);
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &ny, &ry) == 0);
    accel_seq *ys;
    REQUIRE(accel_seq_new(ry, 16, &ys) == 0);
    job j = {rx, vocab, -99, malloc(sizeof(float) * (size_t)vocab)};
    REQUIRE(j.lg);
    atomic_store(&g_slow, 1);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, decode_main, &j) == 0);
    /* while X's step runs, and one heartbeat deadline after it */
    double t0 = peer_now();
    int down = 0;
    while (peer_now() - t0 < 4.5 + PEER_DEAD_S && !down) {
        down = peer_node_state(ny) != PEER_NODE_UP;
        nap_ms(50);
    }
    CHECK_MSG(!down, "the idle client lost the node %.1f s into another client's step",
              peer_now() - t0);
    pthread_join(th, NULL);
    atomic_store(&g_slow, 0);
    CHECK_EQ(j.st, 0);
    if (!j.st)
        for (int i = 0; i < vocab; i++)
            if (j.lg[i] != ref[i]) {
                CHECK_MSG(0, "X's logit %d: %g, %g on the device itself", i, j.lg[i], ref[i]);
                break;
            }
    accel_info info;
    accel_get_info(ry, &info);
    CHECK(info.health == ACCEL_HEALTH_OK);
    CHECK_EQ(info.revivals, 0);
    /* Y's sequence is still there: it decodes */
    int32_t id = 1;
    CHECK_EQ(accel_decode(ry, 1, &ys, &id, j.lg), 0);
    accel_seq_free(ry, ys);
    free(j.lg);
    free(ref);
    accel_free(rx);
    accel_free(ry);
    peer_node_free(nx);
    peer_node_free(ny);
    two_stop(&t);
}

/* Node B lends two CPU devices; two clients decode at once, one on each, each step 1.5 s: both
 * steps run at the same time (each device has its own thread; the loop ran them one after the
 * other), and each client gets its device's logits. */
TEST(peer_two_devices_calls_run_at_once)
{
    two t;
    if (two_pair_open(&t)) return;
    model *m = t.m;
    char err[256];
    int vocab = m->cfg.vocab;
    float *ref = malloc(sizeof(float) * (size_t)vocab);
    REQUIRE(ref && ref_logits(t.lent, ref) == 0);
    wrap(t.lent, 1500 * 1000);
    t.lent2->i = &g_slow_i;
    REQUIRE(two_pair_serve(&t) == 0);
    const char *addr = t.addr;
    peer_node *n[2];
    accel_dev *rd[2];
    job j[2];
    for (int i = 0; i < 2; i++) {
        REQUIRE(peer_node_connect(addr, "nodeA", KEY, m, 5, &n[i], err, sizeof err) == 0);
        rd[i] = devices_open_remote(n[i], i, m, NULL, err, sizeof err);
        REQUIRE(rd[i]);
        j[i] = (job){rd[i], vocab, -99, malloc(sizeof(float) * (size_t)vocab)};
        REQUIRE(j[i].lg);
    }
    atomic_store(&g_slow, 1);
    double t0 = peer_now();
    pthread_t th[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, decode_main, &j[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    double wall = peer_now() - t0;
    atomic_store(&g_slow, 0);
    CHECK_MSG(atomic_load(&g_running_max) == 2,
              "the two devices' steps ran one at a time (%.2f s for two 1.5 s steps)", wall);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(j[i].st, 0);
        if (!j[i].st)
            CHECK_MSG(!memcmp(j[i].lg, ref, sizeof(float) * (size_t)vocab), "client %d's logits",
                      i);
        free(j[i].lg);
        accel_free(rd[i]);
        peer_node_free(n[i]);
    }
    free(ref);
    two_stop(&t);
}

/* A peer that asks for a 1.5 s step and closes its connection at once: the step finishes on the
 * device's thread, its answer is let go, the peer's sequence is freed there (none left alive),
 * and the node goes on serving another peer meanwhile and after. */
TEST(peer_conn_closed_during_call)
{
    two t;
    if (two_start(&t, "cpu")) return;
    wrap(t.lent, 1500 * 1000);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    raw r;
    REQUIRE(raw_open(t.addr, &r) == 0);
    uint32_t seq;
    REQUIRE(raw_seq_new(&r, &seq) == 0);
    CHECK_EQ(atomic_load(&g_seqs), 1);
    uint8_t buf[64];
    int32_t id = 1;
    REQUIRE(peer_decode_bytes(1) <= sizeof buf);
    peer_decode_write(buf, 0, 1, &seq, &id);
    atomic_store(&g_slow, 1);
    REQUIRE(peer_conn_send(r.c, PEER_DECODE, buf, peer_decode_bytes(1), NULL, 0, 5) == 0);
    while (!atomic_load(&g_running)) nap_ms(5); /* the step is running */
    peer_conn_kill(r.c);
    peer_conn_free(r.c);
    /* the other peer is served meanwhile (its pings; its step waits for the device) */
    double t0 = peer_now();
    int down = 0;
    while (atomic_load(&g_running) && !down) {
        down = peer_node_state(node) != PEER_NODE_UP;
        nap_ms(20);
    }
    CHECK(!down);
    atomic_store(&g_slow, 0);
    /* the closed peer's sequence freed once its step is done */
    while (atomic_load(&g_seqs) && peer_now() - t0 < 10) nap_ms(20);
    CHECK_EQ(atomic_load(&g_seqs), 0);
    CHECK_EQ(decode_once(rd, t.m->cfg.vocab), 0);
    accel_free(rd);
    peer_node_free(node);
    two_stop(&t);
    CHECK_EQ(atomic_load(&g_seqs), 0);
}
