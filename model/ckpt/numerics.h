/* model/ckpt/numerics.h — host-side arithmetic on the checkpoint's tensors that every backend
 * shares.
 *
 * The CPU reference computes with these, and the FPGA host code feeds the card with them (the
 * token's embedding row, the position's rotary cos/sin), so both read the checkpoint the same
 * way bit for bit. They live beside model_rope_inv_freq and the dtype conversions of
 * model/ckpt/model.h because a backend may not include another backend (docs/ARCHITECTURE.md).
 *
 * Threads: pure functions on caller-owned memory; any thread. */
#ifndef TANDEM_MODEL_NUMERICS_H
#define TANDEM_MODEL_NUMERICS_H
#include "model/ckpt/model.h"
#include <stdint.h>

/* Row r of a (rows, n) tensor as float32 into out[n] (bf16 and fp16 widened exactly). */
void model_row_f32(const model_tensor *t, int64_t r, float *out);

/* cos/sin for one position: angle_i = (float)pos * inv_freq[i], i < half (float32, as
 * transformers computes them), then cosf / sinf. */
void model_rope_angles(const float *inv_freq, int half, int pos, float *cos_out, float *sin_out);

#endif
