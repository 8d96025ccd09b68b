/* peer/server_call.c — the lent devices' call threads: the calls peers ask of the node's devices
 * (sequences, truncation, warm-up, decode steps) run here, not on the node's loop.
 *
 * The loop ran every call inline, so one peer's 4.5 s step (a big model on a slow device, under
 * the peer's 8 s call timeout) left every other peer unanswered for 4.5 s: an idle peer's
 * heartbeat gave up on the node after PEER_DEAD_S (3 s) and failed its devices there (an audit's
 * reproducer). Now, as the KV chunks' imports (peer/kv_rx.h):
 *
 *   node's loop                                   device d's thread
 *   frame read, checked, its sequences looked up
 *   peer_server_on_call: queued on d's thread --->  run (holding d's drive lock)
 *   ... serves every other connection               done list; the loop woken (its worker
 * signalled) peer_server_calls_collect: answer sent    <---
 *
 * Only the loop sends, reads a connection and changes a connection's table of sequences; a call
 * gets the sequences it needs looked up (a SEQ_NEW's is put into the table as it is answered, a
 * SEQ_FREE's taken out as it is queued). A connection's next frames and tagged chunks wait while
 * its call is queued or running (server.c: answers stay in order, and its sequences are not
 * touched meanwhile), so it has at most one; a device has at most CALLS_PER_DEV, a call beyond it
 * is held on its frame. A device is driven by one thread at a time (accel.h): its call thread or
 * its kv_rx lane's importing a chunk into it, whichever holds the device's drive turn (the loop
 * never drives a device while the threads run). The turns are first come, first served: a chunk
 * that comes while a step runs is imported right after it, before the calls queued behind it. A
 * connection closed with its call queued or running is kept (server.closing) until the call is
 * done; the answer is then let go and its sequences are freed on their devices' threads, behind the
 * calls queued before. */
#include "peer/server_impl.h"
#include <stdlib.h>
#include <string.h>

void peer_server_sseq_release(peer_server *s, sseq *q)
{
    if (q->s) {
        accel_seq_free(s->devs[q->dev], q->s);
        atomic_fetch_sub(&s->live_seqs, 1);
    }
    proto_kv_reader_free(q->r);
    free(q->kc);
    memset(q, 0, sizeof *q);
}

/* A ticket lock: an import asked for while a call runs comes right after that call, whatever
 * calls are queued behind it (they ask for their turn only as they start). */
void peer_server_dev_hold(peer_server *s, int dev)
{
    sdev *t = &s->dt[dev];
    pthread_mutex_lock(&t->drive);
    unsigned long me = t->drive_next++;
    while (t->drive_now != me) pthread_cond_wait(&t->drive_cv, &t->drive);
    pthread_mutex_unlock(&t->drive);
}

void peer_server_dev_let(peer_server *s, int dev)
{
    sdev *t = &s->dt[dev];
    pthread_mutex_lock(&t->drive);
    t->drive_now++;
    pthread_cond_broadcast(&t->drive_cv); /* two waiters at most: the call thread and the lane */
    pthread_mutex_unlock(&t->drive);
}

/* ---------------------------------------------------------------- the device's thread */

static void call_run(peer_server *s, scall *c)
{
    accel_dev *d = s->devs[c->dev];
    switch (c->kind) {
    case CALL_SEQ_NEW:
        c->st = accel_seq_new(d, c->arg, &c->seq);
        if (c->st)
            c->seq = NULL;
        else /* counted until released: a closed connection's too (calls_collect keeps it) */
            atomic_fetch_add(&s->live_seqs, 1);
        break;
    case CALL_SEQ_FREE:
        peer_server_sseq_release(s, &c->rel);
        c->st = 0;
        break;
    case CALL_TRUNCATE:
        c->st = c->arg > accel_seq_len(d, c->seq) ? ACCEL_ERR_INVALID
                                                  : accel_seq_truncate(d, c->seq, c->arg);
        break;
    case CALL_RELEASE:
        for (int i = 0; i < c->n; i++) peer_server_sseq_release(s, &c->rels[i]);
        break;
    case CALL_WARMUP: {
        const int was_failed = peer_server_dev_failed(s, c->dev);
        c->st = accel_warmup(d);
        peer_server_device_fault(s, c->sc, c->dev, "warmup", c->st, was_failed);
        break;
    }
    default:
        peer_server_decode_run(s, c);
        break;
    }
}

static void *dev_main(void *arg)
{
    sdev *t = arg;
    peer_server *s = t->s;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->q_head && !t->stop) pthread_cond_wait(&t->cv, &t->mu);
        scall *c = t->q_head;
        if (!c) break; /* stopping, nothing left */
        t->q_head = c->next;
        if (!t->q_head) t->q_tail = NULL;
        pthread_mutex_unlock(&t->mu);
        peer_server_dev_hold(s, t->dev);
        call_run(s, c);
        peer_server_dev_let(s, t->dev);
        if (c->kind == CALL_RELEASE) { /* no one waits for it */
            free(c->rels);
            free(c);
        } else {
            c->next = NULL;
            pthread_mutex_lock(&s->done_mu);
            if (s->done_tail)
                s->done_tail->next = c;
            else
                s->done_head = c;
            s->done_tail = c;
            pthread_mutex_unlock(&s->done_mu);
            peer_listener_signal(s->l); /* the loop may be asleep on its worker */
        }
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void dev_push(sdev *t, scall *c)
{
    c->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->q_tail)
        t->q_tail->next = c;
    else
        t->q_head = c;
    t->q_tail = c;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------- the loop's side */

int peer_server_calls_start(peer_server *s)
{
    pthread_mutex_init(&s->done_mu, NULL);
    for (int i = 0; i < s->cfg.n_devs; i++) {
        sdev *t = &s->dt[i];
        t->s = s;
        t->dev = i;
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv, NULL);
        pthread_mutex_init(&t->drive, NULL);
        pthread_cond_init(&t->drive_cv, NULL);
    }
    s->call_now = calloc(1, sizeof *s->call_now);
    int ok = s->call_now != NULL;
    for (int i = 0; i < s->cfg.n_devs && ok; i++)
        ok = s->dt[i].started = !pthread_create(&s->dt[i].th, NULL, dev_main, &s->dt[i]);
    s->calls_on = 1;
    if (ok) return PEER_OK;
    peer_server_calls_stop(s);
    peer_server_calls_free(s);
    return PEER_ERR_NOMEM;
}

static void call_free(scall *c)
{
    if (!c) return;
    free(c->logits);
    free(c);
}

void peer_server_calls_stop(peer_server *s)
{
    for (int i = 0; i < s->cfg.n_devs; i++) {
        sdev *t = &s->dt[i];
        if (!t->started) continue;
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->th, NULL);
        t->started = 0;
    }
    s->calls_on = 0;
}

void peer_server_calls_free(peer_server *s)
{
    for (scall *c = s->done_head, *nx; c; c = nx) { /* answers nobody took */
        nx = c->next;
        call_free(c);
    }
    s->done_head = s->done_tail = NULL;
    for (int i = 0; i < s->cfg.n_devs; i++) {
        sdev *t = &s->dt[i];
        for (scall *c = t->idle, *nx; c; c = nx) {
            nx = c->next;
            call_free(c);
        }
        t->idle = NULL;
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->drive);
        pthread_cond_destroy(&t->drive_cv);
    }
    pthread_mutex_destroy(&s->done_mu);
    call_free(s->call_now);
    s->call_now = NULL;
}

/* A call of dev's not in use, or NULL when CALLS_PER_DEV are (or no memory for one: held too,
 * tried again once one is answered). */
static scall *call_get(peer_server *s, int dev)
{
    sdev *t = &s->dt[dev];
    scall *c = t->idle;
    if (c)
        t->idle = c->next;
    else if (t->n_calls < CALLS_PER_DEV && (c = calloc(1, sizeof *c)))
        t->n_calls++;
    return c;
}

/* A call's logits buffer larger than this goes back when the call does: a big batch at a large
 * vocabulary (1,024 rows x 128K) is 512 MiB, and CALLS_PER_DEV idle calls each keeping theirs
 * would pin gigabytes a device; a usual one is kept for the next call. */
#define CALL_LOGITS_KEEP ((size_t)64 << 20)

static void call_put(peer_server *s, scall *c)
{
    if (c == s->call_now) return;
    if (c->logits_cap * sizeof *c->logits > CALL_LOGITS_KEEP) {
        free(c->logits);
        c->logits = NULL;
        c->logits_cap = 0;
    }
    sdev *t = &s->dt[c->dev];
    c->next = t->idle;
    t->idle = c;
}

/* The call's answer on its connection. */
static int call_answer(peer_server *s, scall *c)
{
    switch (c->kind) {
    case CALL_SEQ_NEW:
        return peer_server_reply(c->sc, c->st, c->st ? 0 : c->slot);
    case CALL_DECODE:
    case CALL_DECODE_ARGMAX:
        return peer_server_decode_answer(s, c);
    default:
        return peer_server_reply(c->sc, c->st, 0);
    }
}

/* A free place in sc's table for a sequence being made (its .s stays NULL until the call is
 * answered: sc's next SEQ_NEW comes after that), or -1 when MAX_SEQS are taken or no memory. */
static int seq_slot(sconn *sc)
{
    for (int i = 0; i < sc->n_seqs; i++)
        if (!sc->seqs[i].s) return i;
    if (sc->n_seqs == sc->cap_seqs) {
        if (sc->cap_seqs >= MAX_SEQS) return -1;
        int cap = sc->cap_seqs ? 2 * sc->cap_seqs : 16;
        if (cap > MAX_SEQS) cap = MAX_SEQS;
        sseq *q = realloc(sc->seqs, sizeof *q * (size_t)cap);
        if (!q) return -1;
        sc->seqs = q;
        sc->cap_seqs = cap;
    }
    memset(&sc->seqs[sc->n_seqs], 0, sizeof sc->seqs[0]);
    return sc->n_seqs++;
}

int peer_server_on_call(peer_server *s, sconn *sc, int type, const uint8_t *p, size_t n)
{
    if (n < 4) return PEER_ERR_PROTO; /* every call names its device first */
    uint32_t dev = peer_rd32(p);
    scall *c = s->call_now; /* a device out of range: checked below, answered at once */
    if (dev < (uint32_t)s->cfg.n_devs && !(c = call_get(s, (int)dev))) return FRAME_HELD;
    c->dev = c == s->call_now ? -1 : (int)dev;
    c->sc = sc;
    c->st = 0;
    peer_words w;
    int st = PEER_OK;
    switch (type) {
    case PEER_SEQ_NEW:
        c->kind = CALL_SEQ_NEW;
        if (peer_words_read(p, n, 2, &w) || c->dev < 0) {
            st = PEER_ERR_PROTO;
            break;
        }
        if (w.w[1] < 1 || w.w[1] > (uint32_t)model_context_limit(&s->cfg.m->cfg)) {
            c->st = ACCEL_ERR_INVALID;
            break;
        }
        if (atomic_load(&s->draining)) {
            /* no new sequence while draining: the device list already says no room
             * (fill_info), so only a peer that placed on a view older than its last heartbeat
             * gets here; NOMEM is an admission answer (accel.h), its scheduler places the
             * request elsewhere, as when the device is full */
            accel_info ai;
            accel_get_info(s->devs[dev], &ai);
            peer_log(0, "peer_seq_refused", "peer=%s device=%s reason=\"draining\"", sc->name,
                     ai.name);
            c->st = ACCEL_ERR_NOMEM;
            break;
        }
        int slot = seq_slot(sc);
        if (slot < 0) c->st = ACCEL_ERR_NOMEM;
        c->slot = (uint32_t)slot;
        c->arg = (int)w.w[1];
        break;
    case PEER_SEQ_FREE:
    case PEER_TRUNCATE: {
        c->kind = type == PEER_SEQ_FREE ? CALL_SEQ_FREE : CALL_TRUNCATE;
        if (peer_words_read(p, n, type == PEER_SEQ_FREE ? 2 : 3, &w)) {
            st = PEER_ERR_PROTO;
            break;
        }
        sseq *q = seq_get(sc, w.w[1], w.w[0]);
        if (!q) {
            c->st = ACCEL_ERR_INVALID;
        } else if (type == PEER_SEQ_FREE) { /* out of the table now: its slot free for the next */
            c->rel = *q;
            memset(q, 0, sizeof *q);
        } else {
            c->seq = q->s;
            c->arg = (int)w.w[2];
        }
        break;
    }
    case PEER_WARMUP:
        c->kind = CALL_WARMUP;
        if (peer_words_read(p, n, 1, &w) || c->dev < 0) st = PEER_ERR_PROTO;
        break;
    default:
        c->kind = type == PEER_DECODE ? CALL_DECODE : CALL_DECODE_ARGMAX;
        st = peer_server_decode_read(s, sc, c, p, n);
        break;
    }
    if (st || c->st) { /* refused, or answered at once without the device */
        if (!st) st = call_answer(s, c);
        call_put(s, c);
        return st;
    }
    sc->call = c;
    dev_push(&s->dt[c->dev], c);
    return PEER_OK;
}

void peer_server_calls_collect(peer_server *s)
{
    pthread_mutex_lock(&s->done_mu);
    scall *c = s->done_head;
    s->done_head = s->done_tail = NULL;
    pthread_mutex_unlock(&s->done_mu);
    for (scall *nx; c; c = nx) {
        nx = c->next;
        sconn *sc = c->sc;
        sc->call = NULL;
        if (c->kind == CALL_SEQ_NEW &&
            c->seq) { /* into the table, answered or not: freed with it */
            sseq *q = &sc->seqs[c->slot];
            q->s = c->seq;
            q->dev = c->dev;
            q->capacity = c->arg;
            c->seq = NULL;
        }
        if (!sc->closing && call_answer(s, c)) peer_conn_kill(sc->c);
        call_put(s, c);
    }
}

void peer_server_calls_release(peer_server *s, sseq *v, int n)
{
    for (int dev = 0; dev < s->cfg.n_devs; dev++) {
        int k = 0;
        for (int i = 0; i < n; i++) k += v[i].s != NULL && v[i].dev == dev;
        if (!k) continue;
        scall *c = s->calls_on ? calloc(1, sizeof *c) : NULL;
        if (c && (c->rels = malloc(sizeof *c->rels * (size_t)k))) {
            c->kind = CALL_RELEASE;
            c->dev = dev;
            for (int i = 0; i < n; i++)
                if (v[i].s && v[i].dev == dev) {
                    c->rels[c->n++] = v[i];
                    memset(&v[i], 0, sizeof v[i]);
                }
            dev_push(&s->dt[dev], c);
            continue;
        }
        free(c); /* threads stopped (or no memory to hand them over): freed here, the device held */
        if (s->calls_on) peer_server_dev_hold(s, dev);
        for (int i = 0; i < n; i++)
            if (v[i].s && v[i].dev == dev) peer_server_sseq_release(s, &v[i]);
        if (s->calls_on) peer_server_dev_let(s, dev);
    }
}
