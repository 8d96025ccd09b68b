/* fpga/pf_model.c — the prefill kernel's costs from the layouts (see pf_model.h). Each function
 * mirrors the one of fpga/kernels/prefill.c with the same name: every fpga_k_read / _write /
 * _cycles / _stall call there is one charge here, with the same arithmetic. */
#include "fpga/pf_model.h"
#include <string.h>

typedef struct pm {
    fpga_dec_cost *c;
    const fpga_dec_desc *d;
    fpga_dec_layout lo;
    fpga_pf_ws w;
    uint32_t flags, layer, pos0;
} pm;

static void charge_items(pm *m, const fpga_pf_arr *a, uint64_t i0, uint64_t k, uint64_t bytes,
                         int write)
{
    for (uint32_t ch = 0; ch < FPGA_DEC_CH; ch++) {
        uint64_t first = i0 + (ch + FPGA_DEC_CH - i0 % FPGA_DEC_CH) % FPGA_DEC_CH;
        if (first >= i0 + k) continue;
        uint64_t cnt = (i0 + k - 1 - first) / FPGA_DEC_CH + 1;
        fpga_dec_model_charge(m->c, (int)fpga_pf_item_ch(first), (cnt - 1) * a->item + bytes,
                              write);
    }
}

static void charge_block_rows(pm *m, uint32_t heads, uint32_t r, uint64_t bytes, int write)
{
    for (uint32_t h = 0; h < heads; h++)
        fpga_dec_model_charge(m->c, (int)fpga_pf_item_ch((uint64_t)h * m->w.nb + r), bytes, write);
}

static uint64_t gemm(pm *m, int mat, uint32_t T)
{
    const fpga_dec_mat *x = &m->lo.m[mat];
    for (uint32_t ch = 0; ch < FPGA_DEC_CH; ch++) {
        uint32_t n = fpga_dec_rows_in(x, ch);
        if (n) fpga_dec_model_charge(m->c, (int)ch, fpga_dec_stream_bytes(x, n), 0);
    }
    m->c->stall_cycles += FPGA_DEC_PHASE_CYCLES;
    return (uint64_t)T * x->rows * x->k / FPGA_FLEX_MPU_MACS;
}

static void charge_compute(pm *m, uint64_t mpu, uint64_t sfu_elems)
{
    uint64_t sfu = sfu_elems / FPGA_FLEX_SFU_LANES;
    m->c->compute_cycles += mpu > sfu ? mpu : sfu;
}

static void chunk_qkv(pm *m, uint32_t t0, uint32_t T)
{
    const fpga_dec_desc *d = m->d;
    const uint32_t H = d->hidden, hd = d->head_dim, qd = d->n_heads * hd;
    const uint32_t kvd = d->n_kv_heads * hd, blk = t0 / FPGA_PF_CHUNK;
    charge_items(m, &m->w.x, t0, T, 4ull * H, 0);
    uint64_t mpu = gemm(m, FPGA_DEC_QKV, T);
    charge_items(m, &m->w.wide, 0, T, 4ull * (qd + 2 * kvd), 1);
    charge_items(m, &m->w.wide, 0, T, 4ull * (qd + 2 * kvd), 0);
    charge_items(m, &m->w.rope, t0, T, 4ull * hd, 0);
    const uint32_t p0 = m->pos0 + t0, p1 = p0 + T - 1;
    for (uint32_t h = 0; h < d->n_kv_heads; h++)
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t first, last;
            if (fpga_dec_part_tile_run(d, p0, p1 - p0 + 1, b, &first, &last))
                fpga_dec_model_charge(m->c, (int)fpga_dec_stream_ch(d, m->layer, h, b),
                                      (uint64_t)(last - first + 1) * m->lo.tile_bytes, 1);
        }
    if (m->flags & FPGA_PF_F_KVF)
        for (int which = 0; which < 2; which++) {
            charge_block_rows(m, d->n_kv_heads, blk, (uint64_t)T * hd, 1);
            charge_block_rows(m, d->n_kv_heads, blk, 4ull * T, 1);
        }
    if (m->flags & FPGA_PF_F_SPARSE) {
        charge_block_rows(m, d->n_heads, blk, (uint64_t)T * hd, 1);
        charge_block_rows(m, d->n_heads, blk, 4ull * T, 1);
    } else {
        charge_items(m, &m->w.wide, 0, T, 4ull * qd, 1);
    }
    charge_compute(m, mpu, (uint64_t)T * FPGA_PF_SFU_QKV(H, qd, kvd));
}

static void chunk_attention(pm *m, uint32_t t0, uint32_t T)
{
    const fpga_dec_desc *d = m->d;
    const uint32_t hd = d->head_dim, blk = t0 / FPGA_PF_CHUNK, last = m->pos0 + t0 + T - 1;
    charge_items(m, &m->w.wide, 0, T, 4ull * d->n_heads * hd, 0);
    for (uint32_t kh = 0; kh < d->n_kv_heads; kh++)
        for (uint32_t b = 0; b < d->kv_parts; b++) {
            uint32_t nt = fpga_dec_part_used_tiles(d, last + 1, b);
            if (nt)
                fpga_dec_model_charge(m->c, (int)fpga_dec_stream_ch(d, m->layer, kh, b),
                                      (uint64_t)nt * m->lo.tile_bytes, 0);
        }
    uint64_t macs = 0, exps = 0;
    for (uint32_t t = 0; t < T; t++) {
        const uint64_t keys = (uint64_t)m->pos0 + t0 + t + 1;
        macs += 2 * keys * hd * d->n_heads; /* fpga_kd_attend: 2 x rows x hd x group per head */
        exps += keys * d->n_heads;
    }
    charge_block_rows(m, d->n_heads, blk, 4ull * T * hd, 1);
    uint64_t mpu = macs / FPGA_FLEX_MPU_MACS, sfu = exps / FPGA_FLEX_SFU_LANES;
    m->c->compute_cycles += mpu > sfu ? mpu : sfu;
    m->c->stall_cycles += FPGA_DEC_PHASE_CYCLES;
}

static void residual(pm *m, uint32_t t0, uint32_t T)
{
    const uint32_t H = m->d->hidden;
    charge_items(m, &m->w.wide, 0, T, 4ull * H, 0);
    charge_items(m, &m->w.x, t0, T, 4ull * H, 0);
    charge_items(m, &m->w.x, t0, T, 4ull * H, 1);
}

static void chunk_post(pm *m, uint32_t t0, uint32_t T)
{
    const fpga_dec_desc *d = m->d;
    const uint32_t H = d->hidden, hd = d->head_dim, qd = d->n_heads * hd, I = d->inter;
    charge_block_rows(m, d->n_heads, t0 / FPGA_PF_CHUNK, 4ull * T * hd, 0);
    uint64_t mpu = gemm(m, FPGA_DEC_O, T);
    charge_items(m, &m->w.wide, 0, T, 4ull * H, 1);
    residual(m, t0, T);
    mpu += gemm(m, FPGA_DEC_GU, T);
    charge_items(m, &m->w.wide, 0, T, 8ull * I, 1);
    charge_items(m, &m->w.wide, 0, T, 8ull * I, 0);
    mpu += gemm(m, FPGA_DEC_D, T);
    charge_items(m, &m->w.wide, 0, T, 4ull * H, 1);
    residual(m, t0, T);
    charge_compute(m, mpu, (uint64_t)T * FPGA_PF_SFU_POST(H, qd, I));
}

int fpga_pf_model_run(const fpga_dec_desc *d, uint32_t mode, uint32_t layer, uint32_t pos0,
                      uint32_t n, uint32_t r0, uint32_t r1, fpga_dec_cost *out)
{
    memset(out, 0, sizeof *out);
    pm m = {.c = out, .d = d, .flags = mode & ~FPGA_PF_MODE_MASK, .layer = layer, .pos0 = pos0};
    const uint32_t mo = mode & FPGA_PF_MODE_MASK;
    if (mo != FPGA_PF_DENSE && mo != FPGA_PF_QKV && mo != FPGA_PF_POST && mo != FPGA_PF_HEAD)
        return -1;
    fpga_dec_layout_of(d, &m.lo);
    fpga_pf_ws_of(d, n, m.flags, &m.w);
    fpga_dec_model_charge(out, 0, sizeof(fpga_dec_desc), 0);
    if (mo == FPGA_PF_HEAD) {
        fpga_dec_model_charge(out, (int)(d->n_layers % FPGA_DEC_CH), 4ull * d->hidden, 0);
        charge_items(&m, &m.w.x, r0, 1, 4ull * d->hidden, 0);
        uint64_t mpu = gemm(&m, FPGA_DEC_LM, 1);
        fpga_dec_model_charge(out, 0, 4ull * d->vocab, 1);
        charge_compute(&m, mpu, 3ull * d->hidden);
    } else {
        fpga_dec_model_charge(out, (int)(layer % FPGA_DEC_CH), 4ull * m.lo.mi_floats, 0);
        for (uint32_t t0 = r0; t0 < r1; t0 += FPGA_PF_CHUNK) {
            uint32_t T = r1 - t0 < FPGA_PF_CHUNK ? r1 - t0 : FPGA_PF_CHUNK;
            if (mo == FPGA_PF_DENSE || mo == FPGA_PF_QKV) chunk_qkv(&m, t0, T);
            if (mo == FPGA_PF_DENSE) chunk_attention(&m, t0, T);
            if (mo == FPGA_PF_DENSE || mo == FPGA_PF_POST) chunk_post(&m, t0, T);
        }
    }
    fpga_dec_model_charge(out, 0, 16, 1);
    fpga_dec_model_price(out);
    return 0;
}
