/* fpga/prefill.c — see prefill.h. Host buffers: one pass of embeddings and rotary angles, one
 * channel's share of a striped array while it travels, and (with a KV sink) one layer's kvf
 * blocks and its wire chunk. */
#include "fpga/prefill.h"
#include "model/ckpt/numerics.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/flex_host.h"
#include "sparse/sparse.h"
#include <stdlib.h>
#include <string.h>

typedef struct pf_bufs {
    float *x, *rope; /* (rows, hidden), (rows, head_dim) */
    uint8_t *stripe; /* one channel's items of a striped array */
    uint8_t *kvf;    /* a layer's kvf blocks, (Hk, nb) */
    uint8_t *wire;   /* its wire chunk: K | V | K scales | V scales */
} pf_bufs;

static void bufs_free(pf_bufs *b)
{
    free(b->x);
    free(b->rope);
    free(b->stripe);
    free(b->kvf);
    free(b->wire);
}

/* Items [i0, i0 + count) of striped array a from host rows of `item` bytes each (row 0 = item
 * i0), one channel (one contiguous run on the card) at a time. */
static int put_striped(fpga_card *c, const fpga_pf_job *j, const fpga_pf_arr *a, uint64_t i0,
                       uint64_t count, const uint8_t *src, pf_bufs *b)
{
    for (uint32_t ch = 0; ch < FPGA_DEC_CH; ch++) {
        uint64_t first = i0 + (ch + FPGA_DEC_CH - i0 % FPGA_DEC_CH) % FPGA_DEC_CH, k = 0;
        if (first >= i0 + count) continue;
        for (uint64_t i = first; i < i0 + count; i += FPGA_DEC_CH, k++)
            memcpy(b->stripe + k * a->item, src + (i - i0) * a->item, a->item);
        int st = fpga_card_write_bank(c, (int)ch, j->ws_off + fpga_pf_item_off(a, first),
                                      b->stripe, k * a->item);
        if (st) return st;
    }
    return 0;
}

static int get_striped(fpga_card *c, const fpga_pf_job *j, const fpga_pf_arr *a, uint64_t count,
                       uint8_t *dst, pf_bufs *b)
{
    for (uint32_t ch = 0; ch < FPGA_DEC_CH && ch < count; ch++) {
        uint64_t k = (count - ch + FPGA_DEC_CH - 1) / FPGA_DEC_CH;
        int st = fpga_card_read_bank(c, (int)ch, j->ws_off + a->off, b->stripe, k * a->item);
        if (st) return st;
        for (uint64_t i = ch, e = 0; i < count; i += FPGA_DEC_CH, e++)
            memcpy(dst + i * a->item, b->stripe + e * a->item, a->item);
    }
    return 0;
}

/* A failure that is not the card's: recorded so that the caller does not blame the card. */
static int host_fail(fpga_pf_result *res, int st)
{
    res->host_status = st;
    return st;
}

/* Layer l's K/V of the pass's np rows (from the kvf blocks) as one wire chunk to the sink. */
static int export_layer(fpga_card *c, const fpga_pf_job *j, const fpga_pf_ws *w, int l,
                        uint32_t pos0, uint32_t row0, uint32_t np, pf_bufs *b,
                        fpga_pf_result *res)
{
    const fpga_dec_desc *d = &c->desc;
    const uint32_t Hk = d->n_kv_heads, hd = d->head_dim;
    const uint64_t qb = fpga_flex_qblock_bytes((int)hd), vbytes = (uint64_t)np * Hk * hd;
    int st = get_striped(c, j, &w->kvf, (uint64_t)Hk * w->nb, b->kvf, b);
    if (st) return st;
    uint8_t *kv[2] = {b->wire, b->wire + vbytes};
    uint16_t *sc[2] = {(uint16_t *)(b->wire + 2 * vbytes),
                       (uint16_t *)(b->wire + 2 * vbytes) + (uint64_t)np * Hk};
    for (uint32_t t = 0; t < np; t++)
        for (uint32_t g = 0; g < Hk; g++) {
            const uint32_t r = row0 + t;
            const uint8_t *blk = b->kvf + ((uint64_t)g * w->nb + r / FPGA_FLEX_BS) * 2 * qb;
            for (int which = 0; which < 2; which++) {
                const uint8_t *half = blk + which * qb;
                float s;
                memcpy(kv[which] + ((uint64_t)t * Hk + g) * hd,
                       half + (uint64_t)(r % FPGA_FLEX_BS) * hd, hd);
                memcpy(&s, half + (uint64_t)FPGA_FLEX_BS * hd + 4ull * (r % FPGA_FLEX_BS), 4);
                /* the scale was an fp16 value (proto/kv.h): the conversion back is exact */
                sc[which][(uint64_t)t * Hk + g] = fpga_km_f32_to_f16(s);
            }
        }
    proto_kv_layer chunk = {.layer = l,
                            .pos0 = (int)pos0,
                            .n_tokens = (int)np,
                            .n_kv_heads = (int)Hk,
                            .head_dim = (int)hd,
                            .dtype = PROTO_KV_INT8,
                            .k = kv[0],
                            .v = kv[1],
                            .k_scale = sc[0],
                            .v_scale = sc[1]};
    st = j->kv->layer(j->kv->ctx, &chunk);
    return st ? host_fail(res, st) : 0;
}

static void add_report(fpga_pf_result *r, const fpga_pf_report *p)
{
    r->layers_sparse++;
    r->n_query_aware += (int)p->n_query_aware;
    r->blocks_computed += (int64_t)p->nnz;
    r->blocks_causal += (int64_t)p->causal;
    r->accesses += p->accesses;
    r->hits += p->hits;
    r->hot_hits += p->hot_hits;
    r->cold_hits += p->cold_hits;
    r->misses += p->misses;
    r->kv_bytes += p->kv_bytes;
    r->kv_bytes_nocache += p->kv_bytes_nocache;
}

/* A phase of a layer over rows [row0, row0 + np) of a wn-row pass at pos0, in runs of at most
 * FPGA_PF_RUN_ROWS rows so that no run outlasts the card's watchdog (a U280 spends ~0.3 s on
 * 4096 rows of a 7B layer's QKV + FFN). */
static int rows_run(fpga_card *c, const fpga_pf_job *j, uint32_t mode, uint32_t l, uint32_t pos0,
                    uint32_t wn, uint32_t row0, uint32_t np, fpga_pf_result *res)
{
    const uint32_t k = j->run_rows ? j->run_rows : FPGA_PF_RUN_ROWS;
    for (uint32_t r0 = row0; r0 < row0 + np; r0 += k) {
        uint32_t r1 = row0 + np - r0 < k ? row0 + np : r0 + k;
        int st =
            fpga_card_pf_run(c, mode, l, pos0, wn, r0, r1, j->kv_off, j->part_tiles, j->ws_off,
                             j->n_ids);
        res->runs++;
        if (st) return st;
    }
    return 0;
}

/* One pass: rows done .. done + np of the job. A dense pass's workspace rows are the pass's
 * (row 0 = position pos0 + done); a sparse job's are the sequence's positions (the kernel's pos0
 * is 0 and the chunk's rows start at row j->pos0), so that the units see every key before it. */
static int pass(fpga_card *c, const fpga_pf_job *j, uint32_t done, uint32_t np, pf_bufs *b,
                fpga_pf_result *res)
{
    const model *m = j->m;
    const fpga_dec_desc *d = &c->desc;
    const uint32_t pos0 = j->pos0 + done, hd = d->head_dim, half = hd / 2;
    const uint32_t kpos0 = j->sparse ? 0 : pos0, row0 = j->sparse ? j->pos0 : 0;
    const uint32_t wn = row0 + np;
    /* a dense pass writes the kvf blocks only for an export (x, rope, out and wide sit at the
     * same offsets whatever the flags: pf_layout.h) */
    const uint32_t flags = j->sparse ? j->ws_flags : j->kv ? FPGA_PF_F_KVF : 0;
    if ((flags & ~j->ws_flags) != 0) return host_fail(res, ACCEL_ERR_INVALID);
    fpga_pf_ws w;
    fpga_pf_ws_of(d, wn, flags, &w);
    float inv[FPGA_DEC_MAX_HEAD_DIM / 2];
    model_rope_inv_freq(&m->cfg, m->cfg.rope.type == MODEL_ROPE_DYNAMIC ? j->rope_len : 0, inv);
    for (uint32_t t = 0; t < np; t++) {
        model_row_f32(&m->embed, j->ids[done + t], b->x + (uint64_t)t * d->hidden);
        model_rope_angles(inv, (int)half, (int)(pos0 + t), b->rope + (uint64_t)t * hd,
                        b->rope + (uint64_t)t * hd + half);
    }
    int st = put_striped(c, j, &w.x, row0, np, (const uint8_t *)b->x, b);
    if (!st) st = put_striped(c, j, &w.rope, row0, np, (const uint8_t *)b->rope, b);
    for (uint32_t l = 0; !st && l < d->n_layers; l++) {
        if (j->cancel && __atomic_load_n(j->cancel, __ATOMIC_ACQUIRE))
            return host_fail(res, ACCEL_ERR_CANCELLED);
        if (j->sparse) {
            fpga_pf_report rep;
            st = rows_run(c, j, FPGA_PF_QKV | flags, l, kpos0, wn, row0, np, res);
            if (!st)
                st = fpga_card_pf_run(c, FPGA_PF_ATTN | flags, l, kpos0, wn, row0, wn, j->kv_off,
                                      j->part_tiles, j->ws_off, j->n_ids);
            res->runs++;
            if (!st) st = fpga_card_pf_report(c, &rep);
            if (!st && (rep.layer != l || rep.n != wn)) st = ACCEL_ERR_DEVICE;
            if (!st) add_report(res, &rep);
            if (!st) st = rows_run(c, j, FPGA_PF_POST | flags, l, kpos0, wn, row0, np, res);
        } else {
            st = rows_run(c, j, FPGA_PF_DENSE | flags, l, kpos0, wn, row0, np, res);
        }
        if (!st && j->kv && (st = export_layer(c, j, &w, (int)l, pos0, row0, np, b, res)))
            return st;
    }
    if (st || !j->logits) return st;
    const int vocab = m->cfg.vocab;
    for (uint32_t t = j->all_logits ? 0 : np - 1; t < np; t++) {
        if (!j->all_logits && done + np != (uint32_t)j->n) break;
        st = fpga_card_pf_run(c, FPGA_PF_HEAD | flags, 0, kpos0, wn, row0 + t, row0 + t + 1,
                              j->kv_off, j->part_tiles, j->ws_off, j->n_ids);
        res->runs++;
        if (!st)
            st =
                fpga_card_logits(c, j->logits + (j->all_logits ? (uint64_t)(done + t) * vocab : 0));
        if (st) return st;
    }
    return 0;
}

int fpga_pf_prefill(fpga_card *c, const fpga_pf_job *j, fpga_pf_result *res)
{
    const fpga_dec_desc *d = &c->desc;
    memset(res, 0, sizeof *res);
    /* a sparse job's workspace rows are its positions 0 .. pos0 + n; its chunk starts on a
     * block boundary */
    const uint32_t P = j->sparse ? j->pos0 + (uint32_t)j->n : j->ws_rows;
    const uint32_t host_rows = j->sparse ? (uint32_t)j->n : P;
    if (!P || (j->sparse && (P > j->ws_rows || j->pos0 % FPGA_FLEX_BS)) ||
        j->run_rows % FPGA_PF_CHUNK)
        return host_fail(res, ACCEL_ERR_INVALID);
    fpga_pf_ws w;
    fpga_pf_ws_of(d, P, j->ws_flags, &w);
    const uint64_t items = (uint64_t)d->n_kv_heads * w.nb;
    uint64_t stripe = (P + FPGA_DEC_CH - 1) / FPGA_DEC_CH * w.x.item;
    if (j->kv && (items + FPGA_DEC_CH - 1) / FPGA_DEC_CH * w.kvf.item > stripe)
        stripe = (items + FPGA_DEC_CH - 1) / FPGA_DEC_CH * w.kvf.item;
    pf_bufs b = {
        .x = malloc(4ull * host_rows * d->hidden),
        .rope = malloc(4ull * host_rows * d->head_dim),
        .stripe = malloc(stripe),
        .kvf = j->kv ? malloc(items * w.kvf.item) : NULL,
        .wire = j->kv ? malloc((uint64_t)host_rows * d->n_kv_heads * (2ull * d->head_dim + 4))
                      : NULL,
    };
    int st = host_fail(res, ACCEL_ERR_NOMEM);
    if (b.x && b.rope && b.stripe && (!j->kv || (b.kvf && b.wire))) {
        res->host_status = 0;
        st = 0;
        if (j->sparse) st = fpga_card_pf_params(c, &j->params);
        if (!st && j->n_ids) st = fpga_card_pf_table(c, j->kv_ids, j->n_ids);
        uint64_t ns0 = c->pf_modeled_ns;
        for (uint32_t done = 0; !st && done < (uint32_t)j->n; done += host_rows) {
            uint32_t np = (uint32_t)j->n - done < host_rows ? (uint32_t)j->n - done : host_rows;
            st = pass(c, j, done, np, &b, res);
        }
        res->modeled_ns = c->pf_modeled_ns - ns0;
    }
    bufs_free(&b);
    return st;
}

/* fpga_pf_sparse_params: see prefill.h (FlexPrefill's budgets as cpu_flex_index_build counts them). */
int fpga_pf_sparse_params(const fpga_dec_desc *desc, int pos0, const accel_prefill_req *r,
                          fpga_pf_params *p)
{
    const accel_sparse *sp = r->sparse;
    if (!sp) return 0;
    const int N = pos0 + r->n;
    if (N > FPGA_FLEX_MAX_TOKENS || desc->n_heads > FPGA_FLEX_MAX_HEADS ||
        desc->n_heads / desc->n_kv_heads > FPGA_FLEX_MAX_GROUP || desc->head_dim > FPGA_FLEX_MAX_D)
        return 0;
    /* the SAU's cache: FAST-Prefill's 16 MB in KV blocks, half hot; 16 query blocks a window
     * (fpga_flex_opts_default) */
    fpga_flex_opts fo;
    fpga_flex_opts_default(&fo, (int)desc->head_dim);
    *p = (fpga_pf_params){.cache_blocks = (uint32_t)fo.cache_blocks,
                          .hot_blocks = (uint32_t)fo.hot_blocks,
                          .window = (uint32_t)fo.window};
    if (sp->p.mode == SPARSE_MODE_XATTN || sp->p.mode == SPARSE_MODE_TRISHAPE) {
        if (pos0 % FPGA_FLEX_BS) return 0;
        fpga_xattn_params xp = {0};
        if (sp->p.mode == SPARSE_MODE_XATTN) {
            if (sp->p.xattention_block_size != FPGA_FLEX_BS) return 0;
            xp.method = FPGA_XATTN_METHOD_XATTN;
            xp.stride = (uint32_t)sp->p.xattention_stride;
            fpga_xattn_f64_bits(sp->p.xattention_threshold, &xp.thr_lo, &xp.thr_hi);
        } else {
            int lo, hi;
            sparse_tri_skip(&sp->p, pos0, &lo, &hi);
            xp.method = FPGA_XATTN_METHOD_TRISHAPE;
            xp.tri_lo = (uint32_t)(lo / FPGA_FLEX_BS);
            xp.tri_hi = (uint32_t)(hi / FPGA_FLEX_BS);
        }
        if (!fpga_xattn_ok((uint32_t)N, (uint32_t)(pos0 / FPGA_FLEX_BS), desc->n_heads,
                           desc->n_kv_heads, desc->head_dim, &xp))
            return 0;
        p->method = xp.method;
        p->stride = xp.stride;
        p->thr_lo = xp.thr_lo;
        p->thr_hi = xp.thr_hi;
        p->tri_lo = xp.tri_lo;
        p->tri_hi = xp.tri_hi;
        return 1;
    }
    /* FlexPrefill: its last-block estimate over every key; a chunk after cached positions
     * (a whole block of them) keeps its own query blocks (cpu/flex_index.c), at least a block */
    if (sp->p.mode != SPARSE_MODE_FLEX || pos0 % FPGA_FLEX_BS || N < 2 * FPGA_FLEX_BS ||
        r->n < FPGA_FLEX_BS)
        return 0;
    const sparse_flex_params fp = sp->p.flex;
    const int64_t nb = (N + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    /* budgets in blocks as cpu_flex_index_build counts them (0: the official None) */
    int64_t minb = ((int64_t)(fp.min_budget > 0 ? fp.min_budget : 1) + FPGA_FLEX_BS - 1) /
                   FPGA_FLEX_BS;
    int64_t maxb = ((int64_t)(fp.max_budget > 0 ? fp.max_budget : 2147483647) + FPGA_FLEX_BS - 1) /
                   FPGA_FLEX_BS;
    p->method = FPGA_PF_METHOD_FLEX;
    p->gamma_bits = fpga_flex_bits(fp.gamma);
    p->tau_bits = fpga_flex_bits(fp.tau);
    p->min_blocks = (uint32_t)minb;
    p->max_blocks = (uint32_t)(maxb < nb ? maxb : nb);
    return 1;
}
