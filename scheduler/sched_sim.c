/* scheduler/sched_sim.c — the discrete-event engine of sched_sim.h.
 *
 * Events, in virtual time order (ties in the order they were scheduled): a request arrives; a
 * device's iteration ends (its effects apply, the FCFS queue is dispatched again, the next
 * iteration is priced); a split request's prefill and KV import are both done (it joins its
 * card's decode set); a client cancels. A device iteration mirrors sched_worker.c: one decode
 * step over every active sequence (in slices of max_batch), then prefill chunks — the whole
 * head job when nothing decodes there, else chunks while the time-between-tokens budget lasts
 * (at least one chunk, so prefills progress). */
#include "scheduler/sched_sim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_req {
    sched_sim_req *pub;
    sched_book_entry be;
    struct sim_req *next; /* the one list it is on: waiting, a prefill queue, an active set */
    int pf_done;          /* prompt tokens prefilled */
    double import_done;   /* split: the last layer of the last chunk is on the card */
    int split;
    double t_last;        /* when its latest token came */
    int split_k, split_layer; /* a layer-split chunk in progress: its tokens, its next layer */
} sim_req;

enum pend_kind { PEND_DONE, PEND_PREFILLED_LOCAL, PEND_PREFILLED_SPLIT };
typedef struct pend {
    sim_req *r;
    enum pend_kind kind;
} pend;

typedef struct sim_dev {
    const sched_sim_dev_model *m;
    sim_req *pf_head, *pf_tail; /* FCFS prefill jobs */
    sim_req *active;            /* decoding here */
    int busy;                   /* an iteration is in flight (or being priced) */
    sched_cost cost[2];         /* the chunk cost the policy learns: dense, sparse (a device has
                                   one sparse method; prompts too short for it price dense) */
    int cost_last;              /* the kind of its last chunk (the book's prefill_fit) */
    sched_share share;          /* the share of its time spent prefilling (the policy's) */
    double share_next;          /* its value at the end of the iteration in flight */
    double link_free;           /* card: when its import lane is free */
    int remote;                 /* another node's device: each decode step is a call from the
                                   clients' node (sched_sim_remote_step_s) */
    pend *pend;                 /* effects of the iteration in flight */
    int n_pend, cap_pend;
    sched_sim_dev_stats st;
} sim_dev;

enum ev_kind { EV_ARRIVE, EV_STEP, EV_HANDOVER, EV_CANCEL };
typedef struct event {
    double t;
    uint64_t seq;
    enum ev_kind kind;
    int dev;
    sim_req *r;
} event;

struct sched_sim {
    sched_sim_config cfg;
    sched_book book;
    sim_dev dev[SCHED_BOOK_MAX_DEVICES];
    double now;
    event *heap;
    int n_ev, cap_ev;
    uint64_t seq;
    sim_req *wait_head, *wait_tail;
    int n_waiting, n_running, n_unfinished;
    sim_req **all;
    int n_all, cap_all;
    int oom;
    double nic_free[SCHED_SIM_MAX_NODES]; /* when each node's NIC has sent what it was given */
};

/* ---------------------------------------------------------------- event heap */

static int ev_less(const event *a, const event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(sched_sim *s, double t, enum ev_kind k, int dev, sim_req *r)
{
    if (s->n_ev == s->cap_ev) {
        int nc = s->cap_ev ? s->cap_ev * 2 : 256;
        event *h = realloc(s->heap, sizeof *h * (size_t)nc);
        if (!h) {
            s->oom = 1;
            return;
        }
        s->heap = h;
        s->cap_ev = nc;
    }
    event e = {t, s->seq++, k, dev, r};
    int i = s->n_ev++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static event pop(sched_sim *s)
{
    event top = s->heap[0], last = s->heap[--s->n_ev];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= s->n_ev) break;
        if (c + 1 < s->n_ev && ev_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!ev_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->n_ev) s->heap[i] = last;
    return top;
}

/* ---------------------------------------------------------------- lists */

static void list_remove(sim_req **head, sim_req **tail, sim_req *r)
{
    sim_req *prev = NULL;
    for (sim_req *x = *head; x; prev = x, x = x->next)
        if (x == r) {
            if (prev) prev->next = x->next;
            else *head = x->next;
            if (tail && *tail == x) *tail = prev;
            x->next = NULL;
            return;
        }
}

static void append(sim_req **head, sim_req **tail, sim_req *r)
{
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}

/* The learned cost of r's chunks on d (dense, or d's sparse method where it prices r sparse). */
static sched_cost *cost_of(sim_dev *d, const sim_req *r)
{
    const sched_sim_dev_model *m = d->m;
    return &d->cost[m->sparse && sched_sim_sparse_factor(m->sparse, &m->shape, r->pub->n_prompt) < 1];
}

/* With a TTFT target, the job the policy prefills next goes to the head of d's queue
 * (sched_policy_next_prefill), as the daemon's worker does (sched_prefill.c). */
static void order_prefills(sched_sim *s, sim_dev *d, double now)
{
    if (!(s->cfg.ttft_slo_s > 0) || !d->pf_head || !d->pf_head->next) return;
    sched_prefill_job q[SCHED_PREFILL_LOOK];
    sim_req *at[SCHED_PREFILL_LOOK];
    int n = 0;
    for (sim_req *r = d->pf_head; r && n < SCHED_PREFILL_LOOK; r = r->next, n++) {
        at[n] = r;
        q[n].waited_s = now - r->pub->arrival;
        q[n].left_s = sched_cost_predict(cost_of(d, r), r->pub->n_prompt - r->pf_done, r->pf_done);
    }
    int i = sched_policy_next_prefill(q, n, s->cfg.ttft_slo_s);
    if (i <= 0) return;
    list_remove(&d->pf_head, &d->pf_tail, at[i]);
    at[i]->next = d->pf_head;
    d->pf_head = at[i];
}

static void add_pend(sched_sim *s, sim_dev *d, sim_req *r, enum pend_kind k)
{
    if (d->n_pend == d->cap_pend) {
        int nc = d->cap_pend ? d->cap_pend * 2 : 16;
        pend *p = realloc(d->pend, sizeof *p * (size_t)nc);
        if (!p) {
            s->oom = 1;
            return;
        }
        d->pend = p;
        d->cap_pend = nc;
    }
    d->pend[d->n_pend++] = (pend){r, k};
}

/* ---------------------------------------------------------------- request ends */

static void finish(sched_sim *s, sim_req *r, int state)
{
    sched_book_release(&s->book, &r->be);
    r->pub->state = state;
    s->n_running--;
    s->n_unfinished--;
    if (state == SCHED_SIM_DONE && s->cfg.on_done) s->cfg.on_done(s->cfg.ctx, s, r->pub);
}

static void wake(sched_sim *s, int i)
{
    if (!s->dev[i].busy) {
        s->dev[i].busy = 1;
        push(s, s->now, EV_STEP, i, NULL);
    }
}

/* ---------------------------------------------------------------- dispatch (strict FCFS) */

/* What the placement's network term sees of another node's device: the network's rate, and
 * its latency plus what the clients' node's NIC still has to send (prefills run there). */
static void refresh_net(sched_sim *s)
{
    const sched_sim_model *m = s->cfg.model;
    double backlog = s->nic_free[0] > s->now ? s->nic_free[0] - s->now : 0;
    for (int i = 0; i < s->cfg.n_devs; i++) {
        if (s->dev[i].m->node == 0) continue;
        s->book.dev[i].ship_bps = m->net_bps;
        s->book.dev[i].ship_s = m->net_s + backlog;
    }
}

static void dispatch(sched_sim *s)
{
    while (s->wait_head) {
        sim_req *r = s->wait_head;
        refresh_net(s);
        sched_policy_req pr = {r->pub->n_prompt, r->pub->n_out, 1, 0, 0, 0, 0, s->n_waiting - 1};
        sched_book before;
        if (s->cfg.on_place) before = s->book;
        enum sched_place res = sched_book_place(&s->book, &pr, &r->be);
        if (res == SCHED_PLACE_WAIT) break;
        s->wait_head = r->next;
        if (!s->wait_head) s->wait_tail = NULL;
        r->next = NULL;
        s->n_waiting--;
        if (res == SCHED_PLACE_NEVER) {
            r->pub->state = SCHED_SIM_REJECTED;
            s->n_unfinished--;
            continue;
        }
        sched_placement pl = {r->be.prefill, r->be.decode};
        if (s->cfg.on_place) s->cfg.on_place(s->cfg.ctx, r->pub, &before, &pl);
        r->pub->state = SCHED_SIM_RUNNING;
        r->pub->t_start = s->now;
        r->pub->prefill_dev = pl.prefill;
        r->pub->decode_dev = pl.decode;
        r->split = r->be.split;
        s->n_running++;
        s->dev[pl.decode].st.decodes++;
        sim_dev *p = &s->dev[pl.prefill];
        append(&p->pf_head, &p->pf_tail, r);
        wake(s, pl.prefill);
    }
}

/* ---------------------------------------------------------------- one device iteration */

/* Ships one prefill call's KV to the card layer by layer — the call ran layers l0 .. l0 + nl - 1
 * of a chunk of k tokens (all L of them unless it was layer-split): layer l is ready when the
 * call has gone through l - l0 + 1 of its layers, and waits for the card's import lane. To
 * another node: to the host over the prefill device's link, then through the node's NIC (one
 * chunk at a time), net_s on the way, then the card's lane. */
static void ship(sched_sim *s, sim_dev *p, sim_req *r, int k, double start, double dur, int l0, int nl)
{
    sim_dev *c = &s->dev[r->be.decode];
    const sched_sim_model *m = s->cfg.model;
    int L = c->m->n_layers > 0 ? c->m->n_layers : 1;
    double bytes = (double)k * (double)c->m->kv_bytes_per_token / L;
    const int from = p->m->node;
    if (nl <= 0 || l0 < 0 || l0 + nl > L) l0 = 0, nl = L;
    if (c->m->node == from) {
        double per = sched_sim_ship_s(p->m, c->m, bytes);
        for (int l = 0; l < nl; l++) {
            double ready = start + dur * (l + 1) / nl;
            double t0 = ready > c->link_free ? ready : c->link_free;
            c->link_free = t0 + per;
        }
    } else {
        double up = sched_sim_hop_s(p->m, bytes), wire = sched_sim_net_wire_s(m, bytes);
        double down = sched_sim_hop_s(c->m, bytes);
        for (int l = 0; l < nl; l++) {
            double host = start + dur * (l + 1) / nl + up;
            double sent = (host > s->nic_free[from] ? host : s->nic_free[from]) + wire;
            s->nic_free[from] = sent;
            double arrived = sent + m->net_s;
            double t0 = arrived > c->link_free ? arrived : c->link_free;
            c->link_free = t0 + down;
        }
    }
    r->import_done = c->link_free;
}

/* The chunk's tokens as the method cuts them (sparse_chunk_len): Tri-shape's fixed chunk beside
 * decodes, and never less than a block left over (FlexPrefill's index takes a chunk's last
 * block); want is the policy's, already in the method's granule. */
static int chunk_len(const sched_sim_sparse *sp, int remaining, int want, int decoding)
{
    if (!sp || sp->block <= 1 || want >= remaining) return want < remaining ? want : remaining;
    if (sp->chunk > 0 && decoding) want = sp->chunk;
    if (want >= remaining) return remaining;
    return remaining - want < sp->block ? remaining : want;
}

static void iterate(sched_sim *s, int di)
{
    sim_dev *d = &s->dev[di];
    const sched_sim_dev_model *m = d->m;
    double t = s->now, dt = 0;
    /* 1. one decode step over the active set, in slices of max_batch */
    if (d->active) {
        int mb = m->max_batch > 0 ? m->max_batch : 1;
        sim_req *x = d->active;
        while (x) {
            sim_req *slice = x;
            int b = 0;
            long long ctx = 0;
            for (; x && b < mb; x = x->next, b++) ctx += x->pub->n_prompt + x->pub->generated;
            double st = sched_sim_decode_s(m, b, ctx);
            /* another node's device waits for the call's round trip too: its next step needs
             * the tokens the clients' node samples from this one's logits */
            double trip = d->remote ? sched_sim_remote_trip_s(s->cfg.model, b) : 0;
            dt += st + trip;
            d->st.decode_s += st;
            d->st.decode_steps++;
            d->st.decode_tokens += (uint64_t)b;
            const double at = t + dt; /* when the client's node has it */
            for (sim_req *y = slice; y != x; y = y->next) {
                y->pub->generated++;
                if (at - y->t_last > y->pub->max_tbt) y->pub->max_tbt = at - y->t_last;
                y->t_last = at;
                if (y->pub->generated == 2) y->pub->t_second = at;
                if (y->pub->generated >= y->pub->n_out) y->pub->t_done = at;
            }
        }
        /* finished sequences leave the batch after the step */
        for (sim_req *y = d->active, *next; y; y = next) {
            next = y->next;
            if (y->pub->generated >= y->pub->n_out) {
                list_remove(&d->active, NULL, y);
                add_pend(s, d, y, PEND_DONE);
            }
        }
    }
    /* 2. prefill work within the budget */
    int decoding = d->active != NULL;
    double budget = s->cfg.tbt_budget_s, spent = 0;
    for (int first = 1; d->pf_head && (first || (decoding && budget > 0 && spent < budget)); first = 0) {
        order_prefills(s, d, t + dt);
        sim_req *r = d->pf_head;
        int remaining = r->pub->n_prompt - r->pf_done;
        sched_cost *cost = cost_of(d, r);
        /* as the worker (sched_prefill.c): sparse chunks in the method's granule, dense ones in
         * whole tiles, the sizes remembered in them; layer-split where the device has it */
        const sched_sim_sparse *sp = sched_sim_prefill_sparse(m, r->pub->n_prompt) ? m->sparse : NULL;
        const int align = !sp ? 1 : sp->chunk > 0 ? sp->chunk : sp->block > 1 ? sp->block : 1;
        cost->grain = sp ? align : SCHED_CHUNK_TILE;
        const int can_split = decoding && (m->caps & ACCEL_CAP_LAYER_SPLIT);
        cost->layer_split = can_split;
        int k;
        if (r->split_k > 0) {
            k = r->split_k; /* a layer-split chunk in progress goes on */
        } else {
            k = sched_policy_chunk(remaining, r->pf_done, align, decoding, first, budget, budget - spent, cost);
            if (k <= 0) break; /* nothing worth its fixed cost fits what is left of the budget */
            k = chunk_len(sp, remaining, k, decoding);
        }
        const int L = m->n_layers > 0 ? m->n_layers : 1, l0 = r->split_k > 0 ? r->split_layer : 0;
        int nl = sched_policy_call_layers(cost, k, r->pf_done, l0, L, can_split, budget, budget - spent, first, NULL, NULL);
        if (nl <= 0) break; /* none of the chunk's layers worth a call fits what is left */
        double ct = sched_sim_prefill_split_s(m, k, r->pf_done, r->pub->n_prompt, nl);
        if (r->split) ship(s, d, r, k, t + dt, ct, l0, nl);
        sched_cost_observe_split(cost, k, r->pf_done, ct, nl, L);
        d->cost_last = (int)(cost - d->cost);
        dt += ct;
        spent += ct;
        d->st.prefill_s += ct;
        d->st.prefill_chunks++;
        if (l0 + nl < L) { /* the chunk goes on in a later call, from layer l0 + nl */
            r->split_k = k;
            r->split_layer = l0 + nl;
            d->st.prefill_split_calls++;
            continue;
        }
        r->split_k = r->split_layer = 0;
        d->st.prefill_tokens += (uint64_t)k;
        r->pf_done += k;
        if (r->pf_done < r->pub->n_prompt) continue;
        /* the prompt is done: the first token comes from its logits */
        d->pf_head = r->next;
        if (!d->pf_head) d->pf_tail = NULL;
        r->next = NULL;
        r->pub->generated = 1;
        r->pub->t_first = r->t_last = t + dt;
        if (r->pub->n_out <= 1) {
            r->pub->t_done = t + dt;
            add_pend(s, d, r, PEND_DONE);
        } else if (r->split) {
            add_pend(s, d, r, PEND_PREFILLED_SPLIT);
            double at = r->import_done > t + dt ? r->import_done : t + dt;
            push(s, at, EV_HANDOVER, r->be.decode, r);
        } else {
            add_pend(s, d, r, PEND_PREFILLED_LOCAL);
        }
    }
    /* the policy's prefill share as of the iteration's end; the book takes it then
     * (apply_pending), as the daemon's worker publishes it after its iteration */
    sched_share_observe(&d->share, t + dt, spent);
    d->share_next = sched_share_value(&d->share);
    if (dt > 0) {
        d->st.busy_s += dt;
        push(s, t + dt, EV_STEP, di, NULL);
    } else {
        d->busy = 0;
    }
}

/* The previous iteration's effects, at its end. */
static void apply_pending(sched_sim *s, sim_dev *d)
{
    int n = d->n_pend;
    d->n_pend = 0;
    s->book.dev[d - s->dev].prefill_share = d->share_next;
    /* the placement's rule d prices a prompt on the cost model of the kind the device ran last
     * (the daemon's book) */
    double *fit = s->book.dev[d - s->dev].prefill_fit;
    fit[0] = d->cost[d->cost_last].a;
    fit[1] = d->cost[d->cost_last].b;
    fit[2] = d->cost[d->cost_last].e;
    for (int i = 0; i < n; i++) {
        sim_req *r = d->pend[i].r;
        if (r->pub->state != SCHED_SIM_RUNNING) continue; /* cancelled meanwhile */
        switch (d->pend[i].kind) {
        case PEND_DONE: finish(s, r, SCHED_SIM_DONE); break;
        case PEND_PREFILLED_SPLIT: sched_book_prefilled(&s->book, &r->be); break;
        case PEND_PREFILLED_LOCAL:
            sched_book_prefilled(&s->book, &r->be);
            r->next = d->active;
            d->active = r;
            break;
        }
    }
}

/* ---------------------------------------------------------------- events */

static void on_cancel(sched_sim *s, sim_req *r)
{
    switch (r->pub->state) {
    case SCHED_SIM_WAITING:
        list_remove(&s->wait_head, &s->wait_tail, r);
        s->n_waiting--;
        r->pub->state = SCHED_SIM_CANCELLED;
        s->n_unfinished--;
        break;
    case SCHED_SIM_RUNNING: {
        sim_dev *p = &s->dev[r->be.prefill], *d = &s->dev[r->be.decode];
        list_remove(&p->pf_head, &p->pf_tail, r);
        list_remove(&d->active, NULL, r);
        finish(s, r, SCHED_SIM_CANCELLED);
        break;
    }
    default: break;
    }
}

static void handle(sched_sim *s, const event *e)
{
    switch (e->kind) {
    case EV_ARRIVE:
        e->r->pub->state = SCHED_SIM_WAITING;
        append(&s->wait_head, &s->wait_tail, e->r);
        s->n_waiting++;
        break;
    case EV_CANCEL: on_cancel(s, e->r); break;
    case EV_HANDOVER:
        if (e->r->pub->state == SCHED_SIM_RUNNING) {
            sim_dev *c = &s->dev[e->dev];
            e->r->next = c->active;
            c->active = e->r;
            wake(s, e->dev);
        }
        break;
    case EV_STEP: apply_pending(s, &s->dev[e->dev]); break;
    }
    dispatch(s);
    if (e->kind == EV_STEP) iterate(s, e->dev);
}

/* ---------------------------------------------------------------- public */

sched_sim *sched_sim_new(const sched_sim_config *cfg, char *err, size_t errlen)
{
    if (!cfg->model || cfg->n_devs < 1 || cfg->n_devs > SCHED_BOOK_MAX_DEVICES ||
        cfg->n_devs > cfg->model->n_devs) {
        snprintf(err, errlen, "between 1 and %d devices", SCHED_BOOK_MAX_DEVICES);
        return NULL;
    }
    sched_sim *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->book.n = cfg->n_devs;
    s->book.opts.fpga_prefill = cfg->fpga_prefill;
    s->book.opts.chunk_budget_s = cfg->tbt_budget_s;
    s->book.opts.ttft_slo_s = cfg->ttft_slo_s;
    for (int i = 0; i < cfg->n_devs; i++) {
        const sched_sim_dev_model *m = &cfg->model->dev[i];
        s->dev[i].m = m;
        s->dev[i].remote = m->node != 0;
        sched_policy_dev *v = &s->book.dev[i];
        v->kind = m->kind;
        v->caps = m->caps;
        v->health = ACCEL_HEALTH_OK;
        v->mem_total = m->mem_kv;
        v->kv_bytes_per_token = m->kv_bytes_per_token;
        v->max_running = m->max_running;
        v->max_batch = m->max_batch;
        if (!cfg->cards_first) sched_sim_dev_curve(m, &v->curve);
    }
    return s;
}

void sched_sim_free(sched_sim *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_all; i++) free(s->all[i]);
    for (int i = 0; i < s->cfg.n_devs; i++) free(s->dev[i].pend);
    free(s->all);
    free(s->heap);
    free(s);
}

int sched_sim_submit(sched_sim *s, sched_sim_req *pub)
{
    if (pub->n_prompt < 1 || pub->n_out < 1 || pub->arrival < s->now || !isfinite(pub->arrival))
        return -1;
    sim_req *r = calloc(1, sizeof *r);
    if (!r) return -1;
    if (s->n_all == s->cap_all) {
        int nc = s->cap_all ? s->cap_all * 2 : 64;
        sim_req **a = realloc(s->all, sizeof *a * (size_t)nc);
        if (!a) {
            free(r);
            return -1;
        }
        s->all = a;
        s->cap_all = nc;
    }
    s->all[s->n_all] = r;
    pub->id = s->n_all++;
    r->pub = pub;
    sched_book_entry_init(&r->be);
    pub->state = SCHED_SIM_PENDING;
    pub->prefill_dev = pub->decode_dev = -1;
    pub->t_start = pub->t_first = pub->t_done = 0;
    pub->generated = 0;
    pub->max_tbt = 0;
    pub->t_second = 0;
    s->n_unfinished++;
    push(s, pub->arrival, EV_ARRIVE, -1, r);
    if (pub->cancel_at > 0) push(s, pub->cancel_at > pub->arrival ? pub->cancel_at : pub->arrival, EV_CANCEL, -1, r);
    return s->oom ? -1 : 0;
}

double sched_sim_run(sched_sim *s, double t_end)
{
    while (s->n_ev && !s->oom) {
        if (t_end > 0 && s->heap[0].t > t_end) {
            s->now = t_end;
            break;
        }
        event e = pop(s);
        s->now = e.t;
        handle(s, &e);
    }
    return s->now;
}

double sched_sim_now(const sched_sim *s)
{
    return s->now;
}

const sched_book *sched_sim_book(const sched_sim *s)
{
    return &s->book;
}

void sched_sim_dev_stats_get(const sched_sim *s, int dev, sched_sim_dev_stats *out)
{
    *out = s->dev[dev].st;
}

void sched_sim_counts(const sched_sim *s, int *waiting, int *running)
{
    *waiting = s->n_waiting;
    *running = s->n_running;
}

/* ---------------------------------------------------------------- summaries */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double sched_sim_percentile(double *v, int n, double p)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = p / 100.0 * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

void sched_sim_summarize(const sched_sim_req *reqs, int n, sched_sim_summary *o)
{
    memset(o, 0, sizeof *o);
    double *ttft = malloc(sizeof(double) * (size_t)(n ? n : 1) * 5);
    if (!ttft) return;
    double *tpot = ttft + n, *e2e = tpot + n, *queue = e2e + n, *hand = queue + n;
    int k = 0, kt = 0, kh = 0;
    double tokens = 0;
    o->t0 = -1;
    for (int i = 0; i < n; i++) {
        const sched_sim_req *r = &reqs[i];
        if (o->t0 < 0 || r->arrival < o->t0) o->t0 = r->arrival;
        if (r->state == SCHED_SIM_CANCELLED) o->n_cancelled++;
        if (r->state == SCHED_SIM_REJECTED) o->n_rejected++;
        if (r->state != SCHED_SIM_DONE) continue;
        o->n_done++;
        tokens += r->generated;
        if (r->t_done > o->t1) o->t1 = r->t_done;
        ttft[k] = r->t_first - r->arrival;
        e2e[k] = r->t_done - r->arrival;
        queue[k] = r->t_start - r->arrival;
        k++;
        if (r->n_out >= 2) tpot[kt++] = (r->t_done - r->t_first) / (r->n_out - 1);
        if (r->prefill_dev != r->decode_dev) {
            o->decodes_on_cards++;
            if (r->t_second > 0) hand[kh++] = r->t_second - r->t_first;
        } else {
            o->decodes_fallback++;
        }
    }
    if (o->t0 < 0) o->t0 = 0;
    double span = o->t1 - o->t0;
    o->tokens_per_s = span > 0 ? tokens / span : 0;
    o->requests_per_s = span > 0 ? o->n_done / span : 0;
    o->ttft_p50 = sched_sim_percentile(ttft, k, 50);
    o->ttft_p99 = sched_sim_percentile(ttft, k, 99);
    o->tpot_p50 = sched_sim_percentile(tpot, kt, 50);
    o->tpot_p99 = sched_sim_percentile(tpot, kt, 99);
    o->e2e_p50 = sched_sim_percentile(e2e, k, 50);
    o->e2e_p99 = sched_sim_percentile(e2e, k, 99);
    o->queue_p50 = sched_sim_percentile(queue, k, 50);
    o->queue_p99 = sched_sim_percentile(queue, k, 99);
    o->handover_p50 = sched_sim_percentile(hand, kh, 50);
    o->handover_p99 = sched_sim_percentile(hand, kh, 99);
    free(ttft);
}
