/* tests/peer/test_peer_abandon.c — a connection that closes while chunks of it are still coming
 * (peer/server.c sconn_close): UCX cannot take back a receive matched to a message whose bytes
 * are still coming, and the node used to wait up to 2 s for each (peer_conn_req_cancel's spin) on
 * its one loop, every other peer's heartbeat and calls with it, and then left the receive's
 * buffer allocated for good (peer_rx_abandoned: an audit's reproducer held the loop 4 s and lost
 * 256 MiB). Now the receive is kept aside with its buffer, looked at every pass, and the buffer
 * freed when UCX is done with it (peer_server_rx_lost_bytes counts what is held).
 *
 * The stalled chunks: sent under connection A's tags (and with A's token) by a second peer B's
 * worker over tcp lanes by rendezvous, B never progressed, so that the node starts receiving them
 * and their bytes wait for B (peer_conn_sender_driven; tests/peer/test_peer_hold.c does the same).
 * A then closes; B lets its bytes go later. */
#include "tests/test.h"
#include "peer/link.h"
#include "peer/msg.h"
#include "peer/peer.h"
#include "scheduler/accel.h"
#include "tests/peer/peer_util.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A heartbeat's round trip on r's connection, seconds (-1: no answer within 10 s). */
static double ping_s(raw *r)
{
    double t0 = peer_now();
    peer_header h;
    const uint8_t *p;
    int st = peer_conn_send(r->c, PEER_PING, NULL, 0, NULL, 0, 10);
    if (!st) st = peer_conn_recv(r->c, (uint32_t)peer_info_bytes(PEER_MAX_DEVS), &h, &p, 10);
    return st || h.type != PEER_INFO ? -1 : peer_now() - t0;
}

static void abandoned(int rx_threads)
{
    setenv("UCX_TLS", "tcp", 1); /* sender-driven lanes (read when UCX's context is made: */
    setenv("UCX_RNDV_THRESH", "4096", 1); /* each test runs in its own process), by rendezvous */
    two t;
    if (two_start_rx(&t, "cpu", rx_threads)) return;
    raw a, b, p;
    REQUIRE(raw_open(t.addr, &a) == 0 && raw_open(t.addr, &b) == 0 && raw_open(t.addr, &p) == 0);
    REQUIRE(peer_conn_sender_driven(a.c) && peer_conn_sender_driven(b.c));
    size_t bytes = 4u << 20;
    uint8_t *m = calloc(1, bytes);
    REQUIRE(m);
    /* no such sequence: refused on its REPLY (no import); marked over tcp lanes, so that the node
     * receives two of the connection's chunks at once */
    peer_kv k = {0, 9999, 0, PEER_KV_TAG_AHEAD, NULL, 0, 0, 0};
    peer_kv_tag_write_fixed(m, b.token, &k); /* B's own chunk first: its lanes up */
    CHECK_EQ(peer_conn_tag_send(b.c, b.base + 1, m, 4096, 10), PEER_OK);
    CHECK_EQ(raw_reply(&b, 5), ACCEL_ERR_INVALID);
    peer_kv_tag_write_fixed(m, a.token, &k);
    CHECK_EQ(peer_conn_tag_send(a.c, a.base + 1, m, 4096, 10), PEER_OK); /* A's lanes marked */
    CHECK_EQ(raw_reply(&a, 5), ACCEL_ERR_INVALID);
    void *r2 = NULL, *r3 = NULL;
    CHECK_EQ(peer_conn_tag_send_start(b.c, a.base + 2, m, bytes, &r2), PEER_OK); /* A's, by B */
    CHECK_EQ(peer_conn_tag_send_start(b.c, a.base + 3, m, bytes, &r3), PEER_OK);
    REQUIRE(r2 && r3);
    for (int i = 0; i < 500 && peer_server_rx_ahead_max(t.srv) < 2; i++) nap_ms(10);
    REQUIRE(peer_server_rx_ahead_max(t.srv) == 2); /* both being received, their bytes held */
    CHECK_EQ(peer_server_rx_lost_bytes(t.srv), 0);

    /* A goes: its two receives are abandoned; meanwhile another peer's heartbeat is answered as
     * always (before: after 2 s a receive, 4 s here) */
    double t0 = peer_now(), worst = 0;
    peer_conn_kill(a.c);
    peer_conn_free(a.c);
    while (peer_now() - t0 < 1.5) {
        double rtt = ping_s(&p);
        CHECK_MSG(rtt >= 0, "the other peer's ping got no answer");
        if (rtt < 0) break;
        if (rtt > worst) worst = rtt;
        nap_ms(20);
    }
    CHECK_MSG(worst < 0.5, "the other peer's ping waited %.2f s while A's receives were abandoned",
              worst);
    size_t held = peer_server_rx_lost_bytes(t.srv);
    CHECK_MSG(held >= 2 * bytes, "%zu bytes held for the abandoned receives, %zu expected", held,
              2 * bytes);

    /* B lets the bytes go: UCX completes the receives, and their buffers come back */
    CHECK_EQ(peer_conn_req_wait(b.c, r2, 10), PEER_OK);
    CHECK_EQ(peer_conn_req_wait(b.c, r3, 10), PEER_OK);
    for (int i = 0; i < 500 && peer_server_rx_lost_bytes(t.srv); i++) nap_ms(10);
    CHECK_EQ(peer_server_rx_lost_bytes(t.srv), 0);
    CHECK(ping_s(&p) >= 0);
    free(m);
    peer_conn_free(b.c);
    peer_conn_free(p.c);
    two_stop(&t);
}

TEST(peer_abandoned_receives_hold_no_one_and_come_back)
{
    abandoned(1);
}

TEST(peer_abandoned_receives_hold_no_one_and_come_back_two_receivers)
{
    abandoned(2);
}
