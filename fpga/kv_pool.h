/* fpga/kv_pool.h — the card's KV pool as block ids: which blocks are free, how many tables
 * reference each, and how many of those are prefix-cache holders. It moves no bytes: where a
 * block lives in HBM is fpga/kernels/dec_layout.h's ("KV pages"), and the backend copies blocks
 * with kernel runs (copy-on-write, the host tier).
 *
 * Allocation takes the lowest free ids, so a sequence that grows while nothing else does gets
 * consecutive ids, which the kernels read as one burst per superblock of `group` ids (as from a
 * slab). A prefill workspace takes whole free superblocks from the top of the pool for one call
 * (fpga_kv_pool_take_supers): contiguous HBM, admitted like KV.
 *
 * Counts: used = blocks referenced by any table (a workspace's superblocks included); cached =
 * those referenced by holder tables only (accel_seq_hold: evictable by freeing the holders).
 *
 * Threads: a mutex guards everything, so the counts may be read from any thread
 * (accel_get_info) while the device's thread changes them. */
#ifndef TANDEM_FPGA_KV_POOL_H
#define TANDEM_FPGA_KV_POOL_H
#include <pthread.h>
#include <stdint.h>

typedef struct fpga_kv_pool {
    pthread_mutex_t mu;
    int n_blocks, group;
    int32_t *ref;  /* per id: tables (or a workspace) referencing it */
    int32_t *href; /* per id: of which holder tables */
    int used, cached, lowest; /* lowest: no id below it is free */
} fpga_kv_pool;

/* 0, or -1 out of memory. n_blocks > 0, group > 0. */
int fpga_kv_pool_init(fpga_kv_pool *p, int n_blocks, int group);
void fpga_kv_pool_deinit(fpga_kv_pool *p);
void fpga_kv_pool_usage(fpga_kv_pool *p, int *total, int *used, int *cached);
int fpga_kv_pool_free_count(fpga_kv_pool *p);

/* The n lowest free ids into out, reference 1 each (non-holder). 0, or -1 when fewer than n are
 * free (nothing taken). */
int fpga_kv_pool_take(fpga_kv_pool *p, int n, uint32_t *out);
/* One more reference to each of ids[0..n) from a table that is (holder 1) or is not a holder. */
void fpga_kv_pool_ref(fpga_kv_pool *p, const uint32_t *ids, int n, int holder);
/* Drops one reference to each of ids[0..n) (a block is free with its last). */
void fpga_kv_pool_unref(fpga_kv_pool *p, const uint32_t *ids, int n, int holder);
/* A table's references to ids[0..n) become holder references (accel_seq_hold). */
void fpga_kv_pool_hold(fpga_kv_pool *p, const uint32_t *ids, int n);
/* 1 when another table references id too (a write into it needs a private copy). */
int fpga_kv_pool_shared(fpga_kv_pool *p, uint32_t id);

/* k consecutive superblocks all of whose ids are free, the highest such run: taken (reference
 * 1 each), the first superblock's index returned; -1 when there is none. */
int fpga_kv_pool_take_supers(fpga_kv_pool *p, int k);
void fpga_kv_pool_give_supers(fpga_kv_pool *p, int first, int k);

#endif
