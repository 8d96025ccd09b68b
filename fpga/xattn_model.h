/* fpga/xattn_model.h — what the card's XAttention / Tri-shape block-list unit
 * (fpga/kernels/xattn_est.c) costs in the emulator's timing model, computed from the shape
 * alone: the same MPU / SFU / sorter cycles and memory commands the unit reports, so that a 32K
 * or 128K prompt can be priced without emulating it (tests/fpga/test_xattn_card.c checks it
 * equals the emulator's counts run for run).
 *
 * Memory time is priced as the prefill kernel lays the blocks out (striped over the 32
 * pseudo-channels, flex_kernel.h): the busiest channel's share of the bytes and commands.
 *
 * Threads: pure functions. */
#ifndef TANDEM_FPGA_XATTN_MODEL_H
#define TANDEM_FPGA_XATTN_MODEL_H
#include "fpga/kernels/xattn_kernel.h"
#include <stdint.h>

typedef struct fpga_xattn_cost {
    uint64_t cycles;                  /* compute cycles (MPU/SFU per query block + sorter) */
    uint64_t mpu_cycles, sfu_cycles;  /* their sums, separately */
    uint64_t read_bytes, read_cmds;   /* q blocks and K halves */
    uint64_t write_bytes, write_cmds; /* the CSR */
    uint64_t macs;                    /* int8 MACs of the scoring */
    double compute_ns, mem_ns, ns;    /* cycles at 225 MHz; striped memory; the run (50 us
                                         overhead + the larger) */
} fpga_xattn_cost;

/* The unit over an n-token sequence's query blocks [q0, nb): nnz = the CSR's entries (the
 * selection's result: what is written depends on it; pass the run's, or an estimate). */
void fpga_xattn_model(uint32_t n, uint32_t q0, uint32_t n_heads, uint32_t n_kv_heads,
                      uint32_t head_dim, const fpga_xattn_params *p, uint64_t nnz,
                      fpga_xattn_cost *out);

/* Dense causal attention of query rows [r0, n) over keys [0, n) on the same MPU / SFU: the
 * prefill kernel's DENSE attention (fpga/kernels/prefill.c chunk_attention: 2 d MACs and one
 * exponential per (query, key, head)) in cycles, without its memory: the yardstick the
 * estimator's cost is compared with. */
uint64_t fpga_xattn_dense_attn_cycles(uint32_t n, uint32_t r0, uint32_t n_heads, uint32_t head_dim);

#endif
