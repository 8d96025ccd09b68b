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

/* Attention of every query head over positions 0..pos. Per KV head, each part's tiles are one
 * read per contiguous run (dec_layout.h, "KV pages"); the group's query heads share it
 * (fpga_kd_attend: the arithmetic). macs_per_cycle: the image's MAC array. */
static inline void fpga_kd_step_attention(uint8_t *const *ch, const fpga_dec_desc *d,
                                          const fpga_dec_layout *lo, const fpga_dec_kvmap *kv,
                                          uint32_t l, const float *q, uint32_t pos, float *out,
                                          uint32_t macs_per_cycle)
{
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    uint64_t macs = 0;
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++) {
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t nt = fpga_dec_part_used_tiles(d, pos + 1, b);
            for (uint32_t t = 0, run; t < nt; t += run) {
                run = fpga_dec_kv_run(kv, t, nt - 1); /* one burst per contiguous run */
                fpga_k_read(fpga_kd_tile(ch, d, kv, l, kh, b, t), (uint64_t)run * lo->tile_bytes);
            }
        }
        macs += fpga_kd_attend(ch, d, kv, l, kh, q + (uint64_t)kh * group * hd, pos,
                               out + (uint64_t)kh * group * hd);
    }
    fpga_k_cycles(macs / macs_per_cycle);
    /* the first tile's latency, and the merge of the parts */
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES + d->kv_parts * 4);
}

#endif
