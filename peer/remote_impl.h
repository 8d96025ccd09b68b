/* peer/remote_impl.h — what the remote backend's files share (peer/remote.c: the node, its
 * heartbeat and the device calls; peer/remote_kv.c: the KV chunks a remote device sends,
 * pipelined; peer/remote_live.c: the heartbeat's health and free memory applied to the devices).
 * Private to peer/. */
#ifndef TANDEM_PEER_REMOTE_IMPL_H
#define TANDEM_PEER_REMOTE_IMPL_H
#include "peer/auth.h"
#include "peer/link.h"
#include "peer/peer.h"
#include "proto/kv_wire.h"
#include "scheduler/accel_impl.h"
#include <pthread.h>
#include <stdatomic.h>

struct peer_node {
    char addr[128];
    char my_name[PEER_NAME_MAX + 1];
    char name[PEER_NAME_MAX + 1];
    char key[PEER_KEY_MAX + 1];
    const model *m;
    int transport;           /* enum peer_transport */
    peer_info info;          /* as of the handshake */
    peer_conn *hb;           /* the heartbeat's connection */
    pthread_t th;
    int th_started;
    _Atomic int stop;
    _Atomic int dead;
    _Atomic int joined;      /* 1 once the node answered: info (and name) are set, not written
                                again (peer_node_pending: 0 until its first answer) */
    _Atomic int calls;       /* device calls in flight on this node (any of its devices) */
    pthread_mutex_t mu;      /* devs, live */
    accel_dev *devs[PEER_MAX_DEVS];
    peer_info live;          /* the last heartbeat's answer */
    _Atomic double min_rtt;  /* the fastest heartbeat round trip, seconds (0: none yet; written
                                by the heartbeat thread only, read by describe: not under mu,
                                which a reconnection holds for seconds) */
};

/* KV chunks in flight on one device's connection: peer/remote_kv.c, peer/msg.h's window.
 * The bound an answer is received under: the connection buffers up to twice it, and the
 * answers of a whole window may be waiting there (each REPLY is then checked to be 8 bytes). */
#define KV_ANSWERS_MAX (PEER_KV_WINDOW * (PEER_HEADER_BYTES + 8))
/* The chunk buffers (peer_bulk_alloc: 2 MiB-aligned, mapped on their own) stay allocated
 * between chunks while their capacities sum to at most a window and a quarter. Freed at every
 * chunk, a 4K Llama-3-8B layer chunk (8 MiB and its scales, 10 MiB in huge pages) would be an
 * munmap, an mmap and its pages faulted in again each time: 3.7-4.6 ms a chunk against 2.4-2.8
 * for writing it into a kept buffer (measured on the 2-core development VM). */
#define KV_KEEP_BYTES (PEER_KV_WINDOW_BYTES + PEER_KV_WINDOW_BYTES / 4)

typedef struct kv_faults {
    long flip[4], cut[4];
    int n_flip, n_cut;
    char stall[256]; /* kv_stall's file ("": none) */
} kv_faults;

typedef struct rseq rseq;
typedef struct kv_flight {
    uint8_t *buf;            /* the chunk serialized: UCX reads it until its send completes,
                                then it goes back to the spares (NULL: none held) */
    size_t cap, len;
    void *req;               /* its tagged send, while in flight (NULL: done, or a KV frame) */
    rseq *s;                 /* whose chunk: a refusal marks it */
    double t_sent;           /* when its send started (peer_now) */
} kv_flight;

typedef struct rdev {
    accel_dev base;
    peer_node *node;
    int index;               /* the device's index on its node */
    peer_conn *c;            /* NULL after peer_rdev_lost, until the heartbeat connects again */
    peer_dev_info di;
    pthread_mutex_t mu;      /* c, tag_*, gen, reviving: every call holds it; so does a revival */
    _Atomic int lost;        /* a call's transport failed with the node up (peer_rdev_lost): the
                                heartbeat thread connects the device again and revives it */
    double lost_retry;       /* when the heartbeat tries it again after a failed attempt, and */
    double lost_backoff;     /* the wait after the next failure (the heartbeat thread's only) */
    unsigned gen;            /* connections made so far: a sequence of an older one is stale */
    int reviving;            /* the heartbeat thread is reconnecting it (calls pass n->dead) */
    char transport[32];      /* peer_conn_transport(c), for describe (any thread) */
    pthread_mutex_t desc_mu;
    uint64_t tag_base;       /* KV as tagged messages (the connection has an address endpoint) */
    uint8_t kv_token[PEER_MAC]; /* c's KV token (peer/auth.h), the first bytes of each of them */
    uint32_t tag_serial;
    char name[ACCEL_NAME_MAX + 1]; /* "NODE/device" */
    long kv_sent;            /* chunks sent (TANDEM_PEER_FAULT counts them) */
    kv_faults faults;
    kv_flight fl[PEER_KV_WINDOW]; /* a ring of chunks in flight, oldest at fl_head */
    int fl_head, fl_n;
    size_t fl_bytes;
    size_t fl_kept;          /* the ring's and the spares' buffers' capacities, summed
                                (KV_KEEP_BYTES bounds what stays allocated between chunks) */
    uint8_t *spare[PEER_KV_WINDOW]; /* buffers whose sends completed, a stack: the next chunk
                                takes the one freed last (the warmest in the caches) */
    size_t spare_cap[PEER_KV_WINDOW];
    int n_spare;
    int n_bufs, bufs_max;    /* chunk buffers allocated now, at most ever (peer_remote_kv_bufs_max) */
    uint8_t *parked[PEER_KV_WINDOW]; /* buffers of sends given up on (a failed or timed-out wait:
                                UCX 1.13 cannot cancel a send, and may read them until the
                                connection is freed): never reused nor freed before that */
    int n_parked;
    int sends_max;           /* the most tagged sends ever in flight at once
                                (peer_remote_kv_sends_max) */
    double t_retired;        /* when the last chunk was answered (peer_now) */
    double link_bps;         /* the link as the KV sees it (desc_mu; 0: not measured yet) */
    /* room (peer/remote_live.c) */
    _Atomic uint64_t own_bytes; /* what this connection's sequences hold on the node, as the node
                                counts it in its mem_free (sum of rseq.node_bytes; written by
                                calls under mu, read by the heartbeat) */
    _Atomic uint64_t outside;   /* of base.mem_reserved, what other daemons hold on the node's
                                   device (written under the node's lock; describe reads it) */
} rdev;

struct rseq {
    accel_seq base;
    uint32_t id;
    unsigned gen;            /* the device's connection it was made on */
    int kv_err;              /* a chunk of it the node refused: its status, returned by the
                                sequence's next import */
    int cap;                 /* its capacity, positions */
    int held;                /* positions it holds on the node (sent to it), as far as we know */
    uint64_t node_bytes;     /* its share of the device's own_bytes */
};

/* Is d's connection gone (lost, or failed under a call)? d's lock held. */
static inline int peer_rdev_conn_dead(const rdev *d)
{
    return !d->c || peer_conn_dead(d->c);
}
/* A call on d failed in its transport (the connection failed, timed out, or the node's answer
 * was not the one asked for or malformed) while the node may well be up: the connection is out
 * of step (a late answer would be read as the next call's) or gone. It is closed and freed now
 * (the node frees the sequences made on it), the chunks in flight let go, d failed and marked
 * lost: the heartbeat thread connects it again while the node answers and revives it (a new
 * generation). Not for a status the node's device returned. d's lock held; returns
 * accel_dev_fail's status. */
int peer_rdev_lost(rdev *d);
/* TANDEM_PEER_FAULT as it was when the device opened (peer.h). */
void peer_rdev_faults_read(kv_faults *f);
/* A call's time limit (PEER_CALL_TIMEOUT_S, or TANDEM_PEER_CALL_TIMEOUT_S). */
double peer_rdev_call_timeout(void);
/* The next frame on d's connection, in slices of 50 ms, giving up when the node is marked dead
 * (unless d is being revived) or after the call timeout. */
int peer_rdev_recv_answer(rdev *d, uint32_t max, peer_header *h, const uint8_t **p);
/* Every KV chunk in flight answered; after a failure the rest are let go (their sequences
 * marked). PEER_OK or the first failure. d's lock held. */
int peer_rdev_kv_drain(rdev *d);
/* The chunk buffers' spares (peer/remote_kv.c; d's lock held). _back: f's buffer (its send done,
 * or never started) on top of the spares, or freed past the bound on what stays allocated
 * between chunks (fl_kept > KV_KEEP_BYTES, or a window of spares already); f then holds none.
 * _take: for a chunk of `need` bytes, every spare smaller than it freed (left by a change of
 * chunk size, they would stay counted in fl_kept below the ones that fit and could push it past
 * the bound, so that warm buffers were freed at every completion), then f given the one on top,
 * the one whose send completed last (the warmest in the caches), if f holds none; none left: f's
 * buffer stays NULL (the caller allocates). */
void peer_rdev_kv_buf_back(rdev *d, kv_flight *f);
void peer_rdev_kv_buf_take(rdev *d, kv_flight *f, size_t need);
/* _park: f's buffer, whose send was given up on, kept out of the spares (and out of fl_kept and
 * n_bufs) until _unpark, which the owner calls once the connection the send was on is freed
 * (its worker destroyed: UCX touches none of them any more); past PEER_KV_WINDOW parked (not
 * expected: a connection fails once) the buffer is let go unfreed, never freed early. */
void peer_rdev_kv_park(rdev *d, kv_flight *f);
void peer_rdev_kv_unpark(rdev *d);
/* One layer chunk into s on the node, pipelined (peer/remote_kv.c). d's lock held. */
int peer_rdev_kv_import(rdev *d, rseq *s, const proto_kv_layer *c, uint32_t crc);

/* peer/remote_live.c (its top comment has the arithmetic and an example). */
/* Of a budget of `budget` bytes (the remote device's mem_total), what other daemons hold, given
 * the node's device's total and free bytes and what our own sequences hold there (own). Pure. */
uint64_t peer_live_outside(uint64_t budget, uint64_t node_total, uint64_t node_free, uint64_t own);
/* What a sequence of `capacity` positions holding `held` of them takes on d's node: whole
 * blocks of what it holds on a paged device (di.kv_block_tokens), its capacity elsewhere. Pure. */
uint64_t peer_rdev_node_bytes(const rdev *d, int capacity, int held);
/* s now holds `held` positions on the node: own_bytes follows (nothing for a stale s). d's lock
 * held. */
void peer_rdev_own_note(rdev *d, rseq *s, int held);
/* s is freed (or about to be, on the node): its share of own_bytes goes. d's lock held. */
void peer_rdev_own_gone(rdev *d, rseq *s);
/* A heartbeat's answer for d: its room (outside) and its health (FAILED, DEGRADED mirrored).
 * own_before: own_bytes as read before the ping (0: none). The node's lock held. */
void peer_rdev_live_apply(rdev *d, const peer_dev_info *in, uint64_t own_before);
/* own_bytes of each device of n (0 where none), for peer_node_live_apply. Takes n's lock. */
void peer_node_own_sample(peer_node *n, uint64_t *own);
/* peer_rdev_live_apply for every device of n opened. The node's lock held. */
void peer_node_live_apply(peer_node *n, const peer_info *in, const uint64_t *own_before);

#endif
