/* tests/peer/test_peer_busy.c — one peer must not make the node look dead to the others. The
 * node's one loop serves every connection (peer/server.c; device calls on their devices'
 * threads, peer/server_call.c), so whatever holds the loop holds every peer's heartbeat, and a
 * peer's heartbeat gives up on the node after PEER_DEAD_S. */
#include "tests/test.h"
#include "devices/devices.h"
#include "peer/link.h"
#include "peer/msg.h"
#include "peer/peer.h"
#include "scheduler/accel_impl.h"
#include "tests/peer/peer_util.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Node B's device's decode steps made free (logits of zeros), so that what holds the node's loop
 * here is the sends of their answers, not the steps (in a sanitizer's build too). */
static struct accel_dev_i g_fast_i;
static int fast_decode(accel_dev *d, int n, accel_seq *const *s, const int32_t *ids, float *lg)
{
    (void)s;
    (void)ids;
    memset(lg, 0, sizeof(float) * (size_t)n * (size_t)d->m->cfg.vocab);
    return ACCEL_OK;
}

/* A peer that asks for decode steps and reads none of their answers (a hung or hostile node):
 * once the socket's buffers are full, each LOGITS answer waits for it. The node waited up to 10 s
 * (SEND_TIMEOUT_S) on its loop, and an idle peer's heartbeat declared the node dead after 3 s (the
 * audit's reproducer: another client's device failed). Now an answer that cannot go within 1 s
 * closes the connection that does not read: the other peer sees the node up throughout. */
TEST(peer_unread_answers_hold_no_one)
{
    two t;
    if (two_start(&t, "cpu")) return;
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0); /* the other peer, idle */
    raw r;
    REQUIRE(raw_open(t.addr, &r) == 0);
    enum { B = 64, N = 300 }; /* answers of 128 KiB: 37.5 MiB, past any socket's buffers */
    uint32_t seqs[B];
    int32_t ids[B];
    for (int i = 0; i < B; i++) {
        REQUIRE(raw_seq_new(&r, &seqs[i]) == 0);
        ids[i] = 1;
    }
    g_fast_i = *t.lent->i;
    g_fast_i.decode = fast_decode;
    t.lent->i = &g_fast_i; /* (the other peer decodes on it below: zeros, a step all the same) */
    size_t one = PEER_HEADER_BYTES + peer_decode_bytes(B);
    uint8_t *buf = malloc(one * N);
    REQUIRE(buf);
    for (int k = 0; k < N; k++) {
        peer_header_write(buf + k * one, PEER_DECODE, (uint32_t)peer_decode_bytes(B));
        peer_decode_write(buf + k * one + PEER_HEADER_BYTES, 0, B, seqs, ids);
    }
    CHECK_EQ(peer_conn_send_raw(r.c, buf, one * N, 5), PEER_OK);
    /* two heartbeat deadlines: the node must stay up for the other peer all along */
    double t0 = peer_now();
    int down = 0;
    while (peer_now() - t0 < 2 * PEER_DEAD_S && !down) {
        down = peer_node_state(node) != PEER_NODE_UP;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_MSG(!down, "the other peer lost the node %.1f s after a peer stopped reading",
              peer_now() - t0);
    accel_info info;
    accel_get_info(rd, &info);
    CHECK(info.health == ACCEL_HEALTH_OK && info.revivals == 0);
    /* and it is served */
    CHECK_EQ(decode_once(rd, t.m->cfg.vocab), 0);
    free(buf);
    peer_conn_kill(r.c);
    peer_conn_free(r.c);
    accel_free(rd);
    peer_node_free(node);
    two_stop(&t);
}
