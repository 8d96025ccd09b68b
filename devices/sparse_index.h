/* devices/sparse_index.h — a sparse method's block selection on raw Q and K, on a named device:
 * what `tandem sparse-index` runs to compare with an official implementation.
 *
 * Inputs float32, layout (tokens, heads, head_dim) for q and (tokens, kv_heads, head_dim) for k;
 * queries are positions q_from .. n_tokens - 1 (q holds n_tokens - q_from rows), keys 0 ..
 * n_tokens - 1. The result: per head, per query block from q_from / block on, the ascending key
 * blocks kept. Devices: "cpu" (the reference, cpu/flex.h and cpu/sparse_idx.h), "cuda[:N]" (the
 * CUDA plugin's xattention and trishape, gpu/gpu_xattn.h; inputs rounded to bf16 on upload).
 * Threads: any; one call at a time per process is enough. Errors: 0, or -1 with err set. */
#ifndef TANDEM_DEVICES_SPARSE_INDEX_H
#define TANDEM_DEVICES_SPARSE_INDEX_H
#include "sparse/sparse.h"
#include <stddef.h>
#include <stdint.h>

typedef struct devices_sparse_blocks {
    int n_heads, n_blocks, block_size, q_block0; /* rows q_block0 .. n_blocks - 1 per head */
    int64_t *row_ptr; /* (n_heads, n_blocks + 1), absolute offsets into col */
    int32_t *col;
} devices_sparse_blocks;

/* official_chunking: XAttention as the official torch path selects in its first internal chunk
 * (cpu/sparse_idx.h); 0: the method's rule. threads 0: all cores. */
int devices_sparse_index(const char *device, const sparse_params *p, int official_chunking,
                         const float *q, const float *k, int n_tokens, int q_from, int n_heads,
                         int n_kv_heads, int head_dim, int threads, devices_sparse_blocks *out,
                         char *err, size_t errlen);
void devices_sparse_blocks_free(devices_sparse_blocks *b);

#endif
