/* scheduler/sched_prefill.c — the prefill side of a worker: its FCFS queue of prefill jobs
 * (one per choice of each request placed to prefill here), chunked prefill within the
 * time-between-tokens budget, the first token of each choice, and the KV shipped to the decode
 * device of a split placement.
 *
 * Chunking (sched_policy_chunk): when requests decode on this device, the prefill work between
 * two of their decode steps is bounded by cfg.tbt_budget_ms — chunks sized from this device's
 * measured cost of a prefill call (sched_cost: fixed + per token + per token and cached key, one
 * model for dense chunks and one per sparse method), at least one chunk per iteration so a
 * prefill always progresses, and no further chunk in an iteration too small to be worth its
 * fixed cost (SCHED_CHUNK_EFF_K). When even the smallest chunk's predicted call does not fit what
 * is left of the budget (a sparse index over 128K cached keys costs more than a 50 ms budget
 * whatever the chunk's size), a device with ACCEL_CAP_LAYER_SPLIT runs only the layers that fit
 * (sched_policy_layers) and the same chunk goes on from the next layer in later iterations; the
 * chunk counts as prefilled only when its last layer has run. When nothing decodes here the head
 * job runs whole (one job per iteration, so new tasks, cancels and deadlines are seen between jobs;
 * accel_prefill itself polls the cancel flag between layers). Each chunk is an accel_prefill
 * appending to the sequence.
 *
 * KV shipping (split placements): the prefill runs on a prompt-only sequence with an
 * accel_kv_sink. The sink runs on this thread, once per layer as soon as the layer's quantized
 * chunk is on the host: it writes the chunk in the KV wire format (proto/kv_wire.h; a choice's
 * stream starts with its header, carrying the model's fingerprint and the positions the stream
 * will cover) into a CHUNK task and appends it to the decode device's inbox, whose worker reads
 * and imports it (the only thread that touches that device). The chunk's payload CRC is computed
 * here, where the KV was made: the reader checks it on the host and the card checks the KV it
 * stored against it, so a byte that changes on the way is caught wherever it changed. The card
 * imports layer l while this device computes layer l + 1 — the overlap of GLITCHES Fig. 4 —
 * and a card that is busy importing never blocks this device. The copy costs host memory of at
 * most one prompt's KV (int8) per request in flight. When the card reports an import failure
 * (import_failed), the sink stops the prefill at once; the request is handed over anyway and
 * the card's worker moves it, blaming the card. When the KV cannot leave this side (host
 * memory, a chunk the wire cannot carry), the prefill ends with that status: the hand-over
 * blames this device. */
#include "model/sample/sample_vec.h"
#include "scheduler/sched_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ship {
    sched_dev *to;
    sched_req *r;
    int choice;
    int failed; /* this side could not ship a chunk (a status): see ship_fail */
} ship;

/* The KV could not leave this device: host memory ran out, or the chunk has a shape the wire
 * cannot carry. This side's failure, not the card's: the prefill stops (the sink's non-zero
 * return) and ends with this status, which the HANDOVER carries, so that the card's worker
 * blames this device (sched_handover_take), as for any failed prefill. */
static int ship_fail(ship *sh, int st)
{
    sh->failed = st;
    return ACCEL_ERR_CANCELLED;
}

static int ship_layer(void *ctx, const proto_kv_layer *c)
{
    ship *sh = ctx;
    if (atomic_load(&sh->r->import_failed)) return ACCEL_ERR_CANCELLED;
    const model *m = sh->to->s->m;
    /* a choice's stream: its header, then runs of layer chunks from position 0, cut in the
     * decode device's blocks (a device without them: the format's default) */
    int bt = sh->to->info0.kv_block_tokens;
    proto_kv_header h = {.n_layers = m->cfg.n_layers, .n_kv_heads = c->n_kv_heads,
                         .head_dim = c->head_dim, .n_tokens = sh->r->choices[sh->choice].pf_n,
                         .pos0 = 0, .dtype = c->dtype,
                         .block_tokens = bt > 0 ? bt : PROTO_KV_V1_BLOCK_TOKENS};
    memcpy(h.fingerprint, m->fingerprint, sizeof h.fingerprint);
    size_t hb = c->layer == 0 && c->pos0 == 0 ? proto_kv_header_bytes(&h) : 0;
    size_t cb = proto_kv_chunk_bytes(&h, c);
    if (!cb) return ship_fail(sh, ACCEL_ERR_INVALID); /* a shape the format cannot carry */
    sched_task *t = malloc(sizeof *t + hb + cb);
    if (!t) return ship_fail(sh, ACCEL_ERR_NOMEM); /* host memory ran out */
    memset(t, 0, sizeof *t);
    t->kind = SCHED_TASK_CHUNK;
    t->r = sh->r;
    t->choice = sh->choice;
    t->heap = 1;
    if (hb && proto_kv_header_write(&h, t->data) < 0) {
        free(t);
        return ship_fail(sh, ACCEL_ERR_INVALID);
    }
    long long w = proto_kv_chunk_write(&h, c, t->data + hb, cb);
    if (w < 0) {
        free(t);
        return ship_fail(sh, ACCEL_ERR_INVALID);
    }
    t->len = hb + (size_t)w;
    sched_worker_push(sh->to, t);
    return ACCEL_OK;
}

static void post_prefilled(sched_dev *d, sched_req *r)
{
    sched_node *n = sched_node_new(0);
    if (!n) return; /* the book's prefill share stays until the request ends */
    n->kind = SCHED_NODE_PREFILLED;
    n->req = r;
    n->placement = r->w_placement;
    sched_post(d->s, n);
}

static void remove_job(sched_dev *d, sched_req *r)
{
    sched_req *prev = NULL;
    for (sched_req *x = d->pf_head; x; prev = x, x = x->wnext)
        if (x == r) {
            if (prev) prev->wnext = r->wnext;
            else d->pf_head = r->wnext;
            if (d->pf_tail == r) d->pf_tail = prev;
            r->wnext = NULL;
            return;
        }
}

void sched_prefill_end(sched_dev *d, sched_req *r, int st)
{
    remove_job(d, r);
    if (st == ACCEL_OK) post_prefilled(d, r);
    if (r->w_split) {
        /* Free what this worker holds; the decode worker owns the request from the HANDOVER on
         * and ends it whatever the status (it also holds the card's sequences). */
        for (int i = 0; i < r->n; i++) sched_choice_deinit(&r->choices[i], d->dev, SCHED_SEQ_PREFILL, 0);
        sched_task *t = &r->t_handover;
        memset(t, 0, sizeof *t);
        t->kind = SCHED_TASK_HANDOVER;
        t->r = r;
        t->status = st;
        t->from = d->index;
        sched_worker_push(&d->s->dev[r->w_decode], t);
        return;
    }
    if (st == ACCEL_OK) {
        if (r->n_done == r->n) {
            sched_worker_done(d, r);
        } else {
            r->wnext = d->active;
            d->active = r;
        }
    } else if (st == ACCEL_ERR_CANCELLED) {
        sched_worker_finish(d, r, NULL);
    } else if (st == SCHED_ERR_TIMEOUT) {
        sched_worker_fail(d, r, st, "the request's deadline passed");
    } else if (sched_status_movable(st)) {
        sched_worker_move(d, r, d->index, st);
    } else {
        char msg[ACCEL_NAME_MAX + 160]; /* a device name and a status */
        snprintf(msg, sizeof msg, "%s: prefill failed: %s", d->info0.name, sched_strerror(st));
        sched_worker_fail(d, r, st, msg);
    }
}

/* The next unfinished choice of r at or after r->pf_choice (a moved request skips the choices
 * that already finished, and every choice skips when another choice's prefill was forked for
 * it), with its ids ready; -1 when none is left. */
static int next_choice(sched_req *r, int *st)
{
    *st = 0;
    while (r->pf_choice < r->n && (r->choices[r->pf_choice].finish != MODEL_FINISH_NONE ||
                                   r->choices[r->pf_choice].forked))
        r->pf_choice++;
    if (r->pf_choice >= r->n) return -1;
    sched_choice *c = &r->choices[r->pf_choice];
    if (!c->pf_ids) *st = sched_choice_prefill_ids(r, c);
    return r->pf_choice;
}

/* One prefill for n choices: when choice c (local, the request's first prefill) has just been
 * prefilled, every other choice that would prefill the same ids gets a fork of c's sequence
 * instead (its blocks shared, the partial last one copied on the first write) and a copy of
 * c's last logits in its own row of d->logits (sampled by the caller). Choices forked here are
 * marked forked = 1. Returns how many. */
static int fork_choices(sched_dev *d, sched_req *r, sched_choice *c)
{
    if (r->w_split || r->n < 2 || c->index != 0) return 0;
    int vocab = d->s->vocab, n = 0;
    for (int i = 1; i < r->n && i < d->rows; i++) {
        sched_choice *o = &r->choices[i];
        if (o->finish != MODEL_FINISH_NONE || o->forked || o->seq || o->pf_done) continue;
        if (!o->pf_ids && sched_choice_prefill_ids(r, o)) continue;
        if (o->pf_n != c->pf_n || memcmp(o->pf_ids, c->pf_ids, sizeof(int32_t) * (size_t)c->pf_n))
            continue; /* a moved choice with its own history */
        if (accel_seq_fork(d->dev, c->seq, c->pf_n, r->n_prompt + r->max_tokens, &o->seq))
            break; /* no fork here (unsupported, no memory): the rest prefill as usual */
        o->pf_done = o->pf_n;
        o->forked = 1;
        o->approx = c->approx;
        memcpy(d->logits + (size_t)i * vocab, d->logits, sizeof(float) * (size_t)vocab);
        atomic_fetch_add(&d->forks, 1);
        n++;
    }
    return n;
}

/* Prompt logprobs (sched_params.prompt_logprobs): a chunk's rows of logits go to d->plogits, at
 * most PROMPT_LP_BYTES of them (65 rows at a 128K vocabulary, 262 at 32K): *k is cut to fit.
 * 0, or -1 when host memory ran out. */
#define PROMPT_LP_BYTES ((size_t)32 << 20)
static int plogits_rows(sched_dev *d, int *k)
{
    int vocab = d->s->vocab;
    int cap = (int)(PROMPT_LP_BYTES / (sizeof(float) * (size_t)vocab));
    if (cap < 1) cap = 1;
    if (*k > cap) *k = cap;
    if (d->plogits_rows >= *k) return 0;
    float *p = realloc(d->plogits, sizeof(float) * (size_t)*k * (size_t)vocab);
    if (!p) return -1;
    d->plogits = p;
    d->plogits_rows = *k;
    return 0;
}

/* Row i of the chunk at prompt position pos0 + i predicts position pos0 + i + 1: that prompt
 * token's log-softmax value and the top alternatives (raw logits, as the sampler reports a
 * generated token's: model/sample/sample.h). */
static void prompt_lps(sched_dev *d, sched_req *r, const int32_t *ids, int pos0, int k)
{
    int vocab = d->s->vocab;
    if (pos0 == 0) r->plp[0].token.bytes = sched_token_bytes(&d->s->tokens, ids[0], &r->plp[0].token.len);
    for (int i = 0; i < k; i++) {
        int p = pos0 + i + 1;
        if (p >= r->n_prompt) break;
        const float *row = d->plogits + (size_t)i * vocab;
        float m = -INFINITY;
        for (int v = 0; v < vocab; v++)
            if (row[v] > m) m = row[v];
        double z = 0;
        for (int v = 0; v < vocab; v++) z += exp((double)row[v] - m);
        float lse = m + (float)log(z);
        sched_prompt_lp *o = &r->plp[p];
        int32_t id = ids[p];
        o->token.bytes = sched_token_bytes(&d->s->tokens, id, &o->token.len);
        o->token.logprob = row[id] - lse;
        int32_t top[MODEL_MAX_TOP_LOGPROBS];
        float val[MODEL_MAX_TOP_LOGPROBS];
        o->n_top = r->prompt_top ? model_vec_topn(row, vocab, r->prompt_top, top, val) : 0;
        for (int t = 0; t < o->n_top; t++) {
            o->top[t].bytes = sched_token_bytes(&d->s->tokens, top[t], &o->top[t].len);
            o->top[t].logprob = val[t] - lse;
        }
    }
}


/* The cost model of a sparse method's chunks (sched_dev.cost). */
static int cost_kind(const sparse_params *p)
{
    return p->mode >= 0 && p->mode < SCHED_COST_KINDS - 1 ? 1 + p->mode : SCHED_COST_KINDS - 1;
}

/* Runs one chunk of r's current job (first: the iteration's first). Returns the seconds it took
 * (0 when the job ended without a device call), -1 when no chunk worth running fits what is left
 * of the budget or the job waits for memory for its sequence (the iteration ends), and ends the
 * request's prefill when it is complete or failed. */
static double one_chunk(sched_dev *d, sched_req *r, int decoding, int first, double budget, double left)
{
    int st, ci = next_choice(r, &st);
    if (st || ci < 0) {
        sched_prefill_end(d, r, st);
        return 0;
    }
    sched_choice *c = &r->choices[ci];
    /* a sparse prompt: its first `send` tokens in sparse chunks, the rest dense; where they end
     * and how long each is are the method's (sparse/sparse.h). It reuses cached exact KV or KV
     * of its own parameters (sched_pcache.h: kinds), ending where a sparse chunk may start. */
    int send = r->has_sparse && !r->sparse_off ? sparse_plan(&r->sparse.p, c->pf_n) : 0;
    int sparse_prompt = send > 0;
    if (!c->pf_done && !(r->w_split ? c->pseq : c->seq)) {
        if (!r->t_started) r->t_started = sched_now();
        /* split: a prompt-only sequence (its KV leaves for the card); local: the sequence the
         * choice decodes in, with room for every token it may generate — holding the longest
         * cached prefix of its ids when the prefix cache has one (the rest is prefilled) */
        accel_seq **sq = r->w_split ? &c->pseq : &c->seq;
        int cap = r->w_split ? c->pf_n : r->n_prompt + r->max_tokens;
        int reused = 0, from_host = 0;
        /* a split placement reuses a cached prefix only where the device can ship the KV it
         * already holds (the card needs the whole prompt's) */
        int cache = d->pc && !r->no_cache &&
                    (!r->w_split || (d->info0.caps & ACCEL_CAP_KV_EXPORT_HELD));
        int approx = 0;
        if (cache)
            st = sched_pcache_begin(d->pc, sparse_prompt ? sparse_params_key(&r->sparse.p) : 0,
                                    sparse_prompt ? sparse_resume_align(&r->sparse.p) : 1,
                                    c->pf_ids, c->pf_n, cap, sq, &reused, &from_host, &approx);
        else
            st = accel_seq_new(d->dev, cap, sq);
        /* memory given back, or coming back as decodes end: again in the next iteration. The
         * iteration ends here (no device call spent any of the budget, so the loop would ask
         * again at once, forever, and the decodes here would never step): one make_room per
         * iteration, the decodes step before the next try */
        if (st == ACCEL_ERR_NOMEM && (sched_worker_make_room(d, r) || d->active)) return -1;
        if (st) {
            sched_prefill_end(d, r, st);
            return 0;
        }
        if (r->w_split && reused) {
            /* the cached prefix goes to the card as a prefill of it would have sent it */
            ship sh0 = {&d->s->dev[r->w_decode], r, ci, 0};
            accel_kv_sink sink0 = {ship_layer, &sh0};
            st = SCHED_DEVICE_CALL(d, accel_kv_export(d->dev, *sq, 0, reused, &sink0));
            if (sh0.failed)
                st = sched_req_cancelled(r) ? ACCEL_ERR_CANCELLED : sh0.failed;
            else if (st == ACCEL_ERR_CANCELLED && !sched_req_cancelled(r) &&
                     atomic_load(&r->import_failed))
                st = ACCEL_OK; /* the sink stopped it: the card's worker moves the request */
            if (st || atomic_load(&r->import_failed)) {
                sched_prefill_end(d, r, st);
                return 0;
            }
        }
        c->pf_done = reused;
        c->pf_split_k = c->pf_layer = 0;
        if (approx) c->approx = 1; /* it holds sparse-computed KV: published as such */
        if (!r->cached_set) {
            r->cached_tokens = reused < r->n_prompt ? reused : r->n_prompt;
            r->cached_set = 1;
        }
    }
    /* a moved choice starts again */
    if (c->pf_done == 0 && !c->pf_split_k) c->sp_blocks = c->sp_causal = 0;
    int sparse = c->pf_done < send;
    int kind = sparse ? cost_kind(&r->sparse.p) : 0;
    /* sparse chunks in the method's granule, dense ones in whole tiles from one tile up
     * (sched_policy_chunk); the cost model remembers the sizes run in them (sched_cost.grain) */
    const int align = sparse ? sparse_resume_align(&r->sparse.p) : 1;
    d->cost[kind].grain = sparse ? align : SCHED_CHUNK_TILE;
    d->cost[kind].layer_split = decoding && !r->split_off && (d->info0.caps & ACCEL_CAP_LAYER_SPLIT);
    int k;
    if (c->pf_split_k > 0) {
        k = c->pf_split_k; /* a layer-split chunk in progress goes on */
    } else {
        int want = sparse ? sched_policy_chunk(send - c->pf_done, c->pf_done, align, decoding, first, budget,
                                               left, &d->cost[kind])
                          : sched_policy_chunk(c->pf_n - c->pf_done, c->pf_done, align, decoding, first,
                                               budget, left, &d->cost[kind]);
        if (want <= 0) return -1; /* nothing worth its fixed cost fits what is left of the budget */
        k = sparse ? sparse_chunk_len(&r->sparse.p, send, c->pf_done, want) : want;
    }
    /* prompt logprobs: every row's logits while the chunk still covers prompt positions */
    int all = r->plp && c->pf_done < r->n_prompt && plogits_rows(d, &k) == 0;
    if (r->plp && c->pf_done < r->n_prompt && !all) {
        sched_prefill_end(d, r, ACCEL_ERR_NOMEM);
        return 0;
    }
    /* layer-split (sched_policy_layers): when even this chunk's predicted call does not fit what
     * is left of the budget, only the layers that fit run now, the rest in later iterations */
    const int L = d->s->m->cfg.n_layers;
    int l0 = c->pf_split_k > 0 ? c->pf_layer : 0, nl = L - l0;
    const int can_split = decoding && !r->split_off && (d->info0.caps & ACCEL_CAP_LAYER_SPLIT);
    double pred_s, plan_s;
    nl = sched_policy_call_layers(&d->cost[kind], k, c->pf_done, l0, L, can_split, budget, left, first, &pred_s, &plan_s);
    if (nl <= 0) return -1;
    int last = c->pf_done + k == c->pf_n;
    ship sh = {&d->s->dev[r->w_decode], r, ci, 0};
    accel_kv_sink sink = {ship_layer, &sh};
    accel_prefill_req pr = {.seq = r->w_split ? c->pseq : c->seq, .ids = c->pf_ids + c->pf_done,
                            .n = k, .logits = all ? d->plogits : last ? d->logits : NULL, .all_logits = all,
                            .kv = r->w_split ? &sink : NULL, .cancel = &r->cancel,
                            .sparse = sparse ? &r->sparse : NULL,
                            .layer0 = nl < L ? l0 : 0, .layers = nl < L ? nl : 0};
    const int done_layers = l0 + nl == L; /* this call completes the chunk */
    accel_sparse_report rep = {0};
    if (sparse) pr.sparse_report = &rep;
    int64_t t0 = sched_now_ns();
    st = SCHED_DEVICE_CALL(d, accel_prefill(d->dev, &pr));
    double dt = (double)(sched_now_ns() - t0) / 1e9;
    atomic_fetch_add(&d->prefill_chunks, 1);
    if (d->trace && decoding) /* sched_worker.c: TANDEM_SCHED_TRACE */
        fprintf(d->trace, "P %.6f %.6f %d %d %d %d %d %.6f %.6f %d %.6f\n", t0 / 1e9, (t0 + dt * 1e9) / 1e9, kind,
                k, c->pf_done, pr.layer0, pr.layers, pred_s, left, first, plan_s);
    if (decoding && budget > 0 && dt > left) { /* the decodes here wait past the budget */
        atomic_fetch_add(&d->prefill_over_calls, 1);
        atomic_fetch_add(&d->prefill_over_ns, (uint64_t)((dt - (left > 0 ? left : 0)) * 1e9));
    }
    if (sh.failed) {
        /* the sink could not ship (ship_fail): part of this chunk's KV may be on its way, so
         * the chunk is not tried again; the prefill ends with this side's status */
        c->pf_split_k = c->pf_layer = 0;
        sched_prefill_end(d, r, sched_req_cancelled(r) ? ACCEL_ERR_CANCELLED : sh.failed);
        return dt;
    }
    if (st == ACCEL_ERR_CANCELLED && !sched_req_cancelled(r) && atomic_load(&r->import_failed))
        st = ACCEL_OK; /* the sink stopped it: the card's worker moves the request */
    if (st) c->pf_split_k = c->pf_layer = 0; /* a failed call abandoned a split chunk (accel.h) */
    if (st == ACCEL_ERR_UNSUPPORTED && pr.layers) {
        r->split_off = 1; /* the device refused this split (cuda: a long dense chunk with a sink) */
        return dt;
    }
    if (st == ACCEL_ERR_NOMEM && !sparse) {
        /* memory given back (a cached prefix evicted, a younger request preempted): this chunk
         * again at once, as long as something is given. Coming back only as the decodes here
         * end: the iteration ends, the decodes step before the next try (trying again now could
         * only fail again, a device call each time, until the budget was spent) */
        if (sched_worker_make_room(d, r)) return dt;
        if (d->active) return -1;
    }
    if (st == ACCEL_ERR_NOMEM && sparse) {
        /* the sparse pass's whole-prompt workspace is admitted like KV (cuda lends it from the
         * block pool): cached prefixes and younger requests give room first, and the chunk runs
         * again; only when nothing more can be given up does this request prefill dense instead,
         * in chunks (the device left the sequence as it was) */
        if (!sched_worker_make_room(d, r)) r->sparse_off = 1;
        return dt;
    }
    if (st) {
        sched_prefill_end(d, r, sched_req_cancelled(r) ? ACCEL_ERR_CANCELLED : st);
        return dt;
    }
    if (atomic_load(&r->import_failed)) {
        sched_prefill_end(d, r, ACCEL_OK);
        return dt;
    }
    /* a split call: its own part and nl / L of a whole call's layers (sched_policy_layers) */
    sched_cost_observe_split(&d->cost[kind], k, c->pf_done, dt, nl, L);
    if (sparse) {
        /* a sparse pass's KV is an approximation (every layer after the first attended to a
         * subset): the prefix cache keeps it apart, under the parameters' kind, which only
         * requests with the same parameters reuse (a dense request's hits equal a dense prefill) */
        if (rep.layers_sparse) c->approx = 1;
        c->sp_blocks += rep.layers_sparse ? rep.blocks_computed : 0;
        c->sp_causal += rep.layers_sparse ? rep.blocks_causal : 0;
    }
    sched_prefill_fit_publish(d, kind); /* the placement's rule d: the kind it ran last */
    if (!done_layers) { /* the chunk goes on in a later iteration, from layer l0 + nl */
        c->pf_split_k = k;
        c->pf_layer = l0 + nl;
        atomic_fetch_add(&d->prefill_split_calls, 1);
        return dt;
    }
    c->pf_split_k = c->pf_layer = 0;
    if (last && r->has_sparse) { /* a choice prefilled dense counts as density 1 in the mean */
        r->density_sum += c->sp_causal ? (double)c->sp_blocks / (double)c->sp_causal : 1.0;
        r->density_n++;
    }
    atomic_fetch_add(&d->tokens, (uint64_t)k);
    atomic_fetch_add(&d->prefill_tokens, (uint64_t)k);
    if (all) {
        prompt_lps(d, r, c->pf_ids, c->pf_done, k);
        if (last) memcpy(d->logits, d->plogits + (size_t)(k - 1) * d->s->vocab, sizeof(float) * (size_t)d->s->vocab);
    }
    c->pf_done += k;
    if (!last) return dt;
    if (d->pc && !r->no_cache && (!r->w_split || (d->info0.caps & ACCEL_CAP_KV_EXPORT_HELD)))
        sched_pcache_publish(d->pc, sched_choice_kv_kind(r, c), r->w_split ? c->pseq : c->seq,
                             c->pf_ids, c->pf_n);
    if (r->w_split) {
        accel_seq_free(d->dev, c->pseq);
        c->pseq = NULL;
    }
    int forked = fork_choices(d, r, c);
    st = sched_choice_step(d->s, r, c, d->logits, sched_now());
    for (int i = 0; !st && i < r->n; i++) {
        sched_choice *o = &r->choices[i];
        if (o->forked == 1) {
            o->forked = 2;
            st = sched_choice_step(d->s, r, o, d->logits + (size_t)i * d->s->vocab, sched_now());
        }
    }
    (void)forked;
    if (st < 0) {
        sched_prefill_end(d, r, st);
        return dt;
    }
    r->pf_choice++;
    if (next_choice(r, &st) < 0 || st) sched_prefill_end(d, r, st);
    return dt;
}

/* A sequence count around the three values (one writer: the device's worker): a reader that
 * sees the count odd, or changed across its reads, reads again. */
void sched_prefill_fit_publish(sched_dev *d, int kind)
{
    const sched_cost *m = &d->cost[kind >= 0 && kind < SCHED_COST_KINDS ? kind : 0];
    const double v[3] = {m->a, m->b, m->e};
    unsigned q = atomic_load_explicit(&d->prefill_fit_seq, memory_order_relaxed);
    atomic_store_explicit(&d->prefill_fit_seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (int i = 0; i < 3; i++) {
        uint64_t b;
        memcpy(&b, &v[i], sizeof b);
        atomic_store_explicit(&d->prefill_fit_bits[i], b, memory_order_relaxed);
    }
    atomic_store_explicit(&d->prefill_fit_seq, q + 2, memory_order_release);
}

void sched_prefill_fit_read(sched_dev *d, double out[3])
{
    for (;;) {
        unsigned q = atomic_load_explicit(&d->prefill_fit_seq, memory_order_acquire);
        uint64_t b[3];
        for (int i = 0; i < 3; i++) b[i] = atomic_load_explicit(&d->prefill_fit_bits[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (!(q & 1u) && atomic_load_explicit(&d->prefill_fit_seq, memory_order_relaxed) == q) {
            for (int i = 0; i < 3; i++) memcpy(&out[i], &b[i], sizeof out[i]);
            return;
        }
    }
}

/* With a TTFT target, the job the policy prefills next (sched_policy_next_prefill: on-time
 * prompts before late ones) goes to the head of the queue; its prediction is this device's
 * learned cost of the chunks it would run (dense, or its sparse method's). */
void sched_prefill_order(sched_dev *d, double now)
{
    double target = d->s->cfg.ttft_target_ms > 0 ? d->s->cfg.ttft_target_ms / 1e3 : 0;
    if (!(target > 0) || !d->pf_head || !d->pf_head->wnext) return;
    sched_prefill_job q[SCHED_PREFILL_LOOK];
    sched_req *at[SCHED_PREFILL_LOOK];
    int n = 0;
    for (sched_req *r = d->pf_head; r && n < SCHED_PREFILL_LOOK; r = r->wnext, n++) {
        at[n] = r;
        q[n].waited_s = now - r->t_arrival;
        q[n].left_s = 0;
        if (!r->choices || r->n <= 0) continue;
        const sched_choice *c = &r->choices[r->pf_choice >= 0 && r->pf_choice < r->n ? r->pf_choice : 0];
        int todo = c->pf_n > 0 ? c->pf_n : r->n_prompt, done = c->pf_done < todo ? c->pf_done : todo;
        int kind = r->has_sparse && !r->sparse_off ? cost_kind(&r->sparse.p) : 0;
        q[n].left_s = sched_cost_predict(&d->cost[kind], todo - done, done);
    }
    int i = sched_policy_next_prefill(q, n, target);
    if (i <= 0) return;
    remove_job(d, at[i]);
    at[i]->wnext = d->pf_head;
    d->pf_head = at[i];
    if (!d->pf_tail) d->pf_tail = at[i];
}

void sched_prefill_work(sched_dev *d)
{
    int decoding = d->active != NULL;
    double budget = d->s->cfg.tbt_budget_ms / 1e3, spent = 0;
    int ran = 0; /* device calls this iteration: the policy's first chunk is the first call */
    for (int first = 1; d->pf_head && (first || (decoding && budget > 0 && spent < budget)); first = 0) {
        sched_prefill_order(d, sched_now());
        sched_req *r = d->pf_head;
        if (sched_req_cancelled(r)) {
            sched_prefill_end(d, r, ACCEL_ERR_CANCELLED);
            continue;
        }
        double dt = one_chunk(d, r, decoding, !ran, budget, budget - spent);
        if (dt < 0) break;
        if (dt > 0) ran = 1;
        spent += dt;
    }
}
