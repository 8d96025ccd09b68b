/* fpga/card.h — one U280 (real or emulated) as the decode backend drives it: the XRT objects
 * of the bank plan (fpga/BANKS.md), the weight upload, decode runs and KV import pieces.
 *
 * Objects: 32 bank BOs (DEV_ONLY, one per pseudo-channel, each 256 MiB minus a reserve at the
 * top): image at the bottom, KV pool above (sequence slabs and prefill workspaces). In the
 * reserves: the io BO (HBM[0]: step input, status, logits) and 2 x 4 staging BOs (HBM[1..8],
 * host-visible, mapped) through which the weights are uploaded (kv_gather copies) and KV is
 * imported (kv_scatter). One run handle per kernel use, its buffer arguments set once.
 *
 * Import pipeline: fpga_card_scatter() fills one staging group, syncs it and starts a scatter
 * run without waiting; the next piece uses the other group, so the copy and the PCIe transfer
 * of piece i+1 overlap the kernel reordering piece i. A group is waited for (and its CRC report
 * checked) before it is refilled, by fpga_card_drain(), or before a decode run. When a run of
 * positions is complete, fpga_card_check() has kv_check read every layer of it back from the
 * tiles and report the CRC32C of each layer's wire payload (the backend compares it with the
 * producer's).
 *
 * Errors: ACCEL_* statuses; messages in err where given, else fpga_xrt_error(). A run that
 * does not complete within timeout_ms returns ACCEL_ERR_TIMEOUT and is remembered: if it is
 * still in flight at the next call that would wait for it or start a run the card is stuck
 * (ACCEL_ERR_DEVICE) — an import piece's as well as a decode, prefill, check or copy run's.
 * Threads: one thread drives a card (the device's). */
#ifndef TANDEM_FPGA_CARD_H
#define TANDEM_FPGA_CARD_H
#include "fpga/image_cache.h"
#include "fpga/kernels/pf_layout.h"
#include "fpga/kernels/tls_dec.h"
#include "fpga/xrt_load.h"
#include "proto/kv.h"

#define FPGA_CARD_GROUPS 2
#define FPGA_CARD_STAGE_BYTES (1u << 20) /* per slot: a 4 MiB piece over 4 channels (BANKS.md) */
#define FPGA_CARD_BATCH_IO (8u << 20)    /* the batched decode's io records at most */

typedef struct fpga_card_pending {
    int busy;
    int timed_out; /* a wait on it timed out: still running at the next, the card is stuck */
    void *owner; /* the sequence the piece belongs to (the backend's) */
    uint32_t layer, pos0, n, nslots;
    uint32_t crc[FPGA_DEC_STAGE_SLOTS];
} fpga_card_pending;

typedef struct fpga_card {
    fpga_xrt *x;
    xrtDeviceHandle dev;
    int emu;
    unsigned timeout_ms;
    fpga_dec_desc desc;
    fpga_dec_layout lo;
    xrtKernelHandle k_dec, k_sc, k_gather, k_check;
    xrtKernelHandle k_pf; /* tandem_prefill, NULL when the xclbin has none */
    xrtKernelHandle k_decb; /* tandem_decode_batch, NULL when the xclbin has none */
    xrtRunHandle r_decb;
    int max_batch;          /* sequences one batched run takes (1: no batched kernel); as many
                               records as FPGA_CARD_BATCH_IO holds, at most FPGA_DEC_MAX_BATCH,
                               capped by $TANDEM_FPGA_BATCH */
    xrtBufferHandle bank[FPGA_DEC_CH], io;
    xrtBufferHandle stage[FPGA_CARD_GROUPS][FPGA_DEC_STAGE_SLOTS];
    uint8_t *stage_host[FPGA_CARD_GROUPS][FPGA_DEC_STAGE_SLOTS];
    xrtRunHandle r_dec, r_sc[FPGA_CARD_GROUPS], r_gather[FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS];
    xrtRunHandle r_pf;
    xrtRunHandle r_check; /* kv_check, its report in staging slot [0][0] */
    int gather_busy[FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS];
    /* a copy run (fpga_card_copy_bank) that timed out: its caller's tag for the destination the
     * run may still write (0: none), handed to on_copy_landed(copy_arg, tag) when the card sees
     * the run finished; never on close (the caller frees what the tag names with its own state) */
    uint64_t gather_tag[FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS];
    void (*on_copy_landed)(void *arg, uint64_t tag);
    void *copy_arg;
    uint64_t bank_bytes, io_bytes;
    fpga_card_pending pend[FPGA_CARD_GROUPS];
    int next_group;
    /* the owner of a piece that failed, as the read / copy / write calls' drain finds it (set by
     * the backend; NULL: such a failure is returned to the caller) */
    void (*on_fail)(void *owner, int st);
    int piece_limit;   /* 0, or fewer positions per import piece (tests: many pieces) */
    int dec_in_flight; /* a decode run timed out and may still be running */
    int pf_in_flight;  /* the same for a prefill run */
    int check_in_flight; /* and for a kv_check run */
    /* timing model (emulator only; zeros on a real card) */
    fpga_emu_run_stats last_dec, last_decb;
    uint64_t decb_runs, decb_seqs, decb_modeled_ns;
    uint64_t dec_runs, dec_modeled_ns, sc_runs, sc_modeled_ns;
    /* the next fpga_card_step's selection table (fpga_card_select), consumed by that step */
    const uint32_t *sel;
    uint32_t sel_cap;
    /* the next fpga_card_step's AsyncTLS arena (0: none) and summarized positions: set by the
     * caller after writing the parameters into io (fpga/kernels/tls_dec.h), consumed by it */
    uint64_t tls_off;
    uint32_t tls_upto;
    /* the next fpga_card_step's or fpga_card_check's KV is in the DDR4 (1) or host memory (2)
     * pool (set by the caller, consumed by it; fpga/kernels/dec_layout.h FPGA_DEC_TIER_*) */
    uint32_t kv_tier;
    /* the two DDR4 banks, one BO of FPGA_DEC_DDR_BO_BYTES each, and the host memory BO
     * (FPGA_DEC_HOST_BO_BYTES, HOST[0]) */
    xrtBufferHandle ddr[3];
    fpga_emu_run_stats last_pf;
    uint64_t pf_runs, pf_modeled_ns, gather_runs, gather_modeled_ns, check_runs, check_modeled_ns;
    uint64_t pf_par_jobs;  /* prefill runs' fpga_k_parallel jobs the emulator's threads took */
    uint64_t sc_par_jobs;  /* the same, the import's kv_scatter runs' */
    uint64_t ck_par_jobs;  /* the same, its kv_check runs' */
} fpga_card;

/* Loads the XRT library lib (NULL: the default), opens device `index`, loads `xclbin` if given
 * (else uses the one on the card), opens the kernels and allocates every BO for image layout
 * lo. 0, or a status with a message. On failure the card is closed. */
int fpga_card_open(fpga_card *c, const char *lib, unsigned index, const char *xclbin,
                   const fpga_dec_desc *d, unsigned timeout_ms, char *err, size_t errlen);
void fpga_card_close(fpga_card *c);

/* Copies the image (32 sections) into the bank BOs through the staging slots. */
int fpga_card_upload(fpga_card *c, const uint8_t *image, char *err, size_t errlen);

/* The KV pool every bank BO offers: [pool_lo, pool_hi). */
uint64_t fpga_card_pool_lo(const fpga_card *c);
uint64_t fpga_card_pool_hi(const fpga_card *c);

/* One decode run: step input (x0: hidden floats, cs/sn: head_dim/2 each), then logits
 * (vocab floats) read back. The KV: n_ids 0, a slab at kv_off of part_tiles tiles per part;
 * else the block table ids[0..n_ids) into the pool at kv_off, part_tiles then being the tiles of
 * one part in one block (fpga/kernels/dec_layout.h, "KV pages"). */
int fpga_card_step(fpga_card *c, const float *x0, const float *cs, const float *sn,
                   uint32_t token, uint32_t pos, uint64_t kv_off, uint32_t part_tiles,
                   const uint32_t *ids, uint32_t n_ids, float *logits);

/* The next fpga_card_step attends per (layer, KV head) only the positions `table` lists
 * (fpga/kernels/dec_layout.h: fpga_dec_io_sel_off; n_layers x n_kv_heads lists of cap + 1 u32);
 * the table is the caller's until that step returns. ACCEL_ERR_INVALID when it does not fit
 * the io BO. */
int fpga_card_select(fpga_card *c, const uint32_t *table, uint32_t cap);

/* One sequence of a batched decode run. */
typedef struct fpga_card_bseq {
    const float *x0, *cs, *sn; /* step input, as fpga_card_step's */
    uint32_t token, pos;
    const uint32_t *ids;       /* its block table */
    uint32_t n_ids;
    /* AsyncTLS (tls_off not 0): its arena, the positions summarized and the run's parameters
     * (in HBM, no report; fpga/kernels/tls_dec.h); tls_back: where the run's counts go */
    uint64_t tls_off;
    uint32_t tls_upto;
    const fpga_tls_io *tls;
    fpga_tls_io *tls_back;
} fpga_card_bseq;
/* One run of the batched kernel over n <= max_batch paged sequences (fpga/kernels/
 * decode_batch.c): the records into io, the run, every sequence's logits (n x vocab floats)
 * read back after its record says it is done. */
int fpga_card_step_batch(fpga_card *c, int n, const fpga_card_bseq *q, uint64_t kv_off,
                         uint32_t blk_tiles, float *logits);

/* Starts importing positions [t0, t0 + n) of chunk ch (int8) into the slab at kv_off (paged 0)
 * or, paged, into the n_ids (1..FPGA_DEC_SCATTER_IDS) blocks ids[] of the pool at kv_off that
 * the positions span, the first holding position (ch->pos0 + t0) / T * T; n must be at most
 * fpga_card_piece_tokens(). One kernel run a piece. Waits for the older piece of the same
 * staging group first (its status is returned, with *failed_owner set to its owner, if it
 * failed). */
int fpga_card_scatter(fpga_card *c, const proto_kv_layer *ch, int t0, int n, uint64_t kv_off,
                      uint32_t part_tiles, int paged, const uint32_t *ids, uint32_t n_ids,
                      void *owner, void **failed_owner);
int fpga_card_piece_tokens(const fpga_card *c);
/* 1 when an int8 chunk keeps proto/kv.h's rules (values -127..127, scales finite and not
 * negative, every array there): what the host checks before shipping it. */
int fpga_card_chunk_valid(const proto_kv_layer *c);
/* The most positions one import piece carries for a model (FPGA_DEC_STAGE_SLOTS slots of
 * FPGA_CARD_STAGE_BYTES, less the tail: block table and report). */
int fpga_card_piece_tokens_for(const fpga_dec_desc *d);
/* Waits for every piece in flight. The gravest failure's status is returned and its owner put
 * in *failed_owner: a failed run over a timeout over corrupt bytes, the oldest of equals (every
 * piece is waited for; the other failing owners are reported through on_fail, which may be
 * NULL). A timeout is never hidden behind a corrupt piece: the card may still be writing. */
int fpga_card_drain(fpga_card *c, void **failed_owner, void (*on_fail)(void *owner, int st));
/* The sequence `owner` is gone: no piece in flight names it any more (one that timed out may
 * still finish, and its failure then has no one to mark). */
void fpga_card_forget(fpga_card *c, void *owner);

/* Checks what landed: a kv_check run over positions [pos0, pos0 + n) of every layer of the slab
 * at kv_off (n_ids 0) or of the sequence whose block table is ids[0..n_ids) (paged), after draining the import pieces in flight (their status is returned first, as by
 * fpga_card_drain, *failed_owner set). On 0, crc[l] is the CRC32C of the wire payload that layer
 * l's tiles hold for those positions (proto/KV_FORMAT.md), crc having n_layers entries. A run
 * that ends without its report is ACCEL_ERR_DEVICE. */
int fpga_card_check(fpga_card *c, uint32_t pos0, uint32_t n, uint64_t kv_off, uint32_t part_tiles,
                    const uint32_t *ids, uint32_t n_ids, uint32_t *crc, void **failed_owner);

/* Reads n bytes at off of bank BO ch as the card sees them (a kv_gather run into a staging
 * slot): for tests of what the kernels read, and the prefill's results. Drains first: these
 * three calls return a timed-out or failed piece's status, but a corrupt piece is its owner's
 * (on_fail), not the caller's. */
int fpga_card_read_bank(fpga_card *c, int ch, uint64_t off, void *dst, size_t n);
/* Copies n bytes inside bank BO ch from src_off to dst_off (a kv_gather run: copy-on-write of a
 * KV block). Drains first. tag (not 0): the caller's name for the destination; when the copy
 * run itself times out the card keeps it (fpga_card_copy_kept says so) and hands it to
 * on_copy_landed once it sees the run finished: until then the run may still write there. On
 * any other return the destination is the caller's again. */
int fpga_card_copy_bank(fpga_card *c, int ch, uint64_t src_off, uint64_t dst_off, size_t n,
                        uint64_t tag);
/* 1 when a timed-out copy run the card has not yet seen finish holds tag. */
int fpga_card_copy_kept(const fpga_card *c, uint64_t tag);
/* Writes n bytes at off of bank BO ch (staging slots + kv_gather runs, pipelined over the
 * slots as the weight upload is). Drains first. */
int fpga_card_write_bank(fpga_card *c, int ch, uint64_t off, const void *src, size_t n);

/* ---------------------------------------------------------------- prefill (pf_layout.h) */

/* 1 when the xclbin has the prefill kernel and the model's io block has room for its records. */
int fpga_card_can_prefill(const fpga_card *c);
/* Writes the sparse units' parameters into io (read by the next ATTN runs). */
int fpga_card_pf_params(fpga_card *c, const fpga_pf_params *p);
/* One prefill run (arguments as fpga/kernels/prefill.c takes them): starts it, waits, checks the
 * status record it leaves in io. */
int fpga_card_pf_run(fpga_card *c, uint32_t mode, uint32_t layer, uint32_t pos0, uint32_t n,
                     uint32_t r0, uint32_t r1, uint64_t kv_off, uint32_t part_tiles,
                     uint64_t ws_off, uint32_t n_ids);
/* A paged sequence's block table into io, for the prefill runs that follow with n_ids > 0. */
int fpga_card_pf_table(fpga_card *c, const uint32_t *ids, uint32_t n_ids);
/* The report of the last ATTN run. */
int fpga_card_pf_report(fpga_card *c, fpga_pf_report *r);
/* The logits the last HEAD (or decode) run left in io (vocab floats). */
int fpga_card_logits(fpga_card *c, float *logits);
/* n bytes of the io BO at off, to / from the card (ACCEL_ERR_INVALID outside it). */
int fpga_card_io_write(fpga_card *c, uint64_t off, const void *src, uint64_t n);
int fpga_card_io_read(fpga_card *c, uint64_t off, void *dst, uint64_t n);

#endif
