/* A remote device whose node stays up but whose own connection failed under a call (peer/remote.c
 * peer_rdev_lost): before, a step that ran past the call timeout failed the device for good (only
 * a node marked dead was ever revived), its connection stayed open with the late answer queued for
 * the next call, and the node kept the sequences made on it. Node B's device is wrapped here so
 * that its calls can be made slow on demand. */
#include "devices/devices.h"
#include "peer/peer.h"
#include "scheduler/accel_impl.h"
#include "tests/peer/peer_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic int g_decode_ms;   /* node B's next decode steps take this long first (0: none) */
static _Atomic int g_describe_ms; /* and so does each description of it (every INFO: a ping's) */
static _Atomic int g_block_tokens; /* the KV block size it states (0: its own) */
static struct accel_dev_i g_slow_i;
static int (*g_decode)(accel_dev *, int, accel_seq *const *, const int32_t *, float *);
static void (*g_describe)(accel_dev *, accel_info *);

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int slow_decode(accel_dev *d, int n, accel_seq *const *s, const int32_t *ids, float *lg)
{
    int ms = atomic_load(&g_decode_ms);
    if (ms) sleep_ms(ms);
    return g_decode(d, n, s, ids, lg);
}

static void slow_describe(accel_dev *d, accel_info *out)
{
    int ms = atomic_load(&g_describe_ms);
    if (ms) sleep_ms(ms);
    g_describe(d, out);
    int bt = atomic_load(&g_block_tokens);
    if (bt) out->kv_block_tokens = bt;
}

/* Node B's lent device with its calls wrapped (the server drives it through its vtable). */
static void wrap(two *t)
{
    g_slow_i = *t->lent->i;
    g_decode = g_slow_i.decode;
    g_slow_i.decode = slow_decode;
    g_describe = g_slow_i.describe;
    g_slow_i.describe = slow_describe;
    t->lent->i = &g_slow_i;
}

/* Node B's lent device's sequences (any thread may read a device's info). */
static int lent_seqs(two *t)
{
    accel_info li;
    accel_get_info(t->lent, &li);
    return li.n_seqs;
}

/* One decode step 1.5 s past the call timeout (1 s here): the device fails, then within a few
 * heartbeats it is connected again and revived (revivals 1: the scheduler drops its mark), the
 * node has freed the sequence made on the lost connection, the old handle is stale, and a new
 * sequence decodes as before (the late answer of the slow step is not read as its answer). */
TEST(peer_device_lost_by_a_call_reconnected)
{
    setenv("TANDEM_PEER_CALL_TIMEOUT_S", "1", 1);
    two t;
    if (two_start(&t, "cpu")) return;
    wrap(&t);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    int vocab = t.m->cfg.vocab;
    float *want = malloc(sizeof(float) * (size_t)vocab),
          *lg = malloc(sizeof(float) * (size_t)vocab);
    accel_seq *old, *s;
    int32_t id = 1;
    REQUIRE(accel_seq_new(rd, 16, &old) == 0);
    REQUIRE(accel_decode(rd, 1, &old, &id, want) == 0);
    atomic_store(&g_decode_ms, 2500);
    CHECK_EQ(accel_decode(rd, 1, &old, &id, lg), ACCEL_ERR_DEVICE);
    atomic_store(&g_decode_ms, 0);
    accel_info info;
    accel_get_info(rd, &info);
    CHECK(info.health == ACCEL_HEALTH_FAILED);
    CHECK_EQ(peer_node_state(node), PEER_NODE_UP); /* the node itself was never lost */

    double t0 = peer_now();
    do {
        sleep_ms(100);
        accel_get_info(rd, &info);
    } while ((info.health != ACCEL_HEALTH_OK || lent_seqs(&t)) && peer_now() - t0 < 8);
    CHECK_MSG(info.health == ACCEL_HEALTH_OK, "still %s %.1f s after the failed call",
              accel_health_name(info.health), peer_now() - t0);
    CHECK_EQ(info.revivals, 1u);
    CHECK_EQ(lent_seqs(&t), 0); /* the lost connection's sequence freed on the node */
    CHECK_EQ(peer_node_state(node), PEER_NODE_UP);

    CHECK_EQ(accel_decode(rd, 1, &old, &id, lg), ACCEL_ERR_INVALID); /* stale: refused, not sent */
    accel_seq_free(rd, old);
    REQUIRE(accel_seq_new(rd, 16, &s) == 0);
    CHECK_EQ(accel_decode(rd, 1, &s, &id, lg), 0);
    CHECK(memcmp(lg, want, sizeof(float) * (size_t)vocab) == 0);
    accel_seq_free(rd, s);
    accel_get_info(rd, &info);
    CHECK(info.health == ACCEL_HEALTH_OK);
    CHECK_EQ(info.revivals, 1u);

    accel_free(rd);
    peer_node_free(node);
    free(want);
    free(lg);
    two_stop(&t);
}

/* A ping whose wait timed out while a call kept the node busy (tolerated: the node is not dead)
 * gets its answer late; the heartbeat skips it and reads its next ping's own answer. Node B takes
 * 200 ms to describe its device here, so every true round trip of a ping is at least that: before,
 * each ping after the tolerated timeout read the previous ping's answer, already waiting, and the
 * fastest round trip (link_s, half of it) fell to microseconds. */
TEST(peer_heartbeat_skips_late_answers)
{
    two t;
    if (two_start(&t, "cpu")) return;
    wrap(&t);
    atomic_store(&g_describe_ms, 200);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    float *lg = malloc(sizeof(float) * (size_t)t.m->cfg.vocab);
    accel_seq *s;
    int32_t id = 1;
    REQUIRE(accel_seq_new(rd, 16, &s) == 0);
    sleep_ms(1500); /* a ping answered: the round trip measured */
    accel_info info;
    accel_get_info(rd, &info);
    CHECK_MSG(info.link_s >= 0.1, "link_s %.6f s before", info.link_s);
    /* past PEER_DEAD_S, below the call timeout: a ping times out while the call is in flight */
    atomic_store(&g_decode_ms, (int)(PEER_DEAD_S * 1000) + 1500);
    CHECK_EQ(accel_decode(rd, 1, &s, &id, lg), 0);
    atomic_store(&g_decode_ms, 0);
    sleep_ms(4000); /* pings after it */
    accel_get_info(rd, &info);
    CHECK_MSG(info.link_s >= 0.1,
              "link_s %.6f s after a tolerated ping timeout (a ping takes 0.2 s)", info.link_s);
    CHECK(info.health == ACCEL_HEALTH_OK);
    CHECK_EQ(peer_node_state(node), PEER_NODE_UP);
    atomic_store(&g_describe_ms, 0);
    accel_seq_free(rd, s);
    accel_free(rd);
    peer_node_free(node);
    free(lg);
    two_stop(&t);
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_refused; /* "peer_reconnect_failed" lines naming other devices */

static void keep_refusal(int warn, const char *event, const char *msg)
{
    (void)warn;
    pthread_mutex_lock(&g_mu);
    if (!strcmp(event, "peer_reconnect_failed") && strstr(msg, "other devices")) g_refused++;
    pthread_mutex_unlock(&g_mu);
}

static int refusals(void)
{
    pthread_mutex_lock(&g_mu);
    int n = g_refused;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* A node lost and back at its address whose device now describes itself otherwise than when it
 * was opened (here its KV block size): the device is not revived. Before, only the device's name
 * and kind were compared and it was revived with its old description (rdev.di), which the remote
 * device (the KV cut in the old block size, DECODE_ARGMAX where the old caps offered it) and the
 * scheduler (what it read at its start) kept using. */
TEST(peer_node_back_with_another_device_not_revived)
{
    peer_set_log(keep_refusal); /* before any thread that logs starts (peer.h) */
    two t;
    if (two_start(&t, "cpu")) return;
    wrap(&t);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    accel_info info;
    accel_get_info(rd, &info);
    int bt = info.kv_block_tokens;
    peer_server_stop(t.srv);
    t.srv = NULL;
    double t0 = peer_now();
    do {
        sleep_ms(100);
        accel_get_info(rd, &info);
    } while (info.health != ACCEL_HEALTH_FAILED &&
             peer_now() - t0 < PEER_HEARTBEAT_S + PEER_DEAD_S + 2);
    REQUIRE(info.health == ACCEL_HEALTH_FAILED);

    /* the node again, its device cutting KV in other blocks (the wrapper states them; its pool's
     * usage hidden, so that the statement is what accel_get_info, and so the node, says) */
    REQUIRE(bt > 0);
    g_slow_i.kv_usage = NULL;
    atomic_store(&g_block_tokens, bt == 16 ? 32 : 16);
    char err[256], listen[64];
    snprintf(listen, sizeof listen, "%s", t.addr);
    peer_server_cfg sc = {listen, "nodeB", KEY, t.m, &t.lent, 1, 0};
    REQUIRE(peer_server_start(&sc, &t.srv, err, sizeof err) == PEER_OK);
    t0 = peer_now();
    do {
        sleep_ms(100);
        accel_get_info(rd, &info);
    } while (info.health != ACCEL_HEALTH_OK && !refusals() &&
             peer_now() - t0 < 2 * PEER_RECONNECT_MAX_S + 2);
    CHECK_MSG(refusals() >= 1, "no reconnection refused in %.1f s", peer_now() - t0);
    CHECK_MSG(info.health == ACCEL_HEALTH_FAILED && info.revivals == 0,
              "revived (%s, revivals %u) with block size %d, stated now %d",
              accel_health_name(info.health), info.revivals, info.kv_block_tokens,
              atomic_load(&g_block_tokens));
    CHECK_EQ(peer_node_state(node), PEER_NODE_DOWN);
    accel_free(rd);
    peer_node_free(node);
    two_stop(&t);
    peer_set_log(NULL);
}
