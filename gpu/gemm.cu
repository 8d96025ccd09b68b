/* gpu/gemm.cu — every projection: out (T, N) = x (T, K) · W^T (+ out when beta = 1).
 *
 * T > 1 (prefill, decode batches): one cuBLAS call. Row-major W (N, K) is
 * column-major (K, N), so in cuBLAS terms C (N x T, col-major = row-major (T, N)) =
 * op_T(W) (N x K) · x (K x T): the "TN" layout, cuBLAS's fastest for bf16. bf16 operands, float32
 * accumulation (CUBLAS_COMPUTE_32F); the engine's handle forbids reduced-precision split-K
 * reductions (engine.cu), so the only rounding is the output's.
 *
 * T = 1 (single-sequence decode): our own kernel, because this is pure weight streaming (every
 * weight byte is used T times): one warp per output row, each lane streaming 16-byte chunks of
 * the row with four loads in flight, the activation row read through L1, float32 accumulation,
 * a shuffle reduction. Measured on an H200 (tests/gpu/README.md): ahead of cuBLAS at T = 1
 * (5.35 vs 5.64 ms per Llama-3-8B token), far behind it at T = 8 (each weight chunk costs T
 * activation loads: 10.8 vs 6.2 ms per step), so only T = 1 takes it. Needs K % 8 == 0 (16-byte
 * row chunks); other shapes go to cuBLAS. */
#include "gpu/engine.cuh"

#define GEMV_WARPS 8

/* One warp per row of W: lanes stream the row in 16-byte chunks, four loads in flight each;
 * the T activation rows come through L1. */
template <int T>
__global__ void __launch_bounds__(GEMV_WARPS * 32) k_gemv(const bf16 *__restrict__ W,
                                                           const bf16 *__restrict__ x, int N,
                                                           int K, void *out, int out_f32,
                                                           float beta)
{
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const uint4 *w = (const uint4 *)(W + (size_t)n * K);
    const int chunks = K / 8;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.f;
    int c = lane;
    for (; c + 96 < chunks; c += 128) {
        uint4 wv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) wv[u] = __ldcs(w + c + 32 * u); /* streamed once */
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const bf16 *wb = (const bf16 *)&wv[u];
#pragma unroll
            for (int t = 0; t < T; t++) {
                uint4 xv = __ldg((const uint4 *)(x + (size_t)t * K) + c + 32 * u);
                const bf16 *xb = (const bf16 *)&xv;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[t] += __bfloat162float(wb[e]) * __bfloat162float(xb[e]);
            }
        }
    }
    for (; c < chunks; c += 32) {
        uint4 wv = __ldcs(w + c);
        const bf16 *wb = (const bf16 *)&wv;
#pragma unroll
        for (int t = 0; t < T; t++) {
            uint4 xv = __ldg((const uint4 *)(x + (size_t)t * K) + c);
            const bf16 *xb = (const bf16 *)&xv;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[t] += __bfloat162float(wb[e]) * __bfloat162float(xb[e]);
        }
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        float v = acc[t];
#pragma unroll
        for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[t] = v;
    }
    if (lane < T) {
        /* lane t writes token t (a constant-index select keeps acc in registers) */
        float v = 0.f;
#pragma unroll
        for (int t = 0; t < T; t++)
            if (lane == t) v = acc[t];
        size_t i = (size_t)lane * N + n;
        if (out_f32) {
            float *o = (float *)out;
            o[i] = beta != 0.f ? o[i] + v : v;
        } else {
            ((bf16 *)out)[i] = __float2bfloat16(v);
        }
    }
}

template <int T>
static int gemv(cudaStream_t s, int N, int K, const bf16 *W, const bf16 *x, void *out, int out_f32,
                float beta)
{
    k_gemv<T><<<(N + GEMV_WARPS - 1) / GEMV_WARPS, GEMV_WARPS * 32, 0, s>>>(W, x, N, K, out,
                                                                             out_f32, beta);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

int gpu_gemm(gpu_engine *e, int T, int N, int K, const bf16 *W, const bf16 *x, void *out,
             int out_f32, float beta)
{
    if (T == 1 && K % 8 == 0 && !e->gemv_off) {
        return gemv<1>(e->compute, N, K, W, x, out, out_f32, beta);
    }
    const float alpha = 1.0f;
    GPU_CUBLAS(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, CUDA_R_16BF, K,
                            x, CUDA_R_16BF, K, &beta, out, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return ACCEL_OK;
}
