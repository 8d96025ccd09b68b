/* fpga/backend_impl.h — the FPGA device's and its sequences' state, shared by the backend's own
 * files only: fpga/backend.c (open, decode, prefill, import) and fpga/seq.c (a sequence's
 * blocks: growth, copy-on-write, fork, truncation, the host tier's block save / load, its end).
 * Nothing outside fpga/ includes it; the rest of the process sees fpga/backend.h.
 * Threads: the device's (scheduler/accel.h), as every entry point of the backend. */
#ifndef TANDEM_FPGA_BACKEND_IMPL_H
#define TANDEM_FPGA_BACKEND_IMPL_H
#include "fpga/backend.h"
#include "fpga/dec_model.h"
#include "fpga/kv_pool.h"
#include "fpga/tls_card.h"
#include "scheduler/accel_impl.h"

typedef struct fpga_seq {
    struct accel_seq base;
    uint32_t *ids;      /* the block table: ids[i] holds positions [i * T, (i + 1) * T) */
    int n_ids, cap_ids; /* blocks taken; the most the capacity needs */
    int failed;         /* an import of it failed: its KV cannot be trusted */
    uint32_t *run_crc;  /* (n_layers) the wire payload CRC of each layer of the run of positions
                           being imported: what kv_check must find once the run is complete */
    int tls_on;         /* AsyncTLS on (accel_seq_decode_sparse, or the device's default) */
    sparse_tls_params tls_p;   /* with these parameters */
    fpga_tls_arena_ref tls_ar; /* the summary arena's superblocks (k 0: none yet) */
    uint32_t tls_upto;         /* positions its summaries hold */
    int tier;                  /* offloaded: ids are blocks of the DDR4 (1) or host memory (2) pool
                                  (fpga/BANKS.md "DDR4"); 0: HBM's */
    uint32_t pipe_len;         /* the length after its last pipelined AsyncTLS step (0: none): the
                                  next step continues the pipeline only at exactly that position */
    int64_t tls_fetched, tls_chosen;        /* level-1 blocks made resident / chosen (pipeline) */
    int64_t tls_read, tls_total, tls_steps; /* accel_seq_decode_stats since it was turned on */
} fpga_seq;

typedef struct fpga_dev {
    struct accel_dev base;
    fpga_card card;
    fpga_tls tls; /* AsyncTLS sparse decode (decode_sparse), off unless configured */
    int index, emu;
    fpga_quant_opts q;
    char qstr[256];
    int image_cached;
    int model_held; /* fpga_image_hold(m) succeeded: dropped when the device goes */
    char image_path[1100];
    float *inv_freq, *x0, *cs, *sn, *scratch_logits;
    float *bx0, *bcs, *bsn;  /* the batched step's inputs: max_batch rows of x0, cos, sin */
    uint32_t *check_crc;     /* (n_layers) kv_check's report */
    uint64_t landed_corrupt; /* imports whose KV changed after the producer's CRC (kv_check) */
    fpga_kv_pool kv;         /* the KV pool's block ids (fpga/kv_pool.h) */
    fpga_kv_pool ddr_kv;     /* the DDR4 pool's (offloaded sequences), same geometry at offset 0 */
    fpga_kv_pool host_kv;    /* the host memory pool's, past DDR4 */
    int has_ddr;             /* both pools exist */
    int tier;                /* TANDEM_FPGA_KV_TIER: 0 auto, 1 DDR4 whenever possible, 2 HBM only,
                                3 host memory whenever possible */
    int stagger;         /* TANDEM_FPGA_TLS_STAGGER=1: every in-HBM sequence pipelines AsyncTLS */
    uint64_t kv_base;    /* where the pool's superblocks start in every channel */
    fpga_dec_kvmap geo;  /* the pool's geometry (ids NULL): block size, group, strides */
    uint32_t blk_tokens; /* T: positions per block */
    uint64_t pool_lo, pool_hi;
    int can_prefill;    /* the prefill kernel and its standing workspace are there */
    uint64_t pf_ws_off; /* the standing workspace: FPGA_PF_PASS rows, FPGA_PF_F_KVF */
    uint32_t pass_rows; /* rows per dense pass: FPGA_PF_PASS (tests: fewer) */
    uint32_t run_rows;  /* rows per kernel run: FPGA_PF_RUN_ROWS (tests: fewer) */
    fpga_pf_result last_pf;
    fpga_pf_job last_job;     /* for tests: where the last prefill's workspace was */
    accel_decode_curve curve; /* the decode cost by batch (fpga_dec_model_curve), set at open */
} fpga_dev;

/* ---------------------------------------------------------------- fpga/backend.c */

/* A card status as the accel interface reports it (a timeout degrades the device; a failure of
 * what the backend built is a device failure: ACCEL_ERR_DEVICE). */
int fpga_dev_status(fpga_dev *d, int st);
/* A card's on_fail: the sequence `owner` (may be NULL) is marked failed. */
void fpga_seq_mark_failed(void *owner, int st);

/* ---------------------------------------------------------------- fpga/seq.c */

/* The pool s's block ids are from. */
fpga_kv_pool *fpga_seq_pool(fpga_dev *d, const fpga_seq *s);
/* Positions [pos0, pos0 + n) of s are about to be written: the blocks they fall in are taken
 * and a shared one is replaced by a private copy. All or nothing on ACCEL_ERR_NOMEM. */
int fpga_seq_grow(fpga_dev *d, fpga_seq *s, int pos0, int n);
/* ACCEL_ERR_NOMEM, before anything is taken, when the pools cannot give the blocks (fresh or
 * copied) that n sequences' next cnt positions need; else ACCEL_OK. */
int fpga_seq_room(fpga_dev *d, int n, accel_seq *const *seqs, int cnt);
/* The map the kernels get for s (m->ids points into s). */
void fpga_seq_map(const fpga_dev *d, const fpga_seq *s, fpga_dec_kvmap *m);
/* The card's on_copy_landed (arg: the device): a timed-out copy-on-write copy has finished, and
 * the destination block it kept out of the pool goes back. */
void fpga_seq_copy_landed(void *arg, uint64_t tag);

/* The accel_dev_i entries (scheduler/accel_impl.h) for sequences. */
int fpga_seq_new(accel_dev *ad, int capacity, accel_seq **out);
void fpga_seq_free(accel_dev *ad, accel_seq *as);
int fpga_seq_fork(accel_dev *ad, accel_seq *asrc, int n_tokens, int capacity, accel_seq **out);
int fpga_seq_truncate(accel_dev *ad, accel_seq *as, int len);
int fpga_seq_hold(accel_dev *ad, accel_seq *as);
void fpga_kv_usage(accel_dev *ad, int *total, int *used, int *cached);
int fpga_kv_block_save(accel_dev *ad, accel_seq *as, int block, void *dst);
int fpga_kv_block_load(accel_dev *ad, accel_seq *as, const void *src);

#endif
