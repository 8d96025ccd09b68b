/* gpu/gemm.cu — every projection is one cuBLAS call: out (T, N) = x (T, K) · W^T.
 *
 * Row-major W (N, K) is column-major (K, N), so in cuBLAS terms this is C (N x T, col-major, =
 * row-major (T, N)) = op_T(W) (N x K) · x (K x T): the "TN" layout, cuBLAS's fastest for bf16.
 * bf16 operands, float32 accumulation (CUBLAS_COMPUTE_32F), and the engine's handle forbids
 * reduced-precision split-K reductions (set in engine.cu), so the only rounding is the output's. */
#include "gpu/engine.cuh"

int gpu_gemm(gpu_engine *e, int T, int N, int K, const bf16 *W, const bf16 *x, void *out,
             int out_f32, float beta)
{
    const float alpha = 1.0f;
    GPU_CUBLAS(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, CUDA_R_16BF, K,
                            x, CUDA_R_16BF, K, &beta, out, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return ACCEL_OK;
}
