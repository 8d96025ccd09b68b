/* tests/peer/test_peer_lanes.c — KV chunks over UCX's tcp lanes, where a tagged send's bytes move
 * only while the sender progresses its worker (peer_conn_sender_driven), and over shared memory,
 * where the node reads them (CMA) when it receives them: the remote backend keeps a window of at
 * most PEER_KV_TCP_SENDS (PEER_KV_SM_SENDS) sends in flight (peer/remote_kv.c). Two sequences'
 * chunks interleaved on one device: over tcp the window opens (more than one send in flight),
 * and never holds more than its bound, and the node posts the next announced chunk's receive
 * while one is coming (two at once, never more; over shared memory one at a time); the node
 * answers the chunks in the order they were sent (a corrupt chunk's refusal marks its own
 * sequence, not the one beside it); and the KV that arrives decodes as the device itself does.
 * With two receiving threads the chunks over tcp lanes stay with the thread that received them
 * (none handed on, as with one thread), and over shared memory each is handed on (its CRC on the
 * thread that copied it in while the other copies the next), all of the above the same. The
 * sender waits for room in its window of sends before it takes a chunk's buffer, and takes the
 * one a completed send gave back last: at most as many buffers as sends in flight are ever
 * allocated. */
#include "tests/test.h"
#include "devices/devices.h"
#include "peer/peer.h"
#include "tests/peer/peer_util.h"
#include "tests/util.h"
#include <stdlib.h>
#include <string.h>

static void lanes_done(two *t, accel_dev *pf, accel_dev *rd, peer_node *node, kvcopy *kv)
{
    accel_free(rd);
    peer_node_free(node);
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < kv[j].n; i++) free(kv[j].mem[i]);
    accel_free(pf);
    two_stop(t);
}

static void lanes(int rx_threads, int sm)
{
    /* tcp lanes only (or shared memory, the connection's stream over tcp), and chunks of this
     * size by rendezvous as 1 MiB ones are (read when UCX's context is made: each test runs in
     * its own process) */
    setenv("UCX_TLS", sm ? "sm,tcp" : "tcp", 1);
    const int bound = sm ? PEER_KV_SM_SENDS : PEER_KV_TCP_SENDS;
    setenv("UCX_RNDV_THRESH", "4096", 1);
    unsetenv("TANDEM_PEER_FAULT");
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, rx_threads, &pf)) return;
    /* two prompts of 240 tokens: 30 KB chunks */
    enum { N = 240, STEPS = 6 };
    int32_t ids[2][N];
    for (int i = 0; i < N; i++) ids[0][i] = 1 + (i * 37) % 500, ids[1][i] = 1 + (i * 91 + 7) % 500;
    ids[0][0] = ids[1][0] = 1;
    kvcopy kv[2];
    memset(kv, 0, sizeof kv);
    int32_t first[2], want[2][STEPS], got[STEPS];
    for (int j = 0; j < 2; j++) {
        REQUIRE(prefill_kv(pf, ids[j], N, &kv[j], &first[j]) == 0);
        CHECK_EQ(import_decode(t.lent, &kv[j], first[j], STEPS, want[j]),
                 0); /* the device itself */
    }
    const int L = kv[0].n;
    REQUIRE(L >= 3 && kv[1].n == L);

    /* chunks count from 1 per device (the fault is read when it opens), A's and B's alternate:
     * B's layer 1 is chunk 4 */
    setenv("TANDEM_PEER_FAULT", "kv_bitflip=4", 1);
    peer_node *node;
    accel_dev *rd;
    int bad = two_remote(&t, PEER_TRANSPORT_ADDRESS, &node, &rd);
    unsetenv("TANDEM_PEER_FAULT");
    if (bad) {
        two_stop(&t);
        return;
    }
    accel_info info;
    accel_get_info(rd, &info);
    /* CMA refused here (ptrace scope), or tcp among the lanes: not the lanes this case is about */
    if (sm && (!strstr(info.desc, "cma") || strstr(info.desc, "tcp"))) {
        lanes_done(&t, pf, rd, node, kv);
        SKIP("no cma lane: %s", info.desc);
    }
    if (!sm)
        CHECK_MSG(strstr(info.desc, "tcp") && !strstr(info.desc, "tcp stream"), "%s", info.desc);
    CHECK_EQ(peer_remote_kv_sends_max(rd), 0);
    CHECK_EQ(peer_remote_kv_sends_max(t.lent), -1); /* no remote device */
    CHECK_EQ(peer_remote_kv_bufs_max(t.lent), -1);
    CHECK_EQ(accel_warmup(rd), 0);

    /* rounds of both sequences' chunks interleaved, layer by layer: A's are all taken, B's
     * corrupt layer 1 is refused on B (at B's next import or at its last layer); then A's KV
     * decodes as the device's. The first round carries the fault; the others are clean. */
    for (int round = 0; round < 6; round++) {
        accel_seq *s[2];
        REQUIRE(accel_seq_new(rd, N + STEPS + 1, &s[0]) == 0);
        REQUIRE(accel_seq_new(rd, N + STEPS + 1, &s[1]) == 0);
        int st[2] = {0, 0};
        for (int l = 0; l < L; l++)
            for (int j = 0; j < 2; j++)
                if (!st[j]) st[j] = accel_kv_import_crc(rd, s[j], &kv[j].l[l], kv[j].crc[l]);
        CHECK_MSG(st[0] == 0, "round %d: A %d", round, st[0]);
        CHECK_MSG(st[1] == (round == 0 ? ACCEL_ERR_CORRUPT : 0), "round %d: B %d", round, st[1]);
        float *lg = malloc(sizeof(float) * (size_t)t.m->cfg.vocab);
        int32_t tok = first[0];
        for (int i = 0; i < STEPS && !st[0]; i++) {
            CHECK_EQ(accel_decode(rd, 1, &s[0], &tok, lg), 0);
            tok = got[i] = t_argmax(lg, t.m->cfg.vocab);
            CHECK_MSG(got[i] == want[0][i], "round %d step %d: %d, the device %d", round, i, got[i],
                      want[0][i]);
        }
        free(lg);
        accel_seq_free(rd, s[0]);
        accel_seq_free(rd, s[1]);
        int n = peer_remote_kv_sends_max(rd);
        CHECK_MSG(n >= 1 && n <= bound, "round %d: %d sends in flight (window %d)", round, n,
                  bound);
    }
    /* B's clean KV, once more alone: it decodes as the device's */
    memset(got, 0, sizeof got);
    CHECK_EQ(import_decode(rd, &kv[1], first[1], STEPS, got), 0);
    for (int i = 0; i < STEPS; i++) CHECK_EQ(got[i], want[1][i]);
    /* the window opened over tcp: sends overlapped (one at a time, the old way, would leave it
     * at 1; over shared memory a send may be read before the next starts) */
    int n = peer_remote_kv_sends_max(rd);
    CHECK_MSG(n >= (sm ? 1 : 2) && n <= bound, "%d sends in flight at most (window %d)", n, bound);
    /* the chunks were written into the buffers their sends gave back (the last back first), not
     * one per place in the window of PEER_KV_WINDOW chunks, and taken once the window of sends had
     * room: never more than the sends in flight (the one being written is the one just sent) */
    int nb = peer_remote_kv_bufs_max(rd);
    CHECK_MSG(nb >= (sm ? 1 : 2) && nb <= bound,
              "%d chunk buffers at once (at most %d expected, window %d)", nb, bound,
              PEER_KV_WINDOW);
    /* and over tcp the node received two of them at once (the next one's receive posted while
     * one came), never more, and everything above in order all the same; over shared memory one
     * at a time */
    int a = peer_server_rx_ahead_max(t.srv);
    CHECK_MSG(a == (sm ? 1 : 2),
              "the node received %d chunks of a connection at once at most (%d expected)", a,
              sm ? 1 : 2);
    if (rx_threads == 2 &&
        !sm) /* every chunk came over tcp lanes: none handed to the other thread */
        CHECK_MSG(peer_server_handoffs(t.srv) == 0, "%ld chunks handed on",
                  peer_server_handoffs(t.srv));
    if (rx_threads == 2 && sm) /* over shared memory each went to the other thread's turn */
        CHECK_MSG(peer_server_handoffs(t.srv) > 0, "%ld chunks handed on",
                  peer_server_handoffs(t.srv));
    accel_get_info(rd, &info);
    CHECK(info.health != ACCEL_HEALTH_FAILED);
    lanes_done(&t, pf, rd, node, kv);
}

TEST(peer_tcp_lanes_window_bounded_in_order)
{
    lanes(0, 0); /* the daemon's default count: 1 on a small machine, 2 from 8 cores */
}

TEST(peer_tcp_lanes_two_receivers_keep_chunks)
{
    lanes(2, 0);
}

TEST(peer_sm_lanes_window_bounded_in_order)
{
    lanes(0, 1);
}

TEST(peer_sm_lanes_two_receivers_keep_chunks)
{
    lanes(2, 1);
}
