/* Layer-split prefill against whole calls, on any device (tests/cpu/test_layer_split.c,
 * tests/gpu/test_layer_split_gpu.c). */
#ifndef TANDEM_TESTS_LAYER_SPLIT_H
#define TANDEM_TESTS_LAYER_SPLIT_H
#include "scheduler/accel.h"
#include <stddef.h>

typedef struct ls_stream {
    unsigned char *b;
    size_t n, cap;
} ls_stream;

typedef struct ls_result {
    float *logits;      /* (n, V): every row */
    float *next;        /* (V): the decode step after the prompt */
    ls_stream sink, kv; /* the KV chunks exported during the prefill; accel_kv_export after it */
    double density;     /* the sparse reports summed over the calls */
} ls_result;

/* Prefills ids (n tokens) in chunks of `chunk` tokens (0: whole), each chunk in calls of k layers
 * (0: whole calls), every chunk sparse with sp (NULL: dense), with a KV sink and every row's
 * logits; checks that a partial call neither moves the length nor writes logits; then exports
 * the KV and runs one decode step. 0, or -1 on a failure (reported on stderr). */
int ls_run(accel_dev *d, const int32_t *ids, int n, int chunk, int k, const accel_sparse *sp,
           ls_result *out);
/* Every output of a and b equal, bit for bit. */
int ls_same(const ls_result *a, const ls_result *b, int n, int V);
void ls_result_free(ls_result *r);

#endif
