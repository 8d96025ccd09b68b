/* cpu/ops.h — the reference ops, in float32 over the stored dtype.
 *
 * These are the numeric definition every other backend is checked against (tests/ops), so each
 * has one fixed order of arithmetic that does not depend on the thread count, the batch size or
 * the machine:
 *   - dot products accumulate in 16 lanes (lane = index mod 16, in index order), then reduce the
 *     lanes pairwise (8+8, 4+4, 2+2, 1+1); the vectorizer maps the lanes to SIMD registers but
 *     cannot change the order (ISO C mode: no FMA contraction). A row computed alone, in a batch
 *     of tokens or with other rows gives the same bits, so prefill and decode agree exactly;
 *   - RMSNorm's mean of squares and softmax's sum accumulate in double (cheap, and closer to the
 *     float64 reference);
 *   - rotary angles are float32 pos * inv_freq, as transformers computes them.
 * All functions are thread-safe on disjoint outputs. */
#ifndef TANDEM_CPU_OPS_H
#define TANDEM_CPU_OPS_H
#include "model/ckpt/model.h"
#include "cpu/pool.h"
#include "model/ckpt/numerics.h"

float cpu_dot(const float *a, const float *b, int n);

/* Row r of a tensor as float32, and the rotary angles of a position, are model/numerics.h's
 * (model_row_f32, model_rope_angles): the FPGA host code reads the checkpoint with them too. */

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], i < n. out may equal x. */
void cpu_rmsnorm(float *out, const float *x, const model_tensor *w, int n, float eps);

/* out (T, N) = x (T, K) · W^T + bias, W a (N, K) tensor, bias an (N) tensor or absent.
 * Parallel over rows of W in the pool (p may be NULL: single thread). */
void cpu_matmul(cpu_pool *p, float *out, const float *x, int T, const model_tensor *w,
                const model_tensor *bias);

/* Rotate n_heads vectors of head_dim in place, transformers' rotate_half pairing (i, i + hd/2). */
void cpu_rope(float *x, int n_heads, int head_dim, const float *cos_t, const float *sin_t);

/* In place: x = exp(x - max) / sum. */
void cpu_softmax(float *x, int n);

static inline float cpu_silu(float x)
{
    return x / (1.0f + __builtin_expf(-x));
}
/* g[i] = silu(g[i]) * u[i] */
void cpu_swiglu(float *g, const float *u, int n);

/* One query head against keys/values 0..n_keys-1 of a cache laid out with `stride` floats between
 * positions: out[hd] = softmax(q·k_j * scale) · v_j. scores is scratch of n_keys floats. */
void cpu_attend(float *out, const float *q, const float *k, const float *v, int n_keys,
                int stride, int head_dim, float scale, float *scores);

/* cpu_attend over positions first .. first + n_keys - 1 of a cache kept in blocks of `block`
 * positions (cpu/kv_cache.h): position p's key is k_blocks[table[p / block]] + off +
 * (p % block) * stride, its value the same place in v_blocks. Same arithmetic in the same key
 * order as cpu_attend, so the same bits as cpu_attend over those rows laid out in one run. */
void cpu_attend_blocks(float *out, const float *q, float *const *k_blocks, float *const *v_blocks,
                       const int32_t *table, int block, size_t off, int first, int n_keys,
                       int stride, int head_dim, float scale, float *scores);

#endif
