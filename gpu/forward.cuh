/* gpu/forward.cuh — what the forward pass (gpu/forward.cu: dense prefill, decode, layer-split)
 * shares with the sparse prefill (gpu/prefill_sparse.cu): the profile's events, the sequence's
 * cache pointers, the rope table, the logits of a prefill's rows, and the sparse prefill of a
 * range of layers (the layer-split calls, gpu/gpu_split.h). Included by those two files only (not
 * engine.cuh: no other kernel file rebuilds for it). The functions are hidden: the plugin exports
 * what it exported before they were shared. */
#ifndef TANDEM_GPU_FORWARD_CUH
#define TANDEM_GPU_FORWARD_CUH
#include "gpu/engine.cuh"
#include <string.h>

/* The profile (profile=1; the report: gpu_prof_report in gpu/forward.cu).
 * An event after every op of a pass; after the pass (synchronized), the time between consecutive
 * events goes to the op that ended at the second. Off by default: events cost a little, and
 * decode then runs without CUDA graphs. */
enum { P_START, P_ROPE_TAB, P_EMBED, P_NORM, P_QKV, P_ROPE, P_EXPORT, P_ATTN, P_O, P_GU, P_SWIGLU,
       P_DOWN, P_LOGITS, P_INDEX, P_LAB };

static inline gpu_seq_dev seq_of(const gpu_engine *e, const gpu_kv *kv)
{
    return gpu_kv_seq_dev(e, kv);
}

static inline void prof_mark(gpu_engine *e, int cat)
{
    if (!e->prof || e->prof_n >= GPU_PROF_EVENTS) return;
    cudaEventRecord(e->prof_ev[e->prof_n], e->compute);
    e->prof_cat[e->prof_n++] = cat;
}

static inline void prof_collect(gpu_engine *e, int kind)
{
    if (!e->prof) return;
    cudaStreamSynchronize(e->compute);
    for (int i = 1; i < e->prof_n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, e->prof_ev[i - 1], e->prof_ev[i]) == cudaSuccess)
            e->prof_ms[kind][e->prof_cat[i]] += ms;
    }
    cudaGetLastError();
    e->prof_passes[kind]++;
    e->prof_n = 0;
}

static inline void inv_table(const gpu_engine *e, int seq_len, float *out)
{
    const model_config *c = &e->m->cfg;
    if (c->rope.type == MODEL_ROPE_DYNAMIC)
        model_rope_inv_freq(c, seq_len, out);
    else
        memcpy(out, e->inv_freq0, sizeof(float) * (c->head_dim / 2));
}

#pragma GCC visibility push(hidden)

/* Logits of rows row0.. of x (the pass's residual stream) into host memory (float32), in
 * sub-batches (gpu/forward.cu). */
int gpu_logits_rows(gpu_engine *e, const float *x, int row0, int nrows, float *out);

/* The MLP of nr rows of layer w on the residual stream x, as every pass but the single-token
 * decode's fused kernels runs it: x += down(SwiGLU(gate/up(RMSNorm(x)))), gate/up and SwiGLU in
 * one kernel for a few rows (gpu_gemm_swiglu), else two (gpu/forward.cu); on e->compute. */
int gpu_mlp_rows(gpu_engine *e, const gpu_layer_w &w, int nr, float *x);

/* gpu_prefill_sparse of layers [l0, l1) on the residual stream xs (NULL: the workspace's):
 * gpu_prefill_sparse is layers [0, L); gpu_prefill_layers' sparse calls (gpu/prefill_sparse.cu). */
int gpu_prefill_sparse_layers(gpu_engine *e, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                              float *logits, int all_logits, const accel_kv_sink *sink,
                              enum proto_kv_dtype kv_dtype, const volatile int *cancel,
                              const gpu_sparse_req *sr, accel_sparse_report *rep, int l0, int l1,
                              float *xs);

#pragma GCC visibility pop
#endif
