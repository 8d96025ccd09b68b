/* sparse/sparse.h — which sparse prefill method a prompt takes, its parameters, and the rules
 * every backend and the scheduler must apply alike: the one place where "is this prompt sparse,
 * with which method, where do its sparse chunks end" is decided.
 *
 * Three methods (OpenVINO GenAI's SparseAttentionConfig names, ../shared/papers/
 * openvino-sparse-prefill.md, plus FlexPrefill, sparse/flex.h):
 *   flexprefill  bytedance/FlexPrefill's get_active_blocks (gamma, tau, budgets, block 128)
 *   xattention   mit-han-lab/x-attention's xattn_estimate: antidiagonal scoring with stride S,
 *                block sums, per query block the smallest set of blocks (block 0 and the
 *                diagonal first) whose estimated mass reaches threshold x row total
 *   trishape     openvino.genai TriShapeSparseAttentionTokenSkipper: a sparse chunk sees the
 *                first num_retained_start tokens, the most recent num_retained_recent tokens
 *                of the cache, and itself (causal)
 *
 * How a prompt of n tokens is prefilled (sparse_plan): its first `sparse_end` tokens in sparse
 * chunks, the rest (at least num_last_dense_tokens_in_prefill tokens, at most a block more, as
 * OpenVINO documents) dense. A sparse chunk [pos0, pos0 + len) attends to everything cached
 * before it plus itself; it starts on a block boundary and, unless it ends at sparse_end, ends on
 * one (sparse_chunk_len). The scheduler decides this once per chunk and hands the backend the
 * settled parameters (scheduler/accel.h: accel_sparse); a backend only maps them onto its kernels
 * (and runs dense, saying so in its report, where its kernels do not cover a shape).
 *
 * Threads: pure functions; any thread. Errors: 0, or SPARSE_ERR_INVALID (-1). */
#ifndef TANDEM_SPARSE_SPARSE_H
#define TANDEM_SPARSE_SPARSE_H
#include "sparse/flex.h"
#include <stddef.h>
#include <stdint.h>

enum { SPARSE_ERR_INVALID = -1 };

enum sparse_mode {
    SPARSE_MODE_FLEX = 0,     /* "flexprefill" (0: a zeroed struct is today's meaning) */
    SPARSE_MODE_XATTN = 1,    /* "xattention" */
    SPARSE_MODE_TRISHAPE = 2, /* "trishape" */
};

/* Tri-shape's KV block (OpenVINO: the hardware's block, 16 or 32; here the sparse kernels' 128,
 * so that its skipped range is whole blocks of the CSR lists every backend reads). The retained
 * start / recent token counts must be multiples of it, as OpenVINO asserts for its block. */
#define SPARSE_TRI_BLOCK 128
/* Tri-shape's result depends on the chunks (a chunk sees its own tokens whole), so its sparse
 * chunks have a fixed length, whatever the load: OpenVINO's scheduler splits prompts the same
 * way in max_num_batched_tokens steps. 8 blocks. */
#define SPARSE_TRI_CHUNK 1024

typedef struct sparse_params {
    int mode;                                /* enum sparse_mode */
    sparse_flex_params flex;                 /* flexprefill: gamma, tau, budgets, dense_below */
    double xattention_threshold;             /* (0, 1]; 1: every causal block; default 0.8 (a
                                                double: the official code's Python float) */
    int xattention_block_size;               /* 16, 32, 64 or 128; default 128 */
    int xattention_stride;                   /* divides the block size; default 8 */
    int num_retained_start_tokens_in_cache;  /* trishape; multiple of 128; default 128 */
    int num_retained_recent_tokens_in_cache; /* trishape; multiple of 128; default 1920 */
    int num_last_dense_tokens_in_prefill;    /* every mode; default 100 (flexprefill: 0, the
                                                official FlexPrefill has no dense tail) */
} sparse_params;

/* The mode's defaults (OpenVINO GenAI's SparseAttentionConfig; xattention_block_size 128 as the
 * official Xattention_prefill asserts, where OpenVINO's 64 is its hardware's block; FlexPrefill's
 * shipped configuration, sparse/flex.h). */
void sparse_params_default(sparse_params *p, int mode);
/* 0, or SPARSE_ERR_INVALID with the reason in err (may be NULL) and the offending key's API name
 * in *key (may be NULL): "mode", "xattention_threshold", ..., FlexPrefill's "gamma" etc. */
int sparse_params_check(const sparse_params *p, char *err, size_t errlen, const char **key);

/* "flexprefill", "xattention", "trishape" <-> enum sparse_mode; parse: -1 for anything else. */
int sparse_mode_parse(const char *s);
const char *sparse_mode_name(int mode);

/* The method's block size in tokens (the CSR lists' block). */
int sparse_block_size(const sparse_params *p);

/* Tokens [0, sparse_end) of a prompt of n tokens run in sparse chunks; 0: the prompt is dense
 * (shorter than the method's sparse minimum: FlexPrefill's dense threshold, two blocks for the
 * others). p must pass sparse_params_check. */
int sparse_plan(const sparse_params *p, int n);
/* The length of the sparse chunk starting at done (< sparse_end, a block boundary) when the
 * scheduler would take `want` tokens (want >= 1): at most to sparse_end, whole blocks unless it
 * reaches sparse_end, at least one block, never leaving less than a block behind; trishape:
 * SPARSE_TRI_CHUNK whatever `want` is. */
int sparse_chunk_len(const sparse_params *p, int sparse_end, int done, int want);

/* The prefix cache's name for KV computed with these parameters (scheduler/sched_pcache.h: a
 * kind): a hash of the mode and of every parameter its selection depends on; never 0, which names
 * dense KV. Equal parameters give equal keys in every process (no pointers, no padding hashed). */
uint64_t sparse_params_key(const sparse_params *p);
/* The positions a sparse prefill can start at after reused KV: multiples of this (the method's
 * block; Tri-shape's fixed chunk, so that a prompt resumed from its own cached prefix is cut
 * into the same chunks as when it was computed whole). */
int sparse_resume_align(const sparse_params *p);

/* XAttention: the chunk size Xattention_prefill gives xattn_estimate for k_len keys
 * (max(min(max(2048, p), 2^28 / p), 2048), p = k_len rounded up to a power of two): the official
 * torch path's first chunk of that many queries selects with a quirk that cpu_xattn_index_build
 * reproduces on request (cpu/sparse_idx.h). */
int sparse_xattn_official_chunk(int k_len);

/* Tri-shape: the key tokens [*lo, *hi) a sparse chunk after `cached` tokens skips (*lo == *hi:
 * none). OpenVINO's rule: with c = floor(cached / 128) full blocks, s = start / 128, r =
 * recent / 128, blocks [s, c - r) are skipped when c > s + r. */
void sparse_tri_skip(const sparse_params *p, int cached, int *lo, int *hi);

#endif
