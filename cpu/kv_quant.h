/* cpu/kv_quant.h — the reference KV quantizer: float32 K or V -> the quantized chunk layout of
 * proto/kv.h, bit for bit as that header specifies, and back. The GPU export kernel and the FPGA
 * kernel's append must produce exactly these bytes for the same float32 input (tests compare).
 * fp16 conversions are model_f32_to_f16 / model_f16_to_f32 (model/model.h).
 *
 * Shapes: x is (n_tokens, n_kv_heads, head_dim) float32, row-major. Values go to q
 * (proto_kv_value_bytes bytes), scales to `scales` (proto_kv_scale_count fp16 bit patterns).
 * Cases proto/kv.h leaves open, fixed here (the GPU kernel must match):
 *   - a NaN input is ignored by amax and quantizes to 0;
 *   - an amax whose amax/QMAX exceeds the fp16 range rounds to an infinite scale, and then every
 *     value of the group quantizes to 0 (KV values never come near 65504 x 127);
 *   - int4 nibbles are 4-bit two's complement (-7..7 as 0x9..0x7), element 2j in the low nibble.
 *
 * Errors: -1 for a shape proto_kv_shape_check() refuses or a NULL pointer; 0 otherwise.
 * Threads: pure functions, any thread. */
#ifndef TANDEM_CPU_KV_QUANT_H
#define TANDEM_CPU_KV_QUANT_H
#include "proto/kv.h"
#include <stddef.h>
#include <stdint.h>

int cpu_kv_quantize(enum proto_kv_dtype dtype, const float *x, int n_tokens, int n_kv_heads,
                    int head_dim, uint8_t *q, uint16_t *scales);
static inline int cpu_kv_quantize_int8(const float *x, int n_tokens, int n_kv_heads, int head_dim,
                                       uint8_t *q, uint16_t *scales)
{
    return cpu_kv_quantize(PROTO_KV_INT8, x, n_tokens, n_kv_heads, head_dim, q, scales);
}
static inline int cpu_kv_quantize_int4(const float *x, int n_tokens, int n_kv_heads, int head_dim,
                                       uint8_t *q, uint16_t *scales)
{
    return cpu_kv_quantize(PROTO_KV_INT4, x, n_tokens, n_kv_heads, head_dim, q, scales);
}

/* out = q_i * s, (n_tokens, n_kv_heads, head_dim) float32. */
int cpu_kv_dequantize(enum proto_kv_dtype dtype, const uint8_t *q, const uint16_t *scales,
                      int n_tokens, int n_kv_heads, int head_dim, float *out);

/* One layer's chunk: quantizes k and v (each (n_tokens, n_kv_heads, head_dim)) into buf and
 * points `out` (a proto_kv_layer for positions [pos0, pos0 + n_tokens) of `layer`) into it.
 * cpu_kv_layer_bytes() says how large buf must be; buf must be 8-byte aligned and outlive out.
 * Returns 0, or -1 for a bad shape or a short buffer. */
size_t cpu_kv_layer_bytes(enum proto_kv_dtype dtype, int n_tokens, int n_kv_heads, int head_dim);
int cpu_kv_quantize_layer(enum proto_kv_dtype dtype, const float *k, const float *v, int layer,
                          int pos0, int n_tokens, int n_kv_heads, int head_dim, void *buf,
                          size_t cap, proto_kv_layer *out);

#endif
