/* cpu/tls.h — AsyncTLS sparse decode on the CPU: the exact attention over the tokens
 * sparse/tls.h's selection kept.
 *
 * cpu_tls_attend is cpu_attend_blocks (cpu/ops.h) over a list of positions instead of a range:
 * the same three loops (scores, softmax, weighted sum of values) over the listed keys in list
 * order. With the list 0 .. n-1 it is cpu_attend_blocks over those keys operand for operand, so a
 * selection that keeps every key gives the same bits as dense attention.
 *
 * Threads: reentrant on disjoint outputs. */
#ifndef TANDEM_CPU_TLS_H
#define TANDEM_CPU_TLS_H
#include <stddef.h>
#include <stdint.h>

/* out[hd] = softmax(q . k_p * scale) . v_p over p in pos[0 .. n-1] (ascending), keys in a cache
 * kept in blocks of `block` positions: position p's key at k_blocks[table[p / block]] + off +
 * (p % block) * stride, its value the same place in v_blocks. scores: n floats of scratch. */
void cpu_tls_attend(float *out, const float *q, float *const *k_blocks, float *const *v_blocks,
                    const int32_t *table, int block, size_t off, const int32_t *pos, int n,
                    int stride, int head_dim, float scale, float *scores);

#endif
