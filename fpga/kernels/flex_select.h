/* fpga/kernels/flex_select.h — the SIGU's selection units (FAST-Prefill Sec. IV-B: "streaming
 * top-k selection", "streaming coverage selector"), as functions the SIGU top function calls.
 *
 * Coverage without a sort: FlexPrefill keeps the longest prefix of the values sorted descending
 * whose running sum stays <= a limit. A radix descent over the float32 bit patterns (monotone
 * for values >= 0) finds that prefix in 4 streaming passes of 8 bits, each keeping only a
 * 256-bucket histogram of counts and sums on chip: buckets are taken whole from the top while
 * they fit, the first bucket that does not fit is refined by the next pass, and at the last
 * pass (one exact value left) the equal values are taken one by one in ascending index order —
 * the CPU reference's tie order. Sums are double (the CPU's cumsum is double); the bucket order
 * of summation differs from the CPU's sorted order only in the last double ulp.
 *
 * Each pass reads the vector once from HBM (one burst) and is charged FPGA_FLEX_SCAN_LANES
 * values per cycle. */
#ifndef TANDEM_FPGA_FLEX_SELECT_H
#define TANDEM_FPGA_FLEX_SELECT_H
#include "fpga/kernels/flex_kernel.h"

typedef struct flex_cut {
    int all;       /* every value fits: keep everything */
    uint32_t bits; /* else keep values whose bits are > bits ... */
    uint64_t take; /* ... and the first `take` (ascending index) whose bits are == bits */
    uint64_t count;/* size of the kept prefix */
} flex_cut;

/* The coverage cut of x[0..n) (values >= 0, in HBM) at `limit`. */
flex_cut flex_cover_cut(const float *x, uint64_t n, double limit);

/* The first k indices of v[0..n) in (value descending, index ascending) order, into sel:
 * an insertion-sorted candidate list of k entries (on chip, k <= n <= FPGA_FLEX_MAX_NB). */
void flex_top_k(const float *v, int n, int k, int32_t *sel, float *cand);

/* An nb x nb bit map (on chip). */
static inline void flex_mark(uint32_t *m, uint64_t id)
{
    m[id >> 5] |= 1u << (id & 31);
}
static inline int flex_marked(const uint32_t *m, uint64_t id)
{
    return (int)(m[id >> 5] >> (id & 31) & 1u);
}

#endif
