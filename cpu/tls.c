/* cpu/tls.c — exact attention over AsyncTLS's kept tokens (see tls.h). */
#include "cpu/tls.h"
#include "cpu/ops.h"
#include <string.h>

void cpu_tls_attend(float *out, const float *q, float *const *k_blocks, float *const *v_blocks,
                    const int32_t *table, int block, size_t off, const int32_t *pos, int n,
                    int stride, int hd, float scale, float *scores)
{
    for (int j = 0; j < n; j++) {
        const int p = pos[j];
        const float *k = k_blocks[table[p / block]] + off + (size_t)(p % block) * stride;
        scores[j] = cpu_dot(q, k, hd) * scale;
    }
    cpu_softmax(scores, n);
    float acc[1024]; /* head_dim <= 1024 (config bound) */
    memset(acc, 0, sizeof(float) * hd);
    for (int j = 0; j < n; j++) {
        const int p = pos[j];
        const float *vj = v_blocks[table[p / block]] + off + (size_t)(p % block) * stride;
        float s = scores[j];
        for (int e = 0; e < hd; e++) acc[e] += s * vj[e];
    }
    memcpy(out, acc, sizeof(float) * hd);
}
