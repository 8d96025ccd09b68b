/* proto/kv.h — the quantized KV cache as it travels from a prefill device to a decode device.
 *
 * One proto_kv_layer holds one layer's K and V for a run of consecutive positions
 * [pos0, pos0 + n_tokens) of one sequence. Layout inside a layer chunk (token-major, so that a
 * prefill appends and a chunk can be produced per layer while later layers still compute):
 *
 *   k, v       int8:  (n_tokens, n_kv_heads, head_dim)              one value per byte
 *              int4:  (n_tokens, n_kv_heads, head_dim / 2)          two values per byte, element
 *                                                                   2j in the low nibble, 2j+1 high,
 *                                                                   each nibble 4-bit two's
 *                                                                   complement (-7..7)
 *   k_scale,   int8:  (n_tokens, n_kv_heads)                        fp16 bits, one per token per head
 *   v_scale    int4:  (n_tokens, n_kv_heads, head_dim / group)      fp16 bits, one per group
 *
 * Quantization (the reference is cpu_kv_quantize_*; the GPU kernel must produce the same bytes):
 *   amax  = max |x_i| over the head (int8) or the group (int4), in float32
 *   scale = fp16(amax / QMAX)        IEEE float32 division, then round-to-nearest-even to fp16
 *   s     = float(scale)
 *   q_i   = 0                                   if s == 0
 *         = clamp(rint(x_i / s), -QMAX, QMAX)   else (float32 division, round half to even)
 *   QMAX = 127 (int8), 7 (int4); group = min(32, head_dim) for int4.
 *   Dequantized value: q_i * s.
 *
 * The byte-level wire format around these chunks (header, per-layer CRC32C) is in proto/kv_wire.h
 * and documented in proto/KV_FORMAT.md. */
#ifndef TANDEM_PROTO_KV_H
#define TANDEM_PROTO_KV_H
#include <stddef.h>
#include <stdint.h>

enum proto_kv_dtype { PROTO_KV_INT8 = 1, PROTO_KV_INT4 = 2 };

#define PROTO_KV_INT4_GROUP 32

typedef struct proto_kv_layer {
    int layer;
    int pos0;     /* first position in this chunk */
    int n_tokens; /* positions in this chunk */
    int n_kv_heads;
    int head_dim;
    enum proto_kv_dtype dtype;
    const uint8_t *k, *v;        /* see layout above */
    const uint16_t *k_scale, *v_scale;
} proto_kv_layer;

/* Group width along head_dim for a dtype (int8: the whole head). */
static inline int proto_kv_group(enum proto_kv_dtype t, int head_dim)
{
    if (t == PROTO_KV_INT8) return head_dim;
    return head_dim < PROTO_KV_INT4_GROUP ? head_dim : PROTO_KV_INT4_GROUP;
}
/* Bytes of K (or V) values for n tokens. */
static inline size_t proto_kv_value_bytes(enum proto_kv_dtype t, int n_tokens, int n_kv_heads,
                                          int head_dim)
{
    size_t n = (size_t)n_tokens * n_kv_heads * head_dim;
    return t == PROTO_KV_INT8 ? n : n / 2;
}
/* Number of fp16 scales of K (or V) for n tokens. */
static inline size_t proto_kv_scale_count(enum proto_kv_dtype t, int n_tokens, int n_kv_heads,
                                          int head_dim)
{
    return (size_t)n_tokens * n_kv_heads * (head_dim / proto_kv_group(t, head_dim));
}

#endif
