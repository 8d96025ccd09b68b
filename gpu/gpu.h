/* gpu/gpu.h — the CUDA engine behind the accel interface, as plain C (no CUDA types), so that the
 * accel glue (gpu/accel.c, compiled as C: it embeds struct accel_dev, whose _Atomic members C++
 * cannot parse) and the CUDA side (the .cu files) meet here.
 *
 * One engine = one GPU holding one model's weights (h16: bf16 or fp16, the build's type,
 * gpu/h16.cuh), its workspaces and two streams:
 * `compute` (every kernel and GEMM, in order) and `copy` (the KV export's device-to-host copies,
 * ordered against compute with events). A gpu_kv is one sequence's KV cache on the device.
 *
 * Threads: an engine is driven by one thread at a time (accel.h's rule). Every entry returns when
 * the device has finished the work it queued (it synchronizes at the end), so host buffers passed
 * in may be reused as soon as it returns.
 *
 * Errors: ACCEL_OK or a negative ACCEL_ERR_*: NOMEM when a device allocation fails (an admission
 * answer: nothing else changed), DEVICE after any other CUDA/cuBLAS failure (logged to stderr with
 * file:line; the accel wrapper then marks the device FAILED), INVALID/UNSUPPORTED for arguments
 * outside what the engine was built for, CANCELLED, or a sink's own non-zero status. */
#ifndef TANDEM_GPU_H
#define TANDEM_GPU_H
#include <stddef.h>
#include <stdint.h>
#include "model/ckpt/model.h"
#include "proto/kv.h"
#include "scheduler/accel.h"
#include "gpu/gpu_flex.h"
#include "gpu/gpu_xattn.h"
#include "sparse/sparse.h"
#include "gpu/tuning.h"
#include "gpu/curve.h"
#include "sparse/tls.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_engine gpu_engine;
typedef struct gpu_kv gpu_kv;

/* Positions per KV block (the paged pool: gpu/engine.cuh says why 128). */
#define GPU_KV_BLOCK 128

/* Decode batch bound (sequences per accel_decode): sizes the per-step workspaces. */
#define GPU_MAX_BATCH 256
#define GPU_LOGIT_CHUNKS_MAX 8 /* lm_head column chunks of a batched decode step, at most */

/* Opens CUDA device `index`, uploads m's weights (h16; other dtypes converted on the device; a
 * weight past fp16's range fails the fp16 build's upload) and sizes
 * the workspaces. mem_limit (bytes, 0: none) caps the KV budget; t: the settings (gpu/tuning.h,
 * copied; NULL: the defaults). NULL with a message in err when there is no such device, the model
 * has a shape the kernels do not cover, or memory runs out. */
gpu_engine *gpu_engine_new(int index, const model *m, uint64_t mem_limit, const gpu_tuning *t,
                           char *err, size_t errlen);
void gpu_engine_free(gpu_engine *e);

/* "NVIDIA H100 80GB HBM3, 132 SMs" */
const char *gpu_engine_desc(const gpu_engine *e);
/* The device's peak memory bandwidth, bytes/s, from its memory clock and bus width (gpu_mem_bps;
 * 0 when the driver does not say). */
double gpu_engine_mem_bps(const gpu_engine *e);
/* Bytes available to KV caches: what was free after weights and workspaces, less a safety margin
 * (and at most mem_limit). */
uint64_t gpu_engine_kv_budget(const gpu_engine *e);
/* Bytes one position of one sequence takes in the KV cache (K and V, every layer, h16). */
uint64_t gpu_engine_kv_bytes_per_token(const gpu_engine *e);

/* A sequence of at most `capacity` positions: an empty block table (blocks are taken from the
 * engine's pool as it grows; gpu/engine.cuh). */
int gpu_kv_new(gpu_engine *e, int capacity, gpu_kv **out);
void gpu_kv_free(gpu_engine *e, gpu_kv *kv);
/* A new sequence of `capacity` positions sharing src's blocks of positions [0, n_tokens). */
int gpu_kv_fork(gpu_engine *e, gpu_kv *src, int n_tokens, int capacity, gpu_kv **out);
/* Gives back the blocks wholly past len positions. */
int gpu_kv_truncate(gpu_engine *e, gpu_kv *kv, int len);
/* Marks kv a prefix-cache holder: blocks only holders reference count as cached. */
int gpu_kv_hold(gpu_engine *e, gpu_kv *kv);
/* The pool: block ids in all, referenced, referenced by holders only. Any thread. */
void gpu_kv_usage(gpu_engine *e, int *total, int *used, int *cached);
/* Bytes of one block (every layer's K, then V: (2, n_layers, n_kv, GPU_KV_BLOCK, head_dim) h16). */
uint64_t gpu_kv_block_bytes(const gpu_engine *e);
/* Copies block `block` of kv (full) to host dst; waits. */
int gpu_kv_block_save(gpu_engine *e, gpu_kv *kv, int block, void *dst);
/* Appends one block of bytes from host src at position pos (a multiple of GPU_KV_BLOCK: kv's
 * length); ACCEL_ERR_NOMEM when the pool is exhausted. Takes the block and returns: the copy is
 * made by the engine's next entry — a prefill of kv overlaps it with its own layers, any other
 * entry (and gpu_host_free) copies it and waits first — so src must stay as it is until that entry
 * returns (gpu/kv_xfer.cu). */
int gpu_kv_block_load(gpu_engine *e, gpu_kv *kv, int pos, const void *src);
/* Makes the copies gpu_kv_block_load queued and waits for them (nothing to do without): every
 * entry but the overlapping prefill does it first. */
int gpu_kv_loads_settle(gpu_engine *e);
/* Positions [pos0, pos0 + n) that kv holds, quantized to kv_dtype and handed to sink layer by
 * layer as gpu_prefill's export does, in runs of at most the engine's chunk: the same bytes a
 * prefill of those positions exported (both quantize the cache's values). Waits. */
int gpu_kv_export(gpu_engine *e, gpu_kv *kv, int pos0, int n, const accel_kv_sink *sink,
                  enum proto_kv_dtype kv_dtype);

/* Appends n tokens at positions pos0.. of kv's sequence (pos0 = its current length).
 * logits: NULL, (vocab) for the last token, or (n, vocab) when all_logits; float32 on the host.
 * sink: when not NULL, each layer's K and V of these tokens (as the cache holds them: h16) are
 * quantized to kv_dtype and handed to sink->layer() in layer order (in runs of at most the engine's internal chunk of tokens), each
 * call as soon as its device-to-host copy has landed, while later layers still compute.
 * cancel: polled between layers. */
int gpu_prefill(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n, float *logits,
                int all_logits, const accel_kv_sink *sink, enum proto_kv_dtype kv_dtype,
                const volatile int *cancel);

/* A sparse chunk's method, mapped onto the GPU's kernels (gpu/accel.c: gpu_sparse_params, from
 * the scheduler's settled accel_sparse). */
typedef struct gpu_sparse_req {
    int mode;               /* SPARSE_MODE_* (sparse/sparse.h) */
    gpu_flex_params flex;   /* flexprefill */
    gpu_xattn_params xattn; /* xattention (block 128: the attention kernels' block) */
    int tri_lo, tri_hi;     /* trishape: the skipped key blocks [lo, hi) (sparse_tri_skip) */
} gpu_sparse_req;

/* Sparse prefill of a chunk: positions pos0 .. pos0 + n - 1 of kv (pos0 0: a whole prompt into an
 * empty sequence; else a chunk after pos0 cached positions, pos0 a multiple of 128; FlexPrefill:
 * pos0 + n >= 256, n >= 128). Each layer runs the Q/K/V projections of every token of the chunk
 * first (layer-major, in passes of the engine's chunk), builds the method's index over the
 * chunk's Q and every key cached before and in it (FlexPrefill gpu_flex_index_chunk,
 * XAttention gpu_xattn_index; Tri-shape's lists once per call: gpu_trishape_index): per head, per
 * query block of 128, a list of 128-key blocks; attends over the listed blocks only (the prefill
 * attention kernel in its block-sparse form), then runs the rest of the layer pass by pass.
 * logits, sink, cancel as gpu_prefill; the sink gets each layer as one chunk of all n tokens (as
 * the CPU backend's sparse prefill hands them over). rep (may be NULL) gets the blocks computed
 * and the causal blocks of the chunk's query blocks, summed over layers and heads.
 * Memory: besides what dense prefill uses, gpu_sparse_bytes_mode(e, ...) of device memory for the
 * call (the residual stream and Q of the chunk, the index workspace; with a sink, two layers of
 * quantized KV), taken before any work and released before returning — from the KV pool, as
 * whole chunks of free blocks counted as used meanwhile (admitted like KV: the caller frees cached
 * blocks on NOMEM and calls again; without VMM, cudaMalloc outside the pool): ACCEL_ERR_NOMEM,
 * with nothing changed, when it does not fit. ACCEL_ERR_UNSUPPORTED for head_dim other than 64 or 128
 * or pos0 + n past GPU_FLEX_MAX_TOKENS; ACCEL_ERR_INVALID for shapes the method does not take
 * here (the caller, gpu_sparse_params, runs those dense). */
int gpu_prefill_sparse(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                       float *logits, int all_logits, const accel_kv_sink *sink,
                       enum proto_kv_dtype kv_dtype, const volatile int *cancel,
                       const gpu_sparse_req *sr, accel_sparse_report *rep);
/* Device bytes gpu_prefill_sparse takes for an n-token FlexPrefill prompt (sink: with the KV
 * export in dt), and for any method's chunk after pos0 positions. */
uint64_t gpu_sparse_bytes(const gpu_engine *e, int n, int sink, enum proto_kv_dtype dt);
uint64_t gpu_sparse_bytes_mode(const gpu_engine *e, int mode, int pos0, int n, int sink,
                               enum proto_kv_dtype dt);

/* One decode step for n sequences: token ids[i] at position pos[i] of kvs[i]; logits (n, vocab).
 * argmax non-NULL (accel_decode_argmax): argmax[i] = model_sample_argmax of row i, computed on the
 * device, and only the rows with want[i] != 0 (NULL: all) copied into logits. */
int gpu_decode(gpu_engine *e, int n, gpu_kv *const *kvs, const int *pos, const int32_t *ids,
               float *logits, const unsigned char *want, int32_t *argmax);
/* 1 when gpu_decode takes argmax (the argmax setting, gpu/tuning.h) */
int gpu_decode_argmax_on(const gpu_engine *e);

/* Writes one imported layer chunk (dequantized to h16) at positions c->pos0.. of kv. */
int gpu_kv_import(gpu_engine *e, gpu_kv *kv, const proto_kv_layer *c);

/* ---------------------------------------------------------------- AsyncTLS sparse decode
 * (gpu/tls.cu, gpu/tls_kernels.cu; sparse/tls.h is the reference and says what is selected).
 * A sequence asked to decode sparse (gpu_kv_tls_set) keeps per-block K max/min and 4-bit channel
 * labels on the device; they are brought up to date from the cache itself before each sparse
 * step (a prefill, import, fork, block load or dense step since the last one is rebuilt from the
 * first block it touched; a decode step records its new key inside the step), so every path
 * that writes K is covered. Layers below dense_layers and rows of at most dense_below keys run
 * the dense decode attention; in a batch, rows that are not sparse in a step attend densely
 * through the sparse kernel's list form. Bounds of the kernels: */
#define GPU_TLS_MAX_TOKENS 8192 /* token_budget */
#define GPU_TLS_MAX_CAND 16384  /* block_budget * block_size: the candidates of the kept blocks */

/* Makes it available on the engine: p the defaults (checked; block_size, channels and
 * dense_layers hold for every sequence), on_default: sequences decode sparse unless told
 * otherwise, channels (n_layers, n_kv, p->channels) the label channels (copied). The model's
 * context must fit GPU_TLS_MAX_CAND blocks. 0, or ACCEL_ERR_UNSUPPORTED / INVALID / NOMEM with
 * the reason in err. */
int gpu_tls_open(gpu_engine *e, const sparse_tls_params *p, int on_default,
                 const uint16_t *channels, char *err, size_t errlen);
/* 1 when the engine has it. */
int gpu_tls_available(const gpu_engine *e);
/* The offload's pinned host pool (gpu/tls_off.cu): its bytes (0: none), the bytes a position of
 * an offloaded sequence takes there (its sparse layers' K and V; whole pages of GPU_KV_BLOCK
 * positions, the sequence's capacity), the seconds taking it took at open. */
uint64_t gpu_tls_host_pool(const gpu_engine *e, uint64_t *per_token, double *open_s);
/* Of it, the bytes offloaded sequences hold now. */
uint64_t gpu_tls_host_pool_used(gpu_engine *e);
/* A sequence's sparse decode from now on: p NULL: dense; else its token_budget and block_budget
 * (the engine's block size, channels and dense layers). ACCEL_ERR_UNSUPPORTED when the engine
 * has no channels, ACCEL_ERR_INVALID for budgets past the bounds above. */
int gpu_kv_tls_set(gpu_engine *e, gpu_kv *kv, const sparse_tls_params *p);
/* What a sequence's decode steps read since it was asked to decode sparse: keys attended and
 * keys of the rows, summed over layers, KV heads and steps (dense layers and dense rows count
 * every key), and level-1 blocks kept that were not kept by the step before (what an offload
 * would move) against all blocks kept (what a whole-block offload moves). Waits for the
 * device. */
typedef struct gpu_tls_stats {
    int64_t keys_read, keys_total, blocks_new, blocks_kept, steps;
    int64_t host_keys; /* of keys_read, read from host memory (an offloaded sequence) */
    int offloaded;     /* its KV is in host memory (sparse_tls_params.offload, gpu/tls_off.cu) */
} gpu_tls_stats;
int gpu_kv_tls_stats(gpu_engine *e, gpu_kv *kv, gpu_tls_stats *out);

/* Waits for the device; reports any pending asynchronous error. */
int gpu_engine_sync(gpu_engine *e);

/* Page-locked host memory (cudaHostAlloc) for buffers the device fills every step: gpu_decode
 * copies its logits straight into such a buffer instead of through its staging buffer and a
 * host copy. NULL when out of memory. */
void *gpu_host_alloc(gpu_engine *e, size_t bytes);
void gpu_host_free(gpu_engine *e, void *p);

/* Counters of the last prefill that exported KV (for benchmarks): bytes copied to the host and
 * the device time the copies took (sum over layers of copy start..end, milliseconds), and the
 * device time from the first token's embedding to the last layer's end of compute. */
typedef struct gpu_export_stats {
    uint64_t bytes;
    double copy_ms;
    double compute_ms;
    int layers;
} gpu_export_stats;
void gpu_engine_export_stats(const gpu_engine *e, gpu_export_stats *out);

#ifdef __cplusplus
}
#endif
#endif
