/* tools/bench_gpu/common.h — what bench_gpu's parts share (tools/bench_gpu/common.c). */
#ifndef TANDEM_TOOLS_BENCH_GPU_COMMON_H
#define TANDEM_TOOLS_BENCH_GPU_COMMON_H
#include <stdint.h>

double bg_now(void);                 /* CLOCK_MONOTONIC, seconds */
double bg_median(double *v, int n);  /* sorts v */
int32_t *bg_make_ids(int n, int vocab, unsigned seed); /* n random token ids (malloc) */

#endif
