/* fpga/kernels/flex_kernel.h — FAST-Prefill-style sparse prefill on the U280: what the two
 * kernels (flex_sigu.c, flex_sau.c) and the host code that feeds them (fpga/flex_host.c) share.
 *
 * Numerics (W8A8, FAST-Prefill Sec. IV-D): Q, K, V are int8 with one float32 scale per (token,
 * head) (symmetric, amax / 127); products accumulate in int32 and are scaled once; softmax,
 * normalisation and the accumulators run in float32. The P·V product is int8 too: each row of
 * P (times the V row scales) is quantized to int8 with its own scale before the int32 product.
 *
 * HBM layouts, one block = FPGA_FLEX_BS tokens of one head, so that every unit reads a whole
 * block in one burst:
 *   q buffer   (n_heads,    nb) blocks of [q int8 (BS, d)][q scale f32 (BS)]
 *   kv buffer  (n_kv_heads, nb) blocks of [k int8 (BS, d)][k scale (BS)][v int8 (BS, d)][v scale]
 *   out buffer (n_heads,    nb) blocks of [o f32 (BS, d)] (the SAU's result; rows past n unused)
 * The last block of a prompt whose length is not a multiple of BS is zero-padded (scale 0).
 * Block i of a buffer is at fpga_flex_blk(buf, i): the standalone kernels lay the blocks out
 * back to back in one BO; the prefill kernel (fpga/kernels/prefill.c) stripes them over the 32
 * pseudo-channels (block i in channel i % 32), so that the units stream from every channel.
 *
 * Index (written by the SIGU, read by the SAU): the CPU reference's CSR (cpu/flex.h) with
 * uint32 row offsets (n_heads, nb + 1, absolute into col) and uint32 column block ids.
 *
 * Floats that travel as kernel scalars (gamma, tau) are passed as their IEEE-754 bit pattern in
 * a uint argument: the host's XRT wrappers set integer scalars only. */
#ifndef TANDEM_FPGA_FLEX_KERNEL_H
#define TANDEM_FPGA_FLEX_KERNEL_H
#include "fpga/kernels/kernel.h"
#include <stdint.h>
#include <string.h>

#define FPGA_FLEX_BS          128       /* FlexPrefill's block = FAST-Prefill's chunk */
#define FPGA_FLEX_MAX_TOKENS  131072    /* the 128K target */
#define FPGA_FLEX_MAX_NB      (FPGA_FLEX_MAX_TOKENS / FPGA_FLEX_BS)
#define FPGA_FLEX_MAX_HEADS   64
#define FPGA_FLEX_MAX_GROUP   8         /* query heads per kv head */
#define FPGA_FLEX_MAX_D       128
#define FPGA_FLEX_MAX_WINDOW  32        /* SAU query blocks whose accumulators are on chip */
#define FPGA_FLEX_MAX_CACHE   1024      /* SAU KV cache slots */

/* Hybrid MPU (FAST-Prefill Sec. IV-D): six 32x32 DSP arrays + six 32x32 LUT bit-plane arrays,
 * one int8 MAC per PE per cycle = 12,288 MACs/cycle. */
#define FPGA_FLEX_MPU_MACS 12288
/* SFU exponentials per cycle (FAST-Prefill does not give it; 64 lanes is our model parameter:
 * it keeps the softmax of a 128x128 tile (256 cycles) under the MPU time of the tile pair at
 * d = 128 (341 cycles), so attention stays MPU-bound as the paper's design intends). */
#define FPGA_FLEX_SFU_LANES 64
/* Values per cycle through a selection/scan unit: one 512-bit HBM beat of float32. */
#define FPGA_FLEX_SCAN_LANES 16

static inline uint64_t fpga_flex_qblock_bytes(int d)
{
    return (uint64_t)FPGA_FLEX_BS * d + FPGA_FLEX_BS * 4;
}
static inline uint64_t fpga_flex_kvblock_bytes(int d)
{
    return 2 * fpga_flex_qblock_bytes(d);
}
static inline uint64_t fpga_flex_oblock_bytes(int d)
{
    return (uint64_t)FPGA_FLEX_BS * d * 4;
}

/* A buffer of equal blocks: block i at ch[i % 32] + (i / 32) * round. Back to back in one BO
 * (base, block bytes b): ch[k] = base + k * b, round = 32 * b (fpga_flex_buf_flat). */
#define FPGA_FLEX_CH 32
typedef struct fpga_flex_buf {
    uint8_t *ch[FPGA_FLEX_CH];
    uint64_t round;
} fpga_flex_buf;

static inline uint8_t *fpga_flex_blk(const fpga_flex_buf *b, uint64_t i)
{
    return b->ch[i % FPGA_FLEX_CH] + (i / FPGA_FLEX_CH) * b->round;
}
static inline void fpga_flex_buf_flat(fpga_flex_buf *b, uint8_t *base, uint64_t block_bytes)
{
    for (int k = 0; k < FPGA_FLEX_CH; k++) b->ch[k] = base + (uint64_t)k * block_bytes;
    b->round = FPGA_FLEX_CH * block_bytes;
}

/* One (token, head) row of d values into row i of a q or k/v half-block: symmetric int8 with a
 * float32 scale amax / 127 (a zero row: scale 0, values 0). */
static inline void fpga_flex_quant_row(const float *x, int d, uint8_t *blk, int i)
{
    float amax = 0;
    for (int e = 0; e < d; e++) {
        float a = x[e] < 0 ? -x[e] : x[e];
        if (a > amax) amax = a;
    }
    const float s = amax / 127.0f;
    int8_t *q = (int8_t *)blk + (size_t)i * d;
    for (int e = 0; e < d; e++) {
        float r = s == 0 ? 0 : __builtin_rintf(x[e] / s);
        q[e] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    memcpy(blk + (size_t)FPGA_FLEX_BS * d + 4 * (size_t)i, &s, 4);
}
static inline float fpga_flex_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline uint32_t fpga_flex_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* SIGU scratch in HBM (floats): the token-level vertical and slash distributions of every head
 * (n_heads x n each: FAST-Prefill's "no intermediate larger than n elements"), the key-block
 * means (n_kv_heads x nb x d) and one query-aware head's block map (nb x nb). */
static inline uint64_t fpga_flex_sigu_scratch_bytes(int n, int n_heads, int n_kv_heads, int d)
{
    uint64_t nb = ((uint64_t)n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    return 4 * (2 * (uint64_t)n_heads * n + (uint64_t)n_kv_heads * nb * d + nb * nb);
}
/* Largest CSR: every causal block of every head. */
static inline uint64_t fpga_flex_col_capacity(int n, int n_heads)
{
    uint64_t nb = ((uint64_t)n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    return (uint64_t)n_heads * nb * (nb + 1) / 2;
}

/* Per-head result of the SIGU, (n_heads) records in the info buffer. */
typedef struct fpga_flex_head_info {
    uint32_t n_vertical, n_slash, query_aware;
    uint32_t js_bits; /* float32 bit pattern of the square-root JS distance */
} fpga_flex_head_info;

/* What the SAU reports (written to its stats buffer at the end of a run). */
typedef struct fpga_flex_sau_stats {
    uint64_t jobs;            /* (head, query block, key block) tiles computed */
    uint64_t accesses;        /* KV block uses: one per (window, kv head, key block) in use */
    uint64_t hits, hot_hits, cold_hits, misses;
    uint64_t admitted_hot, admitted_cold, bypassed, evicted_dead, evicted_live;
    uint64_t kv_bytes;        /* KV bytes read from HBM with the cache */
    uint64_t kv_bytes_nocache;/* the same schedule with every access a fetch */
    uint64_t kv_bytes_naive;  /* row-major gather: every job fetches its block (no GQA share) */
    uint64_t q_bytes, out_bytes, index_bytes;
    uint64_t mpu_cycles, sfu_cycles;
} fpga_flex_sau_stats;

/* The units, as top functions of their own kernels (the adapters below each file) and as units
 * of the prefill kernel (fpga/kernels/prefill.c), which calls them with its striped buffers.
 * chip: the unit's on-chip memory, fpga_flex_*_chip_bytes() zeroed bytes (the emulator
 * allocates it: a worker thread's stack cannot hold it). Shapes must be within the bounds
 * above; the index must be well formed (the SAU adapter checks one that came from the host). */
uint64_t fpga_flex_sigu_chip_bytes(void);
uint64_t fpga_flex_sau_chip_bytes(void);
void flex_sigu(const fpga_flex_buf *qbuf, const fpga_flex_buf *kvbuf, float *scratch,
               uint32_t *row_ptr, uint32_t *col, fpga_flex_head_info *info, uint32_t n,
               uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, uint32_t gamma_bits,
               uint32_t tau_bits, uint32_t min_blocks, uint32_t max_blocks,
               uint32_t gqa_interleave, uint32_t q0, void *chip);
void flex_sau(const fpga_flex_buf *qbuf, const fpga_flex_buf *kvbuf, const uint32_t *row_ptr,
              const uint32_t *col, uint32_t *jobs, const fpga_flex_buf *out,
              fpga_flex_sau_stats *stats, uint32_t n, uint32_t q0, uint32_t n_heads,
              uint32_t n_kv_heads, uint32_t head_dim, uint32_t gqa_interleave,
              uint32_t cache_blocks, uint32_t hot_blocks, uint32_t window, uint32_t mode,
              void *chip);

/* The kernels (registered in fpga/emu/emu_registry.c). */
extern const fpga_k_desc fpga_k_flex_sigu_desc;
extern const fpga_k_desc fpga_k_flex_sau_desc;

#endif
