/* scheduler/kv_blocks.h — the KV store's bookkeeping: fixed-size blocks of one device's KV pool,
 * a block table per sequence, reference counts, copy-on-write of a shared partial block, an
 * automatic prefix cache (hash-chained full blocks, unreferenced ones kept until memory is
 * needed, least recently used first), and a bounded host-memory tier that evicted cached blocks
 * move to instead of being lost.
 *
 * This module decides; it moves no bytes. Every decision that needs data moved comes back as an
 * op list (kv_op: copy a block for copy-on-write, swap a block out to the host tier, bring one
 * back) that the device's worker performs before the step that reads those blocks. So one
 * bookkeeping serves every backend — the CPU's float blocks, the GPU's 16-bit pages, a card's
 * HBM pages — and is tested here without a device.
 *
 * Identity of a block's content (vLLM's hash-chained blocks, our own design): a full block is
 * named by H(parent block's name, salt, its token ids), salt being whatever else changes the KV
 * (the model's fingerprint, the KV dtype, rope scaling: the owner folds them into one 64-bit
 * value). A hit compares the stored token ids too, so a hash collision can never hand a request
 * another prompt's KV: reuse is exact by construction. Only full blocks are cached; a prompt
 * reuses its longest cached prefix of full blocks and prefills the rest.
 *
 * Sharing: n choices of one prompt fork its block table (references, no copy); the last,
 * partial block is shared too until a choice writes into it, when sched_kv_grow hands that
 * choice a private copy (a KV_OP_COPY) — copy-on-write. A block returns to the free list when
 * its last reference goes and it holds no cached prefix; a cached one stays, unreferenced, in
 * LRU order, and is given up (to the host tier when there is room: KV_OP_SWAP_OUT) only when a
 * free block is needed.
 *
 * Threads: none of its own; the owner (the scheduler, on the loop thread) serialises calls. */
#ifndef TANDEM_SCHED_KV_BLOCKS_H
#define TANDEM_SCHED_KV_BLOCKS_H
#include <stddef.h>
#include <stdint.h>

typedef struct sched_kv sched_kv;

typedef struct sched_kv_cfg {
    int block_tokens; /* positions per block (a per-device constant, > 0) */
    int n_blocks;     /* device blocks in the pool (> 0) */
    int n_host;       /* host-tier blocks (0: no host tier) */
    uint64_t salt;    /* model fingerprint, KV dtype, rope scaling ... folded by the owner */
    int prefix_cache; /* 0: no block is ever reused between sequences (config switch) */
} sched_kv_cfg;

enum sched_kv_op_kind {
    KV_OP_COPY,     /* device block src -> device block dst (copy-on-write of a shared block) */
    KV_OP_SWAP_OUT, /* device block src -> host slot dst (an evicted cached block) */
    KV_OP_SWAP_IN,  /* host slot src -> device block dst (a prefix hit in the host tier) */
};

typedef struct sched_kv_op {
    enum sched_kv_op_kind kind;
    int32_t src, dst;
    int tokens; /* positions of the block that hold KV */
} sched_kv_op;

/* What one call asks the worker to move; filled by the calls below (appended to). */
typedef struct sched_kv_ops {
    sched_kv_op *op;
    int n, cap;
    int oom; /* an append failed: the call's answer was -1 */
} sched_kv_ops;

typedef struct sched_kv_seq {
    int32_t *blocks; /* device block ids, in position order */
    int n_blocks, cap;
    int n_tokens;    /* positions that hold (or are reserved to hold) KV */
    int n_cached;    /* leading positions that came from the prefix cache */
    uint64_t last_hash; /* the chain hash of the last committed full block (0: none) */
    int n_committed; /* full blocks registered in the prefix index */
    int no_cache;    /* this sequence neither reuses nor publishes blocks (per-request opt-out) */
} sched_kv_seq;

typedef struct sched_kv_stats {
    int n_blocks, free, cached_idle; /* idle: cached, unreferenced (evictable) */
    int n_host, host_used;
    uint64_t queries_tokens, hit_tokens; /* prefix cache: prompt tokens looked up / found */
    uint64_t host_hit_tokens;            /* of hit_tokens, brought back from the host tier */
    uint64_t evictions, swaps_out, dropped; /* dropped: evicted with no room in the host tier */
    uint64_t cow_copies;
} sched_kv_stats;

/* NULL on a bad config or out of memory. */
sched_kv *sched_kv_new(const sched_kv_cfg *cfg);
void sched_kv_free(sched_kv *kv);
int sched_kv_block_tokens(const sched_kv *kv);

/* Blocks needed for n positions. */
int sched_kv_blocks_for(const sched_kv *kv, int n);
/* Could a new sequence of n positions be placed now (free + evictable blocks), not counting
 * prefix hits? The admission question, asked before any memory is taken. */
int sched_kv_can_fit(const sched_kv *kv, int n);

/* Starts a sequence for prompt ids[0..n): reuses the longest cached prefix of full blocks (at
 * most n - 1 positions: the last prompt token is always computed, its logits are the answer),
 * taking a reference on each; a block found in the host tier is brought back (a KV_OP_SWAP_IN
 * into a fresh device block). Sets s->n_cached and s->n_tokens to the positions reused. Returns
 * the positions reused, or -1 when even the blocks to bring back do not fit (nothing taken). */
int sched_kv_begin(sched_kv *kv, sched_kv_seq *s, const int32_t *ids, int n, int no_cache,
                   sched_kv_ops *ops);

/* Makes room for the sequence to hold n_tokens positions (n_tokens >= s->n_tokens): new blocks
 * from the free list, else by evicting idle cached blocks (LRU first; to the host tier when it
 * has room); a shared partial last block that is about to be written is copied first. Returns 0,
 * or -1 when the pool cannot hold it (nothing changed: the caller preempts or waits). */
int sched_kv_grow(sched_kv *kv, sched_kv_seq *s, int n_tokens, sched_kv_ops *ops);

/* The sequence's positions [0, n) now hold computed KV of ids[0..n): its full blocks join the
 * prefix index (unless prefix caching is off or the sequence opted out). */
void sched_kv_commit(sched_kv *kv, sched_kv_seq *s, const int32_t *ids, int n);

/* dst (empty) shares src's blocks: one prefill for n choices. */
int sched_kv_fork(sched_kv *kv, const sched_kv_seq *src, sched_kv_seq *dst);

/* Drops the sequence's references; its cached full blocks stay in the index, idle. */
void sched_kv_end(sched_kv *kv, sched_kv_seq *s);

/* Preemption: the sequence gives back every block. Its committed full blocks stay cached (and
 * may move to the host tier under pressure), so a resumed sequence finds them with
 * sched_kv_begin; the rest is recomputed. */
void sched_kv_preempt(sched_kv *kv, sched_kv_seq *s);

void sched_kv_get_stats(const sched_kv *kv, sched_kv_stats *st);
/* Reference count of a device block (tests and assertions). */
int sched_kv_refs(const sched_kv *kv, int32_t block);
/* Live references in all: 0 when every sequence ended (the leak check after a load). */
long sched_kv_live_refs(const sched_kv *kv);

void sched_kv_ops_reset(sched_kv_ops *ops);
void sched_kv_ops_deinit(sched_kv_ops *ops);

/* The chain hash of a full block (exposed for the wire format and tests). */
uint64_t sched_kv_hash(uint64_t parent, uint64_t salt, const int32_t *ids, int n);

#endif
