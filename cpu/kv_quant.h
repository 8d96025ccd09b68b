/* cpu/kv_quant.h — the reference KV quantizer (the rule is in proto/kv.h). The GPU export kernel
 * and the FPGA kernel's append must produce exactly these bytes for the same float32 input. */
#ifndef TANDEM_CPU_KV_QUANT_H
#define TANDEM_CPU_KV_QUANT_H
#include "proto/kv.h"

/* x: (n_tokens, n_kv_heads, head_dim) float32 -> q (same shape, int8 as bytes) and scales
 * (n_tokens, n_kv_heads) fp16 bits. */
void cpu_kv_quantize_int8(const float *x, int n_tokens, int n_kv_heads, int head_dim, uint8_t *q,
                          uint16_t *scales);
/* x -> q (n_tokens, n_kv_heads, head_dim/2) packed nibbles (element 2j low, 2j+1 high, two's
 * complement) and scales (n_tokens, n_kv_heads, head_dim/group) fp16 bits. head_dim even. */
void cpu_kv_quantize_int4(const float *x, int n_tokens, int n_kv_heads, int head_dim, uint8_t *q,
                          uint16_t *scales);
/* Back to float32: out (n_tokens, n_kv_heads, head_dim). */
void cpu_kv_dequantize(enum proto_kv_dtype t, const uint8_t *q, const uint16_t *scales,
                       int n_tokens, int n_kv_heads, int head_dim, float *out);

#endif
