/* sparse/tls.h — AsyncTLS two-level sparse decode attention: the parameters, the per-sequence key
 * summaries and the selection, as every backend must compute them (this is the reference).
 *
 * Sources: the AsyncTLS paper (../shared/papers/asynctls.txt, §4.1), Quest's page scores
 * (mit-han-lab/Quest, quest/ops/csrc/estimate.cu), Double Sparsity's channel labels
 * (andy-yang-1/DoubleSparse); ../shared/papers/sparse-seeds-notes.md summarizes all three.
 *
 * One decode query of one layer, per KV head g (the group G = n_heads / n_kv_heads query heads
 * q_h that share g's keys), over keys 0 .. n-1:
 *
 *   Level 1, block filter. Keys are cut into blocks of `block_size` positions; each block keeps
 *   per channel c the max M_c and min m_c of its keys (updated as each key is written). Quest's
 *   bound of q_h . k inside a block is sum_c max(q_hc M_c, q_hc m_c) = q_h+ . M + q_h- . m
 *   (x+ = max(x, 0), x- = min(x, 0)). The group's block score is the sum of its heads' bounds,
 *   which collapses to one aggregated query: score_b = Q+ . M_b + Q- . m_b with Q+ = sum_h q_h+,
 *   Q- = sum_h q_h-; for all blocks at once it is the product [Q+ Q-] (1 x 2d) x [M; m] (2d x nb),
 *   the paper's recasting of Quest as a GEMM (with a batch, rows of several queries and heads).
 *   The `block_budget` highest-scoring blocks are kept.
 *
 *   Level 2, token selection (Double Sparsity). `channels` (r) channels per (layer, KV head) were
 *   picked offline (model/ckpt/tls_channels.h); every cached key keeps a label: its r selected
 *   channels quantized to 4 bits with the key's own min and step (x ~ lmin + code * lstep,
 *   code = round((x - lmin) / lstep) in 0..15, lstep = (max - min) / 15). A token j in a kept
 *   block scores a_j = qbar . khat_j over the selected channels, qbar the mean of the group's
 *   queries (the paper averages the approximate scores over the group, the same number), computed
 *   as a_j = lstep_j * (qbar . code_j) + lmin_j * sum(qbar). (Double Sparsity divides by sqrt(r);
 *   a constant factor does not change a ranking, so it is left out.) The `token_budget`
 *   highest-scoring tokens are kept.
 *
 *   Then exact attention of every head of the group over the kept tokens' full K/V, in position
 *   order (cpu/tls.h's cpu_tls_attend: with every token kept, the same bits as dense).
 *
 * Top-k order: score descending, ties to the lower index (block or position); a NaN score ranks
 * below every number. Budgets that cover everything skip the scoring (all kept). Every list out of
 * the selection is in ascending position order.
 *
 * Dense rules (sparse_tls_dense): layers below `dense_layers` (Quest keeps the first two dense)
 * and contexts of at most `dense_below` keys (default: token_budget, where selection would keep
 * every key anyway).
 *
 * Threads: pure functions on caller memory; a sparse_tls_seq is written by one thread at a time
 * (the device's), read by any number. Errors: SPARSE_TLS_ERR_* (negative). */
#ifndef TANDEM_SPARSE_TLS_H
#define TANDEM_SPARSE_TLS_H
#include <stddef.h>
#include <stdint.h>

enum { SPARSE_TLS_ERR_INVALID = -1, SPARSE_TLS_ERR_NOMEM = -2 };

/* Bounds on what parameters and shapes may name: 1M keys (8x the 128K target), head_dim as the
 * CPU backend allows. */
#define SPARSE_TLS_MAX_TOKENS (1 << 20)
#define SPARSE_TLS_MAX_HEAD_DIM 1024

typedef struct sparse_tls_params {
    int block_size;   /* level-1 block in positions: 16, 32, 64 or 128; default 64 (paper) */
    int block_budget; /* blocks kept per KV head, >= 1; default 128 (8,192 tokens, paper) */
    int token_budget; /* tokens kept per KV head, >= 1; default 1024 (paper: 512/1024/2048) */
    int channels;     /* label channels r per KV head: even, 2 .. head_dim; default 32 (paper) */
    int dense_layers; /* layers 0 .. dense_layers-1 stay dense, >= 0; default 2 (Quest) */
    int dense_below;  /* contexts of at most this many keys stay dense; -1 (default):
                         token_budget (selection would keep every key) */
    int offload;      /* 0 (default): the KV stays in the device's memory; 1: a GPU keeps the
                         sparse layers' KV of the sequence in pinned host memory from its first
                         decode step on (gpu/tls_off.cu; as the daemon's default, accel_info.
                         offload_any); other devices decide their tier themselves and ignore it */
    int stagger;      /* 0 (default): both levels select with this step's query (exact); 1:
                         AsyncTLS's staggered selection (paper §4.2, sparse/tls_pipe.h): level 2
                         runs inside the blocks level 1 chose at the step before (plus the blocks
                         begun since), and level 1 with this step's query chooses the next step's
                         blocks, off the critical path; the first step of a sequence, and the
                         first after a truncation, a fork or any other gap, selects at once */
} sparse_tls_params;

void sparse_tls_params_default(sparse_tls_params *p);
/* 0, or SPARSE_TLS_ERR_INVALID with the reason (naming the parameter) in err (may be NULL).
 * head_dim: the model's (0: not checked against channels). */
int sparse_tls_params_check(const sparse_tls_params *p, int head_dim, char *err, size_t errlen);
/* A spec string, as the daemon's decode_sparse key and accel_opts.decode_sparse carry it:
 * NULL, "" or "off": *on = 0; "asynctls" or "asynctls,key=value,..." with the keys block_size,
 * block_budget, token_budget, channels, dense_layers, dense_below, offload, stagger: *on = 1 and p
 * the defaults with those replaced, checked (head_dim as in params_check). *channels_set says whether
 * the spec named channels (else the channel file decides). 0, or SPARSE_TLS_ERR_INVALID with the
 * reason, naming the key, in err. */
int sparse_tls_parse(const char *spec, int head_dim, sparse_tls_params *p, int *on,
                     int *channels_set, char *err, size_t errlen);
/* The per-request switch (the API's "sparse_decode": false, true or {"mode": "asynctls" | "off",
 * "token_budget": N, "block_budget": N, "stagger": bool}), decided here once for every device:
 * the request's members over the configuration's spec (the daemon's decode_sparse key,
 * sparse_tls_parse's syntax) over the defaults. */
typedef struct sparse_tls_req {
    int given;        /* -1: absent (the configuration decides); 0: off; 1: on */
    int token_budget; /* 0: not given */
    int block_budget; /* 0: not given */
    int stagger;      /* 0: not given; 1: false; 2: true */
} sparse_tls_req;
/* *on and p settled (p checked when on). 0, or SPARSE_TLS_ERR_INVALID with the reason in err
 * and the API key at fault in *key (may be NULL): "token_budget", "block_budget", or
 * "sparse_decode" for a configuration the budgets do not fit. */
int sparse_tls_resolve(const sparse_tls_req *rq, const char *config_spec, int head_dim,
                       sparse_tls_params *p, int *on, char *err, size_t errlen, const char **key);
/* 1 when layer `layer` attends densely over n_keys keys. */
int sparse_tls_dense(const sparse_tls_params *p, int layer, int n_keys);

/* A sequence's summaries for every layer, for positions 0 .. cap_tokens-1.
 *   kmax, kmin  (n_layers, cap_blocks, n_kv, head_dim)  per-block channel max / min of K
 *   code        (n_layers, cap_tokens, n_kv, r / 2)     4-bit labels, channel 2i in the low
 *                                                       nibble, 2i+1 in the high one
 *   lmin, lstep (n_layers, cap_tokens, n_kv)            each label's offset and step
 * channels (n_layers, n_kv, r) is borrowed: the selected channel of each label slot. */
typedef struct sparse_tls_seq {
    int n_layers, n_kv, head_dim, r, block_size, cap_tokens, cap_blocks;
    const uint16_t *channels;
    float *kmax, *kmin, *lmin, *lstep;
    uint8_t *code;
} sparse_tls_seq;

/* Bytes of summaries per position of one sequence (for memory accounting; the per-block arrays
 * rounded up to a position's share). */
uint64_t sparse_tls_bytes_per_token(int n_layers, int n_kv, int head_dim, int r, int block_size);
/* A zeroed sequence for cap_tokens positions; NULL when out of memory or a shape is out of
 * bounds. channels must outlive it. */
sparse_tls_seq *sparse_tls_seq_new(int n_layers, int n_kv, int head_dim, int r, int block_size,
                                   int cap_tokens, const uint16_t *channels);
void sparse_tls_seq_free(sparse_tls_seq *s);

/* Records key row k (n_kv * head_dim floats, KV head g at k + g * head_dim) of position pos in
 * layer `layer`: its label, and its block's max / min (reset by the block's first position,
 * pos % block_size == 0, so positions must be put in order within a block; rewriting a block
 * from its start rebuilds it exactly). */
void sparse_tls_put(sparse_tls_seq *s, int layer, int pos, const float *k);
/* dst's summaries of positions [0, n_tokens) from src (same shape; a block that n_tokens cuts
 * is copied whole: the caller re-puts its positions from the block's start). */
void sparse_tls_copy(sparse_tls_seq *dst, const sparse_tls_seq *src, int n_tokens);

/* The level-1 scores of blocks 0 .. nb-1 of (layer, kv head g) for the group's queries q
 * (G rows of head_dim, q_stride floats apart): the aggregated query then one product, as above.
 * agg: scratch of 2 * head_dim floats. */
void sparse_tls_block_scores(const sparse_tls_seq *s, int layer, int g, const float *q, int G,
                             size_t q_stride, int nb, float *scores, float *agg);
/* The level-2 approximate scores of positions pos[0 .. n-1] of (layer, g). qsel: scratch of r. */
void sparse_tls_token_scores(const sparse_tls_seq *s, int layer, int g, const float *q, int G,
                             size_t q_stride, const int32_t *pos, int n, float *scores,
                             float *qsel);
/* The k highest of score[0 .. n-1] (order above) as indices in ascending order into out; returns
 * min(k, n). work: n int32. */
int sparse_tls_topk(const float *score, int n, int k, int32_t *out, int32_t *work);

/* Scratch one selection needs for n_keys keys: floats and int32s. */
size_t sparse_tls_work_floats(const sparse_tls_params *p, int head_dim, int n_keys);
size_t sparse_tls_work_ints(const sparse_tls_params *p, int n_keys);

/* What one selection kept. */
typedef struct sparse_tls_pick {
    int blocks_kept; /* level-1 blocks kept (all of them when within the budget) */
    int candidates;  /* tokens in the kept blocks */
    int n;           /* tokens selected (the count returned) */
} sparse_tls_pick;

/* Both levels for one query group of (layer, g) over keys 0 .. n_keys-1: the positions attended,
 * ascending, into pos (at most min(n_keys, token_budget) of them); returns their count. The
 * parameters were checked; n_keys <= s->cap_tokens. fwork / iwork: sparse_tls_work_* of them.
 * pick may be NULL. Sparse whatever the dense rules say (the caller asks sparse_tls_dense). */
int sparse_tls_select(const sparse_tls_params *p, const sparse_tls_seq *s, int layer, int g,
                      const float *q, int G, size_t q_stride, int n_keys, int32_t *pos,
                      float *fwork, int32_t *iwork, sparse_tls_pick *pick);

/* ---------------------------------------------------------------- calibration (offline)
 * Channel importance, Double Sparsity's offline step with AsyncTLS's GQA rule: for query head h
 * and channel c, the mean over calibration tokens t of |q_thc * k_tgc| (each token against its
 * own key, the official calibration's method), g the KV head of h; a KV head's channel
 * importance is the max over its group's heads; the r most important channels are kept (ties to
 * the lower channel), listed in ascending channel order. */
typedef struct sparse_tls_calib {
    int n_layers, n_heads, n_kv, head_dim;
    double *sum;    /* (n_layers, n_heads, head_dim) sums of |q * k| */
    int64_t *count; /* (n_layers) tokens seen */
} sparse_tls_calib;

/* NULL when out of memory or a shape is out of bounds (n_heads a multiple of n_kv). */
sparse_tls_calib *sparse_tls_calib_new(int n_layers, int n_heads, int n_kv, int head_dim);
void sparse_tls_calib_free(sparse_tls_calib *c);
/* T tokens of layer l after RoPE: q (T, n_heads * head_dim), k (T, n_kv * head_dim), row-major. */
void sparse_tls_calib_add(sparse_tls_calib *c, int layer, const float *q, const float *k, int T);
/* The r kept channels of every (layer, KV head) into out (n_layers, n_kv, r). 0, or
 * SPARSE_TLS_ERR_INVALID (r odd or out of 2 .. head_dim, a layer without tokens). */
int sparse_tls_calib_select(const sparse_tls_calib *c, int r, uint16_t *out);

#endif
