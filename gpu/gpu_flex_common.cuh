// gpu/gpu_flex_common.cuh — device helpers shared by the gpu_flex_*.cu files: the error macro,
// fixed-order block reductions and scans (results do not depend on timing), and the radix
// coverage cut (the algorithm of fpga/kernels/flex_select.c, spread over the GPU:
// gpu/gpu_flex_cut.cu).
#ifndef TANDEM_GPU_FLEX_COMMON_CUH
#define TANDEM_GPU_FLEX_COMMON_CUH
#include "gpu/gpu_flex.h"
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu/h16.cuh"

// 1 when the current device runs the wgmma kernels (gpu_attn_sm90_available, probed once per
// device, thread-safe): gpu_flex_attention then takes the warp-specialized kernel for head_dim 128.
int gpu_flex_ws_here(void);

// CSR row pointers from per-row counts, for FlexPrefill's and XAttention / Tri-shape's lists:
// counts (H, nb) -> row_ptr (H, nb + 1), absolute into col (gpu/gpu_flex_index.cu). 0 or GPU_FLEX_ERR_*.
int gf_csr_scan(const int *counts, int H, int nb, int32_t *row_ptr, cudaStream_t st);

// Logs and returns: one failed call must not take the process down (STYLE.md, errors 2).
#define GF_CHECK(call)                                                                            \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "gpu_flex: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(e_));                                                      \
            return e_ == cudaErrorMemoryAllocation ? GPU_FLEX_ERR_NOMEM : GPU_FLEX_ERR_DEVICE;  \
        }                                                                                         \
    } while (0)
#define GF_LAUNCHED() GF_CHECK(cudaGetLastError())

static __device__ __forceinline__ uint32_t gf_bits(float f)
{
    return __float_as_uint(f);
}

// Sum over the block in a fixed tree order (warps by shuffle-xor, then warp 0 over the warp
// totals). Every thread gets the result. scratch: 32 values of shared memory.
template <typename T> static __device__ T gf_block_sum(T v, T *scratch)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    if (w == 0) {
        T x = lane < nw ? scratch[lane] : T(0);
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
        if (lane == 0) scratch[0] = x;
    }
    __syncthreads();
    T r = scratch[0];
    __syncthreads();
    return r;
}

static __device__ float gf_block_max(float v, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    if (w == 0) {
        float x = lane < nw ? scratch[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
        if (lane == 0) scratch[0] = x;
    }
    __syncthreads();
    float r = scratch[0];
    __syncthreads();
    return r;
}

// Exclusive prefix sum over the block (blockDim a multiple of 32); *total gets the sum.
static __device__ int gf_block_exclusive_scan(int v, int *total, int *scratch)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) scratch[w] = x;
    __syncthreads();
    if (w == 0) {
        int s = lane < nw ? scratch[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        if (lane < nw) scratch[lane] = s; // inclusive warp totals
    }
    __syncthreads();
    int before = w ? scratch[w - 1] : 0;
    *total = scratch[nw - 1];
    __syncthreads();
    return before + x - v;
}

// The coverage cut (see fpga/kernels/flex_select.h): keep values with bits > bits, plus the
// first `take` (ascending index) with bits == bits; `all` when everything fits; count = kept.
struct gf_cut {
    int all;
    uint32_t bits;
    unsigned long long take, count;
};

// The coverage cut over many vectors at once, spread over the whole GPU (gpu/gpu_flex_cut.cu):
// segment s is x_a + s * m, or with `paired` head s / 2's vector of x_a (s even) or x_b (s odd)
// at (s / 2) * m; with `heads`, a segment whose head is not query-aware is skipped (its cut is
// not written). Four 8-bit radix levels, each a histogram pass over every element (a block per
// 8192 of them, warp-aggregated) and a choice per segment. The bucket sums are fixed point
// (2^-40, values clamped to [0, 1]) added with integer atomics: exact, so the cut does not depend
// on timing; each value is rounded by at most 4.5e-13 against the double sums of a sort.
// scratch: gf_cut_scratch_bytes(S) bytes of device memory. Returns 0 or a GPU_FLEX_ERR_*.
size_t gf_cut_scratch_bytes(int S);
int gf_cut_run(const float *x_a, const float *x_b, long long m, int S, int paired, double limit,
               const gpu_flex_head *heads, void *scratch, gf_cut *out, cudaStream_t st);
// After the query-aware heads' cut: their ties and kept bits on S maps of nb x nb, as the index
// runs them (gpu/gpu_flex_index.cu). ties: gpu_flex_emit_ties(nb) ints per map (scratch); keep:
// (nb * nb + 31) / 32 words per map. Returns 0 or a GPU_FLEX_ERR_*.
size_t gpu_flex_emit_ties(int nb);
int gpu_flex_emit(const float *map, int nb, int S, const gpu_flex_head *heads, const gf_cut *cuts,
                  int *ties, uint32_t *keep, cudaStream_t st);

#endif
