/* gpu/kv_quant.cu — the KV export quantizer and the import dequantizer (rule: proto/kv.h;
 * reference: cpu/kv_quant.c). The quantizer must give the CPU's bytes exactly for the same input
 * values, so it uses only operations whose float32 results are fully specified and identical on
 * both sides:
 *   amax   max of |x| (exact, order-free)
 *   scale  amax / QMAX, IEEE division (nvcc's default -prec-div=true; no fast-math), then
 *          __float2half_rn (round to nearest even, subnormals and overflow to inf as
 *          model_f32_to_f16 does)
 *   q      rintf(x / float(scale)) (IEEE division, round half to even), clamped to +-QMAX;
 *          0 when the scale is 0
 * so the bytes match bit for bit (tests/gpu/test_ops.c checks this on random, tiny, huge and
 * subnormal inputs, through the float32 form). The engine's export reads its input from the KV
 * cache itself (the cache form: h16 values widened exactly to float32, through the block table),
 * so a prefill's export and a later export of the same positions (gpu_kv_export) give the same
 * bytes; against the CPU's export, which quantizes float32 K/V, each value then differs by the
 * cache's rounding at most (tests/gpu/test_model.c: within one quantization step). */
#include "gpu/engine.cuh"

__device__ __forceinline__ signed char quant_one(float x, float s, float qmax)
{
    if (s == 0.f) return 0;
    float r = rintf(x / s);
    r = fminf(fmaxf(r, -qmax), qmax);
    return (signed char)(int)r;
}

/* Where the quantizer's rows come from. Row r = (token t, KV head h), r = t * n_kv + h. */
struct src_f32 { /* (T, n_kv, hd) float32, token-major */
    const float *x;
    int hd;
    __device__ __forceinline__ float operator()(size_t row, int i) const
    {
        return x[row * hd + i];
    }
};
struct src_cache { /* one layer of the cache: token t at position pos0 + t, mapped (gpu_kv_row) */
    const h16 *c;
    int cap, n_kv, hd, pos0;
    gpu_kv_map map;
    __device__ __forceinline__ float operator()(size_t row, int i) const
    {
        int t = (int)(row / n_kv), h = (int)(row % n_kv);
        return h16_to(c[((size_t)h * cap + gpu_kv_row(map, pos0 + t)) * hd + i]);
    }
};

/* int8: one warp per (token, head) row of hd values; scale per row. */
template <typename Src>
__global__ void k_quant_int8(Src x, int rows, int hd, unsigned char *q, unsigned short *scales)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float amax = 0.f;
    for (int i = lane; i < hd; i += 32) amax = fmaxf(amax, fabsf(x(row, i)));
    for (int o = 16; o >= 1; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    __half sh = __float2half_rn(amax / 127.0f);
    float s = __half2float(sh);
    for (int i = lane; i < hd; i += 32) q[(size_t)row * hd + i] = (unsigned char)quant_one(x(row, i), s, 127.f);
    if (lane == 0) scales[row] = __half_as_ushort(sh);
}

/* int4: one thread per (token, head, group) of g values; element 2j in the low nibble. */
template <typename Src>
__global__ void k_quant_int4(Src x, int rows, int hd, int g, unsigned char *q,
                             unsigned short *scales)
{
    int ng = hd / g;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * ng) return;
    size_t row = i / ng;
    int grp = (int)(i % ng), e0 = grp * g;
    float amax = 0.f;
    for (int j = 0; j < g; j++) amax = fmaxf(amax, fabsf(x(row, e0 + j)));
    __half sh = __float2half_rn(amax / 7.0f);
    float s = __half2float(sh);
    unsigned char *o = q + row * (hd / 2) + (size_t)grp * g / 2;
    for (int j = 0; j < g; j += 2) {
        int lo = quant_one(x(row, e0 + j), s, 7.f), hi = quant_one(x(row, e0 + j + 1), s, 7.f);
        o[j / 2] = (unsigned char)((lo & 0xf) | ((hi & 0xf) << 4));
    }
    scales[i] = __half_as_ushort(sh);
}

template <typename Src>
static int quantize(cudaStream_t s, enum proto_kv_dtype t, Src x, int T, int n_kv, int hd,
                    unsigned char *q, unsigned short *scales)
{
    int rows = T * n_kv;
    if (rows <= 0) return ACCEL_OK;
    if (t == PROTO_KV_INT8) {
        k_quant_int8<<<(rows + 7) / 8, 256, 0, s>>>(x, rows, hd, q, scales);
    } else if (t == PROTO_KV_INT4) {
        int g = proto_kv_group(t, hd);
        size_t n = (size_t)rows * (hd / g);
        k_quant_int4<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, rows, hd, g, q, scales);
    } else {
        return ACCEL_ERR_INVALID;
    }
    GPU_LAUNCHED();
    return ACCEL_OK;
}

int gpu_kv_quantize(cudaStream_t s, enum proto_kv_dtype t, const float *x, int T, int n_kv, int hd,
                    unsigned char *q, unsigned short *scales)
{
    return quantize(s, t, src_f32{x, hd}, T, n_kv, hd, q, scales);
}

int gpu_kv_quantize_cache(cudaStream_t s, enum proto_kv_dtype t, const h16 *cache, int cap,
                          const gpu_kv_map *map, int pos0, int T, int n_kv, int hd,
                          unsigned char *q, unsigned short *scales)
{
    src_cache c{cache, cap, n_kv, hd, pos0, map ? *map : gpu_kv_map{}};
    return quantize(s, t, c, T, n_kv, hd, q, scales);
}

/* Dequantize: value = q * float(scale) (cpu_kv_dequantize), rounded to the cache's h16. One
 * thread per element; token t, head h goes to cache row (h, pos0 + t), the position mapped
 * through map (a paged cache). */
__global__ void k_dequant(int dtype, const unsigned char *q, const unsigned short *scales, int T,
                          int n_kv, int hd, int g, h16 *cache, int cap, int pos0,
                          gpu_kv_map map)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n_kv * hd) return;
    int e = (int)(i % hd);
    size_t row = i / hd;
    int h = (int)(row % n_kv), t = (int)(row / n_kv);
    float s = __half2float(__ushort_as_half(scales[row * (hd / g) + e / g]));
    int v;
    if (dtype == PROTO_KV_INT8) {
        v = (signed char)q[i];
    } else {
        unsigned char b = q[row * (hd / 2) + e / 2];
        int nib = e % 2 ? b >> 4 : b & 0xf;
        v = nib >= 8 ? nib - 16 : nib;
    }
    cache[((size_t)h * cap + gpu_kv_row(map, pos0 + t)) * hd + e] = h16_from((float)v * s);
}

int gpu_kv_dequantize(cudaStream_t s, enum proto_kv_dtype t, const unsigned char *q,
                      const unsigned short *scales, int T, int n_kv, int hd, h16 *cache, int cap,
                      int pos0, const gpu_kv_map *map)
{
    size_t n = (size_t)T * n_kv * hd;
    if (n == 0) return ACCEL_OK;
    if (t != PROTO_KV_INT8 && t != PROTO_KV_INT4) return ACCEL_ERR_INVALID;
    k_dequant<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((int)t, q, scales, T, n_kv, hd,
                                                            proto_kv_group(t, hd), cache, cap, pos0,
                                                            map ? *map : gpu_kv_map{});
    GPU_LAUNCHED();
    return ACCEL_OK;
}
