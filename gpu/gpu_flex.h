/* gpu/gpu_flex.h — FlexPrefill sparse prefill on the GPU (CUDA, sm_90), the C interface.
 *
 * Two parts, both checked against the CPU reference (cpu/flex.h):
 *   gpu_flex_index      get_active_blocks as fused kernels that never hold an n x n tensor:
 *                       the last 128 rows' attention is streamed over key chunks twice (row
 *                       statistics, then normalised weights into per-key vertical sums and
 *                       per-diagonal slash sums — FAST-Prefill's stream-and-accumulate), the
 *                       coverage budgets are radix selections over those n-long vectors (the
 *                       same counts a sort + cumsum gives), and the CSR lists are emitted
 *                       directly (count, scan, fill). Design notes in gpu/gpu_flex_index.cu.
 *   gpu_flex_attention  causal attention over a CSR block list: the prefill attention kernel
 *                       (gpu/attn_prefill.cu, mma.sync, FlashAttention-2 style) driven by the
 *                       lists (bf16 in and out, fp32 accumulation, online softmax), GQA.
 * Layouts as the CPU reference: q (n, n_heads, d), k / v (n, n_kv_heads, d), out like q; bf16
 * device pointers; CSR int32: row_ptr (n_heads, nb + 1) absolute into col; block 128.
 * head_dim 64 or 128; n up to 256K tokens (nb <= 2048: the query-aware map keeps nb^2 floats per
 * head). The caller applies flex_prefill_attention's dense rule first (sparse_flex_dense_threshold:
 * prompts of at most max(256, ceil(min_budget / 128) * 128) tokens run dense); gpu_flex_index
 * needs n >= 256.
 *
 * Device pointers and streams are passed as void * so that C callers need no CUDA headers.
 * Errors: 0, or GPU_FLEX_ERR_* (the ACCEL_ERR_* values of scheduler/accel.h); a CUDA error is
 * logged to stderr with its call site and returned, never fatal. Threads: one caller per
 * workspace; kernels run on the given stream. */
#ifndef TANDEM_GPU_FLEX_H
#define TANDEM_GPU_FLEX_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GPU_FLEX_ERR_NOMEM = -1, GPU_FLEX_ERR_DEVICE = -2, GPU_FLEX_ERR_INVALID = -3 };

#define GPU_FLEX_BS         128
#define GPU_FLEX_MAX_TOKENS (256 * 1024)
#define GPU_FLEX_MAX_HEADS  128

typedef struct gpu_flex_params {
    float gamma, tau;
    int min_blocks, max_blocks; /* budgets in blocks (max 0: none) */
    int gqa_interleave;
} gpu_flex_params;

/* Per-head result, as cpu_flex_index keeps it. */
typedef struct gpu_flex_head {
    int32_t n_vertical, n_slash, query_aware;
    float js;
} gpu_flex_head;

typedef struct gpu_flex_ws gpu_flex_ws;

/* Device workspace for prompts of up to n tokens with this head layout. */
int gpu_flex_ws_new(int n, int n_heads, int n_kv_heads, int head_dim, gpu_flex_ws **out);
void gpu_flex_ws_free(gpu_flex_ws *ws);
/* Device bytes gpu_flex_ws_new takes for that shape (0: a shape it refuses). */
size_t gpu_flex_ws_bytes(int n, int n_heads, int n_kv_heads, int head_dim);
/* The same workspace inside mem (gpu_flex_ws_bytes of device memory, 256-byte aligned, which
 * gpu_flex_ws_free leaves to the caller); mem NULL: gpu_flex_ws_new. */
int gpu_flex_ws_new_at(void *mem, int n, int n_heads, int n_kv_heads, int head_dim,
                       gpu_flex_ws **out);

/* Builds the index of q, k (device bf16, n tokens, n >= 256) into the workspace. */
int gpu_flex_index(gpu_flex_ws *ws, const gpu_flex_params *p, const void *q, const void *k,
                   int n, void *stream);
/* The same with K at any layout: key j of KV head g at k + j * k_tok + g * k_head (bf16
 * elements), e.g. the engine's KV cache (head_dim, capacity * head_dim). q stays (n, H, d). */
int gpu_flex_index_kv(gpu_flex_ws *ws, const gpu_flex_params *p, const void *q, const void *k,
                      size_t k_tok, size_t k_head, int n, void *stream);
/* The same over a paged KV cache (gpu/engine.cuh): key j's row is tbl[j / 128] * bstride +
 * j % 128 (device table; NULL: row j), at k + row * k_tok + g * k_head. */
int gpu_flex_index_kv_paged(gpu_flex_ws *ws, const gpu_flex_params *p, const void *q,
                            const void *k, size_t k_tok, size_t k_head, const int *tbl,
                            long long bstride, int n, void *stream);
/* The same for a chunk after cached tokens (chunk-aware sparse prefill, cpu/flex.h's q_pos0):
 * q holds the queries q_pos0 .. n - 1 (rows of (H, d)), q_pos0 a multiple of 128 with at least
 * one block after it; the estimate takes the chunk's last 128 queries over every key 0 .. n - 1
 * and the query-aware map the chunk's rows only (cut at gamma x rows); rows before q_pos0 / 128
 * are empty. The workspace is sized for n. */
int gpu_flex_index_chunk(gpu_flex_ws *ws, const gpu_flex_params *p, const void *q, const void *k,
                         size_t k_tok, size_t k_head, const int *tbl, long long bstride, int n,
                         int q_pos0, void *stream);
/* The workspace's index (device pointers, valid until the next gpu_flex_index). */
const int32_t *gpu_flex_ws_row_ptr(const gpu_flex_ws *ws);
const int32_t *gpu_flex_ws_col(const gpu_flex_ws *ws);
const gpu_flex_head *gpu_flex_ws_heads(const gpu_flex_ws *ws);

/* out = causal attention over the listed blocks (all device pointers). */
int gpu_flex_attention(const void *q, const void *k, const void *v, void *out, int n,
                       int n_heads, int n_kv_heads, int head_dim, const int32_t *row_ptr,
                       const int32_t *col, int gqa_interleave, void *stream);

/* ---- entry points for tests and benchmarks (host arrays; found with dlsym in the test library
 * beside the plugin, build/libtandem_cuda_test.so: gpu/test/flex_test_api.cu) ---- */

/* Number of CUDA devices (0 when none or no driver). */
int gpu_flex_test_device_count(void);
/* Index of host float q, k (rounded to bf16 on upload). row_ptr: n_heads * (nb + 1);
 * col: col_cap entries; heads: n_heads. *nnz gets the total. */
int gpu_flex_test_index(const float *q, const float *k, int n, int n_heads, int n_kv_heads,
                        int head_dim, const gpu_flex_params *p, int32_t *row_ptr, int32_t *col,
                        int64_t col_cap, int64_t *nnz, gpu_flex_head *heads);
/* The same with K laid out per head, as in the engine's KV cache ((n_kv_heads, n + 64, d),
 * through gpu_flex_index_kv) when head_major, else as above. */
int gpu_flex_test_index_layout(const float *q, const float *k, int n, int n_heads, int n_kv_heads,
                               int head_dim, int head_major, const gpu_flex_params *p,
                               int32_t *row_ptr, int32_t *col, int64_t col_cap, int64_t *nnz,
                               gpu_flex_head *heads);
/* Attention of host float q, k, v (rounded to bf16) over a host CSR; out (n, n_heads, d) float
 * (the bf16 result widened). */
int gpu_flex_test_attention(const float *q, const float *k, const float *v, int n, int n_heads,
                            int n_kv_heads, int head_dim, const int32_t *row_ptr,
                            const int32_t *col, int gqa_interleave, float *out);

typedef struct gpu_flex_bench_result {
    double index_ms;        /* median of reps */
    double sparse_ms;       /* block-sparse attention over the index: gpu_flex_attention (the
                             * warp-specialized kernel on Hopper with head_dim 128, else mma.sync
                             * with 4 warps) */
    double sparse4_ms;      /* the mma.sync kernel, 4 warps (64 rows a block) */
    double sparse8_ms;      /* the same with 8 warps (128 rows; head_dim 128 only, else 0) */
    double sparse_ws3_ms;   /* the warp-specialized kernel with 3 stages (0 where it cannot run) */
    double dense_ms;        /* gpu_flex_attention over every causal block */
    double dense_kernel_ms; /* the dense kernel of the same family (causal tile range, no lists) */
    double density;         /* computed / causal blocks */
    int64_t nnz;
    int n_query_aware;
    char device[128];
} gpu_flex_bench_result;
/* Times index generation, sparse and dense attention on host inputs (rounded to bf16). When
 * row_ptr/col are not NULL the index is copied out (sizes as gpu_flex_test_index). dense may be
 * 0 to skip the dense run. */
int gpu_flex_bench(const float *q, const float *k, const float *v, int n, int n_heads,
                   int n_kv_heads, int head_dim, const gpu_flex_params *p, int reps, int dense,
                   gpu_flex_bench_result *res, int32_t *row_ptr, int32_t *col, int64_t col_cap);

#ifdef __cplusplus
}
#endif
#endif
