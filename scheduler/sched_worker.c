/* scheduler/sched_worker.c — one device's worker thread: tasks, continuous batching, the end of
 * a request.
 *
 * Loop, until told to stop:
 *   1. take the inbox's tasks (under the device's mutex), in order: RUN (a request to prefill
 *      here) joins the prefill queue; ATTACH / CHUNK / HANDOVER are the decode side of a split
 *      placement (sched_handover.c);
 *   2. drop cancelled requests and fail those past their deadline, wherever they are on this
 *      device (their KV is freed here);
 *   3. one decode step for every unfinished choice of every request decoding here —
 *      accel_decode over all of them at once, in slices of the device's max_batch — then each
 *      choice's token (sched_choice_step);
 *   4. prefill work (sched_prefill.c): the head job whole when nothing decodes here, else chunks
 *      while the time-between-tokens budget lasts.
 * A request whose prefill ends here joins step 3 of the next iteration: continuous batching.
 *
 * Faults: a device status that is the device's trouble (sched_status_movable) moves the
 * requests of that call to other devices (MOVE node, the loop queues them again); other
 * statuses fail them with an ERROR event. ACCEL_ERR_DEVICE has made the device FAILED
 * (accel.c), so the policy places nothing more on it. Nothing here aborts. */
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

int sched_req_cancelled(sched_req *r)
{
    return __atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE);
}

void sched_list_remove(sched_req **head, sched_req *r)
{
    for (sched_req **pp = head; *pp; pp = &(*pp)->wnext)
        if (*pp == r) {
            *pp = r->wnext;
            r->wnext = NULL;
            return;
        }
}

int sched_status_movable(int st)
{
    switch (st) {
    case ACCEL_ERR_DEVICE:  /* the device failed */
    case ACCEL_ERR_TIMEOUT: /* a run did not finish in time */
    case ACCEL_ERR_CORRUPT: /* imported KV failed its check */
    case ACCEL_ERR_NOMEM:   /* this device has no room after all (fragmentation) */
        return 1;
    }
    return 0;
}

void sched_worker_push(sched_dev *d, sched_task *t)
{
    t->next = NULL;
    pthread_mutex_lock(&d->mu);
    if (d->inbox_tail) d->inbox_tail->next = t;
    else d->inbox_head = t;
    d->inbox_tail = t;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static sched_node *node_new(size_t mlen)
{
    sched_node *n = sched_node_new(mlen);
    /* Cannot fail in practice (a few bytes); without the node the loop would never free the
     * request, so retry until memory is back. */
    while (!n) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        n = sched_node_new(mlen);
    }
    return n;
}

unsigned sched_worker_seqs(const sched_dev *d, const sched_req *r)
{
    if (r->w_split && d->index == r->w_prefill) return SCHED_SEQ_DECODE | SCHED_SEQ_PREFILL;
    return SCHED_SEQ_ALL;
}

/* c's sequence decoded with AsyncTLS sparse attention: as its device counts (steps since sparse
 * decode was turned on, which covers a device's own default too), else as settled for r. */
static int decoded_sparse(sched_dev *d, const sched_req *r, const sched_choice *c)
{
    accel_decode_stats ds;
    if (accel_seq_decode_stats(d->dev, c->seq, &ds) == ACCEL_OK) return ds.steps > 0;
    return r->tls_set && r->tls_on && !c->tls_dense;
}

void sched_worker_publish(sched_dev *d, sched_req *r, sched_choice *c)
{
    if (!d->pc || r->no_cache || r->w_split || !c->seq) return;
    uint64_t kind = sched_choice_kv_kind(r, c);
    /* the sequence holds the prompt, then the generated tokens it was fed (a moved request's
     * re-prefill fed them too: sched_choice_prefill_ids) */
    int len = accel_seq_len(d->dev, c->seq);
    /* Positions decoded sparse hold KV that every layer after the first computed from a subset
     * of the keys: an approximation of no kind the cache knows (sched_pcache.h), which a dense
     * request would reuse as exact. Only the prefilled positions are kept. */
    if (len > c->pf_n && decoded_sparse(d, r, c)) len = c->pf_n;
    if (len <= r->n_prompt) {
        sched_pcache_publish(d->pc, kind, c->seq, r->prompt, len);
        return;
    }
    if (len - r->n_prompt > c->n_hist) return; /* not what it holds: keep nothing */
    int32_t *ids = malloc(sizeof *ids * (size_t)len);
    if (!ids) return;
    memcpy(ids, r->prompt, sizeof *ids * (size_t)r->n_prompt);
    memcpy(ids + r->n_prompt, c->hist, sizeof *ids * (size_t)(len - r->n_prompt));
    sched_pcache_publish(d->pc, kind, c->seq, ids, len);
    free(ids);
}

/* Sparse decode: what c's decoding sequence read, added to the choice's sums (before the
 * sequence goes). */
static void tls_collect(sched_dev *d, sched_choice *c)
{
    if (c->tls_seq && c->tls_seq == c->seq) {
        accel_decode_stats ds;
        if (!accel_seq_decode_stats(d->dev, c->seq, &ds)) {
            c->tls_read += ds.keys_read;
            c->tls_total += ds.keys_total;
        }
    }
    c->tls_seq = NULL;
}

static void free_device_state(sched_dev *d, sched_req *r, int all)
{
    unsigned seqs = sched_worker_seqs(d, r);
    for (int i = 0; i < r->n; i++) {
        if (seqs & SCHED_SEQ_DECODE) tls_collect(d, &r->choices[i]);
        if (seqs & SCHED_SEQ_DECODE) sched_worker_publish(d, r, &r->choices[i]);
        sched_choice_deinit(&r->choices[i], d->dev, seqs, all);
        r->choices[i].forked = 0; /* a re-placed request prefills its choices again */
        r->choices[i].approx = 0;
    }
}

void sched_worker_finish(sched_dev *d, sched_req *r, const sched_event *ev)
{
    free_device_state(d, r, 1);
    size_t mlen = ev && ev->message ? strlen(ev->message) : 0;
    sched_node *n = node_new(mlen);
    n->req = r;
    n->dev = d->index;
    n->placement = r->w_placement;
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

void sched_worker_fail(sched_dev *d, sched_req *r, int status, const char *msg)
{
    sched_event ev = {.type = SCHED_EV_ERROR, .status = status, .message = msg, .t = sched_now()};
    sched_worker_finish(d, r, &ev);
}

void sched_worker_done(sched_dev *d, sched_req *r)
{
    sched_event ev = {.type = SCHED_EV_DONE, .t = sched_now()};
    ev.prompt_tokens = r->n_prompt;
    ev.cached_tokens = r->cached_tokens;
    for (int i = 0; i < r->n; i++) ev.completion_tokens += r->choices[i].generated;
    ev.prefill_density = !r->has_sparse ? -1 : r->density_n ? r->density_sum / r->density_n : 1;
    ev.decode_kv_read = -1;
    if (r->tls_set && r->tls_on) {
        int64_t rd = 0, tot = 0;
        for (int i = 0; i < r->n; i++) {
            sched_choice *c = &r->choices[i];
            tls_collect(d, c);
            rd += c->tls_read;
            tot += c->tls_total;
        }
        ev.decode_kv_read = tot > 0 ? (double)rd / (double)tot : 1.0;
    }
    ev.t_arrival = r->t_arrival;
    ev.t_started = r->t_started;
    ev.t_first_token = r->t_first_token;
    ev.t_done = ev.t;
    ev.prompt_lps = r->plp;
    sched_worker_finish(d, r, &ev);
}

void sched_worker_move(sched_dev *d, sched_req *r, int failed_dev, int status)
{
    free_device_state(d, r, 0); /* the generators and histories travel with it */
    sched_node *n = node_new(0);
    n->kind = SCHED_NODE_MOVE;
    n->req = r;
    n->dev = failed_dev;
    n->status = status;
    n->placement = r->w_placement;
    sched_post(d->s, n);
}

/* Preemption: r leaves d's decode set, its KV published to the prefix cache and freed; the
 * loop queues it again by its arrival order (its generated tokens kept: the next placement
 * prefills prompt + generated, mostly from the cache). */
static void preempt(sched_dev *d, sched_req *r)
{
    sched_list_remove(&d->active, r);
    free_device_state(d, r, 0);
    atomic_fetch_add(&d->preemptions, 1);
    sched_node *n = node_new(0);
    n->kind = SCHED_NODE_PREEMPT;
    n->req = r;
    n->dev = d->index;
    n->placement = r->w_placement;
    sched_post(d->s, n);
}

int sched_worker_make_room(sched_dev *d, const sched_req *keep)
{
    if (d->pc && sched_pcache_evict(d->pc)) return 1;
    /* the youngest request decoding here (the last to arrive): vLLM's recompute preemption;
     * a request that needs room for its prefill only preempts younger ones (FCFS) */
    sched_req *young = NULL;
    for (sched_req *r = d->active; r; r = r->wnext)
        if (r != keep && (!keep || r->seqno > keep->seqno) && (!young || r->seqno > young->seqno))
            young = r;
    if (!young) return 0;
    preempt(d, young); /* its KV stays cached until the next NOMEM gives it up */
    return 1;
}

/* sched_choice_step's failures: ACCEL_ERR_DEVICE (no finite logit) or SCHED_ERR_NOMEM. */
static const char *step_error(int st)
{
    return st == ACCEL_ERR_DEVICE ? "the model produced no finite logit" : sched_strerror(st);
}

/* Cancelled and timed-out requests leave now: those decoding here and those prefilling here. */
static void reap(sched_dev *d)
{
    double now = sched_now();
    for (sched_req *r = d->active, *next; r; r = next) {
        next = r->wnext;
        if (sched_req_cancelled(r)) {
            sched_list_remove(&d->active, r);
            sched_worker_finish(d, r, NULL);
        } else if (r->deadline > 0 && now >= r->deadline) {
            sched_list_remove(&d->active, r);
            sched_worker_fail(d, r, SCHED_ERR_TIMEOUT, "the request's deadline passed");
        }
    }
    for (sched_req *r = d->pf_head, *next; r; r = next) {
        next = r->wnext;
        if (sched_req_cancelled(r)) sched_prefill_end(d, r, ACCEL_ERR_CANCELLED);
        else if (r->deadline > 0 && now >= r->deadline) sched_prefill_end(d, r, SCHED_ERR_TIMEOUT);
    }
}

/* TANDEM_SCHED_TRACE=PREFIX (a diagnostic, off by default): each worker writes PREFIX.<device
 * index>, one line per event, times in seconds of CLOCK_MONOTONIC (the clock of Python's
 * time.monotonic on Linux, so a client's token arrivals line up with them):
 *   I t                    an iteration begins (before the inbox is taken: a wait shows as the
 *                          time from here to the next line)
 *   D t0 t1 rows           a decode step: its start (after the inbox and the reaping) and the
 *                          moment its tokens were handed to the loop
 *   P t0 t1 kind tokens pos layer0 layers predicted_s left_s first planned_s
 *                          a prefill call beside decodes (sched_prefill.c): its cost model's
 *                          kind, the chunk, the layers it ran (layers = 0: all of them), the
 *                          cost predicted for what it ran, what was left of the budget,
 *                          whether it was the iteration's first call, and the cost it was
 *                          planned at (sched_cost_plan: the prediction to the model's margin)
 * bench/tbt_trace.py reads it with bench/tbt_during_prefill.py's --gaps file. */
static void trace_open(sched_dev *d)
{
    const char *pre = getenv("TANDEM_SCHED_TRACE");
    if (!pre || !*pre) return;
    char path[4096];
    if (snprintf(path, sizeof path, "%s.%d", pre, d->index) >= (int)sizeof path) return;
    d->trace = fopen(path, "w");
    if (d->trace) setvbuf(d->trace, NULL, _IOLBF, 1 << 16); /* whole lines, even if the daemon is killed */
}

/* One decode step over every unfinished choice on this device. */
static void decode_step(sched_dev *d)
{
    sched *s = d->s;
    int vocab = s->vocab, rows = 0;
    for (sched_req *r = d->active; r; r = r->wnext)
        for (int i = 0; i < r->n && rows < d->rows; i++) {
            sched_choice *c = &r->choices[i];
            if (c->finish != MODEL_FINISH_NONE) continue;
            if (r->tls_set && c->tls_seq != c->seq) {
                /* sparse decode as settled, on the sequence this device decodes (once per
                 * sequence: a new placement, a handed-over or re-prefilled one) */
                int st = accel_seq_decode_sparse(d->dev, c->seq, r->tls_on ? &r->tls_p : NULL);
                c->tls_dense = st != ACCEL_OK; /* a device that cannot: dense, counted so */
                c->tls_seq = c->seq;
            }
            d->seqs[rows] = c->seq;
            d->ids[rows] = c->last;
            d->row_choice[rows] = c;
            d->row_req[rows] = r;
            rows++;
        }
    if (!rows) return;
    const int64_t tr0 = d->trace ? sched_now_ns() : 0;
    int need_room = 0;
    int max_batch = d->info0.max_batch > 0 ? d->info0.max_batch : 1;
    /* a device that picks greedy tokens itself copies back only the rows still sampled here */
    const int dev_argmax = (d->info0.caps & ACCEL_CAP_DECODE_ARGMAX) != 0;
    for (int i = 0; i < rows && dev_argmax; i++)
        d->want[i] = !model_gen_plain_greedy(d->row_choice[i]->gen);
    int masking = sched_mask_post(d, rows); /* the helper owns those generators until the wait */
    for (int b0 = 0; b0 < rows; b0 += max_batch) {
        int nb = rows - b0 < max_batch ? rows - b0 : max_batch;
        float *lg = d->logits + (size_t)b0 * vocab;
        int st = dev_argmax ? SCHED_DEVICE_CALL(d, accel_decode_argmax(d->dev, nb, d->seqs + b0, d->ids + b0,
                                                                       lg, d->want + b0, d->argmax + b0))
                            : SCHED_DEVICE_CALL(d, accel_decode(d->dev, nb, d->seqs + b0, d->ids + b0, lg));
        if (st == ACCEL_ERR_NOMEM && (d->pc || d->active->wnext)) {
            /* no room to grow (a paged device leaves every sequence as it was): the slice is
             * not sampled and steps again next time, after memory is given back below */
            for (int i = b0; i < b0 + nb; i++) d->row_choice[i] = NULL;
            need_room = 1;
            continue;
        }
        if (st != ACCEL_OK) {
            /* This slice's requests fail or move; the other slices' sequences advanced and are
             * sampled below as usual. */
            for (int i = b0; i < b0 + nb; i++) {
                d->row_req[i]->wfail = st;
                d->row_req[i]->wfail_step = 0;
            }
            continue;
        }
        atomic_fetch_add(&d->tokens, (uint64_t)nb);
    }
    if (masking) sched_mask_wait(d);
    double t = sched_now();
    for (int i = 0; i < rows; i++) {
        sched_req *r = d->row_req[i];
        if (r->wfail || !d->row_choice[i]) continue;
        int st = dev_argmax && !d->want[i]
                     ? sched_choice_step_token(s, r, d->row_choice[i], d->argmax[i], t)
                     : sched_choice_step(s, r, d->row_choice[i], d->logits + (size_t)i * vocab, t);
        if (st < 0) {
            r->wfail = st;
            r->wfail_step = 1;
        }
    }
    if (d->trace) fprintf(d->trace, "D %.6f %.6f %d\n", tr0 / 1e9, sched_now_ns() / 1e9, rows);
    for (sched_req *r = d->active, *next; r; r = next) {
        next = r->wnext;
        if (r->wfail) {
            int st = r->wfail;
            r->wfail = 0;
            sched_list_remove(&d->active, r);
            if (sched_status_movable(st)) {
                sched_worker_move(d, r, d->index, st);
            } else {
                char msg[ACCEL_NAME_MAX + 160]; /* a device name and a status */
                if (r->wfail_step) snprintf(msg, sizeof msg, "%s", step_error(st));
                else snprintf(msg, sizeof msg, "%s: decode failed: %s", d->info0.name, sched_strerror(st));
                sched_worker_fail(d, r, st, msg);
            }
        } else if (r->n_done == r->n) {
            sched_list_remove(&d->active, r);
            sched_worker_done(d, r);
        }
    }
    if (need_room && !sched_worker_make_room(d, NULL)) {
        /* nothing cached, nobody to preempt: the requests here cannot grow at all (the
         * admission's bound makes this a lone request on a device whose memory went elsewhere) */
        for (sched_req *r = d->active, *next; r; r = next) {
            next = r->wnext;
            sched_list_remove(&d->active, r);
            sched_worker_move(d, r, d->index, ACCEL_ERR_NOMEM);
        }
    }
}

static void run_task(sched_dev *d, sched_task *t)
{
    sched_req *r = t->r;
    /* an embedded task lives in its request, which may be gone once the task ran */
    int heap = t->heap;
    switch (t->kind) {
    case SCHED_TASK_RUN:
        r->wnext = NULL;
        r->pf_choice = 0;
        if (d->pf_tail) d->pf_tail->wnext = r;
        else d->pf_head = r;
        d->pf_tail = r;
        break;
    case SCHED_TASK_ATTACH: sched_handover_attach(d, r); break;
    case SCHED_TASK_CHUNK: sched_handover_chunk(d, t); break;
    case SCHED_TASK_HANDOVER: sched_handover_take(d, r, t->status, t->from); break;
    }
    if (heap) free(t);
}

static int alloc_rows(sched_dev *d)
{
    sched *s = d->s;
    int rows = s->cfg.max_running;
    d->rows = rows;
    /* page-locked where the device copies into it directly (the GPU's decode logits) */
    d->logits = accel_host_alloc(d->dev, sizeof(float) * (size_t)rows * (size_t)s->vocab);
    d->seqs = calloc((size_t)rows, sizeof *d->seqs);
    d->ids = calloc((size_t)rows, sizeof *d->ids);
    d->row_choice = calloc((size_t)rows, sizeof *d->row_choice);
    d->row_req = calloc((size_t)rows, sizeof *d->row_req);
    d->want = calloc((size_t)rows, 1);
    d->argmax = calloc((size_t)rows, sizeof *d->argmax);
    return d->logits && d->seqs && d->ids && d->row_choice && d->row_req && d->want && d->argmax ? 0 : -1;
}

static void free_rows(sched_dev *d)
{
    accel_host_free(d->dev, d->logits);
    free(d->plogits);
    free(d->seqs);
    free(d->ids);
    free(d->row_choice);
    free(d->row_req);
    free(d->want);
    free(d->argmax);
}

/* Stopping: release what this worker owns without events (the loop frees the requests once
 * every worker has been joined; tasks left in inboxes are the loop's then). */
static void stop_all(sched_dev *d)
{
    while (d->pf_head) {
        sched_req *r = d->pf_head;
        d->pf_head = r->wnext;
        sched_worker_finish(d, r, NULL);
    }
    d->pf_tail = NULL;
    while (d->active) {
        sched_req *r = d->active;
        d->active = r->wnext;
        sched_worker_finish(d, r, NULL);
    }
    sched_handover_stop(d);
}

void *sched_worker_main(void *arg)
{
    sched_dev *d = arg;
    sched *s = d->s;
    int st = alloc_rows(d) < 0 ? ACCEL_ERR_NOMEM : SCHED_DEVICE_CALL(d, accel_warmup(d->dev));
    atomic_store(&d->warm, st == ACCEL_OK ? 1 : -1);
    trace_open(d);
    sched_node *wn = node_new(0);
    wn->kind = SCHED_NODE_WARM;
    wn->dev = d->index;
    wn->ev.status = st;
    sched_post(s, wn);

    for (;;) {
        if (d->trace && (d->active || d->pf_head)) fprintf(d->trace, "I %.6f\n", sched_now_ns() / 1e9);
        pthread_mutex_lock(&d->mu);
        while (!d->stop && !d->inbox_head && !d->active && !d->pf_head) {
            struct timespec ts;
            abs_deadline(&ts, IDLE_WAKE_MS);
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
            stamp(d);
        }
        if (d->stop) {
            pthread_mutex_unlock(&d->mu);
            break;
        }
        sched_task *tasks = d->inbox_head;
        d->inbox_head = d->inbox_tail = NULL;
        if (s->cfg.step_delay_ms > 0) {
            /* Testing aid: a slower device. A cancel or a stop wakes it early. */
            struct timespec ts;
            abs_deadline(&ts, s->cfg.step_delay_ms);
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        }
        pthread_mutex_unlock(&d->mu);
        stamp(d);
        for (sched_task *t = tasks, *next; t; t = next) {
            next = t->next;
            run_task(d, t);
        }
        reap(d);
        decode_step(d);
        double t0 = sched_now();
        int prefilling = d->pf_head != NULL;
        sched_prefill_work(d);
        if (prefilling || d->share.started) {
            /* the policy weighs this device's decode by the time prefill leaves it */
            double t1 = sched_now();
            sched_share_observe(&d->share, t1, prefilling ? t1 - t0 : 0);
            atomic_store(&d->prefill_share_ppm, (int_least64_t)(sched_share_value(&d->share) * 1e6));
        }
    }
    stop_all(d);
    if (d->trace) fclose(d->trace);
    d->trace = NULL;
    sched_mask_stop(d);
    free_rows(d);
    return NULL;
}
