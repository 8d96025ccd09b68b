/* peer/kv_rx.c — see kv_rx.h.
 *
 * n_lanes * PEER_KV_RX_SLOTS buffers, each FREE, TAKEN (the node's thread receives into it),
 * RESERVED (its place in its lane's FIFO taken, its bytes not handed over yet) or QUEUED (pushed:
 * in the FIFO its lane's thread applies in order, the oldest only once it is QUEUED); a slot is
 * free again once applied or put back. Every chunk reserved or pushed has an entry in the answer
 * order (push order) until the node's thread takes its result; the node's thread takes them before
 * it takes the next slot, so at most a few results ever wait there.
 *
 * Lanes: a lent device's imports wait behind its own calls (its drive lock, peer/server_call.c),
 * so one lane a device keeps a chunk for device X, waiting behind X's long step, from holding the
 * chunks pushed after it for device Y. Results still come back in each owner's (connection's)
 * push order: a result waits for the owner's earlier chunks on other lanes, never for another
 * owner's. One lane (one lent device, and tools/peer_bench) is the path as it was: one thread,
 * PEER_KV_RX_SLOTS slots, results in push order.
 *
 * A take finds the free slot freed last (LIFO, by a stamp given at every free): the buffer whose
 * bytes were just received into, checked and imported is the one still in the caches, and at the
 * live depth (two receives and one check) fewer distinct buffers are touched than by the lowest
 * free index (wiretcp7's ladder on the quiet node: receiving every chunk into one buffer x1.03
 * over the slots as they were, x1.08 with one send buffer). Which slot a chunk lands in
 * changes nothing else: the apply order is its lane's FIFO's, the owner the push's.
 *
 * Polling (peer_link_set_poll_us): both hand-offs spin before they sleep — a lane's thread, for
 * the window after its last chunk, on its `queued` before its condition variable; the node's
 * thread, for the window, on a free slot before its own — so that a chunk that follows within the
 * window costs no futex wake-up on either side (a condition variable's signal that finds no one
 * waiting makes no system call). */
#include "peer/kv_rx.h"
#include "peer/link.h"
#include "proto/crc32c.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* the answer order's first room: the slots' chunks and as many results waiting to be taken. It
 * grows at a take when full: with lanes, results wait for their owner's older chunks on a slower
 * lane (the node bounds each connection's unanswered chunks at its window, peer/server.c) */
#define RES_CAP 64

int peer_kv_rx_lowest_first = 0;

enum { SLOT_FREE, SLOT_TAKEN, SLOT_RESERVED, SLOT_QUEUED };
/* a reserved slot's offered CRC part (peer_kv_rx_reserve_split): none, offered, the lane
 * thread's (claimed by it: computed, joined at the apply), or taken back by the receiver */
enum { SPLIT_NONE, SPLIT_OFFERED, SPLIT_RX, SPLIT_BACK };

typedef struct kv_slot {
    uint8_t *buf;
    size_t cap;
    int state; /* under mu; a TAKEN or RESERVED slot's buffer is the node's thread's alone */
    int lane;  /* under mu: the lane it was reserved or pushed on */
    unsigned long serial; /* under mu: its entry in the answer order */
    void *owner;
    peer_kv k;
    _Atomic int
        split; /* SPLIT_*: claimed by one compare-and-swap, the lane thread's or the receiver's */
    const uint8_t *part; /* the offered part: set before the offer, read by whoever claims it */
    size_t part_n;
    uint32_t part_crc;   /* the lane thread's alone */
    unsigned long freed; /* under mu: rx->clock when it was last freed (0: never, or its buffer
                            abandoned); a take prefers the highest */
} kv_slot;

/* One lane: a thread applying its reserved or pushed slots in order. */
typedef struct kv_lane {
    peer_kv_rx *rx;
    pthread_t th;
    pthread_cond_t cv_work; /* a chunk was pushed on it, or stop */
    int *fifo;              /* (n_slots) its reserved or pushed slots, in apply order */
    int f_head;
    _Atomic int queued; /* reserved or pushed on it, not yet applied (changed under mu; read
                           without it to spin) */
} kv_lane;

/* A chunk reserved or pushed, until its result is taken: the answer order, oldest first. */
typedef struct kv_entry {
    unsigned long serial;
    void *owner;
    int known;   /* its owner known (pushed): a reserved one holds back every result after it */
    int applied; /* its status ready */
    int status;
} kv_entry;

struct peer_kv_rx {
    peer_kv_rx_apply_fn apply;
    void *ctx;
    void (*wake)(void *);
    void *wake_ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv_free; /* a chunk was applied */
    int n_lanes, n_slots, started;
    kv_lane *lane;
    kv_slot *slot;
    kv_entry *ent; /* (cap_ent) oldest first; a take makes room for the chunk it hands out */
    int n_ent, cap_ent;
    unsigned long serial; /* entries made so far */
    _Atomic int
        queued; /* reserved or pushed on any lane, not yet applied (under mu; read to spin) */
    int taken;          /* slots the node's thread holds (node's thread) */
    int want;           /* a take found none free, a lane had no room, or peer_kv_rx_want: wake
                           the node's thread when a chunk is applied */
    unsigned long clock; /* frees so far (under mu): the slots' stamps */
    int busy_max;        /* under mu: peer_kv_rx_busy_max */
    _Atomic int stop;
};

/* Spins (polling on) while *v == val, for the window at most; the caller, without the mutex,
 * takes it and looks again either way. */
static void spin_while(_Atomic int *v, int val, _Atomic int *stop)
{
    double window = peer_link_poll_s();
    if (window <= 0) return;
    double end = peer_now() + window;
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) != val || (stop && atomic_load(stop))) return;
        if ((i & 31) == 31 && peer_now() >= end) return;
        peer_cpu_relax();
    }
}

/* Under mu: a new entry at the end of the answer order (room: the take's bound). */
static unsigned long ent_add(peer_kv_rx *rx, void *owner, int known)
{
    kv_entry *e = &rx->ent[rx->n_ent++];
    *e = (kv_entry){.serial = ++rx->serial, .owner = owner, .known = known};
    return e->serial;
}

/* Under mu: the entry of serial (there while its chunk is reserved or pushed). */
static kv_entry *ent_find(peer_kv_rx *rx, unsigned long serial)
{
    for (int i = 0; i < rx->n_ent; i++)
        if (rx->ent[i].serial == serial) return &rx->ent[i];
    return NULL;
}

static void *lane_main(void *arg)
{
    kv_lane *ln = arg;
    peer_kv_rx *rx = ln->rx;
    pthread_mutex_lock(&rx->mu);
    for (;;) {
        if (!ln->queued && !rx->stop && peer_link_poll_us()) { /* the next chunk may be close */
            pthread_mutex_unlock(&rx->mu);
            spin_while(&ln->queued, 0, &rx->stop);
            pthread_mutex_lock(&rx->mu);
        }
        /* the oldest one, once its bytes were handed over (a reserved one waits for its push,
         * computing the part of its CRC offered meanwhile) */
        while (!(ln->queued && rx->slot[ln->fifo[ln->f_head]].state == SLOT_QUEUED) &&
               !(rx->stop && !ln->queued)) {
            kv_slot *h = ln->queued ? &rx->slot[ln->fifo[ln->f_head]] : NULL;
            int offered = SPLIT_OFFERED;
            if (h && h->state == SLOT_RESERVED &&
                atomic_compare_exchange_strong_explicit(&h->split, &offered, SPLIT_RX, memory_order_acq_rel,
                                                        memory_order_acquire)) {
                pthread_mutex_unlock(&rx->mu);
                h->part_crc = proto_crc32c(0, h->part, h->part_n);
                pthread_mutex_lock(&rx->mu);
                continue; /* its push may have come meanwhile */
            }
            pthread_cond_wait(&ln->cv_work, &rx->mu);
        }
        if (!ln->queued) break; /* stopping, nothing left */
        int i = ln->fifo[ln->f_head];
        kv_slot *s = &rx->slot[i];
        pthread_mutex_unlock(&rx->mu);
        /* its part's CRC joined to the receiver's (one pushed without a CRC, crc_off 0, gets
         * none all the same: the reader computes it) */
        if (atomic_load_explicit(&s->split, memory_order_acquire) == SPLIT_RX)
            s->k.crc = proto_crc32c_combine(s->k.crc, s->part_crc, s->part_n);
        int st = rx->apply(rx->ctx, s->owner, &s->k);
        pthread_mutex_lock(&rx->mu);
        kv_entry *e = ent_find(rx, s->serial);
        e->applied = 1;
        e->status = st;
        s->state = SLOT_FREE;
        s->freed = ++rx->clock;
        atomic_store_explicit(&s->split, SPLIT_NONE, memory_order_relaxed);
        ln->f_head = (ln->f_head + 1) % rx->n_slots;
        ln->queued--;
        rx->queued--;
        pthread_cond_broadcast(&rx->cv_free);
        /* the node's thread is woken when the lane ran dry (it may be asleep on the network
         * with answers to send) or it waits for room (a chunk that came waits for this one);
         * else while chunks are queued it comes back here on its own */
        if (rx->wake && (!ln->queued || rx->want)) {
            rx->want = 0;
            pthread_mutex_unlock(&rx->mu);
            rx->wake(rx->wake_ctx);
            pthread_mutex_lock(&rx->mu);
        }
    }
    pthread_mutex_unlock(&rx->mu);
    return NULL;
}

/* Joins the lanes started and frees everything (their chunks applied first). */
static void rx_free(peer_kv_rx *rx)
{
    pthread_mutex_lock(&rx->mu);
    rx->stop = 1;
    for (int l = 0; l < rx->started; l++) pthread_cond_signal(&rx->lane[l].cv_work);
    pthread_mutex_unlock(&rx->mu);
    for (int l = 0; l < rx->started; l++) pthread_join(rx->lane[l].th, NULL);
    for (int l = 0; l < rx->n_lanes && rx->lane; l++) {
        pthread_cond_destroy(&rx->lane[l].cv_work);
        free(rx->lane[l].fifo);
    }
    for (int i = 0; i < rx->n_slots && rx->slot; i++) free(rx->slot[i].buf);
    free(rx->lane);
    free(rx->slot);
    free(rx->ent);
    pthread_mutex_destroy(&rx->mu);
    pthread_cond_destroy(&rx->cv_free);
    free(rx);
}

int peer_kv_rx_new(int n_lanes, peer_kv_rx_apply_fn apply, void *ctx, void (*wake)(void *),
                   void *wake_ctx, peer_kv_rx **out)
{
    *out = NULL;
    if (n_lanes < 1) n_lanes = 1;
    if (n_lanes > PEER_KV_RX_LANES_MAX) n_lanes = PEER_KV_RX_LANES_MAX;
    peer_kv_rx *rx = calloc(1, sizeof *rx);
    if (!rx) return PEER_ERR_NOMEM;
    rx->apply = apply;
    rx->ctx = ctx;
    rx->wake = wake;
    rx->wake_ctx = wake_ctx;
    pthread_mutex_init(&rx->mu, NULL);
    pthread_cond_init(&rx->cv_free, NULL);
    rx->n_lanes = n_lanes;
    rx->n_slots = PEER_KV_RX_SLOTS * n_lanes;
    rx->cap_ent = rx->n_slots + RES_CAP;
    rx->lane = calloc((size_t)n_lanes, sizeof *rx->lane);
    rx->slot = calloc((size_t)rx->n_slots, sizeof *rx->slot);
    rx->ent = calloc((size_t)rx->cap_ent, sizeof *rx->ent);
    int ok = rx->lane && rx->slot && rx->ent;
    if (!rx->lane) rx->n_lanes = 0; /* nothing of theirs to free */
    for (int l = 0; l < rx->n_lanes; l++) {
        rx->lane[l].rx = rx;
        pthread_cond_init(&rx->lane[l].cv_work, NULL);
    }
    for (int l = 0; ok && l < n_lanes; l++)
        ok = (rx->lane[l].fifo = calloc((size_t)rx->n_slots, sizeof *rx->lane[l].fifo)) != NULL;
    while (ok && rx->started < n_lanes) {
        ok = !pthread_create(&rx->lane[rx->started].th, NULL, lane_main, &rx->lane[rx->started]);
        rx->started += ok;
    }
    if (!ok) {
        rx_free(rx);
        return PEER_ERR_NOMEM;
    }
    *out = rx;
    return PEER_OK;
}

void peer_kv_rx_free(peer_kv_rx *rx)
{
    if (rx) rx_free(rx);
}

int peer_kv_rx_take(peer_kv_rx *rx, size_t n, int wait, uint8_t **buf)
{
    *buf = NULL;
    pthread_mutex_lock(&rx->mu);
    int i;
    for (;;) {
        /* the free slot freed last (its buffer the warmest); ties (never freed) the lowest */
        i = rx->n_slots;
        for (int j = 0; j < rx->n_slots; j++)
            if (rx->slot[j].state == SLOT_FREE &&
                (i == rx->n_slots ||
                 (!peer_kv_rx_lowest_first && rx->slot[j].freed > rx->slot[i].freed)))
                i = j;
        /* none free: only an applied chunk frees one (a slot this thread holds would never) */
        if (i < rx->n_slots || !wait || !rx->queued) break;
        if (peer_link_poll_us()) {
            int q = rx->queued;
            pthread_mutex_unlock(&rx->mu);
            spin_while(&rx->queued, q, NULL);
            pthread_mutex_lock(&rx->mu);
            if (rx->queued != q) continue;
        }
        pthread_cond_wait(&rx->cv_free, &rx->mu);
    }
    int full = 0;
    if (i < rx->n_slots && rx->n_ent + rx->taken >= rx->cap_ent) { /* room for its entry */
        kv_entry *e = realloc(rx->ent, sizeof *e * (size_t)rx->cap_ent * 2);
        if (e) {
            rx->ent = e;
            rx->cap_ent *= 2;
        }
        full = !e;
    }
    if (i < rx->n_slots && !full) {
        rx->slot[i].state = SLOT_TAKEN;
        rx->taken++;
        if (rx->taken + rx->queued > rx->busy_max) rx->busy_max = rx->taken + rx->queued;
    }
    if (i == rx->n_slots) rx->want = 1;
    pthread_mutex_unlock(&rx->mu);
    if (i == rx->n_slots) return PEER_KV_RX_BUSY;
    if (full) return PEER_ERR_NOMEM;
    kv_slot *s = &rx->slot[i]; /* not a lane thread's while taken */
    if (n > s->cap) {
        free(s->buf); /* its bytes are not needed: grown without a copy */
        s->cap = 0;
        s->buf = peer_bulk_alloc(n, &s->cap);
        if (!s->buf) {
            peer_kv_rx_put_back(rx, i);
            return PEER_ERR_NOMEM;
        }
    }
    *buf = s->buf;
    return i;
}

void peer_kv_rx_put_back(peer_kv_rx *rx, int slot)
{
    pthread_mutex_lock(&rx->mu);
    if (rx->slot[slot].state == SLOT_TAKEN) {
        rx->taken--;
        rx->slot[slot].state = SLOT_FREE;
        rx->slot[slot].freed = ++rx->clock;
    }
    pthread_mutex_unlock(&rx->mu);
}

uint8_t *peer_kv_rx_put_back_lost(peer_kv_rx *rx, int slot, size_t *cap)
{
    uint8_t *lost = NULL;
    *cap = 0;
    pthread_mutex_lock(&rx->mu);
    if (rx->slot[slot].state == SLOT_TAKEN) {
        lost = rx->slot[slot].buf;
        *cap = rx->slot[slot].cap;
        rx->slot[slot].buf = NULL; /* the caller's: UCX may still write into it */
        rx->slot[slot].cap = 0;
        rx->slot[slot].freed = 0; /* a fresh buffer at its next take: the coldest */
        rx->taken--;
        rx->slot[slot].state = SLOT_FREE;
    }
    pthread_mutex_unlock(&rx->mu);
    return lost;
}

/* Under mu: a taken slot placed at the end of lane's FIFO, and of the answer order. */
static void enqueue(peer_kv_rx *rx, int slot, int lane, void *owner, int known)
{
    kv_slot *s = &rx->slot[slot];
    kv_lane *ln = &rx->lane[lane];
    rx->taken--;
    s->lane = lane;
    s->serial = ent_add(rx, owner, known);
    ln->fifo[(ln->f_head + ln->queued) % rx->n_slots] = slot;
    ln->queued++;
    rx->queued++;
}

static int lane_ok(const peer_kv_rx *rx, int lane)
{
    return lane >= 0 && lane < rx->n_lanes ? lane : 0;
}

void peer_kv_rx_reserve(peer_kv_rx *rx, int slot, int lane)
{
    lane = lane_ok(rx, lane);
    pthread_mutex_lock(&rx->mu);
    rx->slot[slot].state = SLOT_RESERVED;
    enqueue(rx, slot, lane, NULL, 0);
    pthread_mutex_unlock(&rx->mu);
}

void peer_kv_rx_reserve_split(peer_kv_rx *rx, int slot, int lane, const uint8_t *at, size_t n)
{
    kv_slot *s = &rx->slot[slot];
    lane = lane_ok(rx, lane);
    s->part = at;
    s->part_n = n;
    pthread_mutex_lock(&rx->mu);
    s->state = SLOT_RESERVED;
    enqueue(rx, slot, lane, NULL, 0);
    atomic_store_explicit(&s->split, SPLIT_OFFERED, memory_order_release);
    /* the lane's thread looks at it only when it is the oldest: then it has nothing else to do */
    kv_lane *ln = &rx->lane[lane];
    if (ln->fifo[ln->f_head] == slot) pthread_cond_signal(&ln->cv_work);
    pthread_mutex_unlock(&rx->mu);
}

int peer_kv_rx_split_back(peer_kv_rx *rx, int slot)
{
    int offered = SPLIT_OFFERED;
    return atomic_compare_exchange_strong_explicit(&rx->slot[slot].split, &offered, SPLIT_BACK, memory_order_acq_rel,
                                                   memory_order_acquire);
}

void peer_kv_rx_push(peer_kv_rx *rx, int slot, int lane, void *owner, const peer_kv *k)
{
    kv_slot *s = &rx->slot[slot];
    s->owner = owner;
    s->k = *k;
    pthread_mutex_lock(&rx->mu);
    if (s->state != SLOT_RESERVED) { /* its place in the order: now */
        enqueue(rx, slot, lane_ok(rx, lane), owner, 1);
    } else { /* its place was kept: its owner now known */
        kv_entry *e = ent_find(rx, s->serial);
        e->owner = owner;
        e->known = 1;
    }
    s->state = SLOT_QUEUED;
    pthread_cond_signal(&rx->lane[s->lane].cv_work);
    pthread_mutex_unlock(&rx->mu);
}

int peer_kv_rx_done(peer_kv_rx *rx, void **owner, int *status)
{
    pthread_mutex_lock(&rx->mu);
    int got = 0;
    /* the oldest result whose owner has nothing older still to come (a reserved chunk, owner not
     * known yet, holds back every result after it) */
    for (int i = 0; i < rx->n_ent && !got; i++) {
        kv_entry *e = &rx->ent[i];
        if (!e->known) break;
        if (!e->applied) continue;
        int before = 0;
        for (int j = 0; j < i && !before; j++) before = rx->ent[j].owner == e->owner;
        if (before) continue;
        *owner = e->owner;
        *status = e->status;
        memmove(e, e + 1, sizeof *e * (size_t)(rx->n_ent - i - 1));
        rx->n_ent--;
        got = 1;
    }
    pthread_mutex_unlock(&rx->mu);
    return got;
}

int peer_kv_rx_lane_room(peer_kv_rx *rx, int lane, int coming)
{
    if (rx->n_lanes == 1) return 1; /* the take's bound is the lane's */
    lane = lane_ok(rx, lane);
    pthread_mutex_lock(&rx->mu);
    int room = rx->lane[lane].queued + coming < PEER_KV_RX_SLOTS;
    if (!room) rx->want = 1;
    pthread_mutex_unlock(&rx->mu);
    return room;
}

void peer_kv_rx_want(peer_kv_rx *rx)
{
    pthread_mutex_lock(&rx->mu);
    rx->want = 1;
    pthread_mutex_unlock(&rx->mu);
}

void peer_kv_rx_sync(peer_kv_rx *rx)
{
    pthread_mutex_lock(&rx->mu);
    while (rx->queued) pthread_cond_wait(&rx->cv_free, &rx->mu);
    pthread_mutex_unlock(&rx->mu);
}

int peer_kv_rx_busy_max(const peer_kv_rx *rx)
{
    peer_kv_rx *m = (peer_kv_rx *)rx;
    pthread_mutex_lock(&m->mu);
    int n = m->busy_max;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int peer_kv_rx_pending(const peer_kv_rx *rx)
{
    peer_kv_rx *m = (peer_kv_rx *)rx;
    pthread_mutex_lock(&m->mu);
    int n = m->n_ent;
    pthread_mutex_unlock(&m->mu);
    return n;
}
