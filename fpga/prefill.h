/* fpga/prefill.h — the host side of a prefill on a card: FAST-Prefill's global FSM, driving
 * the prefill kernel (fpga/kernels/prefill.c) layer by layer over a pass of prompt rows.
 *
 * A job appends n tokens to a sequence whose KV (a slab, or a block table) already holds pos0
 * positions, using a workspace at ws_off laid out for up to ws_rows rows with ws_flags
 * (fpga/kernels/pf_layout.h). Dense: passes of at most ws_rows rows; per pass the host writes
 * the rows' embeddings (looked up in the mapped checkpoint, as for decode) and rotary angles into
 * the workspace, runs DENSE for every layer, then HEAD for the rows whose logits are wanted.
 * Sparse (a whole prompt, or a chunk after pos0 cached positions on a 128-row boundary; the
 * workspace laid out for pos0 + n rows with FPGA_PF_F_SPARSE | FPGA_PF_F_KVF, its rows the
 * sequence's positions): per layer QKV, ATTN (the index of the method in params — the SIGU's,
 * or xattn_est's —, the SAU's attention over the chunk's rows; its report read back), POST. With a KV sink, each layer's K/V of the pass are read
 * back from the workspace's kvf blocks after that layer's run and handed out as one int8 wire
 * chunk (the same values and scales the card's tiles hold).
 *
 * Ownership: the job's buffers are the caller's; nothing is kept after the call.
 * Threads: the card's driving thread. Errors: ACCEL_* statuses: a card call's, or (with
 * res->host_status set to it) a sink's non-zero return, ACCEL_ERR_CANCELLED between layers,
 * ACCEL_ERR_NOMEM for host buffers, ACCEL_ERR_INVALID for a job the workspace cannot take. */
#ifndef TANDEM_FPGA_PREFILL_H
#define TANDEM_FPGA_PREFILL_H
#include "fpga/card.h"
#include "model/ckpt/model.h"
#include "scheduler/accel.h"

typedef struct fpga_pf_job {
    const model *m;
    const int32_t *ids;
    int n;
    uint32_t pos0; /* positions pos0 .. pos0 + n - 1 */
    int rope_len;  /* dynamic RoPE: the sequence length transformers scales by */
    uint64_t kv_off;
    uint32_t part_tiles;
    const uint32_t *kv_ids; /* paged: the block table (n_ids > 0) into the pool at kv_off, whose
                              blocks have part_tiles tiles per part (card.h: fpga_card_step) */
    uint32_t n_ids;
    uint64_t ws_off;
    uint32_t ws_rows, ws_flags;
    uint32_t run_rows;     /* rows per QKV / POST / DENSE run (0: FPGA_PF_RUN_ROWS; a multiple
                              of FPGA_PF_CHUNK) */
    int sparse;            /* the sparse path (ws laid out for pos0 + n rows) */
    fpga_pf_params params; /* sparse: the units' parameters */
    float *logits;         /* (n, vocab) if all_logits, else (vocab) of the last row; may be NULL */
    int all_logits;
    const accel_kv_sink *kv;
    const volatile int *cancel;
} fpga_pf_job;

/* What the job did, summed over its layers. */
typedef struct fpga_pf_result {
    int layers_sparse, n_query_aware;
    int64_t blocks_computed, blocks_causal;
    uint64_t accesses, hits, hot_hits, cold_hits, misses, kv_bytes, kv_bytes_nocache;
    uint64_t runs;       /* prefill kernel runs */
    uint64_t modeled_ns; /* their modeled time (emulator; 0 on a real card) */
    int host_status;     /* the failure came from the sink, the cancel flag or host memory
                            (not from the card): its status, else 0 */
} fpga_pf_result;

int fpga_pf_prefill(fpga_card *c, const fpga_pf_job *j, fpga_pf_result *res);

/* The sparse units' parameters for a prefill call of r->n tokens after pos0 cached ones: 1 (into
 * p), or 0 when it runs dense. The method the scheduler settled (sparse/sparse.h) mapped onto
 * the units: FlexPrefill (the SIGU), XAttention with 128-token blocks and Tri-shape
 * (xattn_est.c) for a whole prompt or a chunk after cached positions on a block boundary
 * (FlexPrefill: the chunk at least a block, the sequence two); all within the units' bounds
 * (flex_kernel.h, xattn_kernel.h).
 * Anything else runs dense, and the report says so (density 1). */
int fpga_pf_sparse_params(const fpga_dec_desc *desc, int pos0, const accel_prefill_req *r,
                          fpga_pf_params *p);

#endif
