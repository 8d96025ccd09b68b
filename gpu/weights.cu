/* gpu/weights.cu — uploads a model's weights once, as h16 (matrices: bf16 or fp16, the plugin's
 * build, gpu/h16.cuh) and float32 (norms, biases). Tensors already in h16 are copied straight from
 * the checkpoint's mapping; the others go through a device staging buffer and a conversion
 * kernel (round to nearest even), so the host never holds a converted copy. A finite weight that
 * rounds to infinity (past fp16's 65504) fails the upload with ACCEL_ERR_UNSUPPORTED: that
 * checkpoint needs the bf16 build. Every copy and conversion is queued on the compute stream (a
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
    int *overflow;     /* device flag: a conversion rounded a finite value to infinity */
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

/* Tensor -> h16 at dst (which holds tensor_elems(t) values). */
static int put_h16(uploader *u, const model_tensor *t, h16 *dst)
{
    size_t n = tensor_elems(t), bytes = n * model_dtype_size(t->dtype);
    cudaStream_t s = u->e->compute;
    if (t->dtype == GPU_H16_MODEL_DTYPE) {
        GPU_CHECK(cudaMemcpyAsync(dst, t->data, bytes, cudaMemcpyHostToDevice, s));
        return ACCEL_OK;
    }
    GPU_TRY(stage_for(u, bytes));
    GPU_CHECK(cudaMemcpyAsync(u->stage, t->data, bytes, cudaMemcpyHostToDevice, s));
    GPU_TRY(gpu_convert_to_h16(s, u->stage, t->dtype, n, dst, u->overflow));
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
    GPU_TRY(put_h16(u, &m->embed, e->embed));
    if (m->lm_head.data == m->embed.data) {
        e->lm_head = e->embed;
    } else {
        GPU_TRY(dev_alloc(&e->lm_head, (size_t)d.V * d.H));
        GPU_TRY(put_h16(u, &m->lm_head, e->lm_head));
    }
    GPU_TRY(dev_alloc(&e->norm, d.H));
    GPU_TRY(put_f32(u, &m->norm, e->norm));
    for (int l = 0; l < d.L; l++) {
        const model_layer *L = &m->layers[l];
        gpu_layer_w *w = &e->layers[l];
        GPU_TRY(dev_alloc(&w->w_qkv, (size_t)d.qkv * d.H));
        GPU_TRY(put_h16(u, &L->wq, w->w_qkv));
        GPU_TRY(put_h16(u, &L->wk, w->w_qkv + (size_t)d.qd * d.H));
        GPU_TRY(put_h16(u, &L->wv, w->w_qkv + (size_t)(d.qd + d.kvd) * d.H));
        GPU_TRY(dev_alloc(&w->w_o, (size_t)d.H * d.qd));
        GPU_TRY(put_h16(u, &L->wo, w->w_o));
        GPU_TRY(dev_alloc(&w->w_gu, (size_t)2 * d.I * d.H));
        GPU_TRY(put_h16(u, &L->w_gate, w->w_gu));
        GPU_TRY(put_h16(u, &L->w_up, w->w_gu + (size_t)d.I * d.H));
        GPU_TRY(dev_alloc(&w->w_down, (size_t)d.H * d.I));
        GPU_TRY(put_h16(u, &L->w_down, w->w_down));
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

/* upload_all with the overflow flag: ACCEL_ERR_UNSUPPORTED when any conversion overflowed. */
static int upload_all_checked(uploader *u)
{
    GPU_CHECK(cudaMalloc((void **)&u->overflow, sizeof(int)));
    GPU_CHECK(cudaMemsetAsync(u->overflow, 0, sizeof(int), u->e->compute));
    GPU_TRY(upload_all(u));
    int flag = 0;
    GPU_CHECK(cudaMemcpyAsync(&flag, u->overflow, sizeof flag, cudaMemcpyDeviceToHost,
                              u->e->compute));
    GPU_CHECK(cudaStreamSynchronize(u->e->compute));
    return flag ? ACCEL_ERR_UNSUPPORTED : ACCEL_OK;
}

int gpu_weights_upload(gpu_engine *e, char *err, size_t errlen)
{
    e->layers = (gpu_layer_w *)calloc(e->d.L, sizeof(gpu_layer_w));
    if (!e->layers) {
        snprintf(err, errlen, "cuda: out of host memory");
        return ACCEL_ERR_NOMEM;
    }
    uploader u = {e, NULL, 0, NULL};
    int st = upload_all_checked(&u);
    cudaError_t ce = cudaStreamSynchronize(e->compute);
    if (!st && ce != cudaSuccess) st = gpu_cuda_status(ce, "weight upload", __FILE__, __LINE__);
    if (u.stage) cudaFree(u.stage);
    if (u.overflow) cudaFree(u.overflow);
    if (st == ACCEL_ERR_UNSUPPORTED) {
        snprintf(err, errlen, "cuda:%d: a weight exceeds the " GPU_H16_NAME " range (65504): this "
                 "checkpoint needs the bf16 build (--gpu-dtype bf16)", e->index);
    } else if (st) {
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
