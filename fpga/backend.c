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
 * Memory plan: a sequence owns one slab of the KV pool, at the same offset in all 32 channels
 * (dec_layout.h: its (layer, head, part) streams are spread over the channels), sized for its
 * capacity rounded up to whole tiles of every part. Slabs are placed first-fit in a sorted
 * extent list. The accel wrappers reserve capacity * kv_bytes_per_token against mem_total; a
 * slab can be up to (16 * parts - 1) positions larger than that, so placement may still fail
 * (ACCEL_ERR_NOMEM, an admission answer) when the pool is nearly full.
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
 * prompts run in several passes. A sparse prompt (FlexPrefill parameters, from an empty
 * sequence, above the dense threshold, within the sparse units' bounds) needs the whole prompt
 * at once: its workspace is placed in the pool for the call and freed after; when the pool has
 * no room the call returns ACCEL_ERR_NOMEM and leaves the sequence as it was (the scheduler
 * then prefills it dense). A card without the kernel prefills with one decode run per token
 * and cannot export. Imports in flight are drained first (the workspace travels through the
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
#include "fpga/backend.h"
#include "sparse/flex.h"
#include "model/ckpt/numerics.h"
#include "fpga/flex_host.h"
#include "fpga/prefill.h"
#include "proto/kv_wire.h"
#include "scheduler/accel_impl.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALIB_MAX_PARAMS 1e9 /* see open_dev */
#define DEFAULT_TIMEOUT_MS 30000 /* a watchdog: a U280 step takes ~10-30 ms, the emulator's of a
                                    7B-shaped model a few seconds */

typedef struct fpga_seq {
    struct accel_seq base;
    uint64_t kv_off, slab;
    uint32_t part_tiles;
    int failed; /* an import of it failed: its KV cannot be trusted */
    uint32_t *run_crc; /* (n_layers) the wire payload CRC of each layer of the run of positions
                          being imported: what kv_check must find once the run is complete */
} fpga_seq;

typedef struct extent {
    uint64_t off, len;
} extent;

typedef struct fpga_dev {
    struct accel_dev base;
    fpga_card card;
    int index, emu;
    fpga_quant_opts q;
    char qstr[256];
    int image_cached;
    char image_path[1100];
    float *inv_freq, *x0, *cs, *sn, *scratch_logits;
    uint32_t *check_crc;  /* (n_layers) kv_check's report */
    uint64_t landed_corrupt; /* imports whose KV changed after the producer's CRC (kv_check) */
    extent *ext;
    int n_ext, cap_ext;
    uint64_t pool_lo, pool_hi;
    int can_prefill;      /* the prefill kernel and its standing workspace are there */
    uint64_t pf_ws_off;   /* the standing workspace: FPGA_PF_PASS rows, FPGA_PF_F_KVF */
    uint32_t pass_rows;   /* rows per dense pass: FPGA_PF_PASS (tests: fewer) */
    uint32_t run_rows;    /* rows per kernel run: FPGA_PF_RUN_ROWS (tests: fewer) */
    fpga_pf_result last_pf;
    fpga_pf_job last_job; /* for tests: where the last prefill's workspace was */
} fpga_dev;

static const struct accel_dev_i fpga_i;

/* ---------------------------------------------------------------- KV pool */

static int pool_alloc(fpga_dev *d, uint64_t len, uint64_t *off)
{
    uint64_t at = d->pool_lo;
    int pos = 0;
    for (; pos < d->n_ext; pos++) {
        if (d->ext[pos].off >= at + len) break;
        at = d->ext[pos].off + d->ext[pos].len;
    }
    if (at + len > d->pool_hi || at + len < at) return -1;
    if (d->n_ext == d->cap_ext) {
        int nc = d->cap_ext ? 2 * d->cap_ext : 16;
        extent *n = realloc(d->ext, sizeof *n * nc);
        if (!n) return -1;
        d->ext = n;
        d->cap_ext = nc;
    }
    memmove(&d->ext[pos + 1], &d->ext[pos], sizeof *d->ext * (d->n_ext - pos));
    d->ext[pos] = (extent){at, len};
    d->n_ext++;
    *off = at;
    return 0;
}

static void pool_free(fpga_dev *d, uint64_t off)
{
    for (int i = 0; i < d->n_ext; i++)
        if (d->ext[i].off == off) {
            memmove(&d->ext[i], &d->ext[i + 1], sizeof *d->ext * (d->n_ext - i - 1));
            d->n_ext--;
            return;
        }
}

/* ---------------------------------------------------------------- statuses */

static void mark_failed(void *owner, int st)
{
    (void)st;
    if (owner) ((fpga_seq *)owner)->failed = 1;
}

/* A card status as the accel interface reports it: a timeout degrades the device; a run or
 * call that failed on arguments the backend built means the card is not in the state the host
 * believes: a device failure. */
static int card_status(fpga_dev *d, int st)
{
    switch (st) {
    case ACCEL_OK:
    case ACCEL_ERR_NOMEM:
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
    int st = fpga_card_drain(&d->card, &owner, mark_failed);
    if (!st) return 0;
    if (st == ACCEL_ERR_CORRUPT) {
        mark_failed(owner, st);
        return owner == self ? st : 0;
    }
    return card_status(d, st);
}

/* ---------------------------------------------------------------- steps */

static int step(fpga_dev *d, fpga_seq *s, int32_t id, int pos, float *logits)
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
    st = fpga_card_step(&d->card, d->x0, d->cs, d->sn, (uint32_t)id, (uint32_t)pos, s->kv_off,
                        s->part_tiles, logits);
    return card_status(d, st);
}

static int fpga_decode(accel_dev *ad, int n, accel_seq *const *seqs, const int32_t *ids,
                       float *logits)
{
    fpga_dev *d = (fpga_dev *)ad;
    int vocab = ad->m->cfg.vocab;
    for (int i = 0; i < n; i++) {
        fpga_seq *s = (fpga_seq *)seqs[i];
        int st = step(d, s, ids[i], s->base.len, logits + (size_t)i * vocab);
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
        if (r->cancel && *r->cancel) return ACCEL_ERR_CANCELLED;
        float *out = d->scratch_logits;
        if (r->logits && r->all_logits) out = r->logits + (size_t)i * vocab;
        else if (r->logits && i == r->n - 1) out = r->logits;
        int st = step(d, s, r->ids[i], s->base.len + i, out);
        if (st) return st;
    }
    return ACCEL_OK;
}

/* 1: the request runs sparse (its parameters into p), 0: dense, or ACCEL_ERR_INVALID. FlexPrefill
 * as the CPU reference decides it (cpu/flex.h), plus the sparse units' bounds (flex_kernel.h):
 * outside them the card runs dense and the report says so. */
static int card_sparse_params(const fpga_dev *d, const fpga_seq *s, const accel_prefill_req *r,
                         fpga_pf_params *p)
{
    const accel_sparse *sp = r->sparse;
    const fpga_dec_desc *desc = &d->card.desc;
    /* settled by the scheduler (sparse/sparse.h); the card's units do FlexPrefill from an empty
     * sequence (xattention and trishape run dense here for now) */
    if (!sp || sp->p.mode != SPARSE_MODE_FLEX || s->base.len != 0) return 0;
    const sparse_flex_params fp = sp->p.flex;
    if (r->n < 2 * FPGA_FLEX_BS || r->n > FPGA_FLEX_MAX_TOKENS ||
        desc->n_heads > FPGA_FLEX_MAX_HEADS ||
        desc->n_heads / desc->n_kv_heads > FPGA_FLEX_MAX_GROUP || desc->head_dim > FPGA_FLEX_MAX_D)
        return 0;
    const int64_t nb = (r->n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    /* budgets in blocks as cpu_flex_index_build counts them (0: the official None) */
    int64_t minb = ((int64_t)(fp.min_budget > 0 ? fp.min_budget : 1) + FPGA_FLEX_BS - 1) /
                   FPGA_FLEX_BS;
    int64_t maxb = ((int64_t)(fp.max_budget > 0 ? fp.max_budget : 2147483647) + FPGA_FLEX_BS - 1) /
                   FPGA_FLEX_BS;
    *p = (fpga_pf_params){.gamma_bits = fpga_flex_bits(fp.gamma),
                          .tau_bits = fpga_flex_bits(fp.tau),
                          .min_blocks = (uint32_t)minb,
                          .max_blocks = (uint32_t)(maxb < nb ? maxb : nb)};
    /* the SAU's cache: FAST-Prefill's 16 MB in KV blocks, half hot; 16 query blocks a window
     * (fpga_flex_opts_default) */
    fpga_flex_opts fo;
    fpga_flex_opts_default(&fo, (int)desc->head_dim);
    p->cache_blocks = (uint32_t)fo.cache_blocks;
    p->hot_blocks = (uint32_t)fo.hot_blocks;
    p->window = (uint32_t)fo.window;
    return 1;
}

static int fpga_prefill(accel_dev *ad, const accel_prefill_req *r)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)r->seq;
    if (r->sparse_report) *r->sparse_report = (accel_sparse_report){.density = 1.0};
    if (r->kv && !r->kv->layer) return ACCEL_ERR_INVALID;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    if (!d->can_prefill) return prefill_by_steps(d, s, r);
    int st = drain(d, s);
    if (st) return st;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    fpga_pf_job j = {.m = ad->m, .ids = r->ids, .n = r->n, .pos0 = (uint32_t)s->base.len,
                     .rope_len = s->base.len + r->n, .kv_off = s->kv_off,
                     .part_tiles = s->part_tiles, .ws_off = d->pf_ws_off, .ws_rows = d->pass_rows,
                     .run_rows = d->run_rows, .ws_flags = FPGA_PF_F_KVF, .logits = r->logits,
                     .all_logits = r->all_logits, .kv = r->kv, .cancel = r->cancel};
    int sparse = card_sparse_params(d, s, r, &j.params);
    if (sparse < 0) return sparse;
    uint64_t ws = 0;
    if (sparse) {
        fpga_pf_ws w;
        fpga_pf_ws_of(&d->card.desc, (uint32_t)r->n, FPGA_PF_F_KVF | FPGA_PF_F_SPARSE, &w);
        if (pool_alloc(d, w.bytes, &ws)) return ACCEL_ERR_NOMEM;
        j.sparse = 1;
        j.ws_off = ws;
        j.ws_rows = (uint32_t)r->n;
        j.ws_flags = FPGA_PF_F_KVF | FPGA_PF_F_SPARSE;
    }
    st = fpga_pf_prefill(&d->card, &j, &d->last_pf);
    /* the sink's refusal and the host's own failures are theirs; the rest is the card's */
    if (st && !d->last_pf.host_status) st = card_status(d, st);
    d->last_job = j;
    if (ws) pool_free(d, ws);
    if (!st && r->sparse_report && d->last_pf.layers_sparse) {
        accel_sparse_report *rep = r->sparse_report;
        rep->layers_sparse = d->last_pf.layers_sparse;
        rep->blocks_computed = d->last_pf.blocks_computed;
        rep->blocks_causal = d->last_pf.blocks_causal;
        rep->density = rep->blocks_causal ? (double)rep->blocks_computed / rep->blocks_causal : 1.0;
    }
    return st;
}

/* proto/kv.h allows int8 values -127..127 and scales that are finite and not negative. */
static int chunk_valid(const proto_kv_layer *c)
{
    size_t nv = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t ns = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    if (!c->k || !c->v || !c->k_scale || !c->v_scale) return 0;
    for (size_t i = 0; i < nv; i++)
        if (c->k[i] == 0x80 || c->v[i] == 0x80) return 0;
    for (size_t i = 0; i < ns; i++) {
        uint16_t a = c->k_scale[i], b = c->v_scale[i];
        if ((a & 0x8000) || (a & 0x7c00) == 0x7c00 || (b & 0x8000) || (b & 0x7c00) == 0x7c00)
            return 0;
    }
    return 1;
}

/* A complete run of positions [pos0, pos0 + n): every layer of it, read back from the tiles by
 * kv_check, must have the payload CRC its chunk had. */
static int check_landed(fpga_dev *d, fpga_seq *s, int pos0, int n)
{
    int st = drain(d, s);
    if (st) return st;
    if (s->failed) return ACCEL_ERR_CORRUPT;
    void *owner = NULL;
    st = fpga_card_check(&d->card, (uint32_t)pos0, (uint32_t)n, s->kv_off, s->part_tiles,
                         d->check_crc, &owner);
    if (st) return card_status(d, st);
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
    if (!chunk_valid(c)) {
        s->failed = 1;
        return ACCEL_ERR_CORRUPT;
    }
    s->run_crc[c->layer] = has_crc ? crc : proto_kv_payload_crc(c);
    int piece = fpga_card_piece_tokens(&d->card);
    for (int t0 = 0; t0 < c->n_tokens; t0 += piece) {
        int n = c->n_tokens - t0 < piece ? c->n_tokens - t0 : piece;
        void *failed = NULL;
        int st = fpga_card_scatter(&d->card, c, t0, n, s->kv_off, s->part_tiles, s, &failed);
        if (st == ACCEL_ERR_CORRUPT) {
            mark_failed(failed, st);
            if (failed == s) return st;
        } else if (st) {
            mark_failed(failed, st);
            return card_status(d, st);
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

/* ---------------------------------------------------------------- sequences */

static int fpga_seq_new(accel_dev *ad, int capacity, accel_seq **out)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = calloc(1, sizeof *s);
    if (s) s->run_crc = calloc((size_t)ad->m->cfg.n_layers, sizeof *s->run_crc);
    if (!s || !s->run_crc) {
        free(s);
        return ACCEL_ERR_NOMEM;
    }
    s->part_tiles = fpga_dec_part_tiles((uint32_t)capacity, d->card.desc.kv_parts);
    s->slab = fpga_dec_slab_bytes(&d->card.lo, s->part_tiles);
    if (pool_alloc(d, s->slab, &s->kv_off)) {
        free(s->run_crc);
        free(s);
        return ACCEL_ERR_NOMEM;
    }
    *out = &s->base;
    return ACCEL_OK;
}

static void fpga_seq_free(accel_dev *ad, accel_seq *as)
{
    fpga_dev *d = (fpga_dev *)ad;
    fpga_seq *s = (fpga_seq *)as;
    /* a scatter still writing into this slab must finish before the slab is reused; on a
     * failed card nothing is waited for and the slab stays taken */
    void *owner = NULL;
    int st = atomic_load(&ad->health) == ACCEL_HEALTH_FAILED
                 ? ACCEL_ERR_DEVICE
                 : fpga_card_drain(&d->card, &owner, mark_failed);
    if (st == ACCEL_ERR_TIMEOUT || st == ACCEL_ERR_DEVICE) {
        accel_dev_fail(ad); /* the slab stays taken: the card may still write it */
    } else {
        if (st) mark_failed(owner, st);
        pool_free(d, s->kv_off);
    }
    free(s->run_crc);
    free(s);
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
    out->max_batch = 1;
}

static void fpga_free(accel_dev *ad)
{
    fpga_dev *d = (fpga_dev *)ad;
    void *owner;
    if (d->card.x && atomic_load(&ad->health) != ACCEL_HEALTH_FAILED)
        fpga_card_drain(&d->card, &owner, NULL);
    fpga_card_close(&d->card);
    free(d->inv_freq);
    free(d->x0);
    free(d->cs);
    free(d->sn);
    free(d->scratch_logits);
    free(d->check_crc);
    free(d->ext);
    free(d);
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
    d->base.opts = *o;
    d->index = index;
    d->emu = emu;
    const model_config *c = &m->cfg;
    fpga_quant_opts_default(&d->q, o->weight_bits ? o->weight_bits : 8, c->hidden);
    /* Calibration (sampling, smoothing search, GPTQ) runs on the host CPU at load: seconds for
     * stories260K, hours for a 7B model on a few cores (GPTQ is rows x K^2 per matrix). Past
     * CALIB_MAX_PARAMS the default is round-to-nearest with the clipping search (cached like
     * any image); TANDEM_FPGA_QUANT=calib=8x128 asks for it anyway. */
    double params = (double)c->n_layers * c->hidden *
                    (2.0 * c->n_heads * c->head_dim + 2.0 * c->n_kv_heads * c->head_dim +
                     3.0 * c->intermediate);
    if (params > CALIB_MAX_PARAMS) d->q.calib_seqs = d->q.calib_len = 0;
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
    if (emu && !d->card.emu) {
        snprintf(err, errlen, "%s:%d: %s is not the tandem emulator", kind, index, lib);
        goto fail;
    }
    if (emu && o->pace && (st = fpga_xrt_emu_set_pace(d->card.x, d->card.dev, 1))) {
        snprintf(err, errlen, "%s:%d: %s", kind, index, fpga_xrt_error());
        goto fail;
    }
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
    d->base.mem_total = (d->pool_hi - d->pool_lo) * FPGA_DEC_CH;
    if (o->mem_limit && o->mem_limit < d->base.mem_total) d->base.mem_total = o->mem_limit;
    d->base.kv_bytes_per_token = 2ull * c->n_layers * c->n_kv_heads * (c->head_dim + 2);
    int half = c->head_dim / 2;
    d->inv_freq = malloc(sizeof(float) * half);
    d->x0 = malloc(sizeof(float) * c->hidden);
    d->cs = malloc(sizeof(float) * half);
    d->sn = malloc(sizeof(float) * half);
    d->scratch_logits = malloc(sizeof(float) * c->vocab);
    d->check_crc = calloc((size_t)c->n_layers, sizeof *d->check_crc);
    if (!d->inv_freq || !d->x0 || !d->cs || !d->sn || !d->scratch_logits || !d->check_crc) {
        snprintf(err, errlen, "%s: out of memory", kind);
        goto fail;
    }
    model_rope_inv_freq(c, 0, d->inv_freq);
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

void fpga_dev_seq_slab(accel_dev *ad, accel_seq *as, uint64_t *kv_off, uint32_t *part_tiles)
{
    *kv_off = 0;
    *part_tiles = 0;
    if (!ad || ad->i != &fpga_i) return;
    fpga_seq *s = (fpga_seq *)as;
    *kv_off = s->kv_off;
    *part_tiles = s->part_tiles;
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
