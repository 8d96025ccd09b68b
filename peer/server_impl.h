/* peer/server_impl.h — what the node's files share (peer/server.c: the loop, its connections and
 * the KV chunks; peer/server_call.c: the lent devices' threads that run the calls peers ask for;
 * peer/server_decode.c: the decode steps among them; peer/server_info.c: the device list it
 * answers with, and the device faults it logs). Private to peer/. Everything here belongs
 * to the thread holding the node's loop (peer/server.c) unless it says otherwise. */
#ifndef TANDEM_PEER_SERVER_IMPL_H
#define TANDEM_PEER_SERVER_IMPL_H
#include "peer/auth.h"
#include "peer/kv_rx.h"
#include "peer/link.h"
#include "peer/peer.h"
#include "proto/kv_wire.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* An answer must be on its way within this (a peer that reads nothing: its connection closed).
 * The node's one loop waits for it, and with it every other peer, whose heartbeat gives up on
 * the node after PEER_DEAD_S (3 s): well below that (it was 10 s: one peer that stopped reading
 * made every other one lose the node). A peer in a call reads its answer as it comes (its waits
 * progress its worker every 10 ms), so 1 s is the time of the answer itself: 125 MB at 1 Gb/s,
 * more than a LOGITS of 64 sequences of a 128K vocabulary (32 MiB). */
#define SEND_TIMEOUT_S 1.0
/* A connection's tagged chunks received at once over tcp lanes (its last chunk marked
 * PEER_KV_TAG_AHEAD; others one at a time): the one coming and the next one's receive behind
 * it, as the sender's two sends in flight (PEER_KV_TCP_SENDS; deeper gained nothing, BENCHMARKS.md).
 * The receive behind starts at once, into a third kv_rx slot while the chunk before is being
 * checked: waiting for that check to reuse its slot (two slots taking turns) lost x0.83 on the
 * quiet node (BENCHMARKS.md, wiretcp9: the next chunk's bytes no longer followed on the socket). */
#define RX_AHEAD 2
/* A connection's tags: its base's high 32 bits, the serial in the low 32 (peer/server_stray.c). */
#define TAG_CONN_MASK 0xffffffff00000000ull
/* Closed connections remembered to name the sender of their late messages in the log. */
#define STRAY_CLOSED_KEPT 8
/* The sweep's log lines at most one a second: a flood must not flood the log too. */
#define STRAY_LOG_S 1.0
/* A REPLY frame: header and two words. */
#define KV_REPLY_BYTES (PEER_HEADER_BYTES + 8)
/* Calls of one device queued or running at once, whichever connections they are of (each
 * connection has at most one: its next frames wait for the answer). A connection's call beyond
 * it waits, its frame held, for one to be answered: a peer cannot queue unbounded work. */
#define CALLS_PER_DEV 8
/* handle()'s "not now": the frame stays held (sconn.deferred) and is tried again next pass. */
#define FRAME_HELD 1
#define MAX_SEQS   4096 /* per connection: above any continuous batch of a node's cards */

enum sconn_state { S_HELLO_WAIT, S_AUTH_WAIT, S_READY };

/* What the KV reader's callback needs: heap-held, since the table of sequences may move */
typedef struct kvctx {
    accel_dev *dev;
    accel_seq *seq;
    uint32_t crc; /* the producer's CRC of the chunk being fed */
} kvctx;

typedef struct sseq {
    accel_seq *s;
    int dev;
    int capacity;
    proto_kv_reader *r;
    kvctx *kc;
    int run_st; /* the status that failed the current run of positions (0: none yet) */
} sseq;

struct scall;

typedef struct sconn {
    peer_conn *c;
    enum sconn_state state;
    double t0;
    uint8_t nonce_c[PEER_NONCE], nonce_s[PEER_NONCE];
    uint8_t kv_token[PEER_MAC]; /* its tagged chunks' (peer/auth.h), set as it authenticates */
    char name[PEER_NAME_MAX + 1];
    int addr_given;     /* ADDR sent: tagged chunks looked for */
    int ahead;          /* its last chunk came over tcp lanes (PEER_KV_TAG_AHEAD) */
    int rx_lane;        /* its last chunk's kv_rx lane (its device's), -1 before its first: its
                           next chunks are received while that lane has room (peer_kv_rx_lane_room) */
    uint64_t tag_base;  /* its tagged messages are tag_base + serial (random high 32 bits) */
    uint32_t tag_serial; /* the last serial whose receive started */
    double gap_since;    /* since when its oldest message waits ahead of its next serial (0: not) */
    /* KV chunks' REPLYs not sent yet (kv_reply): sent when `hold` of them are, at most half a
     * window (peer_kv_reply_hold <= PEER_KV_WINDOW / 2) */
    uint8_t held[PEER_KV_WINDOW / 2 * KV_REPLY_BYTES];
    int n_held;
    /* peer_kv_reply_hold of its last chunk's size, set by the loop's thread where a chunk is read
     * (on_kv) or received (rx_finish), never by the kv_rx thread; 0 before its first: each sent */
    int hold;
    /* its tagged chunks being received (each into kv_rx slot .slot), oldest at rx_head, while
     * this thread goes on serving every connection; a frame read on its stream while any is
     * coming waits (deferred) for all of them */
    struct sconn_rx {
        int slot;
        void *req; /* NULL once UCX let it go */
        peer_kv k; /* bytes, n_bytes: the whole message until it is in and read */
        double deadline;
    } rx[RX_AHEAD];
    int rx_head, rx_n;
    int deferred; /* a frame read while chunks were coming: handled once they are in */
    peer_header dh;
    const uint8_t *dp; /* in the connection's buffer until its next peer_conn_poll */
    /* a chunk that arrived while no kv_rx slot was free: started when one is, oldest first (its
     * next frames wait for it) */
    unsigned long tag_wait; /* 0: none; else its turn (peer_server.wait_seq) */
    size_t tag_len;         /* its length (bounded) */
    sseq *seqs;
    int n_seqs, cap_seqs;
    /* its tagged or stream chunks pushed to the kv_rx thread whose results were not taken yet:
     * its next frame waits for them (answers in order, and its sequences are the kv_rx thread's
     * meanwhile) */
    int kv_pending;
    struct scall *call; /* its device call queued or running (one at most): its frames wait */
    int closing;        /* closed, kept (server.closing) until its call and chunks are done */
    struct sconn *next;
} sconn;

/* A device call a peer asked for (peer/server_call.c): read off its frame by the loop, run on its
 * device's thread, answered by the loop. While it is queued or running it is that thread's; its
 * connection's sconn stays allocated (closing) until the loop has taken it back. */
enum scall_kind {
    CALL_SEQ_NEW,
    CALL_SEQ_FREE,
    CALL_TRUNCATE,
    CALL_WARMUP,
    CALL_DECODE,
    CALL_DECODE_ARGMAX,
    CALL_RELEASE /* a closed connection's sequences of one device: no answer, outside CALLS_PER_DEV
                  */
};

typedef struct scall {
    int kind;
    int dev; /* -1: none (a call answered at once, its checks failed) */
    sconn *sc;
    /* arguments */
    int n;          /* DECODE*: rows; RELEASE: sequences */
    int arg;        /* SEQ_NEW: capacity; TRUNCATE: the length to keep */
    uint32_t slot;  /* SEQ_NEW, SEQ_FREE: the sequence's index in sc->seqs */
    accel_seq *seq; /* SEQ_NEW: made here; TRUNCATE: its sequence */
    sseq rel;       /* SEQ_FREE: the sequence taken out of sc->seqs, freed on the thread */
    sseq *rels;     /* RELEASE: n sequences (owned) */
    accel_seq *seqs[PEER_MAX_BATCH];
    int32_t ids[PEER_MAX_BATCH];
    unsigned char want[PEER_MAX_BATCH];
    int n_want;
    /* the answer */
    int st;
    int32_t argmax[PEER_MAX_BATCH];
    float *logits; /* (n, vocab), DECODE_ARGMAX's wanted rows first; kept for the next call */
    size_t logits_cap;
    struct scall *next;
} scall;

/* One lent device's call thread: its queue, and the turn of whichever thread drives the device
 * (this one for a call, its kv_rx lane's for an import: accel.h's one at a time), handed out
 * first come, first served (peer_server_dev_hold). */
typedef struct sdev {
    peer_server *s;
    int dev;
    pthread_t th;
    int started;
    pthread_mutex_t mu; /* q_head, q_tail, stop */
    pthread_cond_t cv;
    struct scall *q_head, *q_tail;
    int stop;
    /* the drive turns: a thread takes ticket drive_next and drives the device once drive_now is
     * it. A plain mutex was no queue: the call thread, letting it go and taking it again for its
     * next call at once, won it over a waiting import again and again (one import waited behind
     * call after call of a steady stream, past its sender's call timeout). */
    pthread_mutex_t drive;
    pthread_cond_t drive_cv;
    unsigned long drive_next, drive_now;
    /* the loop's: calls not in use, and how many were made (at most CALLS_PER_DEV) */
    struct scall *idle;
    int n_calls;
} sdev;

/* A receive of a closed connection UCX has not given back, and the buffer it may write into. */
struct rx_lost {
    void *req;
    uint8_t *buf;
    size_t cap;
};

struct peer_server {
    peer_server_cfg cfg;
    char name[PEER_NAME_MAX + 1];
    char key[PEER_KEY_MAX + 1];
    size_t key_len;
    accel_dev *devs[PEER_MAX_DEVS];
    int block_tokens[PEER_MAX_DEVS]; /* each device's KV block size: the KV sent to it is cut in it */
    peer_listener *l;
    sconn *conns;
    pthread_t th;
    _Atomic int stop;
    peer_kv_rx *rx; /* tagged KV chunks: checked and imported on its thread */
    unsigned long wait_seq; /* turns handed to chunks that wait (sconn.tag_wait) */
    int n_waiting;          /* connections with one */
    /* the receiving threads (rx_threads): one runs the loop at a time, holding the token */
    pthread_t th_more[PEER_RX_THREADS_MAX - 1];
    int n_th;
    pthread_mutex_t tok_mu;
    pthread_cond_t tok_cv;
    _Atomic int tok_free;
    /* chunks received in this pass: CRC and push by the holder after the token (places reserved) */
    struct handoff {
        int slot, lane;
        sconn *sc;
        peer_kv k;
        size_t mid; /* where its CRC is cut (crc_split_at), 0 uncut */
    } handoff[PEER_KV_RX_SLOTS];
    int n_handoff;
    _Atomic long handed; /* peer_server_handoffs */
    _Atomic int rx_ahead_max; /* peer_server_rx_ahead_max */
    /* tagged messages of no live connection (peer/server_stray.c) */
    struct closed_tags {
        uint64_t base;
        char name[PEER_NAME_MAX + 1];
    } closed[STRAY_CLOSED_KEPT]; /* the last connections closed: to name late arrivals' sender */
    int closed_next;
    _Atomic long strays;     /* peer_server_strays */
    /* the sweep's log line: at most one a STRAY_LOG_S, what was let go since the last one in it */
    double stray_logged;
    long stray_msgs;
    size_t stray_bytes;
    uint64_t stray_tag;
    char stray_name[PEER_NAME_MAX + 1];
    _Atomic int tags_queued; /* peer_server_tags_queued */
    /* receives of closed connections that UCX had not given back (a sender stalled mid-chunk:
     * peer_conn_req_abandon 0), with the kv_rx buffers they may still write into: each pass looks
     * at them (rx_lost_poll) and frees a buffer once UCX is done with its receive, so that the
     * loop never waits for one and nothing is leaked */
    struct rx_lost *lost;
    int n_lost, cap_lost;
    _Atomic size_t lost_bytes; /* peer_server_rx_lost_bytes */
    /* the lent devices' call threads (peer/server_call.c) and the calls they are done with */
    sdev dt[PEER_MAX_DEVS];
    int calls_on; /* threads running: a closed connection's sequences are freed on them */
    pthread_mutex_t done_mu;
    struct scall *done_head, *done_tail;
    struct scall *call_now; /* the loop's: a call answered at once (its checks failed) */
    sconn *closing;         /* connections closed while their call or chunks were not done */
    /* the node draining (peer_server_set_draining, any thread): a SEQ_NEW is refused and the
     * device list says no memory free; read by the loop (the list, the SEQ_NEW's check) */
    _Atomic int draining;
    /* sequences made for peers and not freed yet (peer_server_live_seqs): up on a device's call
     * thread as a SEQ_NEW makes one, down wherever peer_server_sseq_release frees one */
    _Atomic int live_seqs;
};

/* sc's sequence `id` on device `dev`, or NULL (no such one, or of another device). */
static inline sseq *seq_get(sconn *sc, uint32_t id, uint32_t dev)
{
    if (id >= (uint32_t)sc->n_seqs || !sc->seqs[id].s || (uint32_t)sc->seqs[id].dev != dev) return NULL;
    return &sc->seqs[id];
}

/* The device list (peer_info) as a `type` frame (PEER_WELCOME, PEER_INFO) on sc: PEER_OK or a
 * status that closes it (peer/server_info.c). */
int peer_server_send_info(peer_server *s, sconn *sc, int type);
/* Logs a device call's failure that is the device's (ACCEL_ERR_DEVICE, ACCEL_ERR_TIMEOUT), with
 * the peer, the device and the call, unless the device had already failed before the call
 * (was_failed: peer_server_dev_failed before it); other statuses are the request's and say
 * nothing. */
void peer_server_device_fault(const peer_server *s, const sconn *sc, int dev, const char *call,
                              int st, int was_failed);
int peer_server_dev_failed(const peer_server *s, int dev);
/* A REPLY (status, value) on sc: PEER_OK or a status that closes it (peer/server.c). */
int peer_server_reply(sconn *sc, int32_t status, uint32_t value);
/* Frees what a sequence holds on its device and off it, and clears it. On the thread driving its
 * device (its call thread, or any once they are stopped). */
void peer_server_sseq_release(peer_server *s, sseq *q);

/* The devices' call threads (peer/server_call.c).
 * peer_server_calls_start: one thread per lent device; PEER_OK or PEER_ERR_NOMEM (none left).
 * peer_server_calls_stop: every call queued is run and the threads joined (their answers wait
 * for peer_server_calls_collect; sequences released after it are freed on the caller's thread).
 * peer_server_calls_free: the calls and locks freed (after _stop; a failed _start frees too).
 * peer_server_on_call: a device call's frame (SEQ_NEW, SEQ_FREE, TRUNCATE, WARMUP, DECODE,
 * DECODE_ARGMAX) read and queued for its device's thread, or answered at once when its checks
 * fail; FRAME_HELD when the device has CALLS_PER_DEV calls already (nothing read); else PEER_OK
 * or a status that closes sc.
 * peer_server_calls_collect: the calls done so far answered (a closing connection's let go), in
 * the order they were done; a failed send kills its connection (server_pass closes it).
 * peer_server_calls_release: a closed connection's n sequences (v, the caller's still) freed on
 * their devices' threads (at once once they are stopped); v is left cleared.
 * peer_server_dev_hold / _let: the device driven by the calling thread meanwhile (a call, or a
 * kv_rx lane's import); a hold waits for the holds asked before it, in the order asked. */
int peer_server_calls_start(peer_server *s);
void peer_server_calls_stop(peer_server *s);
void peer_server_calls_free(peer_server *s);
int peer_server_on_call(peer_server *s, sconn *sc, int type, const uint8_t *p, size_t n);
void peer_server_calls_collect(peer_server *s);
void peer_server_calls_release(peer_server *s, sseq *v, int n);
void peer_server_dev_hold(peer_server *s, int dev);
void peer_server_dev_let(peer_server *s, int dev);

/* DECODE and DECODE_ARGMAX (peer/server_decode.c). _read: the frame into c (c->st
 * ACCEL_ERR_INVALID for a sequence sc does not have on that device): PEER_OK or PEER_ERR_PROTO.
 * _run: the step, on the device's thread. _answer: its LOGITS or TOKENS sent, on the loop. */
int peer_server_decode_read(peer_server *s, sconn *sc, scall *c, const uint8_t *p, size_t n);
void peer_server_decode_run(peer_server *s, scall *c);
int peer_server_decode_answer(peer_server *s, scall *c);

/* Tagged messages outside what the node will receive (peer/server_stray.c). The node's loop
 * thread only. peer_server_stray_base: a fresh tag base (random high 32 bits, no live or
 * recently closed connection's, not 0; the low 32 bits zero, for the serials): 0, or -1 when
 * no random bytes came. peer_server_stray_check: looks at sc's oldest queued message when its
 * next serial's is not there: PEER_OK, or PEER_ERR_PROTO (logged, the message let go) for a
 * serial outside its window, or one ahead of a missing serial for longer than the sender's
 * call timeout. peer_server_stray_closing: lets sc's queued messages go as it closes, and
 * remembers it for the log. peer_server_stray_sweep: lets go the messages of no live
 * connection (late ones of a closed connection, or made up), a bounded number per pass,
 * logged at most once a second. */
int peer_server_stray_base(peer_server *s, uint64_t *base);
int peer_server_stray_check(peer_server *s, sconn *sc);
void peer_server_stray_closing(peer_server *s, sconn *sc);
void peer_server_stray_sweep(peer_server *s);

#endif
