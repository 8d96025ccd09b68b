/* model/ckpt/numerics.c — see numerics.h. */
#include "model/ckpt/numerics.h"
#include <math.h>
#include <string.h>

void model_row_f32(const model_tensor *t, int64_t r, float *out)
{
    int64_t n = t->shape[1];
    switch (t->dtype) {
    case MODEL_DTYPE_F32:
        memcpy(out, (const float *)t->data + r * n, n * sizeof(float));
        break;
    case MODEL_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)t->data + r * n;
        uint32_t *o = (uint32_t *)out;
        for (int64_t i = 0; i < n; i++) o[i] = (uint32_t)s[i] << 16;
        break;
    }
    case MODEL_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)t->data + r * n;
        for (int64_t i = 0; i < n; i++) out[i] = model_f16_to_f32(s[i]);
        break;
    }
    }
}

void model_rope_angles(const float *inv_freq, int half, int pos, float *cs, float *sn)
{
    for (int i = 0; i < half; i++) {
        float a = (float)pos * inv_freq[i];
        cs[i] = cosf(a);
        sn[i] = sinf(a);
    }
}
