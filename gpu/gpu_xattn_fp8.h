/* gpu/gpu_xattn_fp8.h — XAttention's estimate scored in FP8 (e4m3) on Hopper, opt-in: the C
 * interface (the kernels: gpu/gpu_xattn_fp8.cu; the reference it must match:
 * cpu_xattn_index_build_ex with fp8 1, cpu/sparse_idx.h).
 *
 * What changes against gpu/gpu_xattn.h's estimate: a pre-pass takes each head's largest
 * magnitude (queries of the chunk per query head, all n keys per KV head), picks the power of two
 * 2^e that puts it in (224, 448] (cpu_xattn_fp8_exp: nothing saturates, and the scaling is exact,
 * so the CPU reproduces every FP8 operand bit for bit), and writes the stride-reshaped Q_r and K_r
 * once, in e4m3 (round to nearest even), row-major with rows padded to 128 bytes; the estimate
 * then multiplies them with wgmma m64n128k32 e4m3 (twice the bf16 rate, half the copies per
 * FLOP) and folds 2^-(e_q + e_k) into the logit scale; softmax, block sums, selection and lists
 * are the bf16 path's. Per head rather than per row: e4m3 is floating point (3 mantissa bits at
 * any magnitude), so a scale only places the range; one per head costs nothing in the epilogue
 * (per-row scales would need a per-key-column factor on every accumulator) and the head's range
 * below its largest value (2^15 of normals, then subnormals) covers every term that matters in a
 * dot product dominated by its largest ones.
 *
 * Taken where the Hopper estimate runs (sm_90a, B / S >= 8) and head_dim is a multiple of 16
 * (key splits included); elsewhere the bf16 path runs. Not the default (gpu_tune xattn_fp8=1 in
 * the engine): against the recorded official sets the FP8 selection does not meet issue 22's rule
 * (BENCHMARKS.md, "XAttention's estimate in FP8"). Extra device memory: (chunk rows x H + n x Hk)
 * x head_dim bytes (rows padded), allocated by the first FP8 call that needs more, or lent
 * (gpu_xattn_ws_fp8_at). Threads: as gpu_xattn.h. */
#ifndef TANDEM_GPU_XATTN_FP8_H
#define TANDEM_GPU_XATTN_FP8_H
#include "gpu/gpu_xattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* on: GPU_XATTN_FP8_WS (1) the workspace's estimates score in FP8 where they can (above), on the
 * copy engine with a producer warpgroup (key splits included), each 128-wide chunk's partial
 * product added to fp32 accumulators (the tensor cores' own FP8 accumulation is narrower than
 * fp32: gpu/gpu_xattn_fp8.cu); for comparisons: GPU_XATTN_FP8_WG (2) the 256-thread cp.async
 * kernel (no key splits: split calls stay bf16) and GPU_XATTN_FP8_WS_RAW (3) the warp-specialized
 * one, both accumulating in the tensor cores; 0: bf16 (the default). Frees the FP8 buffers when
 * turned off. 0 or GPU_FLEX_ERR_*. */
#define GPU_XATTN_FP8_WS 1
#define GPU_XATTN_FP8_WG 2
#define GPU_XATTN_FP8_WS_RAW 3
int gpu_xattn_ws_fp8(gpu_xattn_ws *ws, int on);
/* Device bytes of the FP8 buffers for a chunk after pos0 cached tokens of n (the worst stride of
 * block 128), and gpu_xattn_ws_fp8 with them in mem (bytes long, 256-byte aligned, the caller's:
 * the engine lends them with the workspace); a call whose buffers would not fit runs bf16. */
size_t gpu_xattn_fp8_bytes(int n, int pos0, int n_heads, int n_kv_heads, int head_dim);
int gpu_xattn_ws_fp8_at(gpu_xattn_ws *ws, int on, void *mem, size_t bytes);
/* 1 when the last gpu_xattn_index on ws scored in FP8. */
int gpu_xattn_ws_fp8_used(const gpu_xattn_ws *ws);

/* gpu_sparse_index_host with the FP8 choice (fp8: gpu_xattn_ws_fp8(ws, fp8); *used, may be NULL,
 * gets gpu_xattn_ws_fp8_used). */
#define GPU_SPARSE_INDEX_EX_SYMBOL "gpu_sparse_index_host_ex"
typedef int (*gpu_sparse_index_host_ex_fn)(int device, const struct sparse_params *p,
                                           int official_chunk, int fp8, const float *q,
                                           const float *k, int n, int q_from, int n_heads,
                                           int n_kv_heads, int head_dim, int64_t **row_ptr,
                                           int32_t **col, float **mass, int *used, double *ms,
                                           char *err, size_t errlen);
int gpu_sparse_index_host_ex(int device, const struct sparse_params *p, int official_chunk,
                             int fp8, const float *q, const float *k, int n, int q_from,
                             int n_heads, int n_kv_heads, int head_dim, int64_t **row_ptr,
                             int32_t **col, float **mass, int *used, double *ms, char *err,
                             size_t errlen);

/* The device's conversion, for the tests: out[i] = the e4m3 bits of in[i] * 2^shift as the
 * pre-pass converts (__nv_cvt_float_to_fp8, satfinite, e4m3), on CUDA device `device`. */
#define GPU_XATTN_FP8_CVT_SYMBOL "gpu_xattn_fp8_convert_host"
typedef int (*gpu_xattn_fp8_convert_fn)(int device, const float *in, int shift, uint8_t *out,
                                        int n);
int gpu_xattn_fp8_convert_host(int device, const float *in, int shift, uint8_t *out, int n);

#ifdef __cplusplus
}
#endif
#endif
