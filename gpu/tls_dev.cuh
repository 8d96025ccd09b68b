/* gpu/tls_dev.cuh — the device helpers AsyncTLS's kernels share (gpu/tls_kernels.cu: the
 * summaries and the one-kernel layer; gpu/tls_split.cu: the layer in three kernels): a key row
 * of the paged cache, a key's label, the top-k's order-preserving key, a CTA-wide scan and a
 * staggered row's attention set. */
#ifndef TANDEM_GPU_TLS_DEV_CUH
#define TANDEM_GPU_TLS_DEV_CUH
#include "gpu/tls.cuh"
#include <math.h>

static __device__ __forceinline__ const h16 *tls_krow(const gpu_seq_dev &sq, const h16 *base, int l,
                                               int n_kv, int g, int hd, int p)
{
    return base + ((size_t)(l * n_kv + g) * sq.cap + (size_t)gpu_kv_row(sq.map, p)) * hd;
}

/* One warp: the label of key row k (sparse_tls_put's rounding). */
static __device__ void tls_label_warp(const h16 *k, const unsigned short *ch, int r, unsigned char *code,
                               float2 *lab)
{
    const int lane = threadIdx.x & 31;
    float lo = INFINITY, hi = -INFINITY;
    for (int i = lane; i < r; i += 32) {
        float x = h16_to(k[ch[i]]);
        lo = fminf(lo, x);
        hi = fmaxf(hi, x);
    }
    for (int o = 16; o; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    float step = __fdiv_rn(__fsub_rn(hi, lo), 15.0f);
    if (!isfinite(step)) step = 0.0f;
    for (int i = lane; i < r / 2; i += 32) {
        int c2[2];
        for (int j = 0; j < 2; j++) {
            float x = h16_to(k[ch[2 * i + j]]);
            float v = step > 0.0f ? __fadd_rn(__fdiv_rn(__fsub_rn(x, lo), step), 0.5f) : 0.0f;
            c2[j] = v >= 0.0f ? (v < 15.0f ? (int)v : 15) : 0;
        }
        code[i] = (unsigned char)(c2[0] | c2[1] << 4);
    }
    if (lane == 0) *lab = make_float2(lo, step);
}

static __device__ __forceinline__ unsigned tls_key(float x)
{
    if (isnan(x)) return 0u;
    unsigned u = x == 0.0f ? 0u : __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Exclusive prefix of v over the CTA's threads (in thread order); *total gets the sum. tmp: 33
 * ints of shared memory. */
static __device__ int tls_scan(int v, int *tmp, int *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) tmp[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < nw ? tmp[lane] : 0, s = w;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        tmp[lane] = s - w; /* exclusive per warp */
        if (lane == 31) tmp[32] = s;
    }
    __syncthreads();
    int r = tmp[warp] + x - v;
    *total = tmp[32];
    __syncthreads();
    return r;
}

/* A staggered row's attention set (sparse_tls_pipe_step's step 1) into kept (shared memory):
 * S_{t-1} from sg (ascending) below tail, the block that was being filled when it was chosen,
 * then tail .. nb-1. Returns its count (every thread, after a CTA barrier). */
static __device__ int tls_stagger_set(const gpu_tls_dev &t, size_t lg, int nb, int *kept)
{
    const int *sg = t.sg + lg * (2 + t.kmax);
    /* a valid state has np <= block_budget and nb - 2 <= tail <= nb - 1 (one key a step); the
     * clamps change nothing then and keep a stale state (an ascending list of another time)
     * inside kept's bounds, with at least the newest block (nk >= 1) */
    const int np = min(max(sg[0], 0), t.block_budget);
    const int tail = min(max(max(sg[1] - 1, nb - 2), 0), nb - 1);
    int cut = 0;
    for (int base = 0; base < np; base += blockDim.x) { /* the kept ones are a prefix */
        const int i = base + threadIdx.x;
        const int v = i < np ? sg[2 + i] : 0x7fffffff;
        const bool in = v >= 0 && v < tail;
        if (in) kept[i] = v;
        cut += __syncthreads_count(in);
    }
    for (int j = threadIdx.x; j < nb - tail; j += blockDim.x) kept[cut + j] = tail + j;
    __syncthreads();
    return cut + nb - tail;
}

#endif
