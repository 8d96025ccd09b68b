/* fpga/kernels/xattn_kernel.h — the card's block-list unit for XAttention and Tri-shape
 * (fpga/kernels/xattn_est.c): what the unit, the prefill kernel and the host share.
 *
 * The unit writes the same CSR the SIGU writes (flex_kernel.h: uint32 row offsets (n_heads,
 * nb + 1), absolute into col, and ascending key block ids per row), for the query blocks
 * [q0, nb) of a prompt or of a chunk after q0 * 128 cached tokens (rows before q0 stay empty),
 * over the q and kv block buffers of flex_kernel.h with blocks at absolute positions: row t of
 * the sequence is row t % 128 of block t / 128. GQA: query head h reads KV head h / (H / Hk).
 *
 * Block size: 128 (FPGA_FLEX_BS), the SAU's block; XAttention's default block size, and the
 * block Tri-shape's rule is written for here (sparse/sparse.h SPARSE_TRI_BLOCK). */
#ifndef TANDEM_FPGA_XATTN_KERNEL_H
#define TANDEM_FPGA_XATTN_KERNEL_H
#include "fpga/kernels/flex_kernel.h"

enum { FPGA_XATTN_METHOD_XATTN = 1, FPGA_XATTN_METHOD_TRISHAPE = 2 };

/* The estimator's logit buffer (on chip): the reshaped rows of one query block against every
 * reshaped key up to its diagonal, (128 / S) x ceil(n / S) floats; 1M floats = 4 MiB of URAM
 * (S = 8 at 128K takes 1 MiB; S = 4 at 128K the whole of it). Shapes above it are refused. */
#define FPGA_XATTN_ROWBUF (1u << 20)

typedef struct fpga_xattn_params {
    uint32_t method;         /* FPGA_XATTN_METHOD_* */
    uint32_t stride;         /* XAttention S: divides 128 */
    uint32_t thr_lo, thr_hi; /* XAttention threshold: the float64 bit pattern, low word first */
    uint32_t tri_lo, tri_hi; /* Tri-shape: key blocks [tri_lo, tri_hi) skipped (sparse_tri_skip / 128) */
    uint32_t mode;           /* 0: compute; 1: charge the schedule only (no arithmetic, no
                                output): the modeled time at any length, for the benchmarks */
} fpga_xattn_params;

static inline double fpga_xattn_f64(uint32_t lo, uint32_t hi)
{
    uint64_t u = (uint64_t)hi << 32 | lo;
    double d;
    memcpy(&d, &u, 8);
    return d;
}
static inline void fpga_xattn_f64_bits(double d, uint32_t *lo, uint32_t *hi)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    *lo = (uint32_t)u;
    *hi = (uint32_t)(u >> 32);
}

/* 1 when the unit takes this shape and these parameters. */
static inline int fpga_xattn_ok(uint32_t n, uint32_t q0, uint32_t H, uint32_t Hk, uint32_t d,
                                const fpga_xattn_params *p)
{
    const uint32_t nb = (n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    if (n < 1 || n > FPGA_FLEX_MAX_TOKENS || q0 >= nb || H < 1 || H > FPGA_FLEX_MAX_HEADS ||
        Hk < 1 || H % Hk || H / Hk > FPGA_FLEX_MAX_GROUP || d < 1 || d > FPGA_FLEX_MAX_D ||
        p->mode > 1)
        return 0;
    if (p->method == FPGA_XATTN_METHOD_TRISHAPE) return p->tri_lo <= p->tri_hi && p->tri_hi <= nb;
    if (p->method != FPGA_XATTN_METHOD_XATTN) return 0;
    const double thr = fpga_xattn_f64(p->thr_lo, p->thr_hi);
    if (!(thr > 0 && thr <= 1) || p->stride < 1 || FPGA_FLEX_BS % p->stride) return 0;
    const uint64_t rpb = FPGA_FLEX_BS / p->stride, nrs = ((uint64_t)n + p->stride - 1) / p->stride;
    return rpb * nrs <= FPGA_XATTN_ROWBUF;
}

/* On-chip memory of the unit (the adapter allocates it zeroed). */
uint64_t fpga_xattn_chip_bytes(void);
void xattn_est(const fpga_flex_buf *qbuf, const fpga_flex_buf *kvbuf, uint32_t *row_ptr,
               uint32_t *col, uint32_t n, uint32_t q0, uint32_t n_heads, uint32_t n_kv_heads,
               uint32_t head_dim, const fpga_xattn_params *p, void *chip);

extern const fpga_k_desc fpga_k_xattn_est_desc;

#endif
