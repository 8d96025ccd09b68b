/* cpu/kv_quant.c — see proto/kv.h for the rule; this is its reference implementation. */
#include "cpu/kv_quant.h"
#include "model/model.h"
#include <math.h>

/* Quantizes one group of n values with QMAX; writes n signed values to out, returns the scale. */
static uint16_t quant_group(const float *x, int n, int qmax, int8_t *out)
{
    float amax = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    uint16_t scale = model_f32_to_f16(amax / (float)qmax);
    float s = model_f16_to_f32(scale);
    for (int i = 0; i < n; i++) {
        if (s == 0.0f) {
            out[i] = 0;
            continue;
        }
        float r = rintf(x[i] / s);
        if (r > qmax) r = (float)qmax;
        if (r < -qmax) r = (float)-qmax;
        out[i] = (int8_t)r;
    }
    return scale;
}

void cpu_kv_quantize_int8(const float *x, int n_tokens, int n_kv_heads, int hd, uint8_t *q,
                          uint16_t *scales)
{
    size_t rows = (size_t)n_tokens * n_kv_heads;
    for (size_t r = 0; r < rows; r++)
        scales[r] = quant_group(x + r * hd, hd, 127, (int8_t *)q + r * hd);
}

void cpu_kv_quantize_int4(const float *x, int n_tokens, int n_kv_heads, int hd, uint8_t *q,
                          uint16_t *scales)
{
    int g = proto_kv_group(PROTO_KV_INT4, hd), ng = hd / g;
    size_t rows = (size_t)n_tokens * n_kv_heads;
    int8_t tmp[1024];
    for (size_t r = 0; r < rows; r++) {
        for (int j = 0; j < ng; j++)
            scales[r * ng + j] = quant_group(x + r * hd + (size_t)j * g, g, 7, tmp + j * g);
        uint8_t *o = q + r * (hd / 2);
        for (int i = 0; i < hd; i += 2)
            o[i / 2] = (uint8_t)((tmp[i] & 0xf) | ((tmp[i + 1] & 0xf) << 4));
    }
}

void cpu_kv_dequantize(enum proto_kv_dtype t, const uint8_t *q, const uint16_t *scales,
                       int n_tokens, int n_kv_heads, int hd, float *out)
{
    size_t rows = (size_t)n_tokens * n_kv_heads;
    int g = proto_kv_group(t, hd), ng = hd / g;
    for (size_t r = 0; r < rows; r++)
        for (int i = 0; i < hd; i++) {
            float s = model_f16_to_f32(scales[r * ng + i / g]);
            int v;
            if (t == PROTO_KV_INT8) {
                v = (int8_t)q[r * hd + i];
            } else {
                uint8_t b = q[r * (hd / 2) + i / 2];
                int nib = i % 2 ? b >> 4 : b & 0xf;
                v = nib >= 8 ? nib - 16 : nib;
            }
            out[r * hd + i] = (float)v * s;
        }
}
