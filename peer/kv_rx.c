/* peer/kv_rx.c — see kv_rx.h.
 *
 * A ring of PEER_KV_RX_SLOTS buffers, filled by the node's thread in order and applied by the
 * kv_rx thread in the same order; a slot is free again once applied. Results wait in a second
 * ring (RES_CAP) until the node's thread takes them: it takes them before it asks for the next
 * buffer, so at most a few are ever there.
 *
 * Polling (peer_link_set_poll_us): both hand-offs spin before they sleep — the kv_rx thread, for
 * the window after its last chunk, on `queued` before its condition variable; the node's thread,
 * for the window, on a free slot before its own — so that a chunk that follows within the
 * window costs no futex wake-up on either side (a condition variable's signal that finds no one
 * waiting makes no system call). */
#include "peer/kv_rx.h"
#include "peer/link.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define RES_CAP 64

typedef struct kv_slot {
    uint8_t *buf;
    size_t cap;
    void *owner;
    peer_kv k;
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
    int fill;     /* the slot the next buffer is (node's thread) */
    int next;     /* the oldest pushed, not yet applied slot (kv_rx thread) */
    _Atomic int queued; /* pushed, not yet applied (changed under mu; read without it to spin) */
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
        while (!rx->queued && !rx->stop) pthread_cond_wait(&rx->cv_work, &rx->mu);
        if (!rx->queued) break; /* stopping, nothing left */
        kv_slot *s = &rx->slot[rx->next];
        pthread_mutex_unlock(&rx->mu);
        int st = rx->apply(rx->ctx, s->owner, &s->k);
        pthread_mutex_lock(&rx->mu);
        int at = (rx->r_head + rx->r_n) % RES_CAP;
        rx->res[at].owner = s->owner;
        rx->res[at].status = st;
        rx->r_n++;
        rx->next = (rx->next + 1) % PEER_KV_RX_SLOTS;
        rx->queued--;
        pthread_cond_broadcast(&rx->cv_free);
        /* the node's thread is woken when the pipeline ran dry (it may be asleep on the network
         * with answers to send); while chunks are queued it comes back here on its own */
        if (rx->wake && !rx->queued) {
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

uint8_t *peer_kv_rx_buffer(peer_kv_rx *rx, size_t n)
{
    if (atomic_load(&rx->queued) == PEER_KV_RX_SLOTS) spin_while(&rx->queued, PEER_KV_RX_SLOTS, NULL);
    pthread_mutex_lock(&rx->mu);
    /* the slot to fill is free once fewer than all are pushed (slots are applied in order) */
    while (rx->queued == PEER_KV_RX_SLOTS) pthread_cond_wait(&rx->cv_free, &rx->mu);
    int full = rx->r_n + rx->queued >= RES_CAP; /* results not taken: the caller's bug */
    pthread_mutex_unlock(&rx->mu);
    if (full) return NULL;
    kv_slot *s = &rx->slot[rx->fill]; /* not the kv_rx thread's until pushed */
    if (n > s->cap) {
        free(s->buf); /* its bytes are not needed: grown without a copy */
        s->buf = peer_bulk_alloc(n, &s->cap);
    }
    return s->buf;
}

void peer_kv_rx_push(peer_kv_rx *rx, void *owner, const peer_kv *k)
{
    kv_slot *s = &rx->slot[rx->fill];
    s->owner = owner;
    s->k = *k;
    pthread_mutex_lock(&rx->mu);
    rx->fill = (rx->fill + 1) % PEER_KV_RX_SLOTS;
    rx->queued++;
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

void peer_kv_rx_sync(peer_kv_rx *rx)
{
    pthread_mutex_lock(&rx->mu);
    while (rx->queued) pthread_cond_wait(&rx->cv_free, &rx->mu);
    pthread_mutex_unlock(&rx->mu);
}

int peer_kv_rx_pending(const peer_kv_rx *rx)
{
    peer_kv_rx *m = (peer_kv_rx *)rx;
    pthread_mutex_lock(&m->mu);
    int n = m->queued + m->r_n;
    pthread_mutex_unlock(&m->mu);
    return n;
}
