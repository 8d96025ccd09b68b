/* gpu/weights.cu — uploads a model's weights once, as bf16 (matrices) and float32 (norms,
 * biases). bf16 tensors are copied straight from the checkpoint's mapping; f32/f16 tensors go
 * through a device staging buffer and a conversion kernel (round to nearest even), so the host
 * never holds a converted copy. Every copy and conversion is queued on the compute stream (a
 * non-blocking stream: plain cudaMemcpy on the legacy stream would not be ordered before the
 * conversion kernels). Q/K/V and gate/up are fused into one matrix each (rows stacked),
 * so each pair of projections is one GEMM. */
#include "gpu/engine.cuh"
#include <stdlib.h>
#include <string.h>

static size_t tensor_elems(const model_tensor *t)
{
    return (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
}

struct uploader {
    gpu_engine *e;
    void *stage;       /* device staging for tensors that need conversion */
    size_t stage_bytes;
};

static int stage_for(uploader *u, size_t bytes)
{
    if (bytes <= u->stage_bytes) return ACCEL_OK;
    GPU_CHECK(cudaStreamSynchronize(u->e->compute));
    if (u->stage) GPU_CHECK(cudaFree(u->stage));
    u->stage = NULL;
    u->stage_bytes = 0;
    GPU_CHECK(cudaMalloc(&u->stage, bytes));
    u->stage_bytes = bytes;
    return ACCEL_OK;
}

/* Tensor -> bf16 at dst (which holds tensor_elems(t) values). */
static int put_bf16(uploader *u, const model_tensor *t, bf16 *dst)
{
    size_t n = tensor_elems(t), bytes = n * model_dtype_size(t->dtype);
    cudaStream_t s = u->e->compute;
    if (t->dtype == MODEL_DTYPE_BF16) {
        GPU_CHECK(cudaMemcpyAsync(dst, t->data, bytes, cudaMemcpyHostToDevice, s));
        return ACCEL_OK;
    }
    GPU_TRY(stage_for(u, bytes));
    GPU_CHECK(cudaMemcpyAsync(u->stage, t->data, bytes, cudaMemcpyHostToDevice, s));
    GPU_TRY(gpu_convert_to_bf16(s, u->stage, t->dtype, n, dst));
    GPU_CHECK(cudaStreamSynchronize(u->e->compute)); /* the stage is reused next */
    return ACCEL_OK;
}

static int put_f32(uploader *u, const model_tensor *t, float *dst)
{
    size_t n = tensor_elems(t), bytes = n * model_dtype_size(t->dtype);
    cudaStream_t s = u->e->compute;
    if (t->dtype == MODEL_DTYPE_F32) {
        GPU_CHECK(cudaMemcpyAsync(dst, t->data, bytes, cudaMemcpyHostToDevice, s));
        return ACCEL_OK;
    }
    GPU_TRY(stage_for(u, bytes));
    GPU_CHECK(cudaMemcpyAsync(u->stage, t->data, bytes, cudaMemcpyHostToDevice, s));
    GPU_TRY(gpu_convert_to_f32(s, u->stage, t->dtype, n, dst));
    GPU_CHECK(cudaStreamSynchronize(u->e->compute));
    return ACCEL_OK;
}

template <typename T> static int dev_alloc(T **p, size_t n)
{
    GPU_CHECK(cudaMalloc((void **)p, n * sizeof(T)));
    return ACCEL_OK;
}

static int upload_all(uploader *u)
{
    gpu_engine *e = u->e;
    const model *m = e->m;
    const gpu_dims &d = e->d;
    GPU_TRY(dev_alloc(&e->embed, (size_t)d.V * d.H));
    GPU_TRY(put_bf16(u, &m->embed, e->embed));
    if (m->lm_head.data == m->embed.data) {
        e->lm_head = e->embed;
    } else {
        GPU_TRY(dev_alloc(&e->lm_head, (size_t)d.V * d.H));
        GPU_TRY(put_bf16(u, &m->lm_head, e->lm_head));
    }
    GPU_TRY(dev_alloc(&e->norm, d.H));
    GPU_TRY(put_f32(u, &m->norm, e->norm));
    for (int l = 0; l < d.L; l++) {
        const model_layer *L = &m->layers[l];
        gpu_layer_w *w = &e->layers[l];
        GPU_TRY(dev_alloc(&w->w_qkv, (size_t)d.qkv * d.H));
        GPU_TRY(put_bf16(u, &L->wq, w->w_qkv));
        GPU_TRY(put_bf16(u, &L->wk, w->w_qkv + (size_t)d.qd * d.H));
        GPU_TRY(put_bf16(u, &L->wv, w->w_qkv + (size_t)(d.qd + d.kvd) * d.H));
        GPU_TRY(dev_alloc(&w->w_o, (size_t)d.H * d.qd));
        GPU_TRY(put_bf16(u, &L->wo, w->w_o));
        GPU_TRY(dev_alloc(&w->w_gu, (size_t)2 * d.I * d.H));
        GPU_TRY(put_bf16(u, &L->w_gate, w->w_gu));
        GPU_TRY(put_bf16(u, &L->w_up, w->w_gu + (size_t)d.I * d.H));
        GPU_TRY(dev_alloc(&w->w_down, (size_t)d.H * d.I));
        GPU_TRY(put_bf16(u, &L->w_down, w->w_down));
        GPU_TRY(dev_alloc(&w->attn_norm, d.H));
        GPU_TRY(put_f32(u, &L->attn_norm, w->attn_norm));
        GPU_TRY(dev_alloc(&w->ffn_norm, d.H));
        GPU_TRY(put_f32(u, &L->ffn_norm, w->ffn_norm));
        if (L->bq.data || L->bk.data || L->bv.data) {
            GPU_TRY(dev_alloc(&w->b_qkv, d.qkv));
            GPU_CHECK(cudaMemsetAsync(w->b_qkv, 0, (size_t)d.qkv * sizeof(float), e->compute));
            if (L->bq.data) GPU_TRY(put_f32(u, &L->bq, w->b_qkv));
            if (L->bk.data) GPU_TRY(put_f32(u, &L->bk, w->b_qkv + d.qd));
            if (L->bv.data) GPU_TRY(put_f32(u, &L->bv, w->b_qkv + d.qd + d.kvd));
        }
    }
    return ACCEL_OK;
}

int gpu_weights_upload(gpu_engine *e, char *err, size_t errlen)
{
    e->layers = (gpu_layer_w *)calloc(e->d.L, sizeof(gpu_layer_w));
    if (!e->layers) {
        snprintf(err, errlen, "cuda: out of host memory");
        return ACCEL_ERR_NOMEM;
    }
    uploader u = {e, NULL, 0};
    int st = upload_all(&u);
    cudaError_t ce = cudaStreamSynchronize(e->compute);
    if (!st && ce != cudaSuccess) st = gpu_cuda_status(ce, "weight upload", __FILE__, __LINE__);
    if (u.stage) cudaFree(u.stage);
    if (st) {
        snprintf(err, errlen, "cuda:%d: weight upload failed (%s)", e->index,
                 st == ACCEL_ERR_NOMEM ? "out of device memory" : "device error, see log");
        cudaGetLastError(); /* clear a non-sticky allocation error */
    }
    return st;
}

void gpu_weights_free(gpu_engine *e)
{
    if (!e->layers) return;
    for (int l = 0; l < e->d.L; l++) {
        gpu_layer_w *w = &e->layers[l];
        cudaFree(w->w_qkv);
        cudaFree(w->w_o);
        cudaFree(w->w_gu);
        cudaFree(w->w_down);
        cudaFree(w->b_qkv);
        cudaFree(w->attn_norm);
        cudaFree(w->ffn_norm);
    }
    free(e->layers);
    e->layers = NULL;
    if (e->lm_head != e->embed) cudaFree(e->lm_head);
    cudaFree(e->embed);
    cudaFree(e->norm);
    e->embed = e->lm_head = NULL;
    e->norm = NULL;
}
