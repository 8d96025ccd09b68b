/* cpu/flex.h — FlexPrefill dynamic sparse prefill attention, the reference.
 *
 * What it reproduces: bytedance/FlexPrefill@a24b27b, flex_prefill/ops/flex_prefill_attention.py:
 * flex_prefill_attention() (the dense short-prompt rule), get_active_blocks() (the per-head block
 * selection) and block_wise_prefill_attention_kernel (causal attention over the selected blocks).
 * ../shared/papers/flexprefill-notes.md walks through that code; cpu/flex_index.c says, step by
 * step, which line of it each part follows and which of its quirks it keeps on purpose.
 *
 * Layout ("bnhd", as the official code and our forward pass hold them), float32:
 *   q   row t, head h at q + t * q_stride + h * head_dim          (n_tokens, n_heads, head_dim)
 *   k,v row t, kv head g at k + t * kv_stride + g * head_dim      (n_tokens, n_kv_heads, head_dim)
 *   out row t, head h at out + t * out_stride + h * head_dim
 * The prompt attends to itself causally (no prefix: q and k have the same length, as the
 * official code asserts) — or, for a chunk after cached tokens (q_pos0 > 0, chunk-aware sparse
 * prefill), the queries are positions q_pos0 .. n_tokens - 1 (q row t - q_pos0, out likewise) and
 * attend to keys 0 .. t; q_pos0 is then a multiple of the index's block size.
 *
 * The index is a per-head CSR block list: for head h and query block r, the key blocks
 * col[row_ptr[h * (nb + 1) + r] .. row_ptr[h * (nb + 1) + r + 1]) in ascending order, where
 * nb = ceil(n_tokens / block_size). Every list holds block 0 (the attention sink) and block r
 * (the diagonal) and no block above the diagonal.
 *
 * Arithmetic: float32 with a fixed order (dot products are cpu_dot, softmaxes cpu_softmax, sums
 * over tokens in double in index order), so results do not depend on the thread count. Sparse
 * attention with every causal block selected gives the same bits as dense causal attention
 * (cpu_attend over keys 0..t).
 *
 * Threads: functions are reentrant; `pool` may be NULL (single-threaded); one caller per pool.
 * Errors: 0, or CPU_FLEX_ERR_* (negative); cpu_flex_strerror() names them. Sizes are bounded
 * before anything is allocated (CPU_FLEX_MAX_*). */
#ifndef TANDEM_CPU_FLEX_H
#define TANDEM_CPU_FLEX_H
#include "cpu/pool.h"
#include "sparse/flex.h"
#include <stddef.h>
#include <stdint.h>

enum { CPU_FLEX_ERR_INVALID = SPARSE_FLEX_ERR_INVALID, CPU_FLEX_ERR_NOMEM = -2 };
const char *cpu_flex_strerror(int status);

/* Bounds: 1M tokens (8x the 128K target), heads and head_dim as cpu_attend allows. */
#define CPU_FLEX_MAX_TOKENS   SPARSE_FLEX_MAX_TOKENS
#define CPU_FLEX_MAX_HEADS    256
#define CPU_FLEX_MAX_HEAD_DIM 1024
/* Query / key blocks per prompt: the selection keeps nb^2 bytes (and nb^2 scores for a
 * query-aware head) per thread: 8192 blocks = 1M tokens of 128, 64 MiB of marks. */
#define CPU_FLEX_MAX_BLOCKS   8192

/* The parameters, their defaults and the dense rule are sparse/flex.h's (sparse_flex_params),
 * shared with the GPU and card implementations. */

typedef struct cpu_flex_qkv {
    int n_tokens, n_heads, n_kv_heads, head_dim;
    const float *q;
    size_t q_stride; /* floats between tokens */
    const float *k, *v;
    size_t kv_stride;
    int q_pos0; /* the first query's position (0: the whole prompt); q holds n_tokens - q_pos0 rows */
} cpu_flex_qkv;

/* 0 when the shape is usable (bounds, n_heads a multiple of n_kv_heads, strides wide enough). */
int cpu_flex_qkv_check(const cpu_flex_qkv *x, char *err, size_t errlen);

/* kv head of query head h */
static inline int cpu_flex_kv_head(int h, int n_heads, int n_kv_heads, int interleave)
{
    return interleave ? h % n_kv_heads : h / (n_heads / n_kv_heads);
}

typedef struct cpu_flex_index {
    int n_heads, n_blocks, block_size, n_tokens;
    int q_block0;         /* rows before it (queries cached before a chunk) are empty */
    int64_t *row_ptr;     /* (n_heads, n_blocks + 1), absolute offsets into col */
    int32_t *col;         /* nnz key-block ids */
    int64_t nnz;
    /* per head, what the selection decided (n_heads each) */
    uint8_t *query_aware; /* 1: the query-aware block map was added */
    float *js;            /* square-root JS distance that decided it (may be NaN, see flex_index.c) */
    int32_t *n_vertical;  /* vertical / slash budgets in blocks, after the clamp and the reset of */
    int32_t *n_slash;     /*   query-aware heads to min_budget */
} cpu_flex_index;

/* Runs get_active_blocks on x (n_tokens must be at least 2 * block_size, as every sparse call of
 * the official code has). The index is malloc'ed; free it with cpu_flex_index_free. */
int cpu_flex_index_build(cpu_pool *pool, const sparse_flex_params *p, const cpu_flex_qkv *x,
                         cpu_flex_index **out);
void cpu_flex_index_free(cpu_flex_index *ix);
/* An index with every causal block of every head (dense attention as a block list). */
int cpu_flex_index_full(int n_heads, int n_tokens, int block_size, cpu_flex_index **out);
/* The same for the query blocks from q_block0 on (a chunk's rows; earlier rows empty). */
int cpu_flex_index_full_from(int n_heads, int n_tokens, int block_size, int q_block0,
                             cpu_flex_index **out);
/* Causal blocks of rows q_block0 .. n_blocks - 1 of one head: sum of (r + 1). */
int64_t cpu_flex_index_causal(const cpu_flex_index *ix);
/* Blocks computed / causal blocks (cpu_flex_index_causal) for head h, or over all heads (h = -1). */
double cpu_flex_index_density(const cpu_flex_index *ix, int h);

/* out = causal attention of every query over the keys of its query block's listed key blocks.
 * scale: the softmax scale (0: 1 / sqrt(head_dim)). */
int cpu_flex_sparse_attention(cpu_pool *pool, const cpu_flex_qkv *x, const cpu_flex_index *ix,
                              int gqa_interleave, float scale, float *out, size_t out_stride);
/* out = dense causal attention (cpu_attend per query and head). */
int cpu_flex_dense_attention(cpu_pool *pool, const cpu_flex_qkv *x, int gqa_interleave,
                             float scale, float *out, size_t out_stride);

/* What one flex call did. */
typedef struct cpu_flex_report {
    int dense;              /* 1: the prompt was at or below the dense threshold */
    int n_heads, n_blocks;
    int n_query_aware;      /* heads that took the query-aware map */
    int64_t blocks_computed;/* over all heads (dense: every causal block) */
    int64_t blocks_causal;  /* n_heads * nb * (nb + 1) / 2 */
    double density;         /* blocks_computed / blocks_causal */
    double official_ratio;  /* the official return_computational_ratio: blocks / (nb^2 heads),
                               1 for the dense path as it returns */
} cpu_flex_report;

/* flex_prefill_attention: dense below the threshold, else index + sparse attention.
 * rep (may be NULL) gets the report; ix_out (may be NULL) receives the index of a sparse call
 * (NULL for a dense one), owned by the caller. */
int cpu_flex_attention(cpu_pool *pool, const sparse_flex_params *p, const cpu_flex_qkv *x,
                       float *out, size_t out_stride, cpu_flex_report *rep,
                       cpu_flex_index **ix_out);

#endif
