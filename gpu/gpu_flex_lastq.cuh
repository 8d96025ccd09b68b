// gpu/gpu_flex_lastq.cuh — FlexPrefill's last-q scoring passes (the two streamed estimates of
// gpu/gpu_flex_index.cu) on mma.sync with register fragments (gpu/gpu_flex_lastq.cu), and the
// helpers both files share. Included by gpu/gpu_flex_index.cu, gpu/gpu_flex_lastq.cu and the test
// library (gpu/test/flex_test_api.cu) only, so that a change here recompiles those three.
#ifndef TANDEM_GPU_FLEX_LASTQ_CUH
#define TANDEM_GPU_FLEX_LASTQ_CUH
#include "gpu/gpu_flex_common.cuh"

#define GF_LASTQ_BS     128  // the estimate's rows (the last block) and the block size
#define GF_LASTQ_KCHUNK 1024 // keys per CTA: one (m, l) partial per (chunk, row), carry per chunk

static __device__ __forceinline__ int gf_kv_head(int h, int H, int Hk, int interleave)
{
    return interleave ? h % Hk : h / (H / Hk);
}

/* Key j's row in K: j, or through a paged cache's block table (gpu/engine.cuh: blocks of
 * GPU_FLEX_KV_BLOCK keys, block id b's rows at b * bstride). */
#define GPU_FLEX_KV_BLOCK 128
static __device__ __forceinline__ long long gf_kv_row(const int *tbl, long long bstride, int j)
{
    return tbl ? (long long)tbl[j / GPU_FLEX_KV_BLOCK] * bstride + j % GPU_FLEX_KV_BLOCK : j;
}

// The arguments of one pass (the buffers of gpu_flex_ws; see lastq_kernel in gpu_flex_index.cu
// for their layouts: partial (H, nch, 128) of (m, l); m2 / inv_l (H, 128); vert / slash (H, n);
// carry_a / carry_b (H, nch, 128)).
struct gf_lastq_args {
    const h16 *q; // indexed by position: row t of head h at q + (t * H + h) * d
    const h16 *k;
    size_t k_tok, k_head;
    const int *tbl;
    long long bstride;
    int n, H, Hk, interleave;
    float scale_log2;
    float2 *partial;
    const float *m2, *inv_l;
    float *vert, *slash, *carry_a, *carry_b;
    float *avg_k; // stats pass, not NULL: the key-block means (Hk, nb, d), as avg_k_kernel's
};

// The stats pass (accum 0: partial, and avg_k when asked: the first head of each KV group sums
// the key tiles it holds anyway) or the sums pass (accum 1: vert, slash inside each chunk,
// carry_a / carry_b at its edges) with grid (chunks of GF_LASTQ_KCHUNK keys, heads), d 64 or 128.
// The same outputs as lastq_kernel's, summed in another fixed order. 0 or GPU_FLEX_ERR_*.
int gf_lastq_mma(int d, int accum, const gf_lastq_args *a, cudaStream_t st);

// Which last-q kernels the workspaces made from now on run: 0 the mma.sync ones above (the
// default), 1 the first WMMA form (lastq_kernel), kept for A/B measurements and tests. Set it
// before gpu_flex_ws_new*; the daemon never does.
extern "C" void gpu_flex_set_lastq_legacy(int legacy);
// The form a workspace runs (1: legacy).
int gpu_flex_ws_lastq_legacy(const gpu_flex_ws *w);

#endif
