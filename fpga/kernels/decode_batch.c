/* fpga/kernels/decode_batch.c — one decode step of up to FPGA_DEC_MAX_BATCH sequences in one
 * pass over the weights.
 *
 * Design note
 * -----------
 * A card's decode is bound by streaming the weights (fpga/BANKS.md): the single-sequence kernel
 * (decode.c) reads every weight byte once per token. Here the 32 channel engines stream each
 * matrix once per step and every row meets the activations of all n sequences (a GEMV per
 * sequence becomes a skinny GEMM), so the weight bytes per token fall by n, until the MAC array
 * or the KV reads take over (BENCHMARKS.md shows where, fpga/dec_model.c prices it).
 *
 * Per sequence everything is as decode.c does it alone — the same activation quantization, the
 * same row dot products in the same order, its own KV pages and length, its own attention
 * (dec_step.h), its own RMSNorm/RoPE/SiLU — so each sequence's logits are bit for bit those of
 * decoding it alone. Only the schedule differs: a row is used n times while it is on chip.
 *
 * io (dec_layout.h, "batched decode io"): one record per sequence with its token, position,
 * block table, step input and logits. All sequences are paged (n_ids > 0), in one pool at
 * kv_off whose blocks hold blk_tiles tiles per part.
 *
 * On-chip memory (bd_chip, allocated by the adapter as the prefill kernel's is): per sequence
 * the residual, the normed row, the attention output, the widest product (QKV or gate/up), the
 * quantized activations and the block table.
 *
 * Timing: the weights are one read command per channel per matrix, as alone; the MACs of all n
 * sequences go to the batched image's array (FPGA_DEC_BATCH_MACS_PER_CYCLE); each sequence's
 * special-function passes (RMSNorm, activation quantization, SiLU) and attention phase are
 * serial stalls; the KV of each sequence is its own commands.
 *
 * AsyncTLS (tls_dec.h): a record whose head names an arena (tls_off) attends as decode.c's run
 * with that arena does — the same summaries, selection and attention, so its logits are bit for
 * bit those of its AsyncTLS step alone — with its parameters in the record (rec_tls; no report,
 * no DDR4: an offloaded sequence decodes alone), the counts written back there.
 *
 * Arguments: 0..31 hbm0..hbm31 (global, HBM[c]), 32 io (global, HBM[0]), 33 n_seq u32,
 * 34 kv_off u64 (the pool), 35 blk_tiles u32. */
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_mat.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/dec_step.h"
#include "fpga/kernels/kernel.h"
#include "fpga/kernels/tls_dec.h"
#include <math.h>
#include <stdlib.h>

#define BD_WIDE (2 * FPGA_DEC_MAX_INTER)

typedef struct bd_chip {
    float x[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_HIDDEN], xn[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_HIDDEN];
    float att[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_QDIM], wide[FPGA_DEC_MAX_BATCH][BD_WIDE];
    float cs[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_HEAD_DIM / 2];
    float sn[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_HEAD_DIM / 2];
    int8_t xq[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_K];
    float xs[FPGA_DEC_MAX_BATCH][FPGA_DEC_XS_LEN];
    uint32_t ids[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_BLOCKS];
    uint32_t token[FPGA_DEC_MAX_BATCH], pos[FPGA_DEC_MAX_BATCH];
    fpga_dec_kvmap kv[FPGA_DEC_MAX_BATCH];
    uint64_t tls_off[FPGA_DEC_MAX_BATCH];
    uint32_t tls_upto[FPGA_DEC_MAX_BATCH];
    fpga_tls_io tls[FPGA_DEC_MAX_BATCH];
    fpga_tls_count cnt[FPGA_DEC_MAX_BATCH];
} bd_chip;

typedef struct bd_ctx {
    uint8_t *ch[FPGA_DEC_CH];
    uint8_t *io;
    fpga_dec_desc d;
    fpga_dec_layout lo;
    uint32_t n;
    bd_chip *chip;
} bd_ctx;

static void rmsnorm_all(const bd_ctx *c, float (*out)[FPGA_DEC_MAX_HIDDEN],
                        float (*x)[FPGA_DEC_MAX_HIDDEN], const float *w)
{
    for (uint32_t b = 0; b < c->n; b++) {
        fpga_kd_rmsnorm(out[b], x[b], w, c->d.hidden, c->d.rms_eps);
        fpga_k_stall(2 * c->d.hidden / FPGA_DEC_BATCH_SFU_LANES);
    }
}

/* y[b] = M x[b] for every sequence b, the matrix streamed once: each channel engine reads its
 * rows (one command) and applies each row to the n quantized activation vectors. y_hbm: the
 * outputs are the records' logits in io (a write command per engine and sequence). */
static void bmatvec(const bd_ctx *c, int mat, uint64_t off, float *const *x, const float *mul,
                    float *const *y, int y_hbm)
{
    const fpga_dec_mat *m = &c->lo.m[mat];
    bd_chip *k = c->chip;
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES);
    for (uint32_t b = 0; b < c->n; b++) {
        fpga_km_act_quant(x[b], mul, m->k, c->d.agroup, k->xq[b], k->xs[b]);
        fpga_k_stall(m->k / FPGA_DEC_BATCH_SFU_LANES);
    }
    fpga_kd_mat_apply(c->ch, m, off, c->n, k->xq, k->xs, c->d.agroup, y, y_hbm);
    fpga_k_cycles((uint64_t)c->n * m->rows * m->k / FPGA_DEC_BATCH_MACS_PER_CYCLE);
}

void tandem_decode_batch(FPGA_K_PORTS(FPGA_K_PORT_PARAM) uint8_t *io, uint32_t n_seq,
                         uint64_t kv_off, uint32_t blk_tiles, bd_chip *chip)
{
    FPGA_K_PORTS(FPGA_K_PORT_PRAGMA)
#pragma HLS INTERFACE m_axi port = io offset = slave bundle = gmem_io
#pragma HLS INTERFACE s_axilite port = n_seq
#pragma HLS INTERFACE s_axilite port = kv_off
#pragma HLS INTERFACE s_axilite port = blk_tiles
#pragma HLS INTERFACE s_axilite port = return
    bd_ctx c = {.ch = {FPGA_K_PORTS(FPGA_K_PORT_NAME)}, .io = io, .n = n_seq, .chip = chip};
    fpga_k_read(hbm0, sizeof c.d);
    memcpy(&c.d, hbm0, sizeof c.d);
    fpga_dec_layout_of(&c.d, &c.lo);
    const fpga_dec_desc *d = &c.d;
    const uint32_t H = d->hidden, hd = d->head_dim, I = d->inter;
    const uint32_t qd = d->n_heads * hd, kvd = d->n_kv_heads * hd;
    float *x[FPGA_DEC_MAX_BATCH], *xn[FPGA_DEC_MAX_BATCH], *att[FPGA_DEC_MAX_BATCH];
    float *wide[FPGA_DEC_MAX_BATCH], *up[FPGA_DEC_MAX_BATCH], *logits[FPGA_DEC_MAX_BATCH];

    /* each sequence's record: token, position, table, step input */
    for (uint32_t b = 0; b < c.n; b++) {
        const uint8_t *rec = io + fpga_dec_io_rec_off(d, b);
        uint32_t head[7];
        fpga_k_read(rec, 64 + fpga_dec_io_step_bytes(d));
        memcpy(head, rec, sizeof head);
        chip->token[b] = head[0];
        chip->pos[b] = head[1];
        chip->tls_off[b] = (uint64_t)head[5] << 32 | head[4];
        chip->tls_upto[b] = head[6];
        chip->cnt[b] = (fpga_tls_count){0};
        if (chip->tls_off[b]) {
            fpga_k_read(rec + fpga_dec_io_rec_tls(d), sizeof chip->tls[b]);
            memcpy(&chip->tls[b], rec + fpga_dec_io_rec_tls(d), sizeof chip->tls[b]);
        }
        fpga_k_read(rec + fpga_dec_io_rec_table(d), 4ull * head[2]);
        memcpy(chip->ids[b], rec + fpga_dec_io_rec_table(d), 4ull * head[2]);
        fpga_dec_kvmap_paged(d, &c.lo, kv_off, chip->ids[b], head[2], &chip->kv[b]);
        (void)blk_tiles; /* the map derives it from the descriptor (the adapter checked it) */
        memcpy(chip->x[b], rec + 64, 4ull * H);
        memcpy(chip->cs[b], rec + 64 + 4ull * H, 2ull * hd);
        memcpy(chip->sn[b], rec + 64 + 4ull * H + 2ull * hd, 2ull * hd);
        x[b] = chip->x[b];
        xn[b] = chip->xn[b];
        att[b] = chip->att[b];
        wide[b] = chip->wide[b];
        up[b] = chip->wide[b] + I;
        logits[b] = (float *)(void *)(io + fpga_dec_io_rec_off(d, b) + fpga_dec_io_rec_logits(d));
    }

    for (uint32_t l = 0; l < d->n_layers; l++) {
        const uint64_t lo_off = c.lo.w_base + (uint64_t)l * c.lo.layer_stride;
        const float *misc = (const float *)(c.ch[l % FPGA_DEC_CH] + fpga_dec_misc_off(&c.lo, l));
        fpga_k_read(misc, 4ull * c.lo.mi_floats);

        rmsnorm_all(&c, chip->xn, chip->x, misc + c.lo.mi_attn_norm);
        bmatvec(&c, FPGA_DEC_QKV, lo_off + c.lo.off[FPGA_DEC_QKV], xn, 0, wide, 0);
        for (uint32_t b = 0; b < c.n; b++) {
            float *w = wide[b];
            if (d->flags & FPGA_DEC_F_BIAS)
                for (uint32_t i = 0; i < qd + 2 * kvd; i++) w[i] += misc[c.lo.mi_bias + i];
            fpga_kd_rope(w, d->n_heads, hd, chip->cs[b], chip->sn[b]);
            fpga_kd_rope(w + qd, d->n_kv_heads, hd, chip->cs[b], chip->sn[b]);
            fpga_kd_step_append(c.ch, d, &chip->kv[b], l, w + qd, w + qd + kvd, chip->pos[b]);
            if (chip->tls_off[b])
                fpga_tls_step_attention(c.ch, c.ch, d, &c.lo, &chip->kv[b], l, w, w + qd,
                                        w + qd + kvd, chip->pos[b], chip->tls_off[b],
                                        &chip->tls[b], chip->tls_upto[b], NULL, att[b],
                                        FPGA_DEC_BATCH_MACS_PER_CYCLE, &chip->cnt[b]);
            else
                fpga_kd_step_attention(c.ch, d, &c.lo, &chip->kv[b], l, w, chip->pos[b], att[b],
                                       FPGA_DEC_BATCH_MACS_PER_CYCLE);
        }
        bmatvec(&c, FPGA_DEC_O, lo_off + c.lo.off[FPGA_DEC_O], att, misc + c.lo.mi_sm_o, xn, 0);
        for (uint32_t b = 0; b < c.n; b++)
            for (uint32_t i = 0; i < H; i++) x[b][i] += xn[b][i];

        rmsnorm_all(&c, chip->xn, chip->x, misc + c.lo.mi_ffn_norm);
        bmatvec(&c, FPGA_DEC_GU, lo_off + c.lo.off[FPGA_DEC_GU], xn, 0, wide, 0);
        for (uint32_t b = 0; b < c.n; b++) {
            fpga_kd_swiglu(wide[b], up[b], I);
            fpga_k_stall(I / FPGA_DEC_BATCH_SFU_LANES);
        }
        bmatvec(&c, FPGA_DEC_D, lo_off + c.lo.off[FPGA_DEC_D], wide, misc + c.lo.mi_sm_d, xn, 0);
        for (uint32_t b = 0; b < c.n; b++)
            for (uint32_t i = 0; i < H; i++) x[b][i] += xn[b][i];
    }
    const float *fnorm =
        (const float *)(c.ch[d->n_layers % FPGA_DEC_CH] + fpga_dec_misc_off(&c.lo, d->n_layers));
    fpga_k_read(fnorm, 4ull * H);
    rmsnorm_all(&c, chip->xn, chip->x, fnorm);
    bmatvec(&c, FPGA_DEC_LM, c.lo.lm_off, xn, 0, logits, 1);

    for (uint32_t b = 0; b < c.n; b++) {
        uint8_t *rec = io + fpga_dec_io_rec_off(d, b);
        if (chip->tls_off[b]) { /* what the step read, as decode.c reports it */
            fpga_tls_io *tp = &chip->tls[b];
            const fpga_tls_count *k = &chip->cnt[b];
            const uint64_t total = (uint64_t)d->n_layers * d->n_kv_heads * (chip->pos[b] + 1);
            tp->keys_read_lo = (uint32_t)k->keys_read, tp->keys_read_hi = (uint32_t)(k->keys_read >> 32);
            tp->keys_total_lo = (uint32_t)total, tp->keys_total_hi = (uint32_t)(total >> 32);
            tp->fetched_lo = (uint32_t)k->fetched, tp->fetched_hi = (uint32_t)(k->fetched >> 32);
            tp->chosen_lo = (uint32_t)k->chosen, tp->chosen_hi = (uint32_t)(k->chosen >> 32);
            fpga_k_write(rec + fpga_dec_io_rec_tls(d), sizeof *tp);
            memcpy(rec + fpga_dec_io_rec_tls(d), tp, sizeof *tp);
        }
        uint32_t done = FPGA_DEC_STATUS_MAGIC ^ chip->pos[b];
        fpga_k_write(rec + 12, 4);
        memcpy(rec + 12, &done, 4);
    }
    uint32_t status[4] = {FPGA_DEC_BATCH_MAGIC, c.n, d->n_layers, 0};
    fpga_k_write(io, sizeof status);
    memcpy(io, status, sizeof status);
}

static int decode_batch_adapter(const fpga_kargs *a)
{
    const fpga_k_arg *io = &a->a[FPGA_DEC_CH];
    const uint32_t n = (uint32_t)a->a[33].u, blk_tiles = (uint32_t)a->a[35].u;
    const uint64_t kv_off = a->a[34].u;
    uint64_t min_size = a->a[0].size;
    for (int c = 1; c < FPGA_DEC_CH; c++)
        if (a->a[c].size < min_size) min_size = a->a[c].size;
    fpga_dec_desc d;
    if (a->a[0].size < sizeof d) return -1;
    memcpy(&d, a->a[0].ptr, sizeof d);
    if (fpga_dec_desc_check(&d) != 0) return -1;
    fpga_dec_layout lo;
    fpga_dec_layout_of(&d, &lo);
    if (lo.image_bytes > min_size || kv_off < lo.image_bytes) return -1;
    if (!n || n > FPGA_DEC_MAX_BATCH || io->size < fpga_dec_io_batch_bytes(&d, n)) return -1;
    if (blk_tiles != fpga_dec_kv_block_tokens(&d) / (FPGA_DEC_TILE * d.kv_parts)) return -1;
    /* every record: a table inside the pool that holds its position */
    for (uint32_t b = 0; b < n; b++) {
        const uint8_t *rec = (const uint8_t *)io->ptr + fpga_dec_io_rec_off(&d, b);
        uint32_t head[3];
        memcpy(head, rec, sizeof head);
        if (!head[2] || head[2] > FPGA_DEC_MAX_BLOCKS) return -1;
        fpga_dec_kvmap kv;
        fpga_dec_kvmap_paged(&d, &lo, kv_off,
                             (const uint32_t *)(const void *)(rec + fpga_dec_io_rec_table(&d)),
                             head[2], &kv);
        if ((uint64_t)head[1] >= fpga_dec_kvmap_tiles(&kv) * d.kv_parts * FPGA_DEC_TILE) return -1;
        if (!fpga_dec_kvmap_ok(&kv, min_size)) return -1;
        uint32_t th[3];
        memcpy(th, rec + 16, sizeof th);
        const uint64_t tls_off = (uint64_t)th[1] << 32 | th[0];
        if (tls_off) { /* its AsyncTLS: in HBM, no report */
            fpga_tls_io tp;
            memcpy(&tp, rec + fpga_dec_io_rec_tls(&d), sizeof tp);
            uint8_t *bank[FPGA_DEC_CH];
            for (int c = 0; c < FPGA_DEC_CH; c++) bank[c] = a->a[c].ptr;
            if (!fpga_tls_args_ok(&d, &lo, &tp, head[1], th[2], tls_off, min_size, bank, 0, 0))
                return -1;
        }
    }
    bd_chip *chip = malloc(sizeof *chip); /* the on-chip memory (only what a run uses is touched) */
    if (!chip) return -1;
    uint8_t *p[FPGA_DEC_CH];
    for (int c = 0; c < FPGA_DEC_CH; c++) p[c] = a->a[c].ptr;
#define BD_ARG(k) p[k],
    tandem_decode_batch(FPGA_K_PORTS(BD_ARG) io->ptr, n, kv_off, blk_tiles, chip);
#undef BD_ARG
    free(chip);
    return 0;
}

const fpga_k_desc fpga_k_decode_batch_desc = {
    .name = "tandem_decode_batch",
    .n_args = 36,
    .kinds = {FPGA_K_PORTS(FPGA_K_PORT_KIND) FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32, FPGA_K_ARG_U64,
              FPGA_K_ARG_U32},
    .run = decode_batch_adapter,
};
