/* fpga/kernels/tls_kernel.h — the card's AsyncTLS kernels (fpga/kernels/tls_select.c says what
 * each argument is). */
#ifndef TANDEM_FPGA_TLS_KERNEL_H
#define TANDEM_FPGA_TLS_KERNEL_H
#include "fpga/kernels/kernel.h"

#define TLS_K_MAX_BLOCKS 16384 /* 1M keys of 64 */
#define TLS_K_MAX_CAND 16384   /* block_budget * block_size */
/* the staggered pipeline's level 2 may see the block budget plus the two newest blocks */
#define TLS_K_MAX_CAND_PIPE (TLS_K_MAX_CAND + 2 * 128)
#define TLS_K_MAX_HD 256
#define TLS_K_MAX_G 16

/* Both selection levels for one query group, the unit the tls_select kernel and the decode
 * kernel (fpga/kernels/tls_dec.h) share: q (G, hd) and the channels ch (r) on chip; summ
 * (nb, 2, hd) fp32 max rows then min rows, code (n_keys, r / 2), lmin, lstep (n_keys) fp32 in
 * HBM (charged). The kept positions, ascending, into cand (on chip, TLS_K_MAX_CAND); returns
 * their count. Bounds as the tls_select adapter checks them. lanes: the score products' MACs per
 * cycle (the standalone kernel: 16; inside the decode run: its MAC array, which is idle while
 * the unit selects); the top-k passes stream 16 scores a cycle. */
uint32_t tls_select_unit(const float *q, const uint16_t *ch, const uint8_t *summ,
                         const uint8_t *code, const uint8_t *lmin, const uint8_t *lstep,
                         uint32_t n_keys, uint32_t hd, uint32_t G, uint32_t r, uint32_t bs,
                         uint32_t block_budget, uint32_t token_budget, uint32_t lanes,
                         int32_t *cand);

/* The unit's two levels apart (AsyncTLS's staggered pipeline runs level 1 for the next step and
 * level 2 over the blocks chosen at the previous one; fpga/kernels/tls_dec.h). Level 1: keep[b]
 * = 1 for the block_budget best of nb blocks (all when nb <= block_budget); returns how many.
 * Level 2: the token_budget best of the C candidate positions cand (ascending) scored from
 * their labels, kept in place in order; returns their count (C when C <= token_budget). */
uint32_t tls_level1(const float *q, const uint8_t *summ, uint32_t nb, uint32_t hd, uint32_t G,
                    uint32_t block_budget, uint32_t lanes, uint8_t *keep);
uint32_t tls_level2(const float *q, const uint16_t *ch, const uint8_t *code, const uint8_t *lmin,
                    const uint8_t *lstep, uint32_t n_keys, uint32_t hd, uint32_t G, uint32_t r,
                    uint32_t token_budget, uint32_t lanes, int32_t *cand, uint32_t C);

void tls_select(const uint8_t *data, uint8_t *out, uint64_t q_off, uint64_t ch_off,
                uint64_t summ_off, uint64_t code_off, uint64_t lmin_off, uint64_t lstep_off,
                uint32_t n_keys, uint32_t head_dim, uint32_t G, uint32_t r, uint32_t block_size,
                uint32_t block_budget, uint32_t token_budget);
extern const fpga_k_desc fpga_k_tls_select_desc;

#endif
