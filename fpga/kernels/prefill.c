/* fpga/kernels/prefill.c — FAST-Prefill's accelerator for a whole prompt: the hybrid matrix
 * unit (MPU) running a chunk of prompt rows through a layer's W8A8 / W4A8 projections, the
 * special-function steps, dense causal attention for short prompts and, for long ones, the
 * sparse index unit (flex_sigu.c, FlexPrefill; xattn_est.c, XAttention and Tri-shape) and the
 * sparse attention unit with its hot/cold KV cache (flex_sau.c) as units of this one kernel.
 *
 * Design note
 * -----------
 * One run is one phase of one layer over rows r0..r1 of a pass (fpga/kernels/pf_layout.h: the
 * workspace), driven by the host layer by layer (fpga/prefill.c), which is FAST-Prefill's
 * global FSM with the barrier between "all K/V of the layer exist" and the sparse units:
 *   dense prompt   DENSE per layer: chunk by chunk QKV -> attention -> O -> FFN;
 *   sparse prompt  QKV per layer, ATTN (index unit + SAU over rows r0..n; r0 > 0: a chunk
 *                  after r0 cached positions, whose K/V the run copies from the tiles), POST;
 *   then HEAD: the final norm and lm_head of one row into io.
 * Chunks are 128 rows. A GEMM streams each channel's rows of the matrix (values + scales, the
 * decode image, fpga/BANKS.md) ONCE per chunk and multiplies them with the chunk's 128
 * activation rows held on chip: the prefill's advantage over 128 decode steps, which read the
 * weights 128 times.
 *
 * Numerics: every row goes through exactly the decode kernel's arithmetic (dec_math.h,
 * dec_ops.h): activations quantized per row in the descriptor's groups, int8 x int8 (or int4)
 * products summed in int32 per group and scaled in fp32, fp32 RMSNorm / RoPE / SiLU, K and V
 * quantized by the proto/kv.h rule into the sequence's tiles, and dense attention with the
 * decode datapath over those tiles (fpga_kd_attend) — so a dense card prefill equals decoding
 * the prompt one token at a time, bit for bit, logits and KV. The sparse path's attention is
 * the SAU's (int8 q per row and head, int8 P per row: flex_kernel.h), over the same int8 K/V.
 *
 * Timing (emulator): reads and writes as one command per channel per striped run; the MPU at
 * FPGA_FLEX_MPU_MACS int8 MACs per cycle (six DSP + six LUT 32x32 arrays), the special-function
 * unit at FPGA_FLEX_SFU_LANES elements per cycle, each pipelined with the other within a
 * chunk's phase (the larger counts); one dependent-phase stall (FPGA_DEC_PHASE_CYCLES) per
 * GEMM and per attention of a chunk. fpga/pf_model.c mirrors every charge for the shapes the
 * emulator cannot run in reasonable time.
 *
 * On-chip memory (pf_chip, allocated by the adapter like the SIGU's): the chunk's quantized
 * activation rows (128 x 32K int8 + their group scales at the bounds) and a few row buffers;
 * the sparse units bring their own.
 *
 * Arguments: 0..31 hbm0..hbm31 (HBM[c]: the bank BOs), 32 io (HBM[0]), 33 mode u32 (mode |
 * flags), 34 layer u32, 35 pos0 u32, 36 n u32, 37 r0 u32, 38 r1 u32, 39 kv_off u64,
 * 40 part_tiles u32, 41 ws_off u64, 42 n_ids u32 (0: a slab at kv_off of part_tiles tiles per
 * part; else a block table of n_ids ids in io at fpga_dec_io_table_off into the pool at kv_off:
 * dec_layout.h, "KV pages"). */
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_mat.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/dec_ops.h"
#include "fpga/kernels/kernel.h"
#include "fpga/kernels/pf_layout.h"
#include <math.h>
#include <stdlib.h>


#define T_MAX FPGA_PF_CHUNK

typedef struct pf_chip {
    int8_t xq[T_MAX][FPGA_DEC_MAX_K];                            /* activation rows */
    float xs[T_MAX][FPGA_DEC_XS_LEN];                            /* their group scales */
    float xn[FPGA_DEC_MAX_HIDDEN], att[FPGA_DEC_MAX_QDIM];
} pf_chip;

typedef struct pf_ctx {
    uint8_t *ch[FPGA_DEC_CH];
    uint8_t *io;
    fpga_dec_desc d;
    fpga_dec_layout lo;
    fpga_pf_ws w;
    uint32_t mode, flags, layer, pos0;
    uint64_t ws_off;
    fpga_dec_kvmap kv; /* the sequence's KV */
    const float *misc;
    pf_chip *chip;
} pf_ctx;

/* ---------------------------------------------------------------- the workspace */

static uint8_t *item(const pf_ctx *c, const fpga_pf_arr *a, uint64_t i)
{
    return c->ch[fpga_pf_item_ch(i)] + c->ws_off + fpga_pf_item_off(a, i);
}

static float *row(const pf_ctx *c, const fpga_pf_arr *a, uint64_t i)
{
    return (float *)item(c, a, i);
}

/* Items [i0, i0 + k) of a striped array, `bytes` of each: one command per channel (a channel's
 * items of the run are consecutive in it). */
static void charge_items(const pf_ctx *c, const fpga_pf_arr *a, uint64_t i0, uint64_t k,
                         uint64_t bytes, int write)
{
    for (uint32_t ch = 0; ch < FPGA_DEC_CH; ch++) {
        uint64_t first = i0 + (ch + FPGA_DEC_CH - i0 % FPGA_DEC_CH) % FPGA_DEC_CH;
        if (first >= i0 + k) continue;
        uint64_t cnt = (i0 + k - 1 - first) / FPGA_DEC_CH + 1;
        uint64_t span = (cnt - 1) * a->item + bytes;
        if (write) fpga_k_write(item(c, a, first), span);
        else fpga_k_read(item(c, a, first), span);
    }
}

/* `bytes` at `off` inside block r of each of `heads` heads (block h * nb + r): one command per
 * head. */
static void charge_block_rows(const pf_ctx *c, const fpga_pf_arr *a, uint32_t heads,
                              uint32_t r, uint64_t off, uint64_t bytes, int write)
{
    for (uint32_t h = 0; h < heads; h++) {
        uint8_t *p = item(c, a, (uint64_t)h * c->w.nb + r) + off;
        if (write) fpga_k_write(p, bytes);
        else fpga_k_read(p, bytes);
    }
}

/* ---------------------------------------------------------------- the MPU */

/* dst[t] = M x_t for t < T, x_t quantized in chip->xq[t] / xs[t]: each channel engine reads its
 * rows (values + scales) once and applies them to all T rows. Returns the MPU cycles. */
static uint64_t gemm(const pf_ctx *c, int mat, uint64_t off, uint32_t T, float *const *dst)
{
    const fpga_dec_mat *m = &c->lo.m[mat];
    fpga_kd_mat_apply(c->ch, m, off, T, c->chip->xq, c->chip->xs, c->d.agroup, dst, 0);
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES);
    return (uint64_t)T * m->rows * m->k / FPGA_FLEX_MPU_MACS;
}

static void quantize(const pf_ctx *c, uint32_t t, const float *x, const float *mul, uint32_t k)
{
    fpga_km_act_quant(x, mul, k, c->d.agroup, c->chip->xq[t], c->chip->xs[t]);
}

static void charge_compute(uint64_t mpu, uint64_t sfu_elems)
{
    uint64_t sfu = sfu_elems / FPGA_FLEX_SFU_LANES;
    fpga_k_cycles(mpu > sfu ? mpu : sfu);
}

/* ---------------------------------------------------------------- phases of a chunk */

/* Rows t0..t0+T: RMSNorm, QKV, bias, RoPE; K/V into the slab (and kvf), q into wide (dense)
 * or qf (sparse). */
static void chunk_qkv(const pf_ctx *c, uint32_t t0, uint32_t T)
{
    const fpga_dec_desc *d = &c->d;
    const uint32_t H = d->hidden, hd = d->head_dim, qd = d->n_heads * hd;
    const uint32_t kvd = d->n_kv_heads * hd, blk = t0 / FPGA_PF_CHUNK, b0 = t0 % FPGA_PF_CHUNK;
    const uint64_t lo_off = c->lo.w_base + (uint64_t)c->layer * c->lo.layer_stride;
    float *wide[T_MAX];
    charge_items(c, &c->w.x, t0, T, 4ull * H, 0);
    for (uint32_t t = 0; t < T; t++) {
        fpga_kd_rmsnorm(c->chip->xn, row(c, &c->w.x, t0 + t), c->misc + c->lo.mi_attn_norm, H,
                        d->rms_eps);
        quantize(c, t, c->chip->xn, 0, H);
        wide[t] = row(c, &c->w.wide, t);
    }
    uint64_t mpu = gemm(c, FPGA_DEC_QKV, lo_off + c->lo.off[FPGA_DEC_QKV], T, wide);
    charge_items(c, &c->w.wide, 0, T, 4ull * (qd + 2 * kvd), 1);
    charge_items(c, &c->w.wide, 0, T, 4ull * (qd + 2 * kvd), 0);
    charge_items(c, &c->w.rope, t0, T, 4ull * hd, 0);
    for (uint32_t t = 0; t < T; t++) {
        float *w = wide[t];
        const float *cs = row(c, &c->w.rope, t0 + t), *sn = cs + hd / 2;
        if (d->flags & FPGA_DEC_F_BIAS)
            for (uint32_t i = 0; i < qd + 2 * kvd; i++) w[i] += c->misc[c->lo.mi_bias + i];
        fpga_kd_rope(w, d->n_heads, hd, cs, sn);
        fpga_kd_rope(w + qd, d->n_kv_heads, hd, cs, sn);
        fpga_kd_kv_store(c->ch, d, &c->kv, c->layer, w + qd, w + qd + kvd, c->pos0 + t0 + t);
        if (c->flags & FPGA_PF_F_KVF) {
            /* the same int8 values and scales as the tiles, in the flex block layout */
            const uint64_t qb = fpga_flex_qblock_bytes((int)hd);
            for (uint32_t g = 0; g < d->n_kv_heads; g++) {
                uint8_t *kb = item(c, &c->w.kvf, (uint64_t)g * c->w.nb + blk);
                for (int which = 0; which < 2; which++) {
                    uint8_t *half = kb + which * qb;
                    uint16_t s = fpga_km_kv_quant(w + qd + which * kvd + g * hd, hd,
                                                  (int8_t *)half + (size_t)(b0 + t) * hd);
                    float sf = fpga_km_f16_to_f32(s);
                    memcpy(half + (size_t)FPGA_FLEX_BS * hd + 4 * (size_t)(b0 + t), &sf, 4);
                }
            }
        }
        if (c->flags & FPGA_PF_F_SPARSE)
            for (uint32_t h = 0; h < d->n_heads; h++)
                fpga_flex_quant_row(w + h * hd, (int)hd,
                                    item(c, &c->w.qf, (uint64_t)h * c->w.nb + blk), (int)(b0 + t));
    }
    /* the slab: per (head, part) the tiles the chunk's positions touch, one burst */
    const uint32_t p0 = c->pos0 + t0, p1 = p0 + T - 1;
    for (uint32_t h = 0; h < d->n_kv_heads; h++)
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t first, last;
            if (fpga_dec_part_tile_run(d, p0, p1 - p0 + 1, b, &first, &last))
                for (uint32_t t = first, run; t <= last; t += run) {
                    run = fpga_dec_kv_run(&c->kv, t, last);
                    fpga_k_write(fpga_kd_tile(c->ch, d, &c->kv, c->layer, h, b, t),
                                 (uint64_t)run * c->lo.tile_bytes);
                }
        }
    if (c->flags & FPGA_PF_F_KVF) {
        const uint64_t qb = fpga_flex_qblock_bytes((int)hd);
        for (int which = 0; which < 2; which++) {
            charge_block_rows(c, &c->w.kvf, d->n_kv_heads, blk, which * qb + (uint64_t)b0 * hd,
                              (uint64_t)T * hd, 1);
            charge_block_rows(c, &c->w.kvf, d->n_kv_heads, blk,
                              which * qb + (uint64_t)FPGA_FLEX_BS * hd + 4ull * b0, 4ull * T, 1);
        }
    }
    if (c->flags & FPGA_PF_F_SPARSE) {
        charge_block_rows(c, &c->w.qf, d->n_heads, blk, (uint64_t)b0 * hd, (uint64_t)T * hd, 1);
        charge_block_rows(c, &c->w.qf, d->n_heads, blk, (uint64_t)FPGA_FLEX_BS * hd + 4ull * b0,
                          4ull * T, 1);
    } else {
        charge_items(c, &c->w.wide, 0, T, 4ull * qd, 1); /* q after RoPE, for the attention */
    }
    charge_compute(mpu, (uint64_t)T * FPGA_PF_SFU_QKV(H, qd, kvd));
}

#ifndef __SYNTHESIS__
/* chunk_attention's (row, KV head) pairs as fpga_k_parallel iterations (the emulator's threads):
 * row t = i / n_kv_heads, KV head i % n_kv_heads, its group's outputs through a buffer of its own
 * into their slots of w.out. */
typedef struct pf_att_job {
    const pf_ctx *c;
    uint32_t t0, blk, b0, T;
} pf_att_job;

static void pf_att_iter(void *ctx, uint32_t i)
{
    const pf_att_job *j = ctx;
    const pf_ctx *c = j->c;
    const fpga_dec_desc *d = &c->d;
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    const uint32_t t = i / d->n_kv_heads, kh = i % d->n_kv_heads;
    float og[FPGA_DEC_MAX_QDIM];
    const float *q = row(c, &c->w.wide, t) + (uint64_t)kh * group * hd;
    (void)fpga_kd_attend(c->ch, d, &c->kv, c->layer, kh, q, c->pos0 + j->t0 + t, og);
    for (uint32_t g = 0; g < group; g++) {
        const uint32_t h = kh * group + g;
        memcpy((float *)item(c, &c->w.out, (uint64_t)h * c->w.nb + j->blk) +
                   (uint64_t)(j->b0 + t) * hd,
               og + (uint64_t)g * hd, 4ull * hd);
    }
}
#endif

/* Dense causal attention of rows t0..t0+T over positions 0..pos0+t of the sequence's tiles:
 * each (KV head, part) run of tiles is read once for the chunk. */
static void chunk_attention(const pf_ctx *c, uint32_t t0, uint32_t T)
{
    const fpga_dec_desc *d = &c->d;
    const uint32_t hd = d->head_dim;
    const uint32_t blk = t0 / FPGA_PF_CHUNK, b0 = t0 % FPGA_PF_CHUNK;
    const uint32_t last = c->pos0 + t0 + T - 1;
    charge_items(c, &c->w.wide, 0, T, 4ull * d->n_heads * hd, 0);
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++)
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t nt = fpga_dec_part_used_tiles(d, last + 1, b);
            for (uint32_t t = 0, run; t < nt; t += run) {
                run = fpga_dec_kv_run(&c->kv, t, nt - 1);
                fpga_k_read(fpga_kd_tile(c->ch, d, &c->kv, c->layer, kh, b, t),
                            (uint64_t)run * c->lo.tile_bytes);
            }
        }
    uint64_t macs = 0, exps = 0;
#ifdef __SYNTHESIS__
    const uint32_t group = d->n_heads / d->n_kv_heads;
    for (uint32_t t = 0; t < T; t++) {
        const uint32_t pos = c->pos0 + t0 + t;
        const float *q = row(c, &c->w.wide, t);
        for (uint32_t kh = 0; kh < d->n_kv_heads; kh++)
            macs += fpga_kd_attend(c->ch, d, &c->kv, c->layer, kh, q + (uint64_t)kh * group * hd, pos,
                                   c->chip->att + (uint64_t)kh * group * hd);
        exps += (uint64_t)(pos + 1) * d->n_heads;
        for (uint32_t h = 0; h < d->n_heads; h++)
            memcpy((float *)item(c, &c->w.out, (uint64_t)h * c->w.nb + blk) +
                       (uint64_t)(b0 + t) * hd,
                   c->chip->att + (uint64_t)h * hd, 4ull * hd);
    }
#else
    /* on the emulator the (row, KV head) pairs on its threads: each writes its own heads' slots
     * of its own row; a pair's MACs are fpga_kd_attend's, 2 x (pos + 1) x hd x group */
    pf_att_job j = {c, t0, blk, b0, T};
    uint64_t bytes = 0;
    for (uint32_t b = 0; b < d->kv_parts; b++)
        bytes += (uint64_t)fpga_dec_part_used_tiles(d, last + 1, b) * c->lo.tile_bytes;
    fpga_k_parallel(T * d->n_kv_heads, pf_att_iter, &j, bytes * d->n_kv_heads * T);
    for (uint32_t t = 0; t < T; t++) {
        const uint64_t pos = c->pos0 + t0 + t;
        macs += 2 * (pos + 1) * hd * d->n_heads;
        exps += (pos + 1) * d->n_heads;
    }
#endif
    charge_block_rows(c, &c->w.out, d->n_heads, blk, 4ull * b0 * hd, 4ull * T * hd, 1);
    uint64_t mpu = macs / FPGA_FLEX_MPU_MACS, sfu = exps / FPGA_FLEX_SFU_LANES;
    fpga_k_cycles(mpu > sfu ? mpu : sfu);
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES);
}

/* x[t] += wide[t] for the chunk's rows (the residual after O and after down). */
static void residual(const pf_ctx *c, uint32_t t0, uint32_t T)
{
    const uint32_t H = c->d.hidden;
    charge_items(c, &c->w.wide, 0, T, 4ull * H, 0);
    charge_items(c, &c->w.x, t0, T, 4ull * H, 0);
    for (uint32_t t = 0; t < T; t++) {
        float *x = row(c, &c->w.x, t0 + t);
        const float *y = row(c, &c->w.wide, t);
        for (uint32_t i = 0; i < H; i++) x[i] += y[i];
    }
    charge_items(c, &c->w.x, t0, T, 4ull * H, 1);
}

/* Rows t0..t0+T: O, residual, RMSNorm, gate/up, SiLU, down, residual. */
static void chunk_post(const pf_ctx *c, uint32_t t0, uint32_t T)
{
    const fpga_dec_desc *d = &c->d;
    const uint32_t H = d->hidden, hd = d->head_dim, qd = d->n_heads * hd, I = d->inter;
    const uint32_t blk = t0 / FPGA_PF_CHUNK, b0 = t0 % FPGA_PF_CHUNK;
    const uint64_t lo_off = c->lo.w_base + (uint64_t)c->layer * c->lo.layer_stride;
    float *wide[T_MAX];
    charge_block_rows(c, &c->w.out, d->n_heads, blk, 4ull * b0 * hd, 4ull * T * hd, 0);
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t h = 0; h < d->n_heads; h++)
            memcpy(c->chip->att + (uint64_t)h * hd,
                   (const float *)item(c, &c->w.out, (uint64_t)h * c->w.nb + blk) +
                       (uint64_t)(b0 + t) * hd,
                   4ull * hd);
        quantize(c, t, c->chip->att, c->misc + c->lo.mi_sm_o, qd);
        wide[t] = row(c, &c->w.wide, t);
    }
    uint64_t mpu = gemm(c, FPGA_DEC_O, lo_off + c->lo.off[FPGA_DEC_O], T, wide);
    charge_items(c, &c->w.wide, 0, T, 4ull * H, 1);
    residual(c, t0, T);
    for (uint32_t t = 0; t < T; t++) {
        fpga_kd_rmsnorm(c->chip->xn, row(c, &c->w.x, t0 + t), c->misc + c->lo.mi_ffn_norm, H,
                        d->rms_eps);
        quantize(c, t, c->chip->xn, 0, H);
    }
    mpu += gemm(c, FPGA_DEC_GU, lo_off + c->lo.off[FPGA_DEC_GU], T, wide);
    charge_items(c, &c->w.wide, 0, T, 8ull * I, 1);
    charge_items(c, &c->w.wide, 0, T, 8ull * I, 0);
    for (uint32_t t = 0; t < T; t++) {
        fpga_kd_swiglu(wide[t], wide[t] + I, I);
        quantize(c, t, wide[t], c->misc + c->lo.mi_sm_d, I);
    }
    mpu += gemm(c, FPGA_DEC_D, lo_off + c->lo.off[FPGA_DEC_D], T, wide);
    charge_items(c, &c->w.wide, 0, T, 4ull * H, 1);
    residual(c, t0, T);
    charge_compute(mpu, (uint64_t)T * FPGA_PF_SFU_POST(H, qd, I));
}

/* ---------------------------------------------------------------- the sparse units */

static uint8_t *flat(const pf_ctx *c, int k)
{
    return c->ch[k] + c->ws_off + c->w.flat;
}

/* Positions [0, rows) of the layer, from the sequence's tiles into the kvf blocks (the same
 * int8 values; the fp16 scales as float32, exactly as chunk_qkv writes them): the keys a chunk
 * after cached positions attends to. Reads: one command per (head, part) run of tiles; writes:
 * one per kvf block. */
static void fill_kvf(const pf_ctx *c, uint32_t rows)
{
    const fpga_dec_desc *d = &c->d;
    const uint32_t hd = d->head_dim;
    const uint64_t qb = fpga_flex_qblock_bytes((int)hd);
    for (uint32_t h = 0; h < d->n_kv_heads; h++)
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t nt = fpga_dec_part_used_tiles(d, rows, b);
            for (uint32_t t = 0, run; t < nt; t += run) {
                run = fpga_dec_kv_run(&c->kv, t, nt - 1);
                fpga_k_read(fpga_kd_tile(c->ch, d, &c->kv, c->layer, h, b, t),
                            (uint64_t)run * c->lo.tile_bytes);
            }
        }
    for (uint32_t p = 0; p < rows; p++) {
        uint32_t part, tile, row;
        fpga_dec_pos_where(d, p, &part, &tile, &row);
        for (uint32_t g = 0; g < d->n_kv_heads; g++) {
            const uint8_t *t = fpga_kd_tile(c->ch, d, &c->kv, c->layer, g, part, tile);
            uint8_t *kb = item(c, &c->w.kvf, (uint64_t)g * c->w.nb + p / FPGA_FLEX_BS);
            for (int which = 0; which < 2; which++) {
                uint8_t *half = kb + which * qb;
                uint16_t s;
                memcpy(half + (size_t)(p % FPGA_FLEX_BS) * hd,
                       t + (which ? fpga_dec_tile_v(hd, row) : fpga_dec_tile_k(hd, row)), hd);
                memcpy(&s, t + (which ? fpga_dec_tile_vs(hd, row) : fpga_dec_tile_ks(hd, row)), 2);
                float sf = fpga_km_f16_to_f32(s);
                memcpy(half + (size_t)FPGA_FLEX_BS * hd + 4 * (size_t)(p % FPGA_FLEX_BS), &sf, 4);
            }
        }
    }
    for (uint32_t g = 0; g < d->n_kv_heads; g++)
        for (uint32_t blk = 0; blk < rows / FPGA_FLEX_BS; blk++)
            fpga_k_write(item(c, &c->w.kvf, (uint64_t)g * c->w.nb + blk),
                         fpga_flex_kvblock_bytes((int)hd));
}

/* Rows r0..n of the pass (r0 a multiple of 128: q0 = r0 / 128): the index of the method the
 * parameters name, then the SAU over it. */
static void sparse_attention(const pf_ctx *c, uint32_t r0, void *sigu_chip, void *sau_chip,
                             void *xattn_chip)
{
    const fpga_dec_desc *d = &c->d;
    fpga_pf_params p;
    fpga_k_read(c->io + FPGA_PF_IO_PARAMS, sizeof p);
    memcpy(&p, c->io + FPGA_PF_IO_PARAMS, sizeof p);
    fpga_flex_buf qf, kvf, out;
    for (int k = 0; k < FPGA_FLEX_CH; k++) {
        qf.ch[k] = c->ch[k] + c->ws_off + c->w.qf.off;
        kvf.ch[k] = c->ch[k] + c->ws_off + c->w.kvf.off;
        out.ch[k] = c->ch[k] + c->ws_off + c->w.out.off;
    }
    qf.round = c->w.qf.item;
    kvf.round = c->w.kvf.item;
    out.round = c->w.out.item;
    uint32_t *rows = (uint32_t *)flat(c, FPGA_PF_FLAT_ROWS);
    uint32_t *col = (uint32_t *)flat(c, FPGA_PF_FLAT_COL);
    fpga_flex_head_info *info = (fpga_flex_head_info *)flat(c, FPGA_PF_FLAT_INFO);
    fpga_flex_sau_stats *st = (fpga_flex_sau_stats *)flat(c, FPGA_PF_FLAT_STATS);
    const uint32_t n = c->w.n, nb = c->w.nb, H = d->n_heads, q0 = r0 / FPGA_FLEX_BS;
    if (r0) fill_kvf(c, r0);
    if (p.method == FPGA_PF_METHOD_FLEX) {
        flex_sigu(&qf, &kvf, (float *)flat(c, FPGA_PF_FLAT_SCRATCH), rows, col, info, n, H,
                  d->n_kv_heads, d->head_dim, p.gamma_bits, p.tau_bits, p.min_blocks,
                  p.max_blocks, 0, q0, sigu_chip);
    } else {
        const fpga_xattn_params xp = {.method = p.method, .stride = p.stride,
                                      .thr_lo = p.thr_lo, .thr_hi = p.thr_hi,
                                      .tri_lo = p.tri_lo, .tri_hi = p.tri_hi};
        xattn_est(&qf, &kvf, rows, col, n, q0, H, d->n_kv_heads, d->head_dim, &xp, xattn_chip);
        for (uint32_t h = 0; h < H; h++) info[h] = (fpga_flex_head_info){0};
    }
    flex_sau(&qf, &kvf, rows, col, (uint32_t *)flat(c, FPGA_PF_FLAT_JOBS), &out, st, n, q0, H,
             d->n_kv_heads, d->head_dim, 0, p.cache_blocks, p.hot_blocks, p.window, 0, sau_chip);
    fpga_pf_report rep = {.magic = FPGA_PF_REPORT_MAGIC, .layer = c->layer, .n = n};
    fpga_k_read(rows + (uint64_t)H * (nb + 1) - 1, 4);
    fpga_k_read(info, (uint64_t)H * sizeof *info);
    fpga_k_read(st, sizeof *st);
    rep.nnz = rows[(uint64_t)H * (nb + 1) - 1];
    rep.causal = (uint64_t)H * ((uint64_t)nb * (nb + 1) - (uint64_t)q0 * (q0 + 1)) / 2;
    for (uint32_t h = 0; h < H; h++) rep.n_query_aware += info[h].query_aware;
    rep.accesses = st->accesses;
    rep.hits = st->hits;
    rep.hot_hits = st->hot_hits;
    rep.cold_hits = st->cold_hits;
    rep.misses = st->misses;
    rep.kv_bytes = st->kv_bytes;
    rep.kv_bytes_nocache = st->kv_bytes_nocache;
    rep.jobs = st->jobs;
    fpga_k_write(c->io + FPGA_PF_IO_REPORT, sizeof rep);
    memcpy(c->io + FPGA_PF_IO_REPORT, &rep, sizeof rep);
}

/* ---------------------------------------------------------------- top */

void tandem_prefill(FPGA_K_PORTS(FPGA_K_PORT_PARAM) uint8_t *io, uint32_t mode, uint32_t layer,
                    uint32_t pos0, uint32_t n, uint32_t r0, uint32_t r1, uint64_t kv_off, uint32_t part_tiles,
                    uint64_t ws_off, uint32_t n_ids, pf_chip *chip, void *sigu_chip, void *sau_chip,
                    void *xattn_chip)
{
    FPGA_K_PORTS(FPGA_K_PORT_PRAGMA)
#pragma HLS INTERFACE m_axi port = io offset = slave bundle = gmem_io
#pragma HLS INTERFACE s_axilite port = mode
#pragma HLS INTERFACE s_axilite port = layer
#pragma HLS INTERFACE s_axilite port = pos0
#pragma HLS INTERFACE s_axilite port = n
#pragma HLS INTERFACE s_axilite port = r0
#pragma HLS INTERFACE s_axilite port = r1
#pragma HLS INTERFACE s_axilite port = kv_off
#pragma HLS INTERFACE s_axilite port = part_tiles
#pragma HLS INTERFACE s_axilite port = ws_off
#pragma HLS INTERFACE s_axilite port = n_ids
#pragma HLS INTERFACE s_axilite port = return
    pf_ctx c = {.ch = {FPGA_K_PORTS(FPGA_K_PORT_NAME)}, .io = io, .mode = mode & FPGA_PF_MODE_MASK,
                .flags = mode & ~FPGA_PF_MODE_MASK, .layer = layer, .pos0 = pos0,
                .ws_off = ws_off, .chip = chip};
    fpga_k_read(hbm0, sizeof c.d);
    memcpy(&c.d, hbm0, sizeof c.d);
    fpga_dec_layout_of(&c.d, &c.lo);
    uint32_t ids[FPGA_DEC_MAX_BLOCKS];
    const int kv_used = c.mode == FPGA_PF_DENSE || c.mode == FPGA_PF_QKV ||
                        (c.mode == FPGA_PF_ATTN && r0 > 0);
    if (n_ids && kv_used) {
        const uint8_t *tbl = io + fpga_dec_io_table_off(&c.d);
        fpga_k_read(tbl, 4ull * n_ids);
        memcpy(ids, tbl, 4ull * n_ids);
        fpga_dec_kvmap_paged(&c.d, &c.lo, kv_off, ids, n_ids, &c.kv);
    } else {
        fpga_dec_kvmap_slab(&c.lo, kv_off, part_tiles, &c.kv);
    }
    fpga_pf_ws_of(&c.d, n, c.flags, &c.w);
    const fpga_dec_desc *d = &c.d;
    uint32_t status[4] = {FPGA_PF_STATUS_MAGIC, mode, layer, r1};
    if (c.mode == FPGA_PF_HEAD) {
        /* the final norm and lm_head of row r0, logits into io as a decode step leaves them */
        const float *fnorm = (const float *)(c.ch[d->n_layers % FPGA_DEC_CH] +
                                             fpga_dec_misc_off(&c.lo, d->n_layers));
        fpga_k_read(fnorm, 4ull * d->hidden);
        charge_items(&c, &c.w.x, r0, 1, 4ull * d->hidden, 0);
        fpga_kd_rmsnorm(chip->xn, row(&c, &c.w.x, r0), fnorm, d->hidden, d->rms_eps);
        quantize(&c, 0, chip->xn, 0, d->hidden);
        float *logits = (float *)(io + fpga_dec_io_logits_off(d));
        uint64_t mpu = gemm(&c, FPGA_DEC_LM, c.lo.lm_off, 1, &logits);
        fpga_k_write(logits, 4ull * d->vocab);
        charge_compute(mpu, 3ull * d->hidden);
        status[2] = r0;
    } else {
        if (c.mode == FPGA_PF_ATTN) {
            sparse_attention(&c, r0, sigu_chip, sau_chip, xattn_chip);
        } else {
            c.misc = (const float *)(c.ch[layer % FPGA_DEC_CH] + fpga_dec_misc_off(&c.lo, layer));
            fpga_k_read(c.misc, 4ull * c.lo.mi_floats);
            for (uint32_t t0 = r0; t0 < r1; t0 += FPGA_PF_CHUNK) {
                uint32_t T = r1 - t0 < FPGA_PF_CHUNK ? r1 - t0 : FPGA_PF_CHUNK;
                if (c.mode == FPGA_PF_DENSE || c.mode == FPGA_PF_QKV) chunk_qkv(&c, t0, T);
                if (c.mode == FPGA_PF_DENSE) chunk_attention(&c, t0, T);
                if (c.mode == FPGA_PF_DENSE || c.mode == FPGA_PF_POST) chunk_post(&c, t0, T);
            }
        }
    }
    fpga_k_write(io, sizeof status);
    memcpy(io, status, sizeof status);
}

/* ---------------------------------------------------------------- adapter */

/* The run's scalars describe only ranges inside its buffers, and shapes the units take. */
static int args_ok(const fpga_kargs *a, fpga_dec_desc *d, fpga_pf_ws *w)
{
    const fpga_k_arg *io = &a->a[FPGA_DEC_CH];
    const uint32_t mode = (uint32_t)a->a[33].u, layer = (uint32_t)a->a[34].u;
    const uint32_t pos0 = (uint32_t)a->a[35].u, n = (uint32_t)a->a[36].u;
    const uint32_t r0 = (uint32_t)a->a[37].u, r1 = (uint32_t)a->a[38].u;
    const uint64_t kv_off = a->a[39].u, ws_off = a->a[41].u;
    const uint32_t part_tiles = (uint32_t)a->a[40].u, m = mode & FPGA_PF_MODE_MASK;
    const uint32_t n_ids = (uint32_t)a->a[42].u;
    uint64_t min_size = a->a[0].size;
    for (int c = 1; c < FPGA_DEC_CH; c++)
        if (a->a[c].size < min_size) min_size = a->a[c].size;
    if (a->a[0].size < sizeof *d) return 0;
    memcpy(d, a->a[0].ptr, sizeof *d);
    if (fpga_dec_desc_check(d) != 0) return 0;
    fpga_dec_layout lo;
    fpga_dec_layout_of(d, &lo);
    if (lo.image_bytes > min_size || m < FPGA_PF_DENSE || m > FPGA_PF_HEAD) return 0;
    if (mode & ~(FPGA_PF_MODE_MASK | FPGA_PF_F_KVF | FPGA_PF_F_SPARSE)) return 0;
    if (!n || n > FPGA_DEC_MAX_POS || io->size < fpga_dec_io_bytes(d) ||
        fpga_dec_io_logits_off(d) < fpga_pf_io_need())
        return 0;
    fpga_pf_ws_of(d, n, mode, w);
    if (ws_off < lo.image_bytes || !fpga_k_range_ok(ws_off, w->bytes, min_size)) return 0;
    if (m == FPGA_PF_HEAD) return r0 < n;
    if (layer >= d->n_layers || r0 >= r1 || r1 > n || r0 % FPGA_PF_CHUNK) return 0;
    fpga_dec_kvmap kv;
    if (n_ids) {
        if (n_ids > FPGA_DEC_MAX_BLOCKS) return 0;
        fpga_dec_kvmap_paged(d, &lo, kv_off, (const uint32_t *)(const void *)(
                                 (const uint8_t *)io->ptr + fpga_dec_io_table_off(d)), n_ids, &kv);
    } else {
        if (!part_tiles || part_tiles > FPGA_DEC_MAX_POS) return 0;
        fpga_dec_kvmap_slab(&lo, kv_off, part_tiles, &kv);
    }
    if ((uint64_t)pos0 + n > fpga_dec_kvmap_tiles(&kv) * d->kv_parts * FPGA_DEC_TILE) return 0;
    if (kv_off < lo.image_bytes || !fpga_dec_kvmap_ok(&kv, min_size)) return 0;
    if (m == FPGA_PF_QKV && (mode & FPGA_PF_F_SPARSE) && !(mode & FPGA_PF_F_KVF)) return 0;
    if (m != FPGA_PF_ATTN) return 1;
    /* the sparse units: rows r0..n of a pass whose rows are positions (pos0 0), within their
     * bounds (FlexPrefill's estimate needs its last block of rows in this chunk) */
    const uint32_t group = d->n_heads / d->n_kv_heads;
    if ((mode & (FPGA_PF_F_KVF | FPGA_PF_F_SPARSE)) != (FPGA_PF_F_KVF | FPGA_PF_F_SPARSE) ||
        pos0 || r1 != n || n > FPGA_FLEX_MAX_TOKENS || d->n_heads > FPGA_FLEX_MAX_HEADS ||
        group > FPGA_FLEX_MAX_GROUP || d->head_dim > FPGA_FLEX_MAX_D)
        return 0;
    fpga_pf_params p;
    memcpy(&p, (const uint8_t *)io->ptr + FPGA_PF_IO_PARAMS, sizeof p);
    if (p.cache_blocks > FPGA_FLEX_MAX_CACHE || p.hot_blocks > p.cache_blocks || p.window < 1 ||
        p.window > FPGA_FLEX_MAX_WINDOW)
        return 0;
    if (p.method != FPGA_PF_METHOD_FLEX) {
        const fpga_xattn_params xp = {.method = p.method, .stride = p.stride, .thr_lo = p.thr_lo,
                                      .thr_hi = p.thr_hi, .tri_lo = p.tri_lo, .tri_hi = p.tri_hi};
        return fpga_xattn_ok(n, r0 / FPGA_FLEX_BS, d->n_heads, d->n_kv_heads, d->head_dim, &xp);
    }
    float gamma = fpga_flex_f32(p.gamma_bits), tau = fpga_flex_f32(p.tau_bits);
    /* a chunk after cached positions: a whole block of them, at least a block of its own */
    return r0 % FPGA_FLEX_BS == 0 && n >= 2 * FPGA_FLEX_BS && n >= r0 + FPGA_FLEX_BS &&
           gamma > 0 && gamma <= 1 && tau >= 0 && tau <= 1 && p.min_blocks >= 1 &&
           p.max_blocks >= 1;
}

static int prefill_adapter(const fpga_kargs *a)
{
    fpga_dec_desc d;
    fpga_pf_ws w;
    if (!args_ok(a, &d, &w)) return -1;
    const uint32_t mode = (uint32_t)a->a[33].u;
    pf_chip *chip = calloc(1, sizeof *chip);
    void *sigu = NULL, *sau = NULL, *xattn = NULL;
    int rc = -1;
    if ((mode & FPGA_PF_MODE_MASK) == FPGA_PF_ATTN) {
        fpga_pf_params p;
        memcpy(&p, (const uint8_t *)a->a[FPGA_DEC_CH].ptr + FPGA_PF_IO_PARAMS, sizeof p);
        if (p.method == FPGA_PF_METHOD_FLEX) sigu = calloc(1, fpga_flex_sigu_chip_bytes());
        else xattn = calloc(1, fpga_xattn_chip_bytes());
        sau = calloc(1, fpga_flex_sau_chip_bytes());
    }
    if (chip && ((mode & FPGA_PF_MODE_MASK) != FPGA_PF_ATTN || ((sigu || xattn) && sau))) {
        uint8_t *p[FPGA_DEC_CH];
        for (int c = 0; c < FPGA_DEC_CH; c++) p[c] = a->a[c].ptr;
#define PF_ARG(n) p[n],
        tandem_prefill(FPGA_K_PORTS(PF_ARG) a->a[FPGA_DEC_CH].ptr, mode, (uint32_t)a->a[34].u,
                       (uint32_t)a->a[35].u, (uint32_t)a->a[36].u, (uint32_t)a->a[37].u,
                       (uint32_t)a->a[38].u, a->a[39].u, (uint32_t)a->a[40].u, a->a[41].u,
                       (uint32_t)a->a[42].u, chip, sigu, sau, xattn);
#undef PF_ARG
        rc = 0;
    }
    free(chip);
    free(sigu);
    free(sau);
    free(xattn);
    return rc;
}

const fpga_k_desc fpga_k_prefill_desc = {
    .name = "tandem_prefill",
    .n_args = 43,
    .kinds = {FPGA_K_PORTS(FPGA_K_PORT_KIND) FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U64, FPGA_K_ARG_U32,
              FPGA_K_ARG_U64, FPGA_K_ARG_U32},
    .run = prefill_adapter,
};
