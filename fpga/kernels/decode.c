/* fpga/kernels/decode.c — one decode step of one sequence through every layer.
 *
 * Design note
 * -----------
 * What a run does (GLITCHES' decode loop: the host starts the kernel with the token and its
 * position, reads the logits back, samples, repeats):
 *   1. read the descriptor (channel 0) and the step input the host synced into io: the
 *      token's embedding row (fp32, looked up on the host) and this position's rotary cos/sin;
 *   2. per layer: RMSNorm -> fused QKV product -> RoPE -> quantize the new K/V (proto/kv.h)
 *      and append them to the sequence's tiles -> attention over every tile of every part
 *      (flash-decoding: one online softmax per part, merged) -> O product -> residual ->
 *      RMSNorm -> fused gate/up product -> SiLU -> down product -> residual;
 *   3. final RMSNorm -> lm_head -> logits into io, then a status record {magic, token, pos}.
 * Numbers: weights int8 per-row (W8A8) or int4 per-group (W4A8), activations int8 per group
 * (fpga/kernels/dec_math.h), int32 accumulation, every scale and the special functions
 * (RMSNorm, RoPE, softmax, SiLU) in fp32; SmoothQuant factors multiply the activations of the
 * O and down products on their way into the quantizer (those of QKV and gate/up are folded
 * into the norm weights by the image builder).
 *
 * Memory (fpga/kernels/dec_layout.h, fpga/BANKS.md): port c reaches pseudo-channel c. Every
 * matrix is split by output rows over the 32 channels, so a product is 32 engines each
 * streaming one contiguous run (values + scales) from its own channel: one command per channel
 * per matrix. KV tiles of (layer, head, part) are spread over the channels the same way; each
 * part is one command. On-chip buffers are the local arrays below, sized by the FPGA_DEC_MAX_*
 * bounds (~0.5 MB: BRAM/URAM on the card, the worker thread's stack in the emulator).
 *
 * Timing (emulator): every HBM access is reported once as a command (fpga_k_read/_write); the
 * MACs as overlapped compute (fpga_k_cycles); each dependent phase and the special-function
 * passes as serial stalls (fpga_k_stall). The constants are in dec_layout.h.
 *
 * Arguments: 0..31 hbm0..hbm31 (global, HBM[c]: the bank BOs), 32 io (global, HBM[0]),
 * 33 token u32, 34 pos u32, 35 kv_off u64, 36 part_tiles u32, 37 n_ids u32, 38 sel_cap u32.
 * n_ids 0: the KV is a slab at kv_off of part_tiles tiles per part; else a block table of n_ids
 * ids in io (at fpga_dec_io_table_off) into the pool at kv_off (dec_layout.h, "KV pages").
 * sel_cap 0: every layer attends every position; else io holds a selection table of lists of
 * sel_cap positions (dec_step.h, fpga_dec_io_sel_off): each (layer, KV head) attends the
 * positions its list names (AsyncTLS sparse decode, sparse/tls.h), reading only their tiles.
 * 39 tls_off u64, 40 tls_upto u32: tls_off not 0 runs AsyncTLS on the card (tls_dec.h): the
 * parameters in io at fpga_dec_io_sel_off, the sequence's summaries in the arena at tls_off of
 * every bank, positions tls_upto..pos summarized by this run, then selection and attention over
 * the kept positions. 41 ddr0 (global, DDR[0]), 42 ddr1 (global, DDR[1]) — the two DDR4 banks,
 * one BO of FPGA_DEC_DDR_BO_BYTES each —, 43 kv_tier u32 and 44 host0 (global, HOST[0]): kv_tier
 * 1 (2) when the sequence's KV (the block table at kv_off) is in the DDR4 (host memory) pool
 * (dec_layout.h, FPGA_DEC_DDR_SPAN) instead of HBM:
 * its tiles are read and appended there, and with AsyncTLS offload (tls_dec.h) attention reads a
 * resident cache of blocks in HBM instead. */
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_mat.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/dec_ops.h"
#include "fpga/kernels/dec_step.h"
#include "fpga/kernels/tls_dec.h"
#include "fpga/kernels/kernel.h"
#include <math.h>


/* largest of the fused outputs: QKV rows (qd + 2 kvd) and gate/up rows (2 * inter) */
#define DEC_MAX_WIDE (2 * FPGA_DEC_MAX_INTER)

typedef struct dec_ctx {
    uint8_t *ch[FPGA_DEC_CH];
    fpga_dec_desc d;
    fpga_dec_layout lo;
    fpga_dec_kvmap kv; /* the sequence's KV: a block table into the pool, or a slab */
} dec_ctx;

static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps)
{
    fpga_kd_rmsnorm(out, x, w, n, eps);
    fpga_k_stall(2 * n / FPGA_DEC_SFU_LANES); /* the reduction, then the scaling pass */
}

/* y = M x for matrix `mat` at offset `off` of every channel; x is first multiplied by mul
 * (may be NULL) and quantized. y_hbm: y lies in HBM (the logits), so each engine's slice is a
 * write command. */
static void matvec(const dec_ctx *c, int mat, uint64_t off, const float *x, const float *mul,
                   float *y, int y_hbm, int8_t (*xq)[FPGA_DEC_MAX_K], float (*xs)[FPGA_DEC_XS_LEN])
{
    const fpga_dec_mat *m = &c->lo.m[mat];
    fpga_km_act_quant(x, mul, m->k, c->d.agroup, xq[0], xs[0]);
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES + m->k / FPGA_DEC_SFU_LANES);
    fpga_kd_mat_apply(c->ch, m, off, 1, xq, xs, c->d.agroup, &y, y_hbm);
    fpga_k_cycles((uint64_t)m->rows * m->k / FPGA_DEC_MACS_PER_CYCLE);
}

void tandem_decode(FPGA_K_PORTS(FPGA_K_PORT_PARAM) uint8_t *io, uint32_t token, uint32_t pos,
                   uint64_t kv_off, uint32_t part_tiles, uint32_t n_ids, uint32_t sel_cap,
                   uint64_t tls_off, uint32_t tls_upto, uint8_t *ddr0, uint8_t *ddr1,
                   uint32_t kv_tier, uint8_t *host0)
{
#pragma HLS INTERFACE m_axi port = host0 offset = slave bundle = gmem_host
    FPGA_K_PORTS(FPGA_K_PORT_PRAGMA)
#pragma HLS INTERFACE m_axi port = ddr0 offset = slave bundle = gmem_ddr0
#pragma HLS INTERFACE m_axi port = ddr1 offset = slave bundle = gmem_ddr1
#pragma HLS INTERFACE s_axilite port = kv_tier
#pragma HLS INTERFACE m_axi port = io offset = slave bundle = gmem_io
#pragma HLS INTERFACE s_axilite port = token
#pragma HLS INTERFACE s_axilite port = pos
#pragma HLS INTERFACE s_axilite port = kv_off
#pragma HLS INTERFACE s_axilite port = part_tiles
#pragma HLS INTERFACE s_axilite port = n_ids
#pragma HLS INTERFACE s_axilite port = sel_cap
#pragma HLS INTERFACE s_axilite port = tls_off
#pragma HLS INTERFACE s_axilite port = tls_upto
#pragma HLS INTERFACE s_axilite port = return
    dec_ctx c = {.ch = {FPGA_K_PORTS(FPGA_K_PORT_NAME)}};
    fpga_k_read(hbm0, sizeof c.d);
    memcpy(&c.d, hbm0, sizeof c.d);
    fpga_dec_layout_of(&c.d, &c.lo);
    uint32_t ids[FPGA_DEC_MAX_BLOCKS]; /* the block table, on chip for the step */
    if (n_ids) {
        const uint8_t *tbl = io + fpga_dec_io_table_off(&c.d);
        fpga_k_read(tbl, 4ull * n_ids);
        memcpy(ids, tbl, 4ull * n_ids);
        fpga_dec_kvmap_paged(&c.d, &c.lo, kv_off, ids, n_ids, &c.kv);
    } else {
        fpga_dec_kvmap_slab(&c.lo, kv_off, part_tiles, &c.kv);
    }
    const fpga_dec_desc *d = &c.d;
    uint8_t *kvch[FPGA_DEC_CH]; /* where the sequence's KV tiles are: HBM, or DDR4 */
    for (uint32_t i = 0; i < FPGA_DEC_CH; i++)
        kvch[i] = fpga_dec_tier_ch(kv_tier, c.ch, ddr0, ddr1, host0, i);
    const uint32_t H = d->hidden, hd = d->head_dim, I = d->inter;
    const uint32_t qd = d->n_heads * hd, kvd = d->n_kv_heads * hd;

    float x[FPGA_DEC_MAX_HIDDEN], xn[FPGA_DEC_MAX_HIDDEN], att[FPGA_DEC_MAX_QDIM];
    float wide[DEC_MAX_WIDE], cs[FPGA_DEC_MAX_HEAD_DIM / 2], sn[FPGA_DEC_MAX_HEAD_DIM / 2];
    int8_t xq[1][FPGA_DEC_MAX_K]; /* the activation vector, quantized */
    float xs[1][FPGA_DEC_XS_LEN];

    fpga_tls_io tp = {0};
    uint32_t *report = NULL;
    fpga_tls_count cnt = {0};
    if (tls_off) {
        fpga_k_read(io + fpga_dec_io_sel_off(d), sizeof tp);
        memcpy(&tp, io + fpga_dec_io_sel_off(d), sizeof tp);
        if (tp.report) report = (uint32_t *)(io + fpga_dec_io_sel_off(d) + sizeof tp);
    }

    const uint8_t *step = io + fpga_dec_io_step_off();
    fpga_k_read(step, fpga_dec_io_step_bytes(d));
    memcpy(x, step, 4ull * H);
    memcpy(cs, step + 4ull * H, 2ull * hd);
    memcpy(sn, step + 4ull * H + 2ull * hd, 2ull * hd);

    for (uint32_t l = 0; l < d->n_layers; l++) {
        const uint64_t lo_off = c.lo.w_base + (uint64_t)l * c.lo.layer_stride;
        const float *misc = (const float *)(c.ch[l % FPGA_DEC_CH] + fpga_dec_misc_off(&c.lo, l));
        fpga_k_read(misc, 4ull * c.lo.mi_floats);

        rmsnorm(xn, x, misc + c.lo.mi_attn_norm, H, d->rms_eps);
        matvec(&c, FPGA_DEC_QKV, lo_off + c.lo.off[FPGA_DEC_QKV], xn, 0, wide, 0, xq, xs);
        if (d->flags & FPGA_DEC_F_BIAS)
            for (uint32_t i = 0; i < qd + 2 * kvd; i++) wide[i] += misc[c.lo.mi_bias + i];
        fpga_kd_rope(wide, d->n_heads, hd, cs, sn);
        fpga_kd_rope(wide + qd, d->n_kv_heads, hd, cs, sn);
        fpga_kd_step_append(kvch, d, &c.kv, l, wide + qd, wide + qd + kvd, pos);
        if (tls_off)
            fpga_tls_step_attention(c.ch, kvch, d, &c.lo, &c.kv, l, wide, wide + qd,
                                    wide + qd + kvd, pos, tls_off, &tp, tls_upto, report, att,
                                    FPGA_DEC_MACS_PER_CYCLE, &cnt);
        else if (sel_cap)
            fpga_kd_step_attention_sel(kvch, d, &c.lo, &c.kv, l, wide, pos,
                                       (const uint32_t *)(io + fpga_dec_io_sel_off(d)), sel_cap,
                                       att, FPGA_DEC_MACS_PER_CYCLE);
        else
            fpga_kd_step_attention(kvch, d, &c.lo, &c.kv, l, wide, pos, att,
                                   FPGA_DEC_MACS_PER_CYCLE);
        matvec(&c, FPGA_DEC_O, lo_off + c.lo.off[FPGA_DEC_O], att, misc + c.lo.mi_sm_o, xn, 0, xq,
               xs);
        for (uint32_t i = 0; i < H; i++) x[i] += xn[i];

        rmsnorm(xn, x, misc + c.lo.mi_ffn_norm, H, d->rms_eps);
        matvec(&c, FPGA_DEC_GU, lo_off + c.lo.off[FPGA_DEC_GU], xn, 0, wide, 0, xq, xs);
        fpga_kd_swiglu(wide, wide + I, I);
        fpga_k_stall(I / FPGA_DEC_SFU_LANES);
        matvec(&c, FPGA_DEC_D, lo_off + c.lo.off[FPGA_DEC_D], wide, misc + c.lo.mi_sm_d, xn, 0, xq,
               xs);
        for (uint32_t i = 0; i < H; i++) x[i] += xn[i];
    }
    const float *fnorm =
        (const float *)(c.ch[d->n_layers % FPGA_DEC_CH] + fpga_dec_misc_off(&c.lo, d->n_layers));
    fpga_k_read(fnorm, 4ull * H);
    rmsnorm(xn, x, fnorm, H, d->rms_eps);
    matvec(&c, FPGA_DEC_LM, c.lo.lm_off, xn, 0, (float *)(io + fpga_dec_io_logits_off(d)), 1, xq,
           xs);

    if (tls_off) { /* what the step read, back to the host with the status */
        const uint64_t total = (uint64_t)d->n_layers * d->n_kv_heads * (pos + 1);
        const uint64_t keys_read = cnt.keys_read;
        tp.keys_read_lo = (uint32_t)keys_read, tp.keys_read_hi = (uint32_t)(keys_read >> 32);
        tp.fetched_lo = (uint32_t)cnt.fetched, tp.fetched_hi = (uint32_t)(cnt.fetched >> 32);
        tp.chosen_lo = (uint32_t)cnt.chosen, tp.chosen_hi = (uint32_t)(cnt.chosen >> 32);
        tp.keys_total_lo = (uint32_t)total, tp.keys_total_hi = (uint32_t)(total >> 32);
        fpga_k_write(io + fpga_dec_io_sel_off(d), sizeof tp);
        memcpy(io + fpga_dec_io_sel_off(d), &tp, sizeof tp);
    }
    uint32_t status[4] = {FPGA_DEC_STATUS_MAGIC, token, pos, d->n_layers};
    fpga_k_write(io, sizeof status);
    memcpy(io, status, sizeof status);
}

static int decode_adapter(const fpga_kargs *a)
{
    const fpga_k_arg *io = &a->a[FPGA_DEC_CH];
    uint32_t token = (uint32_t)a->a[33].u, pos = (uint32_t)a->a[34].u;
    uint64_t kv_off = a->a[35].u;
    uint32_t part_tiles = (uint32_t)a->a[36].u, n_ids = (uint32_t)a->a[37].u;
    uint32_t sel_cap = (uint32_t)a->a[38].u, tls_upto = (uint32_t)a->a[40].u;
    uint64_t tls_off = a->a[39].u;
    uint32_t kv_tier = (uint32_t)a->a[43].u;
    if (kv_tier > FPGA_DEC_TIER_HOST ||
        !fpga_dec_tier_bos_ok(kv_tier, a->a[41].size, a->a[42].size, a->a[44].size))
        return -1;
    uint64_t min_size = a->a[0].size;
    for (int c = 1; c < FPGA_DEC_CH; c++)
        if (a->a[c].size < min_size) min_size = a->a[c].size;
    fpga_dec_desc d;
    if (a->a[0].size < sizeof d) return -1;
    memcpy(&d, a->a[0].ptr, sizeof d);
    if (fpga_dec_desc_check(&d) != 0) return -1;
    fpga_dec_layout lo;
    fpga_dec_layout_of(&d, &lo);
    /* the image, the slab (above the image) and the io block must lie inside their buffers;
     * a position must fit the slab's tiles */
    if (lo.image_bytes > min_size || io->size < fpga_dec_io_bytes(&d)) return -1;
    fpga_dec_kvmap kv;
    if (n_ids) {
        /* paged: the table in io names blocks of the pool at kv_off */
        if (n_ids > FPGA_DEC_MAX_BLOCKS) return -1;
        fpga_dec_kvmap_paged(&d, &lo, kv_off, (const uint32_t *)(const void *)(
                                 (const uint8_t *)io->ptr + fpga_dec_io_table_off(&d)), n_ids, &kv);
    } else {
        if (!part_tiles || part_tiles > FPGA_DEC_MAX_POS) return -1;
        fpga_dec_kvmap_slab(&lo, kv_off, part_tiles, &kv);
    }
    if ((uint64_t)pos >= fpga_dec_kvmap_tiles(&kv) * d.kv_parts * FPGA_DEC_TILE) return -1;
    if (kv_tier ? !fpga_dec_kvmap_ok(&kv, fpga_dec_tier_span(kv_tier))
                : kv_off < lo.image_bytes || !fpga_dec_kvmap_ok(&kv, min_size))
        return -1;
    if (sel_cap) {
        /* every list inside io, ascending, within 0..pos, at most sel_cap long */
        if (sel_cap > FPGA_DEC_MAX_POS ||
            !fpga_k_range_ok(fpga_dec_io_sel_off(&d), fpga_dec_io_sel_bytes(&d, sel_cap), io->size))
            return -1;
        const uint32_t *t = (const uint32_t *)(const void *)((const uint8_t *)io->ptr +
                                                               fpga_dec_io_sel_off(&d));
        for (uint64_t i = 0; i < (uint64_t)d.n_layers * d.n_kv_heads; i++) {
            const uint32_t *list = t + i * (1ull + sel_cap);
            if (list[0] == FPGA_DEC_SEL_DENSE) continue;
            if (list[0] > sel_cap) return -1;
            for (uint32_t e = 0; e < list[0]; e++)
                if (list[1 + e] > pos || (e && list[1 + e] <= list[e])) return -1;
        }
    }
    if (tls_off) {
        /* the parameters within the selection unit's bounds, the arena inside every bank above
         * the image, its channels real, the report inside io */
        fpga_tls_io tp;
        if (sel_cap || !fpga_k_range_ok(fpga_dec_io_sel_off(&d), sizeof tp, io->size)) return -1;
        memcpy(&tp, (const uint8_t *)io->ptr + fpga_dec_io_sel_off(&d), sizeof tp);
        uint8_t *bank[FPGA_DEC_CH];
        for (int c = 0; c < FPGA_DEC_CH; c++) bank[c] = a->a[c].ptr;
        if (!fpga_tls_args_ok(&d, &lo, &tp, pos, tls_upto, tls_off, min_size, bank, kv_tier, 1))
            return -1;
        if (tp.report && !fpga_k_range_ok(fpga_dec_io_sel_off(&d) + sizeof tp,
                                          fpga_tls_report_bytes(&d, tp.token_budget), io->size))
            return -1;
    }
    uint8_t *p[FPGA_DEC_CH];
    for (int c = 0; c < FPGA_DEC_CH; c++) p[c] = a->a[c].ptr;
#define DEC_ARG(n) p[n],
    tandem_decode(FPGA_K_PORTS(DEC_ARG) io->ptr, token, pos, kv_off, part_tiles, n_ids, sel_cap,
                  tls_off, tls_upto, a->a[41].ptr, a->a[42].ptr, kv_tier, a->a[44].ptr);
#undef DEC_ARG
    return 0;
}

const fpga_k_desc fpga_k_decode_desc = {
    .name = "tandem_decode",
    .n_args = 45,
    .kinds = {FPGA_K_PORTS(FPGA_K_PORT_KIND) FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U64, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U64,
              FPGA_K_ARG_U32, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32,
              FPGA_K_ARG_GLOBAL},
    .run = decode_adapter,
};
