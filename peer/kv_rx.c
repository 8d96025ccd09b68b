/* peer/kv_rx.c — see kv_rx.h.
 *
 * PEER_KV_RX_SLOTS buffers, each FREE, TAKEN (the node's thread receives into it), RESERVED (its
 * place in the FIFO taken, its bytes not handed over yet) or QUEUED (pushed: in the FIFO the
 * kv_rx thread applies in order, the oldest only once it is QUEUED); a slot is free again once
 * applied or put back. Results wait in a ring (RES_CAP) until the node's thread takes them: it takes them
 * before it takes the next slot, so at most a few are ever there.
 *
 * A take finds the free slot freed last (LIFO, by a stamp given at every free): the buffer whose
 * bytes were just received into, checked and imported is the one still in the caches, and at the
 * live depth (two receives and one check) fewer distinct buffers are touched than by the lowest
 * free index (wiretcp7's ladder on the quiet node: receiving every chunk into one buffer x1.03
 * over the slots as they were, x1.08 with one send buffer). Which slot a chunk lands in
 * changes nothing else: the apply order is the FIFO's, the owner the push's.
 *
 * Polling (peer_link_set_poll_us): both hand-offs spin before they sleep — the kv_rx thread, for
 * the window after its last chunk, on `queued` before its condition variable; the node's thread,
 * for the window, on a free slot before its own — so that a chunk that follows within the
 * window costs no futex wake-up on either side (a condition variable's signal that finds no one
 * waiting makes no system call). */
#include "peer/kv_rx.h"
#include "peer/link.h"
#include "proto/crc32c.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define RES_CAP 64

int peer_kv_rx_lowest_first = 0;

enum { SLOT_FREE, SLOT_TAKEN, SLOT_RESERVED, SLOT_QUEUED };
/* a reserved slot's offered CRC part (peer_kv_rx_reserve_split): none, offered, the kv_rx
 * thread's (claimed by it: computed, joined at the apply), or taken back by the receiver */
enum { SPLIT_NONE, SPLIT_OFFERED, SPLIT_RX, SPLIT_BACK };

typedef struct kv_slot {
    uint8_t *buf;
    size_t cap;
    int state; /* under mu; a TAKEN or RESERVED slot's buffer is the node's thread's alone */
    void *owner;
    peer_kv k;
    _Atomic int split;   /* SPLIT_*: claimed by one compare-and-swap, the kv_rx thread's or the receiver's */
    const uint8_t *part; /* the offered part: set before the offer, read by whoever claims it */
    size_t part_n;
    uint32_t part_crc; /* the kv_rx thread's alone */
    unsigned long freed; /* under mu: rx->clock when it was last freed (0: never, or its buffer
                            abandoned); a take prefers the highest */
} kv_slot;

struct peer_kv_rx {
    peer_kv_rx_apply_fn apply;
    void *ctx;
    void (*wake)(void *);
    void *wake_ctx;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* a chunk was pushed, or stop */
    pthread_cond_t cv_free; /* a chunk was applied */
    kv_slot slot[PEER_KV_RX_SLOTS];
    int fifo[PEER_KV_RX_SLOTS]; /* reserved or pushed slots, in apply order */
    int f_head;
    _Atomic int queued; /* reserved or pushed, not yet applied (changed under mu; read without it to spin) */
    int taken;          /* slots the node's thread holds (node's thread) */
    int want;           /* a take found none free, or peer_kv_rx_want: wake the node's thread
                           when a chunk is applied */
    unsigned long clock; /* frees so far (under mu): the slots' stamps */
    int busy_max;        /* under mu: peer_kv_rx_busy_max */
    struct {
        void *owner;
        int status;
    } res[RES_CAP];
    int r_head, r_n;
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

static void *rx_main(void *arg)
{
    peer_kv_rx *rx = arg;
    pthread_mutex_lock(&rx->mu);
    for (;;) {
        if (!rx->queued && !rx->stop && peer_link_poll_us()) { /* the next chunk may be close */
            pthread_mutex_unlock(&rx->mu);
            spin_while(&rx->queued, 0, &rx->stop);
            pthread_mutex_lock(&rx->mu);
        }
        /* the oldest one, once its bytes were handed over (a reserved one waits for its push,
         * computing the part of its CRC offered meanwhile) */
        while (!(rx->queued && rx->slot[rx->fifo[rx->f_head]].state == SLOT_QUEUED) && !(rx->stop && !rx->queued)) {
            kv_slot *h = rx->queued ? &rx->slot[rx->fifo[rx->f_head]] : NULL;
            int offered = SPLIT_OFFERED;
            if (h && h->state == SLOT_RESERVED &&
                atomic_compare_exchange_strong_explicit(&h->split, &offered, SPLIT_RX, memory_order_acq_rel,
                                                        memory_order_acquire)) {
                pthread_mutex_unlock(&rx->mu);
                h->part_crc = proto_crc32c(0, h->part, h->part_n);
                pthread_mutex_lock(&rx->mu);
                continue; /* its push may have come meanwhile */
            }
            pthread_cond_wait(&rx->cv_work, &rx->mu);
        }
        if (!rx->queued) break; /* stopping, nothing left */
        int i = rx->fifo[rx->f_head];
        kv_slot *s = &rx->slot[i];
        pthread_mutex_unlock(&rx->mu);
        /* its part's CRC joined to the receiver's (one pushed without a CRC, crc_off 0, gets
         * none all the same: the reader computes it) */
        if (atomic_load_explicit(&s->split, memory_order_acquire) == SPLIT_RX)
            s->k.crc = proto_crc32c_combine(s->k.crc, s->part_crc, s->part_n);
        int st = rx->apply(rx->ctx, s->owner, &s->k);
        pthread_mutex_lock(&rx->mu);
        int at = (rx->r_head + rx->r_n) % RES_CAP;
        rx->res[at].owner = s->owner;
        rx->res[at].status = st;
        rx->r_n++;
        s->state = SLOT_FREE;
        s->freed = ++rx->clock;
        atomic_store_explicit(&s->split, SPLIT_NONE, memory_order_relaxed);
        rx->f_head = (rx->f_head + 1) % PEER_KV_RX_SLOTS;
        rx->queued--;
        pthread_cond_broadcast(&rx->cv_free);
        /* the node's thread is woken when the pipeline ran dry (it may be asleep on the network
         * with answers to send) or a take found no slot (a chunk that came waits for this one);
         * else while chunks are queued it comes back here on its own */
        if (rx->wake && (!rx->queued || rx->want)) {
            rx->want = 0;
            pthread_mutex_unlock(&rx->mu);
            rx->wake(rx->wake_ctx);
            pthread_mutex_lock(&rx->mu);
        }
    }
    pthread_mutex_unlock(&rx->mu);
    return NULL;
}

int peer_kv_rx_new(peer_kv_rx_apply_fn apply, void *ctx, void (*wake)(void *), void *wake_ctx,
                   peer_kv_rx **out)
{
    *out = NULL;
    peer_kv_rx *rx = calloc(1, sizeof *rx);
    if (!rx) return PEER_ERR_NOMEM;
    rx->apply = apply;
    rx->ctx = ctx;
    rx->wake = wake;
    rx->wake_ctx = wake_ctx;
    pthread_mutex_init(&rx->mu, NULL);
    pthread_cond_init(&rx->cv_work, NULL);
    pthread_cond_init(&rx->cv_free, NULL);
    if (pthread_create(&rx->th, NULL, rx_main, rx)) {
        pthread_mutex_destroy(&rx->mu);
        pthread_cond_destroy(&rx->cv_work);
        pthread_cond_destroy(&rx->cv_free);
        free(rx);
        return PEER_ERR_NOMEM;
    }
    *out = rx;
    return PEER_OK;
}

void peer_kv_rx_free(peer_kv_rx *rx)
{
    if (!rx) return;
    pthread_mutex_lock(&rx->mu);
    rx->stop = 1;
    pthread_cond_signal(&rx->cv_work);
    pthread_mutex_unlock(&rx->mu);
    pthread_join(rx->th, NULL);
    for (int i = 0; i < PEER_KV_RX_SLOTS; i++) free(rx->slot[i].buf);
    pthread_mutex_destroy(&rx->mu);
    pthread_cond_destroy(&rx->cv_work);
    pthread_cond_destroy(&rx->cv_free);
    free(rx);
}

int peer_kv_rx_take(peer_kv_rx *rx, size_t n, int wait, uint8_t **buf)
{
    *buf = NULL;
    pthread_mutex_lock(&rx->mu);
    int i;
    for (;;) {
        /* the free slot freed last (its buffer the warmest); ties (never freed) the lowest */
        i = PEER_KV_RX_SLOTS;
        for (int j = 0; j < PEER_KV_RX_SLOTS; j++)
            if (rx->slot[j].state == SLOT_FREE &&
                (i == PEER_KV_RX_SLOTS || (!peer_kv_rx_lowest_first && rx->slot[j].freed > rx->slot[i].freed)))
                i = j;
        /* none free: only an applied chunk frees one (a slot this thread holds would never) */
        if (i < PEER_KV_RX_SLOTS || !wait || !rx->queued) break;
        if (peer_link_poll_us()) {
            int q = rx->queued;
            pthread_mutex_unlock(&rx->mu);
            spin_while(&rx->queued, q, NULL);
            pthread_mutex_lock(&rx->mu);
            if (rx->queued != q) continue;
        }
        pthread_cond_wait(&rx->cv_free, &rx->mu);
    }
    int full = rx->r_n + rx->queued + rx->taken >= RES_CAP; /* results not taken: the caller's bug */
    if (i < PEER_KV_RX_SLOTS && !full) {
        rx->slot[i].state = SLOT_TAKEN;
        rx->taken++;
        if (rx->taken + rx->queued > rx->busy_max) rx->busy_max = rx->taken + rx->queued;
    }
    if (i == PEER_KV_RX_SLOTS) rx->want = 1;
    pthread_mutex_unlock(&rx->mu);
    if (i == PEER_KV_RX_SLOTS) return PEER_KV_RX_BUSY;
    if (full) return PEER_ERR_NOMEM;
    kv_slot *s = &rx->slot[i]; /* not the kv_rx thread's while taken */
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

void peer_kv_rx_reserve(peer_kv_rx *rx, int slot)
{
    pthread_mutex_lock(&rx->mu);
    rx->slot[slot].state = SLOT_RESERVED;
    rx->taken--;
    rx->fifo[(rx->f_head + rx->queued) % PEER_KV_RX_SLOTS] = slot;
    rx->queued++;
    pthread_mutex_unlock(&rx->mu);
}

void peer_kv_rx_reserve_split(peer_kv_rx *rx, int slot, const uint8_t *at, size_t n)
{
    kv_slot *s = &rx->slot[slot];
    s->part = at;
    s->part_n = n;
    pthread_mutex_lock(&rx->mu);
    s->state = SLOT_RESERVED;
    rx->taken--;
    rx->fifo[(rx->f_head + rx->queued) % PEER_KV_RX_SLOTS] = slot;
    rx->queued++;
    atomic_store_explicit(&s->split, SPLIT_OFFERED, memory_order_release);
    /* the kv_rx thread looks at it only when it is the oldest: then it has nothing else to do */
    if (rx->fifo[rx->f_head] == slot) pthread_cond_signal(&rx->cv_work);
    pthread_mutex_unlock(&rx->mu);
}

int peer_kv_rx_split_back(peer_kv_rx *rx, int slot)
{
    int offered = SPLIT_OFFERED;
    return atomic_compare_exchange_strong_explicit(&rx->slot[slot].split, &offered, SPLIT_BACK, memory_order_acq_rel,
                                                   memory_order_acquire);
}

void peer_kv_rx_push(peer_kv_rx *rx, int slot, void *owner, const peer_kv *k)
{
    kv_slot *s = &rx->slot[slot];
    s->owner = owner;
    s->k = *k;
    pthread_mutex_lock(&rx->mu);
    if (s->state != SLOT_RESERVED) { /* its place in the order: now */
        rx->taken--;
        rx->fifo[(rx->f_head + rx->queued) % PEER_KV_RX_SLOTS] = slot;
        rx->queued++;
    }
    s->state = SLOT_QUEUED;
    pthread_cond_signal(&rx->cv_work);
    pthread_mutex_unlock(&rx->mu);
}

int peer_kv_rx_done(peer_kv_rx *rx, void **owner, int *status)
{
    pthread_mutex_lock(&rx->mu);
    int got = rx->r_n > 0;
    if (got) {
        *owner = rx->res[rx->r_head].owner;
        *status = rx->res[rx->r_head].status;
        rx->r_head = (rx->r_head + 1) % RES_CAP;
        rx->r_n--;
    }
    pthread_mutex_unlock(&rx->mu);
    return got;
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
    int n = m->queued + m->r_n;
    pthread_mutex_unlock(&m->mu);
    return n;
}
