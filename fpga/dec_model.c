/* fpga/dec_model.c — the kernels' costs from the layout (see dec_model.h). Every charge below
 * mirrors one fpga_k_read / fpga_k_write / fpga_k_cycles / fpga_k_stall call of the kernels, in
 * the same order; the test compares the totals with the emulator's. */
#include "fpga/dec_model.h"
#include <string.h>

void fpga_dec_model_charge(fpga_dec_cost *c, int ch, uint64_t n, int write)
{
    if (!n) return;
    c->chan_bytes[ch] += n;
    c->chan_cmds[ch]++;
    if (write) c->bytes_written += n;
    else c->bytes_read += n;
}

void fpga_dec_model_price(fpga_dec_cost *c)
{
    const double bps = FPGA_U280_HBM_PC_BPS * FPGA_U280_HBM_UTIL;
    const double cmd_ns = FPGA_U280_CMD_CYCLES / FPGA_U280_KERNEL_HZ * 1e9;
    double worst = 0;
    c->busiest = -1;
    for (int ch = 0; ch < FPGA_DEC_CH; ch++) {
        if (!c->chan_bytes[ch] && !c->chan_cmds[ch]) continue;
        double t = (double)c->chan_bytes[ch] / bps * 1e9 + c->chan_cmds[ch] * cmd_ns;
        if (t > worst) {
            worst = t;
            c->busiest = ch;
        }
    }
    c->mem_ns = (uint64_t)worst;
    c->compute_ns = (uint64_t)((double)c->compute_cycles / FPGA_U280_KERNEL_HZ * 1e9);
    c->stall_ns = (uint64_t)((double)c->stall_cycles / FPGA_U280_KERNEL_HZ * 1e9);
    c->overhead_ns = (uint64_t)FPGA_U280_RUN_OVERHEAD_NS;
    c->modeled_ns = c->overhead_ns + (c->mem_ns > c->compute_ns ? c->mem_ns : c->compute_ns) +
                    c->stall_ns;
}

static void matvec(fpga_dec_cost *c, const fpga_dec_layout *lo, int mat, int y_hbm)
{
    const fpga_dec_mat *m = &lo->m[mat];
    c->stall_cycles += FPGA_DEC_PHASE_CYCLES + m->k / FPGA_DEC_SFU_LANES;
    for (uint32_t ch = 0; ch < FPGA_DEC_CH; ch++) {
        uint32_t n = fpga_dec_rows_in(m, ch);
        if (!n) continue;
        fpga_dec_model_charge(c, (int)ch, fpga_dec_stream_bytes(m, n), 0);
        if (y_hbm) fpga_dec_model_charge(c, 0, 4ull * n, 1); /* the logits go to io, in HBM[0] */
    }
    c->compute_cycles += (uint64_t)m->rows * m->k / FPGA_DEC_MACS_PER_CYCLE;
}

static void rmsnorm(fpga_dec_cost *c, uint32_t n)
{
    c->stall_cycles += 2 * n / FPGA_DEC_SFU_LANES;
}

/* One step through map kv (NULL: a slab, one burst per part). */
static void step(const fpga_dec_desc *d, uint32_t pos, const fpga_dec_kvmap *kv, fpga_dec_cost *c)
{
    fpga_dec_layout lo;
    fpga_dec_layout_of(d, &lo);
    memset(c, 0, sizeof *c);
    const uint32_t H = d->hidden, hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    fpga_dec_model_charge(c, 0, sizeof(fpga_dec_desc), 0);
    if (kv) fpga_dec_model_charge(c, 0, 4ull * kv->n_ids, 0); /* the block table, from io */
    fpga_dec_model_charge(c, 0, fpga_dec_io_step_bytes(d), 0);
    uint32_t part, tile, row;
    fpga_dec_pos_where(d, pos, &part, &tile, &row);
    for (uint32_t l = 0; l < d->n_layers; l++) {
        fpga_dec_model_charge(c, (int)(l % FPGA_DEC_CH), 4ull * lo.mi_floats, 0);
        rmsnorm(c, H);
        matvec(c, &lo, FPGA_DEC_QKV, 0);
        for (uint32_t h = 0; h < d->n_kv_heads; h++) {
            int ch = (int)fpga_dec_stream_ch(d, l, h, part);
            for (int which = 0; which < 2; which++) {
                fpga_dec_model_charge(c, ch, hd, 1);
                fpga_dec_model_charge(c, ch, 2, 1);
            }
        }
        uint64_t macs = 0;
        for (uint32_t h = 0; h < d->n_kv_heads; h++)
            for (uint32_t b = 0; b < d->kv_parts; b++) {
                uint32_t nt = fpga_dec_part_used_tiles(d, pos + 1, b);
                if (!nt) continue;
                for (uint32_t t = 0, run; t < nt; t += run) {
                    run = kv ? fpga_dec_kv_run(kv, t, nt - 1) : nt;
                    fpga_dec_model_charge(c, (int)fpga_dec_stream_ch(d, l, h, b),
                                          (uint64_t)run * lo.tile_bytes, 0);
                }
                for (uint32_t t = 0; t < nt; t++) {
                    uint32_t p0 = (t * d->kv_parts + b) * FPGA_DEC_TILE;
                    uint32_t rows = pos + 1 - p0 < FPGA_DEC_TILE ? pos + 1 - p0 : FPGA_DEC_TILE;
                    macs += 2ull * rows * hd * group;
                }
            }
        c->compute_cycles += macs / FPGA_DEC_MACS_PER_CYCLE;
        c->stall_cycles += FPGA_DEC_PHASE_CYCLES + d->kv_parts * 4;
        matvec(c, &lo, FPGA_DEC_O, 0);
        rmsnorm(c, H);
        matvec(c, &lo, FPGA_DEC_GU, 0);
        c->stall_cycles += d->inter / FPGA_DEC_SFU_LANES;
        matvec(c, &lo, FPGA_DEC_D, 0);
    }
    fpga_dec_model_charge(c, (int)(d->n_layers % FPGA_DEC_CH), 4ull * H, 0);
    rmsnorm(c, H);
    matvec(c, &lo, FPGA_DEC_LM, 1);
    fpga_dec_model_charge(c, 0, 16, 1);
    fpga_dec_model_price(c);
}

void fpga_dec_model_step(const fpga_dec_desc *d, uint32_t pos, fpga_dec_cost *c)
{
    step(d, pos, NULL, c);
}

void fpga_dec_model_step_paged(const fpga_dec_desc *d, uint32_t pos, uint32_t first_id,
                               fpga_dec_cost *c)
{
    fpga_dec_layout lo;
    fpga_dec_layout_of(d, &lo);
    const uint32_t T = fpga_dec_kv_block_tokens(d), n = pos / T + 1;
    static _Thread_local uint32_t ids[FPGA_DEC_MAX_BLOCKS];
    for (uint32_t i = 0; i < n && i < FPGA_DEC_MAX_BLOCKS; i++) ids[i] = first_id + i;
    fpga_dec_kvmap kv;
    fpga_dec_kvmap_paged(d, &lo, 0, ids, n, &kv);
    step(d, pos, &kv, c);
}

void fpga_dec_model_scatter(const fpga_dec_desc *d, uint32_t layer, uint32_t pos0, uint32_t n,
                            uint32_t per, const int stage_ch[FPGA_DEC_STAGE_SLOTS], int paged,
                            uint32_t first_id, fpga_dec_cost *c)
{
    fpga_dec_layout lo;
    fpga_dec_layout_of(d, &lo);
    memset(c, 0, sizeof *c);
    fpga_dec_model_charge(c, 0, sizeof(fpga_dec_desc), 0);
    fpga_dec_kvmap kv;
    uint32_t ids[FPGA_DEC_SCATTER_IDS], pbase = 0;
    if (paged) { /* the blocks the piece spans, their table read from slot 0 */
        const uint32_t T = fpga_dec_kv_block_tokens(d);
        uint32_t n_ids = (pos0 % T + n + T - 1) / T;
        if (n_ids > FPGA_DEC_SCATTER_IDS) n_ids = FPGA_DEC_SCATTER_IDS; /* the host's bound */
        for (uint32_t i = 0; i < n_ids; i++)
            ids[i] = first_id + pos0 / T + i;
        pbase = pos0 / T * T;
        fpga_dec_model_charge(c, stage_ch[0], 4ull * n_ids, 0);
        fpga_dec_kvmap_paged(d, &lo, 0, ids, n_ids, &kv);
    } else {
        fpga_dec_kvmap_slab(&lo, 0, 1, &kv);
    }
    for (uint32_t j = 0; j < FPGA_DEC_STAGE_SLOTS; j++) {
        uint32_t first_pos = j * per;
        if (first_pos >= n) break;
        uint32_t cnt = n - first_pos < per ? n - first_pos : per;
        uint32_t p0 = pos0 - pbase + first_pos;
        fpga_dec_model_charge(c, stage_ch[j], fpga_dec_stage_section(cnt, d->n_kv_heads, d->head_dim, 4), 0);
        for (uint32_t h = 0; h < d->n_kv_heads; h++)
            for (uint32_t b = 0; b < d->kv_parts; b++) {
                uint32_t first, last;
                if (fpga_dec_part_tile_run(d, p0, cnt, b, &first, &last))
                    for (uint32_t t = first, run; t <= last; t += run) {
                        run = fpga_dec_kv_run(&kv, t, last);
                        fpga_dec_model_charge(c, (int)fpga_dec_stream_ch(d, layer, h, b),
                                              (uint64_t)run * lo.tile_bytes, 1);
                    }
            }
    }
    c->stall_cycles += FPGA_DEC_PHASE_CYCLES;
    fpga_dec_model_charge(c, stage_ch[0], 64, 1);
    fpga_dec_model_price(c);
}

uint64_t fpga_dec_model_sync_ns(uint64_t bytes)
{
    return (uint64_t)(FPGA_U280_SYNC_OVERHEAD_NS + (double)bytes / FPGA_U280_PCIE_BPS * 1e9);
}

double fpga_dec_model_floor_ns(const fpga_dec_cost *c)
{
    return (double)(c->bytes_read + c->bytes_written) /
           (FPGA_U280_HBM_PC_BPS * FPGA_U280_HBM_BANKS) * 1e9;
}

/* ---------------------------------------------------------------- the batched kernel */

static void bmatvec(fpga_dec_cost *c, const fpga_dec_layout *lo, int mat, uint32_t n, int y_hbm)
{
    const fpga_dec_mat *m = &lo->m[mat];
    c->stall_cycles += FPGA_DEC_PHASE_CYCLES + (uint64_t)n * (m->k / FPGA_DEC_BATCH_SFU_LANES);
    for (uint32_t ch = 0; ch < FPGA_DEC_CH; ch++) {
        uint32_t rows = fpga_dec_rows_in(m, ch);
        if (!rows) continue;
        fpga_dec_model_charge(c, (int)ch, fpga_dec_stream_bytes(m, rows), 0);
        for (uint32_t b = 0; y_hbm && b < n; b++) fpga_dec_model_charge(c, 0, 4ull * rows, 1);
    }
    c->compute_cycles += (uint64_t)n * m->rows * m->k / FPGA_DEC_BATCH_MACS_PER_CYCLE;
}

void fpga_dec_model_step_batch(const fpga_dec_desc *d, uint32_t n, const uint32_t *pos,
                               const fpga_dec_kvmap *kv, fpga_dec_cost *c)
{
    fpga_dec_layout lo;
    fpga_dec_layout_of(d, &lo);
    memset(c, 0, sizeof *c);
    const uint32_t H = d->hidden, hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    fpga_dec_model_charge(c, 0, sizeof(fpga_dec_desc), 0);
    for (uint32_t b = 0; b < n; b++) {
        fpga_dec_model_charge(c, 0, 64 + fpga_dec_io_step_bytes(d), 0);
        fpga_dec_model_charge(c, 0, 4ull * kv[b].n_ids, 0);
    }
    for (uint32_t l = 0; l < d->n_layers; l++) {
        fpga_dec_model_charge(c, (int)(l % FPGA_DEC_CH), 4ull * lo.mi_floats, 0);
        c->stall_cycles += (uint64_t)n * (2 * H / FPGA_DEC_BATCH_SFU_LANES);
        bmatvec(c, &lo, FPGA_DEC_QKV, n, 0);
        for (uint32_t b = 0; b < n; b++) {
            uint32_t part, tile, row;
            fpga_dec_pos_where(d, pos[b], &part, &tile, &row);
            for (uint32_t h = 0; h < d->n_kv_heads; h++) {
                int ch = (int)fpga_dec_stream_ch(d, l, h, part);
                for (int which = 0; which < 2; which++) {
                    fpga_dec_model_charge(c, ch, hd, 1);
                    fpga_dec_model_charge(c, ch, 2, 1);
                }
            }
            uint64_t macs = 0;
            for (uint32_t h = 0; h < d->n_kv_heads; h++)
                for (uint32_t p = 0; p < d->kv_parts; p++) {
                    uint32_t nt = fpga_dec_part_used_tiles(d, pos[b] + 1, p);
                    for (uint32_t t = 0, run; t < nt; t += run) {
                        run = fpga_dec_kv_run(&kv[b], t, nt - 1);
                        fpga_dec_model_charge(c, (int)fpga_dec_stream_ch(d, l, h, p),
                                              (uint64_t)run * lo.tile_bytes, 0);
                    }
                    for (uint32_t t = 0; t < nt; t++) {
                        uint32_t p0 = (t * d->kv_parts + p) * FPGA_DEC_TILE;
                        uint32_t rows = pos[b] + 1 - p0 < FPGA_DEC_TILE ? pos[b] + 1 - p0 : FPGA_DEC_TILE;
                        macs += 2ull * rows * hd * group;
                    }
                }
            c->compute_cycles += macs / FPGA_DEC_BATCH_MACS_PER_CYCLE;
            c->stall_cycles += FPGA_DEC_PHASE_CYCLES + d->kv_parts * 4;
        }
        bmatvec(c, &lo, FPGA_DEC_O, n, 0);
        c->stall_cycles += (uint64_t)n * (2 * H / FPGA_DEC_BATCH_SFU_LANES);
        bmatvec(c, &lo, FPGA_DEC_GU, n, 0);
        c->stall_cycles += (uint64_t)n * (d->inter / FPGA_DEC_BATCH_SFU_LANES);
        bmatvec(c, &lo, FPGA_DEC_D, n, 0);
    }
    fpga_dec_model_charge(c, (int)(d->n_layers % FPGA_DEC_CH), 4ull * H, 0);
    c->stall_cycles += (uint64_t)n * (2 * H / FPGA_DEC_BATCH_SFU_LANES);
    bmatvec(c, &lo, FPGA_DEC_LM, n, 1);
    for (uint32_t b = 0; b < n; b++) fpga_dec_model_charge(c, 0, 4, 1);
    fpga_dec_model_charge(c, 0, 16, 1);
    fpga_dec_model_price(c);
}

/* The card's decode cost by batch (accel_info.decode_curve), from the emulator's timing model
 * (fpga/dec_model.h: the batched kernel's run, host syncs left out): batches 1, 2, 4, ... up to
 * max_batch at ctx positions each (1,024, or the model's context if shorter), consecutive block
 * ids as a sequence that grew alone; s_per_pos from one sequence at 2 x ctx. Computed once. */
void fpga_dec_model_curve(const fpga_dec_desc *dd, int max_pos, int max_batch, accel_decode_curve *out)
{
    uint32_t ids[FPGA_DEC_MAX_BATCH * 64]; /* 4 KiB */
    memset(out, 0, sizeof *out);
    int ctx = max_pos > 0 && max_pos < 2048 ? max_pos / 2 : 1024;
    uint32_t T = fpga_dec_kv_block_tokens(dd), nid = T ? (uint32_t)(2 * ctx) / T + 1 : 0;
    if (!T || nid > 64 || ctx < 2) return;
    fpga_dec_layout lo;
    fpga_dec_layout_of(dd, &lo);
    uint32_t pos[FPGA_DEC_MAX_BATCH];
    fpga_dec_kvmap km[FPGA_DEC_MAX_BATCH];
    int mb = max_batch > 1 ? max_batch : 1;
    if (mb > FPGA_DEC_MAX_BATCH) mb = FPGA_DEC_MAX_BATCH;
    for (int b = 0; b < mb; b++) {
        for (uint32_t i = 0; i < nid; i++) ids[b * nid + i] = (uint32_t)b * nid + i;
        fpga_dec_kvmap_paged(dd, &lo, 0, ids + b * nid, nid, &km[b]);
        pos[b] = (uint32_t)ctx - 1;
    }
    fpga_dec_cost c;
    for (int b = 1; out->n < ACCEL_CURVE_MAX; b *= 2) {
        int x = b < mb ? b : mb;
        if (mb == 1) fpga_dec_model_step_paged(dd, (uint32_t)ctx - 1, 0, &c);
        else fpga_dec_model_step_batch(dd, (uint32_t)x, pos, km, &c);
        out->batch[out->n] = x;
        out->step_s[out->n++] = c.modeled_ns * 1e-9;
        if (x == mb) break;
    }
    pos[0] = (uint32_t)(2 * ctx) - 1;
    if (mb == 1) fpga_dec_model_step_paged(dd, pos[0], 0, &c);
    else fpga_dec_model_step_batch(dd, 1, pos, km, &c);
    out->ctx = ctx;
    double more = c.modeled_ns * 1e-9 - out->step_s[0];
    out->s_per_pos = more > 0 ? more / ctx : 0;
}
