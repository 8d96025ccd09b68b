/* tests/peer/test_peer_hold.c — how many KV REPLYs the node holds back before it sends them
 * (issue 26): half of what the sender's window admits of the chunk's size, at least one, and over
 * tcp lanes both when it admits two (peer_kv_reply_hold, peer/msg.h). The rule's values at the
 * sizes the daemon ships, against the window's own rule (peer_kv_window_room); and a real node
 * answering 16.25 MiB chunks (a GPU prefill's 32K-prompt layer chunk: 3 in the window, so 1 held)
 * while the connection is kept busy, where it would otherwise hold them until nothing more was
 * coming.
 *
 * Keeping the node busy without timing: the next chunk's message is sent by a second peer's
 * worker under the first connection's tags, over tcp lanes, and that worker is not progressed —
 * its rendezvous request reaches the node, which starts receiving it, but its bytes move only
 * while the sender progresses (peer_conn_sender_driven). Until this test lets it go, the node has
 * a chunk of the connection coming, so it does not send held REPLYs for lack of anything coming
 * (peer/server.c server_pass); whatever REPLY arrives meanwhile was sent because the hold was
 * reached. At 1 MiB (4 held) the same setup holds the second REPLY back: the check that the rule,
 * not the setup, makes the difference. At 65 MiB over tcp lanes (a window of two, both held) no
 * REPLY comes while the second of two is coming (hold_pair). On the rule before (4 held at every
 * size) the 16.25 MiB test got no REPLY while the third chunk was coming (it waited its 5 s). */
#include "tests/test.h"
#include "peer/link.h"
#include "peer/msg.h"
#include "peer/peer.h"
#include "scheduler/accel.h"
#include "tests/peer/peer_util.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The message sizes (fixed part included, as the window counts them): a CPU prefill's 512-token
 * layer chunk of Llama-3-8B's int8 KV (2,080 bytes a token, a 64-byte chunk header, the tagged
 * message's 48-byte fixed part: peer protocol 4's 32-byte KV token, then the 16-byte KV fixed
 * part), a GPU prefill's at 4K and at 32K (8,192-token passes), a sparse prefill's at 32K. */
#define MSG_CPU_512    (512u * 2080u + 64u + PEER_KV_TAG_FIXED)
#define MSG_GPU_4K     (4096u * 2080u + 64u + PEER_KV_TAG_FIXED)
#define MSG_GPU_32K    (8192u * 2080u + 64u + PEER_KV_TAG_FIXED)
#define MSG_SPARSE_32K (32768u * 2080u + 64u + PEER_KV_TAG_FIXED)

TEST(peer_kv_reply_hold_by_size)
{
    /* protocol 4's message: the 17,039,440 bytes BENCHMARKS.md's rounds ran (protocol 3's, no
     * token) and the token's 32; the window and the hold are the same at both */
    CHECK_EQ(PEER_KV_TAG_FIXED, 48);
    CHECK_EQ(MSG_GPU_32K, 17039440 + 32);
    CHECK_EQ(peer_kv_window_chunks(17039440), peer_kv_window_chunks(MSG_GPU_32K));
    struct {
        size_t bytes;
        /* the window's chunks; held over shared memory (and on the stream), over tcp lanes */
        int chunks, hold, hold_tcp;
    } c[] = {
        {1u << 20, 8, 4, 4},       {MSG_CPU_512, 8, 4, 4},
        {8u << 20, 8, 4, 4},       {MSG_GPU_4K, 7, 3, 3},
        {16u << 20, 4, 2, 2},      {MSG_GPU_32K, 3, 1, 1},
        {32u << 20, 2, 1, 2},      {64u << 20, 2, 1, 2},
        {MSG_SPARSE_32K, 2, 1, 2}, {0, PEER_KV_WINDOW, PEER_KV_WINDOW / 2, PEER_KV_WINDOW / 2},
        {SIZE_MAX, 2, 1, 2},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        size_t b = c[i].bytes;
        int n = peer_kv_window_chunks(b), h = peer_kv_reply_hold(b, 0),
            ht = peer_kv_reply_hold(b, 1);
        CHECK_MSG(n == c[i].chunks, "%zu bytes: the window admits %d chunks, %d expected", b, n,
                  c[i].chunks);
        CHECK_MSG(h == c[i].hold, "%zu bytes: %d REPLYs held, %d expected", b, h, c[i].hold);
        CHECK_MSG(ht == c[i].hold_tcp, "%zu bytes over tcp lanes: %d REPLYs held, %d expected", b,
                  ht, c[i].hold_tcp);
        CHECK(ht >= 1 && ht <= PEER_KV_WINDOW / 2 && ht <= n && (2 * ht <= n || n == 2));
        /* the sender's own rule, chunk by chunk: n go, the next does not (no overflow to check
         * past the window's bytes: from 32 MiB on it is two whatever the size) */
        if (b <= PEER_KV_WINDOW_BYTES) {
            for (int k = 0; k < n; k++)
                CHECK_MSG(peer_kv_window_room(k, (size_t)k * b, b), "%zu bytes: chunk %d refused",
                          b, k + 1);
            CHECK_MSG(!peer_kv_window_room(n, (size_t)n * b, b), "%zu bytes: chunk %d admitted", b,
                      n + 1);
        }
        /* never more than the node's buffer of held REPLYs (PEER_KV_WINDOW / 2) nor than the
         * window admits (the sender could wait on a REPLY held for a chunk it cannot send),
         * never none; half of it (over tcp lanes: or all of two) */
        CHECK(h >= 1 && h <= PEER_KV_WINDOW / 2 && 2 * h <= n);
    }
}

/* Every REPLY that comes on r within timeout_s, up to max, each status checked; how many came. */
static int replies_within(raw *r, double timeout_s, int max)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int n = 0;
    for (double left = timeout_s; n < max && left > 0;) {
        int st = raw_reply(r, left);
        if (st == PEER_ERR_TIMEOUT) break;
        /* sequence 9999 does not exist: each chunk refused on its own REPLY, none closing */
        CHECK_MSG(st == ACCEL_ERR_INVALID, "REPLY %d: %d, ACCEL_ERR_INVALID expected", n + 1, st);
        if (st != ACCEL_ERR_INVALID) break;
        n++;
        clock_gettime(CLOCK_MONOTONIC, &t);
        left =
            timeout_s - ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec));
    }
    return n;
}

/* Three chunks of `bytes` on connection A, the third sent by B's worker and left stalled while A
 * reads: the REPLYs that come before it goes (held 1: the second is expected to wait for it; 0:
 * both expected), then all three; the node on rx_threads receiving threads. */
/* A node on rx_threads receiving threads and peers A and B (B NULL: A alone) over tcp lanes, by
 * rendezvous, and a chunk message of `bytes` in *m: 0, or -1 (nothing to free; the failure
 * reported). */
static int hold_setup(two *t, raw *a, raw *b, size_t bytes, int rx_threads, uint8_t **m)
{
    setenv("UCX_TLS", "tcp", 1); /* sender-driven lanes (read when UCX's context is made: */
    setenv("UCX_RNDV_THRESH", "4096", 1); /* each test runs in its own process), by rendezvous */
    if (two_start_rx(t, "cpu", rx_threads)) return -1;
    if (raw_open(t->addr, a) || (b && raw_open(t->addr, b)) || !peer_conn_sender_driven(a->c) ||
        (b && !peer_conn_sender_driven(b->c)) || !(*m = calloc(1, bytes))) {
        CHECK_MSG(0, "the node's peers over tcp lanes could not be set up");
        return -1; /* (a test process: what is left open goes with it) */
    }
    /* no such sequence: refused at once on its REPLY (the node's CPU does no import); over tcp
     * lanes, as the backend marks them, so that the node receives the next one while one comes */
    peer_kv k = {0, 9999, 0, PEER_KV_TAG_AHEAD, NULL, 0, 0, 0};
    if (b) {
        /* B's endpoint carries a chunk of its own first (with B's token): its lanes are up, so
         * that a send's request leaves in the send call itself, not in a later progress of B's
         * worker */
        peer_kv_tag_write_fixed(*m, b->token, &k);
        CHECK_EQ(peer_conn_tag_send(b->c, b->base + 1, *m, 4096, 10), PEER_OK);
        CHECK_EQ(raw_reply(b, 5), ACCEL_ERR_INVALID);
    }
    peer_kv_tag_write_fixed(*m, a->token, &k); /* A's chunks, whichever worker sends them */
    return 0;
}

static void hold_done(two *t, raw *a, raw *b, uint8_t *m)
{
    free(m);
    if (b) peer_conn_free(b->c);
    peer_conn_free(a->c);
    two_stop(t);
}

static void hold_live(size_t bytes, int held, int rx_threads)
{
    two t;
    raw a, b;
    uint8_t *m;
    if (hold_setup(&t, &a, &b, bytes, rx_threads, &m)) return;
    CHECK_EQ(peer_conn_tag_send(a.c, a.base + 1, m, bytes, 10), PEER_OK);
    void *r2 = NULL, *r3 = NULL;
    CHECK_EQ(peer_conn_tag_send_start(a.c, a.base + 2, m, bytes, &r2), PEER_OK);
    CHECK_EQ(peer_conn_tag_send_start(b.c, a.base + 3, m, bytes, &r3), PEER_OK); /* A's, by B */
    REQUIRE(r2 && r3); /* by rendezvous: in flight until the node takes their bytes */
    /* the node receives the second and the third at once (neither can finish: no sender moves) */
    for (int i = 0; i < 500 && peer_server_rx_ahead_max(t.srv) < 2; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    REQUIRE(peer_server_rx_ahead_max(t.srv) == 2);
    /* the second goes (A progressed), the third stays: what the node sends now, it sent because
     * its hold was reached (the first REPLY may also have gone when nothing was coming yet) */
    CHECK_EQ(peer_conn_req_wait(a.c, r2, 10), PEER_OK);
    int got = replies_within(&a, held ? 1.0 : 5.0, 2);
    if (!held)
        CHECK_MSG(got == 2,
                  "%zu-byte chunks: %d REPLYs while the third was coming, 2 expected (held "
                  "until nothing was coming?)",
                  bytes, got);
    else
        CHECK_MSG(got <= 1,
                  "%zu-byte chunks: %d REPLYs while the third was coming: the second was "
                  "not held (hold %d)",
                  bytes, got, peer_kv_reply_hold(bytes, 1));
    /* the third goes: every REPLY comes, in order */
    CHECK_EQ(peer_conn_req_wait(b.c, r3, 10), PEER_OK);
    got += replies_within(&a, 5.0, 3 - got);
    CHECK_EQ(got, 3);
    hold_done(&t, &a, &b, m);
}

TEST(peer_kv_replies_not_held_past_the_window_at_16mib)
{
    REQUIRE(peer_kv_reply_hold(MSG_GPU_32K, 1) == 1);
    hold_live(MSG_GPU_32K, 0, 1); /* each REPLY as its chunk is checked */
}

TEST(peer_kv_replies_not_held_past_the_window_two_receivers)
{
    hold_live(MSG_GPU_32K, 0, 2); /* the loop passing between two threads: the same */
}

TEST(peer_kv_replies_held_at_1mib)
{
    REQUIRE(peer_kv_reply_hold(1u << 20, 1) == 4);
    hold_live(1u << 20, 1, 1); /* four held: the second waits for the third (or nothing coming) */
}

/* Two chunks of `bytes` on connection A, the second sent first by B's worker (under A's tags) and
 * left stalled, its request at the node: the first comes whole while the second is coming. With
 * both of a window of two held (65 MiB), no REPLY comes until the second is in; on the rule
 * before (1 held) the first came at once. Then both, in order. */
static void hold_pair(size_t bytes, int rx_threads)
{
    two t;
    raw a, b;
    uint8_t *m;
    if (hold_setup(&t, &a, &b, bytes, rx_threads, &m)) return;
    void *r2 = NULL;
    CHECK_EQ(peer_conn_tag_send_start(b.c, a.base + 2, m, bytes, &r2), PEER_OK); /* A's, by B */
    REQUIRE(r2);
    CHECK_EQ(peer_conn_tag_send(a.c, a.base + 1, m, bytes, 10), PEER_OK);
    int got = replies_within(&a, 1.0, 2);
    CHECK_MSG(got == 0,
              "%zu-byte chunks: %d REPLYs while the second was coming, none expected (hold %d)",
              bytes, got, peer_kv_reply_hold(bytes, 1));
    CHECK_EQ(peer_conn_req_wait(b.c, r2, 10), PEER_OK);
    got += replies_within(&a, 5.0, 2 - got);
    CHECK_EQ(got, 2);
    hold_done(&t, &a, &b, m);
}

TEST(peer_kv_replies_held_in_pairs_at_65mib)
{
    REQUIRE(peer_kv_reply_hold(MSG_SPARSE_32K, 1) == 2);
    hold_pair(MSG_SPARSE_32K, 1); /* both of the window's two */
}

TEST(peer_kv_replies_held_in_pairs_two_receivers)
{
    hold_pair(MSG_SPARSE_32K, 2);
}

/* A connection whose chunk size changes from chunk to chunk, over tcp lanes: the hold follows
 * each chunk's size (2 at 65 MiB, 4 at 1 MiB, 1 at 16.25 MiB), whatever was held under the size
 * before goes out when the smaller hold is reached, and the last, held, goes when nothing more
 * comes — no REPLY lost or left behind when the rule changes mid-stream (review L8 of
 * 2026-11-29). Each chunk is sent whole before the next; every REPLY, in order, at the end. */
static void hold_mixed(int rx_threads)
{
    two t;
    raw a;
    uint8_t *m;
    if (hold_setup(&t, &a, NULL, MSG_SPARSE_32K, rx_threads, &m)) return;
    /* held: 1 (of 2), 2, 3 (of 4), then 4 under a hold of 2 (sent), 1 of 1 (sent), 1 of 4, 2 of 2
     * (sent), 1 of 4: the last goes only because nothing more comes */
    static const size_t sizes[] = {MSG_SPARSE_32K, 1u << 20, 1u << 20,       MSG_SPARSE_32K,
                                   MSG_GPU_32K,    1u << 20, MSG_SPARSE_32K, 1u << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    for (int i = 0; i < N; i++)
        CHECK_MSG(peer_conn_tag_send(a.c, a.base + 1 + (uint64_t)i, m, sizes[i], 10) == PEER_OK,
                  "chunk %d (%zu bytes) not sent", i + 1, sizes[i]);
    int got = replies_within(&a, 5.0, N);
    CHECK_MSG(got == N, "%d REPLYs of %d chunks of changing sizes", got, N);
    hold_done(&t, &a, NULL, m);
}

TEST(peer_kv_replies_all_come_as_sizes_change)
{
    hold_mixed(1);
}

TEST(peer_kv_replies_all_come_as_sizes_change_two_receivers)
{
    hold_mixed(2);
}
