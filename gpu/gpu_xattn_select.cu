// gpu/gpu_xattn_select.cu — XAttention's threshold selection over the block masses, Tri-shape's
// lists, and their CSR emission (interface: gpu/gpu_xattn.h; the rules, line by line:
// cpu/xattn.c select_row and cpu_trishape_index_build).
//
// select  a CTA per (query block I, head): row total and required = threshold x total (double),
//         the other causal blocks (1 .. I-1; with the official first-chunk quirk 0 .. I-1) as
//         64-bit keys (~mass bits, id): one bitonic sort gives mass descending, ties by lower
//         id (the CPU's order); a block-wide scan in double finds q*, the first count of sorted
//         blocks whose sum with the forced blocks reaches required; the kept ids go to a bit row.
//         The CPU adds the same values left to right; the scan's order differs only in double
//         rounding, far below the fp32 masses' own.
// emit    per row counts -> one scan (gf_csr_scan, FlexPrefill's) -> row_ptr; a CTA per row
//         writes its ids ascending.
#include "gpu/gpu_xattn_impl.cuh"

#define SEL_THREADS 256

static __device__ __forceinline__ float key_val(unsigned long long key)
{
    return __uint_as_float(~(uint32_t)(key >> 32));
}

// Exclusive scan of doubles over the block (blockDim SEL_THREADS); *total gets the sum.
static __device__ double scan_d(double v, double *total, double *scratch)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    double x = v;
    for (int o = 1; o < 32; o <<= 1) {
        double y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) scratch[w] = x;
    __syncthreads();
    if (w == 0) {
        double s = lane < nw ? scratch[lane] : 0.0;
        for (int o = 1; o < 32; o <<= 1) {
            double y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        if (lane < nw) scratch[lane] = s;
    }
    __syncthreads();
    const double before = w ? scratch[w - 1] : 0.0;
    *total = scratch[nw - 1];
    __syncthreads();
    return before + x - v;
}

__global__ void __launch_bounds__(SEL_THREADS)
    xattn_select_kernel(const float *A, int nb, int q0, double thr, int quirk_blocks,
                        uint32_t *keep, int *counts)
{
    __shared__ unsigned long long key[GPU_XATTN_MAX_BLOCKS];
    __shared__ uint32_t bits[GPU_XATTN_MAX_BLOCKS / 32];
    __shared__ double dsc[32];
    __shared__ int qstar, has0, red[32];
    const int tid = threadIdx.x, I = q0 + blockIdx.x, h = blockIdx.y;
    const int words = (nb + 31) / 32;
    const float *a = A + ((size_t)h * (nb - q0) + (I - q0)) * nb;
    for (int w = tid; w < words; w += SEL_THREADS) bits[w] = 0;
    __syncthreads();
    if (thr >= 1.0) {
        for (int J = tid; J <= I; J += SEL_THREADS) atomicOr(&bits[J >> 5], 1u << (J & 31));
    } else {
        double part = 0;
        for (int J = tid; J <= I; J += SEL_THREADS) part += (double)a[J];
        double total;
        scan_d(part, &total, dsc);
        const double required = total * thr;
        const int quirk = I > 0 && I < quirk_blocks;
        const int lo = quirk ? 0 : 1, m = I - lo > 0 ? I - lo : 0;
        int P2 = 1;
        while (P2 < m) P2 <<= 1;
        for (int e = tid; e < P2; e += SEL_THREADS)
            key[e] = e < m ? ((unsigned long long)(~__float_as_uint(a[lo + e])) << 32) |
                                 (unsigned)(lo + e)
                           : ~0ull;
        __syncthreads();
        for (int size = 2; size <= P2; size <<= 1)
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                for (int e = tid; e < P2; e += SEL_THREADS) {
                    const int o = e ^ stride;
                    if (o > e) {
                        const bool up = (e & size) == 0;
                        const unsigned long long x = key[e], y = key[o];
                        if ((x > y) == up) {
                            key[e] = y;
                            key[o] = x;
                        }
                    }
                }
                __syncthreads();
            }
        const double base = quirk ? (double)a[I] : I > 0 ? (double)a[0] + (double)a[I] : (double)a[0];
        // q* = min q in [0, m] with base + (sum of the q largest) >= required (m when none)
        const int per = (m + SEL_THREADS - 1) / SEL_THREADS;
        const int e0 = tid * per, e1 = min(m, e0 + per);
        double ls = 0;
        for (int e = e0; e < e1; e++) ls += (double)key_val(key[e]);
        double tot2;
        const double before = scan_d(ls, &tot2, dsc);
        if (tid == 0) qstar = m;
        __syncthreads();
        if (tid == 0 && base >= required) atomicMin(&qstar, 0);
        double run = base + before;
        for (int e = e0; e < e1; e++) {
            run += (double)key_val(key[e]);
            if (run >= required) {
                atomicMin(&qstar, e + 1);
                break;
            }
        }
        __syncthreads();
        int k = qstar;
        if (quirk) k = required > 0 ? min(m, 1 + qstar) : 0;
        if (tid == 0) has0 = 0;
        __syncthreads();
        for (int e = tid; e < k; e += SEL_THREADS) {
            const int id = (int)(key[e] & 0xffffffffu);
            if (id == 0) has0 = 1;
            atomicOr(&bits[id >> 5], 1u << (id & 31));
        }
        __syncthreads();
        if (tid == 0) {
            if (!quirk || (!has0 && k < m)) bits[0] |= 1u;
            if (I > 0) bits[I >> 5] |= 1u << (I & 31);
        }
    }
    __syncthreads();
    int c = 0;
    uint32_t *dst = keep + ((size_t)h * nb + I) * words;
    for (int w = tid; w < words; w += SEL_THREADS) {
        dst[w] = bits[w];
        c += __popc(bits[w]);
    }
    c = gf_block_sum<int>(c, red);
    if (tid == 0) counts[h * nb + I] = c;
}

// Tri-shape: row r (>= q0) keeps the causal blocks outside [lo, hi).
__global__ void tri_bits_kernel(int nb, int q0, int lo, int hi, uint32_t *keep, int *counts)
{
    __shared__ int red[32];
    const int I = q0 + blockIdx.x, h = blockIdx.y, words = (nb + 31) / 32;
    uint32_t *dst = keep + ((size_t)h * nb + I) * words;
    int c = 0;
    for (int w = threadIdx.x; w < words; w += blockDim.x) {
        uint32_t v = 0;
        for (int b = 0; b < 32; b++) {
            const int J = w * 32 + b;
            if (J <= I && (J < lo || J >= hi)) v |= 1u << b;
        }
        dst[w] = v;
        c += __popc(v);
    }
    c = gf_block_sum<int>(c, red);
    if (threadIdx.x == 0) counts[h * nb + I] = c;
}

__global__ void zero_rows_kernel(int nb, int q0, int H, int *counts)
{
    for (int i = threadIdx.x; i < H * q0; i += blockDim.x) counts[(i / q0) * nb + i % q0] = 0;
}

__global__ void csr_fill_kernel(int nb, int q0, const uint32_t *keep, const int32_t *row_ptr,
                                int32_t *col)
{
    __shared__ int tmp[32];
    const int r = q0 + blockIdx.x, h = blockIdx.y, words = (nb + 31) / 32;
    const uint32_t *src = keep + ((size_t)h * nb + r) * words;
    const int base = row_ptr[h * (nb + 1) + r];
    int running = 0;
    for (int c0 = 0; c0 <= r; c0 += blockDim.x) {
        const int c = c0 + threadIdx.x;
        const int f = c <= r && (src[c >> 5] >> (c & 31) & 1u);
        int total;
        const int ex = gf_block_exclusive_scan(f, &total, tmp);
        if (f) col[base + running + ex] = c;
        running += total;
    }
}

int gpu_xattn_emit(gpu_xattn_ws *w, int nb, int q0, cudaStream_t st)
{
    if (q0 > 0) {
        zero_rows_kernel<<<1, 256, 0, st>>>(nb, q0, w->H, w->counts);
        GF_LAUNCHED();
    }
    const int rc = gf_csr_scan(w->counts, w->H, nb, w->row_ptr, st); /* gpu/gpu_flex_index.cu */
    if (rc) return rc;
    csr_fill_kernel<<<dim3(nb - q0, w->H), 128, 0, st>>>(nb, q0, w->keep, w->row_ptr, w->col);
    GF_LAUNCHED();
    return 0;
}

int gpu_xattn_select(gpu_xattn_ws *w, const gpu_xattn_params *p, int nb, int q0, cudaStream_t st)
{
    const int quirk = q0 == 0 && p->official_chunk > 0
                          ? (p->official_chunk + p->block - 1) / p->block
                          : 0;
    xattn_select_kernel<<<dim3(nb - q0, w->H), SEL_THREADS, 0, st>>>(w->A, nb, q0, p->threshold,
                                                                     quirk, w->keep, w->counts);
    GF_LAUNCHED();
    return gpu_xattn_emit(w, nb, q0, st);
}

extern "C" int gpu_trishape_index(gpu_xattn_ws *w, int lo, int hi, int n, int q_pos0, void *stream)
{
    if (!w || w->block != 128 || n < 1 || n > w->cap_n || q_pos0 < 0 || q_pos0 % 128 ||
        q_pos0 >= n || lo < 0 || hi < lo)
        return GPU_FLEX_ERR_INVALID;
    cudaStream_t st = (cudaStream_t)stream;
    const int nb = (n + 127) / 128, q0 = q_pos0 / 128;
    tri_bits_kernel<<<dim3(nb - q0, w->H), 64, 0, st>>>(nb, q0, lo, hi, w->keep, w->counts);
    GF_LAUNCHED();
    return gpu_xattn_emit(w, nb, q0, st);
}
