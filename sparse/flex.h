/* sparse/flex.h — FlexPrefill's parameters and rules, the part every backend shares.
 *
 * A sparse method is defined once and implemented by each backend's kernels: the reference in
 * cpu/flex.h, the GPU's in gpu/gpu_flex.h, the card's in fpga/kernels/flex_*.c. What they must
 * agree on — the parameters, when a prompt runs dense, how a budget in tokens becomes blocks —
 * lives here, where every backend may include it (a backend never includes another backend).
 * The request-level knob is scheduler/accel.h's accel_sparse; a backend maps it onto
 * sparse_flex_params and asks these rules.
 *
 * What it reproduces: bytedance/FlexPrefill@a24b27b, flex_prefill/ops/flex_prefill_attention.py:
 * flex_prefill_attention()'s dense short-prompt rule and get_active_blocks()' budgets.
 *
 * Threads: pure functions; any thread. Errors: 0, or SPARSE_FLEX_ERR_INVALID (-1). */
#ifndef TANDEM_SPARSE_FLEX_H
#define TANDEM_SPARSE_FLEX_H
#include <stddef.h>
#include <stdint.h>

enum { SPARSE_FLEX_ERR_INVALID = -1 };

/* Longest prompt the parameters may name: 1M tokens (8x the 128K target). */
#define SPARSE_FLEX_MAX_TOKENS (1 << 20)

typedef struct sparse_flex_params {
    float gamma;        /* coverage of the attention mass, (0, 1]; default 0.9 */
    float tau;          /* JS-distance threshold for query-aware heads, [0, 1]; default 0.1 */
    int min_budget;     /* tokens per pattern at least (ceil'ed to blocks); 0: the official None
                           (1 token); default 1024 */
    int max_budget;     /* tokens per pattern at most; 0: none (the official None) */
    int block_size;     /* 16, 32, 64 or 128 (the official set); default 128 */
    int gqa_interleave; /* 0: kv head = h / (n_heads / n_kv_heads); 1: h % n_kv_heads */
    int dense_below;    /* prompts of at most this many tokens run dense; -1 (default): the
                           official rule max(2 * block_size, ceil(min_budget / bs) * bs) */
} sparse_flex_params;

/* The shipped configuration (flex_prefill/modules/patch.py ATTENTION_CONFIG_EXAMPLE, README):
 * gamma 0.9, tau 0.1, min_budget 1024, max_budget None, block 128, gqa_interleave False. */
void sparse_flex_params_default(sparse_flex_params *p);
/* 0, or SPARSE_FLEX_ERR_INVALID with the reason in err (err may be NULL). */
int sparse_flex_params_check(const sparse_flex_params *p, char *err, size_t errlen);
/* The prompt length at or below which flex attention runs dense. */
int sparse_flex_dense_threshold(const sparse_flex_params *p);

/* ceil(tokens / bs) in blocks (tokens up to INT32_MAX): how a budget in tokens is counted. */
static inline int64_t sparse_flex_budget_blocks(int64_t tokens, int bs)
{
    return (tokens + bs - 1) / bs;
}

#endif
