/* devices/sparse_index.c — see sparse_index.h. */
#include "devices/sparse_index.h"
#include "cpu/flex.h"
#include "cpu/pool.h"
#include "cpu/sparse_idx.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void devices_sparse_blocks_free(devices_sparse_blocks *b)
{
    free(b->row_ptr);
    free(b->col);
    memset(b, 0, sizeof *b);
}

int devices_sparse_index(const char *device, const sparse_params *p, int official_chunking,
                         const float *q, const float *k, int n_tokens, int q_from, int n_heads,
                         int n_kv_heads, int head_dim, int threads, devices_sparse_blocks *out,
                         char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char why[160];
    if (sparse_params_check(p, why, sizeof why, NULL)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (strcmp(device, "cpu")) {
        snprintf(err, errlen, "sparse-index runs on cpu (the reference); '%.32s' has none", device);
        return -1;
    }
    cpu_flex_qkv x = {n_tokens, n_heads, n_kv_heads, head_dim, q, (size_t)n_heads * head_dim,
                      k, k, (size_t)n_kv_heads * head_dim, q_from};
    if (cpu_flex_qkv_check(&x, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    int t = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_pool *pool = cpu_pool_new(t < 1 ? 1 : t);
    if (!pool) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cpu_flex_index *ix = NULL;
    int rc;
    if (p->mode == SPARSE_MODE_XATTN)
        rc = cpu_xattn_index_build(pool, p, &x,
                                   official_chunking ? sparse_xattn_official_chunk(n_tokens) : 0,
                                   &ix, NULL);
    else if (p->mode == SPARSE_MODE_TRISHAPE)
        rc = cpu_trishape_index_build(p, &x, &ix);
    else
        rc = cpu_flex_index_build(pool, &p->flex, &x, &ix);
    cpu_pool_free(pool);
    if (rc) {
        snprintf(err, errlen, "%s: %s", sparse_mode_name(p->mode),
                 rc == CPU_FLEX_ERR_NOMEM ? "out of memory"
                 : p->mode == SPARSE_MODE_FLEX
                     ? "the index needs two blocks and a block-aligned chunk of at least one"
                     : "the chunk must start on a block boundary");
        return -1;
    }
    out->n_heads = ix->n_heads;
    out->n_blocks = ix->n_blocks;
    out->block_size = ix->block_size;
    out->q_block0 = ix->q_block0;
    out->row_ptr = ix->row_ptr;
    out->col = ix->col;
    ix->row_ptr = NULL;
    ix->col = NULL;
    cpu_flex_index_free(ix);
    return 0;
}
