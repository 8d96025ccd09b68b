/* fpga/kernels/kv_check.c — the CRC32C of imported KV as it landed: reads positions
 * [pos0, pos0 + n) of every layer back from the sequence's tiles (dec_layout.h) and reports, per
 * layer, the CRC32C of the wire payload those bytes make (proto/KV_FORMAT.md: K values | pad |
 * V values | pad | K scales | pad | V scales | pad, token-major (position, head), every section
 * padded with zeros to a multiple of 64 bytes).
 *
 * Why: kv_scatter checks the staging slots it reads, i.e. the transfer of each piece; this
 * kernel checks the bytes where the decode kernel will read them, once a run of positions is
 * complete. The host compares each layer's CRC with the payload CRC the producer computed
 * where the KV was made (carried by the wire format), so corruption anywhere in between — host
 * copies, PCIe, the scatter's writes, an HBM bit that flipped while the import went on — fails
 * the import before the sequence is decoded. What changes in HBM after this check (during the
 * decode runs) is not covered.
 *
 * Arguments: 0..31 hbm0..hbm31 (global, HBM[c]), 32 report (global, HBM[1:8]: a staging slot
 * the host reads back), 33 pos0 u32, 34 n u32, 35 kv_off u64, 36 part_tiles u32,
 * 37 report_bytes u64 (the room at the start of `report`), 38 n_ids u32: 0, the KV is a slab at
 * kv_off of part_tiles tiles per part; else a block table of n_ids ids that the host put in
 * `report` at FPGA_DEC_CHECK_TABLE_OFF, into the pool at kv_off (dec_layout.h, "KV pages").
 * 39 ddr0, 40 ddr1 (global, DDR[0], DDR[1]), 41 kv_tier u32, 42 host0 (global, HOST[0]): kv_tier
 * 1 (2) when the table is into the DDR4 (host memory) pool (dec_layout.h, FPGA_DEC_DDR_SPAN).
 * Report at offset 0 of `report`: {FPGA_DEC_CHECK_MAGIC, pos0, n, n_layers, crc[n_layers]}. */
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/kernel.h"

typedef struct ck_ctx {
    uint8_t *ch[FPGA_DEC_CH];
    fpga_dec_desc d;
    fpga_dec_layout lo;
    fpga_dec_kvmap kv;
} ck_ctx;

static const uint8_t *ck_tile(const ck_ctx *c, uint32_t l, uint32_t h, uint32_t part, uint32_t tile)
{
    return c->ch[fpga_dec_stream_ch(&c->d, l, h, part)] +
           fpga_dec_kv_tile_off(&c->d, &c->kv, l, h, part, tile);
}

/* The CRC continued over the zero padding that follows a section of `len` bytes. */
static uint32_t ck_pad(uint32_t crc, uint64_t len)
{
    static const uint8_t zeros[FPGA_DEC_ALIGN];
    return fpga_km_crc32c(crc, zeros, fpga_dec_align(len, FPGA_DEC_ALIGN) - len);
}

/* One layer's reads: the tiles it touches, one burst per (head, part) run. Returns the bytes. */
static uint64_t ck_layer_reads(const ck_ctx *c, uint32_t l, uint32_t pos0, uint32_t n)
{
    uint64_t bytes = 0;
    for (uint32_t h = 0; h < c->d.n_kv_heads; h++)
        for (uint32_t b = 0; b < c->d.kv_parts; b++) {
            uint32_t first, last;
            if (fpga_dec_part_tile_run(&c->d, pos0, n, b, &first, &last))
                for (uint32_t t = first, run; t <= last; t += run) {
                    run = fpga_dec_kv_run(&c->kv, t, last);
                    fpga_k_read(ck_tile(c, l, h, b, t), (uint64_t)run * c->lo.tile_bytes);
                    bytes += (uint64_t)run * c->lo.tile_bytes;
                }
        }
    return bytes;
}

/* One layer's CRC: the four sections checksummed in wire order (its reads are ck_layer_reads'). */
static uint32_t ck_layer(const ck_ctx *c, uint32_t l, uint32_t pos0, uint32_t n)
{
    const uint32_t H = c->d.n_kv_heads, hd = c->d.head_dim;
    /* Each section in wire order. On the emulator the rows of whole tokens are gathered into a
     * line buffer (one token's H rows are at most FPGA_DEC_MAX_KVDIM bytes) and checksummed a
     * line at a time: one CRC call per line instead of one per row (two bytes for a scale). Under
     * HLS each row streams through the CRC unit as it is read: no buffer (the same CRC: it runs
     * over the same bytes in the same order). */
#ifndef __SYNTHESIS__
    uint8_t line[FPGA_DEC_MAX_KVDIM];
#endif
    uint32_t crc = 0;
    for (int sec = 0; sec < 4; sec++) {
        const int scale = sec >= 2, v = sec & 1;
        const uint32_t w = scale ? 2 : hd;
#ifndef __SYNTHESIS__
        const uint32_t tok = H * w;
        uint32_t used = 0;
#endif
        for (uint32_t t = 0; t < n; t++) {
            uint32_t part, tile, row;
            fpga_dec_pos_where(&c->d, pos0 + t, &part, &tile, &row);
#ifndef __SYNTHESIS__
            if (used + tok > sizeof line) crc = fpga_km_crc32c(crc, line, used), used = 0;
#endif
            for (uint32_t h = 0; h < H; h++) {
#pragma HLS PIPELINE
                const uint8_t *tl = ck_tile(c, l, h, part, tile);
                uint64_t at = scale ? (v ? fpga_dec_tile_vs(hd, row) : fpga_dec_tile_ks(hd, row))
                                    : (v ? fpga_dec_tile_v(hd, row) : fpga_dec_tile_k(hd, row));
#ifdef __SYNTHESIS__
                crc = fpga_km_crc32c(crc, tl + at, w);
#else
                memcpy(line + used, tl + at, w);
                used += w;
#endif
            }
        }
#ifndef __SYNTHESIS__
        crc = fpga_km_crc32c(crc, line, used);
#endif
        crc = ck_pad(crc, (uint64_t)n * H * w);
    }
    return crc;
}

#ifndef __SYNTHESIS__
/* The layers as fpga_k_parallel iterations (the emulator's threads): each writes its own word. */
typedef struct ck_job {
    const ck_ctx *c;
    uint32_t pos0, n;
    uint32_t *out;
} ck_job;

static void ck_layer_iter(void *ctx, uint32_t l)
{
    const ck_job *j = ctx;
    j->out[l] = ck_layer(j->c, l, j->pos0, j->n);
}
#endif

void kv_check(FPGA_K_PORTS(FPGA_K_PORT_PARAM) uint8_t *report, uint32_t pos0, uint32_t n,
              uint64_t kv_off, uint32_t part_tiles, uint64_t report_bytes, uint32_t n_ids,
              uint8_t *ddr0, uint8_t *ddr1, uint32_t kv_tier, uint8_t *host0)
{
#pragma HLS INTERFACE m_axi port = host0 offset = slave bundle = gmem_host
    FPGA_K_PORTS(FPGA_K_PORT_PRAGMA)
#pragma HLS INTERFACE m_axi port = ddr0 offset = slave bundle = gmem_ddr0
#pragma HLS INTERFACE m_axi port = ddr1 offset = slave bundle = gmem_ddr1
#pragma HLS INTERFACE m_axi port = report offset = slave bundle = gmem_r
#pragma HLS INTERFACE s_axilite port = n_ids
#pragma HLS INTERFACE s_axilite port = return
    ck_ctx c = {.ch = {FPGA_K_PORTS(FPGA_K_PORT_NAME)}};
    fpga_k_read(hbm0, sizeof c.d);
    if (kv_tier)
        for (uint32_t i = 0; i < FPGA_DEC_CH; i++)
            c.ch[i] = fpga_dec_tier_ch(kv_tier, c.ch, ddr0, ddr1, host0, i);
    memcpy(&c.d, hbm0, sizeof c.d);
    fpga_dec_layout_of(&c.d, &c.lo);
    uint32_t ids[FPGA_DEC_MAX_BLOCKS];
    if (n_ids) {
        fpga_k_read(report + FPGA_DEC_CHECK_TABLE_OFF, 4ull * n_ids);
        memcpy(ids, report + FPGA_DEC_CHECK_TABLE_OFF, 4ull * n_ids);
        fpga_dec_kvmap_paged(&c.d, &c.lo, kv_off, ids, n_ids, &c.kv);
    } else {
        fpga_dec_kvmap_slab(&c.lo, kv_off, part_tiles, &c.kv);
    }
    if (report_bytes < fpga_dec_check_report_bytes(c.d.n_layers))
        return; /* no room: no report, which the host takes as a failed run */
    uint32_t head[4] = {FPGA_DEC_CHECK_MAGIC, pos0, n, c.d.n_layers};
    uint32_t *out = (uint32_t *)(void *)report;
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < c.d.n_layers; l++) bytes += ck_layer_reads(&c, l, pos0, n);
#ifdef __SYNTHESIS__
    (void)bytes;
    for (uint32_t l = 0; l < c.d.n_layers; l++) out[4 + l] = ck_layer(&c, l, pos0, n);
#else
    ck_job j = {.c = &c, .pos0 = pos0, .n = n, .out = out + 4};
    fpga_k_parallel(c.d.n_layers, ck_layer_iter, &j, bytes);
#endif
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES);
    memcpy(report, head, sizeof head);
    fpga_k_write(report, fpga_dec_check_report_bytes(c.d.n_layers));
}

static int kv_check_adapter(const fpga_kargs *a)
{
    const int R = FPGA_DEC_CH;
    uint32_t pos0 = (uint32_t)a->a[R + 1].u, n = (uint32_t)a->a[R + 2].u;
    uint64_t kv_off = a->a[R + 3].u, report_bytes = a->a[R + 5].u;
    uint32_t part_tiles = (uint32_t)a->a[R + 4].u, n_ids = (uint32_t)a->a[R + 6].u;
    uint64_t min_size = a->a[0].size;
    for (int c = 1; c < FPGA_DEC_CH; c++)
        if (a->a[c].size < min_size) min_size = a->a[c].size;
    const uint32_t kv_tier = (uint32_t)a->a[R + 9].u;
    fpga_dec_desc d;
    if (a->a[0].size < sizeof d || kv_tier > FPGA_DEC_TIER_HOST) return -1;
    if (!fpga_dec_tier_bos_ok(kv_tier, a->a[R + 7].size, a->a[R + 8].size, a->a[R + 10].size))
        return -1;
    memcpy(&d, a->a[0].ptr, sizeof d);
    if (fpga_dec_desc_check(&d) != 0) return -1;
    fpga_dec_layout lo;
    fpga_dec_layout_of(&d, &lo);
    if (!n) return -1;
    if (report_bytes < fpga_dec_check_report_bytes(d.n_layers) || a->a[R].size < report_bytes ||
        ((uintptr_t)a->a[R].ptr & 3))
        return -1;
    fpga_dec_kvmap kv;
    if (n_ids) {
        if (n_ids > FPGA_DEC_MAX_BLOCKS ||
            !fpga_k_range_ok(FPGA_DEC_CHECK_TABLE_OFF, 4ull * n_ids, a->a[R].size))
            return -1;
        fpga_dec_kvmap_paged(&d, &lo, kv_off, (const uint32_t *)(const void *)(
                                 (const uint8_t *)a->a[R].ptr + FPGA_DEC_CHECK_TABLE_OFF), n_ids, &kv);
    } else {
        if (!part_tiles || part_tiles > FPGA_DEC_MAX_POS) return -1;
        fpga_dec_kvmap_slab(&lo, kv_off, part_tiles, &kv);
    }
    if ((uint64_t)pos0 + n > fpga_dec_kvmap_tiles(&kv) * d.kv_parts * FPGA_DEC_TILE) return -1;
    if (kv_tier ? lo.image_bytes > min_size || !fpga_dec_kvmap_ok(&kv, fpga_dec_tier_span(kv_tier))
                : kv_off < lo.image_bytes || lo.image_bytes > min_size ||
                      !fpga_dec_kvmap_ok(&kv, min_size))
        return -1;
    uint8_t *p[FPGA_DEC_CH];
    for (int c = 0; c < FPGA_DEC_CH; c++) p[c] = a->a[c].ptr;
#define CK_ARG(n) p[n],
    kv_check(FPGA_K_PORTS(CK_ARG) a->a[R].ptr, pos0, n, kv_off, part_tiles, report_bytes, n_ids,
             a->a[R + 7].ptr, a->a[R + 8].ptr, kv_tier, a->a[R + 10].ptr);
#undef CK_ARG
    return 0;
}

const fpga_k_desc fpga_k_kv_check_desc = {
    .name = "kv_check",
    .n_args = 43,
    .kinds = {FPGA_K_PORTS(FPGA_K_PORT_KIND) FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U64, FPGA_K_ARG_U32, FPGA_K_ARG_U64, FPGA_K_ARG_U32, FPGA_K_ARG_GLOBAL,
              FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32, FPGA_K_ARG_GLOBAL},
    .run = kv_check_adapter,
};
