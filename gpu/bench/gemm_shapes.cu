// gpu/bench/gemm_shapes.cu — the prefill projections of a Llama-3-8B-shaped layer as the engine
// calls them (gpu/gemm.cu: cublasGemmEx, bf16 in, TN, fp32 accumulation), against the best of
// cublasLt's heuristic candidates for the same shape (split-K candidates skipped: the engine
// keeps one rounding), and a square GEMM for the ceiling. Each shape runs back to back for about
// a second, so the rate is the sustained one; the SM clock is read before and after (NVML-free:
// cudaDeviceGetAttribute gives only the nominal clock, so the script samples nvidia-smi beside).
//
//   nvcc -O3 -I. -arch=sm_90 -o gemm_shapes gpu/bench/gemm_shapes.cu -lcublasLt -lcublas
//   ./gemm_shapes [T=8192] [ms per entry=1000]   (a short entry gives the burst rate)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
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

/* Entries shorter than the power cap's reaction (~0.1 s) start from an idle GPU: a pause first. */
template <typename F> static double time_ms(F f, double target_ms)
{
    if (target_ms < 200) usleep(300000);
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f();
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float one;
    CK(cudaEventElapsedTime(&one, a, b));
    int reps = (int)(target_ms / (one > 0.01f ? one : 0.01f));
    if (reps < 3) reps = 3;
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / reps;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 8192;
    const double entry_ms = argc > 2 ? atof(argv[2]) : 1000;
    const shape shapes[] = {{"qkv", 6144, 4096, 1, 0.f},
                            {"o", 4096, 4096, 1, 1.f},
                            {"gate/up", 28672, 4096, 0, 0.f},
                            {"down", 4096, 14336, 1, 1.f},
                            {"square 8192", 8192, 8192, 0, 0.f}};
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    CB(cublasCreate(&blas));
    CB(cublasLtCreate(&lt));
    const size_t ws_bytes = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));
    CB(cublasSetWorkspace(blas, ws, ws_bytes));
    size_t maxw = 0, maxx = 0, maxo = 0;
    for (const shape &s : shapes) {
        int t = s.N == 8192 && s.K == 8192 ? 8192 : T;
        maxw = std::max(maxw, (size_t)s.N * s.K);
        maxx = std::max(maxx, (size_t)t * s.K);
        maxo = std::max(maxo, (size_t)t * s.N);
    }
    __nv_bfloat16 *W, *X;
    void *O;
    CK(cudaMalloc(&W, maxw * 2));
    CK(cudaMalloc(&X, maxx * 2));
    CK(cudaMalloc(&O, maxo * 4));
    fill<<<1024, 256>>>(W, maxw, 1);
    fill<<<1024, 256>>>(X, maxx, 2);
    CK(cudaMemset(O, 0, maxo * 4));
    CK(cudaDeviceSynchronize());
    printf("T %d; TFLOP/s over ~%.0f ms per entry\n", T, entry_ms);
    printf("| shape | N | K | cublasGemmEx (engine) | best cublasLt candidate | candidates |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (const shape &s : shapes) {
        const int t = s.N == 8192 && s.K == 8192 ? 8192 : T;
        const double flop = 2.0 * t * s.N * s.K;
        const float alpha = 1.f, beta = s.beta;
        const cudaDataType ot = s.out_f32 ? CUDA_R_32F : CUDA_R_16BF;
        auto ex = [&] {
            CB(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, t, s.K, &alpha, W, CUDA_R_16BF, s.K,
                            X, CUDA_R_16BF, s.K, &beta, O, ot, s.N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
        };
        const double ms_ex = time_ms(ex, entry_ms);

        cublasLtMatmulDesc_t op;
        CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        cublasLtMatrixLayout_t la, lb, lc;
        CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.K, s.N, s.K));
        CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.K, t, s.K));
        CB(cublasLtMatrixLayoutCreate(&lc, ot, s.N, t, s.N));
        cublasLtMatmulPreference_t pref;
        CB(cublasLtMatmulPreferenceCreate(&pref));
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws_bytes, sizeof ws_bytes));
        cublasLtMatmulHeuristicResult_t res[32];
        int got = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 32, res, &got));
        double best = 1e30;
        int used = 0, bi = -1;
        for (int i = 0; i < got; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
            int splitk = 1;
            size_t wr;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                 &splitk, sizeof splitk, &wr);
            if (splitk > 1) continue;
            auto run = [&] {
                CB(cublasLtMatmul(lt, op, &alpha, W, la, X, lb, &beta, O, lc, O, lc, &res[i].algo,
                                  ws, ws_bytes, 0));
            };
            const double ms = time_ms(run, entry_ms < 150 ? entry_ms : 150);
            used++;
            if (ms < best) {
                best = ms;
                bi = i;
            }
        }
        if (bi >= 0) { // the winner again, as long as the engine's call: the sustained rate
            auto run = [&] {
                CB(cublasLtMatmul(lt, op, &alpha, W, la, X, lb, &beta, O, lc, O, lc, &res[bi].algo,
                                  ws, ws_bytes, 0));
            };
            best = time_ms(run, entry_ms);
        }
        printf("| %s | %d | %d | %.0f | %.0f | %d of %d |\n", s.name, s.N, s.K,
               flop / ms_ex / 1e9, best < 1e29 ? flop / best / 1e9 : 0.0, used, got);
        fflush(stdout);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
    return 0;
}
