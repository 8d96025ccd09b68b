/* fpga/kernels/kv_scatter.c — moves one piece of imported KV from the staging slots into the
 * sequence's tiles (fpga/kernels/dec_layout.h), and checks what it read.
 *
 * The host ships a layer chunk the way it came off the wire (token-major K | V | K scales |
 * V scales) with one xrtBOWrite + one sync per staging slot; this kernel does the reordering
 * into the decode kernel's (layer, head, part) tiles on the card, where the 32 channels write
 * in parallel, instead of the host issuing a small DMA per tile. A piece of n positions is
 * striped over FPGA_DEC_STAGE_SLOTS slots (one per channel, read in parallel): slot j holds
 * positions [pos0 + j*per, pos0 + min(n, (j+1)*per)) as a payload of that many tokens.
 *
 * Integrity: the kernel computes the CRC32C of every slot's bytes as it streams them and
 * reports them (with a magic) in the last 64 bytes of slot 0; the host compares them with the
 * CRCs of what it wrote, so data corrupted between the host and the HBM (PCIe, a flipped HBM
 * bit) fails the import before the decode kernel ever reads that sequence.
 *
 * Arguments: 0..3 stage0..stage3 (global, HBM[1:8]), 4..35 hbm0..hbm31 (global, HBM[c]),
 * 36 layer u32, 37 pos0 u32, 38 n u32, 39 per u32, 40 kv_off u64, 41 part_tiles u32,
 * 42 stage_bytes u64 (size of each slot), 43 paged u32, 44 n_ids u32. paged 0: the KV is a slab
 * at kv_off of part_tiles tiles per part; else the piece spans n_ids (1..FPGA_DEC_SCATTER_IDS)
 * blocks of the pool at kv_off (dec_layout.h, "KV pages") whose ids the host put in slot 0 at
 * fpga_dec_stage_table_off(stage_bytes): the first holds positions pos0 / T * T onwards; paged
 * 2: the same in the DDR4 pool (45 ddr0, 46 ddr1: the DDR4 banks, dec_layout.h
 * FPGA_DEC_DDR_SPAN); paged 3: in the host memory pool (47 host0, HOST[0]). */
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/kernel.h"


typedef struct sc_ctx {
    uint8_t *ch[FPGA_DEC_CH];
    fpga_dec_desc d;
    fpga_dec_layout lo;
    fpga_dec_kvmap kv; /* a slab, or the blocks the piece spans */
    uint32_t layer;
} sc_ctx;

static uint8_t *sc_tile(const sc_ctx *c, uint32_t h, uint32_t part, uint32_t tile)
{
    return c->ch[fpga_dec_stream_ch(&c->d, c->layer, h, part)] +
           fpga_dec_kv_tile_off(&c->d, &c->kv, c->layer, h, part, tile);
}

/* One slot's memory commands: its payload read (one burst) and the writes, merged per
 * destination stream: for each (head, part) the tiles positions p0 .. p0+n-1 of the map touch,
 * one burst per run of them that lies one after another in memory (a block, or blocks whose ids
 * follow in a superblock; byte-enabled at the partial ends). Returns the bytes read. */
static uint64_t scatter_slot_charge(const sc_ctx *c, const uint8_t *slot, uint32_t p0, uint32_t n)
{
    const uint64_t total = fpga_dec_stage_section(n, c->d.n_kv_heads, c->d.head_dim, 4);
    fpga_k_read(slot, total);
    for (uint32_t h = 0; h < c->d.n_kv_heads; h++)
        for (uint32_t b = 0; b < c->d.kv_parts; b++) {
            uint32_t first, last;
            if (fpga_dec_part_tile_run(&c->d, p0, n, b, &first, &last))
                for (uint32_t t = first, run; t <= last; t += run) {
                    run = fpga_dec_kv_run(&c->kv, t, last);
                    fpga_k_write(sc_tile(c, h, b, t), (uint64_t)run * c->lo.tile_bytes);
                }
        }
    return total;
}

/* One slot's data: positions p0 .. p0+n-1 of the map (a block's own positions when paged) from
 * the slot's sections into their tile rows; returns the CRC32C of the slot's bytes. */
static uint32_t scatter_slot(const sc_ctx *c, const uint8_t *slot, uint32_t p0, uint32_t n)
{
    const uint32_t H = c->d.n_kv_heads, hd = c->d.head_dim;
    const uint64_t total = fpga_dec_stage_section(n, H, hd, 4);
    uint32_t crc = fpga_km_crc32c(0, slot, total);
    const uint8_t *kv[2] = {slot + fpga_dec_stage_section(n, H, hd, 0),
                            slot + fpga_dec_stage_section(n, H, hd, 1)};
    const uint8_t *ks[2] = {slot + fpga_dec_stage_section(n, H, hd, 2),
                            slot + fpga_dec_stage_section(n, H, hd, 3)};
    for (uint32_t t = 0; t < n; t++) {
        uint32_t part, tile, row;
        fpga_dec_pos_where(&c->d, p0 + t, &part, &tile, &row);
        for (uint32_t h = 0; h < H; h++) {
#pragma HLS PIPELINE
            uint8_t *tl = sc_tile(c, h, part, tile);
            uint64_t src = ((uint64_t)t * H + h);
            memcpy(tl + fpga_dec_tile_k(hd, row), kv[0] + src * hd, hd);
            memcpy(tl + fpga_dec_tile_ks(hd, row), ks[0] + src * 2, 2);
            memcpy(tl + fpga_dec_tile_v(hd, row), kv[1] + src * hd, hd);
            memcpy(tl + fpga_dec_tile_vs(hd, row), ks[1] + src * 2, 2);
        }
    }
    return crc;
}

#ifndef __SYNTHESIS__
/* The slots as fpga_k_parallel iterations (the emulator's threads): their positions, hence the
 * tile rows they write, are disjoint; each reports its own CRC. */
typedef struct sc_job {
    const sc_ctx *c;
    uint8_t *const *slots;
    uint32_t p0, n, per;
    uint32_t *crc;
} sc_job;

static void scatter_slot_iter(void *ctx, uint32_t j)
{
    const sc_job *b = ctx;
    uint32_t lo = j * b->per, cnt = b->n - lo < b->per ? b->n - lo : b->per;
    b->crc[j] = scatter_slot(b->c, b->slots[j], b->p0 + lo, cnt);
}
#endif

void kv_scatter(uint8_t *stage0, uint8_t *stage1, uint8_t *stage2, uint8_t *stage3,
                FPGA_K_PORTS(FPGA_K_PORT_PARAM) uint32_t layer, uint32_t pos0, uint32_t n,
                uint32_t per, uint64_t kv_off, uint32_t part_tiles, uint64_t stage_bytes,
                uint32_t paged, uint32_t n_ids, uint8_t *ddr0, uint8_t *ddr1, uint8_t *host0)
{
#pragma HLS INTERFACE m_axi port = host0 offset = slave bundle = gmem_host
#pragma HLS INTERFACE m_axi port = ddr0 offset = slave bundle = gmem_ddr0
#pragma HLS INTERFACE m_axi port = ddr1 offset = slave bundle = gmem_ddr1
#pragma HLS INTERFACE m_axi port = stage0 offset = slave bundle = gmem_s0
#pragma HLS INTERFACE m_axi port = stage1 offset = slave bundle = gmem_s1
#pragma HLS INTERFACE m_axi port = stage2 offset = slave bundle = gmem_s2
#pragma HLS INTERFACE m_axi port = stage3 offset = slave bundle = gmem_s3
    FPGA_K_PORTS(FPGA_K_PORT_PRAGMA)
#pragma HLS INTERFACE s_axilite port = return
#pragma HLS INTERFACE s_axilite port = paged
#pragma HLS INTERFACE s_axilite port = n_ids
    sc_ctx c = {.ch = {FPGA_K_PORTS(FPGA_K_PORT_NAME)}, .layer = layer};
    fpga_k_read(hbm0, sizeof c.d);
    if (paged >= 2) /* the DDR4 or host memory pool */
        for (uint32_t i = 0; i < FPGA_DEC_CH; i++)
            c.ch[i] = fpga_dec_tier_ch(paged - 1, c.ch, ddr0, ddr1, host0, i);
    memcpy(&c.d, hbm0, sizeof c.d);
    fpga_dec_layout_of(&c.d, &c.lo);
    uint32_t pbase = 0; /* paged: the first block's first position */
    uint32_t ids[FPGA_DEC_SCATTER_IDS];
    if (paged) {
        fpga_k_read(stage0 + fpga_dec_stage_table_off(stage_bytes), 4ull * n_ids);
        memcpy(ids, stage0 + fpga_dec_stage_table_off(stage_bytes), 4ull * n_ids);
        fpga_dec_kvmap_paged(&c.d, &c.lo, kv_off, ids, n_ids, &c.kv);
        pbase = pos0 / fpga_dec_kv_block_tokens(&c.d) * fpga_dec_kv_block_tokens(&c.d);
    } else {
        fpga_dec_kvmap_slab(&c.lo, kv_off, part_tiles, &c.kv);
    }
    uint8_t *slots[FPGA_DEC_STAGE_SLOTS] = {stage0, stage1, stage2, stage3};
    uint32_t report[16] = {FPGA_DEC_STAGE_REPORT_MAGIC, layer, pos0, n};
    /* the slots the piece fills (the adapter: n <= 4 x per, per > 0) */
    uint32_t used = n / per + (n % per != 0);
    if (used > FPGA_DEC_STAGE_SLOTS) used = FPGA_DEC_STAGE_SLOTS;
    uint64_t bytes = 0;
    for (uint32_t j = 0; j < used; j++) {
        uint32_t lo = j * per, cnt = n - lo < per ? n - lo : per;
        bytes += scatter_slot_charge(&c, slots[j], pos0 - pbase + lo, cnt);
    }
#ifdef __SYNTHESIS__
    (void)bytes;
    for (uint32_t j = 0; j < FPGA_DEC_STAGE_SLOTS; j++) {
#pragma HLS UNROLL
        uint32_t lo = j * per;
        if (lo >= n) break;
        uint32_t cnt = n - lo < per ? n - lo : per;
        report[4 + j] = scatter_slot(&c, slots[j], pos0 - pbase + lo, cnt);
    }
#else
    sc_job job = {
        .c = &c, .slots = slots, .p0 = pos0 - pbase, .n = n, .per = per, .crc = report + 4};
    fpga_k_parallel(used, scatter_slot_iter, &job, bytes);
#endif
    fpga_k_stall(FPGA_DEC_PHASE_CYCLES);
    fpga_k_write(stage0 + stage_bytes - 64, sizeof report);
    memcpy(stage0 + stage_bytes - 64, report, sizeof report);
}

static int kv_scatter_adapter(const fpga_kargs *a)
{
    const int S = FPGA_DEC_STAGE_SLOTS;
    uint32_t layer = (uint32_t)a->a[36].u, pos0 = (uint32_t)a->a[37].u;
    uint32_t n = (uint32_t)a->a[38].u, per = (uint32_t)a->a[39].u;
    uint64_t kv_off = a->a[40].u, stage_bytes = a->a[42].u;
    uint32_t part_tiles = (uint32_t)a->a[41].u, paged = (uint32_t)a->a[43].u;
    uint32_t n_ids = (uint32_t)a->a[44].u;
    uint64_t min_size = a->a[S].size;
    for (int c = 1; c < FPGA_DEC_CH; c++)
        if (a->a[S + c].size < min_size) min_size = a->a[S + c].size;
    fpga_dec_desc d;
    if (a->a[S].size < sizeof d || paged > 3) return -1;
    if (paged >= 2 && !fpga_dec_tier_bos_ok(paged - 1, a->a[45].size, a->a[46].size, a->a[47].size))
        return -1;
    memcpy(&d, a->a[S].ptr, sizeof d);
    if (fpga_dec_desc_check(&d) != 0) return -1;
    fpga_dec_layout lo;
    fpga_dec_layout_of(&d, &lo);
    if (layer >= d.n_layers || !n || !per || n > (uint64_t)per * S) return -1;
    if (stage_bytes < FPGA_DEC_STAGE_TAIL || stage_bytes % 4) return -1; /* the table's words */
    for (int j = 0; j < S; j++)
        if (a->a[j].size < stage_bytes) return -1;
    fpga_dec_kvmap kv;
    if (paged) {
        /* the blocks the piece spans: positions pos0 / T * T .. of the first, n_ids in all, ids
         * from slot 0's table (checked against the pool below) */
        const uint32_t T = fpga_dec_kv_block_tokens(&d);
        if (!n_ids || n_ids > FPGA_DEC_SCATTER_IDS || pos0 % T + (uint64_t)n > (uint64_t)n_ids * T)
            return -1;
        const uint8_t *tab = (const uint8_t *)a->a[0].ptr + fpga_dec_stage_table_off(stage_bytes);
        fpga_dec_kvmap_paged(&d, &lo, kv_off, (const uint32_t *)(const void *)tab, n_ids, &kv);
    } else {
        if (!part_tiles || part_tiles > FPGA_DEC_MAX_POS) return -1;
        if ((uint64_t)pos0 + n > (uint64_t)part_tiles * d.kv_parts * FPGA_DEC_TILE) return -1;
        fpga_dec_kvmap_slab(&lo, kv_off, part_tiles, &kv);
    }
    if (paged >= 2 ? lo.image_bytes > min_size || !fpga_dec_kvmap_ok(&kv, fpga_dec_tier_span(paged - 1))
                   : kv_off < lo.image_bytes || lo.image_bytes > min_size ||
                         !fpga_dec_kvmap_ok(&kv, min_size))
        return -1;
    if (fpga_dec_stage_section(per, d.n_kv_heads, d.head_dim, 4) >
        stage_bytes - FPGA_DEC_STAGE_TAIL)
        return -1;
    uint8_t *p[FPGA_DEC_CH];
    for (int c = 0; c < FPGA_DEC_CH; c++) p[c] = a->a[S + c].ptr;
#define SC_ARG(n) p[n],
    kv_scatter(a->a[0].ptr, a->a[1].ptr, a->a[2].ptr, a->a[3].ptr, FPGA_K_PORTS(SC_ARG) layer, pos0,
               n, per, kv_off, part_tiles, stage_bytes, paged, n_ids, a->a[45].ptr, a->a[46].ptr,
               a->a[47].ptr);
#undef SC_ARG
    return 0;
}

const fpga_k_desc fpga_k_kv_scatter_desc = {
    .name = "kv_scatter",
    .n_args = 48,
    .kinds = {FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL,
              FPGA_K_PORTS(FPGA_K_PORT_KIND) FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U64, FPGA_K_ARG_U32, FPGA_K_ARG_U64, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL},
    .run = kv_scatter_adapter,
};
