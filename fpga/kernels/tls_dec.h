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
    uint32_t reserved[3];
} fpga_tls_io;

typedef struct fpga_tls_arena {
    uint32_t cap, cap_blocks, slots;  /* slots: groups per channel */
    uint64_t ch_stride;               /* a group's channels: r u16, 64-byte aligned */
    uint64_t data_off;                /* the groups' data after every slot's channels */
    uint64_t summ_off, code_off, lmin_off, lstep_off, group_bytes; /* inside a group's data */
    uint64_t chan_bytes; /* the arena's bytes in each bank BO */
} fpga_tls_arena;

/* Per channel: the channels of its groups (slot order), then their data. */
static inline void fpga_tls_arena_of(const fpga_dec_desc *d, uint32_t r, uint32_t bs, uint32_t cap,
                                     fpga_tls_arena *a)
{
    const uint64_t hd = d->head_dim, groups = (uint64_t)d->n_layers * d->n_kv_heads;
    a->cap = cap;
    a->cap_blocks = (cap + bs - 1) / bs;
    a->slots = (uint32_t)((groups + FPGA_DEC_CH - 1) / FPGA_DEC_CH);
    a->ch_stride = fpga_dec_align(2ull * r, 64);
    a->data_off = a->slots * a->ch_stride;
    a->summ_off = 0;
    a->code_off = fpga_dec_align((uint64_t)a->cap_blocks * 2 * hd * 4, 64);
    a->lmin_off = a->code_off + fpga_dec_align((uint64_t)cap * (r / 2), 64);
    a->lstep_off = a->lmin_off + fpga_dec_align(4ull * cap, 64);
    a->group_bytes = a->lstep_off + fpga_dec_align(4ull * cap, 64);
    a->chan_bytes = a->data_off + a->slots * a->group_bytes;
}

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

/* io bytes of the report after the header. */
static inline uint64_t fpga_tls_report_bytes(const fpga_dec_desc *d, uint32_t token_budget)
{
    return fpga_dec_io_sel_bytes(d, token_budget) + 4ull * d->n_layers * d->n_heads * d->head_dim;
}

/* Positions [upto, pos] of (l, g) into the group's summaries and labels (sparse_tls_put). */
static inline void fpga_tls_summarize(uint8_t *const *ch, const fpga_dec_desc *d,
                                      const fpga_dec_kvmap *kv, uint32_t l, uint32_t g,
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
        const uint8_t *tl = fpga_kd_tile(ch, d, kv, l, g, part, tile);
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

/* One layer's attention of a TLS decode step: summaries up to date, then per KV head dense or
 * select + attend the kept positions. report: the io table (or NULL). */
static inline void fpga_tls_step_attention(uint8_t *const *ch, const fpga_dec_desc *d,
                                           const fpga_dec_layout *lo, const fpga_dec_kvmap *kv,
                                           uint32_t l, const float *q, uint32_t pos,
                                           uint64_t arena_off, const fpga_tls_io *p,
                                           uint32_t upto, uint32_t *report, float *out,
                                           uint32_t macs_per_cycle, uint64_t *keys_read)
{
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads, n_keys = pos + 1;
    fpga_tls_arena a;
    fpga_tls_arena_of(d, p->r, p->block_size, p->cap, &a);
    const int dense = l < p->dense_layers || n_keys <= p->dense_below;
    int32_t cand[TLS_K_MAX_CAND];
    uint16_t chn[TLS_K_MAX_HD];
    uint64_t macs = 0;
    for (uint32_t g = 0; g < d->n_kv_heads; g++) {
        const float *qg = q + (uint64_t)g * group * hd;
        float *og = out + (uint64_t)g * group * hd;
        uint32_t *rep = report ? report + ((uint64_t)l * d->n_kv_heads + g) * (1ull + p->token_budget)
                               : NULL;
        if (l < p->dense_layers) { /* never selected: no summaries kept */
            macs += fpga_kd_dense_head(ch, d, lo, kv, l, g, qg, pos, og);
            *keys_read += n_keys;
            if (rep) rep[0] = FPGA_DEC_SEL_DENSE;
            continue;
        }
        uint8_t *grp = fpga_tls_group(ch, d, arena_off, &a, l, g);
        const uint8_t *cp = fpga_tls_chans(ch, d, arena_off, &a, l, g);
        fpga_k_read(cp, 2ull * p->r);
        memcpy(chn, cp, 2ull * p->r);
        fpga_tls_summarize(ch, d, kv, l, g, chn, grp, &a, p, upto, pos);
        if (dense) {
            macs += fpga_kd_dense_head(ch, d, lo, kv, l, g, qg, pos, og);
            *keys_read += n_keys;
            if (rep) rep[0] = FPGA_DEC_SEL_DENSE;
            continue;
        }
        uint32_t n = tls_select_unit(qg, chn, grp + a.summ_off, grp + a.code_off,
                                     grp + a.lmin_off, grp + a.lstep_off, n_keys, hd, group,
                                     p->r, p->block_size, p->block_budget, p->token_budget,
                                     macs_per_cycle, cand);
        macs += fpga_kd_sel_head(ch, d, lo, kv, l, g, qg, (const uint32_t *)cand, n, og);
        *keys_read += n;
        if (rep) {
            rep[0] = n;
            memcpy(rep + 1, cand, 4ull * n);
        }
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
