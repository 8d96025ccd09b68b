/* fpga/tls_card.h — AsyncTLS sparse decode on a card, the host's part (issue 23): the device's
 * parameters and calibrated channels (the daemon's decode_sparse key, as the CPU backend reads
 * it), each sequence's summary arena in the pool, and what a decode step hands the kernel
 * (fpga/kernels/tls_dec.h says what the card does with it).
 *
 * Threads: the card's driving thread. Errors: ACCEL_* statuses. */
#ifndef TANDEM_FPGA_TLS_CARD_H
#define TANDEM_FPGA_TLS_CARD_H
#include "fpga/card.h"
#include "fpga/kv_pool.h"
#include "fpga/kernels/tls_dec.h"
#include "model/ckpt/model.h"
#include "model/ckpt/tls_channels.h"
#include "scheduler/accel.h"
#include "sparse/tls.h"

typedef struct fpga_tls {
    int on;     /* new sequences decode sparse with p (the device's decode_sparse) */
    int avail;  /* the channel file is loaded: accel_seq_decode_sparse can turn it on */
    int report; /* tests: each step reports its selections and queries into io */
    sparse_tls_params p; /* the device's: block_size, channels, dense_layers (and default budgets) */
    model_channels ch;
} fpga_tls;

/* accel_opts.decode_sparse (or $TANDEM_DECODE_SPARSE) and the channel file next to the model
 * (or accel_opts.sparse_channels). 0, or -1 with the reason in err (a spec the card's units
 * cannot take included: head_dim above 256, more than 16 query heads per KV head). Off: a
 * usable channel file still makes it available per sequence, as on the CPU. */
int fpga_tls_open(fpga_tls *t, const model *m, const accel_opts *o, char *err, size_t errlen);
void fpga_tls_close(fpga_tls *t);

/* 1 when a sequence's budgets fit the card's selection unit (TLS_K_MAX_CAND candidates). */
int fpga_tls_budgets_ok(const sparse_tls_params *p);

/* The run's parameters for a sequence of cap positions with p: stagger (AsyncTLS's staggered
 * pipeline in HBM) or offload (the KV in DDR4, a resident cache in the arena; implies stagger). */
void fpga_tls_io_of(const fpga_tls *t, const sparse_tls_params *p, uint32_t cap, int stagger,
                    int offload, fpga_tls_io *io);
/* Writes the calibrated channels into a fresh arena at off (every bank BO). */
int fpga_tls_arena_init(fpga_card *c, const fpga_tls *t, const fpga_tls_io *io, uint64_t off);
/* The next fpga_card_step runs AsyncTLS: the parameters into io, the arena and the positions
 * already summarized (upto) for the kernel. */
int fpga_tls_prepare(fpga_card *c, const fpga_tls *t, const fpga_tls_io *p, uint64_t off,
                     uint32_t upto);
/* A sequence's arena: pool superblocks [first, first + k) (k 0: none yet), sized for key. */
typedef struct fpga_tls_arena_ref {
    int first, k;
    uint64_t key;
} fpga_tls_arena_ref;
/* A sequence's next step with AsyncTLS: its arena (taken on its first sparse step, or when the
 * budgets or the mode changed, from the pool's free superblocks at kv_base: its channels
 * written, *upto reset to 0 and io->reset set; ACCEL_ERR_NOMEM when the pool has none: the
 * step runs dense), then fpga_tls_prepare with io. */
int fpga_tls_seq_prepare(fpga_card *c, const fpga_tls *t, fpga_tls_io *io, fpga_kv_pool *pool,
                         uint64_t kv_base, uint64_t super_bytes, fpga_tls_arena_ref *ar,
                         uint32_t *upto);
/* Its arena only (as above), its offset into *off: a batched run carries io in the record. */
int fpga_tls_seq_arena(fpga_card *c, const fpga_tls *t, fpga_tls_io *io, fpga_kv_pool *pool,
                       uint64_t kv_base, uint64_t super_bytes, fpga_tls_arena_ref *ar,
                       uint32_t *upto, uint64_t *off);
/* After an AsyncTLS step: the keys it attended and the keys the rows held (every layer and KV
 * head), and with the pipeline the level-1 blocks made resident and chosen (sparse groups). */
typedef struct fpga_tls_step_counts {
    uint64_t keys_read, keys_total, fetched, chosen;
} fpga_tls_step_counts;
int fpga_tls_step_read(fpga_card *c, fpga_tls_step_counts *out);
/* What accel_info says of the DDR4 tier (scheduler/accel.h: offload_bytes, resident_*), for a
 * card with ddr_bytes free in its DDR4 pool: the arena's arithmetic (fpga/kernels/tls_dec.h)
 * per position and per block of the budget at the device's parameters. Nothing when the card
 * cannot decode sparse from a resident cache (no channel file, a shape that does not fill the
 * channels). */
void fpga_tls_offload_info(const fpga_tls *t, const fpga_dec_desc *d, uint64_t ddr_bytes,
                           accel_info *out);
/* The counts a run wrote back into io (a batched record's). */
void fpga_tls_counts_of(const fpga_tls_io *io, fpga_tls_step_counts *out);
/* Tests (t->report set): the last step's selections (n_layers x n_kv lists of token_budget + 1
 * u32, count FPGA_DEC_SEL_DENSE for a dense one) and queries (n_layers x n_heads x head_dim). */
int fpga_tls_read_report(fpga_card *c, const sparse_tls_params *p, uint32_t *table, float *q);

#endif
