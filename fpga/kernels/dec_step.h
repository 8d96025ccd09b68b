/* fpga/kernels/dec_step.h — the KV steps of one sequence's decode, with their memory commands:
 * what the single-sequence kernel (decode.c) and the batched one (decode_batch.c) do for each
 * sequence, so that a sequence decoded in a batch writes and reads its KV exactly as it would
 * alone (the arithmetic is dec_ops.h's; this adds the accounting, fpga/kernels/kernel.h).
 * Static inline: one copy per kernel, as HLS wants. */
#ifndef TANDEM_FPGA_DEC_STEP_H
#define TANDEM_FPGA_DEC_STEP_H
#include "fpga/kernels/dec_ops.h"
#include "fpga/kernels/kernel.h"

/* The new position's K and V, quantized exactly as proto/kv.h says, into its tile row. */
static inline void fpga_kd_step_append(uint8_t *const *ch, const fpga_dec_desc *d,
                                       const fpga_dec_kvmap *kv, uint32_t l, const float *k,
                                       const float *v, uint32_t pos)
{
    const uint32_t hd = d->head_dim;
    uint32_t part, tile, row;
    fpga_dec_pos_where(d, pos, &part, &tile, &row);
    for (uint32_t h = 0; h < d->n_kv_heads; h++) {
        uint8_t *t = fpga_kd_tile(ch, d, kv, l, h, part, tile);
        fpga_k_write(t + fpga_dec_tile_k(hd, row), hd);
        fpga_k_write(t + fpga_dec_tile_ks(hd, row), 2);
        fpga_k_write(t + fpga_dec_tile_v(hd, row), hd);
        fpga_k_write(t + fpga_dec_tile_vs(hd, row), 2);
    }
    fpga_kd_kv_store(ch, d, kv, l, k, v, pos);
}

#ifndef __SYNTHESIS__
/* fpga_kd_step_attention's KV heads as fpga_k_parallel iterations (the emulator's threads): the
 * heads' query groups and outputs are disjoint, their MACs kept apart and summed in head order. */
typedef struct fpga_kd_heads {
    uint8_t *const *ch;
    const fpga_dec_desc *d;
    const fpga_dec_kvmap *kv;
    uint32_t l, pos;
    const float *q;
    float *out;
    uint64_t macs[FPGA_DEC_MAX_HEADS];
} fpga_kd_heads;

static inline void fpga_kd_head_iter(void *ctx, uint32_t kh)
{
    fpga_kd_heads *j = ctx;
    const uint64_t gh = (uint64_t)kh * (j->d->n_heads / j->d->n_kv_heads) * j->d->head_dim;
    j->macs[kh] = fpga_kd_attend(j->ch, j->d, j->kv, j->l, kh, j->q + gh, j->pos, j->out + gh);
}
#endif

/* Attention of every query head over positions 0..pos. Per KV head, each part's tiles are one
 * read per contiguous run (dec_layout.h, "KV pages"); the group's query heads share it
 * (fpga_kd_attend: the arithmetic), the KV heads are the card's parallel datapaths (on the
 * emulator, fpga_k_parallel). macs_per_cycle: the image's MAC array. */
static inline void fpga_kd_step_attention(uint8_t *const *ch, const fpga_dec_desc *d,
                                          const fpga_dec_layout *lo, const fpga_dec_kvmap *kv,
                                          uint32_t l, const float *q, uint32_t pos, float *out,
                                          uint32_t macs_per_cycle)
{
    uint64_t macs = 0, bytes = 0;
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++) {
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t nt = fpga_dec_part_used_tiles(d, pos + 1, b);
            for (uint32_t t = 0, run; t < nt; t += run) {
                run = fpga_dec_kv_run(kv, t, nt - 1); /* one burst per contiguous run */
                fpga_k_read(fpga_kd_tile(ch, d, kv, l, kh, b, t), (uint64_t)run * lo->tile_bytes);
                bytes += (uint64_t)run * lo->tile_bytes;
            }
        }
    }
#ifdef __SYNTHESIS__
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++) {
#pragma HLS UNROLL
        macs += fpga_kd_attend(ch, d, kv, l, kh, q + (uint64_t)kh * group * hd, pos,
                               out + (uint64_t)kh * group * hd);
    }
#else
    fpga_kd_heads j = {.ch = ch, .d = d, .kv = kv, .l = l, .pos = pos, .q = q, .out = out};
    fpga_k_parallel(d->n_kv_heads, fpga_kd_head_iter, &j, bytes);
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++) macs += j.macs[kh];
#endif
    fpga_k_cycles(macs / macs_per_cycle);
    /* the first tile's latency, and the merge of the parts */
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES + d->kv_parts * 4);
}

/* ---------------------------------------------------------------- selected positions */

/* KV head kh's query group over the listed positions sel[0..n) (ascending, <= the step's
 * position): reads only the tiles that hold a listed row — one command per run of consecutive
 * such tiles that is contiguous in HBM — and attends them (fpga_kd_attend_sel: with every
 * position listed, the same bits as fpga_kd_attend). Returns the MACs. */
static inline uint64_t fpga_kd_sel_head(uint8_t *const *ch, const fpga_dec_desc *d,
                                        const fpga_dec_layout *lo, const fpga_dec_kvmap *kv,
                                        uint32_t l, uint32_t kh, const float *qg,
                                        const uint32_t *sel, uint32_t n, float *og)
{
    const uint32_t P = d->kv_parts;
    for (uint32_t b = 0; b < P; b++) {
        /* the part's tiles holding a listed row, ascending */
        uint32_t last = 0, have = 0;
        for (uint32_t e = 0; e < n; e++)
            if ((sel[e] / FPGA_DEC_TILE) % P == b) last = sel[e] / FPGA_DEC_TILE / P, have = 1;
        if (!have) continue;
        uint32_t t0 = 0, len = 0, prev = 0xffffffffu;
        for (uint32_t e = 0; e <= n; e++) {
            uint32_t t = 0;
            if (e < n) {
                if ((sel[e] / FPGA_DEC_TILE) % P != b) continue;
                t = sel[e] / FPGA_DEC_TILE / P;
                if (t == prev) continue;
                prev = t;
                if (len && t == t0 + len && len < fpga_dec_kv_run(kv, t0, last)) {
                    len++;
                    continue;
                }
            }
            if (len)
                fpga_k_read(fpga_kd_tile(ch, d, kv, l, kh, b, t0), (uint64_t)len * lo->tile_bytes);
            t0 = t;
            len = 1;
        }
    }
    return fpga_kd_attend_sel(ch, d, kv, l, kh, qg, sel, n, og);
}

/* KV head kh dense, with fpga_kd_step_attention's reads. Returns the MACs. */
static inline uint64_t fpga_kd_dense_head(uint8_t *const *ch, const fpga_dec_desc *d,
                                          const fpga_dec_layout *lo, const fpga_dec_kvmap *kv,
                                          uint32_t l, uint32_t kh, const float *qg, uint32_t pos,
                                          float *og)
{
    for (uint32_t b = 0; b < d->kv_parts; b++) {
        uint32_t nt = fpga_dec_part_used_tiles(d, pos + 1, b);
        for (uint32_t t = 0, run; t < nt; t += run) {
            run = fpga_dec_kv_run(kv, t, nt - 1);
            fpga_k_read(fpga_kd_tile(ch, d, kv, l, kh, b, t), (uint64_t)run * lo->tile_bytes);
        }
    }
    return fpga_kd_attend(ch, d, kv, l, kh, qg, pos, og);
}

/* fpga_kd_step_attention with a selection table in io (fpga_dec_io_sel_off): per KV head the
 * listed positions only, or dense; plus the layer's lists (one burst of their used words). */
static inline void fpga_kd_step_attention_sel(uint8_t *const *ch, const fpga_dec_desc *d,
                                              const fpga_dec_layout *lo, const fpga_dec_kvmap *kv,
                                              uint32_t l, const float *q, uint32_t pos,
                                              const uint32_t *table, uint32_t cap, float *out,
                                              uint32_t macs_per_cycle)
{
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    uint64_t macs = 0, used = 0;
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++) {
        const uint32_t n = table[((uint64_t)l * d->n_kv_heads + kh) * (1ull + cap)];
        used += 4ull * (1 + (n == FPGA_DEC_SEL_DENSE ? 0 : n));
    }
    fpga_k_read(table + (uint64_t)l * d->n_kv_heads * (1ull + cap), used);
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++) {
        const uint32_t *list = table + ((uint64_t)l * d->n_kv_heads + kh) * (1ull + cap);
        const float *qg = q + (uint64_t)kh * group * hd;
        float *og = out + (uint64_t)kh * group * hd;
        macs += list[0] == FPGA_DEC_SEL_DENSE
                    ? fpga_kd_dense_head(ch, d, lo, kv, l, kh, qg, pos, og)
                    : fpga_kd_sel_head(ch, d, lo, kv, l, kh, qg, list + 1, list[0], og);
    }
    fpga_k_cycles(macs / macs_per_cycle);
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES + d->kv_parts * 4);
}

#endif
