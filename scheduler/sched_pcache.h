/* scheduler/sched_pcache.h — one paged device's automatic prefix cache, and its host-memory tier.
 *
 * Identity (vLLM's hash-chained blocks, in our own design): the k-th full block of a token
 * sequence is named by H(name of block k-1, salt, its kv_block_tokens ids), the salt being
 * whatever else changes the KV (the model's fingerprint: its config, so rope scaling and dtype
 * too; the device's own cache format is fixed per device and each device has its own cache).
 * A name is only a key: every hit compares the token ids of the whole reused prefix, so a hash
 * collision can never hand a request another prompt's KV — reuse is exact by construction.
 *
 * Kinds: KV computed with sparse attention is an approximation, which a dense request must never
 * reuse. Each entry has a kind — 0 for exact KV, else the sparse parameters' key
 * (sparse/sparse.h: sparse_params_key) — which salts its chain and is compared on every hit. A
 * dense request reuses exact KV only; a sparse one the longer of exact KV and KV of its own kind
 * (exact on a tie), its reuse ending where its method can resume (`align`).
 *
 * What is kept: holders. A holder is a sequence of the device (accel_seq_hold) forked from a
 * request's sequence at a whole block (accel_seq_fork): it references that prefix's blocks, so
 * they outlive the request, and it shares them with every later sequence forked from it (the
 * device counts a block only holders reference as cached). A holder is published when a prompt
 * has been prefilled and again when its request ends (prompt + generated tokens, so the next
 * turn of a chat finds its whole history); a holder that is a prefix of a newer one is dropped
 * (the newer one holds its blocks), and a new one that is a prefix of an older one is not kept.
 *
 * Reuse: sched_pcache_begin gives a new request its longest cached prefix of whole blocks (at
 * most n - 1 positions: the last prompt token is always computed, its logits are the answer):
 * a fork of the device holder that has it — no copy, no compute — then, when the host tier holds
 * a longer prefix, that prefix's further blocks loaded from host memory (accel_kv_block_load);
 * the caller prefills the rest.
 *
 * Eviction: holders are given up least recently used first, only when the device needs the
 * memory (the worker calls sched_pcache_evict on ACCEL_ERR_NOMEM and tries again). An evicted
 * holder's blocks are first saved to the host tier (accel_kv_block_save, exact bytes) when its
 * budget has room — older host entries go first, LRU — else dropped.
 *
 * Threads: the device's worker only; the counters in sched_pcache_stats are atomics any thread
 * may read (sched_pcache_get_stats). */
#ifndef TANDEM_SCHED_PCACHE_H
#define TANDEM_SCHED_PCACHE_H
#include "scheduler/accel.h"
#include <stdatomic.h>
#include <stdint.h>

typedef struct sched_pcache sched_pcache;

typedef struct sched_pcache_stats {
    _Atomic uint64_t queries_tokens;  /* prompt tokens looked up */
    _Atomic uint64_t hit_tokens;      /* of which found (device or host tier) */
    _Atomic uint64_t host_hit_tokens; /* of hit_tokens, loaded back from the host tier */
    _Atomic uint64_t evictions;       /* holders given up */
    _Atomic uint64_t host_saves;      /* of which saved to the host tier */
    _Atomic uint64_t host_dropped;    /* host entries given up for room */
    _Atomic int holders;              /* device holders now */
    _Atomic int host_entries;         /* host entries now */
    _Atomic uint64_t host_bytes;      /* host memory the entries hold */
    uint64_t host_budget;             /* the host tier's bound in bytes (set once at _new) */
    /* each tier's eviction order, seen from its next victim (the least recently used entry):
     * its whole blocks and when it was last used (CLOCK_MONOTONIC ns; 0: the tier is empty) */
    _Atomic int dev_next_blocks, host_next_blocks;
    _Atomic uint64_t dev_next_used_ns, host_next_used_ns;
} sched_pcache_stats;

/* For a paged device (ACCEL_CAP_PAGED): host_budget bytes of host tier (0: none). NULL when
 * the device is not paged or out of memory. */
sched_pcache *sched_pcache_new(accel_dev *dev, uint64_t salt, uint64_t host_budget);
void sched_pcache_free(sched_pcache *pc);

/* A new sequence of `capacity` positions for prompt ids[0..n) holding the longest cached prefix
 * of it that ends on a multiple of `align` positions (1: any block) and is exact KV or, kind !=
 * 0, KV of that kind: *reused positions (0 when nothing was cached), of which *from_host came
 * from the host tier; *approx is 1 when the reused KV is of a non-zero kind. An accel status
 * (ACCEL_ERR_NOMEM: the device has no room even for the blocks to bring back; nothing taken). */
int sched_pcache_begin(sched_pcache *pc, uint64_t kind, int align, const int32_t *ids, int n,
                       int capacity, accel_seq **out, int *reused, int *from_host, int *approx);
/* s's first n positions hold the KV of ids[0..n), of kind `kind` (0: exact): keep its whole
 * blocks. Best effort (out of memory: nothing kept). */
void sched_pcache_publish(sched_pcache *pc, uint64_t kind, accel_seq *s, const int32_t *ids,
                          int n);
/* Gives up the least recently used holder (to the host tier when there is room). 1 when one was
 * given up, 0 when there is none. */
int sched_pcache_evict(sched_pcache *pc);
/* Every holder given up (to the host tier when there is room): the device's memory back. */
void sched_pcache_drop_all(sched_pcache *pc);
const sched_pcache_stats *sched_pcache_get_stats(const sched_pcache *pc);

/* The chain name of a full block (exposed for tests). */
uint64_t sched_pcache_hash(uint64_t parent, uint64_t salt, const int32_t *ids, int n);

#endif
