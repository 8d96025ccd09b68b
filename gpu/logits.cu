/* gpu/logits.cu — the greedy token of each logits row on the device (accel_decode_argmax): the
 * rule of model_sample_argmax (model/sample/sample.c), which is the CPU sampler's greedy scan —
 * NaN never chosen, +inf counted as FLT_MAX, ties to the lowest id, -1 when no logit is finite.
 *
 * Exact, not approximate: comparisons only (no arithmetic), so the answer is the reference's for
 * any row. Each thread scans its ids in increasing order keeping the first of equal values; the
 * block reduces (value, id) pairs with "larger value, or equal value and lower id", which is a
 * total order on the candidates (-0 and +0 compare equal, as in the scalar scan, and tie to the
 * lower id). One block per row; a batch-256 step of Llama-3 reads its 131 MB of logits once
 * (~40 us), where copying them to the host took ~2.4 ms. */
#include "gpu/engine.cuh"
#include <float.h>
#include <limits.h>

#define ARGMAX_THREADS 1024

__device__ __forceinline__ void argmax_take(float v, int i, float &bv, int &bi)
{
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

/* v as the scan sees it: false for NaN and -inf (never chosen), +inf as FLT_MAX */
__device__ __forceinline__ bool argmax_key(float &v, int &finite)
{
    if (!(v > -INFINITY)) return false;
    if (v == INFINITY) v = FLT_MAX;
    else finite = 1;
    return true;
}

__global__ void __launch_bounds__(ARGMAX_THREADS) k_argmax_rows(const float *x, int V, int32_t *out)
{
    const float *row = x + (size_t)blockIdx.x * V;
    float bv = -INFINITY;
    int bi = INT_MAX, finite = 0;
    const int step = ARGMAX_THREADS;
    int i = threadIdx.x;
    /* four loads in flight per thread; each thread still sees its ids in increasing order */
    for (; i + 3 * step < V; i += 4 * step) {
        float v[4] = {row[i], row[i + step], row[i + 2 * step], row[i + 3 * step]};
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (argmax_key(v[k], finite) && v[k] > bv) {
                bv = v[k];
                bi = i + k * step;
            }
    }
    for (; i < V; i += step) {
        float v = row[i];
        if (argmax_key(v, finite) && v > bv) {
            bv = v;
            bi = i;
        }
    }
    /* bi == INT_MAX with bv == -inf marks "none": any real candidate beats it */
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_take(ov, oi, bv, bi);
    }
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    finite = __syncthreads_or(finite);
    if (warp == 0) {
        bv = sv[lane];
        bi = si[lane];
#pragma unroll
        for (int o = 16; o; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            argmax_take(ov, oi, bv, bi);
        }
        if (lane == 0) out[blockIdx.x] = finite && bi != INT_MAX ? bi : -1;
    }
}

int gpu_argmax_rows(cudaStream_t s, const float *x, int rows, int V, int32_t *out)
{
    if (rows <= 0) return ACCEL_OK;
    k_argmax_rows<<<rows, ARGMAX_THREADS, 0, s>>>(x, V, out);
    GPU_LAUNCHED();
    return ACCEL_OK;
}
