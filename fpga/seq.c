/* fpga/seq.c — one sequence on the card (fpga/backend_impl.h): its block table into the KV pool
 * (fpga/kv_pool.h), which grows as positions are written, copies a block it shares before the
 * first write into it (copy-on-write, a kv_gather run per stream), is shared by a fork, shrinks
 * on truncation and may be held for the prefix cache; the host tier's block save and load; its
 * end.
 *
 * A copy that times out: the card may still write its destination, so the block stays taken
 * while the run is busy and comes back (fpga_seq_copy_landed) when the card sees the run
 * finished (fpga/card.c's check_stuck, before its next run); still running then, the card is
 * stuck and the device FAILED, and the block stays out until the pool is freed with the device.
 *
 * Threads: the device's (scheduler/accel.h). */
#include "fpga/backend_impl.h"
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the block table */

/* Offset of block id's tiles of stream slot `slot` (in every channel). */
static uint64_t blk_off(const fpga_dev *d, uint32_t id, uint32_t slot)
{
    const fpga_dec_kvmap *g = &d->geo;
    return d->kv_base + (uint64_t)(id / g->group) * g->super_bytes + slot * g->slot_stride +
           (uint64_t)(id % g->group) * g->bt;
}

fpga_kv_pool *fpga_seq_pool(fpga_dev *d, const fpga_seq *s)
{
    return s->tier == FPGA_DEC_TIER_HOST ? &d->host_kv : s->tier ? &d->ddr_kv : &d->kv;
}

/* A copy's tag for the card: the destination block, plus one (0 is "no tag"). */
static uint64_t copy_tag(uint32_t dst)
{
    return (uint64_t)dst + 1;
}

void fpga_seq_copy_landed(void *arg, uint64_t tag)
{
    fpga_dev *d = arg;
    uint32_t id = (uint32_t)(tag - 1);
    fpga_kv_pool_unref(&d->kv, &id, 1, 0);
}

/* Every stream of block src copied over block dst (one kv_gather run per stream). */
static int blk_copy(fpga_dev *d, uint32_t src, uint32_t dst)
{
    const uint32_t streams = d->base.m->cfg.n_layers * d->card.lo.kv_streams;
    for (uint32_t g = 0; g < streams; g++) {
        int st = fpga_card_copy_bank(&d->card, (int)(g % FPGA_DEC_CH), blk_off(d, src, g / 32),
                                     blk_off(d, dst, g / 32), d->geo.bt, copy_tag(dst));
        if (st) return fpga_dev_status(d, st); /* a timeout degrades the device */
    }
    return 0;
}

int fpga_seq_grow(fpga_dev *d, fpga_seq *s, int pos0, int n)
{
    const int T = (int)d->blk_tokens;
    int need = (pos0 + n + T - 1) / T;
    if (need > s->cap_ids) return ACCEL_ERR_INVALID;
    int cow = 0, fresh = need > s->n_ids ? need - s->n_ids : 0;
    fpga_kv_pool *pool = fpga_seq_pool(d, s);
    for (int i = pos0 / T; i < need && i < s->n_ids; i++)
        cow += fpga_kv_pool_shared(pool, s->ids[i]);
    if (cow && s->tier) return ACCEL_ERR_UNSUPPORTED; /* offloaded blocks are never shared */
    if (fpga_kv_pool_free_count(pool) < cow + fresh) return ACCEL_ERR_NOMEM;
    if (fresh && fpga_kv_pool_take(pool, fresh, s->ids + s->n_ids)) return ACCEL_ERR_NOMEM;
    s->n_ids += fresh;
    for (int i = pos0 / T; cow && i < need; i++) {
        if (!fpga_kv_pool_shared(&d->kv, s->ids[i])) continue;
        uint32_t id;
        if (fpga_kv_pool_take(&d->kv, 1, &id)) return ACCEL_ERR_NOMEM;
        int st = blk_copy(d, s->ids[i], id);
        if (st) {
            /* a copy run that timed out may still write the block: the card keeps it until it
             * sees the run finished (fpga_seq_copy_landed); any other failure, or a timeout of
             * an import piece found before the copy started, leaves it unwritten */
            if (!fpga_card_copy_kept(&d->card, copy_tag(id))) fpga_kv_pool_unref(&d->kv, &id, 1, 0);
            return st;
        }
        fpga_kv_pool_unref(&d->kv, &s->ids[i], 1, s->base.holder);
        s->ids[i] = id;
        cow--;
    }
    return ACCEL_OK;
}

int fpga_seq_room(fpga_dev *d, int n, accel_seq *const *seqs, int cnt)
{
    const int T = (int)d->blk_tokens;
    int need[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        const fpga_seq *s = (const fpga_seq *)seqs[i];
        int pos0 = s->base.len, last = (pos0 + cnt + T - 1) / T;
        if (last > s->n_ids) need[s->tier] += last - s->n_ids;
        for (int b = pos0 / T; b < last && b < s->n_ids; b++)
            need[s->tier] += fpga_kv_pool_shared(fpga_seq_pool(d, s), s->ids[b]);
    }
    return fpga_kv_pool_free_count(&d->kv) < need[0] ||
                   (need[1] && fpga_kv_pool_free_count(&d->ddr_kv) < need[1]) ||
                   (need[2] && fpga_kv_pool_free_count(&d->host_kv) < need[2])
               ? ACCEL_ERR_NOMEM
               : ACCEL_OK;
}

void fpga_seq_map(const fpga_dev *d, const fpga_seq *s, fpga_dec_kvmap *m)
{
    *m = d->geo;
    m->ids = s->ids;
    m->n_ids = (uint32_t)s->n_ids;
}

/* ---------------------------------------------------------------- sequences' lives */

int fpga_seq_new(accel_dev *ad, int capacity, accel_seq **out)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = calloc(1, sizeof *s);
    /* paged: no block is taken before a position needs it */
    if (s) {
        s->cap_ids = (int)((capacity + (int)d->blk_tokens - 1) / (int)d->blk_tokens);
        s->run_crc = calloc((size_t)ad->m->cfg.n_layers, sizeof *s->run_crc);
        s->ids = malloc(sizeof *s->ids * (size_t)s->cap_ids);
    }
    if (!s || !s->run_crc || !s->ids) {
        if (s) free(s->run_crc);
        free(s);
        return ACCEL_ERR_NOMEM;
    }
    s->tls_on = d->tls.on;
    s->tls_p = d->tls.p;
    /* its KV past HBM when HBM cannot hold it (fpga/BANKS.md "DDR4"; TANDEM_FPGA_KV_TIER) */
    if (d->has_ddr && d->tier != 2 && d->tls.avail &&
        fpga_tls_offload_ok(&d->card.desc, (uint32_t)d->tls.p.block_size) &&
        (d->tier || s->cap_ids > fpga_kv_pool_free_count(&d->kv))) {
        if (d->tier != 3 && s->cap_ids <= fpga_kv_pool_free_count(&d->ddr_kv))
            s->tier = FPGA_DEC_TIER_DDR;
        else if (d->tier != 1 && s->cap_ids <= fpga_kv_pool_free_count(&d->host_kv))
            s->tier = FPGA_DEC_TIER_HOST;
    }
    *out = &s->base;
    return ACCEL_OK;
}

/* accel_seq_fork: the blocks of src's first n_tokens positions, shared (one reference more);
 * a shared partial block is copied by whichever side writes into it first (fpga_seq_grow). */
int fpga_seq_fork(accel_dev *ad, accel_seq *asrc, int n_tokens, int capacity, accel_seq **out)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *src = (fpga_seq *)asrc;
    if (src->failed) return ACCEL_ERR_CORRUPT;
    if (src->tier) return ACCEL_ERR_UNSUPPORTED; /* offloaded blocks: no copy kernel, unshared */
    int st = fpga_seq_new(ad, capacity, out);
    if (st) return st;
    fpga_seq *s = (fpga_seq *)*out;
    s->tier = 0;             /* src's HBM blocks */
    s->tls_on = src->tls_on; /* its own arena, summarized on its first step */
    s->tls_p = src->tls_p;
    s->n_ids = (n_tokens + (int)d->blk_tokens - 1) / (int)d->blk_tokens;
    memcpy(s->ids, src->ids, sizeof *s->ids * (size_t)s->n_ids);
    fpga_kv_pool_ref(&d->kv, s->ids, s->n_ids, 0);
    return ACCEL_OK;
}

/* Blocks past the first len positions go back to the pool. */
int fpga_seq_truncate(accel_dev *ad, accel_seq *as, int len)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    int keep = (len + (int)d->blk_tokens - 1) / (int)d->blk_tokens;
    if (keep < s->n_ids) {
        void *owner = NULL; /* a scatter may still be writing the blocks that go */
        int st = fpga_card_drain(&d->card, &owner, fpga_seq_mark_failed);
        if (st == ACCEL_ERR_TIMEOUT || st == ACCEL_ERR_DEVICE) return fpga_dev_status(d, st);
        if (st) fpga_seq_mark_failed(owner, st);
        fpga_kv_pool_unref(fpga_seq_pool(d, s), s->ids + keep, s->n_ids - keep, s->base.holder);
        s->n_ids = keep;
    }
    /* summaries past len are rebuilt from the start of len's block when it is next decoded */
    const uint32_t bs = d->tls.avail ? (uint32_t)d->tls.p.block_size : 1;
    if (s->tls_upto > (uint32_t)len) s->tls_upto = (uint32_t)len / bs * bs;
    s->pipe_len = 0;
    return ACCEL_OK;
}

int fpga_seq_hold(accel_dev *ad, accel_seq *as)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    if (s->tier) return ACCEL_ERR_UNSUPPORTED; /* offloaded blocks are not shared */
    fpga_kv_pool_hold(&d->kv, s->ids, s->n_ids);
    return ACCEL_OK;
}

void fpga_kv_usage(accel_dev *ad, int *total, int *used, int *cached)
{
    fpga_kv_pool_usage(&((fpga_dev *)ad)->kv, total, used, cached);
}

/* The host tier's unit: block `block` of s as the card stores it, stream after stream (layer,
 * head, part order), each stream's blk_tiles tiles as they lie in HBM: n_layers * kv_streams *
 * bt = kv_block_tokens * kv_bytes_per_token bytes. */
int fpga_kv_block_save(accel_dev *ad, accel_seq *as, int block, void *dst)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    if (s->tier) return ACCEL_ERR_UNSUPPORTED;
    if (block >= s->n_ids) return ACCEL_ERR_INVALID;
    const uint32_t streams = ad->m->cfg.n_layers * d->card.lo.kv_streams;
    for (uint32_t g = 0; g < streams; g++) {
        int st =
            fpga_card_read_bank(&d->card, (int)(g % FPGA_DEC_CH), blk_off(d, s->ids[block], g / 32),
                                (uint8_t *)dst + (uint64_t)g * d->geo.bt, d->geo.bt);
        if (st) return fpga_dev_status(d, st);
    }
    return ACCEL_OK;
}

int fpga_kv_block_load(accel_dev *ad, accel_seq *as, const void *src)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    if (s->tier) return ACCEL_ERR_UNSUPPORTED;
    int st = fpga_seq_grow(d, s, s->base.len, (int)d->blk_tokens);
    if (st) return st;
    const uint32_t streams = ad->m->cfg.n_layers * d->card.lo.kv_streams;
    uint32_t id = s->ids[s->base.len / (int)d->blk_tokens];
    for (uint32_t g = 0; g < streams; g++) {
        st = fpga_card_write_bank(&d->card, (int)(g % FPGA_DEC_CH), blk_off(d, id, g / 32),
                                  (const uint8_t *)src + (uint64_t)g * d->geo.bt, d->geo.bt);
        if (st) return fpga_dev_status(d, st);
    }
    return ACCEL_OK;
}

void fpga_seq_free(accel_dev *ad, accel_seq *as)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    /* a scatter still writing into this sequence's blocks must finish before they are reused;
     * on a failed card nothing is waited for and the blocks stay taken */
    void *owner = NULL;
    int st = atomic_load(&ad->health) == ACCEL_HEALTH_FAILED
                 ? ACCEL_ERR_DEVICE
                 : fpga_card_drain(&d->card, &owner, fpga_seq_mark_failed);
    if (st == ACCEL_ERR_TIMEOUT || st == ACCEL_ERR_DEVICE) {
        accel_dev_fail(ad); /* the blocks stay taken: the card may still write them */
    } else {
        if (st) fpga_seq_mark_failed(owner, st);
        fpga_kv_pool_unref(fpga_seq_pool(d, s), s->ids, s->n_ids, s->base.holder);
        if (s->tls_ar.k) fpga_kv_pool_give_supers(&d->kv, s->tls_ar.first, s->tls_ar.k);
    }
    fpga_card_forget(&d->card, s); /* a piece that timed out still names it */
    free(s->ids);
    free(s->run_crc);
    free(s);
}
