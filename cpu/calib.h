/* cpu/calib.h — calibration inputs for quantizers, from the reference forward.
 *
 * The text is the model's own: S sequences of T tokens sampled at temperature 1 from BOS with a
 * fixed seed through the CPU backend (self-generated calibration data, as LLM-QAT does: no
 * dataset to ship, and never the golden cases). The activations are then computed layer by
 * layer in float32 with the reference ops (cpu/ops.h), and each projection's input, exactly as
 * a quantized kernel will see it before its own quantization, is handed to a callback:
 *   layer l: QKV (RMSNorm(x) * attn_norm), O (attention output), GU (RMSNorm(x) * ffn_norm),
 *            D (SiLU(gate) * up); then layer L: LM (final RMSNorm(x) * norm).
 * The stream through the layers uses the float weights (not the quantized ones).
 *
 * The card's weight image builder is the user (fpga/image.c); fpga/ does not include cpu/: the
 * composition root hands these two functions to it (fpga/calib.h's fpga_calib_ref).
 *
 * Threads: runs on the caller's thread (with a pool of worker threads for the products). */
#ifndef TANDEM_CPU_CALIB_H
#define TANDEM_CPU_CALIB_H
#include "model/ckpt/model.h"
#include <stddef.h>
#include <stdint.h>

/* Which projection's input a callback gets (the order of the card's matrices). */
enum { CPU_CALIB_QKV, CPU_CALIB_O, CPU_CALIB_GU, CPU_CALIB_D, CPU_CALIB_LM };

/* Samples n_seqs x len ids into ids. 0, or -1 with a message. */
int cpu_calib_ids(const model *m, int n_seqs, int len, uint64_t seed, int32_t *ids, char *err,
                  size_t errlen);

/* x: (T, K) inputs of projection `mat` (CPU_CALIB_*) of `layer` (n_layers for the LM head),
 * valid during the call. A non-zero return stops the run. */
typedef int (*cpu_calib_fn)(void *ctx, int layer, int mat, const float *x, int T, int K);

/* Runs the float forward over n_seqs sequences of len ids. 0, the callback's status, or -1 out
 * of memory. */
int cpu_calib_run(const model *m, const int32_t *ids, int n_seqs, int len, cpu_calib_fn fn,
                  void *ctx);

/* Layer l's queries (T, n_heads * head_dim) and keys (T, n_kv_heads * head_dim) after RoPE, as
 * attention sees them, valid during the call (AsyncTLS's channel calibration, devices/tls_calib.h).
 * A non-zero return stops the run. */
typedef int (*cpu_calib_qk_fn)(void *ctx, int layer, const float *q, const float *k, int T);

/* cpu_calib_run calling qk_fn (instead of a projection callback) once per layer. */
int cpu_calib_run_qk(const model *m, const int32_t *ids, int n_seqs, int len, cpu_calib_qk_fn fn,
                     void *ctx);

#endif
