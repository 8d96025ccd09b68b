/* gpu/attn_prefill_ws.cu — the warp-specialized Hopper prefill attention kernel (head_dim 128):
 * the FlashAttention-3 paper's ideas (Shah et al. 2024), our code. Same function as
 * gpu/attn_prefill.cu (causal, sliding window, GQA, chunked prefill after cached keys; online
 * softmax in float32, P rounded to h16 for the PV product).
 *
 * One block = BR = 128 query rows of one head, 3 warpgroups (384 threads, one block per SM):
 *   - warpgroup 0, the producer: one thread drives the copy engine (TMA). Q (128 x 128) once,
 *     then the K and V tiles (BC = 128 keys x 128) into a ring of STAGES slots, each slot's K and
 *     V with their own "full" barrier (the consumers can start S = Q K^T before V lands) and
 *     "empty" barrier (K is free once S is computed, V once P V is). setmaxnreg gives its
 *     registers to the consumers (24 per thread left).
 *   - warpgroups 1 and 2, the consumers: 64 query rows each (the wgmma m64 shape), 240 registers
 *     per thread: O (64 x 128, f32) in 64 registers, S (64 x 128) in 64, P (h16) in 32.
 *     Per key tile j: issue S_j = Q K_j^T (8 wgmma m64n128k16, both operands in shared memory)
 *     and then O += P_{j-1} V_{j-1} (8 wgmma m64n128k16, P from registers, V transposed from
 *     shared memory); wait for S_j only (wgmma.wait_group 1) and do its softmax while the
 *     tensor cores still run P_{j-1} V_{j-1}; then wait for that and rescale O. With PINGPONG
 *     the two consumers also take turns issuing their GEMMs (two named barriers), so one
 *     warpgroup's softmax runs under the other's GEMMs.
 *   - shared memory: 128-byte swizzled tiles as the copy engine writes them (CU_TENSOR_MAP_
 *     SWIZZLE_128B) and wgmma reads them (gpu/wgmma.cuh): each 128 x 128 tile is two 64-column
 *     halves of 128 rows x 128 bytes. Q, K: K-major operands; V: the MN-major (transposed) B
 *     operand of P V. Q 32 KB + STAGES x (K 32 KB + V 32 KB): 160 KB (2 stages), 224 KB (3).
 *   - rows past T read zeros (the copy engine fills outside the tensor: Q's tensor is T rows,
 *     K's and V's pos0 + T keys) and are not stored; masking (causal, window, keys past the
 *     end) only on the tiles that straddle a boundary of this warpgroup's rows.
 *   - the heaviest query tiles (last rows, most keys) are launched first; the heads of one GQA
 *     group are neighbours in the grid (blockIdx.x = head), so their K/V tiles come from L2.
 *
 * Block-sparse form (SPARSE, FlexPrefill's lists: gpu_block_list in gpu/engine.cuh): a block's
 * 128 query rows are exactly one FlexPrefill query block (pos0 is a multiple of 128, and so is
 * q0), so the block's list is one CSR row; the producer walks it and loads only the listed
 * 128-key tiles (the copy engine takes any key offset: the list costs nothing but its reads, one
 * entry ahead). The consumers learn each tile's key block from a small ring in shared memory
 * that the producer writes before the tile's "full" barrier (its arrive releases, the consumers'
 * wait acquires) and read it before they free the slot. Masking is unchanged: per tile, from its
 * key offset, so only the diagonal (and the end-of-sequence) tile is masked. With every causal
 * block listed it computes the dense kernel's tiles in the dense kernel's order: the same bits.
 * K/V addressing by strides (key j of KV head g at k + g * k_head + j * k_tok): the engine's cache
 * (hd, cap * hd) and token-major tensors (n_kv * hd, hd; the tensor map then orders its
 * dimensions (d, head, key), as the copy engine wants strides ascending); GQA by h / group, or
 * h % n_kv when interleave.
 * Key splits (grid z > 1; a chunk after a long cache, whose heads x query tiles leave SMs idle:
 * 32 heads x 1-2 tiles on 132 SMs): block z takes tiles [n z / Z, n (z + 1) / Z) of its (head,
 * query tile)'s n (dense range or list), writes O unnormalized with each row's max (log2 domain)
 * and sum to the caller's workspace (gpu_attn_split), and k_ws_combine merges the Z partials into
 * the output (flash-decoding's combine). ws_pick_splits chooses Z from the grid and the key tiles.
 * The host side builds three tensor maps per call (Q, K, V; cuTensorMapEncodeTiled through the
 * runtime's driver entry point) and passes them by value (__grid_constant__). Compiled only for
 * sm_90a (wgmma, setmaxnreg). */
#include "gpu/engine.cuh"
#include "gpu/mma.cuh"
#include "gpu/tma.cuh"
#include "gpu/wgmma.cuh"
#include <cudaTypedefs.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WS_SM90A 1
#endif

#define WS_BR 128
#define WS_BC 128
#define WS_HD 128
#define WS_THREADS 384
#define WS_TILE (128 * 128 * 2)  /* bytes of a 128 x 128 h16 tile */
#define WS_HALF (128 * 128)      /* bytes of one 64-column half of it */
#define WS_BAR_PP 1              /* named barriers 1, 2: consumer 0's and 1's turn to issue */

#define WS_BLOCK 128          /* FlexPrefill's block (GPU_FLEX_BS): one CSR entry, one key tile */

struct ws_params {
    h16 *out;
    float *part_o;   /* split (gridDim.z > 1): partial O, (split, head, row) x 128, unnormalized */
    float2 *part_ml; /* (split, head, row): the row's max (log2 domain; -inf: no key) and sum */
    int T, pos0, qd, group, n_kv, interleave, window;
    int head_inner;   /* K/V maps ordered (d, head, key): token-major tensors */
    float scale_log2; /* head_dim^-0.5 * log2(e) */
    const int32_t *row_ptr, *col; /* SPARSE: head h, query block r: col[row_ptr[h*(nb+1) + r] ..) */
    int nb;
    const int *tbl; /* a paged cache (gpu_kv_map): tile i's keys are block tbl[i] of the 4-D maps */
};

static constexpr size_t ws_smem(int stages)
{
    /* Q + stages x (K + V), the barriers (8 x (1 + 4 stages) bytes), the ring of key blocks
     * (SPARSE: 4 bytes a slot), and 1 KB to align the tiles to the swizzle atom */
    return (size_t)(1 + 2 * stages) * WS_TILE + 128 + 64 + 1024;
}

/* P = exp2(S * scale - m) of one tile in place, the online softmax's update, for this thread's two
 * rows (r and r + 8 of its warp's 16): masks when edge, returns the scale factors of O and l. */
__device__ __forceinline__ void ws_softmax(float *s, float &m0, float &m1,
                                           float &l0, float &l1, float &a0, float &a1, bool edge,
                                           int kbase, int qp0, int kv_len, int window, float sc)
{
    const int lane = threadIdx.x % 32;
    if (edge) {
        const int qp1 = qp0 + 8;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = kbase + j * 8 + (lane % 4) * 2 + (e & 1);
                int qp = e < 2 ? qp0 : qp1;
                if (key > qp || key >= kv_len || (window > 0 && key <= qp - window))
                    s[4 * j + e] = -INFINITY;
            }
    }
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
        mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    /* raw-score maxima; ms = max * scale (0 while the row has seen only masked keys) */
    const float ms0 = mx0 == -INFINITY ? 0.f : mx0 * sc, ms1 = mx1 == -INFINITY ? 0.f : mx1 * sc;
    a0 = exp2f(m0 * sc - ms0);
    a1 = exp2f(m1 * sc - ms1);
    m0 = mx0;
    m1 = mx1;
    float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        s[4 * j] = exp2f(fmaf(s[4 * j], sc, -ms0));
        s[4 * j + 1] = exp2f(fmaf(s[4 * j + 1], sc, -ms0));
        s[4 * j + 2] = exp2f(fmaf(s[4 * j + 2], sc, -ms1));
        s[4 * j + 3] = exp2f(fmaf(s[4 * j + 3], sc, -ms1));
        rs0 += s[4 * j] + s[4 * j + 1];
        rs1 += s[4 * j + 2] + s[4 * j + 3];
    }
    l0 = l0 * a0 + rs0;
    l1 = l1 * a1 + rs1;
}

/* P (float, in the S registers) -> the m16n8k16 A fragments of the PV product: k-step kk = keys
 * 16 kk .. 16 kk + 15 of the tile */
__device__ __forceinline__ void ws_pack(const float *s, unsigned (*pa)[4])
{
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        pa[kk][0] = gpu_pack_h16(s[8 * kk], s[8 * kk + 1]);
        pa[kk][1] = gpu_pack_h16(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = gpu_pack_h16(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = gpu_pack_h16(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

template <int STAGES, bool PINGPONG, bool SPARSE>
__global__ void __launch_bounds__(WS_THREADS, 1)
    k_flash_prefill_ws(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                       const __grid_constant__ CUtensorMap tv, ws_params p)
{
#ifdef WS_SM90A
    extern __shared__ __align__(1024) unsigned char ws_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)ws_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sQ = sm, *sK = sm + WS_TILE, *sV = sm + (1 + STAGES) * WS_TILE;
    const uint32_t bars = gpu_smem_addr(sm + (1 + 2 * STAGES) * WS_TILE);
    /* 8-byte barriers: Q, then full K[s], full V[s], empty K[s], empty V[s] */
    const uint32_t bar_q = bars;
#define WS_FULL_K(s) (bars + 8 * (1 + (s)))
#define WS_FULL_V(s) (bars + 8 * (1 + STAGES + (s)))
#define WS_EMPTY_K(s) (bars + 8 * (1 + 2 * STAGES + (s)))
#define WS_EMPTY_V(s) (bars + 8 * (1 + 3 * STAGES + (s)))
    /* SPARSE: the key block of the tile in each slot (the producer's write, the consumers' read) */
    volatile int *kring = (volatile int *)(sm + (1 + 2 * STAGES) * WS_TILE + 128);

    /* the warpgroup index through a shuffle: the compiler then knows it is warp-uniform, keeps
     * what derives from it (the wgmma descriptors) in uniform registers, and does not serialize
     * the wgmmas for the instructions that would move them there */
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int h = blockIdx.x, g = p.interleave ? h % p.n_kv : h / p.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * WS_BR;
    const int kv_len = p.pos0 + p.T;
    const int qlo = p.pos0 + q0, qhi = p.pos0 + min(q0 + WS_BR, p.T) - 1;
    const int kbeg = p.window > 0 ? max(0, qlo + 1 - p.window) : 0;
    const int t_lo = kbeg / WS_BC;
    /* the tiles: t_lo .. the last row's (dense), or the block's list (SPARSE; may be empty:
     * then the rows are written as zeros, as the mma.sync kernel does) */
    int n = qhi / WS_BC - t_lo + 1;
    const int32_t *lst = nullptr;
    if (SPARSE) {
        const int32_t *rp = p.row_ptr + (size_t)h * (p.nb + 1) + qlo / WS_BLOCK;
        lst = p.col + rp[0];
        n = rp[1] - rp[0];
    }
    /* a key split (gridDim.z > 1): this block takes tiles [n z / Z, n (z + 1) / Z) of them (may
     * be none), in the same order; the diagonal tiles stay with the last split */
    int i_beg = 0;
    if (gridDim.z > 1) {
        const int z = blockIdx.z, nz = gridDim.z;
        i_beg = (int)((long long)n * z / nz);
        n = (int)((long long)n * (z + 1) / nz) - i_beg;
        if (SPARSE) lst += i_beg;
    }
    const int t_first = t_lo + i_beg;

    if (tid == 0) {
        gpu_mbar_init(bar_q, 1);
        for (int s = 0; s < STAGES; s++) {
            gpu_mbar_init(WS_FULL_K(s), 1);
            gpu_mbar_init(WS_FULL_V(s), 1);
            gpu_mbar_init(WS_EMPTY_K(s), 8); /* lane 0 of each consumer warp */
            gpu_mbar_init(WS_EMPTY_V(s), 8);
        }
        gpu_mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (tid == 0) {
            const uint32_t q_s = gpu_smem_addr(sQ);
            gpu_mbar_expect_tx(bar_q, WS_TILE);
            gpu_tma_load_2d(q_s, &tq, h * WS_HD, q0, bar_q);
            gpu_tma_load_2d(q_s + WS_HALF, &tq, h * WS_HD + 64, q0, bar_q);
            /* both 64-column halves of the 128 keys from key0 of KV head g */
            auto load = [&](uint32_t dst, const CUtensorMap *m, int blk, uint32_t bar) {
                const int key0 = blk * WS_BC;
                if (p.tbl) { /* (d, key in block, head, block): one block is one tile */
                    const int id = __ldg(p.tbl + blk);
                    gpu_tma_load_4d(dst, m, 0, 0, g, id, bar);
                    gpu_tma_load_4d(dst + WS_HALF, m, 64, 0, g, id, bar);
                } else if (p.head_inner) {
                    gpu_tma_load_3d(dst, m, 0, g, key0, bar);
                    gpu_tma_load_3d(dst + WS_HALF, m, 64, g, key0, bar);
                } else {
                    gpu_tma_load_3d(dst, m, 0, key0, g, bar);
                    gpu_tma_load_3d(dst + WS_HALF, m, 64, key0, g, bar);
                }
            };
            /* SPARSE: the list entry of tile i + 1 is read while tile i is issued */
            int blk = SPARSE && n > 0 ? __ldg(lst) : t_first, blk_prev = 0;
            /* in the order the consumers need them: K_0, then K_i and V_{i-1} */
            for (int i = 0; i <= n; i++) {
                int blk_next = t_first + i + 1;
                if (SPARSE) blk_next = i + 1 < n ? __ldg(lst + i + 1) : 0;
                if (i < n) {
                    const int s = i % STAGES, ph = (i / STAGES) & 1;
                    gpu_mbar_wait(WS_EMPTY_K(s), ph ^ 1);
                    if (SPARSE) kring[s] = blk; /* released by the arrive below */
                    gpu_mbar_expect_tx(WS_FULL_K(s), WS_TILE);
                    load(gpu_smem_addr(sK + s * WS_TILE), &tk, blk, WS_FULL_K(s));
                }
                if (i > 0) {
                    const int j = i - 1, s = j % STAGES, ph = (j / STAGES) & 1;
                    gpu_mbar_wait(WS_EMPTY_V(s), ph ^ 1);
                    gpu_mbar_expect_tx(WS_FULL_V(s), WS_TILE);
                    load(gpu_smem_addr(sV + s * WS_TILE), &tv, blk_prev, WS_FULL_V(s));
                }
                blk_prev = blk;
                blk = blk_next;
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
        const int cw = wg - 1, ct = tid - 128 * wg, warp = ct / 32, lane = ct % 32;
        const bool lane0 = lane == 0; /* the 8 consumer warps' lanes 0 free a slot */
        const int row0 = cw * 64 + warp * 16 + lane / 4; /* rows row0, row0 + 8 of the tile */
        const int qp0 = qlo + row0;
        const int wlo = qlo + cw * 64, whi = wlo + 63; /* this warpgroup's query positions */
        const float sc = p.scale_log2;
        /* Q of this warpgroup: rows cw*64.. of both halves (8 KB in each) */
        unsigned char *myQ = sQ + cw * 64 * 128;

        float o[64], s[64];
        unsigned pa[8][4];
#pragma unroll
        for (int i = 0; i < 64; i++) o[i] = 0.f;
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) pa[kk][e] = 0u;
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f, a0 = 1.f, a1 = 1.f;

        gpu_mbar_wait(bar_q, 0);
        /* tile i's first key. SPARSE: read after its "full K" wait by the lane that will release
         * the slot (its arrive then orders the read before the producer's next write), and
         * handed to the warp */
        auto key_base = [&](int i) {
            if (!SPARSE) return (t_first + i) * WS_BC;
            const int b = lane0 ? kring[i % STAGES] : 0;
            return __shfl_sync(0xffffffffu, b, 0) * WS_BC;
        };

        /* the three steps of a tile, straight-line code each (a branch between a wgmma and its
         * wait makes ptxas serialize the wgmmas) */
        auto issue_s = [&](int i) {
            const unsigned char *cK = sK + (i % STAGES) * WS_TILE;
            gpu_wgmma_fence_regs<64>(s);
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
                gpu_wgmma_ss_m64n128(
                    s, gpu_wgmma_desc_sw128(myQ + (kk / 4) * WS_HALF + (kk % 4) * 32, 16, 1024),
                    gpu_wgmma_desc_sw128(cK + (kk / 4) * WS_HALF + (kk % 4) * 32, 16, 1024), kk > 0);
            gpu_wgmma_commit();
        };
        auto issue_pv = [&](int j) {
            const unsigned char *cV = sV + (j % STAGES) * WS_TILE;
            gpu_wgmma_fence_regs<64>(o);
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
                gpu_wgmma_rs_m64n128_tb(o, pa[kk], gpu_wgmma_desc_sw128(cV + kk * 2048, WS_HALF, 1024));
            gpu_wgmma_commit();
        };
        auto softmax = [&](int i, int kbase) {
            gpu_wgmma_fence_regs<64>(s);
            gpu_mbar_arrive_if(WS_EMPTY_K(i % STAGES), lane0);
            const bool edge = kbase + WS_BC - 1 > wlo || kbase + WS_BC > kv_len ||
                              (p.window > 0 && kbase <= whi - p.window);
            ws_softmax(s, m0, m1, l0, l1, a0, a1, edge, kbase, qp0, kv_len, p.window, sc);
        };
        auto pv_done = [&](int j) {
            gpu_wgmma_fence_regs<64>(o);
            gpu_mbar_arrive_if(WS_EMPTY_V(j % STAGES), lane0);
        };
        /* after the PV product that read pa: nothing may write pa (or O) while a wgmma that
         * reads it is in flight, or ptxas serializes every wgmma of the kernel (C7513) */
        auto rescale = [&]() {
#pragma unroll
            for (int c = 0; c < 16; c++) {
                o[4 * c] *= a0;
                o[4 * c + 1] *= a0;
                o[4 * c + 2] *= a1;
                o[4 * c + 3] *= a1;
            }
            ws_pack(s, pa);
        };

        if (n > 0) { /* (SPARSE: an empty list skips to the store, with l = 0) */
            /* consumer 0 issues first; consumer 1 skips its last arrival (nobody would wait
             * for it) */
            if (PINGPONG) gpu_bar_arrive_if(WS_BAR_PP, 256, cw == 1);
            /* tile 0: S_0 alone */
            gpu_mbar_wait(WS_FULL_K(0), 0);
            const int kb0 = key_base(0);
            if (PINGPONG) gpu_bar_sync(WS_BAR_PP + cw, 256);
            gpu_wgmma_fence();
            issue_s(0);
            if (PINGPONG) gpu_bar_arrive(WS_BAR_PP + (1 - cw), 256);
            gpu_wgmma_wait<0>();
            softmax(0, kb0);
            rescale();
            /* tile i: S_i and P_{i-1} V_{i-1}; the softmax of S_i under the PV product */
            for (int i = 1; i < n; i++) {
                const int j = i - 1;
                gpu_mbar_wait(WS_FULL_K(i % STAGES), (i / STAGES) & 1);
                const int kb = key_base(i);
                gpu_mbar_wait(WS_FULL_V(j % STAGES), (j / STAGES) & 1);
                if (PINGPONG) gpu_bar_sync(WS_BAR_PP + cw, 256);
                gpu_wgmma_fence();
                issue_s(i);
                issue_pv(j);
                if (PINGPONG) gpu_bar_arrive(WS_BAR_PP + (1 - cw), 256);
                gpu_wgmma_wait<1>();
                softmax(i, kb);
                gpu_wgmma_wait<0>();
                pv_done(j);
                rescale();
            }
            /* the last P V */
            {
                const int j = n - 1;
                gpu_mbar_wait(WS_FULL_V(j % STAGES), (j / STAGES) & 1);
                if (PINGPONG) gpu_bar_sync(WS_BAR_PP + cw, 256);
                gpu_wgmma_fence();
                issue_pv(j);
                if (PINGPONG) gpu_bar_arrive_if(WS_BAR_PP + (1 - cw), 256, cw == 0);
                gpu_wgmma_wait<0>();
                pv_done(j);
            }
        }

        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const int r0 = q0 + row0, r1 = r0 + 8;
        if (gridDim.z > 1) {
            /* a split: O unnormalized, with the row's max (scaled into the log2 domain of
             * exp2(s * sc - m), the one l and O are in) and sum; k_ws_combine merges */
            const size_t rows = (size_t)gridDim.y * WS_BR;
            const size_t b0 = ((size_t)blockIdx.z * gridDim.x + h) * rows + r0;
            float *po0 = p.part_o + b0 * WS_HD, *po1 = po0 + 8 * WS_HD;
#pragma unroll
            for (int c = 0; c < 16; c++) {
                const int col = c * 8 + (lane % 4) * 2;
                if (r0 < p.T) *(float2 *)(po0 + col) = make_float2(o[4 * c], o[4 * c + 1]);
                if (r1 < p.T) *(float2 *)(po1 + col) = make_float2(o[4 * c + 2], o[4 * c + 3]);
            }
            if (lane % 4 == 0) {
                if (r0 < p.T) p.part_ml[b0] = make_float2(m0 == -INFINITY ? -INFINITY : m0 * sc, l0);
                if (r1 < p.T) p.part_ml[b0 + 8] = make_float2(m1 == -INFINITY ? -INFINITY : m1 * sc, l1);
            }
            return;
        }
        const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
        h16 *out0 = p.out + (size_t)r0 * p.qd + h * WS_HD, *out1 = out0 + (size_t)8 * p.qd;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            const int col = c * 8 + (lane % 4) * 2;
            if (r0 < p.T)
                *(h16x2 *)(out0 + col) = h16x2_from(o[4 * c] * inv0, o[4 * c + 1] * inv0);
            if (r1 < p.T)
                *(h16x2 *)(out1 + col) =
                    h16x2_from(o[4 * c + 2] * inv1, o[4 * c + 3] * inv1);
        }
    }
#undef WS_FULL_K
#undef WS_FULL_V
#undef WS_EMPTY_K
#undef WS_EMPTY_V
#endif
}

/* The key splits' merge: row r of head h from its Z partials (flash-decoding's combine): O =
 * sum_z exp2(m_z - M) O_z / sum_z exp2(m_z - M) l_z, M the largest m_z of the splits that saw a
 * key (l_z > 0); a row no split saw is written as zeros, as the unsplit kernel writes it. One warp
 * per row, 4 columns per lane. */
__global__ void __launch_bounds__(128) k_ws_combine(const float *part_o, const float2 *part_ml,
                                                    h16 *out, int T, int qd, int rows, int nz)
{
    const int h = blockIdx.x, r = blockIdx.y * 4 + threadIdx.x / 32, c = (threadIdx.x % 32) * 4;
    if (r >= T) return;
    const size_t stride = (size_t)gridDim.x * rows; /* between splits of one (head, row) */
    const size_t b = (size_t)h * rows + r;
    float M = -INFINITY;
    for (int z = 0; z < nz; z++) {
        const float2 ml = __ldg(part_ml + b + z * stride);
        if (ml.y > 0.f) M = fmaxf(M, ml.x);
    }
    float L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z = 0; z < nz; z++) {
        const float2 ml = __ldg(part_ml + b + z * stride);
        if (!(ml.y > 0.f)) continue;
        const float w = exp2f(ml.x - M);
        const float4 o = __ldg((const float4 *)(part_o + (b + z * stride) * WS_HD + c));
        L += w * ml.y;
        acc.x += w * o.x, acc.y += w * o.y, acc.z += w * o.z, acc.w += w * o.w;
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    h16x2 *dst = (h16x2 *)(out + (size_t)r * qd + h * WS_HD + c);
    dst[0] = h16x2_from(acc.x * inv, acc.y * inv);
    dst[1] = h16x2_from(acc.z * inv, acc.w * inv);
}

/* How many key splits a launch of `ctas` blocks (heads x query tiles) takes, its longest block
 * walking `tiles` key tiles: 1 (none) when the keys are short or there is no workspace, or when
 * the grid fills the SMs (one block per SM: its shared memory) and its blocks' work is not even
 * (a whole prompt's causal triangle: the heaviest start first and the light ones fill the last
 * wave; `even`: a chunk after a long cache, every query tile within 1/4 of the longest); else
 * the count that minimizes waves x (tiles per split + a block's fixed cost, ~2 tiles: Q's load,
 * the partials' store), with at least WS_SPLIT_MIN tiles a split and at most WS_SPLIT_WAVES x SMs
 * blocks (the workspace's bound: gpu_attn_split_rows). On 132 SMs with 32 heads: 1 query tile
 * takes 4 splits, 2 take 2, 3 (3/4 of the SMs) take 4 in 3 waves. sp->force: exactly that many
 * (tests, benchmarks), or 0 where the workspace cannot hold them. */
#define WS_SPLIT_MIN 8
#define WS_SPLIT_MAX 64
#define WS_SPLIT_WAVES 4
static int ws_pick_splits(const gpu_attn_split *sp, int ctas, int tiles, bool even)
{
    if (!sp || !sp->o || !sp->ml || sp->rows == 0) return sp && sp->force > 1 ? 0 : 1;
    const size_t fit = sp->rows / ((size_t)ctas * WS_BR);
    if (sp->force > 0) return (size_t)sp->force <= fit ? sp->force : 0;
    if ((ctas >= sp->sms && !even) || tiles < 2 * WS_SPLIT_MIN) return 1;
    int best = 1;
    double best_cost = (ctas + sp->sms - 1) / sp->sms * (tiles + 2.0);
    for (int z = 2; z <= WS_SPLIT_MAX && (size_t)z <= fit && ctas * z <= WS_SPLIT_WAVES * sp->sms &&
                    tiles / z >= WS_SPLIT_MIN;
         z++) {
        const int waves = (ctas * z + sp->sms - 1) / sp->sms;
        const double cost = waves * ((tiles + z - 1) / z + 2.0) + 1.0; /* + the merge */
        if (cost < best_cost) best = z, best_cost = cost;
    }
    return best;
}

size_t gpu_attn_split_rows(int sms)
{
    return (size_t)WS_SPLIT_WAVES * (sms > 0 ? sms : 1) * WS_BR;
}

int gpu_attn_split_count(const gpu_attn_split *sp, const gpu_dims *d, int T, int pos0)
{
    if (T <= 0 || d->hd != WS_HD) return 1;
    const int qt = (T + WS_BR - 1) / WS_BR, kv_len = pos0 + T;
    const int qlo = pos0 + (qt - 1) * WS_BR; /* the last query tile: the most keys */
    const int kbeg = d->window > 0 ? max(0, qlo + 1 - d->window) : 0;
    const int tiles = (kv_len - 1) / WS_BC - kbeg / WS_BC + 1;
    return ws_pick_splits(sp, d->n_heads * qt, tiles, 4 * (qt - 1) <= tiles);
}

/* cuTensorMapEncodeTiled from the driver, looked up once through the runtime (no -lcuda) */
static PFN_cuTensorMapEncodeTiled_v12000 ws_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = NULL;
        cudaGetLastError();
        return (PFN_cuTensorMapEncodeTiled_v12000)f;
    }();
    return fn;
}

/* an h16 tensor of `rank` dims (dims[0] contiguous; strides in bytes of dims 1..), read in boxes
 * of box[0..rank), 128-byte swizzled, zeros outside */
static int ws_map(CUtensorMap *m, const void *base, int rank, const cuuint64_t *dims,
                  const cuuint64_t *strides, const cuuint32_t *box)
{
    cuuint32_t es[4] = {1, 1, 1, 1};
    CUresult r = ws_encoder()(m, GPU_H16_TMA, rank, (void *)base, dims, strides, box,
                              es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r == CUDA_SUCCESS) return ACCEL_OK;
    /* a shape or address the copy engine cannot describe: not a device fault, the caller
     * falls back to a kernel without tensor maps */
    fprintf(stderr, "tandem cuda: cuTensorMapEncodeTiled failed (CUresult %d); attention falls back\n",
            (int)r);
    return ACCEL_ERR_UNSUPPORTED;
}

int gpu_attn_ws_usable(const gpu_dims *d, const h16 *q, const h16 *k, const h16 *v, int cap)
{
    return d->hd == WS_HD && ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 == 0 && cap > 0 &&
           ws_encoder() != NULL;
}

template <int STAGES, bool PINGPONG, bool SPARSE>
static int ws_launch(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q, const h16 *k,
                     const h16 *v, size_t k_tok, size_t k_head, int interleave,
                     const gpu_block_list *bl, h16 *out, const gpu_kv_map *map,
                     const gpu_attn_split *sp)
{
    const int nz = gpu_attn_split_count(sp, d, T, pos0);
    if (nz < 1) return ACCEL_ERR_INVALID; /* a forced count the workspace cannot hold */
    CUtensorMap tq, tk, tv;
    const cuuint64_t qdims[2] = {(cuuint64_t)d->qd, (cuuint64_t)T}, qstr[1] = {(cuuint64_t)d->qd * 2};
    const cuuint32_t qbox[2] = {64, WS_BR};
    /* the copy engine wants the strides ascending: (d, key, head) for the cache layout, (d,
     * head, key) for token-major tensors; one head's 128 keys land in the same shared rows */
    const int head_inner = k_head < k_tok && d->n_kv > 1;
    if (d->n_kv == 1) k_head = k_tok * (pos0 + T); /* one head: any stride past the keys */
    const cuuint64_t keys = (cuuint64_t)(pos0 + T), heads = (cuuint64_t)d->n_kv;
    const cuuint64_t kdims[3] = {WS_HD, head_inner ? heads : keys, head_inner ? keys : heads};
    const cuuint64_t kstr[2] = {(head_inner ? k_head : k_tok) * 2,
                                (head_inner ? k_tok : k_head) * 2};
    const cuuint32_t one = 1, bc = WS_BC;
    const cuuint32_t kbox[3] = {64, head_inner ? one : bc, head_inner ? bc : one};
    int st = ws_map(&tq, q, 2, qdims, qstr, qbox);
    if (map && map->tbl) {
        /* a paged cache (gpu/engine.cuh): (d, key in block, head, block id), one block per tile */
        const cuuint64_t pdims[4] = {WS_HD, GPU_KV_BLOCK, heads, (cuuint64_t)map->nblocks};
        const cuuint64_t pstr[3] = {k_tok * 2, (cuuint64_t)GPU_KV_BLOCK * k_tok * 2,
                                    (cuuint64_t)map->bstride * k_tok * 2};
        const cuuint32_t pbox[4] = {64, WS_BC, 1, 1};
        if (!st) st = ws_map(&tk, k, 4, pdims, pstr, pbox);
        if (!st) st = ws_map(&tv, v, 4, pdims, pstr, pbox);
    } else {
        if (!st) st = ws_map(&tk, k, 3, kdims, kstr, kbox);
        if (!st) st = ws_map(&tv, v, 3, kdims, kstr, kbox);
    }
    if (st) return st;
    ws_params p;
    p.out = out;
    p.T = T;
    p.pos0 = pos0;
    p.qd = d->qd;
    p.group = d->n_heads / d->n_kv;
    p.n_kv = d->n_kv;
    p.interleave = interleave;
    p.window = d->window;
    p.head_inner = head_inner;
    p.scale_log2 = (float)(1.4426950408889634 / sqrt((double)WS_HD));
    p.row_ptr = bl ? bl->row_ptr : nullptr;
    p.col = bl ? bl->col : nullptr;
    p.nb = bl ? bl->nb : 0;
    p.tbl = map ? map->tbl : nullptr;
    p.part_o = nz > 1 ? sp->o : nullptr;
    p.part_ml = nz > 1 ? sp->ml : nullptr;
    const size_t smem = ws_smem(STAGES);
    GPU_CHECK(cudaFuncSetAttribute(k_flash_prefill_ws<STAGES, PINGPONG, SPARSE>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(d->n_heads, (T + WS_BR - 1) / WS_BR, nz);
    k_flash_prefill_ws<STAGES, PINGPONG, SPARSE><<<grid, WS_THREADS, smem, s>>>(tq, tk, tv, p);
    GPU_LAUNCHED();
    if (nz > 1) {
        k_ws_combine<<<dim3(d->n_heads, (T + 3) / 4), 128, 0, s>>>(sp->o, sp->ml, out, T, d->qd,
                                                                  (int)grid.y * WS_BR, nz);
        GPU_LAUNCHED();
    }
    return ACCEL_OK;
}

template <bool SPARSE>
static int ws_variant(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q, const h16 *k,
                      const h16 *v, size_t k_tok, size_t k_head, int interleave,
                      const gpu_block_list *bl, h16 *out, int variant, const gpu_kv_map *map,
                      const gpu_attn_split *sp)
{
#define WS_ARGS s, d, T, pos0, q, k, v, k_tok, k_head, interleave, bl, out, map, sp
    switch (variant) {
    case 1: return ws_launch<2, false, SPARSE>(WS_ARGS);
    case 2: return ws_launch<3, true, SPARSE>(WS_ARGS);
    default: return ws_launch<2, true, SPARSE>(WS_ARGS);
    }
#undef WS_ARGS
}

int gpu_attn_prefill_ws_ex(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                           const h16 *k, const h16 *v, size_t k_tok, size_t k_head, int interleave,
                           const gpu_block_list *bl, h16 *out, int variant, const gpu_kv_map *map,
                           const gpu_attn_split *sp)
{
    if (T <= 0) return ACCEL_OK;
    if (map && !map->tbl) map = nullptr;
    if (map && (WS_BC != GPU_KV_BLOCK || interleave || k_tok != WS_HD ||
                k_head != (size_t)GPU_KV_BLOCK * WS_HD))
        return ACCEL_ERR_UNSUPPORTED; /* the paged maps are the cache's layout only */
    if ((T + WS_BR - 1) / WS_BR > 65535 || pos0 < 0 || d->n_kv < 1 || d->n_heads % d->n_kv)
        return ACCEL_ERR_INVALID;
    if (bl && (pos0 % WS_BLOCK || !bl->row_ptr || !bl->col ||
               bl->nb < (pos0 + T + WS_BLOCK - 1) / WS_BLOCK))
        return ACCEL_ERR_INVALID;
    /* the copy engine's limits: 16-byte aligned bases and strides, strides below 2^40 bytes */
    if (d->hd != WS_HD || ws_encoder() == NULL ||
        ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 || (k_tok * 2) % 16 || (k_head * 2) % 16 || k_tok >= (1ull << 38) || k_head >= (1ull << 38))
        return ACCEL_ERR_UNSUPPORTED;
    return bl ? ws_variant<true>(s, d, T, pos0, q, k, v, k_tok, k_head, interleave, bl, out, variant, map, sp)
              : ws_variant<false>(s, d, T, pos0, q, k, v, k_tok, k_head, interleave, bl, out, variant, map, sp);
}

int gpu_attn_prefill_ws(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                        const h16 *k, const h16 *v, int cap, h16 *out, int variant,
                        const gpu_kv_map *map, const gpu_attn_split *sp)
{
    if (T <= 0) return ACCEL_OK;
    if (!(map && map->tbl) && pos0 + T > cap) return ACCEL_ERR_INVALID;
    return gpu_attn_prefill_ws_ex(s, d, T, pos0, q, k, v, (size_t)WS_HD, (size_t)cap * WS_HD, 0,
                                  nullptr, out, variant, map, sp);
}
