/* gpu/gpu_split.h — layer-split prefill on the GPU (scheduler/accel.h: accel_prefill_req.layer0 /
 * layers, ACCEL_CAP_LAYER_SPLIT): one chunk's layers over several calls, between other sequences'
 * decode steps, when even the smallest chunk costs more than a time-between-tokens budget.
 * Included by gpu/forward.cu and gpu/accel.c only (not engine.cuh: no other kernel file rebuilds
 * for it). */
#ifndef TANDEM_GPU_SPLIT_H
#define TANDEM_GPU_SPLIT_H
#include "gpu/gpu.h"
#ifdef __cplusplus
extern "C" {
#endif

/* A chunk in progress: its residual stream (n x hidden float32) in device memory, cudaMalloc'ed
 * outside the KV pool's budget (2 MB for a 128-token chunk of the 8B shape: the scheduler splits
 * only its smallest chunks). */
typedef struct gpu_split gpu_split;

/* Layers [l0, l1) of the chunk at positions pos0 .. pos0 + n - 1 of kv; sr NULL: dense, as
 * gpu_prefill; else sparse, as gpu_prefill_sparse (the same rules and errors). The call from
 * l0 = 0 starts the chunk (*sp replaced by a new state; the embeddings go into its residual
 * stream); a later call continues it (*sp the state, for the same n: ACCEL_ERR_INVALID
 * otherwise). The call with l1 = the model's layers writes the logits and frees *sp (NULL); a
 * failed call frees it too. The result equals one whole call's bit for bit: every kernel sees
 * the inputs it sees there (the residual stream only lives elsewhere); the rows of each layer
 * are computed in the same passes. sink: each layer of the call once, in order (so the calls of
 * a chunk hand every layer over in order); a dense chunk longer than the engine's pass (t_max)
 * with a sink would hand its passes' runs over interleaved: ACCEL_ERR_UNSUPPORTED. rep: this
 * call's layers. */
int gpu_prefill_layers(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                       float *logits, int all_logits, const accel_kv_sink *sink,
                       enum proto_kv_dtype kv_dtype, const volatile int *cancel,
                       const gpu_sparse_req *sr, accel_sparse_report *rep, int l0, int l1,
                       gpu_split **sp);
/* Frees a chunk's state (NULL: nothing). */
void gpu_split_free(gpu_engine *e, gpu_split *sp);

#ifdef __cplusplus
}
#endif
#endif
