/* fpga/kernels/dec_math.h — the arithmetic units of the decode kernel, shared with the host.
 *
 * The kernels compute with these (fixed-point dot products, the quantizers, fp16 conversion,
 * CRC32C); the host image builder uses the same functions to simulate the kernel while it
 * searches quantization scales, and the tests compare them bit for bit with the references
 * (cpu/kv_quant.c, model/dtype.c, proto/crc32c.c). Static inline, stdint only, no library
 * calls but rintf (and, off HLS on x86, the crc32 instruction: fpga_km_crc32c below): what HLS maps onto
 * DSP MACs, LUT adders and one rounding unit.
 *
 * Numerics of a quantized matrix-vector product (W8A8 / W4A8), row r of N, K inputs:
 *   activations: x (fp32) is cut into groups of `agroup` along K (0: one group of K); per
 *     group amax = max|x_i|, q_i = clamp(rint(x_i * (127 / amax)), -127, 127) int8, group
 *     scale sa = amax / 127 (fp32); amax 0 (or not finite) gives q = 0, sa = 0;
 *   weights: int8 or int4 (-8..7), with one fp32 scale per row (wgroup 0, int8 only) or one
 *     fp16 scale per group of `wgroup` along K;
 *   products: int8 x int8 (or int4 x int8) summed in int32 over sub-groups of
 *     gs = min(agroup, wgroup) (either may be "whole row"); each sub-group's sum is scaled by
 *     its activation and weight group scales in fp32 and added in K order; int8 rows are
 *     multiplied by their row scale at the end. |sum| <= 127 * 127 * 32768 < 2^31. */
#ifndef TANDEM_FPGA_DEC_MATH_H
#define TANDEM_FPGA_DEC_MATH_H
#include <stdint.h>
#include <string.h>

static inline uint32_t fpga_km_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float fpga_km_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE binary16 bits -> float, exact. */
static inline float fpga_km_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return fpga_km_u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24 */
        return sign ? -v : v;
    }
    return fpga_km_u2f(sign | ((e + 112) << 23) | (m << 13));
}

/* float -> binary16, round to nearest even, overflow to inf (model_f32_to_f16's rule). */
static inline uint16_t fpga_km_f32_to_f16(float f)
{
    uint32_t u = fpga_km_f2u(f);
    uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) {
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u, q = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

static inline int fpga_km_finite(float f)
{
    return (fpga_km_f2u(f) & 0x7f800000u) != 0x7f800000u;
}

/* One K or V head row quantized as proto/kv.h says (int8, one fp16 scale): q gets hd values,
 * the scale's bits are returned. Bit-identical to cpu_kv_quantize_int8. */
static inline uint16_t fpga_km_kv_quant(const float *x, uint32_t hd, int8_t *q)
{
    float amax = 0.0f;
    for (uint32_t i = 0; i < hd; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        if (a > amax) amax = a; /* NaN compares false */
    }
    uint16_t sc = fpga_km_f32_to_f16(amax / 127.0f);
    float s = fpga_km_f16_to_f32(sc);
    for (uint32_t i = 0; i < hd; i++) {
        float r = s == 0.0f ? 0.0f : __builtin_rintf(x[i] / s);
        if (!(r == r)) r = 0.0f;
        if (r > 127.0f) r = 127.0f;
        if (r < -127.0f) r = -127.0f;
        q[i] = (int8_t)r;
    }
    return sc;
}

/* Activation quantization of x[k] (see the top of this file); mul (may be NULL) multiplies x
 * first (the SmoothQuant smoothing factors 1/s). scales gets ceil(k / group) values. */
static inline void fpga_km_act_quant(const float *x, const float *mul, uint32_t k, uint32_t group,
                                     int8_t *q, float *scales)
{
    uint32_t g = group ? group : k;
    for (uint32_t lo = 0, j = 0; lo < k; lo += g, j++) {
        uint32_t hi = lo + g < k ? lo + g : k;
        float amax = 0.0f;
        for (uint32_t i = lo; i < hi; i++) {
            float v = mul ? x[i] * mul[i] : x[i];
            float a = v < 0 ? -v : v;
            if (a > amax) amax = a;
        }
        int ok = amax > 0.0f && fpga_km_finite(amax);
        float inv = ok ? 127.0f / amax : 0.0f;
        scales[j] = ok ? amax / 127.0f : 0.0f;
        for (uint32_t i = lo; i < hi; i++) {
            float v = mul ? x[i] * mul[i] : x[i];
            float r = __builtin_rintf(v * inv);
            if (!(r == r)) r = 0.0f;
            if (r > 127.0f) r = 127.0f;
            if (r < -127.0f) r = -127.0f;
            q[i] = (int8_t)r;
        }
    }
}

/* int4 element i of a packed row (two's complement nibble, element 2j low). */
static inline int fpga_km_nib(const uint8_t *row, uint32_t i)
{
    int n = (row[i >> 1] >> ((i & 1) * 4)) & 0xf;
    return n >= 8 ? n - 16 : n;
}

/* One output of a quantized matrix-vector product: row values w, its scales ws (wgroup 0:
 * one fp32; else fp16 per wgroup), activations xq with group scales xs. */
static inline float fpga_km_row_dot(const uint8_t *w, const uint8_t *ws, uint32_t bits,
                                    uint32_t wgroup, uint32_t k, const int8_t *xq,
                                    const float *xs, uint32_t agroup)
{
    uint32_t ag = agroup ? agroup : k;
    if (bits == 8 && !wgroup) {
        const int8_t *w8 = (const int8_t *)w;
        float y = 0.0f;
        for (uint32_t lo = 0, j = 0; lo < k; lo += ag, j++) {
            uint32_t hi = lo + ag < k ? lo + ag : k;
            int32_t acc = 0;
            for (uint32_t i = lo; i < hi; i++) acc += (int32_t)w8[i] * xq[i];
            y += (float)acc * xs[j];
        }
        float s;
        memcpy(&s, ws, 4);
        return y * s;
    }
    uint32_t gs = ag < wgroup ? ag : wgroup;
    float y = 0.0f;
    for (uint32_t lo = 0; lo < k; lo += gs) {
        uint32_t hi = lo + gs < k ? lo + gs : k;
        int32_t acc = 0;
        if (bits == 8) {
            /* through an int8_t pointer: gcc 12 -O3 -march=native vectorizes
             * (int32_t)(int8_t)w[i] * xq[i] over a uint8_t row as an unsigned product (seen
             * with 32-wide groups; tests/fpga/test_fpga_kernel.c checks the dot product) */
            const int8_t *w8 = (const int8_t *)w;
            for (uint32_t i = lo; i < hi; i++) acc += (int32_t)w8[i] * xq[i];
        } else {
            /* k and gs are even: pairs never straddle a group. Sign-extend the nibbles by
             * shifting them to the top of an int8 and back (what a LUT does in hardware). */
            const uint8_t *wp = w + (lo >> 1);
            const int8_t *xp = xq + lo;
            uint32_t np = (hi - lo) >> 1;
            for (uint32_t j = 0; j < np; j++) {
                int8_t lo4 = (int8_t)(uint8_t)(wp[j] << 4), hi4 = (int8_t)(wp[j] & 0xf0);
                acc += (lo4 >> 4) * xp[2 * j] + (hi4 >> 4) * xp[2 * j + 1];
            }
        }
        uint16_t h;
        memcpy(&h, ws + 2 * (lo / wgroup), 2);
        y += (float)acc * (xs[lo / ag] * fpga_km_f16_to_f32(h));
    }
    return y;
}

/* CRC-32C (proto/crc32c.h's parameters), four bits at a time: a 16-entry ROM. What HLS
 * synthesizes (a small circuit a byte a cycle per stream, beside the burst it checks). */
static inline uint32_t fpga_km_crc32c_rom(uint32_t crc, const uint8_t *p, uint64_t n)
{
    static const uint32_t t[16] = {
        0x00000000u, 0x105ec76fu, 0x20bd8edeu, 0x30e349b1u, 0x417b1dbcu, 0x5125dad3u,
        0x61c69362u, 0x7198540du, 0x82f63b78u, 0x92a8fc17u, 0xa24bb5a6u, 0xb21572c9u,
        0xc38d26c4u, 0xd3d3e1abu, 0xe330a81au, 0xf36e6f75u};
    crc = ~crc;
    for (uint64_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ t[crc & 15];
        crc = (crc >> 4) ^ t[crc & 15];
    }
    return ~crc;
}

#if defined(__SYNTHESIS__) || !defined(__x86_64__)
#define fpga_km_crc32c fpga_km_crc32c_rom
#else
#include <nmmintrin.h>
/* On the emulator, on x86, the same function on the CPU's crc32 instruction (SSE4.2, checked
 * at run time: a PORTABLE build runs anywhere): the ROM loop ran at ~0.4 GB/s and was 72 % of a
 * hand-over of 4K tokens onto an emulated card (kv_scatter and kv_check checksum every byte
 * imported, BENCHMARKS.md). The tests compare the two bit for bit (tests/fpga/test_fpga_kernel.c).
 * Kernels include only fpga/kernels/, so not proto/crc32c.c's faster folding. */
__attribute__((target("sse4.2"))) static inline uint32_t fpga_km_crc32c_sse42(uint32_t crc,
                                                                            const uint8_t *p,
                                                                            uint64_t n)
{
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
static inline uint32_t fpga_km_crc32c(uint32_t crc, const uint8_t *p, uint64_t n)
{
    return __builtin_cpu_supports("sse4.2") ? fpga_km_crc32c_sse42(crc, p, n)
                                            : fpga_km_crc32c_rom(crc, p, n);
}
#endif

#endif
