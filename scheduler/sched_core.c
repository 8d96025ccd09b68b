/* scheduler/sched_core.c — the loop-thread side of the scheduler: admission, the FCFS waiting
 * queue, dispatch through the book (sched_book.h: GLITCHES' policy plus what each placement
 * committed), failover (a moved request is queued again by arrival order), cancellation, event
 * delivery and the devices' health marks. See sched.h for the contract and sched_internal.h for
 * who owns what; sched_life.c starts and stops it. */
#include "scheduler/sched_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often waiting requests are checked against their deadlines (running ones are checked by
 * their worker every step). A deadline is honoured to within this much while queued. */
#define SCHED_DEADLINE_TICK_MS 250

int64_t sched_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double sched_now(void)
{
    return (double)sched_now_ns() / 1e9;
}

sched_node *sched_node_new(size_t data_bytes)
{
    return calloc(1, sizeof(sched_node) + data_bytes + 1);
}

void sched_post(sched *s, sched_node *n)
{
    n->next = NULL;
    pthread_mutex_lock(&s->ev_mu);
    if (s->ev_tail) s->ev_tail->next = n;
    else s->ev_head = n;
    s->ev_tail = n;
    pthread_mutex_unlock(&s->ev_mu);
    uv_async_send(&s->async);
}

/* ---------------------------------------------------------------- requests */

void sched_req_free(sched_req *r)
{
    if (r->choices) {
        for (int i = 0; i < r->n; i++) sched_choice_deinit(&r->choices[i], NULL, 0, 1);
        free(r->choices);
    }
    free(r->prompt);
    free(r->plp);
    free(r);
}

static void queue_unlink(sched *s, sched_req *r)
{
    if (r->qprev) r->qprev->qnext = r->qnext;
    else s->wait_head = r->qnext;
    if (r->qnext) r->qnext->qprev = r->qprev;
    else s->wait_tail = r->qprev;
    r->qprev = r->qnext = NULL;
    s->n_waiting--;
}

/* Queues r in arrival order: at the tail for a new request, ahead of every later arrival for a
 * request that moved (FCFS holds across failovers). */
static void queue_insert(sched *s, sched_req *r)
{
    sched_req *after = s->wait_tail;
    while (after && after->seqno > r->seqno) after = after->qprev;
    r->qprev = after;
    r->qnext = after ? after->qnext : s->wait_head;
    if (r->qnext) r->qnext->qprev = r;
    else s->wait_tail = r;
    if (after) after->qnext = r;
    else s->wait_head = r;
    s->n_waiting++;
}

/* ---------------------------------------------------------------- health and the book */

static enum accel_health worse(int a, int b)
{
    return (enum accel_health)(a > b ? a : b);
}

/* A device's health as the policy sees it: the backend's, the scheduler's own mark, and a
 * device still warming up (or whose warm-up failed) counts as failed. */
static enum accel_health health_of(sched *s, int i)
{
    sched_dev *d = &s->dev[i];
    if (atomic_load(&d->warm) != 1) return ACCEL_HEALTH_FAILED;
    accel_info info;
    accel_get_info(d->dev, &info);
    /* a device of another node: the link its KV crosses, as measured (the network term) */
    s->book.dev[i].ship_bps = info.caps & ACCEL_CAP_REMOTE ? info.link_bps : 0;
    s->book.dev[i].ship_s = info.caps & ACCEL_CAP_REMOTE ? info.link_s : 0;
    s->book.dev[i].mem_outside = info.mem_outside; /* others' share of a lent device */
    if (info.revivals != d->revivals) { /* the device came back (accel.h): a fresh start */
        d->revivals = info.revivals;
        d->mark = ACCEL_HEALTH_OK;
        d->fails = 0;
    }
    return worse(info.health, d->mark);
}

void sched_book_refresh(sched *s)
{
    for (int i = 0; i < s->n_devs; i++) {
        s->book.dev[i].health = health_of(s, i);
        s->book.dev[i].prefill_share = atomic_load(&s->dev[i].prefill_share_ppm) / 1e6;
        sched_prefill_fit_read(&s->dev[i], s->book.dev[i].prefill_fit);
    }
}

/* A request failed on device i (it moved away, or failed): the scheduler's mark. */
static void note_failure(sched *s, int i, int status)
{
    if (i < 0 || i >= s->n_devs || status == ACCEL_ERR_NOMEM) return; /* no room is no fault */
    sched_dev *d = &s->dev[i];
    if (++d->fails >= SCHED_FAILS_TO_FAIL) d->mark = ACCEL_HEALTH_FAILED;
    else d->mark = worse(d->mark, ACCEL_HEALTH_DEGRADED);
}

/* A request finished on its devices: they work. A FAILED mark stays (sticky, as the backend's). */
static void note_success(sched *s, int i)
{
    if (i < 0 || i >= s->n_devs) return;
    sched_dev *d = &s->dev[i];
    d->fails = 0;
    if (d->mark == ACCEL_HEALTH_DEGRADED) d->mark = ACCEL_HEALTH_OK;
}

/* What the policy sees of r: after a move its generated tokens are prefilled again. */
static sched_policy_req policy_req(const sched *s, const sched_req *r)
{
    int hist = 0;
    for (int i = 0; i < r->n; i++)
        if (r->choices[i].finish == MODEL_FINISH_NONE && r->choices[i].n_hist > hist) hist = r->choices[i].n_hist;
    if (hist >= r->max_tokens) hist = r->max_tokens - 1;
    sched_policy_req pr = {r->n_prompt + hist, r->max_tokens - hist, r->n, r->avoid,
                           r->prefill_on, r->decode_on,
                           !r->tls_set ? -1 : r->tls_on ? r->tls_p.block_budget : 0,
                           /* the other requests waiting (r among them once it is queued) */
                           r->qprev || r->qnext || s->wait_head == r ? s->n_waiting - 1 : s->n_waiting};
    return pr;
}

/* ---------------------------------------------------------------- dispatch */

static void post_placed(sched *s, sched_req *r)
{
    sched_node *n = sched_node_new(0);
    if (!n) return; /* the PLACED notice is informational; the request still runs */
    n->kind = SCHED_NODE_EVENT;
    n->req = r;
    n->ev.type = SCHED_EV_PLACED;
    n->ev.t = sched_now();
    n->ev.prefill_dev = s->dev[r->dev_prefill].info0.name;
    n->ev.decode_dev = s->dev[r->dev_decode].info0.name;
    n->ev.moves = r->moves;
    if (r->moves && r->last_fail_dev >= 0) {
        n->ev.failed_dev = s->dev[r->last_fail_dev].info0.name;
        n->ev.failed_status = r->last_fail_status;
    }
    sched_post(s, n);
}

/* A request that ends on the loop side (never reached a worker): deliver the error now. */
static void fail_waiting(sched *s, sched_req *r, int status, const char *msg)
{
    queue_unlink(s, r);
    if (!r->cancelled && r->cb) {
        sched_event ev = {.type = SCHED_EV_ERROR, .status = status, .message = msg, .t = sched_now()};
        r->cancelled = 1;
        r->cb(r->ctx, &ev);
    }
    sched_req_free(r);
}

static void start(sched *s, sched_req *r)
{
    sched_book_entry *e = &r->be;
    queue_unlink(s, r);
    r->state = SCHED_REQ_RUNNING;
    r->dev_prefill = r->w_prefill = e->prefill;
    r->dev_decode = r->w_decode = e->decode;
    r->w_split = e->split;
    r->w_placement = ++r->placement;
    atomic_store(&r->import_failed, 0);
    s->n_running++;
    s->dev[e->prefill].prefills++;
    s->dev[e->decode].decodes++;
    if (e->split) s->placements_split++;
    else if (s->n_cards) s->placements_fallback++;
    else s->placements_local++;
    post_placed(s, r);
    for (int i = 0; i < r->n; i++) r->choices[i].w_open = r->choices[i].finish == MODEL_FINISH_NONE;
    if (e->split) {
        /* the card first: its sequences are reserved before any chunk can reach it */
        r->t_attach = (sched_task){.kind = SCHED_TASK_ATTACH, .r = r};
        sched_worker_push(&s->dev[e->decode], &r->t_attach);
    }
    r->t_run = (sched_task){.kind = SCHED_TASK_RUN, .r = r};
    sched_worker_push(&s->dev[e->prefill], &r->t_run);
}

/* Places waiting requests, head first, until the head has to wait (strict FCFS). */
static void dispatch(sched *s)
{
    while (s->wait_head && !s->stopping) {
        sched_req *r = s->wait_head;
        sched_book_refresh(s);
        sched_policy_req pr = policy_req(s, r);
        enum sched_place res = sched_book_place(&s->book, &pr, &r->be);
        if (res == SCHED_PLACE_WAIT) break;
        if (res == SCHED_PLACE_NEVER) {
            if (r->last_fail_status) {
                char msg[ACCEL_NAME_MAX + 200]; /* a device name and a status */
                snprintf(msg, sizeof msg, "%s failed (%s) and no other device can take the request",
                         s->dev[r->last_fail_dev].info0.name, sched_strerror(r->last_fail_status));
                fail_waiting(s, r, r->last_fail_status, msg);
            } else {
                fail_waiting(s, r, SCHED_ERR_NO_DEVICE, "no healthy device can serve this request");
            }
            continue;
        }
        start(s, r);
    }
}

void sched_dispatch(sched *s)
{
    dispatch(s);
}

static void deadline_tick(uv_timer_t *t)
{
    sched *s = t->data;
    double now = sched_now();
    /* A callback may cancel other waiting requests: rescan from the head after each failure. */
    for (sched_req *r = s->wait_head; r;) {
        if (r->deadline > 0 && now >= r->deadline) {
            fail_waiting(s, r, SCHED_ERR_TIMEOUT, "the request's deadline passed while it waited");
            r = s->wait_head;
        } else {
            r = r->qnext;
        }
    }
    if (!s->wait_head) uv_timer_stop(&s->timer);
}

static void arm_deadlines(sched *s)
{
    if (s->wait_head && !uv_is_active((uv_handle_t *)&s->timer))
        uv_timer_start(&s->timer, deadline_tick, SCHED_DEADLINE_TICK_MS, SCHED_DEADLINE_TICK_MS);
}

/* ---------------------------------------------------------------- events */

static void deliver(sched_req *r, const sched_event *ev)
{
    if (!r->cancelled && r->cb) r->cb(r->ctx, ev);
}

/* The worker gave r up after a failure: queue it again, or fail it when it moved too often. */
static void on_move(sched *s, sched_req *r, int dev, int status)
{
    sched_book_release(&s->book, &r->be);
    s->n_running--;
    note_failure(s, dev, status);
    if (dev >= 0 && dev < s->n_devs) s->dev[dev].failovers++;
    if (r->cancelled) { /* the client left meanwhile */
        sched_req_free(r);
        return;
    }
    r->moves++;
    r->last_fail_dev = dev;
    r->last_fail_status = status;
    if (dev >= 0 && dev < 32) r->avoid |= 1u << dev;
    if (r->moves > SCHED_MAX_MOVES) {
        s->moves_failed++;
        char msg[ACCEL_NAME_MAX + 200]; /* a device name and a status */
        snprintf(msg, sizeof msg, "the request failed on %d devices; the last, %s: %s", r->moves,
                 s->dev[dev].info0.name, sched_strerror(status));
        sched_event ev = {.type = SCHED_EV_ERROR, .status = status, .message = msg, .t = sched_now()};
        deliver(r, &ev);
        sched_req_free(r);
        return;
    }
    s->moves++;
    r->state = SCHED_REQ_WAITING;
    r->dev_prefill = r->dev_decode = -1;
    r->moved = 1;
    r->wnext = r->anext = NULL;
    queue_insert(s, r);
    arm_deadlines(s);
}

/* Preempted for memory: not a failure of anything — queued again by its arrival order, with its
 * generated tokens (the next placement prefills prompt + generated, mostly from the cache). */
static void on_preempt(sched *s, sched_req *r)
{
    sched_book_release(&s->book, &r->be);
    s->n_running--;
    if (r->cancelled) {
        sched_req_free(r);
        return;
    }
    r->state = SCHED_REQ_WAITING;
    r->dev_prefill = r->dev_decode = -1;
    r->moved = 1;
    r->wnext = r->anext = NULL;
    queue_insert(s, r);
    arm_deadlines(s);
}

static void on_final(sched *s, sched_node *n)
{
    sched_req *r = n->req;
    if (n->kind == SCHED_NODE_FINAL && n->ev.type == SCHED_EV_DONE) {
        note_success(s, r->dev_prefill);
        note_success(s, r->dev_decode);
    } else if (n->kind == SCHED_NODE_FINAL && sched_status_movable(n->ev.status)) {
        note_failure(s, n->dev, n->ev.status);
    }
    sched_book_release(&s->book, &r->be);
    s->n_running--;
    if (n->kind == SCHED_NODE_FINAL) deliver(r, &n->ev);
    r->cancelled = 1;
    sched_req_free(r);
}

void sched_on_async(uv_async_t *a)
{
    sched *s = a->data;
    pthread_mutex_lock(&s->ev_mu);
    sched_node *n = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    pthread_mutex_unlock(&s->ev_mu);
    int freed = 0;
    while (n) {
        sched_node *next = n->next;
        sched_req *r = n->req;
        switch (n->kind) {
        case SCHED_NODE_WARM:
            if (!s->dev[n->dev].late && s->warm_pending > 0 && --s->warm_pending == 0 && s->on_warm) {
                int ok = 0;
                for (int i = 0; i < s->n_devs; i++) ok |= atomic_load(&s->dev[i].warm) == 1;
                s->on_warm(s->warm_ctx, ok);
            }
            freed = 1; /* devices became usable */
            break;
        case SCHED_NODE_EVENT: deliver(r, &n->ev); break;
        case SCHED_NODE_PREFILLED:
            if (n->placement == r->placement) sched_book_prefilled(&s->book, &r->be);
            freed = 1;
            break;
        case SCHED_NODE_MOVE:
            on_move(s, r, n->dev, n->status);
            freed = 1;
            break;
        case SCHED_NODE_PREEMPT:
            on_preempt(s, r);
            freed = 1;
            break;
        case SCHED_NODE_FINAL:
        case SCHED_NODE_RELEASE:
            on_final(s, n);
            freed = 1;
            break;
        }
        free(n);
        n = next;
    }
    if (freed) dispatch(s);
}

/* ---------------------------------------------------------------- public */

int sched_submit(sched *s, const sched_params *p, sched_event_cb cb, void *ctx, sched_req **out,
                 char *err, size_t errlen)
{
    *out = NULL;
    if (s->stopping) {
        snprintf(err, errlen, "the scheduler is stopping");
        return SCHED_ERR_STOPPED;
    }
    const model_config *mc = &s->m->cfg;
    if (p->n_prompt < 1 || p->max_tokens < 1 || p->n < 1 || p->n > MODEL_MAX_CHOICES) {
        snprintf(err, errlen, "a request needs a prompt, max_tokens >= 1 and 1 <= n <= %d", MODEL_MAX_CHOICES);
        return SCHED_ERR_INVALID;
    }
    if ((long long)p->n_prompt + p->max_tokens > model_context_limit(mc)) {
        snprintf(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceed the context of %d", p->n_prompt, p->max_tokens, model_context_limit(mc));
        return SCHED_ERR_TOO_LARGE;
    }
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab) {
            snprintf(err, errlen, "prompt token %d is out of range [0, %d)", p->prompt[i], s->vocab);
            return SCHED_ERR_INVALID;
        }
    /* the one check of a sparse request's parameters: the message starts with the key */
    if (p->sparse && sparse_params_check(&p->sparse->p, err, errlen, NULL)) return SCHED_ERR_INVALID;
    if (p->decode_sparse_set && p->decode_sparse &&
        sparse_tls_params_check(p->decode_sparse, 0, err, errlen))
        return SCHED_ERR_INVALID;
    sched_req *r = calloc(1, sizeof *r);
    if (r) r->prompt = malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    if (r) r->choices = calloc((size_t)p->n, sizeof *r->choices);
    if (!r || !r->prompt || !r->choices) {
        if (r) sched_req_free(r);
        snprintf(err, errlen, "out of memory");
        return SCHED_ERR_NOMEM;
    }
    r->s = s;
    r->cb = cb;
    r->ctx = ctx;
    memcpy(r->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->n = p->n;
    r->no_cache = p->no_prefix_cache != 0;
    r->logprobs = p->sampling.logprobs;
    r->deadline = p->deadline;
    r->prefill_on = p->prefill_on;
    r->decode_on = p->decode_on;
    if (p->sparse && !p->prompt_logprobs) {
        r->has_sparse = 1;
        r->sparse = *p->sparse;
    }
    if (p->prompt_logprobs) {
        r->no_cache = 1;
        r->prompt_top = p->prompt_top_logprobs < 0 ? 0
                        : p->prompt_top_logprobs > MODEL_MAX_TOP_LOGPROBS ? MODEL_MAX_TOP_LOGPROBS
                                                                           : p->prompt_top_logprobs;
        if (!(r->plp = calloc((size_t)p->n_prompt, sizeof *r->plp))) {
            sched_req_free(r);
            return SCHED_ERR_NOMEM;
        }
    }
    if (p->decode_sparse_set) {
        r->tls_set = 1;
        r->tls_on = p->decode_sparse != NULL;
        if (p->decode_sparse) r->tls_p = *p->decode_sparse;
    }
    r->t_arrival = sched_now();
    r->dev_prefill = r->dev_decode = r->last_fail_dev = -1;
    r->state = SCHED_REQ_WAITING;
    sched_book_entry_init(&r->be);
    for (int i = 0; i < p->n; i++) {
        if (sched_choice_init(&r->choices[i], s, p, i, err, errlen) < 0) {
            sched_req_free(r);
            return SCHED_ERR_INVALID;
        }
    }
    /* Admission (after validation: a bad request is a 400 even when the queue is full): can it
     * ever run, and may it wait? */
    sched_book_refresh(s);
    sched_policy_req pr = policy_req(s, r);
    sched_placement pl;
    enum sched_place res = sched_policy_place(s->book.dev, s->n_devs, &s->book.opts, &pr, &pl);
    if (res == SCHED_PLACE_NEVER) {
        int serve = sched_policy_can_serve(s->book.dev, s->n_devs, &s->book.opts);
        snprintf(err, errlen, serve ? "the request needs more KV memory or sequences than any device has"
                                    : "no healthy device");
        sched_req_free(r);
        return serve ? SCHED_ERR_TOO_LARGE : SCHED_ERR_NO_DEVICE;
    }
    if ((s->wait_head || res == SCHED_PLACE_WAIT) && s->n_waiting >= s->cfg.max_waiting) {
        snprintf(err, errlen, "%d requests are already waiting", s->n_waiting);
        sched_req_free(r);
        return SCHED_ERR_QUEUE_FULL;
    }
    r->seqno = s->next_seqno++;
    queue_insert(s, r);
    *out = r;
    dispatch(s);
    arm_deadlines(s);
    return SCHED_OK;
}

static void wake(sched_dev *d)
{
    pthread_mutex_lock(&d->mu);
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void sched_cancel(sched *s, sched_req *r)
{
    if (!r || r->cancelled) return;
    r->cancelled = 1;
    if (r->state == SCHED_REQ_WAITING) {
        queue_unlink(s, r);
        sched_req_free(r);
        return;
    }
    __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
    wake(&s->dev[r->dev_prefill]);
    if (r->dev_decode != r->dev_prefill) wake(&s->dev[r->dev_decode]);
}

void sched_req_get_info(const sched_req *r, sched_req_info *out)
{
    memset(out, 0, sizeof *out);
    out->state = r->state;
    if (r->state == SCHED_REQ_RUNNING) {
        out->prefill_dev = r->s->dev[r->dev_prefill].info0.name;
        out->decode_dev = r->s->dev[r->dev_decode].info0.name;
    }
    out->n_prompt = r->n_prompt;
    out->max_tokens = r->max_tokens;
    out->n = r->n;
    out->generated = atomic_load(&((sched_req *)r)->generated);
    out->t_arrival = r->t_arrival;
}
