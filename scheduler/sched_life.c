/* scheduler/sched_life.c — a scheduler's start and stop, its statistics, and whether it can
 * serve at all. See sched.h.
 *
 * Stopping (sched_free): every worker is told to stop and joined. Each releases what it owns
 * (sched_worker.c stop_all: RELEASE nodes for its requests; a card frees the sequences of
 * requests still attached). What is left afterwards is the loop's, and no worker runs any more,
 * so the loop may call into the devices itself: tasks still in inboxes (a RUN never started, a
 * HANDOVER never taken — whose card sequences it frees — a CHUNK never imported), the event
 * queue's nodes, and the waiting queue. */
#include "scheduler/sched_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds since a CLOCK_MONOTONIC stamp in ns (0: none). */
static double idle_since(uint64_t ns)
{
    if (!ns) return 0;
    int64_t d = sched_now_ns() - (int64_t)ns;
    return d > 0 ? (double)d / 1e9 : 0;
}

void sched_get_stats(sched *s, sched_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n_waiting = s->n_waiting;
    out->n_running = s->n_running;
    out->n_devices = s->n_devs;
    out->placements_split = s->placements_split;
    out->placements_fallback = s->placements_fallback;
    out->placements_local = s->placements_local;
    out->moves = s->moves;
    out->moves_failed = s->moves_failed;
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        sched_dev_stats *o = &out->dev[i];
        accel_get_info(d->dev, &o->info);
        if (d->mark > (int)o->info.health) o->info.health = (enum accel_health)d->mark;
        o->running = s->book.dev[i].running;
        o->decodes = d->decodes;
        o->prefills = d->prefills;
        o->failovers = d->failovers;
        o->steps = atomic_load(&d->steps);
        o->tokens = atomic_load(&d->tokens);
        o->prefill_chunks = atomic_load(&d->prefill_chunks);
        o->prefill_split_calls = atomic_load(&d->prefill_split_calls);
        o->prefill_over_calls = atomic_load(&d->prefill_over_calls);
        o->prefill_over_seconds = (double)atomic_load(&d->prefill_over_ns) / 1e9;
        o->kv_chunks = atomic_load(&d->kv_chunks);
        o->kv_bytes = atomic_load(&d->kv_bytes);
        o->kv_corrupt = atomic_load(&d->kv_corrupt);
        o->busy_seconds = (double)atomic_load(&d->busy_ns) / 1e9;
        o->last_progress = (double)atomic_load(&d->progress_ns) / 1e9;
        o->in_step = atomic_load(&d->in_step);
        o->warm = atomic_load(&d->warm) == 1;
        o->prefill_tokens = atomic_load(&d->prefill_tokens);
        o->preemptions = atomic_load(&d->preemptions);
        o->forks = atomic_load(&d->forks);
        if (d->pc) {
            const sched_pcache_stats *p = sched_pcache_get_stats(d->pc);
            o->pc_queries = atomic_load(&p->queries_tokens);
            o->pc_hits = atomic_load(&p->hit_tokens);
            o->pc_host_hits = atomic_load(&p->host_hit_tokens);
            o->pc_evictions = atomic_load(&p->evictions);
            o->pc_host_saves = atomic_load(&p->host_saves);
            o->pc_host_dropped = atomic_load(&p->host_dropped);
            o->pc_holders = atomic_load(&p->holders);
            o->pc_host_entries = atomic_load(&p->host_entries);
            o->pc_host_bytes = atomic_load(&p->host_bytes);
            o->pc_host_budget = p->host_budget;
            o->pc_dev_next_blocks = atomic_load(&p->dev_next_blocks);
            o->pc_host_next_blocks = atomic_load(&p->host_next_blocks);
            o->pc_dev_next_idle_s = idle_since(atomic_load(&p->dev_next_used_ns));
            o->pc_host_next_idle_s = idle_since(atomic_load(&p->host_next_used_ns));
        }
    }
}

int sched_can_serve(sched *s, const char **why)
{
    sched_book_refresh(s);
    int ok = sched_policy_can_serve(s->book.dev, s->n_devs, &s->book.opts);
    if (why) {
        int prefill = 0, decode = 0;
        for (int i = 0; i < s->n_devs; i++) {
            const sched_policy_dev *v = &s->book.dev[i];
            if (v->health == ACCEL_HEALTH_FAILED) continue;
            prefill |= (v->caps & ACCEL_CAP_PREFILL) != 0 &&
                       (v->kind != ACCEL_KIND_FPGA || s->book.opts.fpga_prefill);
            decode |= (v->caps & ACCEL_CAP_DECODE) != 0;
        }
        *why = ok ? NULL : !prefill ? "no healthy device can prefill" : !decode ? "no healthy device can decode"
                                                                        : "no healthy device pair can serve a request";
    }
    return ok;
}

/* An FPGA decode device: a placement in place beside one is a fallback (sched_stats). */
static int is_card(const accel_info *info)
{
    const unsigned card = ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT;
    return info->kind == ACCEL_KIND_FPGA && (info->caps & card) == card;
}

/* Slot i of the scheduler for dev: its book entry, its inbox, its prefix cache (loop thread;
 * its worker not started yet). */
static void dev_setup(sched *s, int i, accel_dev *dev)
{
    sched_dev *d = &s->dev[i];
    d->s = s;
    d->index = i;
    d->dev = dev;
    accel_get_info(dev, &d->info0);
    sched_policy_dev *v = &s->book.dev[i];
    v->kind = d->info0.kind;
    v->caps = d->info0.caps;
    v->health = ACCEL_HEALTH_FAILED; /* until warm */
    v->mem_total = d->info0.mem_total;
    v->kv_bytes_per_token = d->info0.kv_bytes_per_token;
    v->block_tokens = d->info0.caps & ACCEL_CAP_PAGED ? d->info0.kv_block_tokens : 0;
    v->max_running = s->cfg.max_running;
    v->max_batch = d->info0.max_batch > 0 ? d->info0.max_batch : 1;
    v->offload_bytes = d->info0.offload_bytes;
    v->resident_per_token = d->info0.resident_per_token;
    v->resident_per_block = d->info0.resident_per_block;
    v->resident_default_blocks = d->info0.resident_default_blocks;
    v->offload_any = d->info0.offload_any;
    v->offload_per_token = d->info0.offload_per_token;
    /* the decode cost by batch, where the device describes one: the placement weighs it */
    if (d->info0.decode_curve.n > 0 && d->info0.decode_curve.n <= ACCEL_CURVE_MAX)
        v->curve = d->info0.decode_curve;
    if (is_card(&d->info0)) s->n_cards++;
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&d->progress_ns, sched_now_ns());
    /* the prefix cache of a paged device; the salt: the model's fingerprint (its config:
     * dtype, rope scaling and the rest that changes the KV) */
    if (!s->cfg.no_prefix_cache) {
        uint64_t salt;
        memcpy(&salt, s->m->fingerprint, sizeof salt);
        d->pc = sched_pcache_new(dev, salt, s->cfg.host_cache_bytes);
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
    if (s->cfg.tbt_budget_ms < 0) s->cfg.tbt_budget_ms = 0;
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
    uv_async_init(loop, &s->async, sched_on_async);
    s->async.data = s;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    s->handles_open = 2;
    s->n_devs = n;
    s->warm_pending = n;
    s->book.n = n;
    s->book.opts.fpga_prefill = s->cfg.fpga_prefill;
    s->book.opts.chunk_budget_s = s->cfg.tbt_budget_ms > 0 ? s->cfg.tbt_budget_ms / 1e3 : 0;
    s->book.opts.ttft_slo_s = s->cfg.ttft_target_ms > 0 ? s->cfg.ttft_target_ms / 1e3 : 0;
    for (int i = 0; i < n; i++) dev_setup(s, i, devs[i]);
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

int sched_add_device(sched *s, accel_dev *dev, char *err, size_t errlen)
{
    if (s->stopping) {
        snprintf(err, errlen, "the scheduler is stopping");
        return -1;
    }
    if (s->n_devs >= SCHED_MAX_DEVICES || s->n_devs >= SCHED_BOOK_MAX_DEVICES) {
        snprintf(err, errlen, "at most %d devices", SCHED_MAX_DEVICES);
        return -1;
    }
    if (accel_model(dev) != s->m) {
        snprintf(err, errlen, "the device was opened for another model");
        return -1;
    }
    int i = s->n_devs;
    dev_setup(s, i, dev);
    sched_dev *d = &s->dev[i];
    d->late = 1;
    if (pthread_create(&d->thread, NULL, sched_worker_main, d) != 0) {
        snprintf(err, errlen, "cannot start the worker thread of %s", d->info0.name);
        if (is_card(&d->info0)) s->n_cards--; /* dev_setup counted it; it is not added */
        sched_pcache_free(d->pc);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        memset(d, 0, sizeof *d);
        return -1;
    }
    d->started = 1;
    /* seen by the loop thread's next placement; no worker reads the device count */
    s->n_devs++;
    s->book.n++;
    return i;
}

static void on_close(uv_handle_t *h)
{
    sched *s = h->data;
    if (--s->handles_open == 0) {
        sched_token_table_deinit(&s->tokens);
        model_gvocab_free(s->gvocab);
        pthread_mutex_destroy(&s->ev_mu);
        free(s);
    }
}

/* Tasks left in the inboxes once every worker has stopped. The requests are freed only after
 * every inbox was walked: an ATTACH task lives inside its request. */
static void drain_inboxes(sched *s)
{
    sched_req *doomed = NULL;
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        sched_task *t = d->inbox_head;
        d->inbox_head = d->inbox_tail = NULL;
        while (t) {
            sched_task *next = t->next;
            sched_req *r = t->r;
            switch (t->kind) {
            case SCHED_TASK_RUN: /* never started: nobody else holds it */
                r->qnext = doomed;
                doomed = r;
                break;
            case SCHED_TASK_HANDOVER: /* the prefill worker let go of it, the card never took it */
                for (int c = 0; c < r->n; c++) sched_choice_deinit(&r->choices[c], d->dev, SCHED_SEQ_ALL, 0);
                r->qnext = doomed;
                doomed = r;
                break;
            case SCHED_TASK_ATTACH: /* its RUN or HANDOVER (or its prefill worker) frees it */
            case SCHED_TASK_CHUNK: break;
            }
            if (t->heap) free(t);
            t = next;
        }
    }
    while (doomed) {
        sched_req *r = doomed;
        doomed = r->qnext;
        sched_req_free(r);
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
    }
    drain_inboxes(s);
    for (int i = 0; i < s->n_devs; i++) {
        sched_dev *d = &s->dev[i];
        sched_pcache_free(d->pc); /* its holders: the devices outlive the scheduler */
        d->pc = NULL;
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    /* The workers posted a node for everything they held; free those requests and the waiting
     * ones without callbacks. */
    sched_node *n = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    while (n) {
        sched_node *next = n->next;
        if (n->kind == SCHED_NODE_FINAL || n->kind == SCHED_NODE_RELEASE || n->kind == SCHED_NODE_MOVE ||
            n->kind == SCHED_NODE_PREEMPT)
            sched_req_free(n->req);
        free(n);
        n = next;
    }
    while (s->wait_head) {
        sched_req *r = s->wait_head;
        s->wait_head = r->qnext;
        sched_req_free(r);
    }
    s->n_waiting = 0;
    uv_close((uv_handle_t *)&s->async, on_close);
    uv_close((uv_handle_t *)&s->timer, on_close);
}
