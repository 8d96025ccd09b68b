/* fpga/backend.c — the U280 device (fpga-emu, fpga) behind the accel interface: decode, KV
 * import, and prefill with FAST-Prefill's kernel where the xclbin has it.
 *
 * Design note
 * -----------
 * Open: the model's descriptor and quantization settings -> the card (XRT library, device,
 * xclbin, kernels, BOs: fpga/card.c) -> the weight image from the disk cache or built
 * (fpga/image_cache.c) -> uploaded once -> the KV pool is what remains of every bank BO above
 * the image. The image's host copy is unmapped after the upload.
 *
 * Memory plan (a paged device, scheduler/accel.h): the KV pool is whole superblocks of blocks
 * of T = fpga_dec_kv_block_tokens positions (fpga/BANKS.md "KV pages"); a sequence holds a block
 * table and takes blocks as it grows (fpga/seq.c: before a decode step, a prefill or the first
 * layer of an import, all or nothing, so ACCEL_ERR_NOMEM leaves it unchanged); a fork shares blocks
 * and the first write into a shared one copies it (kv_gather runs; a copy that timed out keeps
 * its destination until the card sees it finished); truncation and freeing give blocks back.
 * mem_total is the pool in whole blocks (capped by accel_opts.mem_limit).
 *
 * Decode (GLITCHES' host loop): the host looks up the token's embedding row (fp32, from the
 * mapped checkpoint, as FAST-Prefill's host does) and this position's rotary cos/sin (every
 * rope type, by model_rope_inv_freq), syncs them into the io block, starts the kernel with the
 * token and position, waits, and reads the status and logits back. Sampling stays with the
 * caller. One sequence per run.
 *
 * Prefill (fpga/prefill.c drives fpga/kernels/prefill.c): a card whose xclbin has the prefill
 * kernel keeps a standing workspace in the pool for a dense pass of FPGA_PF_PASS rows (with the
 * kvf blocks, so that a dense prefill can export its KV), taken from mem_total at open; longer
 * prompts run in several passes. A sparse call (FlexPrefill, XAttention
 * or Tri-shape for a prompt or a chunk after cached positions; within the units' bounds) needs
 * a workspace for every position up to its end: placed in the pool for the call and freed after;
 * when the pool has no room the call returns ACCEL_ERR_NOMEM and leaves the sequence as it was (the
 * scheduler then prefills it dense). A card without the kernel prefills with one decode run per
 * token and cannot export. Imports in flight are drained first (the workspace travels through the
 * same staging slots).
 *
 * Import: a chunk is validated on the host (int8 values in -127..127, scales finite and >= 0:
 * proto/kv.h's rules), then shipped in pieces through the staging slots and reordered on the
 * card by kv_scatter, whose CRC32C report (the transfer of each piece) is checked before the
 * staging group is reused, before any decode run, and before the last layer's import returns.
 * Each layer's wire payload CRC is kept: the producer's (accel_kv_import_crc, from the wire
 * format), else one computed here from the chunk as it arrived. When a run of positions is
 * complete, kv_check reads every layer of it back from the tiles the decode kernel will read and
 * reports its CRC; a layer whose CRC differs fails the import (ACCEL_ERR_CORRUPT), so KV that
 * changed anywhere between the producer and the HBM — on the host, over PCIe, in the card's
 * memory while the import went on — is never decoded. Pieces of different sequences may be in
 * flight together; a failure marks its own sequence.
 *
 * Threads: one thread drives the device (accel.h); describe() reads immutable fields only. */
#include "fpga/backend_impl.h"
#include "sparse/sparse.h"
#include "model/ckpt/numerics.h"
#include "fpga/flex_host.h"
#include "fpga/prefill.h"
#include "proto/kv_wire.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_MS 30000 /* watchdog: a U280 step ~10-30 ms, an emulated 7B one seconds */

static const struct accel_dev_i fpga_i;

/* ---------------------------------------------------------------- statuses */

void fpga_seq_mark_failed(void *owner, int st)
{
    if (owner) ((fpga_seq *)owner)->failed = 1;
}

/* A card status as the accel interface reports it: a timeout degrades the device; a run or
 * call that failed on arguments the backend built means the card is not in the state the host
 * believes: a device failure.
 * Timeouts in a row do not fail the device here: a run that timed out and is still running at
 * the card's next call already does (ACCEL_ERR_DEVICE, fpga/card.c's check_stuck), so what
 * stays DEGRADED is a card whose late runs all landed — slow, not wrong. Whether a slow device
 * should still get work is the scheduler's call, made the same way for every backend: each
 * request that fails on a device marks it DEGRADED and SCHED_FAILS_TO_FAIL in a row FAILED
 * (scheduler/sched_core.c note_failure; the GPU backend never degrades itself at all). A second
 * count here would fail a card the scheduler still trusts, with no way back but a restart. */
int fpga_dev_status(fpga_dev *d, int st)
{
    switch (st) {
    case ACCEL_OK:
    case ACCEL_ERR_NOMEM:
    case ACCEL_ERR_INVALID: /* the caller's input, refused on the host before any run */
    case ACCEL_ERR_CORRUPT:
    case ACCEL_ERR_CANCELLED: return st;
    case ACCEL_ERR_TIMEOUT: accel_dev_degrade(&d->base); return st;
    default: return ACCEL_ERR_DEVICE;
    }
}

/* Waits for every import piece in flight. Failures mark their sequences; returns the status
 * that concerns `self` (0 if none did), or a device-level status. */
static int drain(fpga_dev *d, fpga_seq *self)
{
    void *owner = NULL;
    int st = fpga_card_drain(&d->card, &owner, fpga_seq_mark_failed);
    if (!st) return 0;
    if (st == ACCEL_ERR_CORRUPT) {
        fpga_seq_mark_failed(owner, st);
        return owner == self ? st : 0;
    }
    return fpga_dev_status(d, st);
}

/* ---------------------------------------------------------------- steps */

/* AsyncTLS for the sequence's next step at pos (ACCEL_ERR_NOMEM: dense); offloaded, tls_p.stagger
 * or d->stagger: the staggered pipeline, continued only from its own step at pos - 1. */
static int tls_ready(fpga_dev *d, fpga_seq *s, int pos, fpga_tls_io *io, uint64_t *off)
{
    fpga_tls_io_of(&d->tls, &s->tls_p, (uint32_t)s->cap_ids * d->blk_tokens,
                   d->stagger || s->tls_p.stagger, s->tier != 0, io);
    io->reset = !io->stagger || s->pipe_len != (uint32_t)pos || pos == 0;
    if (off) /* a batched run: the arena only, io goes in the record */
        return fpga_tls_seq_arena(&d->card, &d->tls, io, &d->kv, d->kv_base, d->geo.super_bytes,
                                  &s->tls_ar, &s->tls_upto, off);
    return fpga_tls_seq_prepare(&d->card, &d->tls, io, &d->kv, d->kv_base, d->geo.super_bytes,
                                &s->tls_ar, &s->tls_upto);
}

/* After a sequence's AsyncTLS step at pos: its summaries, pipeline and usage counts. */
static void tls_done(fpga_dev *d, fpga_seq *s, int pos, const fpga_tls_step_counts *k)
{
    s->tls_upto = (uint32_t)pos + 1;
    if (d->stagger || s->tls_p.stagger || s->tier) s->pipe_len = (uint32_t)pos + 1;
    s->tls_read += (int64_t)k->keys_read, s->tls_total += (int64_t)k->keys_total;
    s->tls_fetched += (int64_t)k->fetched, s->tls_chosen += (int64_t)k->chosen;
    s->tls_steps++;
}

static int step(fpga_dev *d, fpga_seq *s, int32_t id, int pos, float *logits, int allow_tls)
{
    const model *m = d->base.m;
    const model_config *c = &m->cfg;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    int st = drain(d, s);
    if (st) return st;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    const int half = c->head_dim / 2;
    model_row_f32(&m->embed, id, d->x0);
    const float *inv = d->inv_freq;
    float dyn[FPGA_DEC_MAX_HEAD_DIM / 2];
    if (c->rope.type == MODEL_ROPE_DYNAMIC) {
        /* transformers rescales the base by the sequence length seen so far */
        model_rope_inv_freq(c, pos + 1, dyn);
        inv = dyn;
    }
    model_rope_angles(inv, half, pos, d->cs, d->sn);
    if ((st = fpga_seq_grow(d, s, pos, 1))) return st;
    uint32_t n_ids = (uint32_t)(pos / (int)d->blk_tokens + 1);
    fpga_tls_io io;
    const int tls = allow_tls && s->tls_on && (st = tls_ready(d, s, pos, &io, NULL)) == 0;
    if (st && st != ACCEL_ERR_NOMEM) return fpga_dev_status(d, st);
    d->card.kv_tier = (uint32_t)s->tier;
    st = fpga_card_step(&d->card, d->x0, d->cs, d->sn, (uint32_t)id, (uint32_t)pos,
                        s->tier ? 0 : d->kv_base, d->geo.blk_tiles, s->ids, n_ids, logits);
    s->pipe_len = 0;
    if (!st && tls) {
        fpga_tls_step_counts k;
        if (!(st = fpga_tls_step_read(&d->card, &k))) tls_done(d, s, pos, &k);
    }
    return fpga_dev_status(d, st);
}

/* The step input of sequence s at pos into the i-th batch slot. */
static void step_input(fpga_dev *d, int i, int32_t id, int pos, fpga_card_bseq *q)
{
    const model_config *c = &d->base.m->cfg;
    const int half = c->head_dim / 2;
    float *x0 = d->bx0 + (size_t)i * c->hidden, *cs = d->bcs + (size_t)i * half,
          *sn = d->bsn + (size_t)i * half;
    model_row_f32(&d->base.m->embed, id, x0);
    const float *inv = d->inv_freq;
    float dyn[FPGA_DEC_MAX_HEAD_DIM / 2];
    if (c->rope.type == MODEL_ROPE_DYNAMIC) {
        model_rope_inv_freq(c, pos + 1, dyn);
        inv = dyn;
    }
    model_rope_angles(inv, half, pos, cs, sn);
    *q = (fpga_card_bseq){.x0 = x0, .cs = cs, .sn = sn, .token = (uint32_t)id, .pos = (uint32_t)pos};
}

/* Up to max_batch sequences in one run of the batched kernel: one pass over the weights. */
static int decode_batch(fpga_dev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                        float *logits)
{
    fpga_card_bseq q[FPGA_DEC_MAX_BATCH] = {{0}};
    fpga_tls_io io[FPGA_DEC_MAX_BATCH], back[FPGA_DEC_MAX_BATCH];
    for (int i = 0; i < n; i++) {
        fpga_seq *s = (fpga_seq *)seqs[i];
        int pos = s->base.len, st = fpga_seq_grow(d, s, pos, 1);
        if (st) return st;
        step_input(d, i, ids[i], pos, &q[i]);
        q[i].ids = s->ids;
        q[i].n_ids = (uint32_t)(pos / (int)d->blk_tokens + 1);
        /* AsyncTLS in the record (no pool room for its arena: this step dense) */
        if (s->tls_on && (st = tls_ready(d, s, pos, &io[i], &q[i].tls_off)) == 0) {
            io[i].report = 0;
            q[i].tls = &io[i];
            q[i].tls_upto = s->tls_upto;
            q[i].tls_back = &back[i];
        } else if (st && st != ACCEL_ERR_NOMEM) {
            return fpga_dev_status(d, st);
        }
    }
    int st = fpga_card_step_batch(&d->card, n, q, d->kv_base, d->geo.blk_tiles, logits);
    for (int i = 0; i < n; i++) {
        fpga_seq *s = (fpga_seq *)seqs[i];
        s->pipe_len = 0;
        if (st || !q[i].tls_off) continue;
        fpga_tls_step_counts k;
        fpga_tls_counts_of(&back[i], &k);
        tls_done(d, s, q[i].pos, &k);
    }
    return fpga_dev_status(d, st);
}

static int fpga_decode(accel_dev *ad, int n, accel_seq *const *seqs, const int32_t *ids,
                       float *logits)
{
    fpga_dev *d = (fpga_dev *)ad;
    int vocab = ad->m->cfg.vocab;
    int st0 = fpga_seq_room(d, n, seqs, 1);
    if (st0) return st0;
    int ddr = 0; /* the batched kernel has no DDR4 ports: offloaded sequences go one per run */
    for (int i = 0; i < n; i++) ddr |= ((const fpga_seq *)seqs[i])->tier;
    if (n > 1 && d->card.max_batch > 1 && !ddr) {
        /* imports in flight land first; a sequence whose import failed fails the step */
        void *owner = NULL;
        int st = fpga_card_drain(&d->card, &owner, fpga_seq_mark_failed);
        if (st && st != ACCEL_ERR_CORRUPT) return fpga_dev_status(d, st);
        if (st) fpga_seq_mark_failed(owner, st);
        for (int i = 0; i < n; i++)
            if (((fpga_seq *)seqs[i])->failed) return ACCEL_ERR_CORRUPT;
        for (int b0 = 0; b0 < n; b0 += d->card.max_batch) {
            int nb = n - b0 < d->card.max_batch ? n - b0 : d->card.max_batch;
            if ((st = decode_batch(d, nb, seqs + b0, ids + b0, logits + (size_t)b0 * vocab))) return st;
        }
        return ACCEL_OK;
    }
    for (int i = 0; i < n; i++) {
        fpga_seq *s = (fpga_seq *)seqs[i];
        int st = step(d, s, ids[i], s->base.len, logits + (size_t)i * vocab, 1);
        if (st) return st;
    }
    return ACCEL_OK;
}

/* One decode run per prompt token: a card without the prefill kernel. */
static int prefill_by_steps(fpga_dev *d, fpga_seq *s, const accel_prefill_req *r)
{
    int vocab = d->base.m->cfg.vocab;
    if (r->kv) return ACCEL_ERR_UNSUPPORTED;
    for (int i = 0; i < r->n; i++) {
        if (r->cancel && __atomic_load_n(r->cancel, __ATOMIC_ACQUIRE)) return ACCEL_ERR_CANCELLED;
        float *out = d->scratch_logits;
        if (r->logits && r->all_logits) out = r->logits + (size_t)i * vocab;
        else if (r->logits && i == r->n - 1) out = r->logits;
        int st = step(d, s, r->ids[i], s->base.len + i, out, !s->tier); /* offloaded: dense */
        if (st) return st;
    }
    return ACCEL_OK;
}

static int fpga_prefill(accel_dev *ad, const accel_prefill_req *r)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)r->seq;
    if (r->sparse_report) *r->sparse_report = (accel_sparse_report){.density = 1.0};
    if (r->kv && !r->kv->layer) return ACCEL_ERR_INVALID;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    accel_seq *as = &s->base;
    /* all the prompt's blocks first: NOMEM changes nothing */
    int st = fpga_seq_room(d, 1, &as, r->n);
    if (st) return st;
    /* the prefill kernel writes HBM pages: an offloaded sequence's prompt goes one dense decode
     * run per token, its KV straight into DDR4 (or arrives by import) */
    if (!d->can_prefill || s->tier) return prefill_by_steps(d, s, r);
    st = drain(d, s);
    if (st) return st;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    if ((st = fpga_seq_grow(d, s, s->base.len, r->n))) return st;
    fpga_pf_job j = {.m = ad->m, .ids = r->ids, .n = r->n, .pos0 = (uint32_t)s->base.len,
                     .rope_len = s->base.len + r->n, .kv_off = d->kv_base,
                     .part_tiles = d->geo.blk_tiles, .kv_ids = s->ids,
                     .n_ids = (uint32_t)((s->base.len + r->n + (int)d->blk_tokens - 1) /
                                         (int)d->blk_tokens),
                     .ws_off = d->pf_ws_off, .ws_rows = d->pass_rows,
                     .run_rows = d->run_rows, .ws_flags = FPGA_PF_F_KVF, .logits = r->logits,
                     .all_logits = r->all_logits, .kv = r->kv, .cancel = r->cancel};
    int sparse = fpga_pf_sparse_params(&d->card.desc, s->base.len, r, &j.params);
    if (sparse < 0) return sparse;
    int ws_first = -1, ws_k = 0;
    if (sparse) {
        /* the whole prompt's workspace: free superblocks at the top of the pool, for the call */
        const uint32_t rows = (uint32_t)(s->base.len + r->n); /* the sequence's positions */
        fpga_pf_ws w;
        fpga_pf_ws_of(&d->card.desc, rows, FPGA_PF_F_KVF | FPGA_PF_F_SPARSE, &w);
        ws_k = (int)((w.bytes + d->geo.super_bytes - 1) / d->geo.super_bytes);
        if ((ws_first = fpga_kv_pool_take_supers(&d->kv, ws_k)) < 0) return ACCEL_ERR_NOMEM;
        j.sparse = 1;
        j.ws_off = d->kv_base + (uint64_t)ws_first * d->geo.super_bytes;
        j.ws_rows = rows;
        j.ws_flags = FPGA_PF_F_KVF | FPGA_PF_F_SPARSE;
    }
    st = fpga_pf_prefill(&d->card, &j, &d->last_pf);
    /* the sink's refusal and the host's own failures are theirs; the rest is the card's */
    if (st && !d->last_pf.host_status) st = fpga_dev_status(d, st);
    d->last_job = j;
    fpga_kv_pool_give_supers(&d->kv, ws_first, ws_k);
    if (!st && r->sparse_report && d->last_pf.layers_sparse) {
        accel_sparse_report *rep = r->sparse_report;
        rep->layers_sparse = d->last_pf.layers_sparse;
        rep->blocks_computed = d->last_pf.blocks_computed;
        rep->blocks_causal = d->last_pf.blocks_causal;
        rep->density = rep->blocks_causal ? (double)rep->blocks_computed / rep->blocks_causal : 1.0;
    }
    return st;
}

/* A complete run of positions [pos0, pos0 + n): every layer of it, read back from the tiles by
 * kv_check, must have the payload CRC its chunk had. */
static int check_landed(fpga_dev *d, fpga_seq *s, int pos0, int n)
{
    int st = drain(d, s);
    if (st) return st;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    void *owner = NULL;
    const int T = (int)d->blk_tokens;
    d->card.kv_tier = (uint32_t)s->tier;
    st = fpga_card_check(&d->card, (uint32_t)pos0, (uint32_t)n, s->tier ? 0 : d->kv_base, d->geo.blk_tiles,
                         s->ids, (uint32_t)((pos0 + n + T - 1) / T), d->check_crc, &owner);
    if (st) return fpga_dev_status(d, st);
    for (int l = 0; l < d->base.m->cfg.n_layers; l++)
        if (d->check_crc[l] != s->run_crc[l]) {
            s->failed = 1;
            d->landed_corrupt++;
            return ACCEL_ERR_CORRUPT;
        }
    return ACCEL_OK;
}

static int import(fpga_dev *d, fpga_seq *s, const proto_kv_layer *c, int has_crc, uint32_t crc)
{
    if (c->dtype != PROTO_KV_INT8) return ACCEL_ERR_UNSUPPORTED;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    if (!fpga_card_chunk_valid(c)) {
        s->failed = 1;
        return ACCEL_ERR_CORRUPT;
    }
    /* the run's blocks are taken with its first layer (all or nothing) */
    if (c->layer == 0) {
        int st = fpga_seq_grow(d, s, c->pos0, c->n_tokens);
        if (st) return st;
    }
    s->run_crc[c->layer] = has_crc ? crc : proto_kv_payload_crc(c);
    const int piece = fpga_card_piece_tokens(&d->card), T = (int)d->blk_tokens;
    for (int t0 = 0, n; t0 < c->n_tokens; t0 += n) {
        /* a piece spans at most FPGA_DEC_SCATTER_IDS blocks (kv_scatter's table) */
        int pos = c->pos0 + t0, room = FPGA_DEC_SCATTER_IDS * T - pos % T;
        n = c->n_tokens - t0 < piece ? c->n_tokens - t0 : piece;
        if (n > room) n = room;
        void *failed = NULL;
        int st = fpga_card_scatter(&d->card, c, t0, n, s->tier ? 0 : d->kv_base, d->geo.blk_tiles,
                                   1 + s->tier, &s->ids[pos / T],
                                   (uint32_t)((pos % T + n + T - 1) / T), s, &failed);
        if (st == ACCEL_ERR_CORRUPT) {
            fpga_seq_mark_failed(failed, st);
            if (failed == s) return st;
        } else if (st) {
            fpga_seq_mark_failed(failed, st);
            return fpga_dev_status(d, st);
        }
    }
    /* the run of positions is complete: it is verified on the card before anyone uses it */
    if (c->layer == d->base.m->cfg.n_layers - 1) return check_landed(d, s, c->pos0, c->n_tokens);
    return ACCEL_OK;
}

static int fpga_kv_import(accel_dev *ad, accel_seq *as, const proto_kv_layer *c)
{
    return import((fpga_dev *)ad, (fpga_seq *)as, c, 0, 0);
}

static int fpga_kv_import_crc(accel_dev *ad, accel_seq *as, const proto_kv_layer *c, uint32_t crc)
{
    return import((fpga_dev *)ad, (fpga_seq *)as, c, 1, crc);
}

static int fpga_warmup(accel_dev *ad)
{
    accel_seq *s;
    int st = accel_seq_new(ad, 1, &s);
    if (st) return st;
    int32_t id = ad->m->cfg.bos_id >= 0 ? ad->m->cfg.bos_id : 0;
    fpga_dev *d = (fpga_dev *)ad;
    st = accel_decode(ad, 1, &s, &id, d->scratch_logits);
    for (int i = 0; !st && i < ad->m->cfg.vocab; i++)
        if (!isfinite(d->scratch_logits[i])) st = ACCEL_ERR_DEVICE;
    accel_seq_free(ad, s);
    return st;
}

static void fpga_describe(accel_dev *ad, accel_info *out)
{
    fpga_dev *d = (fpga_dev *)ad;
    snprintf(out->name, sizeof out->name, "%s:%d", d->emu ? "fpga-emu" : "fpga", d->index);
    snprintf(out->desc, sizeof out->desc, "Alveo U280%s, W%dA8 (head %d-bit), int8 KV",
             d->emu ? " (emulated)" : "", d->q.wbits, d->q.head_bits);
    out->kind = ACCEL_KIND_FPGA;
    out->caps = ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT;
    if (d->can_prefill) out->caps |= ACCEL_CAP_PREFILL | ACCEL_CAP_KV_EXPORT;
    out->max_batch = d->card.max_batch > 1 ? d->card.max_batch : 1;
    out->decode_curve = d->curve;
    if (d->has_ddr && d->tier != 2) /* the DDR4 tier's fit rule (fpga/BANKS.md "DDR4") */
        fpga_tls_offload_info(&d->tls, &d->card.desc,
                              (uint64_t)(fpga_kv_pool_free_count(&d->ddr_kv) +
                                         fpga_kv_pool_free_count(&d->host_kv)) *
                                  d->blk_tokens * d->base.kv_bytes_per_token,
                              out);
}

static void fpga_free(accel_dev *ad)
{
    fpga_dev *d = (fpga_dev *)ad;
    void *owner;
    if (d->card.x && atomic_load(&ad->health) != ACCEL_HEALTH_FAILED)
        fpga_card_drain(&d->card, &owner, NULL);
    fpga_card_close(&d->card);
    fpga_tls_close(&d->tls);
    free(d->inv_freq);
    free(d->x0);
    free(d->cs);
    free(d->sn);
    free(d->scratch_logits);
    free(d->bx0);
    free(d->bcs);
    free(d->bsn);
    free(d->check_crc);
    fpga_kv_pool_deinit(&d->kv);
    if (d->has_ddr) fpga_kv_pool_deinit(&d->ddr_kv), fpga_kv_pool_deinit(&d->host_kv);
    if (d->model_held) fpga_image_drop(d->base.m);
    free(d);
}

/* accel_seq_decode_sparse: the device's block size, channels and dense layers, the sequence's
 * budgets (within the card's selection unit, else it stays dense). */
static int fpga_seq_decode_sparse(accel_dev *ad, accel_seq *as, const sparse_tls_params *p)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    sparse_tls_params q = d->tls.p;
    if (p) q.token_budget = p->token_budget, q.block_budget = p->block_budget, q.stagger = p->stagger;
    if (p) q.dense_below = p->dense_below;
    if (p && (!d->tls.avail || !fpga_tls_budgets_ok(&q))) return ACCEL_ERR_UNSUPPORTED;
    if (p && !s->tls_on) s->tls_read = s->tls_total = s->tls_steps = s->tls_fetched = s->tls_chosen = 0;
    s->tls_on = p != NULL;
    if (p) s->tls_p = q;
    return ACCEL_OK;
}

/* accel_seq_decode_stats: the keys its AsyncTLS steps attended and held (the level-1 blocks'
 * turnover is not tracked on the card: blocks_new / blocks_kept stay 0). */
static int fpga_seq_decode_stats(accel_dev *ad, accel_seq *as, accel_decode_stats *out)
{
    (void)ad;
    const fpga_seq *s = (const fpga_seq *)as;
    *out = (accel_decode_stats){.keys_read = s->tls_read, .keys_total = s->tls_total,
                                .steps = s->tls_steps, .blocks_new = s->tls_fetched,
                                .blocks_kept = s->tls_chosen};
    return ACCEL_OK;
}

static const struct accel_dev_i fpga_i = {
    .free = fpga_free,
    .describe = fpga_describe,
    .seq_new = fpga_seq_new,
    .seq_free = fpga_seq_free,
    .prefill = fpga_prefill,
    .decode = fpga_decode,
    .kv_import = fpga_kv_import,
    .warmup = fpga_warmup,
    .kv_import_crc = fpga_kv_import_crc,
    .seq_truncate = fpga_seq_truncate,
    .seq_fork = fpga_seq_fork,
    .kv_usage = fpga_kv_usage,
    .seq_hold = fpga_seq_hold,
    .kv_block_save = fpga_kv_block_save,
    .kv_block_load = fpga_kv_block_load,
    .seq_decode_sparse = fpga_seq_decode_sparse,
    .seq_decode_stats = fpga_seq_decode_stats,
};

/* ---------------------------------------------------------------- open */

static unsigned timeout_ms(const accel_opts *o)
{
    if (o->run_timeout_ms) return o->run_timeout_ms;
    const char *v = getenv("TANDEM_FPGA_TIMEOUT_MS");
    char *end;
    long t = v && *v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && t >= 1 && t <= 3600000 ? (unsigned)t : DEFAULT_TIMEOUT_MS;
}

static accel_dev *open_dev(int emu, int index, const model *m, const accel_opts *o,
                           const fpga_calib_ref *ref, char *err, size_t errlen)
{
    const char *kind = emu ? "fpga-emu" : "fpga";
    if (o->kv_dtype && o->kv_dtype != PROTO_KV_INT8) {
        snprintf(err, errlen, "%s: the card keeps int8 KV only", kind);
        return NULL;
    }
    if (o->weight_bits && o->weight_bits != 8 && o->weight_bits != 4) {
        snprintf(err, errlen, "%s: weight bits must be 8 or 4", kind);
        return NULL;
    }
    fpga_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "%s: out of memory", kind);
        return NULL;
    }
    d->base.i = &fpga_i;
    d->base.m = m;
    d->base.opts = accel_opts_kept(o);
    d->index = index;
    d->emu = emu;
    const model_config *c = &m->cfg;
    fpga_quant_opts_default(&d->q, o->weight_bits ? o->weight_bits : 8, c->hidden);
    /* Calibration (sampling, smoothing search, GPTQ) runs on the host CPU at load: a second for
     * stories260K, minutes for a small model with a 128K vocabulary (its LM head's rows), hours
     * for a 7B one. Past FPGA_IMAGE_CALIB_MAX_COST the default is round-to-nearest with the
     * clipping search (cached like any image); TANDEM_FPGA_QUANT=calib=8x128 asks for it anyway. */
    if (fpga_image_calib_cost(c) > FPGA_IMAGE_CALIB_MAX_COST) d->q.calib_seqs = d->q.calib_len = 0;
    fpga_dec_desc desc;
    fpga_image_file img = {0};
    if (fpga_quant_opts_parse(&d->q, getenv("TANDEM_FPGA_QUANT"), err, errlen) ||
        fpga_image_desc(m, &d->q, &desc, err, errlen))
        goto fail;
    fpga_quant_opts_str(&d->q, d->qstr, sizeof d->qstr);
    char lib[PATH_MAX + 32];
    if (o->lib_path && *o->lib_path) snprintf(lib, sizeof lib, "%s", o->lib_path);
    else if (emu) {
        /* where the emulator is installed is the composition root's knowledge (devices/) */
        snprintf(err, errlen, "%s:%d: no emulator library given (accel_opts.lib_path)", kind,
                 index);
        goto fail;
    } else snprintf(lib, sizeof lib, "%s", FPGA_XRT_DEFAULT_LIB);
    char cerr[512];
    int st = fpga_card_open(&d->card, lib, (unsigned)index, o->xclbin, &desc, timeout_ms(o), cerr,
                            sizeof cerr);
    if (st) {
        snprintf(err, errlen, "%s:%d: %s", kind, index, cerr);
        goto fail;
    }
    /* a card-level call's drain marks a failed piece's owner */
    d->card.on_fail = fpga_seq_mark_failed;
    d->card.on_copy_landed = fpga_seq_copy_landed; /* a late copy's block comes back (fpga/seq.c) */
    d->card.copy_arg = d;
    if (emu && !d->card.emu) {
        snprintf(err, errlen, "%s:%d: %s is not the tandem emulator", kind, index, lib);
        goto fail;
    }
    if (emu && o->pace && (st = fpga_xrt_emu_set_pace(d->card.x, d->card.dev, 1))) {
        snprintf(err, errlen, "%s:%d: %s", kind, index, fpga_xrt_error());
        goto fail;
    }
    d->model_held = fpga_image_hold(m) == 0; /* the next card on m reads no weight again */
    if (fpga_image_get(m, &d->q, ref, o->cache_dir, &img, NULL, err, errlen)) goto fail;
    d->image_cached = img.from_cache;
    snprintf(d->image_path, sizeof d->image_path, "%s", img.path);
    st = fpga_card_upload(&d->card, img.data, cerr, sizeof cerr);
    fpga_image_release(&img);
    if (st) {
        snprintf(err, errlen, "%s:%d: %s", kind, index, cerr);
        goto fail;
    }
    d->pool_lo = fpga_card_pool_lo(&d->card);
    d->pool_hi = fpga_card_pool_hi(&d->card);
    if (fpga_card_can_prefill(&d->card)) {
        /* the standing workspace of dense passes sits at the bottom of the pool */
        fpga_pf_ws w;
        fpga_pf_ws_of(&desc, FPGA_PF_PASS, FPGA_PF_F_KVF, &w);
        if (d->pool_lo + w.bytes < d->pool_hi) {
            d->can_prefill = 1;
            d->pass_rows = FPGA_PF_PASS;
            d->pf_ws_off = d->pool_lo;
            d->pool_lo += w.bytes;
        }
    }
    /* the KV pool: whole superblocks of blocks above the standing workspace (BANKS.md) */
    d->base.kv_bytes_per_token = 2ull * c->n_layers * c->n_kv_heads * (c->head_dim + 2);
    d->blk_tokens = fpga_dec_kv_block_tokens(&desc);
    fpga_dec_kvmap_paged(&desc, &d->card.lo, 0, NULL, 0, &d->geo);
    d->kv_base = fpga_dec_align(d->pool_lo, FPGA_DEC_ALIGN);
    d->geo.base = d->kv_base;
    uint64_t supers = d->pool_hi > d->kv_base ? (d->pool_hi - d->kv_base) / d->geo.super_bytes : 0;
    uint64_t block_bytes = (uint64_t)d->blk_tokens * d->base.kv_bytes_per_token;
    uint64_t n_blocks = supers * d->geo.group;
    if (o->mem_limit && o->mem_limit / block_bytes < n_blocks) n_blocks = o->mem_limit / block_bytes;
    if (n_blocks > (1u << 30)) n_blocks = 1u << 30;
    if (!n_blocks || fpga_kv_pool_init(&d->kv, (int)n_blocks, (int)d->geo.group)) {
        snprintf(err, errlen, "%s:%d: no room for a KV block above the weight image", kind, index);
        goto fail;
    }
    d->base.kv_block_tokens = (int)d->blk_tokens;
    d->base.mem_total = n_blocks * block_bytes;
    /* the DDR4 and host memory pools: the HBM pool's geometry over each "channel" of theirs */
    const uint64_t ddr_blocks = FPGA_DEC_DDR_SPAN / d->geo.super_bytes * d->geo.group,
                   host_blocks = FPGA_DEC_HOST_SPAN / d->geo.super_bytes * d->geo.group;
    d->has_ddr = ddr_blocks && host_blocks && ddr_blocks < (1u << 30) &&
                 !fpga_kv_pool_init(&d->ddr_kv, (int)ddr_blocks, (int)d->geo.group);
    if (d->has_ddr && fpga_kv_pool_init(&d->host_kv, (int)host_blocks, (int)d->geo.group))
        fpga_kv_pool_deinit(&d->ddr_kv), d->has_ddr = 0;
    const char *tv = getenv("TANDEM_FPGA_KV_TIER"), *sv = getenv("TANDEM_FPGA_TLS_STAGGER");
    d->tier = !tv ? 0 : !strcmp(tv, "ddr") ? 1 : !strcmp(tv, "hbm") ? 2 : !strcmp(tv, "host") ? 3 : 0;
    d->stagger = sv && !strcmp(sv, "1");
    int half = c->head_dim / 2;
    d->inv_freq = malloc(sizeof(float) * half);
    d->x0 = malloc(sizeof(float) * c->hidden);
    d->cs = malloc(sizeof(float) * half);
    d->sn = malloc(sizeof(float) * half);
    d->scratch_logits = malloc(sizeof(float) * c->vocab);
    d->check_crc = calloc((size_t)c->n_layers, sizeof *d->check_crc);
    size_t B = (size_t)(d->card.max_batch > 1 ? d->card.max_batch : 1);
    d->bx0 = malloc(sizeof(float) * c->hidden * B);
    d->bcs = malloc(sizeof(float) * half * B);
    d->bsn = malloc(sizeof(float) * half * B);
    if (!d->inv_freq || !d->x0 || !d->cs || !d->sn || !d->scratch_logits || !d->check_crc ||
        !d->bx0 || !d->bcs || !d->bsn) {
        snprintf(err, errlen, "%s: out of memory", kind);
        goto fail;
    }
    if (fpga_tls_open(&d->tls, m, o, err, errlen)) goto fail;
    model_rope_inv_freq(c, 0, d->inv_freq);
    fpga_dec_model_curve(&d->card.desc, m->cfg.max_pos, d->card.max_batch, &d->curve);
    return &d->base;
fail:
    fpga_image_release(&img);
    fpga_free(&d->base);
    return NULL;
}

accel_dev *fpga_emu_accel_open(int index, const model *m, const accel_opts *o,
                               const fpga_calib_ref *ref, char *err, size_t errlen)
{
    return open_dev(1, index, m, o, ref, err, errlen);
}

accel_dev *fpga_accel_open(int index, const model *m, const accel_opts *o,
                           const fpga_calib_ref *ref, char *err, size_t errlen)
{
    return open_dev(0, index, m, o, ref, err, errlen);
}

/* ---------------------------------------------------------------- introspection */

fpga_card *fpga_dev_card(accel_dev *ad)
{
    return ad && ad->i == &fpga_i ? &((fpga_dev *)ad)->card : NULL;
}

const fpga_quant_opts *fpga_dev_quant(accel_dev *ad)
{
    return ad && ad->i == &fpga_i ? &((fpga_dev *)ad)->q : NULL;
}

int fpga_dev_image_cached(accel_dev *ad, const char **path)
{
    if (!ad || ad->i != &fpga_i) return -1;
    fpga_dev *d = (fpga_dev *)ad;
    if (path) *path = d->image_path;
    return d->image_cached;
}

int fpga_dev_seq_kvmap(accel_dev *ad, accel_seq *as, fpga_dec_kvmap *m)
{
    if (!ad || ad->i != &fpga_i) return -1;
    fpga_seq_map((fpga_dev *)ad, (fpga_seq *)as, m);
    return 0;
}

int fpga_dev_tls_report(accel_dev *ad, int on, uint32_t *table, float *q)
{
    if (!ad || ad->i != &fpga_i || !((fpga_dev *)ad)->tls.on) return ACCEL_ERR_INVALID;
    fpga_dev *d = (fpga_dev *)ad;
    d->tls.report = on;
    return table ? fpga_tls_read_report(&d->card, &d->tls.p, table, q) : 0;
}

int fpga_dev_select_next(accel_dev *ad, const uint32_t *table, uint32_t cap)
{
    if (!ad || ad->i != &fpga_i) return ACCEL_ERR_INVALID;
    return fpga_card_select(&((fpga_dev *)ad)->card, table, cap);
}

int fpga_dev_last_prefill(accel_dev *ad, fpga_pf_result *res, uint64_t *ws_off, uint32_t *ws_rows,
                          uint32_t *ws_flags)
{
    if (!ad || ad->i != &fpga_i) return -1;
    fpga_dev *d = (fpga_dev *)ad;
    if (res) *res = d->last_pf;
    if (ws_off) *ws_off = d->last_job.ws_off;
    if (ws_rows) *ws_rows = d->last_job.ws_rows;
    if (ws_flags) *ws_flags = d->last_job.ws_flags;
    return 0;
}

int fpga_dev_set_pass_rows(accel_dev *ad, int rows, int run_rows)
{
    if (!ad || ad->i != &fpga_i || rows < 1 || rows > FPGA_PF_PASS || run_rows < 0 ||
        run_rows % FPGA_PF_CHUNK)
        return -1;
    ((fpga_dev *)ad)->pass_rows = (uint32_t)rows;
    ((fpga_dev *)ad)->run_rows = (uint32_t)run_rows;
    return 0;
}
