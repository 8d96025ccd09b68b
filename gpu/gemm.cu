/* gpu/gemm.cu — every projection: out (T, N) = x (T, K) · W^T (+ out when beta = 1).
 *
 * T > GPU_GEMV_MAX_T (prefill, large decode batches): one cuBLAS call. Row-major W (N, K) is
 * column-major (K, N), so in cuBLAS terms C (N x T, col-major = row-major (T, N)) =
 * op_T(W) (N x K) · x (K x T): the "TN" layout, cuBLAS's fastest for bf16. bf16 operands, float32
 * accumulation (CUBLAS_COMPUTE_32F); the engine's handle forbids reduced-precision split-K
 * reductions (engine.cu), so the only rounding is the output's.
 *
 * T <= GPU_GEMV_MAX_T (decode): our own kernel, because this is pure weight streaming (every
 * weight byte is used T times) and it must run at the memory's rate: one block of 8 warps per 4
 * output rows, the warps splitting the rows' length (so a 4096-wide row is one round trip of
 * loads), each lane streaming 16-byte chunks (eight independent loads in flight), the T
 * activation rows read through L1 (a few KB that every warp of the SM shares; one activation
 * chunk serves the 4 rows), float32 accumulation, shuffle and shared-memory reductions per row
 * and token. The down projection can take the gate/up rows instead and apply SwiGLU on the fly
 * (gpu_gemm_swiglu), which saves a kernel per layer. Needs K % 8 == 0 (16-byte row chunks);
 * other shapes go to cuBLAS. */
#include "gpu/engine.cuh"

#define GEMV_WARPS 8
#define GEMV_ROWS 4 /* rows per block: each activation chunk loaded once serves 4 weight chunks */

/* x chunk c (8 values) of token t: from x (T, K), or, when gu, silu(g) * u of the gate/up rows
 * (T, 2K) rounded to bf16 exactly as gpu_swiglu does (the SwiGLU fused into the down GEMV). */
template <bool GU>
__device__ __forceinline__ void gemv_x(const bf16 *x, int K, int t, int c, float out[8])
{
    if (!GU) {
        uint4 v = __ldg((const uint4 *)(x + (size_t)t * K) + c);
        const bf16 *b = (const bf16 *)&v;
#pragma unroll
        for (int e = 0; e < 8; e++) out[e] = __bfloat162float(b[e]);
    } else {
        uint4 gv = __ldg((const uint4 *)(x + (size_t)t * 2 * K) + c);
        uint4 uv = __ldg((const uint4 *)(x + (size_t)t * 2 * K + K) + c);
        const bf16 *g = (const bf16 *)&gv, *u = (const bf16 *)&uv;
#pragma unroll
        for (int e = 0; e < 8; e++)
            out[e] = __bfloat162float(__float2bfloat16(
                gpu_silu_mul(__bfloat162float(g[e]), __bfloat162float(u[e]))));
    }
}

template <int T, bool GU>
__global__ void __launch_bounds__(GEMV_WARPS * 32) k_gemv(const bf16 *__restrict__ W,
                                                           const bf16 *__restrict__ x, int N,
                                                           int K, void *out, int out_f32,
                                                           float beta)
{
    __shared__ float red[GEMV_WARPS][GEMV_ROWS][T];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n0 = blockIdx.x * GEMV_ROWS;
    const int chunks = K / 8;
    const uint4 *w[GEMV_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++) w[r] = (const uint4 *)(W + (size_t)min(n0 + r, N - 1) * K);
    float acc[GEMV_ROWS][T];
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;
    /* the block's 8 warps split K (stride 256 chunks); two chunk columns per step: 8 independent
     * 16-byte weight loads in flight per lane */
    const int stride = GEMV_WARPS * 32;
    for (int c = warp * 32 + lane; c < chunks; c += 2 * stride) {
        const bool two = c + stride < chunks;
        uint4 wv[2][GEMV_ROWS];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            wv[0][r] = __ldcs(w[r] + c); /* streamed once: evict first */
            if (two) wv[1][r] = __ldcs(w[r] + c + stride);
        }
#pragma unroll
        for (int k = 0; k < 2; k++) {
            if (k == 1 && !two) break;
#pragma unroll
            for (int t = 0; t < T; t++) {
                float xf[8];
                gemv_x<GU>(x, K, t, c + stride * k, xf);
#pragma unroll
                for (int r = 0; r < GEMV_ROWS; r++) {
                    const bf16 *wb = (const bf16 *)&wv[k][r];
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r][t] += __bfloat162float(wb[e]) * xf[e];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = acc[r][t];
#pragma unroll
            for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) red[warp][r][t] = v;
        }
    __syncthreads();
    if (threadIdx.x < GEMV_ROWS * T) {
        const int r = threadIdx.x / T, t = threadIdx.x % T;
        float v = 0.f;
#pragma unroll
        for (int i = 0; i < GEMV_WARPS; i++) v += red[i][r][t];
        if (n0 + r < N) {
            size_t i = (size_t)t * N + n0 + r;
            if (out_f32) {
                float *o = (float *)out;
                o[i] = beta != 0.f ? o[i] + v : v;
            } else {
                ((bf16 *)out)[i] = __float2bfloat16(v);
            }
        }
    }
}

template <int T, bool GU>
static int gemv(cudaStream_t s, int N, int K, const bf16 *W, const bf16 *x, void *out, int out_f32,
                float beta)
{
    k_gemv<T, GU><<<(N + GEMV_ROWS - 1) / GEMV_ROWS, GEMV_WARPS * 32, 0, s>>>(
        W, x, N, K, out, out_f32, beta);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

template <bool GU>
static int gemv_any(cudaStream_t s, int T, int N, int K, const bf16 *W, const bf16 *x, void *out,
                    int out_f32, float beta)
{
    switch (T) {
    case 1: return gemv<1, GU>(s, N, K, W, x, out, out_f32, beta);
    case 2: return gemv<2, GU>(s, N, K, W, x, out, out_f32, beta);
    case 3: return gemv<3, GU>(s, N, K, W, x, out, out_f32, beta);
    case 4: return gemv<4, GU>(s, N, K, W, x, out, out_f32, beta);
    case 5: return gemv<5, GU>(s, N, K, W, x, out, out_f32, beta);
    case 6: return gemv<6, GU>(s, N, K, W, x, out, out_f32, beta);
    case 7: return gemv<7, GU>(s, N, K, W, x, out, out_f32, beta);
    case 8: return gemv<8, GU>(s, N, K, W, x, out, out_f32, beta);
    }
    return ACCEL_ERR_INVALID;
}

static bool use_gemv(const gpu_engine *e, int T, int K)
{
    return T <= GPU_GEMV_MAX_T && K % 8 == 0 && !e->gemv_off;
}

int gpu_gemm_swiglu(gpu_engine *e, int T, int N, int I, const bf16 *W, const bf16 *gu, bf16 *h,
                    float *out, float beta)
{
    if (use_gemv(e, T, I)) return gemv_any<true>(e->compute, T, N, I, W, gu, out, 1, beta);
    GPU_TRY(gpu_swiglu(e->compute, gu, T, I, h));
    return gpu_gemm(e, T, N, I, W, h, out, 1, beta);
}

int gpu_gemm(gpu_engine *e, int T, int N, int K, const bf16 *W, const bf16 *x, void *out,
             int out_f32, float beta)
{
    if (use_gemv(e, T, K)) return gemv_any<false>(e->compute, T, N, K, W, x, out, out_f32, beta);
    const float alpha = 1.0f;
    GPU_CUBLAS(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, CUDA_R_16BF, K,
                            x, CUDA_R_16BF, K, &beta, out, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return ACCEL_OK;
}
