/* A remote device's room and health from its node's heartbeat (peer/remote_live.c). Before, a
 * daemon using a peer's device never read the heartbeat's answer: the device's free memory was
 * its connect-time total less what this daemon itself placed there, so two daemons sharing one
 * lent device each saw all of it, and a device failed or degraded on its node looked healthy
 * until a call failed there. Here two clients (two peer nodes of this process, as two daemons
 * would be) share node B's CPU device, and node B's device is degraded then failed as its own
 * backend would do it. */
#include "devices/devices.h"
#include "peer/remote_impl.h"
#include "tests/peer/peer_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K 1000ull /* bytes a position in the arithmetic's tests */

TEST(peer_live_outside_edges)
{
    /* the example of remote_live.c: a 1000 card, ours hold 300 of it, another daemon 400 */
    CHECK_EQ(peer_live_outside(1000, 1000, 300, 300), 400);
    /* nobody else: nothing outside, whatever ours hold */
    CHECK_EQ(peer_live_outside(1000, 1000, 700, 300), 0);
    CHECK_EQ(peer_live_outside(1000, 1000, 1000, 0), 0);
    /* the node reports more free than total (peer_info_read refuses it; the sum must not wrap) */
    CHECK_EQ(peer_live_outside(1000, 1000, 5000, 0), 0);
    CHECK_EQ(peer_live_outside(1000, 600, 5000, 0), 400);
    /* zero free: all of it is held, ours or the others' */
    CHECK_EQ(peer_live_outside(1000, 1000, 0, 0), 1000);
    CHECK_EQ(peer_live_outside(1000, 1000, 0, 250), 750);
    /* zero total (a node restarted with no memory for KV): no room at all */
    CHECK_EQ(peer_live_outside(1000, 0, 0, 0), 1000);
    CHECK_EQ(peer_live_outside(0, 0, 0, 0), 0);
    /* ours counted for more than the node's whole use (our sequences freed on the node after it
     * answered, or counted before their KV arrived): nobody else, never less than nothing */
    CHECK_EQ(peer_live_outside(1000, 1000, 900, 300), 0);
    /* our mem_limit (600) below the node's total (1000): the others use what lies past our limit
     * first */
    CHECK_EQ(peer_live_outside(600, 1000, 600, 0), 0);
    CHECK_EQ(peer_live_outside(600, 1000, 200, 0), 400);
    CHECK_EQ(peer_live_outside(600, 1000, 0, 100), 500);
    /* a node whose device is smaller than our budget now: what is missing counts as held */
    CHECK_EQ(peer_live_outside(1000, 800, 800, 0), 200);
}

/* a remote device as the arithmetic sees it, no connection: node total = budget = 1024
 * positions of K bytes, KV blocks of 16 positions (paged, as every node device is) */
static rdev *fake_rdev(void)
{
    rdev *d = calloc(1, sizeof *d);
    peer_node *n = calloc(1, sizeof *n);
    if (!d || !n) abort();
    d->node = n;
    snprintf(d->name, sizeof d->name, "nodeB/cpu");
    d->di.kv_bytes_per_token = K;
    d->di.kv_block_tokens = 16;
    d->base.mem_total = 1024 * K;
    d->base.kv_bytes_per_token = K;
    return d;
}

static void fake_free(rdev *d)
{
    free(d->node);
    free(d);
}

static uint64_t fake_mem_free(rdev *d)
{
    uint64_t r = atomic_load(&d->base.mem_reserved);
    return r < d->base.mem_total ? d->base.mem_total - r : 0;
}

/* the wrapper's side of accel_seq_new / _free (scheduler/accel.c), by hand */
static void fake_reserve(rdev *d, rseq *s, int cap)
{
    s->cap = cap;
    atomic_fetch_add(&d->base.mem_reserved, (uint64_t)cap * K);
}

TEST(peer_live_room_between_heartbeats)
{
    rdev *d = fake_rdev();
    CHECK_EQ(peer_rdev_node_bytes(d, 100, 0), 0);         /* paged: nothing until KV arrives */
    CHECK_EQ(peer_rdev_node_bytes(d, 100, 1), 16 * K);    /* a whole block */
    CHECK_EQ(peer_rdev_node_bytes(d, 100, 500), 112 * K); /* never past its capacity's blocks */
    d->di.kv_block_tokens = 0;
    CHECK_EQ(peer_rdev_node_bytes(d, 100, 0), 100 * K); /* unpaged: reserved at SEQ_NEW */
    d->di.kv_block_tokens = 16;

    /* ours: a sequence of capacity 352 holding 288 positions; another daemon holds 400 */
    rseq a = {0};
    fake_reserve(d, &a, 352);
    peer_rdev_own_note(d, &a, 288);
    CHECK_EQ(atomic_load(&d->own_bytes), 288 * K);
    peer_dev_info in = {.mem_total = 1024 * K, .mem_free = (1024 - 288 - 400) * K};
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(d->outside, 400 * K);
    CHECK_EQ(fake_mem_free(d), (1024 - 352 - 400) * K); /* ours at its capacity, theirs once */
    /* the same answer again: nothing moves (no double counting heartbeat after heartbeat) */
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(fake_mem_free(d), (1024 - 352 - 400) * K);

    /* ours grows by a decode step into a new block: the node's next answer counts it, so does
     * own: the others stay 400 */
    peer_rdev_own_note(d, &a, 289);
    in.mem_free -= 16 * K;
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(d->outside, 400 * K);

    /* ours freed between two heartbeats: our share shows at once */
    peer_rdev_own_gone(d, &a);
    atomic_fetch_sub(&d->base.mem_reserved, 352 * K);
    CHECK_EQ(atomic_load(&d->own_bytes), 0);
    CHECK_EQ(fake_mem_free(d), (1024 - 400) * K);
    /* an answer the node made before it freed ours, read after: own read before the ping (ours
     * then) keeps it from being taken for the others' (it would be 400 + 304 outside) */
    peer_rdev_live_apply(d, &in, 304 * K);
    CHECK_EQ(d->outside, 400 * K);
    CHECK_EQ(peer_live_outside(1024 * K, in.mem_total, in.mem_free, 0), 704 * K);
    /* the next answer, made after the free */
    in.mem_free = (1024 - 400) * K;
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(d->outside, 400 * K);
    CHECK_EQ(fake_mem_free(d), (1024 - 400) * K);
    /* the other daemon leaves: all of it free again */
    in.mem_free = 1024 * K;
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(d->outside, 0);
    CHECK_EQ(atomic_load(&d->base.mem_reserved), 0);

    /* a sequence of an older connection (its node freed it when the connection went; own was
     * reset then) changes nothing */
    rseq old = {.gen = d->gen + 1};
    peer_rdev_own_note(d, &old, 100);
    peer_rdev_own_gone(d, &old);
    CHECK_EQ(atomic_load(&d->own_bytes), 0);
    fake_free(d);
}

TEST(peer_live_health_mirrored)
{
    rdev *d = fake_rdev();
    peer_dev_info in = {
        .mem_total = 1024 * K, .mem_free = 1024 * K, .health = ACCEL_HEALTH_DEGRADED};
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(atomic_load(&d->base.health), ACCEL_HEALTH_DEGRADED);
    in.health = ACCEL_HEALTH_OK; /* one way, as on the node: only a revival lifts it */
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(atomic_load(&d->base.health), ACCEL_HEALTH_DEGRADED);
    in.health = ACCEL_HEALTH_FAILED;
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(atomic_load(&d->base.health), ACCEL_HEALTH_FAILED);
    fake_free(d);
    /* a device lost (its revival decides) is left as it is */
    d = fake_rdev();
    atomic_store(&d->lost, 1);
    peer_rdev_live_apply(d, &in, 0);
    CHECK_EQ(atomic_load(&d->base.health), ACCEL_HEALTH_OK);
    fake_free(d);
}

/* ---------------------------------------------------------------- two clients, one lent device */

static uint64_t mem_free_of(accel_dev *d)
{
    accel_info in;
    accel_get_info(d, &in);
    return in.mem_free;
}

/* Waits up to 5 s (five heartbeats: a loaded 2-core machine) for d's mem_free to be `want`. */
static int wait_free(accel_dev *d, uint64_t want)
{
    for (int i = 0; i < 100 && mem_free_of(d) != want; i++) nap_ms(50);
    return mem_free_of(d) == want;
}

static int wait_health(accel_dev *d, enum accel_health want)
{
    accel_info in;
    for (int i = 0; i < 100; i++, nap_ms(50)) {
        accel_get_info(d, &in);
        if (in.health == want) return 1;
    }
    return 0;
}

typedef struct live {
    model *m;
    accel_dev *lent, *pf;
    peer_server *srv;
    peer_node *node[2];
    accel_dev *rd[2];
    uint64_t per; /* KV bytes a position */
    int bt;       /* the lent device's block */
} live;

/* Node B lends a CPU device of 32 blocks; clients nodeA and nodeC open it; pf prefills here. */
static int live_start(live *L)
{
    memset(L, 0, sizeof *L);
    char err[256];
    accel_dev *probe;
    if (t_open(MODEL, "cpu", &L->m, &probe)) return -1;
    accel_info pi;
    accel_get_info(probe, &pi);
    accel_free(probe);
    L->per = pi.kv_bytes_per_token;
    L->bt = pi.kv_block_tokens;
    accel_opts o = {.threads = 2, .mem_limit = 32ull * (uint64_t)L->bt * L->per};
    L->lent = devices_open("cpu", L->m, &o, err, sizeof err);
    accel_opts po = {.threads = 2};
    L->pf = devices_open("cpu", L->m, &po, err, sizeof err);
    if (!L->lent || !L->pf || accel_warmup(L->lent)) {
        t_fail(__FILE__, __LINE__, "devices_open(cpu): %s", err);
        return -1;
    }
    peer_server_cfg sc = {"127.0.0.1:0", "nodeB", KEY, L->m, &L->lent, 1, 0};
    if (peer_server_start(&sc, &L->srv, err, sizeof err)) {
        t_fail(__FILE__, __LINE__, "peer_server_start: %s", err);
        return -1;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", peer_server_port(L->srv));
    const char *names[2] = {"nodeA", "nodeC"};
    for (int i = 0; i < 2; i++) {
        if (peer_node_connect(addr, names[i], KEY, L->m, 5, &L->node[i], err, sizeof err)) {
            t_fail(__FILE__, __LINE__, "peer_node_connect: %s", err);
            return -1;
        }
        L->rd[i] = devices_open_remote(L->node[i], 0, L->m, NULL, err, sizeof err);
        if (!L->rd[i]) {
            t_fail(__FILE__, __LINE__, "devices_open_remote: %s", err);
            return -1;
        }
    }
    return 0;
}

static void live_stop(live *L)
{
    for (int i = 0; i < 2; i++) {
        if (L->rd[i]) accel_free(L->rd[i]);
        peer_node_free(L->node[i]);
    }
    peer_server_stop(L->srv);
    accel_free(L->lent);
    accel_free(L->pf);
    model_free(L->m);
}

static void kv_free(kvcopy *kv)
{
    for (int i = 0; i < kv->n; i++) free(kv->mem[i]);
    kv->n = 0;
}

/* A sequence of capacity cap on d holding a prompt of n tokens imported from pf. */
static int hold(live *L, accel_dev *d, int n, int cap, accel_seq **s)
{
    int32_t ids[512], first;
    for (int i = 0; i < n; i++) ids[i] = 1 + (i * 7) % 500;
    kvcopy kv = {0};
    int st = prefill_kv(L->pf, ids, n, &kv, &first);
    if (!st) st = accel_seq_new(d, cap, s);
    for (int i = 0; i < kv.n && !st; i++) st = accel_kv_import_crc(d, *s, &kv.l[i], kv.crc[i]);
    kv_free(&kv);
    return st;
}

/* Client 1 (nodeA) holds 24 of the device's 32 blocks: client 2 (nodeC) sees 8 left within a
 * heartbeat and refuses at once what does not fit in them; its own sequence shows at once and is
 * counted once however many heartbeats pass; client 1's sequence freed, client 2 sees the room
 * again. On main client 2 saw all 32 blocks free throughout. */
TEST(peer_live_two_clients_share_a_device)
{
    live L;
    if (live_start(&L)) {
        live_stop(&L);
        return;
    }
    const int bt = L.bt;
    const uint64_t per = L.per, total = 32ull * (uint64_t)bt * per;
    accel_info i2;
    accel_get_info(L.rd[1], &i2);
    CHECK_EQ(i2.mem_total, total);
    CHECK_EQ(i2.mem_free, total);

    accel_seq *s1 = NULL, *s2 = NULL, *big = NULL;
    int p1 = 24 * bt, cap1 = p1 + bt;
    CHECK_EQ(hold(&L, L.rd[0], p1, cap1, &s1), ACCEL_OK);
    /* client 1: its own sequence at its capacity, not also as someone else's blocks */
    CHECK_MSG(wait_free(L.rd[0], total - (uint64_t)cap1 * per), "client 1 free %llu, want %llu",
              (unsigned long long)mem_free_of(L.rd[0]),
              (unsigned long long)(total - (uint64_t)cap1 * per));
    /* client 2: the 24 blocks client 1 holds are gone */
    uint64_t left = total - (uint64_t)p1 * per;
    CHECK_MSG(wait_free(L.rd[1], left), "client 2 free %llu, want %llu",
              (unsigned long long)mem_free_of(L.rd[1]), (unsigned long long)left);
    /* what does not fit is refused here, before any call (the node is not asked) */
    CHECK_EQ(accel_seq_new(L.rd[1], 9 * bt, &big), ACCEL_ERR_NOMEM);
    if (big) accel_seq_free(L.rd[1], big);
    accel_get_info(L.rd[1], &i2);
    CHECK_EQ(i2.n_seqs, 0);
    CHECK_EQ(i2.mem_outside, (uint64_t)p1 * per); /* what the scheduler's placement sees */
    accel_get_info(L.rd[0], &i2);
    CHECK_EQ(i2.mem_outside, 0); /* client 1's own blocks are not the others' */
    accel_info li;
    accel_get_info(L.lent, &li);
    CHECK_EQ(li.n_seqs, 1); /* client 1's only */
    /* what fits is made; its KV (2 blocks) lands on the node */
    int cap2 = 6 * bt;
    CHECK_EQ(hold(&L, L.rd[1], 2 * bt, cap2, &s2), ACCEL_OK);
    uint64_t left2 = left - (uint64_t)cap2 * per;
    CHECK_EQ(mem_free_of(L.rd[1]), left2); /* at once: our own */
    nap_ms(2500);                          /* two heartbeats or more: still counted once */
    CHECK_EQ(mem_free_of(L.rd[1]), left2);
    /* client 1 lets its 24 blocks go: client 2 has all but its own sequence */
    accel_seq_free(L.rd[0], s1);
    CHECK_MSG(wait_free(L.rd[1], total - (uint64_t)cap2 * per), "client 2 free %llu, want %llu",
              (unsigned long long)mem_free_of(L.rd[1]),
              (unsigned long long)(total - (uint64_t)cap2 * per));
    CHECK(wait_free(L.rd[0], total - 2ull * bt * per)); /* client 1 sees client 2's 2 blocks */
    accel_seq_free(L.rd[1], s2);
    CHECK(wait_free(L.rd[1], total));
    CHECK(wait_free(L.rd[0], total));
    live_stop(&L);
}

/* Node B's device degraded, then failed, by its own backend: both clients see it within a
 * heartbeat (the scheduler places on DEGRADED devices after OK ones and never on FAILED ones),
 * and a failed one refuses calls here. */
TEST(peer_live_node_health_reaches_clients)
{
    live L;
    if (live_start(&L)) {
        live_stop(&L);
        return;
    }
    accel_dev_degrade(L.lent);
    for (int i = 0; i < 2; i++) CHECK(wait_health(L.rd[i], ACCEL_HEALTH_DEGRADED));
    accel_dev_fail(L.lent);
    for (int i = 0; i < 2; i++) CHECK(wait_health(L.rd[i], ACCEL_HEALTH_FAILED));
    accel_seq *s = NULL;
    CHECK_EQ(accel_seq_new(L.rd[0], 16, &s), ACCEL_ERR_DEVICE);
    live_stop(&L);
}

/* Node B unreachable (its server stopped) while its device fails; B answers again at its
 * address, reporting the device FAILED: the client's device stays failed (revivals 0) once the
 * node is up again. Before, every device of a node that answered again was revived and placed on
 * until a call failed there. */
TEST(peer_live_node_back_with_failed_device_not_revived)
{
    two t;
    if (two_start(&t, "cpu")) return;
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    peer_server_stop(t.srv);
    t.srv = NULL;
    CHECK(wait_health(rd, ACCEL_HEALTH_FAILED));
    accel_dev_fail(t.lent);
    char err[256], listen[64];
    snprintf(listen, sizeof listen, "%s", t.addr);
    peer_server_cfg sc = {listen, "nodeB", KEY, t.m, &t.lent, 1, 0};
    REQUIRE(peer_server_start(&sc, &t.srv, err, sizeof err) == PEER_OK);
    /* reconnection backoff: up to PEER_RECONNECT_MAX_S after the loss, and slack */
    for (int i = 0; i < 240 && peer_node_state(node) != PEER_NODE_UP; i++) nap_ms(50);
    CHECK_EQ(peer_node_state(node), PEER_NODE_UP);
    nap_ms(2500); /* two heartbeats or more */
    accel_info info;
    accel_get_info(rd, &info);
    CHECK_MSG(info.health == ACCEL_HEALTH_FAILED && info.revivals == 0, "revived (%s, revivals %u)",
              accel_health_name(info.health), info.revivals);
    accel_free(rd);
    peer_node_free(node);
    two_stop(&t);
}
