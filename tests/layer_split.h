/* Layer-split prefill against whole calls, on any device (tests/cpu/test_layer_split.c,
 * tests/gpu/test_layer_split_gpu.c). */
#ifndef TANDEM_TESTS_LAYER_SPLIT_H
#define TANDEM_TESTS_LAYER_SPLIT_H
#include "scheduler/accel.h"

/* Prefills ids (n tokens) in chunks of `chunk` tokens (0: whole), every chunk sparse with sp
 * (NULL: dense), with a KV sink and every row's logits, then exports the KV and runs one decode
 * step: once in whole calls, then with each chunk in calls of k = 1 and of 3 layers (checking
 * that a partial call neither moves the length nor writes logits). Every output the same as the
 * whole calls', bit for bit: every row's logits, the KV chunks the sink got, the KV exported, the
 * density, the decode step's logits. A difference or a failed run fails the calling test. The
 * whole calls' density (printed for a sparse method), or -1 after a failed run. */
double ls_check_split(accel_dev *d, const int32_t *ids, int n, int chunk, const accel_sparse *sp);

#endif
