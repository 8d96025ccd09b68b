/* fpga/tls_model.h — what AsyncTLS sparse decode (sparse/tls.h, sparse/tls_pipe.h) would cost on a
 * U280 with the sequence's full KV in the card's DDR4 and a resident cache of selected blocks in
 * HBM, priced with the decode kernel's own timing model (fpga/dec_model.h). A model, not a
 * kernel: no card kernel runs the selection yet.
 *
 * Per token: the decode run attends token_budget positions (fpga_dec_model_step at that length:
 * weights, the attention reads, the kernel's stalls); the selection reads each group's level-1
 * summaries (fp16 max and min per block and channel) and the int4 labels of the kept blocks'
 * tokens (r/2 bytes + fp16 min and step each) from HBM, spread over the 32 pseudo-channels, as a
 * second run; the staggered pipeline fetches the blocks whose selection changed (fetch_frac of
 * the block budget per group, measured on a workload with sparse_tls_pipe) from DDR4 while the
 * step runs, so the step costs the longer of the two.
 *
 * Threads: pure functions. */
#ifndef TANDEM_FPGA_TLS_MODEL_H
#define TANDEM_FPGA_TLS_MODEL_H
#include "fpga/dec_model.h"

/* U280: two DDR4-2400 banks of 16 GB, 19.2 GB/s peak each (fpga/xrt/u280.h, DS963). */
#define FPGA_U280_DDR4_BYTES (FPGA_U280_DDR_BANKS * FPGA_U280_EXT_BANK_BYTES)
#define FPGA_U280_DDR4_PEAK_GBPS (FPGA_U280_DDR_BANKS * FPGA_U280_DDR_BPS / 1e9)

typedef struct fpga_tls_model_in {
    uint32_t context;      /* positions in the KV */
    uint32_t token_budget, block_size, block_budget, channels;
    double fetch_frac;     /* blocks fetched per group step / block_budget */
    double ddr_eff;        /* achieved fraction of the DDR4 peak (0: 0.8) */
} fpga_tls_model_in;

typedef struct fpga_tls_cost {
    double attend_ns, select_ns, fetch_ns;
    double modeled_ns;     /* attend + select, or the fetch when it is longer */
    double dense_ns;       /* the dense run over the whole context, as if its KV fitted in HBM */
    uint64_t kv_bytes;     /* the sequence's int8 KV (+ scales): what lives in DDR4 */
    uint64_t resident_bytes; /* the HBM cache: block_budget + 1 blocks per group, + summaries and
                                labels of every position */
    uint64_t fetch_bytes;  /* per token from DDR4 */
} fpga_tls_cost;

void fpga_tls_model_step(const fpga_dec_desc *d, const fpga_tls_model_in *in, fpga_tls_cost *out);

#endif
