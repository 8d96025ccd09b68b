/* model/ckpt/dtype.c — the stored dtypes and their exact conversions to and from float32. */
#include "model/ckpt/model.h"
#include <string.h>

const char *model_dtype_name(enum model_dtype t)
{
    switch (t) {
    case MODEL_DTYPE_F32: return "F32";
    case MODEL_DTYPE_F16: return "F16";
    case MODEL_DTYPE_BF16: return "BF16";
    }
    return "?";
}

size_t model_dtype_size(enum model_dtype t)
{
    return t == MODEL_DTYPE_F32 ? 4 : 2;
}

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float model_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13)); /* inf / nan */
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float32 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

/* float32 -> fp16, round to nearest even, overflow to inf, subnormals handled. */
uint16_t model_f32_to_f16(float f)
{
    uint32_t u = f2u(f);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {
        /* result is subnormal (or zero): value = a * 2^24 rounded to an integer, RNE */
        if (a < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* 14..24+ : bits to drop from the 24-bit significand */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t q = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

uint16_t model_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float model_tensor_get(const model_tensor *t, int64_t r, int64_t i)
{
    int64_t idx = r * t->shape[1] + i;
    switch (t->dtype) {
    case MODEL_DTYPE_F32: {
        float v;
        memcpy(&v, (const char *)t->data + idx * 4, 4);
        return v;
    }
    case MODEL_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, (const char *)t->data + idx * 2, 2);
        return model_f16_to_f32(h);
    }
    case MODEL_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)t->data + idx * 2, 2);
        return model_bf16_to_f32(h);
    }
    }
    return 0;
}
