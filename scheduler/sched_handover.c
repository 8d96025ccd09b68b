/* scheduler/sched_handover.c — the decode device's side of a split placement (the KV of a
 * request prefilled elsewhere is imported here, then this device decodes it).
 *
 *   ATTACH    (pushed by the loop at placement, before the prefill starts) reserves one
 *             sequence per unfinished choice with room for prompt + max_tokens positions: the
 *             card is the request's from now on, which is what makes it busy for the policy.
 *   CHUNK     imports one layer chunk (accel_kv_import) in arrival order, which is the order
 *             the prefill produced them.
 *   HANDOVER  (pushed by the prefill worker when its prefill ended, whatever the outcome) gives
 *             the request to this worker: it then decodes here, finishes (every choice stopped
 *             at its first token, cancelled, deadline), or moves (the prefill device failed,
 *             or an import failed here: its KV is not whole, so another placement re-prefills).
 * A failed import marks the request (import_failed) so that the prefill worker's sink stops
 * shipping; later chunks of it are dropped. */
#include "scheduler/sched_internal.h"
#include <stdio.h>
#include <stdlib.h>

static void mark_import_failed(sched_req *r, int st)
{
    int zero = 0;
    atomic_compare_exchange_strong(&r->import_failed, &zero, st);
}

void sched_handover_attach(sched_dev *d, sched_req *r)
{
    int cap = r->n_prompt + r->max_tokens;
    for (int i = 0; i < r->n; i++) {
        sched_choice *c = &r->choices[i];
        if (c->finish != MODEL_FINISH_NONE) continue;
        int st = accel_seq_new(d->dev, cap, &c->dseq);
        if (st) {
            mark_import_failed(r, st);
            break;
        }
    }
    r->anext = d->attached;
    d->attached = r;
}

void sched_handover_chunk(sched_dev *d, sched_task *t)
{
    sched_req *r = t->r;
    sched_choice *c = &r->choices[t->choice];
    if (atomic_load(&r->import_failed) || sched_req_cancelled(r) || !c->dseq) return;
    int st = SCHED_DEVICE_CALL(d, accel_kv_import(d->dev, c->dseq, &t->chunk));
    if (st) {
        mark_import_failed(r, st);
        return;
    }
    size_t nv = proto_kv_value_bytes(t->chunk.dtype, t->chunk.n_tokens, t->chunk.n_kv_heads, t->chunk.head_dim);
    size_t ns = proto_kv_scale_count(t->chunk.dtype, t->chunk.n_tokens, t->chunk.n_kv_heads, t->chunk.head_dim);
    atomic_fetch_add(&d->kv_chunks, 1);
    atomic_fetch_add(&d->kv_bytes, (uint64_t)(2 * nv + 4 * ns));
}

void sched_handover_take(sched_dev *d, sched_req *r, int st, int from)
{
    for (sched_req **pp = &d->attached; *pp; pp = &(*pp)->anext)
        if (*pp == r) {
            *pp = r->anext;
            break;
        }
    r->anext = NULL;
    if (sched_req_cancelled(r) || st == ACCEL_ERR_CANCELLED) {
        sched_worker_finish(d, r, NULL);
        return;
    }
    if (st == SCHED_ERR_TIMEOUT || (r->deadline > 0 && sched_now() >= r->deadline)) {
        sched_worker_fail(d, r, SCHED_ERR_TIMEOUT, "the request's deadline passed");
        return;
    }
    if (st) {
        /* the prefill device failed it */
        if (sched_status_movable(st)) {
            sched_worker_move(d, r, from, st);
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: prefill failed: %s", d->s->dev[from].info0.name, sched_strerror(st));
            sched_worker_fail(d, r, st, msg);
        }
        return;
    }
    int imp = atomic_load(&r->import_failed);
    if (!imp) {
        /* every unfinished choice must hold exactly its prefilled positions */
        for (int i = 0; i < r->n && !imp; i++) {
            sched_choice *c = &r->choices[i];
            if (c->finish == MODEL_FINISH_NONE && (!c->dseq || accel_seq_len(d->dev, c->dseq) != c->pf_n))
                imp = ACCEL_ERR_CORRUPT;
        }
    }
    if (imp) {
        sched_worker_move(d, r, d->index, imp);
        return;
    }
    for (int i = 0; i < r->n; i++) {
        sched_choice *c = &r->choices[i];
        c->seq = c->dseq;
        c->dseq = NULL;
    }
    if (r->n_done == r->n) {
        sched_worker_done(d, r);
        return;
    }
    r->wnext = d->active;
    d->active = r;
}

void sched_handover_stop(sched_dev *d)
{
    while (d->attached) {
        sched_req *r = d->attached;
        d->attached = r->anext;
        r->anext = NULL;
        for (int i = 0; i < r->n; i++) sched_choice_deinit(&r->choices[i], d->dev, SCHED_SEQ_IMPORT, 0);
    }
}
