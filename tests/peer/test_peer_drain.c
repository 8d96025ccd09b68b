/* tests/peer/test_peer_drain.c — a lending node's drain (peer_server_set_draining,
 * peer_server_live_seqs): the node counts the sequences it holds for its peers, which its daemon's
 * drain waits for; draining, it takes no new one and tells its peers it has no room, while the
 * sequences they hold decode on. */
#include "tests/test.h"
#include "peer/peer.h"
#include "tests/peer/peer_util.h"
#include <stdlib.h>

static uint64_t mem_free_of(accel_dev *d)
{
    accel_info in;
    accel_get_info(d, &in);
    return in.mem_free;
}

/* Up to 5 s (five heartbeats, on a loaded 2-core machine) for d's free memory to be 0 (zero 1)
 * or not (zero 0), as the node's heartbeat answers say. */
static int wait_room(accel_dev *d, int zero)
{
    for (int i = 0; i < 100 && (mem_free_of(d) == 0) != zero; i++) nap_ms(50);
    return (mem_free_of(d) == 0) == zero;
}

/* Up to 5 s for the node to hold n sequences for its peers (a closed connection's are freed on
 * the device's thread, after the loop has seen it close). */
static int wait_live(peer_server *s, int n)
{
    for (int i = 0; i < 100 && peer_server_live_seqs(s) != n; i++) nap_ms(50);
    return peer_server_live_seqs(s) == n;
}

TEST(peer_drain_lent_seqs_counted_and_kept)
{
    two t;
    if (two_start(&t, "cpu")) return;
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    CHECK_EQ(peer_server_live_seqs(t.srv), 0);
    CHECK_EQ(peer_server_live_seqs(NULL), 0);
    accel_seq *q;
    REQUIRE(accel_seq_new(rd, 16, &q) == 0);
    CHECK_EQ(peer_server_live_seqs(t.srv), 1);
    CHECK(mem_free_of(rd) > 0);

    peer_server_set_draining(t.srv, 1);
    /* a peer that placed on a view older than the drain: its SEQ_NEW is refused as no room */
    raw r;
    REQUIRE(raw_open(t.addr, &r) == 0);
    CHECK(r.info.devs[0].mem_total > 0);
    CHECK_EQ(r.info.devs[0].mem_free, 0); /* its WELCOME already says no room */
    uint32_t id;
    CHECK_EQ(raw_seq_new(&r, &id), ACCEL_ERR_NOMEM);
    CHECK_EQ(peer_server_live_seqs(t.srv), 1);
    /* the other peer's heartbeat brings it no room, its device neither failed nor lost */
    CHECK_MSG(wait_room(rd, 1), "node A still sees %llu bytes free on the draining node's device",
              (unsigned long long)mem_free_of(rd));
    accel_info in;
    accel_get_info(rd, &in);
    CHECK_EQ(in.health, ACCEL_HEALTH_OK);
    CHECK_EQ(peer_node_state(node), PEER_NODE_UP);
    accel_seq *q2;
    CHECK_EQ(accel_seq_new(rd, 16, &q2), ACCEL_ERR_NOMEM); /* refused by A's own view now */
    /* the sequence it holds decodes on */
    int32_t tok = 1;
    float *lg = malloc(sizeof(float) * (size_t)t.m->cfg.vocab);
    REQUIRE(lg);
    CHECK_EQ(accel_decode(rd, 1, &q, &tok, lg), 0);
    free(lg);
    accel_seq_free(rd, q); /* answered after the node freed it */
    CHECK_EQ(peer_server_live_seqs(t.srv), 0);

    /* resumed: room again, and a sequence of a connection that closes is counted until freed */
    peer_server_set_draining(t.srv, 0);
    CHECK(wait_room(rd, 0));
    CHECK_EQ(decode_once(rd, t.m->cfg.vocab), 0);
    CHECK_EQ(raw_seq_new(&r, &id), 0);
    CHECK_EQ(peer_server_live_seqs(t.srv), 1);
    peer_conn_kill(r.c);
    peer_conn_free(r.c);
    CHECK_MSG(wait_live(t.srv, 0), "%d sequences still counted after their connection closed",
              peer_server_live_seqs(t.srv));
    accel_free(rd);
    peer_node_free(node);
    two_stop(&t);
}
