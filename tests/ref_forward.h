/* A second, deliberately naive forward pass in float64 written straight from the transformers
 * modeling code (no KV cache, no threads, no shared code with cpu/ except the model loader and
 * model_rope_inv_freq's formulas re-derived here in double). Tests use it to check shapes the
 * goldens do not cover (GQA with llama3 rope, biases, sliding window). Slow: keep inputs short. */
#ifndef TANDEM_TESTS_REF_FORWARD_H
#define TANDEM_TESTS_REF_FORWARD_H
#include "model/ckpt/model.h"

/* Logits (n, vocab) in double for ids[0..n). */
double *ref_forward(const model *m, const int32_t *ids, int n);

#endif
