/* scheduler/sched_core.c — the loop-thread side of the scheduler: admission, the FCFS waiting
 * queue, dispatch through the placement policy, cancellation, event delivery and statistics.
 * See sched.h for the contract and sched_internal.h for who owns what. */
#include "scheduler/sched_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often waiting requests are checked against their deadlines (running ones are checked by
 * their worker every step). A deadline is honoured to within this much while queued. */
#define SCHED_DEADLINE_TICK_MS 250

const char *sched_strerror(int st)
{
    switch (st) {
    case SCHED_OK: return "ok";
    case SCHED_ERR_QUEUE_FULL: return "the waiting queue is full";
    case SCHED_ERR_INVALID: return "invalid parameters";
    case SCHED_ERR_NO_DEVICE: return "no healthy device";
    case SCHED_ERR_TOO_LARGE: return "the request does not fit any device";
    case SCHED_ERR_TIMEOUT: return "the request's deadline passed";
    case SCHED_ERR_NOMEM: return "out of memory";
    case SCHED_ERR_STOPPED: return "the scheduler is stopping";
    }
    return accel_strerror(st);
}

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
    sched_node *n = calloc(1, sizeof *n + data_bytes + 1);
    return n;
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

static void req_free(sched_req *r)
{
    if (r->choices) {
        for (int i = 0; i < r->n; i++) sched_choice_deinit(&r->choices[i], NULL);
        free(r->choices);
    }
    free(r->prompt);
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

/* The policy's view of every device right now. Devices still warming up, or whose warm-up
 * failed, count as failed: nothing is placed on them. */
static void policy_views(sched *s, sched_policy_dev *v)
{
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        accel_info info;
        accel_get_info(d->dev, &info);
        v[i].kind = info.kind;
        v[i].caps = info.caps;
        v[i].health = atomic_load(&d->warm) == 1 ? info.health : ACCEL_HEALTH_FAILED;
        v[i].mem_total = info.mem_total;
        v[i].mem_committed = d->committed;
        v[i].kv_bytes_per_token = info.kv_bytes_per_token;
        v[i].running = d->running;
        v[i].max_running = s->cfg.max_running;
    }
}

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
    req_free(r);
}

/* Places waiting requests, head first, until the head has to wait (strict FCFS). */
static void dispatch(sched *s)
{
    sched_policy_dev v[SCHED_MAX_DEVICES];
    while (s->wait_head && !s->stopping) {
        sched_req *r = s->wait_head;
        policy_views(s, v);
        sched_policy_req pr = {r->n_prompt, r->max_tokens, r->n, 0};
        sched_placement pl;
        enum sched_place res = sched_policy_place(v, s->n_devs, NULL, &pr, &pl);
        if (res == SCHED_PLACE_WAIT) break;
        if (res == SCHED_PLACE_NEVER) {
            fail_waiting(s, r, SCHED_ERR_NO_DEVICE, "no healthy device can serve this request");
            continue;
        }
        /* This core runs prefill and decode on one device; a policy that splits them needs the
         * KV hand-over of issue 7 first. */
        sched_dev *d = &s->dev[pl.decode];
        queue_unlink(s, r);
        r->state = SCHED_REQ_RUNNING;
        r->dev_prefill = pl.decode;
        r->dev_decode = pl.decode;
        r->committed = sched_policy_kv_bytes(&v[pl.decode], &pr);
        d->committed += r->committed;
        d->running += r->n;
        s->n_running++;
        post_placed(s, r);
        pthread_mutex_lock(&d->mu);
        r->wnext = NULL;
        if (d->inbox_tail) d->inbox_tail->wnext = r;
        else d->inbox_head = r;
        d->inbox_tail = r;
        pthread_cond_signal(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
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

/* ---------------------------------------------------------------- events */

static void deliver(sched_req *r, const sched_event *ev)
{
    if (!r->cancelled && r->cb) r->cb(r->ctx, ev);
}

static void on_async(uv_async_t *a)
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
            if (s->warm_pending > 0 && --s->warm_pending == 0 && s->on_warm) {
                int ok = 0;
                for (int i = 0; i < s->n_devs; i++) ok |= atomic_load(&s->dev[i].warm) == 1;
                s->on_warm(s->warm_ctx, ok);
            }
            freed = 1; /* devices became usable */
            break;
        case SCHED_NODE_EVENT: deliver(r, &n->ev); break;
        case SCHED_NODE_FINAL:
        case SCHED_NODE_RELEASE: {
            sched_dev *d = &s->dev[r->dev_decode];
            d->running -= r->n;
            d->committed -= r->committed;
            s->n_running--;
            if (n->kind == SCHED_NODE_FINAL) deliver(r, &n->ev);
            r->cancelled = 1;
            req_free(r);
            freed = 1;
            break;
        }
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
    if ((long long)p->n_prompt + p->max_tokens > mc->max_pos) {
        snprintf(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceed the context of %d", p->n_prompt, p->max_tokens, mc->max_pos);
        return SCHED_ERR_TOO_LARGE;
    }
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab) {
            snprintf(err, errlen, "prompt token %d is out of range [0, %d)", p->prompt[i], s->vocab);
            return SCHED_ERR_INVALID;
        }
    sched_req *r = calloc(1, sizeof *r);
    if (r) r->prompt = malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    if (r) r->choices = calloc((size_t)p->n, sizeof *r->choices);
    if (!r || !r->prompt || !r->choices) {
        if (r) req_free(r);
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
    r->logprobs = p->sampling.logprobs;
    r->deadline = p->deadline;
    r->t_arrival = sched_now();
    r->dev_prefill = r->dev_decode = -1;
    r->state = SCHED_REQ_WAITING;
    for (int i = 0; i < p->n; i++) {
        if (sched_choice_init(&r->choices[i], s, p, i, err, errlen) < 0) {
            req_free(r);
            return SCHED_ERR_INVALID;
        }
    }
    /* Admission (after validation: a bad request is a 400 even when the queue is full): can it
     * ever run, and may it wait? */
    sched_policy_dev v[SCHED_MAX_DEVICES];
    policy_views(s, v);
    sched_policy_req pr = {p->n_prompt, p->max_tokens, p->n, 0};
    sched_placement pl;
    enum sched_place res = sched_policy_place(v, s->n_devs, NULL, &pr, &pl);
    if (res == SCHED_PLACE_NEVER) {
        int healthy = 0;
        for (int i = 0; i < s->n_devs; i++) healthy |= v[i].health != ACCEL_HEALTH_FAILED;
        snprintf(err, errlen, healthy ? "the request needs more KV memory or sequences than any device has"
                                      : "no healthy device");
        req_free(r);
        return healthy ? SCHED_ERR_TOO_LARGE : SCHED_ERR_NO_DEVICE;
    }
    if ((s->wait_head || res == SCHED_PLACE_WAIT) && s->n_waiting >= s->cfg.max_waiting) {
        snprintf(err, errlen, "%d requests are already waiting", s->n_waiting);
        req_free(r);
        return SCHED_ERR_QUEUE_FULL;
    }
    r->qprev = s->wait_tail;
    if (s->wait_tail) s->wait_tail->qnext = r;
    else s->wait_head = r;
    s->wait_tail = r;
    s->n_waiting++;
    *out = r;
    dispatch(s);
    if (s->wait_head && !uv_is_active((uv_handle_t *)&s->timer))
        uv_timer_start(&s->timer, deadline_tick, SCHED_DEADLINE_TICK_MS, SCHED_DEADLINE_TICK_MS);
    return SCHED_OK;
}

void sched_cancel(sched *s, sched_req *r)
{
    if (!r || r->cancelled) return;
    r->cancelled = 1;
    if (r->state == SCHED_REQ_WAITING) {
        queue_unlink(s, r);
        req_free(r);
        return;
    }
    __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
    sched_dev *d = &s->dev[r->dev_decode];
    pthread_mutex_lock(&d->mu);
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
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

void sched_get_stats(sched *s, sched_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n_waiting = s->n_waiting;
    out->n_running = s->n_running;
    out->n_devices = s->n_devs;
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        sched_dev_stats *o = &out->dev[i];
        accel_get_info(d->dev, &o->info);
        o->running = d->running;
        o->steps = atomic_load(&d->steps);
        o->tokens = atomic_load(&d->tokens);
        o->busy_seconds = (double)atomic_load(&d->busy_ns) / 1e9;
        o->last_progress = (double)atomic_load(&d->progress_ns) / 1e9;
        o->in_step = atomic_load(&d->in_step);
        o->warm = atomic_load(&d->warm) == 1;
    }
}

sched *sched_new(uv_loop_t *loop, accel_dev *const *devs, int n, const model_tok *tok,
                 const sched_config *cfg, void (*on_warm)(void *ctx, int ok), void *warm_ctx,
                 char *err, size_t errlen)
{
    if (n < 1 || n > SCHED_MAX_DEVICES) {
        snprintf(err, errlen, "between 1 and %d devices, got %d", SCHED_MAX_DEVICES, n);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->cfg = *cfg;
    if (s->cfg.max_running < 1) s->cfg.max_running = 1;
    s->tok = tok;
    s->m = accel_model(devs[0]);
    s->vocab = s->m->cfg.vocab;
    s->on_warm = on_warm;
    s->warm_ctx = warm_ctx;
    pthread_mutex_init(&s->ev_mu, NULL);
    if (sched_token_table_init(&s->tokens, tok, s->vocab) < 0) {
        snprintf(err, errlen, "out of memory");
        pthread_mutex_destroy(&s->ev_mu);
        free(s);
        return NULL;
    }
    uv_async_init(loop, &s->async, on_async);
    s->async.data = s;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    s->handles_open = 2;
    s->n_devs = n;
    s->warm_pending = n;
    for (int i = 0; i < n; i++) {
        sched_dev *d = &s->dev[i];
        d->s = s;
        d->index = i;
        d->dev = devs[i];
        accel_get_info(devs[i], &d->info0);
        pthread_mutex_init(&d->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&d->cv, &ca);
        pthread_condattr_destroy(&ca);
        atomic_store(&d->progress_ns, sched_now_ns());
    }
    for (int i = 0; i < n; i++) {
        sched_dev *d = &s->dev[i];
        if (pthread_create(&d->thread, NULL, sched_worker_main, d) != 0) {
            snprintf(err, errlen, "cannot start the worker thread of %s", d->info0.name);
            sched_free(s);
            return NULL;
        }
        d->started = 1;
    }
    return s;
}

static void on_close(uv_handle_t *h)
{
    sched *s = h->data;
    if (--s->handles_open == 0) {
        sched_token_table_deinit(&s->tokens);
        pthread_mutex_destroy(&s->ev_mu);
        free(s);
    }
}

void sched_free(sched *s)
{
    if (!s) return;
    s->stopping = 1;
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_signal(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        if (d->started) pthread_join(d->thread, NULL);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    /* The workers posted a release for everything they held; free those and the waiting
     * requests without callbacks. */
    sched_node *n = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    while (n) {
        sched_node *next = n->next;
        if (n->kind == SCHED_NODE_FINAL || n->kind == SCHED_NODE_RELEASE) req_free(n->req);
        free(n);
        n = next;
    }
    while (s->wait_head) {
        sched_req *r = s->wait_head;
        queue_unlink(s, r);
        req_free(r);
    }
    uv_close((uv_handle_t *)&s->async, on_close);
    uv_close((uv_handle_t *)&s->timer, on_close);
}
