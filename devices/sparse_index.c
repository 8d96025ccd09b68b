/* devices/sparse_index.c — see sparse_index.h. */
#include "devices/sparse_index.h"
#include "cpu/flex.h"
#include "cpu/pool.h"
#include "cpu/sparse_idx.h"
#include "devices/name.h"
#include "devices/exe_dir.h"
#include "gpu/gpu_xattn.h"
#include "gpu/plugin.h"
#include "plugin_abi.h" /* $(BUILD)/: GPU_PLUGIN_ABI */
#include <dlfcn.h>
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

/* The CUDA plugin's index (gpu/gpu_xattn.h: gpu_sparse_index_host; xattention and trishape),
 * the bf16 build beside the binary; the plugin stays loaded (as devices/open.c leaves it). */
static int cuda_index(int index, const sparse_params *p, int official_chunking, const float *q,
                      const float *k, int n_tokens, int q_from, int n_heads, int n_kv_heads,
                      int head_dim, devices_sparse_blocks *out, char *err, size_t errlen)
{
    char path[4096 + 64];
    if (devices_lib_find("libtandem_cuda.so", path, sizeof path)) {
        snprintf(err, errlen, "cuda: the CUDA backend is not built (%.200s)", path);
        return -1;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *abi = h ? (const char *)dlsym(h, GPU_PLUGIN_ABI_SYMBOL) : NULL;
    if (h && (!abi || strncmp(abi, GPU_PLUGIN_ABI, sizeof GPU_PLUGIN_ABI) != 0)) {
        snprintf(err, errlen, "cuda: %s was built from another source tree than this binary "
                              "(interface %s, this binary's %s): rebuild both with make",
                 path, abi ? abi : "unstamped", GPU_PLUGIN_ABI);
        return -1;
    }
    gpu_sparse_index_host_fn fn = h ? (gpu_sparse_index_host_fn)dlsym(h, GPU_SPARSE_INDEX_SYMBOL) : NULL;
    if (!fn) {
        snprintf(err, errlen, "cuda: cannot load %s's %s: %s", path, GPU_SPARSE_INDEX_SYMBOL,
                 dlerror());
        return -1;
    }
    if (p->mode == SPARSE_MODE_FLEX) {
        snprintf(err, errlen, "cuda: sparse-index runs xattention and trishape on the GPU "
                              "(flexprefill: --device cpu)");
        return -1;
    }
    const int B = sparse_block_size(p);
    if (n_tokens < 1 || q_from < 0 || q_from >= n_tokens || q_from % B) {
        snprintf(err, errlen, "%s: the chunk must start on a block boundary", sparse_mode_name(p->mode));
        return -1;
    }
    int64_t *rp = NULL;
    int32_t *col = NULL;
    if (fn(index, p, official_chunking ? sparse_xattn_official_chunk(n_tokens) : 0, q, k, n_tokens,
           q_from, n_heads, n_kv_heads, head_dim, &rp, &col, NULL, NULL, err, errlen))
        return -1;
    out->n_heads = n_heads;
    out->n_blocks = (n_tokens + B - 1) / B;
    out->block_size = B;
    out->q_block0 = q_from / B;
    out->row_ptr = rp;
    out->col = col;
    return 0;
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
    char kind[32];
    int index;
    if (devices_parse_name(device, kind, sizeof kind, &index, err, errlen)) return -1;
    if (!strcmp(kind, "cuda"))
        return cuda_index(index, p, official_chunking, q, k, n_tokens, q_from, n_heads, n_kv_heads,
                          head_dim, out, err, errlen);
    if (strcmp(device, "cpu")) {
        snprintf(err, errlen, "sparse-index runs on cpu (the reference) or cuda[:N]; '%.32s' has none",
                 device);
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
