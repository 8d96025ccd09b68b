/* cpu/kv_quant.c — reference KV quantizer (see kv_quant.h and proto/kv.h). */
#include "cpu/kv_quant.h"
#include "model/ckpt/model.h"
#include "proto/kv_wire.h"
#include <math.h>
#include <string.h>

static int qmax_of(enum proto_kv_dtype t)
{
    return t == PROTO_KV_INT8 ? 127 : 7;
}

/* Quantizes one group of g values; writes g int values to qi and returns the fp16 scale. */
static uint16_t quantize_group(const float *x, int g, int qmax, int8_t *qi)
{
    float amax = 0.0f;
    for (int i = 0; i < g; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a; /* NaN compares false: ignored */
    }
    uint16_t scale = model_f32_to_f16(amax / (float)qmax);
    float s = model_f16_to_f32(scale);
    for (int i = 0; i < g; i++) {
        float r = s == 0.0f ? 0.0f : rintf(x[i] / s);
        if (!(r == r)) r = 0.0f; /* NaN input, or inf/inf */
        if (r > (float)qmax) r = (float)qmax;
        if (r < (float)-qmax) r = (float)-qmax;
        qi[i] = (int8_t)r;
    }
    return scale;
}

static int shape_ok(enum proto_kv_dtype t, int n_tokens, int n_kv_heads, int head_dim)
{
    return proto_kv_shape_check(t, 1, n_kv_heads, head_dim) == 0 && n_tokens >= 0;
}

int cpu_kv_quantize(enum proto_kv_dtype t, const float *x, int n_tokens, int n_kv_heads,
                    int head_dim, uint8_t *q, uint16_t *scales)
{
    if (!shape_ok(t, n_tokens, n_kv_heads, head_dim) || (n_tokens && (!x || !q || !scales)))
        return -1;
    const int g = proto_kv_group(t, head_dim), qmax = qmax_of(t);
    const size_t rows = (size_t)n_tokens * n_kv_heads;
    int8_t qi[PROTO_KV_MAX_HEAD_DIM];
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * head_dim;
        for (int j = 0; j < head_dim / g; j++)
            scales[r * (head_dim / g) + j] = quantize_group(xr + j * g, g, qmax, qi + j * g);
        if (t == PROTO_KV_INT8) {
            memcpy(q + r * head_dim, qi, (size_t)head_dim);
        } else {
            uint8_t *qr = q + r * (head_dim / 2);
            for (int e = 0; e < head_dim / 2; e++)
                qr[e] = (uint8_t)((qi[2 * e] & 0xf) | (qi[2 * e + 1] & 0xf) << 4);
        }
    }
    return 0;
}

int cpu_kv_dequantize(enum proto_kv_dtype t, const uint8_t *q, const uint16_t *scales,
                      int n_tokens, int n_kv_heads, int head_dim, float *out)
{
    if (!shape_ok(t, n_tokens, n_kv_heads, head_dim) || (n_tokens && (!q || !scales || !out)))
        return -1;
    const int g = proto_kv_group(t, head_dim), ng = head_dim / g;
    const size_t rows = (size_t)n_tokens * n_kv_heads;
    /* each group's scale converted once; the int8 loop has no branch and no call, so that the
     * compiler vectorizes it (a hand-over's import is this loop over every value it carries) */
    for (size_t r = 0; r < rows; r++) {
        float *o = out + r * head_dim;
        for (int j = 0; j < ng; j++) {
            const float s = model_f16_to_f32(scales[r * ng + j]);
            if (t == PROTO_KV_INT8) {
                const int8_t *qr = (const int8_t *)(const void *)(q + r * head_dim) + j * g;
                for (int i = 0; i < g; i++) o[j * g + i] = (float)qr[i] * s;
            } else {
                const uint8_t *qr = q + r * (head_dim / 2) + j * g / 2;
                for (int i = 0; i < g; i++) {
                    int nib = i & 1 ? qr[i / 2] >> 4 : qr[i / 2] & 0xf; /* two's complement */
                    o[j * g + i] = (float)(nib >= 8 ? nib - 16 : nib) * s;
                }
            }
        }
    }
    return 0;
}

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

size_t cpu_kv_layer_bytes(enum proto_kv_dtype t, int n_tokens, int n_kv_heads, int head_dim)
{
    if (!shape_ok(t, n_tokens, n_kv_heads, head_dim)) return 0;
    return 2 * pad8(proto_kv_value_bytes(t, n_tokens, n_kv_heads, head_dim)) +
           2 * pad8(2 * proto_kv_scale_count(t, n_tokens, n_kv_heads, head_dim));
}

int cpu_kv_quantize_layer(enum proto_kv_dtype t, const float *k, const float *v, int layer,
                          int pos0, int n_tokens, int n_kv_heads, int head_dim, void *buf,
                          size_t cap, proto_kv_layer *out)
{
    size_t need = cpu_kv_layer_bytes(t, n_tokens, n_kv_heads, head_dim);
    if (!need || cap < need || !buf || ((uintptr_t)buf & 7) || layer < 0 || pos0 < 0) return -1;
    size_t vb = pad8(proto_kv_value_bytes(t, n_tokens, n_kv_heads, head_dim));
    size_t sb = pad8(2 * proto_kv_scale_count(t, n_tokens, n_kv_heads, head_dim));
    uint8_t *p = buf;
    uint8_t *kq = p, *vq = p + vb;
    uint16_t *ks = (uint16_t *)(void *)(p + 2 * vb), *vs = (uint16_t *)(void *)(p + 2 * vb + sb);
    if (cpu_kv_quantize(t, k, n_tokens, n_kv_heads, head_dim, kq, ks) != 0 ||
        cpu_kv_quantize(t, v, n_tokens, n_kv_heads, head_dim, vq, vs) != 0)
        return -1;
    *out = (proto_kv_layer){.layer = layer, .pos0 = pos0, .n_tokens = n_tokens,
                            .n_kv_heads = n_kv_heads, .head_dim = head_dim, .dtype = t,
                            .k = kq, .v = vq, .k_scale = ks, .v_scale = vs};
    return 0;
}
