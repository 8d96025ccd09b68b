// gpu/bench/gemm_decode.cu — the batched decode step's projections (Llama-3-8B shape) as the
// engine calls them (gpu/gemm.cu: cublasGemmEx, bf16 in, TN, fp32 accumulation) at the decode
// batch sizes, against every cublasLt heuristic candidate for the same shape (split-K ones
// listed apart), with the weights rotated over copies that together exceed L2 (a decode step
// reads each weight once: an L2-resident rerun would flatter the small shapes). Per entry the
// median of a few hundred calls' mean; prints us per call and TFLOP/s, and the bytes floor
// (weights at the given copy bandwidth). The candidates are asked for as gpu/gemm_tune.cu asks
// (float32 reductions outside the output).
//
//   nvcc -O3 -I. -arch=sm_90 -o gemm_decode gpu/bench/gemm_decode.cu -lcublasLt -lcublas
//   ./gemm_decode [T list=32,64,128,256] [copy GB/s=4200]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "gpu/bench/bench_util.cuh"

#define CB(x)                                                                                     \
    do {                                                                                          \
        int s_ = (int)(x);                                                                        \
        if (s_) {                                                                                 \
            fprintf(stderr, "%s:%d cublas status %d\n", __FILE__, __LINE__, s_);                 \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

struct shape {
    const char *name;
    int N, K, out_f32;
    float beta;
    int ldc;
};

static __global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13;
        x *= 0x5bd1e995u;
        x ^= x >> 15;
        p[i] = __float2bfloat16(((x & 0xffff) / 65536.0f - 0.5f) * 0.05f);
    }
}

/* us per call of f(copy) over `reps` calls cycling the weight copies. */
template <typename F> static double time_us(F f, int copies, int reps)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < copies; i++) f(i);
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) f(i % copies);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms * 1e3 / reps;
}

int main(int argc, char **argv)
{
    std::vector<int> Ts;
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", argc > 1 ? argv[1] : "32,64,128,256");
        for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) Ts.push_back(atoi(s));
    }
    const double gbs = argc > 2 ? atof(argv[2]) : 4200;
    /* lm_head/4: the engine's batched lm_head, 4 column chunks of 32128 (forward.cu) */
    const shape shapes[] = {{"qkv", 6144, 4096, 1, 0.f, 6144},
                            {"o", 4096, 4096, 1, 1.f, 4096},
                            {"gate/up", 28672, 4096, 0, 0.f, 28672},
                            {"down", 4096, 14336, 1, 1.f, 4096},
                            {"lm_head", 128256, 4096, 1, 0.f, 128256},
                            {"lm_head/4", 32128, 4096, 1, 0.f, 128256}};
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    CB(cublasCreate(&blas));
    CB(cublasSetMathMode(blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CB(cublasLtCreate(&lt));
    const size_t ws_bytes = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));
    CB(cublasSetWorkspace(blas, ws, ws_bytes));
    const size_t rot_bytes = 512u << 20; /* weight copies per shape: at least this much (L2 50 MB) */
    size_t maxw = 0, maxx = 0, maxo = 0;
    int maxT = 0;
    for (int T : Ts) maxT = std::max(maxT, T);
    for (const shape &s : shapes) {
        maxw = std::max(maxw, (size_t)s.N * s.K);
        maxx = std::max(maxx, (size_t)maxT * s.K);
        maxo = std::max(maxo, (size_t)maxT * s.ldc);
    }
    const size_t wall = std::max(maxw, rot_bytes / 2) + maxw;
    __nv_bfloat16 *W, *X;
    void *O;
    CK(cudaMalloc(&W, wall * 2));
    CK(cudaMalloc(&X, maxx * 2));
    CK(cudaMalloc(&O, maxo * 4));
    fill<<<1024, 256>>>(W, wall, 1);
    fill<<<1024, 256>>>(X, maxx, 2);
    CK(cudaMemset(O, 0, maxo * 4));
    CK(cudaDeviceSynchronize());
    printf("| T | shape | bytes floor us | cublasGemmEx us (TFLOP/s) | best Lt, no split-K us (TFLOP/s) | best Lt split-K us | candidates |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|\n");
    for (int T : Ts)
        for (const shape &s : shapes) {
            const size_t wn = (size_t)s.N * s.K;
            const int copies = (int)std::max<size_t>(2, std::min<size_t>(64, wall / wn));
            const int reps = std::max(copies * 2, 200);
            const double flop = 2.0 * T * s.N * s.K, floor_us = wn * 2 / gbs / 1e3;
            const float alpha = 1.f, beta = s.beta;
            const cudaDataType ot = s.out_f32 ? CUDA_R_32F : CUDA_R_16BF;
            auto ex = [&](int c) {
                CB(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, T, s.K, &alpha, W + c * wn,
                                CUDA_R_16BF, s.K, X, CUDA_R_16BF, s.K, &beta, O, ot, s.ldc,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            };
            const double us_ex = time_us(ex, copies, reps);

            cublasLtMatmulDesc_t op;
            CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            cublasLtMatrixLayout_t la, lb, lc;
            CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.K, s.N, s.K));
            CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.K, T, s.K));
            CB(cublasLtMatrixLayoutCreate(&lc, ot, s.N, T, s.ldc));
            cublasLtMatmulPreference_t pref;
            CB(cublasLtMatmulPreferenceCreate(&pref));
            CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws_bytes, sizeof ws_bytes));
            uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                            (s.out_f32 ? CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE : 0);
            CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                    &mask, sizeof mask));
            cublasLtMatmulHeuristicResult_t res[32];
            int got = 0;
            CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 32, res, &got));
            double best = 1e30, best_sk = 1e30;
            int used = 0, bi = -1, bsk = 0;
            for (int i = 0; i < got; i++) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
                int splitk = 1;
                size_t wr;
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &splitk, sizeof splitk, &wr);
                auto run = [&](int c) {
                    CB(cublasLtMatmul(lt, op, &alpha, W + c * wn, la, X, lb, &beta, O, lc, O, lc,
                                      &res[i].algo, ws, ws_bytes, 0));
                };
                const double us = time_us(run, copies, reps / 2);
                used++;
                if (splitk > 1) {
                    if (us < best_sk) best_sk = us, bsk = splitk;
                } else if (us < best) {
                    best = us;
                    bi = i;
                }
            }
            printf("| %d | %s | %.1f | %.1f (%.0f) | %.1f (%.0f) | %.1f (split %d) | %d of %d |\n", T,
                   s.name, floor_us, us_ex, flop / us_ex / 1e6, bi >= 0 ? best : 0.0,
                   bi >= 0 ? flop / best / 1e6 : 0.0, best_sk < 1e29 ? best_sk : 0.0, bsk, used,
                   got);
            fflush(stdout);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(op);
        }
    return 0;
}
