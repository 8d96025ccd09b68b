// gpu/gpu_xattn_impl.cuh — what gpu/gpu_xattn.cu (the estimate, the workspace) and
// gpu/gpu_xattn_select.cu (selection, Tri-shape, CSR emission) share.
#ifndef TANDEM_GPU_XATTN_IMPL_CUH
#define TANDEM_GPU_XATTN_IMPL_CUH
#include "gpu/gpu_flex_common.cuh"
#include "gpu/gpu_xattn.h"

#define XT 128 // reshaped query rows per CTA, reshaped keys per tile

// The estimate's arguments (gpu/gpu_xattn.cu fills them; both estimate kernels read them).
struct xargs {
    const h16 *q, *k;
    size_t q_tok, k_tok, k_head;
    const int *tbl;
    long long bstride;
    int n, q_pos0, H, Hk, D, S, rpb, interleave;
    int nrs, i0, tile0, ntl; // reshaped rows, first reshaped query row, this launch's tiles
    int nb, q0, nkt;         // key blocks, first query block, Mt's row length (key tiles)
    int nsplit, kps;         // the Hopper estimate: CTAs per query tile along the keys, key tiles each
    float scale_log2;
    float *P, *Mt, *A;
    float *ML;               // nsplit > 1: each split's (max, sum) per row, folded by a second kernel
};

// The Hopper estimate (gpu/gpu_xattn_wg.cu): usable for this shape on this device (B / S >= 8,
// the wgmma kernels available), its key tile (Mt's tiles), and one launch of grid (H, a.ntl).
int gpu_xattn_wg_usable(int rpb);
#define XWN 256 // the Hopper estimate's key tile (reshaped keys)
int gpu_xattn_wg_launch(const xargs &a, cudaStream_t st);
// The same estimate with each query tile's keys split over a.nsplit CTAs of a.kps key tiles
// (gpu/gpu_xattn_ws.cu: grid (H, a.ntl, a.nsplit), then the kernel that merges the splits and
// folds; a.ML: (H, a.ntl, a.nsplit, 128) (max, sum) pairs). Where gpu_xattn_wg_usable.
int gpu_xattn_ws_launch(const xargs &a, cudaStream_t st);

struct gpu_xattn_ws {
    int cap_n, H, Hk, d, block, nb; // nb: key blocks of cap_n
    int tpl;                        // query tiles per launch of the estimate (P's size)
    int nkt;                        // key tiles per row at most (stride 1)
    int estimate;                   // the estimate's buffers are there (else lists only)
    int borrowed;                   // the buffers lie in the caller's memory (gpu_xattn_ws_new_at)
    float *P, *Mt, *A;              // partial block sums, per-tile maxima, block masses
    uint32_t *keep;                 // (H, nb, words) kept-block bits
    int *counts;                    // (H, nb)
    int32_t *row_ptr, *col;
};

// Selection of every row q0 .. nb - 1 into ws->keep / counts, then the CSR lists.
int gpu_xattn_select(gpu_xattn_ws *w, const gpu_xattn_params *p, int nb, int q0, cudaStream_t st);
// The CSR lists from ws->keep and ws->counts (rows q0 .. nb - 1).
int gpu_xattn_emit(gpu_xattn_ws *w, int nb, int q0, cudaStream_t st);

#endif
