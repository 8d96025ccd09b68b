/* tools/bench_gpu/common.c — what bench_gpu's parts share: a monotonic clock, medians, token ids. */
#include "tools/bench_gpu/common.h"
#include <stdlib.h>
#include <time.h>

double bg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bg_median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int32_t *bg_make_ids(int n, int vocab, unsigned seed)
{
    int32_t *ids = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
    uint32_t x = 2463534242u ^ seed;
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        ids[i] = i == 0 ? 1 : (int32_t)(x % (uint32_t)vocab);
    }
    return ids;
}
