/* scheduler/sched_worker.c — one device's worker thread: continuous batching.
 *
 * Loop, until told to stop:
 *   1. take newly placed requests from the inbox (under the device's mutex);
 *   2. drop cancelled requests and fail those past their deadline (their KV is freed here);
 *   3. start each new request: a sequence per choice with room for prompt + max_tokens, the
 *      prompt prefilled (the request's cancel flag is polled between layers), the first token
 *      of each choice sampled from the prefill's logits;
 *   4. one decode step for every unfinished choice of every active request on this device —
 *      accel_decode over all of them at once, in slices of the device's max_batch — then each
 *      choice's token (sched_choice_step);
 *   5. requests whose choices have all finished: DONE, free.
 * New requests join at step 3 of the next iteration, between decode steps of the others: that is
 * the continuous part of the batching. A prefill runs whole (no chunking yet: issue 7), so a long
 * prompt delays the other sequences' next token by its prefill time.
 *
 * Faults: a device status other than CANCELLED fails the requests of that call with an ERROR
 * event; ACCEL_ERR_DEVICE has made the device FAILED (accel.c), so the policy places nothing
 * more on it. Nothing here aborts. */
#include "scheduler/sched_internal.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An idle worker wakes this often to show it is alive (the daemon's watchdog reads it). */
#define IDLE_WAKE_MS 500

static void stamp(sched_dev *d)
{
    atomic_store(&d->progress_ns, sched_now_ns());
}

static void abs_deadline(struct timespec *ts, double ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = ts->tv_nsec + (long long)(ms * 1e6);
    ts->tv_sec += ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

/* Frees the request's device state and tells the loop (final node with ev, or a silent release
 * when ev is NULL). The worker must not touch r afterwards. */
static void finish_req(sched_dev *d, sched_req *r, const sched_event *ev)
{
    for (int i = 0; i < r->n; i++) sched_choice_deinit(&r->choices[i], d->dev);
    size_t mlen = ev && ev->message ? strlen(ev->message) : 0;
    sched_node *n = sched_node_new(mlen);
    if (!n) {
        /* Cannot happen in practice (a few bytes); without the node the loop would never free
         * the request, so retry until memory is back. */
        while (!(n = sched_node_new(mlen))) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    n->req = r;
    if (ev) {
        n->kind = SCHED_NODE_FINAL;
        n->ev = *ev;
        if (mlen) {
            memcpy(n->data, ev->message, mlen);
            n->ev.message = n->data;
        }
    } else {
        n->kind = SCHED_NODE_RELEASE;
    }
    sched_post(d->s, n);
}

static void fail_req(sched_dev *d, sched_req *r, int status, const char *msg)
{
    sched_event ev = {.type = SCHED_EV_ERROR, .status = status, .message = msg, .t = sched_now()};
    finish_req(d, r, &ev);
}

static void done_req(sched_dev *d, sched_req *r)
{
    sched_event ev = {.type = SCHED_EV_DONE, .t = sched_now()};
    ev.prompt_tokens = r->n_prompt;
    for (int i = 0; i < r->n; i++) ev.completion_tokens += r->choices[i].generated;
    ev.t_arrival = r->t_arrival;
    ev.t_started = r->t_started;
    ev.t_first_token = r->t_first_token;
    ev.t_done = ev.t;
    finish_req(d, r, &ev);
}

static int cancelled(sched_req *r)
{
    return __atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE);
}

/* A device call, timed for busy_seconds and flagged for the watchdog. */
#define DEVICE_CALL(d, expr)                                                                       \
    ({                                                                                             \
        int64_t t0_ = sched_now_ns();                                                              \
        atomic_store(&(d)->in_step, 1);                                                            \
        int st_ = (expr);                                                                          \
        atomic_store(&(d)->in_step, 0);                                                            \
        int64_t t1_ = sched_now_ns();                                                              \
        atomic_fetch_add(&(d)->busy_ns, (uint64_t)(t1_ - t0_));                                    \
        atomic_fetch_add(&(d)->steps, 1);                                                          \
        atomic_store(&(d)->progress_ns, t1_);                                                      \
        st_;                                                                                       \
    })

static const char *step_error(int st)
{
    return st == ACCEL_ERR_DEVICE ? "the model produced no finite logit" : "out of host memory";
}

/* Prefills every choice and samples its first token. Returns 0 (r is active), or 1 when r was
 * finished here (error, cancel, or every choice done after one token). */
static int start_req(sched_dev *d, sched_req *r)
{
    sched *s = d->s;
    r->t_started = sched_now();
    int capacity = r->n_prompt + r->max_tokens;
    for (int i = 0; i < r->n; i++) {
        sched_choice *c = &r->choices[i];
        int st = accel_seq_new(d->dev, capacity, &c->seq);
        if (st != ACCEL_OK) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: cannot reserve KV for %d positions: %s", d->info0.name, capacity, accel_strerror(st));
            fail_req(d, r, st, msg);
            return 1;
        }
        accel_prefill_req pr = {.seq = c->seq, .ids = r->prompt, .n = r->n_prompt,
                                .logits = d->logits, .cancel = &r->cancel};
        st = DEVICE_CALL(d, accel_prefill(d->dev, &pr));
        if (st == ACCEL_ERR_CANCELLED || cancelled(r)) {
            finish_req(d, r, NULL);
            return 1;
        }
        if (st != ACCEL_OK) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: prefill failed: %s", d->info0.name, accel_strerror(st));
            fail_req(d, r, st, msg);
            return 1;
        }
        atomic_fetch_add(&d->tokens, (uint64_t)r->n_prompt);
        st = sched_choice_step(s, r, c, d->logits, sched_now());
        if (st < 0) {
            fail_req(d, r, st, step_error(st));
            return 1;
        }
    }
    if (r->n_done == r->n) {
        done_req(d, r);
        return 1;
    }
    return 0;
}

/* Removes r from the active list. */
static void unlink_active(sched_dev *d, sched_req *r)
{
    for (sched_req **pp = &d->active; *pp; pp = &(*pp)->wnext)
        if (*pp == r) {
            *pp = r->wnext;
            r->wnext = NULL;
            return;
        }
}

/* Cancelled and timed-out requests leave now. */
static void reap(sched_dev *d)
{
    double now = sched_now();
    for (sched_req *r = d->active, *next; r; r = next) {
        next = r->wnext;
        if (cancelled(r)) {
            unlink_active(d, r);
            finish_req(d, r, NULL);
        } else if (r->deadline > 0 && now >= r->deadline) {
            unlink_active(d, r);
            fail_req(d, r, SCHED_ERR_TIMEOUT, "the request's deadline passed");
        }
    }
}

/* One decode step over every unfinished choice on this device. */
static void decode_step(sched_dev *d)
{
    sched *s = d->s;
    int vocab = s->vocab, rows = 0;
    for (sched_req *r = d->active; r; r = r->wnext)
        for (int i = 0; i < r->n; i++) {
            sched_choice *c = &r->choices[i];
            if (c->finish != MODEL_FINISH_NONE) continue;
            d->seqs[rows] = c->seq;
            d->ids[rows] = c->last;
            d->row_choice[rows] = c;
            d->row_req[rows] = r;
            rows++;
        }
    if (!rows) return;
    int max_batch = d->info0.max_batch > 0 ? d->info0.max_batch : 1;
    for (int b0 = 0; b0 < rows; b0 += max_batch) {
        int nb = rows - b0 < max_batch ? rows - b0 : max_batch;
        int st = DEVICE_CALL(d, accel_decode(d->dev, nb, d->seqs + b0, d->ids + b0,
                                             d->logits + (size_t)b0 * vocab));
        if (st != ACCEL_OK) {
            /* This slice's requests fail; the other slices' sequences advanced and are sampled
             * below as usual. */
            for (int i = b0; i < b0 + nb; i++) {
                d->row_req[i]->wfail = st;
                d->row_req[i]->wfail_step = 0;
            }
            continue;
        }
        atomic_fetch_add(&d->tokens, (uint64_t)nb);
    }
    double t = sched_now();
    for (int i = 0; i < rows; i++) {
        sched_req *r = d->row_req[i];
        if (r->wfail) continue;
        int st = sched_choice_step(s, r, d->row_choice[i], d->logits + (size_t)i * vocab, t);
        if (st < 0) {
            r->wfail = st;
            r->wfail_step = 1;
        }
    }
    for (sched_req *r = d->active, *next; r; r = next) {
        next = r->wnext;
        if (r->wfail) {
            char msg[160];
            if (r->wfail_step)
                snprintf(msg, sizeof msg, "%s", step_error(r->wfail));
            else
                snprintf(msg, sizeof msg, "%s: decode failed: %s", d->info0.name, accel_strerror(r->wfail));
            unlink_active(d, r);
            fail_req(d, r, r->wfail, msg);
        } else if (r->n_done == r->n) {
            unlink_active(d, r);
            done_req(d, r);
        }
    }
}

static int alloc_rows(sched_dev *d)
{
    sched *s = d->s;
    int rows = s->cfg.max_running;
    d->rows = rows;
    d->logits = malloc(sizeof(float) * (size_t)rows * (size_t)s->vocab);
    d->seqs = calloc((size_t)rows, sizeof *d->seqs);
    d->ids = calloc((size_t)rows, sizeof *d->ids);
    d->row_choice = calloc((size_t)rows, sizeof *d->row_choice);
    d->row_req = calloc((size_t)rows, sizeof *d->row_req);
    return d->logits && d->seqs && d->ids && d->row_choice && d->row_req ? 0 : -1;
}

static void free_rows(sched_dev *d)
{
    free(d->logits);
    free(d->seqs);
    free(d->ids);
    free(d->row_choice);
    free(d->row_req);
}

void *sched_worker_main(void *arg)
{
    sched_dev *d = arg;
    sched *s = d->s;
    int st = alloc_rows(d) < 0 ? ACCEL_ERR_NOMEM : DEVICE_CALL(d, accel_warmup(d->dev));
    atomic_store(&d->warm, st == ACCEL_OK ? 1 : -1);
    sched_node *wn = sched_node_new(0);
    while (!wn) wn = sched_node_new(0);
    wn->kind = SCHED_NODE_WARM;
    wn->dev = d->index;
    wn->ev.status = st;
    sched_post(s, wn);

    for (;;) {
        pthread_mutex_lock(&d->mu);
        while (!d->stop && !d->inbox_head && !d->active) {
            struct timespec ts;
            abs_deadline(&ts, IDLE_WAKE_MS);
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
            stamp(d);
        }
        if (d->stop) {
            pthread_mutex_unlock(&d->mu);
            break;
        }
        sched_req *fresh = d->inbox_head;
        d->inbox_head = d->inbox_tail = NULL;
        if (s->cfg.step_delay_ms > 0) {
            /* Testing aid: a slower device. A cancel or a stop wakes it early. */
            struct timespec ts;
            abs_deadline(&ts, s->cfg.step_delay_ms);
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        }
        pthread_mutex_unlock(&d->mu);
        stamp(d);

        for (sched_req *r = fresh, *next; r; r = next) {
            next = r->wnext;
            r->wnext = NULL;
            if (cancelled(r)) {
                finish_req(d, r, NULL);
                continue;
            }
            if (start_req(d, r) == 0) {
                r->wnext = d->active;
                d->active = r;
            }
        }
        reap(d);
        decode_step(d);
    }
    /* Stopping: release everything without events (the loop frees the requests). */
    pthread_mutex_lock(&d->mu);
    sched_req *rest = d->inbox_head;
    d->inbox_head = d->inbox_tail = NULL;
    pthread_mutex_unlock(&d->mu);
    for (sched_req *r = rest, *next; r; r = next) {
        next = r->wnext;
        finish_req(d, r, NULL);
    }
    while (d->active) {
        sched_req *r = d->active;
        d->active = r->wnext;
        finish_req(d, r, NULL);
    }
    free_rows(d);
    return NULL;
}
