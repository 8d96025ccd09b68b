/* fpga/kernels/tls_dec.h — AsyncTLS inside the card's decode run (fpga/kernels/decode.c): the
 * sequence's key summaries kept in HBM, both selection levels on the step's own queries, and the
 * attention over the selected positions only. The reference is sparse/tls.h (the CPU's), step
 * for step:
 *   - summaries: per (layer, KV head) and block of `bs` positions the channel max / min of K, and
 *     per position its 4-bit label of the r calibrated channels (sparse_tls_put's arithmetic),
 *     of the K the card holds: the int8 values times their fp16 scale (exact in fp32). The run
 *     brings them up to date itself: positions [upto, pos] (those a prefill or an import wrote,
 *     and the step's own), read back from the tiles, so every KV write path is covered by one;
 *   - selection: tls_select_unit (fpga/kernels/tls_select.c: sparse_tls_select bit for bit) on
 *     the group's queries of this step, over keys 0..pos;
 *   - attention: fpga_kd_sel_head over the kept positions (dec_step.h): only their tiles are
 *     read; with every position kept, the dense step's bits.
 *   Dense where sparse_tls_dense says so (layers below dense_layers, n_keys <= dense_below).
 *
 * The arena: one region per sequence at the same offset in every bank BO (pool superblocks,
 * like a sparse prefill's workspace). Group gi = layer * n_kv + head lives in channel gi % 32 at
 * slot gi / 32: its calibrated channels (r u16) among the channel's others at the start (the
 * host writes them once per channel), and its data: summaries (cap_blocks, 2, hd) fp32 | codes
 * (cap, r / 2) | lmin (cap) fp32 | lstep (cap) fp32, each 64-byte aligned.
 *
 * io (at fpga_dec_io_sel_off, when the run's tls_off is not 0): the parameters (fpga_tls_io,
 * host -> card), then with `report` set the run's selections — the selection-table format of
 * dec_layout.h, lists of token_budget — and every layer's q (n_layers x n_heads x hd fp32):
 * what the tests compare with the reference. */
#ifndef TANDEM_FPGA_TLS_DEC_H
#define TANDEM_FPGA_TLS_DEC_H
#include "fpga/kernels/dec_step.h"
#include "fpga/kernels/tls_kernel.h"

#define FPGA_TLS_IO_MAGIC 0x534c5441u /* "ATLS" */

typedef struct fpga_tls_io {
    uint32_t magic;
    uint32_t block_size, block_budget, token_budget, r, dense_layers;
    uint32_t dense_below; /* resolved: n_keys <= it attends densely */
    uint32_t cap;         /* the arena's positions */
    uint32_t report;      /* 1: the selections and q into io after this header */
    /* card -> host, written at the end of the run: keys attended and keys held, summed over
     * layers and KV heads (dense ones count every key) */
    uint32_t keys_read_lo, keys_read_hi, keys_total_lo, keys_total_hi;
    uint32_t stagger; /* 1: AsyncTLS's staggered pipeline (sparse/tls_pipe.h): attention on the
                         blocks chosen at the previous step, level 1 for the next one */
    uint32_t offload; /* 1 (with stagger): the KV tiles are in DDR4 or host memory (the run's
                         kv_tier), a
                         resident cache of blocks in the arena ("Offload" above) */
    uint32_t reset;   /* 1: no previous step: every group selects anew, nothing resident */
    /* card -> host (stagger): level-1 blocks made resident (sparse/tls_pipe.h's `fetched`) and
     * the blocks chosen (its `baseline`), summed over the sparse groups */
    uint32_t fetched_lo, fetched_hi, chosen_lo, chosen_hi;
    uint32_t reserved[5];
} fpga_tls_io;

_Static_assert(sizeof(fpga_tls_io) <= FPGA_DEC_REC_TLS_BYTES, "a batch record's AsyncTLS room");

typedef struct fpga_tls_arena {
    uint32_t cap, cap_blocks, slots;  /* slots: groups per channel */
    uint64_t ch_stride;               /* a group's channels: r u16, 64-byte aligned */
    uint64_t data_off;                /* the groups' data after every slot's channels */
    uint64_t summ_off, code_off, lmin_off, lstep_off, group_bytes; /* inside a group's data */
    uint64_t pipe_off;   /* stagger: the group's pipeline state (FPGA_TLS_PIPE_*) */
    uint32_t res_sparse, res_dense; /* offload: resident slots of a sparse / dense layer's group */
    uint32_t res_tiles;  /* tiles of one part in one level-1 block */
    uint64_t res_bt;     /* their bytes: one slot of one stream */
    uint64_t res_off;    /* offload: the resident cache (per channel, layer after layer) */
    uint64_t chan_bytes; /* the arena's bytes in each bank BO */
} fpga_tls_arena;

/* The pipeline state of a group (stagger), u32 words at pipe_off: [0] n_prev (FPGA_TLS_NONE:
 * none), [1] prev_nb, then prev (block_budget), slot_of (cap_blocks: the block's resident slot
 * or FPGA_TLS_NONE), owner (res_sparse: the slot's block or FPGA_TLS_NONE). */
#define FPGA_TLS_NONE 0xffffffffu
#define FPGA_TLS_PIPE_HDR 16

static inline uint64_t fpga_tls_align(uint64_t n)
{
    return (n + 63) / 64 * 64;
}

/* Per channel: the channels of its groups (slot order), then their data; with stagger each
 * group's data ends with its pipeline state; with offload the resident cache follows. */
static inline void fpga_tls_arena_of(const fpga_dec_desc *d, const fpga_tls_io *p,
                                     fpga_tls_arena *a)
{
    const uint64_t hd = d->head_dim, groups = (uint64_t)d->n_layers * d->n_kv_heads;
    const uint32_t r = p->r, bs = p->block_size, cap = p->cap;
    a->cap = cap;
    a->cap_blocks = (cap + bs - 1) / bs;
    a->slots = (uint32_t)((groups + FPGA_DEC_CH - 1) / FPGA_DEC_CH);
    a->ch_stride = fpga_tls_align(2ull * r);
    a->data_off = a->slots * a->ch_stride;
    a->summ_off = 0;
    a->code_off = fpga_tls_align((uint64_t)a->cap_blocks * 2 * hd * 4);
    a->lmin_off = a->code_off + fpga_tls_align((uint64_t)cap * (r / 2));
    a->lstep_off = a->lmin_off + fpga_tls_align(4ull * cap);
    a->group_bytes = a->lstep_off + fpga_tls_align(4ull * cap);
    a->res_sparse = p->block_budget + 2 < a->cap_blocks ? p->block_budget + 2 : a->cap_blocks;
    a->res_dense = a->cap_blocks;
    a->pipe_off = a->group_bytes;
    if (p->stagger)
        a->group_bytes += fpga_tls_align(FPGA_TLS_PIPE_HDR + 4ull * p->block_budget +
                                         4ull * a->cap_blocks + 4ull * a->res_sparse);
    a->chan_bytes = a->data_off + a->slots * a->group_bytes;
    a->res_tiles = bs / (FPGA_DEC_TILE * d->kv_parts);
    a->res_bt = (uint64_t)a->res_tiles * 32ull * (hd + 2);
    a->res_off = a->chan_bytes;
    if (p->offload) {
        const uint64_t dl = p->dense_layers < d->n_layers ? p->dense_layers : d->n_layers;
        a->chan_bytes += (dl * a->res_dense + (d->n_layers - dl) * a->res_sparse) * a->res_bt;
    }
}

/* 1 when the card can keep a sequence's KV in DDR4 with a resident cache for these parameters:
 * every layer's streams are one per channel (n_kv_heads x parts = 32: stream slot = layer) and a
 * level-1 block is whole tiles of every part. */
static inline int fpga_tls_offload_ok(const fpga_dec_desc *d, uint32_t bs)
{
    return d->n_kv_heads * d->kv_parts == FPGA_DEC_CH && bs % (FPGA_DEC_TILE * d->kv_parts) == 0;
}

/* The resident cache of layer l as a KV map whose blocks are level-1 blocks and whose ids are
 * the slots in slot_of (fpga_dec_kv_tile_off then gives base + slot x res_bt + ...): the
 * layer's streams sit in their own channels at the same offset. */
static inline void fpga_tls_res_map(const fpga_dec_desc *d, const fpga_dec_layout *lo,
                                    const fpga_tls_arena *a, const fpga_tls_io *p, uint64_t off,
                                    uint32_t l, const uint32_t *slot_of, fpga_dec_kvmap *m)
{
    const uint64_t dl = p->dense_layers < d->n_layers ? p->dense_layers : d->n_layers;
    const uint64_t before = l < dl ? (uint64_t)l * a->res_dense
                                   : dl * a->res_dense + (l - dl) * a->res_sparse;
    m->base = off + a->res_off + before * a->res_bt;
    m->tile_bytes = lo->tile_bytes;
    m->blk_tiles = a->res_tiles;
    m->bt = a->res_bt;
    m->group = 1u << 30; /* consecutive slots are contiguous */
    m->slot_stride = 0;
    m->super_bytes = 0;
    m->ids = slot_of;
    m->n_ids = a->cap_blocks;
}

/* The adapters' check of a run's AsyncTLS parameters (the hardware would follow anything; the
 * emulator must not crash): within the selection unit's bounds, the pipeline's rules, the arena
 * at tls_off inside every bank BO (min_size) above the image, its channels real (ch: the banks),
 * a report only where report_ok. 1 when fine. */
static inline int fpga_tls_args_ok(const fpga_dec_desc *d, const fpga_dec_layout *lo,
                                   const fpga_tls_io *tp, uint32_t pos, uint32_t upto,
                                   uint64_t tls_off, uint64_t min_size, uint8_t *const *ch,
                                   uint32_t kv_tier, int report_ok);

/* Group (layer l, KV head g): its channel and slot. */
static inline uint32_t fpga_tls_group_ch(const fpga_dec_desc *d, uint32_t l, uint32_t g)
{
    return (uint32_t)(((uint64_t)l * d->n_kv_heads + g) % FPGA_DEC_CH);
}
static inline uint64_t fpga_tls_group_slot(const fpga_dec_desc *d, uint32_t l, uint32_t g)
{
    return ((uint64_t)l * d->n_kv_heads + g) / FPGA_DEC_CH;
}
/* Its channels (r u16) and its data. */
static inline uint8_t *fpga_tls_chans(uint8_t *const *ch, const fpga_dec_desc *d, uint64_t off,
                                      const fpga_tls_arena *a, uint32_t l, uint32_t g)
{
    return ch[fpga_tls_group_ch(d, l, g)] + off + fpga_tls_group_slot(d, l, g) * a->ch_stride;
}
static inline uint8_t *fpga_tls_group(uint8_t *const *ch, const fpga_dec_desc *d, uint64_t off,
                                      const fpga_tls_arena *a, uint32_t l, uint32_t g)
{
    return ch[fpga_tls_group_ch(d, l, g)] + off + a->data_off +
           fpga_tls_group_slot(d, l, g) * a->group_bytes;
}

static inline int fpga_tls_args_ok(const fpga_dec_desc *d, const fpga_dec_layout *lo,
                                   const fpga_tls_io *tp, uint32_t pos, uint32_t upto,
                                   uint64_t tls_off, uint64_t min_size, uint8_t *const *ch,
                                   uint32_t kv_tier, int report_ok)
{
    const uint32_t G = d->n_heads / d->n_kv_heads, bs = tp->block_size;
    if (tp->magic != FPGA_TLS_IO_MAGIC || (bs != 16 && bs != 32 && bs != 64 && bs != 128) ||
        tp->r < 2 || tp->r % 2 || tp->r > d->head_dim || d->head_dim > TLS_K_MAX_HD ||
        G > TLS_K_MAX_G || tp->block_budget < 1 || tp->token_budget < 1 ||
        tp->token_budget > TLS_K_MAX_CAND || tp->cap <= pos || upto > pos ||
        (tp->report && !report_ok))
        return 0;
    const uint64_t nb = ((uint64_t)tp->cap + bs - 1) / bs;
    if (nb > TLS_K_MAX_BLOCKS ||
        (uint64_t)(tp->block_budget < nb ? tp->block_budget : nb) * bs > TLS_K_MAX_CAND)
        return 0;
    /* offload: the staggered pipeline over the KV in DDR4, a shape whose layers fill the
     * channels, and dense contexts short enough to be resident whole */
    if (tp->stagger > 1 || tp->offload > 1 || tp->reset > 1 || (tp->offload && !tp->stagger) ||
        (tp->offload != 0) != (kv_tier != 0) || (tp->offload && !fpga_tls_offload_ok(d, bs)) ||
        (tp->stagger && (uint64_t)tp->dense_below > (uint64_t)tp->block_budget * bs))
        return 0;
    fpga_tls_arena ar;
    fpga_tls_arena_of(d, tp, &ar);
    if (tls_off < lo->image_bytes || !fpga_k_range_ok(tls_off, ar.chan_bytes, min_size)) return 0;
    for (uint32_t l = tp->dense_layers; l < d->n_layers; l++)
        for (uint32_t g = 0; g < d->n_kv_heads; g++) {
            const uint8_t *chn = ch[fpga_tls_group_ch(d, l, g)] + tls_off +
                                 fpga_tls_group_slot(d, l, g) * ar.ch_stride;
            for (uint32_t i = 0; i < tp->r; i++)
                if ((uint32_t)(chn[2 * i] | chn[2 * i + 1] << 8) >= d->head_dim) return 0;
        }
    return 1;
}

/* io bytes of the report after the header. */
static inline uint64_t fpga_tls_report_bytes(const fpga_dec_desc *d, uint32_t token_budget)
{
    return fpga_dec_io_sel_bytes(d, token_budget) + 4ull * d->n_layers * d->n_heads * d->head_dim;
}

/* Positions [upto, pos] of (l, g) into the group's summaries and labels (sparse_tls_put). The
 * tiles come from (kch, kv), or from the resident cache (rch, rm: NULL when none) for a block
 * that is resident there. */
static inline void fpga_tls_summarize(uint8_t *const *kch, const fpga_dec_desc *d,
                                      const fpga_dec_kvmap *kv, uint8_t *const *rch,
                                      const fpga_dec_kvmap *rm, uint32_t l, uint32_t g,
                                      const uint16_t *chn, uint8_t *grp, const fpga_tls_arena *a,
                                      const fpga_tls_io *p, uint32_t upto, uint32_t pos)
{
    const uint32_t hd = d->head_dim, r = p->r, bs = p->block_size;
    float M[TLS_K_MAX_HD], m[TLS_K_MAX_HD], k[TLS_K_MAX_HD];
    /* the current block's max / min, from HBM when the range starts inside it */
    uint32_t b = upto / bs;
    float *S = (float *)(grp + a->summ_off);
    if (upto % bs) {
        fpga_k_read(S + (uint64_t)b * 2 * hd, 8ull * hd);
        memcpy(M, S + (uint64_t)b * 2 * hd, 4ull * hd);
        memcpy(m, S + (uint64_t)b * 2 * hd + hd, 4ull * hd);
    }
    uint32_t last_tile = 0xffffffffu;
    for (uint32_t p0 = upto; p0 <= pos; p0++) {
        uint32_t part, tile, row;
        fpga_dec_pos_where(d, p0, &part, &tile, &row);
        const int res = rm && rm->ids[p0 / bs] != FPGA_TLS_NONE;
        const uint8_t *tl = res ? fpga_kd_tile(rch, d, rm, l, g, part, tile)
                                : fpga_kd_tile(kch, d, kv, l, g, part, tile);
        const uint32_t tid = p0 / FPGA_DEC_TILE;
        if (tid != last_tile) { /* the tile's K values and scales, once */
            fpga_k_read(tl, (uint64_t)FPGA_DEC_TILE * hd + 2 * FPGA_DEC_TILE);
            last_tile = tid;
        }
        const int8_t *k8 = (const int8_t *)(tl + fpga_dec_tile_k(hd, row));
        uint16_t ks;
        memcpy(&ks, tl + fpga_dec_tile_ks(hd, row), 2);
        const float sc = fpga_km_f16_to_f32(ks);
        for (uint32_t c = 0; c < hd; c++) k[c] = (float)k8[c] * sc;
        if (p0 % bs == 0) {
            b = p0 / bs;
            memcpy(M, k, 4ull * hd);
            memcpy(m, k, 4ull * hd);
        } else {
            for (uint32_t c = 0; c < hd; c++) {
                M[c] = k[c] > M[c] ? k[c] : M[c];
                m[c] = k[c] < m[c] ? k[c] : m[c];
            }
        }
        if (p0 % bs == bs - 1 || p0 == pos) { /* the block's row, when it ends or the range does */
            fpga_k_write(S + (uint64_t)b * 2 * hd, 8ull * hd);
            memcpy(S + (uint64_t)b * 2 * hd, M, 4ull * hd);
            memcpy(S + (uint64_t)b * 2 * hd + hd, m, 4ull * hd);
        }
        float lo_ = k[chn[0]], hi = k[chn[0]];
        for (uint32_t i = 1; i < r; i++) {
            float x = k[chn[i]];
            lo_ = x < lo_ ? x : lo_;
            hi = x > hi ? x : hi;
        }
        float step = (hi - lo_) / 15.0f;
        if (!isfinite(step)) step = 0.0f;
        uint8_t *code = grp + a->code_off + (uint64_t)p0 * (r / 2);
        for (uint32_t i = 0; i < r; i += 2) {
            int c2[2];
            for (int j = 0; j < 2; j++) {
                float v = step > 0.0f ? (k[chn[i + j]] - lo_) / step + 0.5f : 0.0f;
                c2[j] = v >= 0.0f ? (v < 15.0f ? (int)v : 15) : 0;
            }
            code[i / 2] = (uint8_t)(c2[0] | c2[1] << 4);
        }
        memcpy(grp + a->lmin_off + 4ull * p0, &lo_, 4);
        memcpy(grp + a->lstep_off + 4ull * p0, &step, 4);
    }
    const uint64_t cnt = (uint64_t)pos + 1 - upto;
    fpga_k_write(grp + a->code_off + (uint64_t)upto * (r / 2), cnt * (r / 2));
    fpga_k_write(grp + a->lmin_off + 4ull * upto, 4 * cnt);
    fpga_k_write(grp + a->lstep_off + 4ull * upto, 4 * cnt);
    fpga_k_cycles(cnt * hd / 16);
}

/* What a TLS run counts, summed over the layers (tls_io's card -> host words). */
typedef struct fpga_tls_count {
    uint64_t keys_read, fetched, chosen;
} fpga_tls_count;

/* The offload's moves for KV head g of layer l: block b copied from the KV's tiles (kch, kv:
 * DDR4) into its resident slot (ch, rm), every part of it one burst each way; and the step's
 * own position stored into its resident tile (proto/kv.h's quantization, as the DDR4 copy). */
static inline void fpga_tls_fetch(uint8_t *const *ch, uint8_t *const *kch, const fpga_dec_desc *d,
                                  const fpga_dec_kvmap *kv, const fpga_dec_kvmap *rm, uint32_t l,
                                  uint32_t g, uint32_t b)
{
    const uint32_t nt = rm->blk_tiles;
    const uint64_t n = (uint64_t)nt * rm->tile_bytes;
    for (uint32_t part = 0; part < d->kv_parts; part++) {
        const uint8_t *src = fpga_kd_tile(kch, d, kv, l, g, part, b * nt);
        uint8_t *dst = fpga_kd_tile(ch, d, rm, l, g, part, b * nt);
        fpga_k_read(src, n);
        fpga_k_write(dst, n);
        memcpy(dst, src, n);
    }
}
static inline void fpga_tls_res_store(uint8_t *const *ch, const fpga_dec_desc *d,
                                      const fpga_dec_kvmap *rm, uint32_t l, uint32_t g,
                                      const float *k, const float *v, uint32_t pos)
{
    const uint32_t hd = d->head_dim;
    uint32_t part, tile, row;
    fpga_dec_pos_where(d, pos, &part, &tile, &row);
    uint8_t *t = fpga_kd_tile(ch, d, rm, l, g, part, tile);
    int8_t q[FPGA_DEC_MAX_HEAD_DIM];
    for (int which = 0; which < 2; which++) {
        const float *x = (which ? v : k) + (uint64_t)g * hd;
        uint16_t s = fpga_km_kv_quant(x, hd, q);
        uint8_t *dv = t + (which ? fpga_dec_tile_v(hd, row) : fpga_dec_tile_k(hd, row));
        uint8_t *ds = t + (which ? fpga_dec_tile_vs(hd, row) : fpga_dec_tile_ks(hd, row));
        fpga_k_write(dv, hd);
        fpga_k_write(ds, 2);
        memcpy(dv, q, hd);
        memcpy(ds, &s, 2);
    }
}

/* The pipeline of one group. `res` (offload): its resident map (the slots in the state's
 * slot_of); NULL in HBM, where only the bookkeeping runs. */
typedef struct fpga_tls_pipe {
    uint32_t *st, *prev, *slot_of, *owner;
    uint32_t n_owner;
    uint8_t *const *ch, *const *kch;
    const fpga_dec_desc *d;
    const fpga_dec_kvmap *kv, *res;
    uint32_t l, g, bs, pos;
} fpga_tls_pipe;

/* Block b into the resident set: a free slot (identity in a dense layer), its tiles fetched
 * from DDR4 unless the step's own position is all it holds (the run writes that itself). */
static inline void fpga_tls_make_resident(const fpga_tls_pipe *t, uint32_t b)
{
    uint32_t s = b;
    if (t->owner) {
        for (s = 0; s < t->n_owner && t->owner[s] != FPGA_TLS_NONE; s++) {}
        if (s == t->n_owner) return; /* cannot happen: block_budget + 2 slots (arena_of) */
        t->owner[s] = b;
    }
    t->slot_of[b] = s;
    if (t->res && b * t->bs != t->pos) fpga_tls_fetch(t->ch, t->kch, t->d, t->kv, t->res, t->l, t->g, b);
}

/* One layer's attention of a TLS decode step: summaries up to date, then per KV head dense or
 * select + attend the kept positions. ch: the bank BOs (arena, resident cache); kch, kv: the
 * sequence's KV tiles (HBM, or DDR4 with offload); knew, vnew: the layer's new K and V (the
 * resident append). report: the io table (or NULL). */
static inline void fpga_tls_step_attention(uint8_t *const *ch, uint8_t *const *kch,
                                           const fpga_dec_desc *d, const fpga_dec_layout *lo,
                                           const fpga_dec_kvmap *kv, uint32_t l, const float *q,
                                           const float *knew, const float *vnew, uint32_t pos,
                                           uint64_t arena_off, const fpga_tls_io *p,
                                           uint32_t upto, uint32_t *report, float *out,
                                           uint32_t macs_per_cycle, fpga_tls_count *cnt)
{
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads, n_keys = pos + 1;
    const uint32_t bs = p->block_size, nb = (n_keys + bs - 1) / bs, pb = pos / bs;
    fpga_tls_arena a;
    fpga_tls_arena_of(d, p, &a);
    const int dense = l < p->dense_layers || n_keys <= p->dense_below;
    int32_t cand[TLS_K_MAX_CAND_PIPE];
    uint8_t keep[TLS_K_MAX_BLOCKS];
    uint16_t chn[TLS_K_MAX_HD];
    uint64_t macs = 0;
    for (uint32_t g = 0; g < d->n_kv_heads; g++) {
        const float *qg = q + (uint64_t)g * group * hd;
        float *og = out + (uint64_t)g * group * hd;
        uint32_t *rep = report ? report + ((uint64_t)l * d->n_kv_heads + g) * (1ull + p->token_budget)
                               : NULL;
        uint8_t *grp = fpga_tls_group(ch, d, arena_off, &a, l, g);
        fpga_tls_pipe t = {.ch = ch, .kch = kch, .d = d, .kv = kv, .l = l, .g = g, .bs = bs,
                           .pos = pos};
        fpga_dec_kvmap rm;
        if (p->stagger) {
            t.st = (uint32_t *)(grp + a.pipe_off);
            t.prev = t.st + FPGA_TLS_PIPE_HDR / 4;
            t.slot_of = t.prev + p->block_budget;
            t.owner = l < p->dense_layers ? NULL : t.slot_of + a.cap_blocks;
            t.n_owner = a.res_sparse;
            fpga_k_read(t.st, FPGA_TLS_PIPE_HDR + 4ull * p->block_budget);
            fpga_k_read(t.slot_of, 4ull * nb);
            if (t.owner) fpga_k_read(t.owner, 4ull * a.res_sparse);
            /* a state this run's predecessors did not write (a flipped bit) is forgotten, never
             * followed outside the cache */
            const uint32_t lim = t.owner ? a.res_sparse : a.cap_blocks;
            int bad = t.st[0] != FPGA_TLS_NONE && (t.st[0] > p->block_budget || t.st[1] > nb);
            for (uint32_t i = 0; !bad && t.st[0] != FPGA_TLS_NONE && i < t.st[0]; i++)
                bad = t.prev[i] >= nb || (i && t.prev[i] <= t.prev[i - 1]);
            for (uint32_t b = 0; !bad && b < nb; b++)
                bad = t.slot_of[b] != FPGA_TLS_NONE && t.slot_of[b] >= lim;
            if (p->reset || bad) {
                t.st[0] = FPGA_TLS_NONE;
                t.st[1] = 0;
                for (uint32_t b = 0; b < a.cap_blocks; b++) t.slot_of[b] = FPGA_TLS_NONE;
                for (uint32_t s = 0; t.owner && s < a.res_sparse; s++) t.owner[s] = FPGA_TLS_NONE;
                fpga_k_write(t.slot_of, 4ull * a.cap_blocks);
            }
            if (p->offload) {
                fpga_tls_res_map(d, lo, &a, p, arena_off, l, t.slot_of, &rm);
                t.res = &rm;
            }
        }
        if (l < p->dense_layers) { /* never selected: no summaries kept */
            if (t.res) { /* every block resident, slot = block */
                for (uint32_t b = 0; b < nb; b++)
                    if (t.slot_of[b] == FPGA_TLS_NONE) fpga_tls_make_resident(&t, b);
                fpga_tls_res_store(ch, d, t.res, l, g, knew, vnew, pos);
                fpga_k_write(t.slot_of, 4ull * nb);
                macs += fpga_kd_dense_head(ch, d, lo, t.res, l, g, qg, pos, og);
            } else {
                macs += fpga_kd_dense_head(kch, d, lo, kv, l, g, qg, pos, og);
            }
            cnt->keys_read += n_keys;
            if (rep) rep[0] = FPGA_DEC_SEL_DENSE;
            continue;
        }
        const uint8_t *cp = fpga_tls_chans(ch, d, arena_off, &a, l, g);
        fpga_k_read(cp, 2ull * p->r);
        memcpy(chn, cp, 2ull * p->r);
        const uint8_t *code = grp + a.code_off, *lmin = grp + a.lmin_off, *lstep = grp + a.lstep_off;
        if (!p->stagger) {
            fpga_tls_summarize(kch, d, kv, NULL, NULL, l, g, chn, grp, &a, p, upto, pos);
            if (dense) {
                macs += fpga_kd_dense_head(kch, d, lo, kv, l, g, qg, pos, og);
                cnt->keys_read += n_keys;
                if (rep) rep[0] = FPGA_DEC_SEL_DENSE;
                continue;
            }
            uint32_t n = tls_select_unit(qg, chn, grp + a.summ_off, code, lmin, lstep, n_keys, hd,
                                         group, p->r, bs, p->block_budget, p->token_budget,
                                         macs_per_cycle, cand);
            macs += fpga_kd_sel_head(kch, d, lo, kv, l, g, qg, (const uint32_t *)cand, n, og);
            cnt->keys_read += n;
            if (rep) {
                rep[0] = n;
                memcpy(rep + 1, cand, 4ull * n);
            }
            continue;
        }
        /* the staggered pipeline (sparse/tls_pipe.h, step for step) */
        const int pb_was = t.slot_of[pb] != FPGA_TLS_NONE;
        if (!pb_was && pb * bs == pos) fpga_tls_make_resident(&t, pb); /* a new block */
        if (t.res && t.slot_of[pb] != FPGA_TLS_NONE)
            fpga_tls_res_store(ch, d, t.res, l, g, knew, vnew, pos);
        fpga_tls_summarize(kch, d, kv, ch, t.res, l, g, chn, grp, &a, p, upto, pos);
        const uint8_t *summ = grp + a.summ_off;
        uint64_t fetched = 0;
        if (t.st[0] == FPGA_TLS_NONE) { /* first step: select now, fetch the set and the tail */
            tls_level1(qg, summ, nb, hd, group, p->block_budget, macs_per_cycle, keep);
            uint32_t n = 0;
            for (uint32_t b = 0; b < nb; b++)
                if (keep[b]) t.prev[n++] = b;
            for (uint32_t i = 0; i < n; i++)
                if (t.slot_of[t.prev[i]] == FPGA_TLS_NONE || (t.prev[i] == pb && !pb_was)) {
                    fetched++;
                    if (t.slot_of[t.prev[i]] == FPGA_TLS_NONE) fpga_tls_make_resident(&t, t.prev[i]);
                }
            if (!(n && t.prev[n - 1] == nb - 1) &&
                (t.slot_of[nb - 1] == FPGA_TLS_NONE || (nb - 1 == pb && !pb_was))) {
                fetched++;
                if (t.slot_of[nb - 1] == FPGA_TLS_NONE) fpga_tls_make_resident(&t, nb - 1);
            }
            t.st[0] = n;
            t.st[1] = nb;
        }
        /* 1. the attention set: S_{t-1}, and the blocks from the one it was still filling on */
        const uint32_t n_prev = t.st[0], tail = t.st[1] > 1 ? t.st[1] - 1 : 0;
        uint32_t C = 0;
        for (uint32_t i = 0; i < n_prev && t.prev[i] < tail; i++)
            for (uint32_t k = t.prev[i] * bs; k < (t.prev[i] + 1) * bs && k < n_keys; k++)
                cand[C++] = (int32_t)k;
        for (uint32_t b = tail; b < nb; b++) {
            if (t.slot_of[b] == FPGA_TLS_NONE) fpga_tls_make_resident(&t, b);
            for (uint32_t k = b * bs; k < (b + 1) * bs && k < n_keys; k++) cand[C++] = (int32_t)k;
        }
        /* 2. level 2 over its keys, and the attention */
        const fpga_dec_kvmap *am = t.res ? t.res : kv;
        uint8_t *const *ach = t.res ? ch : kch;
        if (dense) {
            for (uint32_t b = 0; t.res && b < nb; b++)
                if (t.slot_of[b] == FPGA_TLS_NONE) fpga_tls_make_resident(&t, b);
            macs += fpga_kd_dense_head(ach, d, lo, am, l, g, qg, pos, og);
            cnt->keys_read += n_keys;
            if (rep) rep[0] = FPGA_DEC_SEL_DENSE;
        } else {
            uint32_t n = tls_level2(qg, chn, code, lmin, lstep, n_keys, hd, group, p->r,
                                    p->token_budget, macs_per_cycle, cand, C);
            macs += fpga_kd_sel_head(ach, d, lo, am, l, g, qg, (const uint32_t *)cand, n, og);
            cnt->keys_read += n;
            if (rep) {
                rep[0] = n;
                memcpy(rep + 1, cand, 4ull * n);
            }
        }
        /* 3. S_t for the next step: what left is dropped, what is new is fetched */
        uint32_t ns = tls_level1(qg, summ, nb, hd, group, p->block_budget, macs_per_cycle, keep);
        for (uint32_t b = 0; b + 1 < nb; b++)
            if (!keep[b] && t.slot_of[b] != FPGA_TLS_NONE) {
                t.owner[t.slot_of[b]] = FPGA_TLS_NONE;
                t.slot_of[b] = FPGA_TLS_NONE;
            }
        for (uint32_t b = 0; b + 1 < nb; b++)
            if (keep[b] && t.slot_of[b] == FPGA_TLS_NONE) {
                fetched++;
                fpga_tls_make_resident(&t, b);
            }
        uint32_t n = 0;
        for (uint32_t b = 0; b < nb; b++)
            if (keep[b]) t.prev[n++] = b;
        t.st[0] = n;
        t.st[1] = nb;
        cnt->fetched += fetched;
        cnt->chosen += ns;
        fpga_k_write(t.st, FPGA_TLS_PIPE_HDR + 4ull * n);
        fpga_k_write(t.slot_of, 4ull * nb);
        fpga_k_write(t.owner, 4ull * a.res_sparse);
    }
    if (report) {
        const uint64_t per = (1ull + p->token_budget) * d->n_kv_heads;
        fpga_k_write(report + (uint64_t)l * per, 4 * per);
        float *qrep = (float *)(report + per * d->n_layers) + (uint64_t)l * d->n_heads * hd;
        fpga_k_write(qrep, 4ull * d->n_heads * hd);
        memcpy(qrep, q, 4ull * d->n_heads * hd);
    }
    fpga_k_cycles(macs / macs_per_cycle);
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES + d->kv_parts * 4);
}

#endif
