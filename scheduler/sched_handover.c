/* scheduler/sched_handover.c — the decode device's side of a split placement (the KV of a
 * request prefilled elsewhere is imported here, then this device decodes it).
 *
 *   ATTACH    (pushed by the loop at placement, before the prefill starts) reserves one
 *             sequence per choice unfinished at placement (w_open: the prefill worker may end a
 *             choice at its first token meanwhile, and its sequence then goes unused) with room
 *             for prompt + max_tokens positions: the
 *             card is the request's from now on, which is what makes it busy for the policy.
 *             And one KV wire reader per choice, expecting this model's fingerprint and shape,
 *             at most that many positions, and the stream cut in this device's KV blocks.
 *   CHUNK     feeds one chunk of the choice's wire stream to its reader (bounds, order, the
 *             header's and the payload's CRC32C), which hands it to accel_kv_import_crc with
 *             the producer's payload CRC: the card verifies the KV it stored against it once a
 *             run of positions is complete. Chunks arrive in the order the prefill produced
 *             them.
 *   HANDOVER  (pushed by the prefill worker when its prefill ended, whatever the outcome) gives
 *             the request to this worker: it then decodes here, finishes (every choice stopped
 *             at its first token, cancelled, deadline), or moves (the prefill device failed,
 *             or an import failed here: its KV is not whole, so another placement re-prefills).
 * A failed import marks the request (import_failed) so that the prefill worker's sink stops
 * shipping; later chunks of it are dropped. A chunk that fails its check (the wire's CRC or
 * bounds, or KV that changed on its way into the card's memory) counts in kv_corrupt, and the
 * move that follows marks this device (DEGRADED, FAILED after SCHED_FAILS_TO_FAIL in a row) and
 * keeps the request off it. */
#include "scheduler/sched_internal.h"
#include <stdio.h>
#include <stdlib.h>

static void mark_import_failed(sched_req *r, int st)
{
    int zero = 0;
    atomic_compare_exchange_strong(&r->import_failed, &zero, st);
}

/* The reader's hand-over: one validated chunk of choice c's stream into its sequence here. */
static int import_chunk(void *ctx, const proto_kv_header *h, const proto_kv_layer *chunk,
                        const proto_kv_chunk_info *info)
{
    (void)h;
    sched_choice *c = ctx;
    sched_dev *d = c->kv_dev;
    int st = SCHED_DEVICE_CALL(d, accel_kv_import_crc(d->dev, c->dseq, chunk, info->payload_crc));
    if (st) return st;
    size_t nv = proto_kv_value_bytes(chunk->dtype, chunk->n_tokens, chunk->n_kv_heads, chunk->head_dim);
    size_t ns = proto_kv_scale_count(chunk->dtype, chunk->n_tokens, chunk->n_kv_heads, chunk->head_dim);
    atomic_fetch_add(&d->kv_chunks, 1);
    atomic_fetch_add(&d->kv_bytes, (uint64_t)(2 * nv + 4 * ns));
    return 0;
}

void sched_handover_attach(sched_dev *d, sched_req *r)
{
    const model *m = d->s->m;
    int cap = r->n_prompt + r->max_tokens;
    proto_kv_expect e = {.fingerprint = m->fingerprint, .n_layers = m->cfg.n_layers,
                         .n_kv_heads = m->cfg.n_kv_heads, .head_dim = m->cfg.head_dim,
                         .max_tokens = cap, .max_pos = model_context_limit(&m->cfg),
                         .block_tokens = d->info0.kv_block_tokens};
    for (int i = 0; i < r->n; i++) {
        sched_choice *c = &r->choices[i];
        if (!c->w_open) continue; /* finished before this placement (a moved request) */
        int st = accel_seq_new(d->dev, cap, &c->dseq);
        if (!st) {
            c->kv_dev = d;
            c->kvr = proto_kv_reader_new(&e, import_chunk, c);
            if (!c->kvr) st = ACCEL_ERR_NOMEM;
        }
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
    if (atomic_load(&r->import_failed) || sched_req_cancelled(r) || !c->dseq || !c->kvr) return;
    int st = proto_kv_reader_feed(c->kvr, t->data, t->len);
    if (!st) return;
    /* the reader's own statuses (PROTO_KV_ERR_*): a stream that is not what was shipped; the
     * rest are import_chunk's accel statuses, handed through (disjoint ranges: sched.h) */
    if (PROTO_KV_IS_ERR(st)) st = st == PROTO_KV_ERR_NOMEM ? ACCEL_ERR_NOMEM : ACCEL_ERR_CORRUPT;
    if (st == ACCEL_ERR_CORRUPT) atomic_fetch_add(&d->kv_corrupt, 1);
    mark_import_failed(r, st);
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
            char msg[ACCEL_NAME_MAX + 160]; /* a device name and a status */
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
            if (c->finish == MODEL_FINISH_NONE &&
                (!c->dseq || !c->kvr || proto_kv_reader_finish(c->kvr) != 0 ||
                 accel_seq_len(d->dev, c->dseq) != c->pf_n))
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
        proto_kv_reader_free(c->kvr);
        c->kvr = NULL;
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
