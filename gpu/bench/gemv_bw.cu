// gpu/bench/gemv_bw.cu — how close batch-1 weight streaming can get to the memory ceiling, and
// which form of the decode GEMV gets there. Three measurements on one GPU:
//   read   a pure streaming read (16-byte loads, U in flight per thread, 2 GiB): the read
//          ceiling beside limits.cu's device copy (which counts read + write)
//   shape  each Llama-3-8B projection shape alone, every form, weights rotated through copies
//          that do not fit in L2: GB/s and us per call
//   chain  the four projections of 32 layers back to back (128 kernels, distinct weights per
//          layer, as a decode token streams them), with and without programmatic dependent
//          launch: ms per chain against bytes / the copy ceiling given on the command line
// Forms: "cur" is gpu_warp_dot (gemv.cuh, what the engine runs); "pipe" issues the next round of
// loads before summing the current one (the same sums in the same order); "u8" takes eight
// chunks per round instead of four.
//
//   nvcc -O3 -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a -o gemv_bw gpu/bench/gemv_bw.cu
//   ./gemv_bw [copy GB/s for the chain's floor, e.g. 4248]
#include "gpu/gemv.cuh"
#include "gpu/bench/bench_util.cuh"
#include <stdlib.h>
#include <vector>

#define THREADS 256
#define WARPS (THREADS / 32)

template <int U> __global__ void __launch_bounds__(THREADS) k_read(const uint4 *p, size_t n, unsigned *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) /* volatile asm keeps its order: all U loads go out first */
            asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(p + i + u * stride));
#pragma unroll
        for (int u = 0; u < U; u++)
            asm volatile("{\n\t.reg .b32 t;\n\txor.b32 t, %1, %2;\n\txor.b32 t, t, %3;\n\t"
                         "xor.b32 t, t, %4;\n\txor.b32 %0, %0, t;\n\t}"
                         : "+r"(acc)
                         : "r"(v[u].x), "r"(v[u].y), "r"(v[u].z), "r"(v[u].w));
    }
    for (; i < n; i += stride) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

/* The pipelined form: rounds of U chunks per row and lane; round r + 1's loads go out before
 * round r is summed. Chunk order per lane is gpu_warp_dot's (c, c + 32, ..., round by round), so
 * with U = 4 the sums are the same bits. Needs K / 8 to be a multiple of 32 * U. */
template <int R, int U>
__device__ __forceinline__ void dot_pipe(const h16 *__restrict__ W, size_t rstride, const h16 *x,
                                         int K, int lane, float acc[R], uint4 (*pre)[U], bool have)
{
    const uint4 *xp = (const uint4 *)x;
    const int rounds = K / 8 / (32 * U);
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    uint4 cur[R][U];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < U; u++)
            cur[r][u] = have ? pre[r][u] : __ldcs((const uint4 *)(W + r * rstride) + lane + 32 * u);
    for (int k = 0; k < rounds; k++) {
        uint4 nxt[R][U];
        const int c = (k + 1) * 32 * U + lane;
        if (k + 1 < rounds) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < U; u++) nxt[r][u] = __ldcs((const uint4 *)(W + r * rstride) + c + 32 * u);
        }
        gpu_sum_round<R, false, U>(acc, cur, xp, k * 32 * U + lane);
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++) cur[r][u] = nxt[r][u];
    }
    gpu_warp_sums<R>(acc);
}

/* Non-pipelined rounds of U chunks (U = 4 is gpu_warp_dot's loop). */
template <int R, int U>
__device__ __forceinline__ void dot_round(const h16 *__restrict__ W, size_t rstride, const h16 *x,
                                          int K, int lane, float acc[R])
{
    const uint4 *xp = (const uint4 *)x;
    const int chunks = K / 8;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int c = lane; c < chunks; c += 32 * U) {
        uint4 wv[R][U];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++) wv[r][u] = __ldcs((const uint4 *)(W + r * rstride) + c + 32 * u);
        gpu_sum_round<R, false, U>(acc, wv, xp, c);
    }
    gpu_warp_sums<R>(acc);
}

enum { F_CUR, F_PIPE, F_U8, F_PIPE2, F_N };
static const char *fname[F_N] = {"cur", "pipe", "u8", "pipe-u2"};

/* items of R rows (row j and j + rstride), x (K h16) staged in shared memory as the fused
 * kernels do, warps looping over items with the grid's stride. */
template <int R, int F>
__global__ void __launch_bounds__(THREADS) k_gemv(const h16 *W, size_t rstride, int items, int K,
                                                  const h16 *x, float *out, int pdl)
{
    extern __shared__ __align__(16) unsigned char smem[];
    h16 *xs = (h16 *)smem;
    const int lane = threadIdx.x % 32, stride = gridDim.x * WARPS;
    const int j0 = blockIdx.x * WARPS + threadIdx.x / 32;
    constexpr int U = F == F_PIPE2 ? 2 : 4;
    uint4 pre[R][U];
    int have = 0;
    if (pdl && j0 < items) {
        if (F == F_PIPE || F == F_PIPE2) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < U; u++) pre[r][u] = __ldcs((const uint4 *)(W + (size_t)j0 * K + r * rstride) + lane + 32 * u);
            have = 1;
        } else if (F == F_CUR) {
            have = gpu_warp_prefetch<R>(W + (size_t)j0 * K, rstride, K, lane, (uint4(*)[4])pre);
        }
    }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    for (int i = threadIdx.x; i < K / 8; i += blockDim.x) ((uint4 *)xs)[i] = ((const uint4 *)x)[i];
    __syncthreads();
    for (int j = j0; j < items; j += stride) {
        float v[R];
        const h16 *w = W + (size_t)j * K;
        if (F == F_CUR) {
            if (have && j == j0)
                gpu_warp_dot<R, false, true>(w, rstride, xs, K, lane, v, (const uint4(*)[4])pre);
            else
                gpu_warp_dot<R, false>(w, rstride, xs, K, lane, v);
        } else if (F == F_PIPE || F == F_PIPE2) {
            dot_pipe<R, U>(w, rstride, xs, K, lane, v, pre, have && j == j0);
        } else {
            dot_round<R, 8>(w, rstride, xs, K, lane, v);
        }
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++) out[j + r * items] = v[r];
    }
}

struct shp {
    const char *name;
    int R, items, K; /* rows = R * items */
};
static const shp SH[4] = {{"qkv", 2, 3072, 4096}, {"o", 1, 4096, 4096}, {"gate/up", 2, 14336, 4096}, {"down", 1, 4096, 14336}};

template <int R, int F> static int grid_for(int sms, int items)
{
    int per = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_gemv<R, F>, THREADS, 14336 * 2));
    int want = (items + WARPS - 1) / WARPS, wave = per * sms;
    return want < wave ? want : wave;
}

template <int R, int F>
static void launch(cudaStream_t s, int sms, const shp &h, const h16 *W, const h16 *x, float *out, int pdl)
{
    int g = grid_for<R, F>(sms, h.items);
    CK(gpu_launch(k_gemv<R, F>, g, THREADS, (size_t)h.K * 2, s, pdl, W, (size_t)h.items * h.K, h.items, h.K, x, out, pdl));
}

template <int F>
static void launch_shape(cudaStream_t s, int sms, const shp &h, const h16 *W, const h16 *x, float *out, int pdl)
{
    if (h.R == 2) launch<2, F>(s, sms, h, W, x, out, pdl);
    else launch<1, F>(s, sms, h, W, x, out, pdl);
}

static void launch_form(int f, cudaStream_t s, int sms, const shp &h, const h16 *W, const h16 *x, float *out, int pdl)
{
    switch (f) {
    case F_CUR: launch_shape<F_CUR>(s, sms, h, W, x, out, pdl); break;
    case F_PIPE: launch_shape<F_PIPE>(s, sms, h, W, x, out, pdl); break;
    case F_U8: launch_shape<F_U8>(s, sms, h, W, x, out, pdl); break;
    default: launch_shape<F_PIPE2>(s, sms, h, W, x, out, pdl); break;
    }
}

static __global__ void k_fill(uint4 *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u);
        p[i] = make_uint4(h & 0x3f7f3f7f, (h >> 3) & 0x3f7f3f7f, (h >> 7) & 0x3f7f3f7f, (h >> 11) & 0x3f7f3f7f);
    }
}

int main(int argc, char **argv)
{
    double copy_gbs = argc > 1 ? atof(argv[1]) : 0;
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    const int sms = pr.multiProcessorCount;
    printf("gpu %s, %d SMs\n", pr.name, sms);
    for (int f = 0; f < F_N; f++) {
        int per1 = 0, per2 = 0;
        switch (f) {
        case F_CUR: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per1, k_gemv<1, F_CUR>, THREADS, 8192); cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per2, k_gemv<2, F_CUR>, THREADS, 8192); break;
        case F_PIPE: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per1, k_gemv<1, F_PIPE>, THREADS, 8192); cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per2, k_gemv<2, F_PIPE>, THREADS, 8192); break;
        case F_U8: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per1, k_gemv<1, F_U8>, THREADS, 8192); cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per2, k_gemv<2, F_U8>, THREADS, 8192); break;
        default: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per1, k_gemv<1, F_PIPE2>, THREADS, 8192); cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per2, k_gemv<2, F_PIPE2>, THREADS, 8192); break;
        }
        printf("form %-8s blocks/SM of 256 threads: R=1 %d, R=2 %d\n", fname[f], per1, per2);
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float ms;

    /* read ceiling */
    {
        size_t bytes = 2ull << 30, n = bytes / 16;
        uint4 *p;
        unsigned *sink;
        CK(cudaMalloc(&p, bytes));
        CK(cudaMalloc(&sink, 4));
        k_fill<<<1024, 256>>>(p, n);
        CK(cudaDeviceSynchronize());
        for (int bps = 2; bps <= 8; bps *= 2) {
            for (int U = 4; U <= 16; U *= 2) {
                auto run = [&]() {
                    if (U == 4) k_read<4><<<sms * bps, THREADS, 0, s>>>(p, n, sink);
                    else if (U == 8) k_read<8><<<sms * bps, THREADS, 0, s>>>(p, n, sink);
                    else k_read<16><<<sms * bps, THREADS, 0, s>>>(p, n, sink);
                };
                for (int w = 0; w < 3; w++) run();
                CK(cudaEventRecord(a, s));
                for (int i = 0; i < 20; i++) run();
                CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b));
                CK(cudaEventElapsedTime(&ms, a, b));
                printf("read  blocks/SM %d, %2d loads in flight per thread: %.0f GB/s\n", bps, U, bytes * 20.0 / (ms * 1e-3) / 1e9);
            }
        }
        CK(cudaFree(p));
    }

    /* weights of 32 layers, per layer [qkv | o | gate/up | down] */
    const int L = 32;
    size_t lbytes = 0;
    size_t off[4];
    for (int i = 0; i < 4; i++) {
        off[i] = lbytes;
        lbytes += (size_t)SH[i].R * SH[i].items * SH[i].K * 2;
    }
    uint4 *Wall;
    CK(cudaMalloc(&Wall, lbytes * L));
    k_fill<<<4096, 256>>>(Wall, lbytes * L / 16);
    h16 *x;
    float *out;
    CK(cudaMalloc(&x, 14336 * 2));
    CK(cudaMalloc(&out, 32768 * 4));
    k_fill<<<8, 256>>>((uint4 *)x, 14336 * 2 / 16);
    CK(cudaDeviceSynchronize());
    auto Wl = [&](int l, int i) { return (const h16 *)((const char *)Wall + lbytes * l + off[i]); };

    /* shapes alone, rotating over the 32 layers' copies */
    for (int i = 0; i < 4; i++) {
        const shp &h = SH[i];
        double bytes = (double)h.R * h.items * h.K * 2;
        for (int f = 0; f < F_N; f++) {
            for (int pdl = 0; pdl < 2; pdl++) {
                for (int w = 0; w < 8; w++) launch_form(f, s, sms, h, Wl(w, i), x, out, pdl);
                const int reps = 256;
                CK(cudaEventRecord(a, s));
                for (int r = 0; r < reps; r++) launch_form(f, s, sms, h, Wl(r % L, i), x, out, pdl);
                CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b));
                CK(cudaEventElapsedTime(&ms, a, b));
                double us = ms * 1e3 / reps;
                printf("shape %-8s form %-8s pdl %d: %7.2f us  %5.0f GB/s\n", h.name, fname[f], pdl, us, bytes / (us * 1e-6) / 1e9);
            }
        }
    }

    /* the chain: qkv, o, gate/up, down of 32 layers */
    double chain_bytes = (double)lbytes * L;
    for (int f = 0; f < F_N; f++) {
        for (int pdl = 0; pdl < 2; pdl++) {
            auto chain = [&]() {
                for (int l = 0; l < L; l++)
                    for (int i = 0; i < 4; i++) launch_form(f, s, sms, SH[i], Wl(l, i), x, out, pdl);
            };
            /* as the engine runs a token: one CUDA graph (kernel launches from the CPU would
             * not keep up with 8-us kernels) */
            cudaGraph_t gr;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            chain();
            CK(cudaStreamEndCapture(s, &gr));
            CK(cudaGraphInstantiate(&ge, gr, 0));
            CK(cudaGraphLaunch(ge, s));
            CK(cudaEventRecord(a, s));
            const int reps = 20;
            for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
            CK(cudaEventRecord(b, s));
            CK(cudaEventSynchronize(b));
            CK(cudaEventElapsedTime(&ms, a, b));
            double per = ms / reps;
            printf("chain form %-8s pdl %d: %.3f ms per 32 layers (%.0f GB/s)", fname[f], pdl, per, chain_bytes / (per * 1e-3) / 1e9);
            if (copy_gbs > 0) printf(", %.3fx bytes/copy bw (%.3f ms)", per / (chain_bytes / (copy_gbs * 1e9) * 1e3), chain_bytes / (copy_gbs * 1e9) * 1e3);
            printf("\n");
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(gr));
        }
    }
    CK(cudaGetLastError());
    return 0;
}
