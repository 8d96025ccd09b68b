// gpu/bench/gemm_decode.cu — the batched decode step's projections (Llama-3-8B shape) as the
// engine calls them (gpu/gemm.cu: cublasGemmEx, bf16 in, TN, fp32 accumulation) at the decode
// batch sizes, against every cublasLt heuristic candidate for the same shape (split-K ones
// listed apart), with the weights rotated over copies that together exceed L2 (a decode step
// reads each weight once: an L2-resident rerun would flatter the small shapes). Per entry the
// median of a few hundred calls' mean; prints us per call and TFLOP/s, and the bytes floor
// (weights at the given copy bandwidth). The candidates are asked for as gpu/gemm_tune.cu asks
// (float32 reductions outside the output).
// Then our small-T kernel (gpu/gemm_small.cuh) in each variant of SMALL_VARIANTS (warps per
// tile x chunks in flight per lane), launched plainly, and the default variant (gemm.cu's) also
// with programmatic dependent launch (back-to-back calls overlap their launch gaps, as in the
// decode chain); each variant's first output checked against cublasGemmEx's (max |diff| over
// max |ref|, printed: the tests own correctness, this only flags a variant that is fast and wrong).
// With a third argument "small" the cuBLASLt candidates are skipped.
//
//   nvcc -O3 -std=c++17 -I. -arch=sm_90a -o gemm_decode gpu/bench/gemm_decode.cu -lcublasLt -lcublas
//   ./gemm_decode [T list=32,64,128,256] [copy GB/s=4200] [small]
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
#include "gpu/gemm_small.cuh"

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

/* One launch of k_gemm_small<WA, U, NT, SWI> as gemm.cu makes it: a resident wave over the tiles. */
template <int WA, int U, int NT, int SWI = 0>
static void small_launch(int pdl, int sms, int T, int N, int K, const __nv_bfloat16 *W,
                         const __nv_bfloat16 *x, void *out, int ldc, int out_f32, float beta)
{
    static int per_sm;
    if (per_sm <= 0)
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_gemm_small<WA, U, NT, SWI>, WA * 32, 0));
    const int tiles = (N + 15) / 16, wave = per_sm * sms;
    CK(gpu_launch(k_gemm_small<WA, U, NT, SWI>, tiles < wave ? tiles : wave, WA * 32, 0, (cudaStream_t)0,
                  pdl, W, x, T, N, K, out, ldc, out_f32, beta)); /* engine.cuh's launch, as gemm.cu */
}

struct small_variant {
    const char *name;
    int pdl;
    void (*run)(int pdl, int sms, int T, int N, int K, const __nv_bfloat16 *W, const __nv_bfloat16 *x,
                void *out, int ldc, int out_f32, float beta);
};
template <int WA, int U>
static void small_any(int pdl, int sms, int T, int N, int K, const __nv_bfloat16 *W,
                      const __nv_bfloat16 *x, void *out, int ldc, int out_f32, float beta)
{
    if (T <= 8)
        small_launch<WA, U, 1>(pdl, sms, T, N, K, W, x, out, ldc, out_f32, beta);
    else
        small_launch<WA, U, 2>(pdl, sms, T, N, K, W, x, out, ldc, out_f32, beta);
}
/* gemm.cu picks 4x4 where tiles x 4 warps >= 23 x SMs, else 8x2 where tiles x 8 does, else 16x2 */
static const small_variant SMALL_VARIANTS[] = {
    {"4x4", 0, small_any<4, 4>},      {"4x4 pdl", 1, small_any<4, 4>},   {"8x2 pdl", 1, small_any<8, 2>},
    {"16x2 pdl", 1, small_any<16, 2>}, {"8x4 pdl", 1, small_any<8, 4>}, {"16x4 pdl", 1, small_any<16, 4>}};
#define N_SMALL ((int)(sizeof SMALL_VARIANTS / sizeof SMALL_VARIANTS[0]))

static __global__ void max_diff(const void *a, const void *b, size_t n, int f32, float *res)
{
    float d = 0.f, m = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float x = f32 ? ((const float *)a)[i] : __bfloat162float(((const __nv_bfloat16 *)a)[i]);
        const float y = f32 ? ((const float *)b)[i] : __bfloat162float(((const __nv_bfloat16 *)b)[i]);
        d = fmaxf(d, fabsf(x - y) + (x != x ? 1e30f : 0.f));
        m = fmaxf(m, fabsf(y));
    }
    atomicMax((int *)&res[0], __float_as_int(d)); /* non-negative floats order as their bits */
    atomicMax((int *)&res[1], __float_as_int(m));
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
    const int lt_cands = !(argc > 3 && !strcmp(argv[3], "small"));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
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
    void *O, *O2;
    float *dres;
    CK(cudaMalloc(&W, wall * 2));
    CK(cudaMalloc(&X, maxx * 2));
    CK(cudaMalloc(&O, maxo * 4));
    CK(cudaMalloc(&O2, maxo * 4));
    CK(cudaMalloc(&dres, 2 * sizeof(float)));
    fill<<<1024, 256>>>(W, wall, 1);
    fill<<<1024, 256>>>(X, maxx, 2);
    CK(cudaMemset(O, 0, maxo * 4));
    CK(cudaDeviceSynchronize());
    printf("| T | shape | bytes floor us | cublasGemmEx us (TFLOP/s) | best Lt, no split-K us (TFLOP/s) | best Lt split-K us | candidates |");
    for (int v = 0; v < N_SMALL; v++) printf(" small %s us |", SMALL_VARIANTS[v].name);
    printf(" small best (x GemmEx, %% floor) | small max diff |\n|---:|---|---:|---:|---:|---:|---:|");
    for (int v = 0; v < N_SMALL; v++) printf("---:|");
    printf("---:|---:|\n");
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
            if (lt_cands) CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 32, res, &got));
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
            printf("| %d | %s | %.1f | %.1f (%.0f) | %.1f (%.0f) | %.1f (split %d) | %d of %d |", T,
                   s.name, floor_us, us_ex, flop / us_ex / 1e6, bi >= 0 ? best : 0.0,
                   bi >= 0 ? flop / best / 1e6 : 0.0, best_sk < 1e29 ? best_sk : 0.0, bsk, used,
                   got);
            /* our kernel: every variant's time; the worst variant's difference from cublasGemmEx
             * (beta 0, one call each on copy 0) */
            double sbest = 1e30, worst = 0;
            const float zero = 0.f;
            const size_t no = (size_t)T * s.ldc;
            for (int v = 0; v < N_SMALL && T <= 16; v++) {
                const small_variant &sv = SMALL_VARIANTS[v];
                auto run = [&](int c) { sv.run(sv.pdl, sms, T, s.N, s.K, W + c * wn, X, O, s.ldc, s.out_f32, beta); };
                const double us = time_us(run, copies, reps);
                printf(" %.1f |", us);
                sbest = std::min(sbest, us);
                CK(cudaMemset(O, 0, maxo * 4));
                CK(cudaMemset(O2, 0, maxo * 4));
                CB(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, T, s.K, &alpha, W, CUDA_R_16BF, s.K, X,
                                CUDA_R_16BF, s.K, &zero, O, ot, s.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                sv.run(0, sms, T, s.N, s.K, W, X, O2, s.ldc, s.out_f32, 0.f);
                CK(cudaMemset(dres, 0, 2 * sizeof(float)));
                max_diff<<<256, 256>>>(O2, O, no, s.out_f32, dres);
                float hres[2];
                CK(cudaMemcpy(hres, dres, sizeof hres, cudaMemcpyDeviceToHost));
                worst = std::max(worst, (double)hres[0] / (hres[1] > 0 ? hres[1] : 1.f));
            }
            if (T <= 16 && !strcmp(s.name, "gate/up")) { /* + SwiGLU in the same kernel (4x2, PDL) */
                auto swi = [&](int c) {
                    if (T <= 8)
                        small_launch<4, 2, 1, 1>(1, sms, T, s.N / 2, s.K, W + c * wn, X, O, s.N / 2, 0, 0.f);
                    else
                        small_launch<4, 2, 2, 1>(1, sms, T, s.N / 2, s.K, W + c * wn, X, O, s.N / 2, 0, 0.f);
                };
                printf(" swiglu-fused 4x2 pdl %.1f |", time_us(swi, copies, reps));
            }
            if (T <= 16)
                printf(" %.1f (x%.2f, %.0f %%) | %.2g |\n", sbest, us_ex / sbest, 100.0 * floor_us / sbest, worst);
            else
                printf(" - | - |\n");
            fflush(stdout);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(op);
        }
    return 0;
}
