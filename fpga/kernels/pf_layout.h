/* fpga/kernels/pf_layout.h — where the prefill kernel (fpga/kernels/prefill.c) finds its
 * working data in HBM, shared by the kernel and the host (fpga/prefill.c) like dec_layout.h.
 *
 * A prefill call works on a "pass" of n prompt rows (row t = position pos0 + t) in a workspace:
 * a region of the KV pool at the same offset ws_off in all 32 bank BOs (the backend places it
 * like a sequence's slab). Inside it, at offsets that depend only on (desc, n, flags):
 *
 *   striped arrays: item i in channel i % 32 at off + (i / 32) * item, so that any run of items
 *   (a chunk's rows, a head's blocks) streams from every channel, one command per channel
 *     x     n items      hidden fp32       the residual stream (the host writes the embeddings)
 *     rope  n items      head_dim fp32     cos | sin of the row's position (host-computed)
 *     out   H x nb items 128 x hd fp32     attention output, block (head h, rows 128r..) at
 *                                          h * nb + r (the SAU's block layout, flex_kernel.h)
 *     wide  128 items    max(qkv, 2 inter) fp32  one chunk's GEMM output (QKV or gate|up, or
 *                                          the O / down output before the residual add)
 *     kvf   Hk x nb items  kv block        the pass's K/V in the FAST-Prefill block layout,
 *                                          values and scales exactly those of the card's KV
 *                                          (FPGA_PF_F_KVF: for the SAU/SIGU and for export)
 *     qf    H x nb items   q block         q quantized per (row, head) for the SIGU and SAU
 *                                          (FPGA_PF_F_SPARSE)
 *   flat arrays (FPGA_PF_F_SPARSE), one per channel 0..5 at `flat`: the SIGU scratch, the CSR
 *   row offsets and columns, the per-head info, the SAU job list and its statistics.
 * x, rope, out and wide come first, so their offsets do not depend on the flags: a run without
 * FPGA_PF_F_KVF may use a workspace laid out with it (a dense pass that exports nothing).
 *
 * The io BO (HBM[0], shared with the decode kernel) carries the sparse parameters at
 * FPGA_PF_IO_PARAMS (host -> card), the kernel's report of a layer at FPGA_PF_IO_REPORT and its
 * status record at 0; HEAD runs write the logits where a decode step does.
 *
 * Chunks: FPGA_PF_CHUNK rows (FAST-Prefill's chunk = FlexPrefill's block), aligned to row 0 of
 * the pass, so a chunk is exactly one 128-row block of out / kvf / qf. */
#ifndef TANDEM_FPGA_PF_LAYOUT_H
#define TANDEM_FPGA_PF_LAYOUT_H
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/flex_kernel.h"
#include "fpga/kernels/xattn_kernel.h"

#define FPGA_PF_CHUNK 128
/* Rows of a dense pass: the backend's standing workspace holds this many (larger prompts go in
 * several passes; a chunk's weights are streamed once per chunk either way, so passes cost
 * only run overheads). */
#define FPGA_PF_PASS 512
/* Rows one QKV / POST / DENSE run covers at most (the host splits longer passes into runs of
 * this many, chunk-aligned: a run stays well inside the card's watchdog). */
#define FPGA_PF_RUN_ROWS 4096

/* Kernel modes (low byte of the mode argument) and workspace flags (the layout's). */
enum fpga_pf_mode {
    FPGA_PF_DENSE = 1, /* layer: rows r0..r1, chunk by chunk: QKV, causal attention over the
                          sequence's KV tiles (the decode datapath), O, FFN */
    FPGA_PF_QKV = 2,   /* layer: rows r0..r1: norm, QKV, RoPE, KV into the slab + kvf + qf */
    FPGA_PF_ATTN = 3,  /* layer: the index (SIGU, or xattn_est for XAttention / Tri-shape) +
                          SAU (block-sparse attention) for rows r0..n of the pass; r0 > 0 (a
                          chunk after r0 cached positions, pos0 0: rows are positions) first
                          copies the cached positions' K/V from the tiles into kvf */
    FPGA_PF_POST = 4,  /* layer: rows r0..r1: O, residual, norm, gate/up, SiLU, down, residual */
    FPGA_PF_HEAD = 5,  /* row r0: final norm, lm_head -> logits in io */
};
#define FPGA_PF_MODE_MASK 0xffu
#define FPGA_PF_F_KVF     0x100u
#define FPGA_PF_F_SPARSE  0x200u

/* SFU throughput of the prefill datapath: FAST-Prefill's shared special-function unit, the
 * FPGA_FLEX_SFU_LANES model parameter (flex_kernel.h). Elements per row each phase passes
 * through it (norm: 2 passes, quantizers, RoPE, SiLU, residual adds): the model's count. */
#define FPGA_PF_SFU_QKV(hidden, qd, kvd) (3ull * (hidden) + (qd) + 3ull * (kvd))
#define FPGA_PF_SFU_POST(hidden, qd, inter) ((qd) + 5ull * (hidden) + 3ull * (inter))

typedef struct fpga_pf_arr {
    uint64_t off, item; /* item i: channel i % 32, offset off + (i / 32) * item */
} fpga_pf_arr;

enum { FPGA_PF_FLAT_SCRATCH, FPGA_PF_FLAT_ROWS, FPGA_PF_FLAT_COL, FPGA_PF_FLAT_INFO,
       FPGA_PF_FLAT_JOBS, FPGA_PF_FLAT_STATS, FPGA_PF_NFLAT };

typedef struct fpga_pf_ws {
    uint32_t n, nb, flags;
    uint32_t wide_floats;                 /* max(qd + 2 kvd, 2 inter) */
    fpga_pf_arr x, rope, out, wide, kvf, qf;
    uint64_t flat;                        /* flat array k lives in channel k at this offset */
    uint64_t flat_bytes[FPGA_PF_NFLAT];
    uint64_t bytes;                       /* per channel */
} fpga_pf_ws;

static inline uint64_t fpga_pf_stripe_bytes(uint64_t count, uint64_t item)
{
    return fpga_dec_align((count + FPGA_DEC_CH - 1) / FPGA_DEC_CH * item, FPGA_DEC_ALIGN);
}

/* The workspace of an n-row pass (desc checked). */
static inline void fpga_pf_ws_of(const fpga_dec_desc *d, uint32_t n, uint32_t flags,
                                 fpga_pf_ws *w)
{
    const uint32_t hd = d->head_dim, qd = d->n_heads * hd, kvd = d->n_kv_heads * hd;
    const uint64_t nb = ((uint64_t)n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    uint64_t at = 0;
    w->n = n;
    w->nb = (uint32_t)nb;
    w->flags = flags & (FPGA_PF_F_KVF | FPGA_PF_F_SPARSE);
    w->wide_floats = qd + 2 * kvd > 2 * d->inter ? qd + 2 * kvd : 2 * d->inter;
    fpga_pf_arr *arr[6] = {&w->x, &w->rope, &w->out, &w->wide, &w->kvf, &w->qf};
    const uint64_t item[6] = {4ull * d->hidden, 4ull * hd, fpga_flex_oblock_bytes((int)hd),
                              4ull * w->wide_floats, fpga_flex_kvblock_bytes((int)hd),
                              fpga_flex_qblock_bytes((int)hd)};
    const uint64_t count[6] = {n, n, d->n_heads * nb, FPGA_PF_CHUNK,
                               (w->flags & FPGA_PF_F_KVF) ? d->n_kv_heads * nb : 0,
                               (w->flags & FPGA_PF_F_SPARSE) ? d->n_heads * nb : 0};
    for (int i = 0; i < 6; i++) {
        arr[i]->off = at;
        arr[i]->item = item[i];
        at += fpga_pf_stripe_bytes(count[i], item[i]);
    }
    w->flat = at;
    uint64_t fmax = 0;
    for (int k = 0; k < FPGA_PF_NFLAT; k++) w->flat_bytes[k] = 0;
    if (w->flags & FPGA_PF_F_SPARSE) {
        const uint64_t col = fpga_flex_col_capacity((int)n, (int)d->n_heads) * 4;
        w->flat_bytes[FPGA_PF_FLAT_SCRATCH] =
            fpga_flex_sigu_scratch_bytes((int)n, (int)d->n_heads, (int)d->n_kv_heads, (int)hd);
        w->flat_bytes[FPGA_PF_FLAT_ROWS] = (uint64_t)d->n_heads * (nb + 1) * 4;
        w->flat_bytes[FPGA_PF_FLAT_COL] = col;
        w->flat_bytes[FPGA_PF_FLAT_INFO] = (uint64_t)d->n_heads * sizeof(fpga_flex_head_info);
        w->flat_bytes[FPGA_PF_FLAT_JOBS] = col;
        w->flat_bytes[FPGA_PF_FLAT_STATS] = sizeof(fpga_flex_sau_stats);
        for (int k = 0; k < FPGA_PF_NFLAT; k++)
            if (w->flat_bytes[k] > fmax) fmax = w->flat_bytes[k];
    }
    w->bytes = fpga_dec_align(at + fpga_dec_align(fmax, FPGA_DEC_ALIGN), 4096);
}

/* Item i of a striped array: its channel and its offset inside the workspace. */
static inline uint32_t fpga_pf_item_ch(uint64_t i)
{
    return (uint32_t)(i % FPGA_DEC_CH);
}
static inline uint64_t fpga_pf_item_off(const fpga_pf_arr *a, uint64_t i)
{
    return a->off + i / FPGA_DEC_CH * a->item;
}

/* ---------------------------------------------------------------- io */

#define FPGA_PF_STATUS_MAGIC 0x4b4f4650u /* "PFOK" */
#define FPGA_PF_REPORT_MAGIC 0x52504650u /* "PFPR" */
#define FPGA_PF_IO_PARAMS 64
#define FPGA_PF_IO_REPORT 128

/* The sparse units' parameters, written by the host before an ATTN run (64 bytes). */
typedef struct fpga_pf_params {
    uint32_t gamma_bits, tau_bits;   /* FlexPrefill: float32 bit patterns */
    uint32_t min_blocks, max_blocks; /* FlexPrefill: budgets in 128-token blocks */
    uint32_t cache_blocks, hot_blocks, window; /* the SAU's cache and accumulator window */
    uint32_t method; /* which unit lists the blocks: FPGA_PF_METHOD_FLEX (the SIGU), or
                        FPGA_XATTN_METHOD_XATTN / _TRISHAPE (xattn_est.c) */
    uint32_t stride, thr_lo, thr_hi, tri_lo, tri_hi; /* fpga_xattn_params' fields */
    uint32_t reserved[3];
} fpga_pf_params;
#define FPGA_PF_METHOD_FLEX 0

/* What an ATTN run did (the other modes leave it alone), at FPGA_PF_IO_REPORT. */
typedef struct fpga_pf_report {
    uint32_t magic, layer, n, n_query_aware;
    uint64_t nnz;      /* blocks the index lists = tiles computed per head, summed */
    uint64_t causal;   /* H * (nb (nb + 1) - q0 (q0 + 1)) / 2: the causal blocks of rows q0.. */
    uint64_t accesses, hits, hot_hits, cold_hits, misses;
    uint64_t kv_bytes, kv_bytes_nocache, jobs;
} fpga_pf_report;

/* The io bytes a prefill needs below the logits (status, parameters, report). */
static inline uint64_t fpga_pf_io_need(void)
{
    return FPGA_PF_IO_REPORT + sizeof(fpga_pf_report);
}

#endif
