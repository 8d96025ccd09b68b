/* scheduler/accel_impl.h — what a backend implements (the ggml-backend idea, in our names).
 * Only backends and scheduler/accel.c include this. Each backend declares its own constructor
 * in its own header (cpu/backend.h, fpga/backend.h, gpu/plugin.h); only the composition root
 * (devices/) calls them.
 *
 * A backend embeds `struct accel_dev` as the first member of its device struct and
 * `struct accel_seq` as the first member of its sequence struct. The wrappers in accel.c do the
 * shared work: argument bounds, memory reservation (capacity * kv_bytes_per_token against
 * mem_total; on a paged device (ACCEL_CAP_PAGED) the backend's block pool does the accounting
 * instead, capped at mem_total / kv_block_bytes blocks), sequence length bookkeeping, the sticky FAILED state, and NULL checks of optional
 * entries. */
#ifndef TANDEM_ACCEL_IMPL_H
#define TANDEM_ACCEL_IMPL_H
#include "scheduler/accel.h"
#include <stdatomic.h>

struct accel_dev_i {
    void (*free)(accel_dev *d);
    /* Fill name/desc/kind/caps/max_batch (memory and health are filled by the wrapper). */
    void (*describe)(accel_dev *d, accel_info *out);
    /* Allocate a sequence for `capacity` positions (memory already reserved by the wrapper). */
    int (*seq_new)(accel_dev *d, int capacity, accel_seq **out);
    void (*seq_free)(accel_dev *d, accel_seq *s);
    /* Tokens r->ids go at positions s->len ..; the wrapper advances s->len on success. */
    int (*prefill)(accel_dev *d, const accel_prefill_req *r);
    /* The wrapper advances each seq's len on success. */
    int (*decode)(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids, float *logits);
    /* optional */
    int (*kv_import)(accel_dev *d, accel_seq *s, const proto_kv_layer *chunk);
    int (*warmup)(accel_dev *d);
    int (*seq_truncate)(accel_dev *d, accel_seq *s, int len);
    void *(*host_alloc)(accel_dev *d, size_t bytes); /* page-locked host memory (NULL: malloc) */
    void (*host_free)(accel_dev *d, void *p);
    /* optional: kv_import with the producer's payload CRC (accel_kv_import_crc), for a device
     * that verifies what landed in its memory; NULL: kv_import, the CRC unused. Last, so that
     * the entries above keep their places for the cuda plugin (built from the same tree) */
    int (*kv_import_crc)(accel_dev *d, accel_seq *s, const proto_kv_layer *chunk, uint32_t crc);
    /* optional: a new sequence of `capacity` positions whose first n_tokens positions share
     * src's KV blocks (reference counts; a shared partial block is copied by whichever side
     * writes into it first). The wrapper has checked 0 <= n_tokens <= src->len,
     * n_tokens <= capacity <= the model's context, reserved the memory (not paged) and sets len
     * = n_tokens and capacity. (capacity was added in issue 20: a prefix-cache holder is forked
     * at its own length and its forks take the capacity of the request that reuses it.) NULL: accel_seq_fork answers ACCEL_ERR_UNSUPPORTED.
     * Appended last, like kv_import_crc, for the same reason. */
    int (*seq_fork)(accel_dev *d, accel_seq *src, int n_tokens, int capacity, accel_seq **out);
    /* Paged devices (ACCEL_CAP_PAGED, accel.h): the pool's blocks in all, referenced by any
     * sequence, and referenced by holders only. Any thread. Appended last, as above. */
    void (*kv_usage)(accel_dev *d, int *total, int *used, int *cached);
    /* Paged devices: mark s a holder (accel_seq_hold); the wrapper sets s->holder. */
    int (*seq_hold)(accel_dev *d, accel_seq *s);
    /* Paged devices: one block's exact bytes out (the wrapper checked the block is full) and one
     * block appended at s->len (the wrapper checked alignment and capacity, and adds to len). */
    int (*kv_block_save)(accel_dev *d, accel_seq *s, int block, void *dst);
    int (*kv_block_load)(accel_dev *d, accel_seq *s, const void *src);
    /* optional: accel_kv_export (the wrapper checked the range lies within s->len) */
    int (*kv_export)(accel_dev *d, accel_seq *s, int pos0, int n, const accel_kv_sink *sink);
    /* optional: accel_seq_decode_sparse / accel_seq_decode_stats (appended last, as above) */
    int (*seq_decode_sparse)(accel_dev *d, accel_seq *s, const sparse_tls_params *p);
    int (*seq_decode_stats)(accel_dev *d, accel_seq *s, accel_decode_stats *out);
    /* optional (ACCEL_CAP_DECODE_ARGMAX): decode with the argmax on the device and only the
     * wanted rows' logits out (accel_decode_argmax; want may be NULL: every row). The wrapper
     * advances each seq's len on success. NULL: the wrapper decodes and takes the argmax on the
     * host. Appended last, as above. */
    int (*decode_argmax)(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                         float *logits, const unsigned char *want, int32_t *argmax);
    /* ACCEL_CAP_LAYER_SPLIT: prefill gets r->layers > 0 only on such a device (the wrapper
     * checked the range and that a continuation matches s->split_n / split_next; a whole call
     * comes with layers 0). split_drop frees the state of s's pending chunk (its residual
     * stream); the wrapper calls it when the chunk is abandoned (accel.h) and seq_free must free
     * it too. Appended last, as above. */
    void (*split_drop)(accel_dev *d, accel_seq *s);
};

struct accel_dev {
    const struct accel_dev_i *i;
    const model *m;
    accel_opts opts;             /* the caller's, as accel_opts_kept gives them (a backend keeps
                                    no pointer the caller may free: lib_path is NULL) */
    uint64_t mem_total;          /* KV budget, bytes */
    uint64_t kv_bytes_per_token; /* per position of one sequence */
    _Atomic uint64_t mem_reserved;
    _Atomic int n_seqs;
    _Atomic int health;          /* enum accel_health; FAILED is sticky */
    int kv_block_tokens;         /* paged devices: positions per block, set by the backend at
                                    open (with ACCEL_CAP_PAGED and kv_usage); 0: not paged */
    _Atomic int n_holders;       /* sequences marked by accel_seq_hold (not in n_seqs) */
    _Atomic unsigned revivals;   /* accel_dev_revive calls (accel_info.revivals) */
};

struct accel_seq {
    int len;      /* positions holding valid KV */
    int capacity; /* positions reserved */
    int import_layers_done; /* kv_import: layers received for the current run of positions */
    int import_pos0, import_n;
    int holder;   /* accel_seq_hold: a prefix-cache holder, read-only */
    /* a layer-split chunk in progress (accel_prefill_req.layers): its tokens (0: none) and the
     * next layer; kept by the wrapper, which calls split_drop when it is abandoned */
    int split_n, split_next;
};

/* For backends: the options a device keeps (accel_dev.opts) — o's, with lib_path, which the
 * open reads and no later call does, cleared: the caller's buffer (devices_open's own stack, for
 * the emulator's path) does not outlive the open. */
accel_opts accel_opts_kept(const accel_opts *o);
/* For backends: mark the device FAILED (sticky) and return ACCEL_ERR_DEVICE. */
int accel_dev_fail(accel_dev *d);
/* For backends: mark the device DEGRADED (recoverable faults, e.g. a timed-out run). */
void accel_dev_degrade(accel_dev *d);
/* For backends whose device can come back after a FAILED mark — a peer's device whose node
 * answers again (peer/peer.h) — once every sequence of the failed incarnation is gone from the
 * device's side: health OK again and accel_info.revivals one up, which tells the scheduler to
 * drop its own mark. Any thread. */
void accel_dev_revive(accel_dev *d);

#endif
