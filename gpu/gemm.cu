/* gpu/gemm.cu — every projection: out (T, N) = x (T, K) · W^T (+ out when beta = 1).
 *
 * T > 1 (prefill, decode batches): one cuBLAS call. Row-major W (N, K) is
 * column-major (K, N), so in cuBLAS terms C (N x T, col-major = row-major (T, N)) =
 * op_T(W) (N x K) · x (K x T): the "TN" layout, cuBLAS's fastest for 16-bit types. h16
 * operands, float32 accumulation (CUBLAS_COMPUTE_32F); the engine's handle forbids
 * reduced-precision split-K reductions (engine.cu), so the only rounding is the output's.
 * Decode batches (2..GPU_MAX_BATCH rows) of the shapes tuned at open run on the cuBLASLt
 * algorithm that measured fastest there instead (gemm_tune.cu).
 *
 * 2 <= T <= gemm_small (gpu/tuning.h; small decode batches): our own tensor-core kernel
 * (gemm_small.cuh), which streams the weights once at the copy rate and joins the decode chain's
 * programmatic dependent launch (cuBLAS cannot); gpu/KERNELS.md has what it measured.
 *
 * T = 1 (single-sequence decode): our own kernel, because this is pure weight streaming (every
 * weight byte is used T times): one warp per output row, each lane streaming 16-byte chunks of
 * the row with four loads in flight, the activation row read through L1, float32 accumulation,
 * a shuffle reduction (gpu_warp_dot, shared with decode_fused.cu). It beats cuBLAS at T = 1
 * and loses far behind it at T = 8 (each weight chunk then costs T activation loads), so only
 * T = 1 takes it (gpu/KERNELS.md has the numbers). Needs K % 8 == 0 (16-byte row chunks); other
 * shapes go to cuBLAS. */
#include "gpu/engine.cuh"
#include "gpu/gemm_small.cuh"
#include "gpu/gemv.cuh"

#define GEMV_WARPS 8

/* One warp per row of W (gpu_warp_dot), the activation row through L1; the warps of at most one
 * resident wave loop over the rows with the grid's stride (a wave of long-lived warps streams
 * the lm_head's 128K rows faster than 16K blocks of short-lived ones). With PDL (pdl = 1) each
 * warp issues its first row's first weight loads before waiting for the kernel before, and with
 * l2pf > 0 also an L2 prefetch of the next l2pf bytes of that row (gpu_l2_prefetch: the o
 * projection, whose blocks are resident during the latency-bound decode attention). */
__global__ void __launch_bounds__(GEMV_WARPS * 32) k_gemv(const h16 *__restrict__ W,
                                                           const h16 *__restrict__ x, int N,
                                                           int K, void *out, int out_f32,
                                                           float beta, int pdl, int l2pf,
                                                           unsigned long long *tr)
{
    const int lane = threadIdx.x % 32;
    const int n0 = blockIdx.x * GEMV_WARPS + threadIdx.x / 32, stride = gridDim.x * GEMV_WARPS;
    uint4 pre[1][4];
    gpu_chain_mark(tr, 0);
    const int have = pdl && n0 < N && gpu_warp_prefetch<1>(W + (size_t)n0 * K, 0, K, lane, pre);
    if (have && l2pf > 0 && lane == 0)
        gpu_l2_prefetch(W + (size_t)n0 * K, 2048u, gpu_l2_prefetch_end(K, l2pf));
    gpu_pdl_wait(); /* x, and out (the residual) */
    gpu_pdl_trigger();
    gpu_chain_mark(tr, 1);
    for (int n = n0; n < N; n += stride) {
        float v[1];
        if (have && n == n0)
            gpu_warp_dot<1, true, true>(W + (size_t)n * K, 0, x, K, lane, v, pre);
        else
            gpu_warp_dot<1, true>(W + (size_t)n * K, 0, x, K, lane, v);
        if (lane == 0) {
            if (out_f32) {
                float *o = (float *)out;
                o[n] = beta != 0.f ? o[n] + v[0] : v[0];
            } else {
                ((h16 *)out)[n] = h16_from(v[0]);
            }
        }
    }
}

static int gemv(cudaStream_t s, int pdl, int sms, int *per_sm_cache, int N, int K, const h16 *W,
                const h16 *x, void *out, int out_f32, float beta, int l2pf, unsigned long long *tr)
{
    if (*per_sm_cache <= 0)
        GPU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm_cache, k_gemv, GEMV_WARPS * 32, 0));
    const int per_sm = *per_sm_cache;
    const long want = (N + GEMV_WARPS - 1) / GEMV_WARPS;
    const long wave = (long)(per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
    GPU_CHECK(gpu_launch(k_gemv, (int)(want < wave ? want : wave), GEMV_WARPS * 32, 0, s, pdl, W,
                         x, N, K, out, out_f32, beta, pdl, l2pf, tr));
    return ACCEL_OK;
}

/* The small-T kernel (gpu/gemm_small.cuh) in the variant gemm_decode's first run found fastest
 * per shape (gpu/bench/gemm_decode.cu): more warps splitting each 16-row tile's K where the tiles
 * are few (o, down: 256 tiles of Llama-3-8B) so that enough loads are in flight, fewer where they
 * are many (gate/up, lm_head), whose per-tile reduction then costs less: the fewest of 4, 8 or
 * 16 warps with tiles x warps >= GS_WARPS_PER_SM x SMs. Chunks of 32 in flight per lane and
 * round: 4 with 4 warps, else 2 (halved for the gate/up pair: the same bytes). gemm8's second
 * run found 8 warps x 4 chunks faster for o, down and gate/up alone; in the decode step
 * (BENCHMARKS.md, pdlchain) gate/up + SwiGLU on 8 warps x 2 or x 4 lost 0.05-0.17 ms a step at
 * batch 2-8 x 1K (and won 0.18 ms in AsyncTLS's staggered 32K batch-8 step): it stays on 4. */
#define GS_WARPS_PER_SM 23
#define GS_DEVS 64 /* devices whose occupancy gs_launch keeps (others ask at every launch) */

template <int WA, int U, int NT, int SWI>
static int gs_launch(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
                     int ldc, int out_f32, float beta)
{
    /* resident blocks per SM, per device (GPUs of different kinds may serve one process); the
     * same value whichever engine asks first, stored atomically as others may read it */
    static int per_sm_dev[GS_DEVS];
    int dev = 0, per_sm = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    const int keep = dev >= 0 && dev < GS_DEVS;
    if (keep) per_sm = __atomic_load_n(&per_sm_dev[dev], __ATOMIC_RELAXED);
    if (per_sm <= 0) {
        GPU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_gemm_small<WA, U, NT, SWI>,
                                                                WA * 32, 0));
        if (keep) __atomic_store_n(&per_sm_dev[dev], per_sm, __ATOMIC_RELAXED);
    }
    const long tiles = (N + 15) / 16;
    const long wave = (long)(per_sm > 0 ? per_sm : 1) * (e->sms > 0 ? e->sms : 1);
    GPU_CHECK(gpu_launch(k_gemm_small<WA, U, NT, SWI>, (int)(tiles < wave ? tiles : wave), WA * 32,
                         0, e->compute, e->pdl, W, x, T, N, K, out, ldc, out_f32, beta));
    return ACCEL_OK;
}

template <int NT, int SWI>
static int gs_variant(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
                      int ldc, int out_f32, float beta)
{
    const long tiles = (N + 15) / 16, want = (long)GS_WARPS_PER_SM * (e->sms > 0 ? e->sms : 1);
    if (tiles * 4 >= want)
        return gs_launch<4, SWI ? 2 : 4, NT, SWI>(e, T, N, K, W, x, out, ldc, out_f32, beta);
    if (tiles * 8 >= want)
        return gs_launch<8, SWI ? 1 : 2, NT, SWI>(e, T, N, K, W, x, out, ldc, out_f32, beta);
    return gs_launch<16, SWI ? 1 : 2, NT, SWI>(e, T, N, K, W, x, out, ldc, out_f32, beta);
}

static int gs_usable(gpu_engine *e, int T, int K, const h16 *W, const h16 *x)
{
    return T >= 2 && T <= e->tune.gemm_small && K % 8 == 0 && ((uintptr_t)W | (uintptr_t)x) % 16 == 0;
}

/* 1: the small-T kernel ran (or *st holds its failure); 0: not its shape, the caller runs cuBLAS.
 * The kernel adds the output (beta 1) or writes it (beta 0): any other beta goes to cuBLAS. */
static int gemm_small(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
                      int ldc, int out_f32, float beta, int *st)
{
    if (!gs_usable(e, T, K, W, x) || N < 1 || (beta != 0.f && (beta != 1.f || !out_f32))) return 0;
    *st = T <= 8 ? gs_variant<1, 0>(e, T, N, K, W, x, out, ldc, out_f32, beta)
                 : gs_variant<2, 0>(e, T, N, K, W, x, out, ldc, out_f32, beta);
    return 1;
}

int gpu_gemm_swiglu(gpu_engine *e, int T, int I, int K, const h16 *W, const h16 *x, h16 *h)
{
    if (!gs_usable(e, T, K, W, x) || I < 1) return 0;
    const int st = T <= 8 ? gs_variant<1, 1>(e, T, I, K, W, x, h, I, 0, 0.f)
                          : gs_variant<2, 1>(e, T, I, K, W, x, h, I, 0, 0.f);
    return st ? st : 1;
}

int gpu_gemm_cols(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, float *out, int ldc)
{
    const float alpha = 1.0f, beta = 0.0f;
    int st = ACCEL_OK;
    if (gemm_small(e, T, N, K, W, x, out, ldc, 1, beta, &st)) return st;
    const int tuned = gpu_gemm_tuned(e, T, N, K, W, x, out, 1, beta, ldc);
    if (tuned <= 0) return tuned;
    GPU_CUBLAS(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, GPU_H16_CUDA, K,
                            x, GPU_H16_CUDA, K, &beta, out, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    return ACCEL_OK;
}

int gpu_gemm(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
             int out_f32, float beta, int l2pf)
{
    if (T == 1 && K % 8 == 0 && !e->gemv_off) {
        return gemv(e->compute, e->pdl, e->sms, &e->gemv_per_sm, N, K, W, x, out, out_f32, beta,
                    l2pf, gpu_chain_slot(e));
    }
    int st = ACCEL_OK;
    if (gemm_small(e, T, N, K, W, x, out, N, out_f32, beta, &st)) return st;
    const int tuned = gpu_gemm_tuned(e, T, N, K, W, x, out, out_f32, beta, N);
    if (tuned <= 0) return tuned;
    const float alpha = 1.0f;
    GPU_CUBLAS(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, GPU_H16_CUDA, K,
                            x, GPU_H16_CUDA, K, &beta, out, out_f32 ? CUDA_R_32F : GPU_H16_CUDA, N,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return ACCEL_OK;
}
