/* tools/peer_bench.c — what a hand-over between two daemons costs on the peer link
 * (peer/link.h over UCX), measured as the daemon pays it (BENCHMARKS.md reports it).
 *
 *   build/peer_bench [--sizes 65536,1048576,8388608,67108864] [--reps N] [--logits 2048,524288]
 *                    [--path stream|tag] [--poll-us N] [--buffers N] [--sends N] [--crc 0|1]
 *                    [--announce 0|1] [--rx-one 0|1] [--write 0|1] [--crc-on node|rx] [--crc-fold 0|1]
 *                    [--rx-threads 0..2] [--rx-ahead N] [--rx-same 0|1]
 *                    [--tcp-handoff 0|1] [--warm 0|1] [--tx-tight 0|1] [--rx-tight 0|1] [--hold N]
 *                    [--sm-sends N]
 *
 * Two processes (fork): the child listens on loopback and answers each frame as the peer
 * server answers a KV chunk — the whole frame received, its CRC32C computed over every byte (the
 * wire reader's check; for tagged chunks where the server computes it — on the kv_rx thread,
 * peer/kv_rx.h, with one receiving thread, on the receiving thread right after the receive with
 * two — or where --crc-on rx|node says; the chunk goes through kv_rx either way, as the server
 * imports it there),
 * an 8-byte REPLY held back and sent with the next ones as the server does
 * (peer/server.c kv_reply) — or, for a DECODE-sized request, answers with a
 * LOGITS frame of the asked size. The parent connects and sends, per size, `reps` chunks as the
 * remote backend does (peer/remote.c): pipelined, up to PEER_KV_WINDOW unanswered
 * (peer_kv_window_room), every answer taken in order, all of them at the end of each run of
 * --layers chunks (a layer-by-layer hand-over: the import of a run returns when its last layer
 * was answered); --window 1 is the request/answer of one chunk at a time (before pipelining):
 *   kv SIZE      MiB/s of payload (bytes / wall time of the pass; median of 3 passes)
 *   logits SIZE  microseconds per decode-step round trip with SIZE bytes of logits coming back
 * --path tag sends each KV chunk as the remote backend does with an address endpoint: one tagged
 * message (the chunk's fixed part first, no frame on the stream) on the endpoint made from the
 * child's worker address (peer/link.h), which the node finds by its serial's tag
 * (peer_conn_tag_probe), bounds and receives into a kv_rx slot of its length, as peer/server.c.
 * --poll-us N: both processes busy-poll their UCX workers (and the node its KV hand-off) for N
 * microseconds after activity before sleeping (config peer_poll_us, peer/link.h; 0, the
 * default, sleeps at once). --buffers N: the chunks in flight are sent from N distinct buffers
 * (default PEER_KV_WINDOW, one per chunk in flight, as the backend serializes each chunk into its
 * own); 1 sends every chunk from one buffer, as ucx_perftest does (the same bytes again and
 * again: at sizes that fit the CPU's caches they are read from there). --sends N: over tcp lanes
 * (sender-driven, peer_conn_sender_driven) at most N chunks' tagged sends in flight (default
 * PEER_KV_TCP_SENDS, as the backend; 1: each send done before the next starts, the backend
 * before the window of sends).
 * Stage clocks: after each size the sender prints where its time per chunk went (room in the
 * window of sends, the tagged send's start, answers waited for to make room and at a run's
 * end, the bytes written), and the node, when the connection closes, where its time per chunk
 * went (waiting with no chunk coming, for a free kv_rx slot, the tagged receive from its post
 * to done — over shared memory the copy itself — the push, the replies, and its kv_rx thread's
 * CRC). Switches that take one part away at a time (measurement only, not the daemon's path):
 * --crc 0 (no CRC on the node), --announce 0 (the node neither probes nor reads the
 * chunk's fixed part: it keeps the next serials' receives posted, of the one known size, as
 * ucx_perftest: the bound of what any metadata costs; one size), --rx-one 1 (the node receives every chunk into one buffer and
 * answers at once, no kv_rx: ucx_perftest's receive), --rx-same 1 (every chunk received into one
 * buffer, as --rx-one 1, with the kv_rx slots, hand-off, CRC and answers as by default: the
 * receive's destination apart from the rest), --write 1 (each chunk's bytes written
 * just before its send, as the backend serializes a layer; --write 2: the same, the MiB/s from the
 * passes' time less the writes': the link alone with the bytes where the serialization leaves
 * them, in the sender's cache), --crc-on rx|node (the node's CRC on
 * its kv_rx thread or on the receiving one, whatever the threads), --crc-fold 0 (the crc32 instruction's
 * three streams instead of the carry-less folding paths, proto/crc32c.h), --crc-512 0 (the 256-bit
 * folding instead of the 512-bit one), --crc-split 0 (the receiving thread computes the whole CRC,
 * none of it offered to the kv_rx thread: peer_kv_rx_reserve_split). --crc-speed 1: only the
 * CRC's rate on this CPU per path (no link). --rx-threads N: the
 * node's loop on N threads taking turns, as the daemon's (config peer_rx_threads, peer/peer.h;
 * default 0: the daemon's auto, 2 on 8 cores or more): the thread that received a chunk hands
 * the loop on and does that chunk's CRC and push while the other copies the next one in — over
 * shared memory; a chunk that came over tcp lanes stays on the thread that received it, its CRC
 * the kv_rx thread's, as peer/server.c (--tcp-handoff 1: handed on too, the code before).
 * --rx-ahead N: once a chunk came marked PEER_KV_TAG_AHEAD (the sender's tcp lanes) the node
 * starts the next chunk's receive while up to N-1 before it are still coming (default 2, as
 * peer/server.c; 1: one at a time); with --announce 0 it keeps the next N serials' posted.
 * --warm 0: the send buffer of the chunk's place in the window's ring and the lowest free kv_rx
 * slot, the code before both sides reused the buffer freed last (default 1, as the daemon).
 * --tx-tight 0: over tcp lanes the sender takes a chunk's buffer before it waits for room in the
 * window of sends (three buffers take turns at two sends: the code before; default 1, as
 * peer/remote_kv.c: room first, then the buffer just sent from). --rx-tight 1 (measurement only:
 * it lost x0.83 on the quiet node, BENCHMARKS.md wiretcp9): over tcp lanes the node's chunks
 * coming and being checked hold at most --rx-ahead kv_rx slots, so that two take turns (the
 * receive ahead waits for the chunk before to be checked, then takes its slot); default 0, as
 * peer/server.c: the receive ahead starts at once, in a third slot.
 * --sm-sends N: over lanes that are not sender-driven (shared memory) at most N tagged sends in
 * flight, the room waited for before a chunk's buffer is taken (default PEER_KV_SM_SENDS, as
 * peer/remote_kv.c: two buffers take turns); 0: no window of sends there, one buffer per chunk
 * in the window of answers (the code before).
 * --hold N (measurement only): the node's REPLYs held back until N of them (1..4; 1: each chunk
 * answered once checked); by default (or 0) as peer/server.c, by the chunk's size (peer_kv_reply_hold:
 * half the chunks the window admits — 4 at 1 and 8 MiB, 2 at 16 MiB, 1 at 16.25 MiB — or over
 * tcp lanes both of two from 32 MiB on).
 * --sizes: each KV chunk 17 bytes .. 128 MiB (KV_SIZE_MAX: a 32K-token Llama-3-8B layer chunk is
 * 65 MiB), or 0 (none: the logits only); a size outside is refused before anything is allocated.
 * The transport is UCX's choice unless UCX_TLS says (tcp; posix,sysv,cma for shared memory).
 * Compare with `ucx_perftest -t stream_bw|tag_bw -s SIZE` on the same UCX_TLS
 * (bench/peer_bench.sh). */
#include "peer/auth.h"
#include "peer/kv_rx.h"
#include "peer/link.h"
#include "peer/peer.h"
#include "proto/crc32c.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int parse_list(const char *s, long *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtol(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s) break;
    }
    return n;
}

/* The KV token each tagged chunk starts with (peer/msg.h): no handshake here, one both processes
 * know; the node compares it as peer/server.c does (any bytes but zeros pass peer_mac_equal). */
static const uint8_t g_token[PEER_MAC] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                          12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                          23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

/* Ablations (both processes: set before the fork). g_crc 0: the node's kv_rx thread takes each
 * chunk and answers it without computing its CRC (what the check costs the link). g_announce 0:
 * the node posts each tagged receive for the next serial itself (of the one --sizes size)
 * without probing for it or reading its fixed part. */
static int g_crc = 1, g_announce = 1;
/* g_rx_one 1: the node receives every chunk into one buffer of its own and answers it at once,
 * no kv_rx thread, no CRC — as ucx_perftest receives (its destination stays in the receiving
 * core's cache). g_write 1: the sender writes each chunk's bytes into its buffer just before
 * sending it, as the remote backend serializes each layer into its ring buffer (the bytes are
 * then in the sender's cache, not in memory); g_write 2: the same, the writes' time taken out of
 * each pass's (the link alone, from bytes where the backend's serialization leaves them). */
static int g_rx_one = 0, g_write = 0;
/* g_rx_same 1: the node takes kv_rx slots, hands each chunk to the kv_rx thread and answers after
 * its CRC and apply as by default, but receives every chunk into one buffer of its own (the
 * slot's stays unused): the receive's destination as ucx_perftest's, one buffer that stays in the
 * receiving core's cache, with everything else the live path does (--rx-same). Measurement only:
 * chunks received ahead land in the same bytes while the one before is checked. */
static int g_rx_same = 0;
/* g_rx_ahead N: the node keeps up to N tagged receives going (default 2, as peer/server.c's
 * RX_AHEAD): each chunk's receive started as it is found (peer_conn_tag_probe) while the ones
 * before are still coming, once a chunk was marked for it
 * (PEER_KV_TAG_AHEAD: the sender's tcp lanes; over shared memory one at a time); with --announce 0 the next N serials' are
 * posted, as ucx_perftest keeps its window of receives. 1: each posted after the one before is
 * done (the node before RX_AHEAD). Over TCP a posted receive answers the sender's rendezvous
 * request at once, so the next chunk's bytes follow this one's on the socket without waiting
 * for the node's next post. */
#define RX_AHEAD_MAX 32
static int g_rx_ahead = 2;
/* g_crc_rx 1: the CRC on the kv_rx thread (--crc-on rx); 0: on the receiving thread right after
 * the receive, while the bytes are in its cache (--crc-on node); -1 (default): as peer/server.c,
 * the receiving thread with two receiving threads, the kv_rx thread with one */
static int g_crc_rx = -1, g_crc_on_given = 0;
/* g_crc_split 0: with two receiving threads the receiving one computes the whole CRC (the code
 * before peer_kv_rx_reserve_split); 1 (default, as peer/server.c): the second half offered to
 * the kv_rx thread */
static int g_crc_split = 1;
/* g_tcp_handoff 1: with two receiving threads a chunk that came over tcp lanes is handed on too
 * (its CRC on the thread that received it after the loop went to the other: the code before
 * wiretcp7); 0 (default, as peer/server.c): it stays on that thread, as with one thread, its CRC
 * the kv_rx thread's */
static int g_tcp_handoff = 0;
/* g_warm 1 (default, as peer/remote_kv.c and peer/kv_rx.c): the sender writes each chunk into
 * the buffer whose send completed last (a stack of spares; a flight holds its buffer only until
 * its send is done) and the node's kv_rx take finds the slot freed last; 0 (--warm 0): the code
 * before — the ring's buffer of the chunk's place in the window, the lowest free kv_rx slot */
static int g_warm = 1;
/* g_tx_tight 1 (default, as peer/remote_kv.c): over tcp lanes the sender waits for room in the
 * window of sends before it takes the chunk's buffer, so the one whose send just completed is
 * written (two buffers take turns at two sends); 0 (--tx-tight 0): the buffer taken first, the
 * room waited for after (three buffers: the code before). g_rx_tight 1 (--rx-tight 1, a variant
 * measured and not taken: x0.83): over tcp lanes the node's chunks coming and being checked hold
 * at most --rx-ahead kv_rx slots (the next receive starts once the chunk before the one coming
 * was checked, into its slot: two slots take turns); 0 (default, as peer/server.c): the receive
 * ahead starts at once, in a third slot. */
static int g_tx_tight = 1, g_rx_tight = 0;
/* g_sm_sends (default PEER_KV_SM_SENDS, as peer/remote_kv.c): over lanes that are not
 * sender-driven (shared memory: the node's CMA read moves the bytes) at most this many tagged
 * sends in flight, the room waited for before the buffer is taken, so that the buffer just read
 * by the node is the one written next; 0: no window of sends there (the window of answers alone,
 * a buffer per chunk in it: the code before) */
static int g_sm_sends = PEER_KV_SM_SENDS;
/* g_hold: the node's REPLYs held back until this many (--hold 1..PEER_KV_WINDOW / 2, measurement
 * only), besides when nothing more is coming; 0 (the default): as peer/server.c kv_reply, by the
 * size of the last chunk received (peer_kv_reply_hold, node.hold). */
static int g_hold = 0;
/* The largest KV chunk (a tagged message, its fixed part included) a run may send: a 32K-token
 * Llama-3-8B layer in one chunk is 65 MiB and its parts (a sparse prefill's, peer_handover's), so
 * twice that, under the link's bound for one message (PEER_KV_TAG_MAX, 256 MiB). The sender's
 * buffers and the node's bound are the largest size asked, not this. */
#define KV_SIZE_MAX (128L << 20)

/* Stage clocks (peer_now sums, seconds) of the node's loop and its kv_rx thread, printed by the
 * node when the connection closes, per chunk over every chunk it received (the warm-up pass
 * included). */
enum { N_FRAME, N_TAKE, N_RECV, N_CRC, N_PUSH, N_REPLY, N_APPLY, N_STAGES };
static const char *const node_stage[N_STAGES] = {"nothing coming (waits between chunks)", "wait for a free slot",
                                                 "tagged receive (post to done)", "CRC (node's thread)",
                                                 "push to kv_rx", "replies sent", "kv_rx: CRC (its thread)"};
static double g_node[N_STAGES];
static long g_node_chunks, g_node_bytes;
static long g_node_slots[PEER_KV_RX_SLOTS]; /* takes of each kv_rx slot (--warm: how spread) */
static int g_node_busy_max; /* kv_rx slots in use at once at most (peer_kv_rx_busy_max) */

/* the server's check of a tagged chunk, on the kv_rx thread */
static int crc_apply(void *ctx, void *owner, const peer_kv *k)
{
    (void)owner;
    double t = peer_now();
    if (g_crc && (g_crc_rx || !k->crc_off)) *(uint32_t *)ctx ^= proto_crc32c(0, k->bytes, k->n_bytes);
    else *(uint32_t *)ctx ^= k->crc; /* the receiving thread's (joined with the kv_rx thread's part) */
    g_node[N_APPLY] += peer_now() - t; /* this thread's alone until it is joined */
    return 0;
}

static void wake(void *l)
{
    peer_listener_signal(l);
}

static int flush_held(peer_conn *c, const uint8_t *held, int *n_held)
{
    double t = peer_now();
    int st = peer_conn_send_raw(c, held, (size_t)*n_held * (PEER_HEADER_BYTES + 8), 10);
    g_node[N_REPLY] += peer_now() - t;
    *n_held = 0;
    return st ? -1 : 0;
}

static void node_report(void)
{
    if (!g_node_chunks) return;
    printf("# node, per chunk (%ld chunks of %ld bytes, every pass):", g_node_chunks, g_node_bytes / g_node_chunks);
    for (int i = 0; i < N_STAGES; i++) printf(" %s %.1f us;", node_stage[i], g_node[i] / g_node_chunks * 1e6);
    printf(" takes of each kv_rx slot");
    for (int i = 0; i < PEER_KV_RX_SLOTS; i++) printf("%c%ld", i ? '/' : ' ', g_node_slots[i]);
    printf("; kv_rx slots in use at once %d\n", g_node_busy_max);
    fflush(stdout);
}

/* The node's side: its state, shared by its receiving threads (one holds the token at a time,
 * as peer/server.c's loop passes between them). */
typedef struct node {
    peer_listener *l;
    peer_conn *c;
    peer_kv_rx *rx;
    /* REPLYs held back and sent together, as the peer server does (peer/server.c kv_reply): at
     * half the window's chunks of their size (hold), when nothing more is waiting, before any
     * other answer */
    uint8_t held[PEER_KV_WINDOW / 2 * (PEER_HEADER_BYTES + 8)];
    int n_held;
    /* peer_kv_reply_hold of the last chunk's size, as sconn.hold: the whole message, as this
     * tool's sender counts it (the daemon's counts a stream header more: server.c kv_counted) */
    int hold;
    uint32_t next_serial;
    int addr_given;
    struct ahead {
        void *req;
        int slot;
        uint8_t *buf;
        peer_kv k;
    } ahead[RX_AHEAD_MAX]; /* the receives posted ahead, oldest at ahead_head */
    int ahead_head, n_ahead;
    int ahead_ok; /* the last chunk came over tcp lanes (PEER_KV_TAG_AHEAD): g_rx_ahead at once */
    int n_checking; /* chunks pushed to kv_rx whose results were not taken yet */
    int deferred; /* a frame read while chunks were coming, handled once they are in */
    peer_header dh;
    const uint8_t *dp;
    uint8_t *one; /* g_rx_one's buffer */
    size_t one_cap;
    uint8_t *answer;
    long announce_size;
    size_t kv_max; /* the largest chunk the sender may send (its --sizes) */
    uint32_t sink;
    int n_th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int tok_free, done;
} node;

/* A REPLY held back and sent with the next ones, as the peer server does (peer/server.c
 * kv_reply): at half the window's chunks of the last chunk's size (or --hold). -1 when the send
 * failed. */
static int hold(node *nd)
{
    uint8_t rep[8] = {0};
    uint8_t *hp = nd->held + (size_t)nd->n_held * (PEER_HEADER_BYTES + 8);
    peer_header_write(hp, PEER_REPLY, 8);
    memcpy(hp + PEER_HEADER_BYTES, rep, 8);
    if (++nd->n_held >= (g_hold ? g_hold : nd->hold)) return flush_held(nd->c, nd->held, &nd->n_held);
    return 0;
}

/* The results of the chunks checked so far: their REPLYs held. -1 when a send failed. */
static int collect(node *nd)
{
    void *o;
    int rs;
    while (peer_kv_rx_done(nd->rx, &o, &rs)) {
        nd->n_checking--;
        if (hold(nd)) return -1;
    }
    return 0;
}

static void tok_take(node *nd, int spin)
{
    double end = peer_now() + 0.001; /* as peer/server.c: at most 1 ms, then sleep */
    for (unsigned i = 0; spin && !atomic_load_explicit(&nd->tok_free, memory_order_relaxed); i++) {
        if ((i & 31) == 31 && peer_now() >= end) break;
        peer_cpu_relax();
    }
    pthread_mutex_lock(&nd->mu);
    while (!nd->tok_free) pthread_cond_wait(&nd->cv, &nd->mu);
    nd->tok_free = 0;
    pthread_mutex_unlock(&nd->mu);
}

static void tok_give(node *nd)
{
    pthread_mutex_lock(&nd->mu);
    nd->tok_free = 1;
    pthread_cond_signal(&nd->cv);
    pthread_mutex_unlock(&nd->mu);
}

/* As peer/server.c rx_probe: the next serials' chunks that have come, their receives started
 * into kv_rx slots (or g_rx_one's buffer), while fewer than allowed are coming. 0, or -1 (the
 * link failed, or a chunk's length out of bounds). */
static int probe_next(node *nd)
{
    while (nd->addr_given && nd->n_ahead < (nd->ahead_ok ? g_rx_ahead : 1)) {
        if (g_rx_tight && !g_rx_one && nd->ahead_ok && nd->n_ahead + nd->n_checking >= g_rx_ahead) {
            /* as peer/server.c rx_probe: at most g_rx_ahead slots coming or being checked */
            peer_kv_rx_want(nd->rx);
            if (collect(nd)) return -1;
            if (nd->n_ahead + nd->n_checking >= g_rx_ahead) return 0;
        }
        size_t len;
        int r = peer_conn_tag_probe(nd->c, 1000 + nd->next_serial + 1, &len);
        if (r <= 0) return r;
        if (len <= PEER_KV_TAG_FIXED || len > nd->kv_max) return -1;
        double t = peer_now();
        uint8_t *buf;
        int slot = -1;
        if (g_rx_one) {
            if (len > nd->one_cap) {
                if (nd->n_ahead) return -1; /* one size per run with --rx-one 1 */
                free(nd->one);
                if (!(nd->one = peer_bulk_alloc(len, &nd->one_cap))) return -1;
            }
            buf = nd->one;
        } else {
            slot = peer_kv_rx_take(nd->rx, len, 1, &buf);
            if (slot == PEER_KV_RX_BUSY) return 0; /* every slot reserved: the next pass */
            if (slot < 0) return -1;
            g_node_slots[slot]++;
            if (g_rx_same) buf = nd->one;
        }
        g_node[N_TAKE] += peer_now() - t;
        struct ahead *a = &nd->ahead[(nd->ahead_head + nd->n_ahead) % RX_AHEAD_MAX];
        if (peer_conn_tag_recv_probed(nd->c, 1000 + nd->next_serial + 1, buf, len, &a->req)) {
            if (slot >= 0) peer_kv_rx_put_back(nd->rx, slot);
            return -1;
        }
        nd->next_serial++;
        a->slot = slot;
        a->buf = buf;
        memset(&a->k, 0, sizeof a->k);
        a->k.bytes = buf;
        a->k.n_bytes = len;
        nd->n_ahead++;
    }
    return 0;
}

static void *node_loop(void *arg)
{
    node *nd = arg;
    peer_conn *c = nd->c;
    peer_kv_rx *rx = nd->rx;
#define FLUSH() (nd->n_held ? flush_held(c, nd->held, &nd->n_held) : 0)
#define HOLD()                                                                                     \
    do {                                                                                           \
        if (hold(nd)) goto out;                                                                    \
    } while (0)
#define COLLECT()                                                                                  \
    do {                                                                                           \
        if (collect(nd)) goto out;                                                                 \
    } while (0)
    if (nd->n_th > 1) tok_take(nd, 0);
    while (!nd->done) {
        peer_header h;
        const uint8_t *p;
        int st;
        if (!g_announce && nd->addr_given) {
            /* no announcement: the next serials' receives posted at once (g_rx_ahead of them in
             * flight, oldest first: each one's completion is waited for in serial order), the
             * stream looked at while they come (a DECODE, the connection's end) */
            double t = peer_now();
            COLLECT();
            long size = nd->announce_size;
            while (nd->n_ahead < g_rx_ahead) {
                uint8_t *buf;
                int slot = -1;
                if (g_rx_one) {
                    if (!nd->one && !(nd->one = peer_bulk_alloc((size_t)size, &nd->one_cap))) goto out;
                    buf = nd->one;
                } else {
                    slot = peer_kv_rx_take(rx, (size_t)size, 1, &buf);
                    if (slot < 0) goto out;
                    g_node_slots[slot]++;
                    if (g_rx_same) buf = nd->one;
                }
                int q = (nd->ahead_head + nd->n_ahead) % RX_AHEAD_MAX;
                if (peer_conn_tag_recv_start(c, 1000 + ++nd->next_serial, buf, (size_t)size, &nd->ahead[q].req)) goto out;
                nd->ahead[q].slot = slot;
                nd->ahead[q].buf = buf;
                nd->n_ahead++;
            }
            double t1 = peer_now();
            g_node[N_TAKE] += t1 - t;
            struct ahead *a = &nd->ahead[nd->ahead_head];
            while ((st = peer_conn_tag_recv_test(c, a->req, (size_t)size)) == 0) {
                if (peer_conn_dead(c)) {
                    peer_conn_req_cancel(c, a->req);
                    goto out;
                }
                COLLECT();
                if (FLUSH()) goto out;
                peer_listener_progress(nd->l, 0.01);
            }
            if (st < 0) break;
            nd->ahead_head = (nd->ahead_head + 1) % RX_AHEAD_MAX;
            nd->n_ahead--;
            uint8_t *buf = a->buf;
            int slot = a->slot;
            double t2 = peer_now();
            g_node[N_RECV] += t2 - t1;
            peer_kv kf; /* (--announce 0 reads nothing else of the fixed part: its flag) */
            nd->hold = peer_kv_reply_hold((size_t)size, !peer_kv_tag_read(buf, (size_t)size, &kf) &&
                                                            (kf.flags & PEER_KV_TAG_AHEAD));
            peer_kv k = {0, 0, 0, 0, buf, (uint32_t)size, 0, 0};
            if (g_crc && !g_crc_rx && !g_rx_one) k.crc = proto_crc32c(0, buf, (size_t)size), k.crc_off = 1;
            double t3 = peer_now();
            g_node[N_CRC] += t3 - t2;
            t2 = t3;
            if (g_rx_one) HOLD();
            else {
                peer_kv_rx_push(rx, slot, 0, NULL, &k);
                nd->n_checking++;
            }
            g_node[N_PUSH] += peer_now() - t2;
            g_node_chunks++;
            g_node_bytes += size;
            continue;
        }
        /* as peer/server.c: the next serial's chunk looked for among the messages that came
         * (peer_conn_tag_probe: its length bounded, a slot taken, its receive started), up to
         * g_rx_ahead at once once a chunk said it came over tcp lanes (PEER_KV_TAG_AHEAD), one
         * at a time before; the oldest handed on when it is in (its CRC and push on this thread
         * after the loop went to the other), the next ones' receives started first; a frame on
         * the stream read while chunks are coming waits for them */
        double tw = peer_now();
        int fin = 0;
        st = 0;
        for (;;) {
            if (nd->n_ahead) {
                struct ahead *a = &nd->ahead[nd->ahead_head];
                int r = peer_conn_tag_recv_test(c, a->req, a->k.n_bytes);
                if (r < 0) goto out;
                if (r == 1) {
                    fin = 1;
                    a->req = NULL;
                    if (probe_next(nd)) goto out;
                    break;
                }
            }
            if (probe_next(nd)) goto out;
            if (!nd->deferred && (st = peer_conn_poll(c, PEER_MAX_PAYLOAD, &h, &p)) != 0) {
                if (st < 0 || !nd->n_ahead) break;
                nd->deferred = 1; /* waits for the chunks before it */
                nd->dh = h;
                nd->dp = p;
            }
            if (nd->deferred && !nd->n_ahead) {
                h = nd->dh;
                p = nd->dp;
                nd->deferred = 0;
                st = 1;
                break;
            }
            COLLECT();
            if (!nd->n_ahead && FLUSH()) goto out;
            double tp = peer_now();
            peer_listener_progress(nd->l, 0.01);
            if (!nd->n_ahead && g_node_chunks) g_node[N_FRAME] += peer_now() - tp; /* nothing coming */
        }
        double tf = peer_now();
        if (fin) { /* the oldest chunk coming is in */
            struct ahead *a = &nd->ahead[nd->ahead_head];
            nd->ahead_head = (nd->ahead_head + 1) % RX_AHEAD_MAX;
            nd->n_ahead--;
            g_node[N_RECV] += tf - tw;
            g_node_chunks++;
            g_node_bytes += a->k.n_bytes;
            peer_kv k; /* its token and fixed part, as peer/server.c reads them */
            if (!peer_mac_equal(a->buf, g_token) || peer_kv_tag_read(a->buf, a->k.n_bytes, &k)) {
                if (a->slot >= 0) peer_kv_rx_put_back(rx, a->slot);
                goto out;
            }
            /* as peer/server.c rx_finish */
            nd->hold = peer_kv_reply_hold(a->k.n_bytes, (k.flags & PEER_KV_TAG_AHEAD) != 0);
            nd->ahead_ok = (k.flags & PEER_KV_TAG_AHEAD) != 0;
            if (g_rx_one) {
                HOLD();
                continue;
            }
            int slot = a->slot;
            if (nd->n_th > 1 && (!nd->ahead_ok || g_tcp_handoff)) {
                /* as peer/server.c: the chunk's place kept, the loop handed to the other thread,
                 * this one's CRC and push done here meanwhile (from 64 KiB on its second half
                 * offered to the kv_rx thread, peer_kv_rx_reserve_split; --crc-split 0: not) */
                int split = g_crc && !g_crc_rx && g_crc_split && k.n_bytes >= (64u << 10);
                size_t mid = k.n_bytes / 2 & ~(size_t)63;
                if (split)
                    peer_kv_rx_reserve_split(rx, slot, 0, k.bytes + mid, k.n_bytes - mid);
                else
                    peer_kv_rx_reserve(rx, slot, 0);
                nd->n_checking++; /* (counted by the token's holder) */
                tok_give(nd);
                uint32_t crc = 0;
                if (split) {
                    crc = proto_crc32c(0, k.bytes, mid);
                    if (peer_kv_rx_split_back(rx, slot)) crc = proto_crc32c(crc, k.bytes + mid, k.n_bytes - mid);
                } else if (g_crc && !g_crc_rx) {
                    crc = proto_crc32c(0, k.bytes, k.n_bytes);
                }
                k.crc = crc;
                k.crc_off = 1; /* given: the kv_rx thread takes it */
                double t3 = peer_now();
                peer_kv_rx_push(rx, slot, 0, NULL, &k);
                double t4 = peer_now();
                tok_take(nd, 1);
                nd->sink ^= crc;
                g_node[N_CRC] += t3 - tf;
                g_node[N_PUSH] += t4 - t3;
                continue;
            }
            /* as peer/server.c: one thread, or a chunk over tcp lanes (it stays on this thread, its
             * CRC the kv_rx thread's); --crc-on node: here */
            if (g_crc && !g_crc_rx && (nd->n_th == 1 || g_crc_on_given)) k.crc = proto_crc32c(0, k.bytes, k.n_bytes), k.crc_off = 1;
            double t3 = peer_now();
            g_node[N_CRC] += t3 - tf;
            peer_kv_rx_push(rx, slot, 0, NULL, &k);
            nd->n_checking++;
            g_node[N_PUSH] += peer_now() - t3;
            continue;
        }
        if (st < 0) break;
        if (h.type != PEER_KV) {
            peer_kv_rx_sync(rx);
            COLLECT();
            if (FLUSH()) break;
        }
        if (h.type == PEER_KV) {
            nd->sink ^= proto_crc32c(0, p, h.length);
            nd->hold = peer_kv_reply_hold(h.length, 0); /* as peer/server.c on_kv */
            HOLD();
        } else if (h.type == PEER_ADDR_REQ) {
            const void *a;
            size_t len;
            if (peer_conn_local_address(c, &a, &len)) break;
            uint8_t fixed[PEER_ADDR_FIXED];
            peer_addr_write(fixed, 1000, "", 0);
            peer_wr32(fixed + 8, (uint32_t)len);
            if (peer_conn_send(c, PEER_ADDR, fixed, sizeof fixed, a, len, 10)) break;
            nd->addr_given = 1;
        } else if (h.type == PEER_DECODE && h.length == 4) {
            uint32_t n = peer_rd32(p);
            if (n > (64u << 20)) break;
            if (peer_conn_send(c, PEER_LOGITS, nd->answer, n, NULL, 0, 10)) break;
        } else {
            break;
        }
    }
out:
    while (nd->n_ahead) { /* receives posted ahead of a connection that ended: taken back */
        struct ahead *a = &nd->ahead[nd->ahead_head];
        peer_conn_req_cancel(c, a->req);
        if (a->slot >= 0) peer_kv_rx_put_back(rx, a->slot);
        nd->ahead_head = (nd->ahead_head + 1) % RX_AHEAD_MAX;
        nd->n_ahead--;
    }
    nd->done = 1;
    if (nd->n_th > 1) tok_give(nd);
    return NULL;
#undef FLUSH
#undef HOLD
#undef COLLECT
}

static int serve(int port_fd, long announce_size, long kv_max, int n_th)
{
    node nd = {0};
    char err[256];
    if (peer_listener_new("127.0.0.1:0", &nd.l, err, sizeof err)) {
        fprintf(stderr, "peer_bench: %s\n", err);
        return 1;
    }
    int port = peer_listener_port(nd.l);
    if (write(port_fd, &port, sizeof port) != sizeof port) return 1;
    close(port_fd);
    while (!nd.c) {
        peer_listener_progress(nd.l, 0.1);
        nd.c = peer_listener_accept(nd.l);
    }
    nd.answer = calloc(1, 64 << 20);
    nd.kv_max = (size_t)kv_max;
    if (g_rx_same && !g_rx_one && !(nd.one = peer_bulk_alloc(nd.kv_max, &nd.one_cap))) return 1;
    nd.announce_size = announce_size;
    nd.n_th = n_th;
    nd.tok_free = 1;
    pthread_mutex_init(&nd.mu, NULL);
    pthread_cond_init(&nd.cv, NULL);
    uint32_t sink_rx = 0;
    if (peer_kv_rx_new(1, crc_apply, &sink_rx, wake, nd.l, &nd.rx)) return 1;
    pthread_t more;
    int two = n_th > 1 && !pthread_create(&more, NULL, node_loop, &nd);
    if (!two) nd.n_th = 1;
    node_loop(&nd);
    if (two) pthread_join(more, NULL);
    g_node_busy_max = peer_kv_rx_busy_max(nd.rx);
    peer_kv_rx_free(nd.rx);
    free(nd.one);
    node_report();
    peer_conn_free(nd.c);
    peer_listener_free(nd.l);
    free(nd.answer);
    return (int)((nd.sink ^ sink_rx) & 0);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --crc-speed 1: CRC-32C's rate on this CPU, each path it has (proto/crc32c.h), over 1 MiB and
 * 8 MiB: the same buffer again and again (in the cache, as a chunk the checking thread just
 * received) and 64 MiB of buffers in turn (from memory); GB/s, the best of 5 passes. */
static int crc_speeds(void)
{
    size_t total = (size_t)64 << 20;
    uint8_t *m = malloc(total);
    if (!m) return 1;
    for (size_t i = 0; i < total; i++) m[i] = (uint8_t)(i * 2654435761u >> 13);
    static const char *const mode[] = {"", " --crc-512 0", " --crc-fold 0"};
    uint32_t sink = 0;
    for (int md = 0; md < 3; md++) {
        proto_crc32c_no_512 = md >= 1;
        proto_crc32c_no_fold = md >= 2;
        for (size_t sz = (size_t)1 << 20; sz <= ((size_t)8 << 20); sz *= 8)
            for (int cold = 0; cold < 2; cold++) {
                double best = 0;
                for (int pass = 0; pass < 5; pass++) {
                    size_t bytes = 0;
                    double t0 = peer_now();
                    for (size_t at = 0; bytes < total; bytes += sz, at = cold ? (at + sz) % total : 0)
                        sink ^= proto_crc32c(0, m + at, sz);
                    double gbs = (double)bytes / (peer_now() - t0) / 1e9;
                    if (gbs > best) best = gbs;
                }
                printf("crc32c %s%s: %zu bytes, %s: %.1f GB/s\n", proto_crc32c_path(), mode[md], sz,
                       cold ? "64 MiB of buffers in turn" : "one buffer again", best);
            }
    }
    free(m);
    return (int)(sink & 0);
}

int main(int argc, char **argv)
{
    long sizes[16], logits[16];
    int ns = parse_list("65536,1048576,8388608,67108864", sizes, 16);
    int nl = parse_list("2048,524288", logits, 16);
    long reps = 0, layers = 32, window = PEER_KV_WINDOW, poll_us = 0, n_bufs = PEER_KV_WINDOW;
    long sends = PEER_KV_TCP_SENDS;
    int tag = 0, rx_threads = 0, crc_speed = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--sizes")) ns = parse_list(argv[i + 1], sizes, 16);
        else if (!strcmp(argv[i], "--layers")) layers = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--window")) window = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--logits")) nl = parse_list(argv[i + 1], logits, 16);
        else if (!strcmp(argv[i], "--reps")) reps = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--path")) tag = !strcmp(argv[i + 1], "tag");
        else if (!strcmp(argv[i], "--poll-us")) poll_us = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--buffers")) n_bufs = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--sends")) sends = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--crc")) g_crc = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--announce")) g_announce = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--rx-one")) g_rx_one = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--tcp-handoff")) g_tcp_handoff = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--rx-same")) g_rx_same = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--warm")) g_warm = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--sm-sends")) g_sm_sends = (int)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--tx-tight")) g_tx_tight = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--rx-tight")) g_rx_tight = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--hold")) g_hold = (int)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rx-ahead")) g_rx_ahead = (int)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--write")) g_write = (int)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--crc-on")) g_crc_rx = !strcmp(argv[i + 1], "rx") ? 1 : !strcmp(argv[i + 1], "node") ? 0 : -1;
        else if (!strcmp(argv[i], "--crc-fold")) proto_crc32c_no_fold = !strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--crc-512")) proto_crc32c_no_512 = !strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--crc-split")) g_crc_split = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--crc-speed")) crc_speed = strtol(argv[i + 1], NULL, 10) != 0;
        else if (!strcmp(argv[i], "--rx-threads")) rx_threads = (int)strtol(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: peer_bench [--sizes B,...] [--logits B,...] [--reps N] [--path stream|tag] "
                            "[--layers N] [--window 1..%d] [--poll-us 0..%d] [--buffers 1..%d] [--sends 1..%d] [--crc 0|1] "
                            "[--announce 0|1] [--rx-one 0|1] [--rx-same 0|1] [--tcp-handoff 0|1] [--warm 0|1] [--tx-tight 0|1] [--rx-tight 0|1] [--hold 0..%d] [--rx-ahead 1..%d] [--write 0|1] [--crc-on node|rx] [--crc-fold 0|1] "
                            "[--crc-512 0|1] [--crc-split 0|1] [--crc-speed 1] [--rx-threads 0..2]\n", PEER_KV_WINDOW,
                    PEER_POLL_US_MAX, PEER_KV_WINDOW, PEER_KV_WINDOW, PEER_KV_WINDOW / 2, RX_AHEAD_MAX);
            return 2;
        }
    }
    if (crc_speed) return crc_speeds();
    peer_kv_rx_lowest_first = !g_warm; /* the node's too: set before the fork */
    if (layers < 1) layers = 1;
    if (window < 1 || window > PEER_KV_WINDOW) window = PEER_KV_WINDOW;
    if (n_bufs < 1 || n_bufs > PEER_KV_WINDOW) n_bufs = PEER_KV_WINDOW;
    if (sends < 1 || sends > PEER_KV_WINDOW) sends = PEER_KV_TCP_SENDS;
    if (g_sm_sends < 0 || g_sm_sends > PEER_KV_WINDOW) g_sm_sends = PEER_KV_SM_SENDS;
    if (g_rx_ahead < 1 || g_rx_ahead > RX_AHEAD_MAX || (!g_rx_one && g_rx_ahead > PEER_KV_RX_SLOTS)) {
        fprintf(stderr, "peer_bench: --rx-ahead 1..%d (1..%d without --rx-one 1: kv_rx's slots)\n", RX_AHEAD_MAX, PEER_KV_RX_SLOTS);
        return 2;
    }
    /* every KV size bounded before anything is allocated: the buffers are the largest one's
     * (0: no KV run, the logits only, as bench/peer_bench.sh's decode part asks) */
    long kv_max = 0;
    if (ns < 1) {
        fprintf(stderr, "peer_bench: --sizes: at least one size (0: the logits only)\n");
        return 2;
    }
    for (int i = 0; i < ns; i++) {
        if (sizes[i] != 0 && (sizes[i] <= PEER_KV_TAG_FIXED || sizes[i] > KV_SIZE_MAX)) {
            fprintf(stderr, "peer_bench: --sizes: each 0 (none) or %d..%ld bytes, got %ld\n",
                    PEER_KV_TAG_FIXED + 1, KV_SIZE_MAX, sizes[i]);
            return 2;
        }
        if (sizes[i] > kv_max) kv_max = sizes[i];
    }
    if (!kv_max) kv_max = 4096; /* no KV run: buffers of a page, unused */
    if (g_hold < 0 || g_hold > PEER_KV_WINDOW / 2) {
        fprintf(stderr, "peer_bench: --hold 0..%d (0: by the chunk's size, the default)\n", PEER_KV_WINDOW / 2);
        return 2;
    }
    if (!g_announce && (!tag || ns != 1 || !sizes[0])) {
        fprintf(stderr, "peer_bench: --announce 0 takes --path tag and one size\n");
        return 2;
    }
    if (!g_announce) nl = 0; /* the node reads no frame between chunks */
    rx_threads = g_announce && !g_rx_one ? peer_rx_threads(rx_threads) : 1; /* as the daemon's default */
    g_crc_on_given = g_crc_rx >= 0;
    if (g_crc_rx < 0) g_crc_rx = rx_threads == 1;
    peer_link_set_poll_us((int)(poll_us < 0 ? 0 : poll_us > PEER_POLL_US_MAX ? PEER_POLL_US_MAX : poll_us));
    int fds[2];
    if (pipe(fds)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        _exit(serve(fds[1], sizes[0], kv_max, rx_threads));
    }
    close(fds[1]);
    int port;
    if (read(fds[0], &port, sizeof port) != sizeof port) return 1;
    char addr[64], err[256];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    peer_conn *c;
    if (peer_conn_connect(addr, &c, err, sizeof err)) {
        fprintf(stderr, "peer_bench: %s\n", err);
        return 1;
    }
    const char *tls = getenv("UCX_TLS");
    peer_header h;
    const uint8_t *p;
    if (tag) {
        const uint8_t *a;
        size_t len;
        uint64_t base;
        if (peer_conn_send(c, PEER_ADDR_REQ, NULL, 0, NULL, 0, 10) ||
            peer_conn_recv(c, PEER_ADDR_FIXED + PEER_ADDR_MAX, &h, &p, 10) || h.type != PEER_ADDR ||
            peer_addr_read(p, h.length, &base, &a, &len) || peer_conn_open_address(c, a, len, err, sizeof err)) {
            fprintf(stderr, "peer_bench: no address endpoint: %s\n", err);
            return 1;
        }
    }
    char held_by[96]; /* the node's rule: by the size (the first size's count shown) or --hold */
    if (g_hold) snprintf(held_by, sizeof held_by, "%d (--hold)", g_hold);
    else if (sizes[0] > 0)
        snprintf(held_by, sizeof held_by, "half the window's chunks of their size (%d at %ld bytes%s)",
                 peer_kv_reply_hold((size_t)sizes[0], tag && peer_conn_sender_driven(c)), sizes[0],
                 tag && peer_conn_sender_driven(c) ? " over tcp lanes" : "");
    else snprintf(held_by, sizeof held_by, "half the window's chunks of their size");
    printf("# peer_bench: UCX_TLS=%s, KV %s (transport: %s), up to %ld chunks in flight, runs of %ld, "
           "polling %d us, from %ld buffers%s, %ld sends in flight over tcp lanes, %d over the others (0: the window's), "
           "CRC-32C (%s) on the %s, "
           "%d receiving thread(s)%s%s%s%s%s, replies held back until %s\n",
           tls ? tls : "(UCX's choice)",
           tag ? "as tagged messages on the endpoint by worker address" : "on the stream endpoint",
           peer_conn_transport(c), window, layers, peer_link_poll_us(), n_bufs,
           g_write == 2 ? " (each written before its send, not timed)" : g_write ? " (each written before its send)" : "",
           sends, g_sm_sends, proto_crc32c_path(),
           !g_crc || g_rx_one ? "node: none (--crc 0 or --rx-one 1)" : g_crc_rx ? "node's kv_rx thread" : "node's receiving thread",
           rx_threads, rx_threads > 1 ? (g_tcp_handoff ? ", chunks over tcp lanes handed on too (--tcp-handoff 1)" : ", chunks over tcp lanes kept on their receiving thread (CRC: kv_rx's)") : "",
           g_rx_same && !g_rx_one ? ", every chunk received into one buffer (--rx-same 1)" : "",
           g_warm ? ", the buffer freed last reused (sender and kv_rx)" : ", the ring's send buffers and the lowest kv_rx slot (--warm 0)",
           g_tx_tight ? ", the send buffer taken after the room for its send" : ", the send buffer taken before the room for its send (--tx-tight 0)",
           g_rx_tight ? ", at most --rx-ahead kv_rx slots coming or checked (--rx-tight 1)" : ", the receive ahead at once",
           held_by);
    /* one buffer per chunk in flight, as the remote backend serializes each into its own
     * (peer_bulk_alloc, as the backend's) */
    uint8_t *bufs[PEER_KV_WINDOW];
    for (int i = 0; i < PEER_KV_WINDOW; i++) {
        size_t cap;
        bufs[i] = i < n_bufs ? peer_bulk_alloc((size_t)kv_max, &cap) : bufs[i % n_bufs];
        if (!bufs[i]) return 1;
        if (i < n_bufs) memset(bufs[i], 0x5a, (size_t)kv_max);
    }
    uint32_t serial = 0;
    for (int i = 0; i < ns; i++) {
        long sz = sizes[i]; /* 0 or in bounds: checked above */
        if (!sz) continue;
        long r = reps ? reps : (sz >= (8 << 20) ? 20 : sz >= (1 << 20) ? 200 : 2000);
        double pass[3];
        /* the sender's stage clocks over the 3 measured passes: room in the window of sends, the
         * tagged send's start, answers waited for to make room in the window, at a run's end */
        double s_ann = 0, s_start = 0, s_room = 0, s_run = 0, s_write = 0;
        unsigned used = 0; /* the send buffers written into, one bit each */
        for (int k = 0; k < 4; k++) {
            double t0 = peer_now(), pw = 0; /* pw: this pass's writes (--write) */
            int measured = k > 0;
            void *req[PEER_KV_WINDOW] = {0};
            int head = 0, n_fl = 0;
            /* --warm 1: fb[q], the buffer the flight at ring place q holds until its send is done
             * (-1: none), spare, the others, the one given back last on top (peer/remote_kv.c) */
            int fb[PEER_KV_WINDOW], spare[PEER_KV_WINDOW], n_spare = 0;
            for (int q = PEER_KV_WINDOW - 1; q >= 0; q--) fb[q] = -1, spare[n_spare++] = q;
#define BUF_BACK(q)                                                                                \
    do {                                                                                           \
        if (g_warm && fb[q] >= 0 && !req[q]) spare[n_spare++] = fb[q], fb[q] = -1;                 \
    } while (0)
            for (long j = 0; j <= r; j++) {
                /* answers: to make room, at a run's end, and at the end */
                double tw = peer_now();
                int at_end = j == r || (j % layers) == 0;
                while (n_fl && (j == r || (j % layers) == 0 ||
                                !(n_fl < window && peer_kv_window_room(n_fl, (size_t)n_fl * (size_t)sz, (size_t)sz)))) {
                    if (peer_conn_req_wait(c, req[head], 30) ||
                        peer_conn_recv(c, PEER_KV_WINDOW * (PEER_HEADER_BYTES + 8), &h, &p, 30) ||
                        h.type != PEER_REPLY) {
                        fprintf(stderr, "peer_bench: the link failed\n");
                        return 1;
                    }
                    req[head] = NULL;
                    BUF_BACK(head);
                    head = (head + 1) % PEER_KV_WINDOW;
                    n_fl--;
                    if (j != r && (j % layers) != 0) break;
                }
                double ta = peer_now();
                if (measured) *(at_end ? &s_run : &s_room) += ta - tw;
                if (j == r) break;
                int slot = (head + n_fl) % PEER_KV_WINDOW, st = PEER_OK;
                int driven = tag && peer_conn_sender_driven(c);
                int sm_win = tag && !driven && g_sm_sends > 0;
                if ((driven && g_tx_tight) || sm_win) { /* room in the window of sends before the buffer is taken */
                    void **rs[PEER_KV_WINDOW];
                    for (int q = 0; q < n_fl; q++) rs[q] = &req[(head + q) % PEER_KV_WINDOW];
                    st = peer_conn_sends_room(c, rs, n_fl, driven ? (int)sends : g_sm_sends, 30);
                    if (st > 0) st = PEER_OK;
                    for (int q = 0; q < n_fl; q++) BUF_BACK((head + q) % PEER_KV_WINDOW);
                    if (measured) s_ann += peer_now() - ta;
                    ta = peer_now();
                }
                if (g_warm && fb[slot] < 0) fb[slot] = spare[--n_spare]; /* the one given back last */
                int bi = g_warm ? fb[slot] : slot % (int)n_bufs;
                uint8_t *sb = bufs[bi];
                used |= 1u << (bi % n_bufs); /* (with --buffers N < 8 the ring's places share N) */
                if (g_write) { /* the layer serialized into the chunk's buffer, as the backend does */
                    double tw0 = peer_now();
                    memset(sb, (int)(j & 0xff), (size_t)sz);
                    pw += peer_now() - tw0;
                    if (measured) s_write += peer_now() - tw0;
                    ta = peer_now(); /* the write is its own clock, not the room's below */
                }
                if (st) {
                    fprintf(stderr, "peer_bench: the link failed\n");
                    return 1;
                }
                if (tag) {
                    /* the connection's token and the chunk's fixed part first in its message,
                     * marked over tcp lanes, as the backend writes them */
                    peer_kv k = {0, 0, 0, driven ? PEER_KV_TAG_AHEAD : 0, NULL, 0, 0, 0};
                    peer_kv_tag_write_fixed(sb, g_token, &k);
                    ++serial;
                    if (driven && !g_tx_tight) { /* room in the window of sends */
                        void **rs[PEER_KV_WINDOW];
                        for (int q = 0; q < n_fl; q++) rs[q] = &req[(head + q) % PEER_KV_WINDOW];
                        st = peer_conn_sends_room(c, rs, n_fl, (int)sends, 30);
                        if (st > 0) st = PEER_OK;
                        for (int q = 0; q < n_fl; q++) BUF_BACK((head + q) % PEER_KV_WINDOW);
                    }
                    double tb = peer_now();
                    if (measured) s_ann += tb - ta;
                    if (!st) st = peer_conn_tag_send_start(c, 1000 + serial, sb, (size_t)sz, &req[slot]);
                    if (!st && req[slot] && driven) {
                        /* as the backend does (peer/remote_kv.c): a pass without waiting over
                         * the sends in flight, this one among them */
                        void **rs[PEER_KV_WINDOW];
                        for (int q = 0; q <= n_fl; q++) rs[q] = &req[(head + q) % PEER_KV_WINDOW];
                        st = peer_conn_sends_room(c, rs, n_fl + 1, (int)sends + 1, 30);
                        if (st > 0) st = PEER_OK;
                        for (int q = 0; q <= n_fl; q++) BUF_BACK((head + q) % PEER_KV_WINDOW);
                    }
                    BUF_BACK(slot); /* a send done at once */
                    if (measured) s_start += peer_now() - tb;
                } else {
                    st = peer_conn_send(c, PEER_KV, sb, (size_t)sz, NULL, 0, 30);
                    BUF_BACK(slot);
                }
                if (st) {
                    fprintf(stderr, "peer_bench: the link failed\n");
                    return 1;
                }
                n_fl++;
            }
#undef BUF_BACK
            /* the first pass warms up; --write 2: the writes' time is not the link's */
            if (k) pass[k - 1] = peer_now() - t0 - (g_write == 2 ? pw : 0);
        }
        qsort(pass, 3, sizeof pass[0], cmp_d);
        printf("kv %ld bytes: %.0f MiB/s (%ld chunks, median of 3 passes: %.3f s)\n", sz,
               (double)sz * r / pass[1] / (1 << 20), r, pass[1]);
        double nc = 3.0 * r;
        printf("# sender, per chunk (3 passes): %.1f us in all; room in the window of sends %.1f us; tagged send started "
               "%.1f us; answers for room %.1f us; answers at a run's end %.1f us; bytes written %.1f us; send buffers used %d\n",
               (pass[0] + pass[1] + pass[2]) / nc * 1e6, s_ann / nc * 1e6, s_start / nc * 1e6,
               s_room / nc * 1e6, s_run / nc * 1e6, s_write / nc * 1e6, __builtin_popcount(used));
    }
    for (int i = 0; i < nl; i++) {
        long sz = logits[i];
        if (sz <= 0 || sz > (64 << 20)) continue;
        long r = reps ? reps : 2000;
        uint8_t q[4];
        peer_wr32(q, (uint32_t)sz);
        double pass[3];
        for (int k = 0; k < 4; k++) {
            double t0 = peer_now();
            for (long j = 0; j < r; j++) {
                if (peer_conn_send(c, PEER_DECODE, q, 4, NULL, 0, 30) ||
                    peer_conn_recv(c, (uint32_t)sz, &h, &p, 30)) {
                    fprintf(stderr, "peer_bench: the link failed\n");
                    return 1;
                }
            }
            if (k) pass[k - 1] = peer_now() - t0;
        }
        qsort(pass, 3, sizeof pass[0], cmp_d);
        printf("logits %ld bytes: %.1f us per round trip (%ld, median of 3 passes)\n", sz, pass[1] / r * 1e6, r);
    }
    fflush(stdout);
    peer_conn_free(c);
    /* the node prints its stage clocks when it sees the connection close */
    for (int i = 0; i < 300 && waitpid(pid, NULL, WNOHANG) == 0; i++) usleep(10000);
    if (waitpid(pid, NULL, WNOHANG) == 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    for (int i = 0; i < n_bufs; i++) free(bufs[i]);
    return 0;
}
