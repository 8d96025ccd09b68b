/* sparse/tls_pipe.h — AsyncTLS's offload pipeline, the reference of what it selects and moves
 * (paper §4.2; ../shared/papers/asynctls.txt).
 *
 * The full KV lives in a slower tier (host memory for a GPU; DDR4 or host memory for a card);
 * the decoding device keeps a resident cache of level-1 blocks per (layer, KV head). Decode step
 * t of one group, over keys 0 .. n-1:
 *   1. attention set: the blocks S_{t-1} chosen at step t-1 (all of them resident), plus the
 *      blocks that began after that choice was made and the block it was still filling (the
 *      newest keys are written on the device itself, so they are resident too);
 *   2. level 2 (sparse/tls.h) over the keys of that set -> the tokens attended now;
 *   3. level 1 over every block with this step's query -> S_t, the set the next step uses;
 *      the blocks of S_t not resident are fetched (the difference D_t = S_t \ resident: the only
 *      blocks that cross the link), and a resident block that is in neither S_t nor the tail is
 *      dropped. Steps 2 and 3 are independent, so a device runs 3's selection and fetch while 2's
 *      attention and the FFN run: the fetch is off the critical path as long as it takes less
 *      time than the rest of the step.
 * The first step of a group (no S_{t-1}) selects synchronously and fetches its whole set.
 * The whole-block baseline (block-level offload without the one-step stagger) moves all of S_t
 * every step; `fetched` against `baseline` is the traffic the incremental transfer saves.
 *
 * Threads: one pipeline per sequence, driven by one thread at a time (or its groups by one
 * thread each: sparse_tls_pipe_group_step). Errors: NULL on bad shapes or out of memory. */
#ifndef TANDEM_SPARSE_TLS_PIPE_H
#define TANDEM_SPARSE_TLS_PIPE_H
#include "sparse/tls.h"

typedef struct sparse_tls_pipe {
    int n_layers, n_kv, cap_blocks, block_budget;
    int32_t *prev;     /* (n_layers, n_kv, block_budget): S_{t-1}, ascending */
    int32_t *n_prev;   /* (n_layers, n_kv): its size; -1 before the first step */
    int32_t *prev_nb;  /* (n_layers, n_kv): blocks that existed when it was chosen */
    uint8_t *resident; /* (n_layers, n_kv, cap_blocks): 1 when the device holds the block */
    int64_t fetched;   /* blocks moved from the slower tier, summed over groups and steps */
    int64_t baseline;  /* what the whole-block baseline moves: |S_t| every step */
    int64_t steps;     /* group steps */
} sparse_tls_pipe;

/* A pipeline for a sequence of up to cap_tokens keys with parameters p (checked). */
sparse_tls_pipe *sparse_tls_pipe_new(const sparse_tls_params *p, int n_layers, int n_kv,
                                     int cap_tokens);
void sparse_tls_pipe_free(sparse_tls_pipe *t);

/* Scratch one step needs: floats and int32s (a superset of sparse_tls_work_*). */
size_t sparse_tls_pipe_work_floats(const sparse_tls_params *p, int head_dim, int n_keys);
size_t sparse_tls_pipe_work_ints(const sparse_tls_params *p, int n_keys);

/* One decode step of (layer, g) over keys 0 .. n_keys-1 as above: the attended positions,
 * ascending, into pos; returns their count. *moved (may be NULL): blocks fetched this step. */
int sparse_tls_pipe_step(sparse_tls_pipe *t, const sparse_tls_params *p, const sparse_tls_seq *s,
                         int layer, int g, const float *q, int G, size_t q_stride, int n_keys,
                         int32_t *pos, float *fwork, int32_t *iwork, int *moved);
/* The same step touching only (layer, g)'s state, not the counters fetched / baseline / steps:
 * distinct groups of one pipeline may step on different threads at once. *moved (not NULL):
 * blocks fetched. */
int sparse_tls_pipe_group_step(sparse_tls_pipe *t, const sparse_tls_params *p,
                               const sparse_tls_seq *s, int layer, int g, const float *q, int G,
                               size_t q_stride, int n_keys, int32_t *pos, float *fwork,
                               int32_t *iwork, int *moved);
/* Forgets layer's state (every KV head): its next step selects synchronously, as a first step
 * does (after a truncation, or any step that did not follow the one before). */
void sparse_tls_pipe_reset_layer(sparse_tls_pipe *t, int layer);

#endif
