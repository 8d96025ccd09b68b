// gpu/gpu_flex_common.cuh — device helpers shared by the gpu_flex_*.cu files: the error macro,
// fixed-order block reductions and scans (results do not depend on timing), and the radix
// coverage cut (the same algorithm as fpga/kernels/flex_select.c, one thread block per vector).
#ifndef TANDEM_GPU_FLEX_COMMON_CUH
#define TANDEM_GPU_FLEX_COMMON_CUH
#include "gpu/gpu_flex.h"
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

typedef __nv_bfloat16 bf16;

// 1 when the current device runs the wgmma kernels (gpu_attn_sm90_available, probed once per
// device, thread-safe): gpu_flex_attention then takes the warp-specialized kernel for head_dim 128.
int gpu_flex_ws_here(void);

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

// Whole block; x has m values >= 0. Histogram sums are double; their atomic order varies, so a
// bucket sum can differ in the last double ulp between runs (decisions flip only on exact ties
// with the limit at 1e-16).
static __device__ gf_cut gf_radix_cut(const float *x, long long m, double limit)
{
    __shared__ unsigned int cnt[256];
    __shared__ double sum[256];
    __shared__ gf_cut res;
    __shared__ uint32_t prefix, mask;
    __shared__ double acc;
    __shared__ int done;
    if (threadIdx.x == 0) {
        res.all = 0;
        res.bits = 0;
        res.take = 0;
        res.count = 0;
        prefix = 0;
        mask = 0;
        acc = 0;
        done = 0;
    }
    for (int level = 0; level < 4; level++) {
        const int shift = 24 - 8 * level;
        for (int b = threadIdx.x; b < 256; b += blockDim.x) {
            cnt[b] = 0;
            sum[b] = 0;
        }
        __syncthreads();
        const uint32_t pf = prefix, mk = mask;
        for (long long i = threadIdx.x; i < m; i += blockDim.x) {
            const float v = x[i];
            const uint32_t u = gf_bits(v);
            if ((u & mk) != pf) continue;
            const int b = (int)(u >> shift & 255u);
            atomicAdd(&cnt[b], 1u);
            atomicAdd(&sum[b], (double)v);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255;
            for (; b >= 0; b--) {
                if (!cnt[b]) continue;
                if (acc + sum[b] <= limit) {
                    acc += sum[b];
                    res.count += cnt[b];
                    continue;
                }
                break;
            }
            if (b < 0) {
                res.all = 1;
                done = 1;
            } else {
                prefix |= (uint32_t)b << shift;
                mask |= 255u << shift;
                if (level == 3) {
                    const double v = (double)__uint_as_float(prefix);
                    res.bits = prefix;
                    for (unsigned t = 0; t < cnt[b]; t++) {
                        if (acc + v > limit) break;
                        acc += v;
                        res.take++;
                        res.count++;
                    }
                }
            }
        }
        __syncthreads();
        if (done) break;
    }
    gf_cut r = res;
    __syncthreads();
    return r;
}

#endif
