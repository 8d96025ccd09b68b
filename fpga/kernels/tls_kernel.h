/* fpga/kernels/tls_kernel.h — the card's AsyncTLS kernels (fpga/kernels/tls_select.c says what
 * each argument is). */
#ifndef TANDEM_FPGA_TLS_KERNEL_H
#define TANDEM_FPGA_TLS_KERNEL_H
#include "fpga/kernels/kernel.h"

void tls_select(const uint8_t *data, uint8_t *out, uint64_t q_off, uint64_t ch_off,
                uint64_t summ_off, uint64_t code_off, uint64_t lmin_off, uint64_t lstep_off,
                uint32_t n_keys, uint32_t head_dim, uint32_t G, uint32_t r, uint32_t block_size,
                uint32_t block_budget, uint32_t token_budget);
extern const fpga_k_desc fpga_k_tls_select_desc;

#endif
