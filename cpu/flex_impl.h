/* cpu/flex_impl.h — helpers shared by the cpu/flex_*.c files (not a public interface). */
#ifndef TANDEM_CPU_FLEX_IMPL_H
#define TANDEM_CPU_FLEX_IMPL_H
#include "cpu/flex.h"
#include <stdint.h>

/* A score and the index it belongs to, for sorts that must report positions. */
typedef struct cpu_flex_pair {
    float v;
    int32_t id;
} cpu_flex_pair;

/* qsort comparators: value descending, then (pairs) index ascending — our fixed tie order. */
int cpu_flex_cmp_float_desc(const void *a, const void *b);
int cpu_flex_cmp_pair_desc(const void *a, const void *b);

/* square_root_js_divergence(p, q) over n values: sqrt(0.5 sum p ln(p/m) + 0.5 sum q ln(q/m)),
 * m = (p + q) / 2, each term in double, summed in index order. A zero in p or q gives NaN
 * (0 * log 0), as it does in the official code. */
float cpu_flex_js_distance(const float *p, const float *q, int n);

/* An index with row_ptr and the per-head arrays allocated (col NULL, nnz 0). */
cpu_flex_index *cpu_flex_index_alloc(int n_heads, int n_tokens, int block_size);

#endif
