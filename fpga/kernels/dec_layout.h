/* fpga/kernels/dec_layout.h — where the decode kernel finds everything in HBM: the descriptor,
 * the weight image, the KV tiles, the io buffer and the import staging slots. Shared by the
 * kernels (which compute every address from it) and the host (which builds the image and
 * places the sequences with it), so the two cannot disagree. Pure integer arithmetic, static
 * inline: what an HLS flow turns into address generators. The why of the plan is
 * fpga/BANKS.md.
 *
 * Per pseudo-channel c (every kernel port c reaches HBM[c] through one bank BO of the same
 * size in each channel, DEV_ONLY; offsets below are inside that BO and equal in all channels):
 *
 *   [0, 4096)               the descriptor (fpga_dec_desc; channel 0 only)
 *   w_base + l*layer_stride layer l: QKV slice | O slice | GU slice | D slice
 *   lm_off                  lm_head slice
 *   misc_base + k*misc      fp32 vectors of layer l = 32k + c (norms, smoothing, bias);
 *                           slot L (the final norm) in channel L % 32
 *   pool_lo ..              the KV pool: per sequence one slab at kv_off (same offset in
 *                           every channel)
 *
 * A weight matrix of N rows is split by output rows: channel c holds rows
 * [c*rpc, min(N, (c+1)*rpc)), rpc = ceil(N / 32), as its rows' values (int8: K bytes per row;
 * int4: K/2 bytes, element 2j in the low nibble, two's complement -8..7) followed, at the next
 * 64-byte boundary, by their scales (group 0: one fp32 per row, int8 only; else one fp16 per
 * group of `group` along K). One read command per channel per matrix streams both.
 *
 * KV: for layer l, KV head h, part b (parts = kv_parts, so that heads x parts = 32 streams
 * per layer where the head count allows), stream g = (l*H + h)*parts + b lives in channel
 * g % 32 as its (g / 32)-th stream of the slab. Position p is in tile p / 16; tile i goes to
 * part i % parts, as that part's tile i / parts. A tile holds 16 positions:
 *   K values (16, hd) int8 | K scales (16) fp16 | V values (16, hd) int8 | V scales (16) fp16
 * = 32*(hd + 2) bytes (a multiple of 64 for even hd). The values and scales are exactly those of
 * proto/kv.h (int8, one scale per token and head). */
#ifndef TANDEM_FPGA_DEC_LAYOUT_H
#define TANDEM_FPGA_DEC_LAYOUT_H
#include <stdint.h>

#define FPGA_DEC_CH         32       /* pseudo-channels = kernel ports (fpga/xrt/u280.h) */
#define FPGA_DEC_TILE       16       /* KV positions per tile (FlightLLM aligns decode to 16) */
#define FPGA_DEC_ALIGN      64       /* one 512-bit AXI beat */
#define FPGA_DEC_DESC_BYTES 4096
#define FPGA_DEC_MAGIC      0x43454454u /* "TDEC" */
#define FPGA_DEC_VERSION    1

/* Bounds of the on-chip buffers (the kernel's local arrays are sized by them): Llama-3-70B
 * (hidden 8192, 64 heads x 128, 8 KV heads, intermediate 28672) fits. */
#define FPGA_DEC_MAX_HIDDEN   8192
#define FPGA_DEC_MAX_QDIM     8192   /* n_heads * head_dim */
#define FPGA_DEC_MAX_KVDIM    8192   /* n_kv_heads * head_dim */
#define FPGA_DEC_MAX_INTER    32768
#define FPGA_DEC_MAX_HEADS    128
#define FPGA_DEC_MAX_HEAD_DIM 256
#define FPGA_DEC_MAX_LAYERS   256
#define FPGA_DEC_MAX_VOCAB    (1 << 18)
#define FPGA_DEC_MAX_K        FPGA_DEC_MAX_INTER   /* longest matrix row */
#define FPGA_DEC_MIN_GROUP    8      /* smallest quantization group (scales per row bounded) */
#define FPGA_DEC_MAX_POS      (1 << 20)

/* The decode engine's throughput and latencies, as the timing model sees them (model
 * parameters of this design, not measurements):
 *  - 32 channel engines x 128 int8 MACs per cycle: a channel delivers 14.375 GB/s / 225 MHz =
 *    64 bytes per cycle, i.e. 64 int8 or 128 int4 weights, so the MACs keep up with the
 *    stream in both modes (FlightLLM's U280 design peaks at 6.91 TOPS = 15 K MAC/cycle);
 *  - a dependent phase (a matrix-vector product or the attention, which need the previous
 *    phase's whole result) pays the HBM first-data latency (~270 ns = 60 cycles, a page miss in
 *    Shuhai's U280 measurements) plus draining the MAC adder tree and the fp32 scaling pipeline
 *    (~64 cycles) that streaming cannot hide: 128 cycles;
 *  - the special-function unit reduces 16 fp32 lanes per cycle (RMSNorm's sum of squares,
 *    softmax); its serial passes over a vector count as stalls too. */
#define FPGA_DEC_MACS_PER_CYCLE 4096
#define FPGA_DEC_PHASE_CYCLES   128
#define FPGA_DEC_SFU_LANES      16

enum { FPGA_DEC_F_BIAS = 1,  /* QKV carries a bias (misc block) */
       FPGA_DEC_F_QINT8 = 2  /* attention: q quantized per head to int8, q.k in int32 */
};

/* The descriptor, at offset 0 of channel 0: the model shape and the quantization the image was
 * built with. 128 bytes, little-endian, written by the host image builder. */
typedef struct fpga_dec_desc {
    uint32_t magic, version;
    uint32_t hidden, n_layers, n_heads, n_kv_heads, head_dim, inter, vocab;
    uint32_t wbits, wgroup;       /* layer matrices: 8 or 4 bits; scale group along K (0: one
                                     fp32 scale per row, int8 only) */
    uint32_t head_bits, head_group; /* lm_head, the same way */
    uint32_t agroup;              /* activation quantization group along K (0: whole row) */
    uint32_t kv_parts;            /* parts per KV head (token blocks, merged as in
                                     flash-decoding) */
    uint32_t flags;               /* FPGA_DEC_F_* */
    float rms_eps, attn_scale;    /* attn_scale = head_dim^-0.5 */
    uint32_t reserved[14];
} fpga_dec_desc;

/* One quantized matrix: N rows of K. */
typedef struct fpga_dec_mat {
    uint32_t rows, k, bits, group; /* group: scale group along K; 0: one fp32 scale per row */
    uint32_t rpc;                  /* rows per channel, ceil(rows / 32) */
    uint64_t row_bytes, srow_bytes; /* values / scales bytes per row */
    uint64_t slice;                /* bytes a channel reserves for it */
} fpga_dec_mat;

enum { FPGA_DEC_QKV, FPGA_DEC_O, FPGA_DEC_GU, FPGA_DEC_D, FPGA_DEC_LM, FPGA_DEC_NMAT };

typedef struct fpga_dec_layout {
    fpga_dec_mat m[FPGA_DEC_NMAT];
    uint64_t w_base, layer_stride, off[4]; /* off[QKV..D]: inside a layer */
    uint64_t lm_off;
    uint64_t misc_base, misc_bytes;  /* per layer slot */
    uint32_t misc_slots;             /* slots per channel: ceil((L + 1) / 32) */
    uint64_t image_bytes;            /* = where the KV pool may start (4 KiB aligned) */
    uint32_t kv_streams;             /* per layer: n_kv_heads * kv_parts */
    uint32_t streams_pc;             /* streams of one slab in the busiest channel */
    uint64_t tile_bytes;
    /* misc block, offsets in floats */
    uint32_t mi_attn_norm, mi_ffn_norm, mi_sm_o, mi_sm_d, mi_bias, mi_floats;
} fpga_dec_layout;

static inline uint64_t fpga_dec_align(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

static inline uint32_t fpga_dec_ngroups(uint32_t k, uint32_t g)
{
    return g ? (k + g - 1) / g : 1;
}

static inline void fpga_dec_mat_init(fpga_dec_mat *m, uint32_t rows, uint32_t k, uint32_t bits,
                                     uint32_t group)
{
    m->rows = rows;
    m->k = k;
    m->bits = bits;
    m->group = group;
    m->rpc = (rows + FPGA_DEC_CH - 1) / FPGA_DEC_CH;
    m->row_bytes = bits == 4 ? k / 2 : k;
    m->srow_bytes = group ? 2ull * fpga_dec_ngroups(k, group) : 4;
    m->slice = fpga_dec_align(m->rpc * m->row_bytes, FPGA_DEC_ALIGN) +
               fpga_dec_align(m->rpc * m->srow_bytes, FPGA_DEC_ALIGN);
}

/* Rows of m in channel c, and where its scales start inside the slice (the values start at 0):
 * a partial channel packs its scales right after its own rows, so every channel streams one
 * contiguous run of rows_c * row_bytes (aligned) + rows_c * srow_bytes bytes. */
static inline uint32_t fpga_dec_rows_in(const fpga_dec_mat *m, uint32_t c)
{
    uint64_t lo = (uint64_t)c * m->rpc;
    if (lo >= m->rows) return 0;
    uint64_t n = m->rows - lo;
    return n < m->rpc ? (uint32_t)n : m->rpc;
}
static inline uint64_t fpga_dec_scale_off(const fpga_dec_mat *m, uint32_t rows_c)
{
    return fpga_dec_align((uint64_t)rows_c * m->row_bytes, FPGA_DEC_ALIGN);
}
static inline uint64_t fpga_dec_stream_bytes(const fpga_dec_mat *m, uint32_t rows_c)
{
    return fpga_dec_scale_off(m, rows_c) + (uint64_t)rows_c * m->srow_bytes;
}

/* Checks what the kernel relies on; 0 when the descriptor is usable. The host calls it before
 * it builds an image, the kernel on every run (HBM could hold anything). */
static inline int fpga_dec_desc_check(const fpga_dec_desc *d)
{
    if (d->magic != FPGA_DEC_MAGIC || d->version != FPGA_DEC_VERSION) return -1;
    if (!d->hidden || d->hidden > FPGA_DEC_MAX_HIDDEN || (d->hidden & 1)) return -1;
    if (!d->n_layers || d->n_layers > FPGA_DEC_MAX_LAYERS) return -1;
    if (!d->n_kv_heads || !d->n_heads || d->n_heads > FPGA_DEC_MAX_HEADS ||
        d->n_heads % d->n_kv_heads)
        return -1;
    if (d->head_dim < 2 || d->head_dim > FPGA_DEC_MAX_HEAD_DIM || (d->head_dim & 1)) return -1;
    if (d->n_heads * d->head_dim > FPGA_DEC_MAX_QDIM) return -1;
    if (d->n_kv_heads * d->head_dim > FPGA_DEC_MAX_KVDIM) return -1;
    if (!d->inter || d->inter > FPGA_DEC_MAX_INTER || (d->inter & 1)) return -1;
    if (!d->vocab || d->vocab > FPGA_DEC_MAX_VOCAB) return -1;
    if (!d->kv_parts || d->kv_parts > FPGA_DEC_CH) return -1;
    const uint32_t bits[2] = {d->wbits, d->head_bits}, grp[2] = {d->wgroup, d->head_group};
    for (int i = 0; i < 2; i++) {
        if (bits[i] != 8 && bits[i] != 4) return -1;
        if (bits[i] == 4 && !grp[i]) return -1;
        if (grp[i] && (grp[i] < FPGA_DEC_MIN_GROUP || (grp[i] & 1))) return -1;
        /* activation and weight groups must nest so that one int32 partial sum has one scale
         * of each */
        if (grp[i] && d->agroup && d->agroup % grp[i] && grp[i] % d->agroup) return -1;
    }
    if (d->agroup && (d->agroup < FPGA_DEC_MIN_GROUP || (d->agroup & 1))) return -1;
    if (!(d->rms_eps >= 0.0f) || !(d->attn_scale > 0.0f)) return -1;
    return 0;
}

/* The whole layout from a checked descriptor. */
static inline void fpga_dec_layout_of(const fpga_dec_desc *d, fpga_dec_layout *o)
{
    const uint32_t qd = d->n_heads * d->head_dim, kvd = d->n_kv_heads * d->head_dim;
    fpga_dec_mat_init(&o->m[FPGA_DEC_QKV], qd + 2 * kvd, d->hidden, d->wbits, d->wgroup);
    fpga_dec_mat_init(&o->m[FPGA_DEC_O], d->hidden, qd, d->wbits, d->wgroup);
    fpga_dec_mat_init(&o->m[FPGA_DEC_GU], 2 * d->inter, d->hidden, d->wbits, d->wgroup);
    fpga_dec_mat_init(&o->m[FPGA_DEC_D], d->hidden, d->inter, d->wbits, d->wgroup);
    fpga_dec_mat_init(&o->m[FPGA_DEC_LM], d->vocab, d->hidden, d->head_bits, d->head_group);
    o->w_base = FPGA_DEC_DESC_BYTES;
    uint64_t at = 0;
    for (int i = 0; i < 4; i++) {
        o->off[i] = at;
        at += o->m[i].slice;
    }
    o->layer_stride = at;
    o->lm_off = o->w_base + (uint64_t)d->n_layers * at;
    o->mi_attn_norm = 0;
    o->mi_ffn_norm = d->hidden;
    o->mi_sm_o = 2 * d->hidden;
    o->mi_sm_d = o->mi_sm_o + qd;
    o->mi_bias = o->mi_sm_d + d->inter;
    o->mi_floats = o->mi_bias + ((d->flags & FPGA_DEC_F_BIAS) ? qd + 2 * kvd : 0);
    o->misc_bytes = fpga_dec_align(4ull * o->mi_floats, FPGA_DEC_ALIGN);
    o->misc_base = fpga_dec_align(o->lm_off + o->m[FPGA_DEC_LM].slice, FPGA_DEC_ALIGN);
    o->misc_slots = (d->n_layers + 1 + FPGA_DEC_CH - 1) / FPGA_DEC_CH;
    o->image_bytes = fpga_dec_align(o->misc_base + (uint64_t)o->misc_slots * o->misc_bytes, 4096);
    o->kv_streams = d->n_kv_heads * d->kv_parts;
    o->streams_pc = (uint32_t)(((uint64_t)d->n_layers * o->kv_streams + FPGA_DEC_CH - 1) /
                               FPGA_DEC_CH);
    o->tile_bytes = 32ull * (d->head_dim + 2);
}

/* Offset of layer l's (or, l = L, the final norm's) misc block in channel l % 32. */
static inline uint64_t fpga_dec_misc_off(const fpga_dec_layout *o, uint32_t l)
{
    return o->misc_base + (uint64_t)(l / FPGA_DEC_CH) * o->misc_bytes;
}

/* ---------------------------------------------------------------- KV slabs */

/* Tiles one part reserves for `capacity` positions. */
static inline uint32_t fpga_dec_part_tiles(uint32_t capacity, uint32_t parts)
{
    uint32_t tiles = (capacity + FPGA_DEC_TILE - 1) / FPGA_DEC_TILE;
    return (tiles + parts - 1) / parts;
}
/* Bytes of one slab in each channel. */
static inline uint64_t fpga_dec_slab_bytes(const fpga_dec_layout *o, uint32_t part_tiles)
{
    return (uint64_t)o->streams_pc * part_tiles * o->tile_bytes;
}
/* Stream (layer, head, part): its channel and its offset inside the slab. */
static inline uint32_t fpga_dec_stream_ch(const fpga_dec_desc *d, uint32_t l, uint32_t h,
                                          uint32_t b)
{
    return ((l * d->n_kv_heads + h) * d->kv_parts + b) % FPGA_DEC_CH;
}
static inline uint64_t fpga_dec_stream_off(const fpga_dec_desc *d, const fpga_dec_layout *o,
                                           uint32_t l, uint32_t h, uint32_t b,
                                           uint32_t part_tiles)
{
    uint64_t g = ((uint64_t)l * d->n_kv_heads + h) * d->kv_parts + b;
    return g / FPGA_DEC_CH * part_tiles * o->tile_bytes;
}
/* Position p: its part, its tile inside that part, its row inside the tile. */
static inline void fpga_dec_pos_where(const fpga_dec_desc *d, uint32_t p, uint32_t *part,
                                      uint32_t *tile, uint32_t *row)
{
    uint32_t t = p / FPGA_DEC_TILE;
    *part = t % d->kv_parts;
    *tile = t / d->kv_parts;
    *row = p % FPGA_DEC_TILE;
}
/* Positions p0 .. p0+n-1 that fall in part b: the first and last tile of that part they touch
 * (the run one burst moves). Returns 0 when none of them is in part b. */
static inline int fpga_dec_part_tile_run(const fpga_dec_desc *d, uint32_t p0, uint32_t n, uint32_t b,
                                         uint32_t *first, uint32_t *last)
{
    if (!n) return 0;
    *first = 0xffffffffu;
    *last = 0;
    for (uint32_t tl = p0 / FPGA_DEC_TILE; tl <= (p0 + n - 1) / FPGA_DEC_TILE; tl++)
        if (tl % d->kv_parts == b) {
            if (tl / d->kv_parts < *first) *first = tl / d->kv_parts;
            *last = tl / d->kv_parts;
        }
    return *first <= *last;
}
/* Positions 0..n-1 that part b holds: how many whole-or-partial tiles. */
static inline uint32_t fpga_dec_part_used_tiles(const fpga_dec_desc *d, uint32_t n, uint32_t b)
{
    uint32_t tiles = (n + FPGA_DEC_TILE - 1) / FPGA_DEC_TILE;
    return tiles > b ? (tiles - b + d->kv_parts - 1) / d->kv_parts : 0;
}
/* Inside a tile: where K values / K scales / V values / V scales of row r start. */
static inline uint64_t fpga_dec_tile_k(uint32_t hd, uint32_t r) { return (uint64_t)r * hd; }
static inline uint64_t fpga_dec_tile_ks(uint32_t hd, uint32_t r)
{
    return 16ull * hd + 2ull * r;
}
static inline uint64_t fpga_dec_tile_v(uint32_t hd, uint32_t r)
{
    return 16ull * hd + 32 + (uint64_t)r * hd;
}
static inline uint64_t fpga_dec_tile_vs(uint32_t hd, uint32_t r)
{
    return 32ull * hd + 32 + 2ull * r;
}

/* ---------------------------------------------------------------- KV pages

 * A sequence's KV is either one slab (above: kv_off, part_tiles; the kernels' tests and tools
 * use it) or, as the backend keeps it, a block table into the card's KV pool (fpga/BANKS.md,
 * "KV pages"). A block holds T = fpga_dec_kv_block_tokens() consecutive positions: for every
 * stream (layer, head, part) blk_tiles = T / (16 * parts) tiles, so a position's part, tile row
 * and the tile's place inside its block follow from the position alone. T = lcm(128, 16 *
 * parts): every part gets whole tiles, and 128 lines the pages up with FlexPrefill's 128-token
 * blocks and the scheduler's block tables of other devices (Llama-3-8B: 2 tiles per part, 8 KiB
 * per stream; LLaMA2-7B: 8 tiles, 33 KiB; stories260K: 1 tile).
 *
 * Placement, per pseudo-channel (the same offsets in all 32): `group` consecutive block ids form
 * a superblock, at base + (id / group) * super_bytes. Inside a superblock, stream slot s (the
 * channel's s-th stream, s = g / 32, as in a slab) holds the group's blocks one after another:
 * block id's tiles of slot s are at s * group * bt + (id % group) * bt, bt = blk_tiles *
 * tile_bytes. So a sequence whose table holds consecutive ids (the pool hands out the lowest
 * free id, and tables give them back last-first) reads each stream's tiles in one burst per
 * superblock, as from a slab; `group` makes that run at least FPGA_DEC_KV_RUN_BYTES (one
 * 284 ns memory command per 64 KiB is 4 % of the stream time; per 8 KiB block it would be 35 %).
 * A superblock is contiguous, so a prefill workspace can take free superblocks at the top.
 * A slab is the map of one block (group 1, id 0) of part_tiles tiles. */
#define FPGA_DEC_KV_BLOCK_MIN 128
/* KV in DDR4 (an offloaded sequence, fpga/BANKS.md "DDR4"): the card's two 16 GiB DDR4 banks are
 * one BO each (FPGA_DEC_DDR_BO_BYTES); "channel" c of the pool's layout is the 1 GiB slice
 * c / 2 of bank c % 2, so a DDR4 pool has the HBM pool's geometry (superblocks, ids, streams)
 * and the same tile addressing, and its streams alternate between the two banks. */
#define FPGA_DEC_DDR_SPAN (1ull << 30)
#define FPGA_DEC_DDR_BO_BYTES (16ull << 30)
static inline uint8_t *fpga_dec_ddr_ch(uint8_t *ddr0, uint8_t *ddr1, uint32_t c)
{
    return (c & 1 ? ddr1 : ddr0) + (uint64_t)(c >> 1) * FPGA_DEC_DDR_SPAN;
}
/* Host memory past DDR4 (tier 2: HOST[0], one BO of FPGA_DEC_HOST_BO_BYTES): the same layout
 * over 32 "channels" of FPGA_DEC_HOST_SPAN, reached over PCIe. */
#define FPGA_DEC_TIER_HBM 0
#define FPGA_DEC_TIER_DDR 1
#define FPGA_DEC_TIER_HOST 2
#define FPGA_DEC_HOST_SPAN (512ull << 20)
#define FPGA_DEC_HOST_BO_BYTES (16ull << 30)
static inline uint64_t fpga_dec_tier_span(uint32_t tier)
{
    return tier == FPGA_DEC_TIER_HOST ? FPGA_DEC_HOST_SPAN : FPGA_DEC_DDR_SPAN;
}
/* Channel c of a tier's pool (HBM's: the bank pointers). */
static inline uint8_t *fpga_dec_tier_ch(uint32_t tier, uint8_t *const *hbm, uint8_t *ddr0,
                                        uint8_t *ddr1, uint8_t *host, uint32_t c)
{
    return tier == FPGA_DEC_TIER_HOST  ? host + (uint64_t)c * FPGA_DEC_HOST_SPAN
           : tier == FPGA_DEC_TIER_DDR ? fpga_dec_ddr_ch(ddr0, ddr1, c)
                                       : hbm[c];
}
/* 1 when the tier's BOs are there (the adapters' check). */
static inline int fpga_dec_tier_bos_ok(uint32_t tier, uint64_t ddr0, uint64_t ddr1, uint64_t host)
{
    return tier == FPGA_DEC_TIER_HBM ||
           (tier == FPGA_DEC_TIER_DDR && ddr0 >= FPGA_DEC_DDR_BO_BYTES && ddr1 >= FPGA_DEC_DDR_BO_BYTES) ||
           (tier == FPGA_DEC_TIER_HOST && host >= FPGA_DEC_HOST_BO_BYTES);
}
#define FPGA_DEC_KV_RUN_BYTES 65536
#define FPGA_DEC_MAX_BLOCKS (FPGA_DEC_MAX_POS / FPGA_DEC_KV_BLOCK_MIN)

static inline uint32_t fpga_dec_kv_block_tokens(const fpga_dec_desc *d)
{
    uint32_t a = FPGA_DEC_KV_BLOCK_MIN, b = FPGA_DEC_TILE * d->kv_parts, x = a, y = b;
    while (y) {
        uint32_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

typedef struct fpga_dec_kvmap {
    uint64_t base;        /* paged: the pool's offset; slab: kv_off */
    uint64_t tile_bytes;
    uint64_t bt;          /* one stream's tiles in one block: blk_tiles * tile_bytes */
    uint64_t slot_stride; /* between a block's stream slots: group * bt */
    uint64_t super_bytes; /* one superblock: streams_pc * slot_stride */
    uint32_t blk_tiles, group;
    uint32_t n_ids;       /* blocks in the table */
    const uint32_t *ids;  /* block ids in position order; NULL: a slab */
} fpga_dec_kvmap;

/* Blocks per superblock for blocks of blk_tiles tiles per part. */
static inline uint32_t fpga_dec_kv_group(const fpga_dec_layout *lo, uint32_t blk_tiles)
{
    uint64_t bt = (uint64_t)blk_tiles * lo->tile_bytes;
    return bt >= FPGA_DEC_KV_RUN_BYTES ? 1 : (uint32_t)((FPGA_DEC_KV_RUN_BYTES + bt - 1) / bt);
}

/* The map of a paged sequence: pool at base, table ids[0..n_ids). */
static inline void fpga_dec_kvmap_paged(const fpga_dec_desc *d, const fpga_dec_layout *lo,
                                        uint64_t base, const uint32_t *ids, uint32_t n_ids,
                                        fpga_dec_kvmap *m)
{
    m->base = base;
    m->tile_bytes = lo->tile_bytes;
    m->blk_tiles = fpga_dec_kv_block_tokens(d) / (FPGA_DEC_TILE * d->kv_parts);
    m->group = fpga_dec_kv_group(lo, m->blk_tiles);
    m->bt = (uint64_t)m->blk_tiles * lo->tile_bytes;
    m->slot_stride = (uint64_t)m->group * m->bt;
    m->super_bytes = (uint64_t)lo->streams_pc * m->slot_stride;
    m->ids = ids;
    m->n_ids = n_ids;
}

/* The map of a slab at kv_off of part_tiles tiles per part. */
static inline void fpga_dec_kvmap_slab(const fpga_dec_layout *lo, uint64_t kv_off,
                                       uint32_t part_tiles, fpga_dec_kvmap *m)
{
    m->base = kv_off;
    m->tile_bytes = lo->tile_bytes;
    m->blk_tiles = part_tiles;
    m->group = 1;
    m->bt = (uint64_t)part_tiles * lo->tile_bytes;
    m->slot_stride = m->bt;
    m->super_bytes = (uint64_t)lo->streams_pc * m->bt;
    m->ids = 0;
    m->n_ids = 1;
}

/* Tiles per part the map holds (positions: that times 16 * parts). */
static inline uint64_t fpga_dec_kvmap_tiles(const fpga_dec_kvmap *m)
{
    return (uint64_t)m->n_ids * m->blk_tiles;
}

/* Offset (in channel fpga_dec_stream_ch) of tile `tile` of stream (l, h, part). The tile must
 * lie inside the map (tile < fpga_dec_kvmap_tiles). */
static inline uint64_t fpga_dec_kv_tile_off(const fpga_dec_desc *d, const fpga_dec_kvmap *m,
                                            uint32_t l, uint32_t h, uint32_t part, uint32_t tile)
{
    uint64_t g = ((uint64_t)l * d->n_kv_heads + h) * d->kv_parts + part;
    uint32_t blk = tile / m->blk_tiles, id = m->ids ? m->ids[blk] : blk;
    return m->base + (uint64_t)(id / m->group) * m->super_bytes +
           g / FPGA_DEC_CH * m->slot_stride + (uint64_t)(id % m->group) * m->bt +
           (uint64_t)(tile % m->blk_tiles) * m->tile_bytes;
}

/* How many tiles from `tile` up to `last` (inclusive) lie one after another in memory: the
 * rest of its block, and the blocks after it whose ids follow in the same superblock. One
 * burst reads them. */
static inline uint32_t fpga_dec_kv_run(const fpga_dec_kvmap *m, uint32_t tile, uint32_t last)
{
    if (!m->ids) return last - tile + 1;
    uint32_t blk = tile / m->blk_tiles, end = (blk + 1) * m->blk_tiles;
    while (end <= last && m->ids[blk + 1] == m->ids[blk] + 1 && m->ids[blk + 1] % m->group)
        blk++, end += m->blk_tiles;
    return (end <= last ? end : last + 1) - tile;
}

/* 1 when every id of the table lies in a pool of `pool_bytes` at base inside a buffer of size
 * bytes (the kernels' adapters check this: HBM could hold anything). */
static inline int fpga_dec_kvmap_ok(const fpga_dec_kvmap *m, uint64_t size)
{
    if (!m->n_ids || !m->blk_tiles) return 0;
    uint32_t top = 0;
    for (uint32_t i = 0; m->ids && i < m->n_ids; i++)
        if (m->ids[i] > top) top = m->ids[i];
    uint64_t supers = (uint64_t)top / m->group + 1;
    if (supers > size / (m->super_bytes ? m->super_bytes : 1)) return 0;
    return m->base <= size && supers * m->super_bytes <= size - m->base;
}

/* ---------------------------------------------------------------- the io buffer (HBM[0]) */

/* io: [0, 64) status the kernel writes after a step {magic, token, pos, layers done};
 *     [64, ..) step input the host writes: x0 (hidden fp32: the token's embedding row, looked
 *     up on the host as FAST-Prefill does) then cos, sin (head_dim/2 fp32 each: the rotary
 *     angles of this position, from the model's rope type);
 *     logits_off: logits (vocab fp32) the kernel writes. */
#define FPGA_DEC_STATUS_MAGIC 0x4b4f4354u /* "TCOK" */
static inline uint64_t fpga_dec_io_step_off(void) { return 64; }
static inline uint64_t fpga_dec_io_step_bytes(const fpga_dec_desc *d)
{
    return 4ull * (d->hidden + d->head_dim);
}
static inline uint64_t fpga_dec_io_logits_off(const fpga_dec_desc *d)
{
    return fpga_dec_align(64 + fpga_dec_io_step_bytes(d), FPGA_DEC_ALIGN);
}
/* The block table of a paged sequence (FPGA_DEC_MAX_BLOCKS u32 at most), after the logits. */
static inline uint64_t fpga_dec_io_table_off(const fpga_dec_desc *d)
{
    return fpga_dec_align(fpga_dec_io_logits_off(d) + 4ull * d->vocab, FPGA_DEC_ALIGN);
}
static inline uint64_t fpga_dec_io_bytes(const fpga_dec_desc *d)
{
    return fpga_dec_io_table_off(d) + 4ull * FPGA_DEC_MAX_BLOCKS;
}

/* A decode run's selection table (io, at fpga_dec_io_sel_off): for every layer, then every KV
 * head, one list of `cap` + 1 u32: the count, then the ascending positions attended (each <= the
 * step's position); a count of FPGA_DEC_SEL_DENSE attends every position (dense). */
#define FPGA_DEC_SEL_DENSE 0xffffffffu

static inline uint64_t fpga_dec_io_sel_off(const fpga_dec_desc *d)
{
    return fpga_dec_align(fpga_dec_io_bytes(d), 4096);
}
static inline uint64_t fpga_dec_io_sel_bytes(const fpga_dec_desc *d, uint32_t cap)
{
    return 4ull * d->n_layers * d->n_kv_heads * (1ull + cap);
}

/* ---------------------------------------------------------------- batched decode io */

/* The batched kernel (decode_batch.c) decodes up to FPGA_DEC_MAX_BATCH sequences per run: its
 * on-chip arrays are sized for it (a build-time parameter of the image; BENCHMARKS.md gives
 * the U280's DSP and memory arithmetic). Its io: the status at [0, 64) {FPGA_DEC_BATCH_MAGIC,
 * n_seq, layers, 0}, then, past the single step's io, one record per sequence:
 *   [0, 64)        {token, pos, n_ids, done}: the host writes the first three; the kernel sets
 *                  done = FPGA_DEC_STATUS_MAGIC ^ pos when the sequence's logits are out
 *   [64, ..)       its step input (x0, cos, sin: fpga_dec_io_step_bytes)
 *   rec_logits     its logits (vocab fp32)
 *   rec_table      its block table (n_ids u32, at most FPGA_DEC_MAX_BLOCKS)
 *   rec_tls        its AsyncTLS parameters, when head words 4, 5 (tls_off) are not 0 */
#define FPGA_DEC_MAX_BATCH 16
#define FPGA_DEC_BATCH_MAGIC 0x48544254u /* "TBTH" */
/* The batched image's MAC array: 3 x the single engine's 4096 int8 MACs per cycle (6,144 of the
 * U280's 9,024 DSP48E2 slices at two int8 MACs each; the rest stay with the fp32 units). */
#define FPGA_DEC_BATCH_MACS_PER_CYCLE 12288
/* and 64 fp32 lanes in its special-function unit (4 x the single engine's 16: each sequence's
 * RMSNorm, activation quantization and SiLU are serial passes, so n sequences cost n passes;
 * 64 fp32 multiply-add lanes take about 256 of the DSPs the MAC array leaves) */
#define FPGA_DEC_BATCH_SFU_LANES 64
static inline uint64_t fpga_dec_io_rec_logits(const fpga_dec_desc *d)
{
    return fpga_dec_align(64 + fpga_dec_io_step_bytes(d), FPGA_DEC_ALIGN);
}
static inline uint64_t fpga_dec_io_rec_table(const fpga_dec_desc *d)
{
    return fpga_dec_align(fpga_dec_io_rec_logits(d) + 4ull * d->vocab, FPGA_DEC_ALIGN);
}
/* AsyncTLS for the record's sequence (tls_dec.h): when the head's words 4..5 (tls_off) are not
 * 0, its run parameters (an fpga_tls_io of at most FPGA_DEC_REC_TLS_BYTES) here, word 6 its
 * tls_upto; the kernel writes the counts back into them. */
#define FPGA_DEC_REC_TLS_BYTES 128
static inline uint64_t fpga_dec_io_rec_tls(const fpga_dec_desc *d)
{
    return fpga_dec_align(fpga_dec_io_rec_table(d) + 4ull * FPGA_DEC_MAX_BLOCKS, 64);
}
static inline uint64_t fpga_dec_io_rec_bytes(const fpga_dec_desc *d)
{
    return fpga_dec_align(fpga_dec_io_rec_tls(d) + FPGA_DEC_REC_TLS_BYTES, 4096);
}
static inline uint64_t fpga_dec_io_rec_off(const fpga_dec_desc *d, uint32_t i)
{
    return fpga_dec_align(fpga_dec_io_bytes(d), 4096) + (uint64_t)i * fpga_dec_io_rec_bytes(d);
}
/* The io a batch of n sequences needs. */
static inline uint64_t fpga_dec_io_batch_bytes(const fpga_dec_desc *d, uint32_t n)
{
    return fpga_dec_io_rec_off(d, n);
}

/* ---------------------------------------------------------------- import staging */

/* A KV import piece is striped over FPGA_DEC_STAGE_SLOTS staging buffers (one per channel, so
 * the kv_scatter kernel reads them in parallel); slot j holds positions
 * [pos0 + j*per, pos0 + min(n, (j+1)*per)) as a wire payload of that many tokens: K values | V
 * values | K scales | V scales, each section padded to 64 bytes (proto/KV_FORMAT.md). The last
 * 64 bytes of slot 0 take the kernel's report: magic, then the CRC32C of each slot's bytes. */
#define FPGA_DEC_STAGE_SLOTS 4
#define FPGA_DEC_STAGE_REPORT_MAGIC 0x52435354u /* "TSCR" */
/* A paged piece may span up to FPGA_DEC_SCATTER_IDS blocks: their ids, in position order, lie in
 * slot 0 just before its report (fpga_dec_stage_table_off), so that one kv_scatter run writes a
 * whole piece however the blocks fall (one run a block before: a 128-token block of Llama-3-8B's
 * KV is 266 KB, and each run's launch and syncs cost more than its bytes). Every slot keeps this
 * tail free: a slot's payload is at most stage_bytes - FPGA_DEC_STAGE_TAIL. */
#define FPGA_DEC_SCATTER_IDS 64
#define FPGA_DEC_STAGE_TAIL  (64 + 4 * FPGA_DEC_SCATTER_IDS)
static inline uint64_t fpga_dec_stage_table_off(uint64_t stage_bytes)
{
    return stage_bytes - FPGA_DEC_STAGE_TAIL;
}
/* kv_check's report (fpga/kernels/kv_check.c), at the start of a staging slot:
 * {magic, pos0, n, n_layers, crc[n_layers]}. */
#define FPGA_DEC_CHECK_MAGIC 0x4b434b54u /* "TKCK" */
static inline uint64_t fpga_dec_check_report_bytes(uint32_t n_layers)
{
    return 16 + 4ull * n_layers;
}
/* A paged kv_check finds the block table in its report buffer at this offset. */
#define FPGA_DEC_CHECK_TABLE_OFF 65536
static inline uint64_t fpga_dec_stage_section(uint32_t n, uint32_t kvh, uint32_t hd, int which)
{
    uint64_t vb = fpga_dec_align((uint64_t)n * kvh * hd, FPGA_DEC_ALIGN);
    uint64_t sb = fpga_dec_align(2ull * n * kvh, FPGA_DEC_ALIGN);
    switch (which) {
    case 0: return 0;                 /* K values */
    case 1: return vb;                /* V values */
    case 2: return 2 * vb;            /* K scales */
    case 3: return 2 * vb + sb;       /* V scales */
    default: return 2 * vb + 2 * sb;  /* total */
    }
}

#endif
