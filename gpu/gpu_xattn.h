/* gpu/gpu_xattn.h — XAttention's block estimate and Tri-shape's block lists on the GPU (CUDA,
 * sm_80+), the C interface. Both must give cpu/sparse_idx.h's sets (the reference, which follows
 * mit-han-lab/x-attention's xattn_estimate and openvino.genai's Tri-shape rule line by line).
 *
 *   gpu_xattn_index    antidiagonal scoring with stride S on the tensor cores: one fused kernel
 *                      per group of query tiles (gpu/gpu_xattn.cu) computes Q_r K_r^T tile by tile
 *                      (Q_r: the stride-reshaped queries, rows reversed within each stride group;
 *                      K_r: the reshaped keys, read through the paged KV cache's block table),
 *                      keeps each row's running max and sum (online softmax) and writes per
 *                      (row, key block) partial sums; the same CTA then folds its rows into the
 *                      block masses A[I][J] — never an n x n (or n/S x n/S) tensor. Selection
 *                      (gpu/gpu_xattn_select.cu): per (head, query block) required = threshold x
 *                      row mass, block 0 and the diagonal first, the others by mass descending
 *                      (ties: lower block first), kept while the running sum is below required
 *                      (the crossing block kept), emitted as the CSR lists gpu_flex_attention and
 *                      the engine's block-sparse kernels read (gpu/engine.cuh: gpu_block_list).
 *   gpu_trishape_index Tri-shape's lists for a chunk after `q_pos0` cached tokens (block 128).
 *
 * A chunk after cached tokens: queries q_pos0 .. n - 1 (q holds those rows, row t at q + t *
 * q_tok + h * d), keys 0 .. n - 1 (key j of KV head g at k + row(j) * k_tok + g * k_head with
 * row(j) = tbl[j / 128] * bstride + j % 128, or j when tbl is NULL); q_pos0 a multiple of the
 * block size. CSR: row_ptr (n_heads, nb + 1) int32 absolute into col, nb = ceil(n / block); rows
 * before q_pos0 / block are empty.
 *
 * Numerics: h16 inputs, fp32 products and exponentials (exp2 with the scale log2(e) / sqrt(d) /
 * S, as the official Triton path), fp32 block masses; the CPU reference holds fp32 inputs and
 * double masses: on the same (h16-rounded) inputs sets differ only where a block's inclusion is
 * decided within rounding of `required` (tests/gpu/test_xattn_gpu.c measures it).
 *
 * Bounds: n up to GPU_XATTN_MAX_TOKENS, at most GPU_XATTN_MAX_BLOCKS key blocks, head_dim a
 * multiple of 8 up to 256, block 16/32/64/128, stride dividing the block. Errors: 0 or
 * GPU_FLEX_ERR_* (gpu/gpu_flex.h); CUDA errors are logged and returned. Threads: one caller per
 * workspace; kernels on the given stream. */
#ifndef TANDEM_GPU_XATTN_H
#define TANDEM_GPU_XATTN_H
#include "gpu/gpu_flex.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_XATTN_MAX_TOKENS (256 * 1024)
#define GPU_XATTN_MAX_BLOCKS 2048

typedef struct gpu_xattn_params {
    double threshold;   /* (0, 1]; >= 1 keeps every causal block */
    int block, stride;  /* sparse/sparse.h's xattention_block_size, xattention_stride */
    int official_chunk; /* > 0: the official torch path's first-chunk quirk for query blocks below
                           ceil(official_chunk / block) (cpu/sparse_idx.h); 0 in serving */
    int gqa_interleave;
    int key_splits;     /* 0: the Hopper estimate splits the keys of a query tile over several CTAs
                           when the query tiles are few (a chunk after cached tokens); 1: never
                           (benchmarks compare) */
} gpu_xattn_params;

typedef struct gpu_xattn_ws gpu_xattn_ws;

/* Device workspace for up to n keys with this head layout and block size; estimate 0: the lists
 * only (Tri-shape: none of the estimate's buffers). */
int gpu_xattn_ws_new(int n, int n_heads, int n_kv_heads, int head_dim, int block, int estimate,
                     gpu_xattn_ws **out);
void gpu_xattn_ws_free(gpu_xattn_ws *ws);
size_t gpu_xattn_ws_bytes(int n, int n_heads, int n_kv_heads, int head_dim, int block,
                          int estimate);
/* The same workspace inside mem (gpu_xattn_ws_bytes of device memory, 256-byte aligned, which
 * gpu_xattn_ws_free leaves to the caller); mem NULL: gpu_xattn_ws_new. */
int gpu_xattn_ws_new_at(void *mem, int n, int n_heads, int n_kv_heads, int head_dim, int block,
                        int estimate, gpu_xattn_ws **out);

int gpu_xattn_index(gpu_xattn_ws *ws, const gpu_xattn_params *p, const void *q, size_t q_tok,
                    const void *k, size_t k_tok, size_t k_head, const int *tbl,
                    long long bstride, int n, int q_pos0, void *stream);
/* Tri-shape (block 128; the workspace's block must be 128): skipped key blocks [lo, hi) of
 * every row from q_pos0 / 128 on (sparse/sparse.h: sparse_tri_skip, in blocks). */
int gpu_trishape_index(gpu_xattn_ws *ws, int lo, int hi, int n, int q_pos0, void *stream);

/* The workspace's last index (device pointers, valid until the next call). */
const int32_t *gpu_xattn_ws_row_ptr(const gpu_xattn_ws *ws);
const int32_t *gpu_xattn_ws_col(const gpu_xattn_ws *ws);
/* XAttention's block masses of the last gpu_xattn_index: (n_heads, nb - q_pos0 / block, nb)
 * floats, entries right of the diagonal unspecified. */
const float *gpu_xattn_ws_mass(const gpu_xattn_ws *ws);

/* Host entry (exported by the serving plugin: `tandem sparse-index --device cuda`, and the
 * tests): the method's lists, on CUDA device `device`, for host float q ((n - q_from) rows) and k, rounded to h16 on
 * upload, on the current device. row_ptr: malloc'ed (n_heads * (nb + 1)) int64, col malloc'ed;
 * mass (may be NULL, xattention only): malloc'ed as gpu_xattn_ws_mass's floats (entries right of
 * the diagonal 0). p is a checked sparse_params (sparse/sparse.h; flexprefill is refused).
 * *ms (may be NULL) gets the device time of the index. */
#define GPU_SPARSE_INDEX_SYMBOL "gpu_sparse_index_host"
struct sparse_params;
typedef int (*gpu_sparse_index_host_fn)(int device, const struct sparse_params *p,
                                        int official_chunk,
                                        const float *q, const float *k, int n, int q_from,
                                        int n_heads, int n_kv_heads, int head_dim,
                                        int64_t **row_ptr, int32_t **col, float **mass,
                                        double *ms, char *err, size_t errlen);
int gpu_sparse_index_host(int device, const struct sparse_params *p, int official_chunk,
                          const float *q,
                          const float *k, int n, int q_from, int n_heads, int n_kv_heads,
                          int head_dim, int64_t **row_ptr, int32_t **col, float **mass,
                          double *ms, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
