/* gpu/attn_prefill.cu — fused causal attention for prefill (FlashAttention-2's algorithm, our
 * code): one block computes BR = 64 query rows of one head (16 per warp) against the sequence's
 * keys in tiles of BC = 64, with the online softmax (running max and sum per row, rescaling the
 * output accumulator when the max moves), so the (T x T) score matrix never exists.
 *
 *   - Q tile: loaded once (cp.async -> shared -> ldmatrix), kept in registers as A fragments.
 *   - K, V tiles: double-buffered in shared memory with cp.async (tile i+1 loads while tile i
 *     computes); rows padded by 16 bytes, so ldmatrix's 8 row addresses hit 8 different bank
 *     groups (row strides 48/80/144/272 bytes are all distinct multiples of 16 modulo 128).
 *   - S = Q K^T and O += P V on the tensor cores (mma m16n8k16, h16 in, float32 accumulate);
 *     P is rounded to h16 for the PV product, the row sums use the float32 P.
 *   - Causal (and sliding-window) masking only on the tiles that straddle a boundary.
 *   - GQA: the block of query head h reads K/V head h / group; heads of one group run next to
 *     each other (blockIdx.x = head) so their K/V tiles come from L2.
 *   - Chunked prefill: the T query rows sit at positions pos0 .. pos0+T-1 and attend to every
 *     key before them in the cache (the chunk's own K/V were written there by the rope kernel).
 *   - The heaviest query tiles (last rows, most keys) are scheduled first.
 * head_dim is padded to the template width HDP (16, 32, 64, 128): padded columns load as zeros.
 *
 * Block-sparse attention (issue 8, FlexPrefill): the same kernel with SPARSE = true walks a
 * per-(head, query block of 128) CSR list of 128-key blocks (gpu_flex.h's index) instead of the
 * dense tile range: each listed block is two of our 64-key tiles, loaded and computed in list
 * order with the same double buffering (the list entry two tiles ahead is read one entry early,
 * so its global load is not on the critical path); the online softmax and the masking of partial
 * and diagonal tiles are unchanged. With every causal block listed it computes exactly the tiles
 * of the dense kernel, in the same order: the same bits. A CTA's 64 (or 128) rows lie inside one
 * query block because the chunk starts at a multiple of 128 (pos0 % 128 == 0).
 * K/V addressing is by strides (elements between keys, between KV heads), so the same kernel
 * reads the engine's cache (hd, cap * hd) and token-major (n, n_kv, hd) tensors (n_kv * hd, hd).
 * Numerics vs cpu_attend (float32 softmax over float32 q·k, then P·V in float32): inputs are h16
 * here, P is h16 in the PV product, exp is exp2 of log2-scaled scores (ex2.approx, 2 ulp);
 * tests/gpu/test_ops.c states the tolerance. */
#include "gpu/engine.cuh"
#include "gpu/mma.cuh"

#define FA_BC 64

#define FA_BLOCK 128 /* FlexPrefill's block: one CSR entry, two tiles */

struct fa_params {
    const h16 *q; /* (T, qd): row t, head h at q + t*qd + h*hd */
    const h16 *k, *v; /* key j of kv head g at k + g*k_head + j*k_tok */
    h16 *out;     /* (T, qd) */
    unsigned k_tok; /* at most 2^24 (checked): 64 rows of offsets stay 32-bit */
    size_t k_head;
    int T, pos0, hd, qd, group, n_kv, interleave, window;
    float scale_log2; /* head_dim^-0.5 * log2(e) */
    const int32_t *row_ptr, *col; /* SPARSE: head h, query block r: col[row_ptr[h*(nb+1) + r] ..) */
    int nb;
    gpu_kv_map map; /* keys -> rows (a paged cache; a 64-key tile lies inside one block) */
};

/* WARPS warps of 16 query rows each: BR = 64 (4 warps, two blocks per SM) or 128 (8 warps, one
 * block per SM, each K/V tile serving twice the rows: half the L2 traffic). */
template <int HDP, int WARPS> struct fa_shape {
    static constexpr int ROW = HDP + 8; /* shared row: HDP h16 + 16 bytes of padding */
    static constexpr int CH = HDP / 8;  /* 16-byte chunks per row */
    static constexpr int BR = 16 * WARPS;
    static constexpr size_t SMEM = (size_t)(BR + 4 * FA_BC) * ROW * sizeof(h16);
};

template <int HDP, int WARPS, bool SPARSE>
__global__ void __launch_bounds__(WARPS * 32) k_flash_prefill(fa_params p)
{
    typedef fa_shape<HDP, WARPS> S;
    constexpr int FA_WARPS = WARPS, FA_BR = S::BR;
    constexpr int ROW = S::ROW, CH = S::CH, NT = FA_BC / 8, DT = HDP / 8, KS = HDP / 16;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    h16 *sQ = (h16 *)fa_smem;
    h16 *sK = sQ + FA_BR * ROW;
    h16 *sV = sK + 2 * FA_BC * ROW;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int h = blockIdx.x, g = p.interleave ? h % p.n_kv : h / p.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * FA_BR;
    const int kv_len = p.pos0 + p.T;
    const int qlo = p.pos0 + q0, qhi = p.pos0 + min(q0 + FA_BR, p.T) - 1;
    const int kbeg = p.window > 0 ? max(0, qlo + 1 - p.window) : 0;
    const int t_first = kbeg / FA_BC, t_last = qhi / FA_BC;
    const h16 *kh = p.k + (size_t)g * p.k_head, *vh = p.v + (size_t)g * p.k_head;

    /* the tiles to visit: t_first.. (dense), or two per listed block (SPARSE), less the trailing
     * ones past the last row or key (only the diagonal block, last in its list, has any) */
    int n_tiles = t_last - t_first + 1, tile0 = t_first, ne = 0, pf = 0;
    const int32_t *lst = nullptr;
    if (SPARSE) {
        const int qb = qlo / FA_BLOCK;
        const int e0 = p.row_ptr[h * (p.nb + 1) + qb], e1 = p.row_ptr[h * (p.nb + 1) + qb + 1];
        const int t_lim = min(qhi, kv_len - 1) / FA_BC;
        lst = p.col + e0;
        ne = e1 - e0;
        n_tiles = 2 * ne;
        if (ne > 0) {
            const int last = lst[ne - 1];
            n_tiles -= (2 * last + 1 > t_lim) + (2 * last > t_lim);
            tile0 = 2 * lst[0];
        }
        pf = ne > 1 ? lst[1] : 0; /* the block after the current one */
    }

    for (int c = tid; c < FA_BR * CH; c += FA_WARPS * 32) {
        int r = c / CH, ch = c % CH;
        bool ok = q0 + r < p.T && ch * 8 < p.hd;
        const h16 *src = ok ? p.q + (size_t)(q0 + r) * p.qd + h * p.hd + ch * 8 : p.q;
        gpu_cp_async16(sQ + r * ROW + ch * 8, src, ok);
    }
    gpu_cp_async_commit();

    /* K/V tile loads. The dense form walks tiles in order and its compiler strength-reduces the
     * addresses; the sparse form's next tile comes from a list, and recomputing a 64-bit
     * key * stride per 16-byte chunk cost it a good part of its rate. There, thread
     * tid copies chunk tid % CH of rows tid / CH + j * LD_ROWS, whose offsets inside a tile are
     * the same for every tile (32-bit, computed once): one 64-bit base address per tile. (That
     * form made the dense one slower, so each keeps its own: gpu/KERNELS.md.) */
    constexpr int LD_ROWS = FA_WARPS * 32 / CH;
    const int ld_r0 = tid / CH, ld_ch = tid % CH;
    const bool ld_col_ok = ld_ch * 8 < p.hd;
    const unsigned ld_off0 = (unsigned)ld_r0 * p.k_tok + ld_ch * 8;
    auto load_kv = [&](int tile, int buf) {
        if constexpr (SPARSE) {
            h16 *dk = sK + buf * FA_BC * ROW + ld_r0 * ROW + ld_ch * 8;
            h16 *dv = sV + buf * FA_BC * ROW + ld_r0 * ROW + ld_ch * 8;
            const int kbase = tile * FA_BC;
            const size_t rb = (size_t)gpu_kv_row(p.map, kbase) * p.k_tok;
            const h16 *kt = kh + rb, *vt = vh + rb;
#pragma unroll
            for (int j = 0; j < FA_BC / LD_ROWS; j++) {
                const bool ok = kbase + ld_r0 + j * LD_ROWS < kv_len && ld_col_ok;
                const unsigned off = ld_off0 + (unsigned)(j * LD_ROWS) * p.k_tok;
                gpu_cp_async16(dk + j * LD_ROWS * ROW, ok ? kt + off : kh, ok);
                gpu_cp_async16(dv + j * LD_ROWS * ROW, ok ? vt + off : vh, ok);
            }
        } else {
            h16 *dk = sK + buf * FA_BC * ROW, *dv = sV + buf * FA_BC * ROW;
            const long long rb = gpu_kv_row(p.map, tile * FA_BC); /* the tile's first row */
            for (int c = tid; c < FA_BC * CH; c += FA_WARPS * 32) {
                int r = c / CH, ch = c % CH, key = tile * FA_BC + r;
                bool ok = key < kv_len && ch * 8 < p.hd;
                size_t off = ok ? (size_t)(rb + r) * p.k_tok + ch * 8 : 0;
                gpu_cp_async16(dk + r * ROW + ch * 8, kh + off, ok);
                gpu_cp_async16(dv + r * ROW + ch * 8, vh + off, ok);
            }
        }
    };
    if (n_tiles > 0) load_kv(tile0, 0);
    gpu_cp_async_commit();
    gpu_cp_async_wait<1>();
    __syncthreads();

    const int jm = lane / 8, li = lane % 8; /* ldmatrix: which 8x8 matrix this lane addresses */
    unsigned qa[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
        gpu_ldmatrix_x4(qa[kk], sQ + (warp * 16 + li + (jm % 2) * 8) * ROW + kk * 16 + (jm / 2) * 8);

    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int qp0 = qlo + warp * 16 + lane / 4, qp1 = qp0 + 8;

    for (int i = 0, tile = tile0; i < n_tiles; i++) {
        const int buf = i & 1;
        int next = tile + 1;
        if (SPARSE && (i & 1)) { /* the next listed block; prefetch the one after it */
            const int en = (i + 1) / 2 + 1;
            next = 2 * pf;
            pf = en < ne ? __ldg(lst + en) : 0;
        }
        if (i + 1 < n_tiles) {
            load_kv(next, buf ^ 1);
            gpu_cp_async_commit();
            gpu_cp_async_wait<1>();
        } else {
            gpu_cp_async_wait<0>();
        }
        __syncthreads();
        const h16 *cK = sK + buf * FA_BC * ROW, *cV = sV + buf * FA_BC * ROW;

        float s[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                unsigned b[4];
                gpu_ldmatrix_x4(b, cK + ((nt + jm / 2) * 8 + li) * ROW + kk * 16 + (jm % 2) * 8);
                gpu_mma_h16(s[nt], qa[kk], b[0], b[1]);
                gpu_mma_h16(s[nt + 1], qa[kk], b[2], b[3]);
            }
        }

        const int kbase = tile * FA_BC;
        const bool edge = kbase + FA_BC - 1 > qlo || kbase + FA_BC > kv_len ||
                          (p.window > 0 && kbase <= qhi - p.window);
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[nt][e] * p.scale_log2;
                if (edge) {
                    int key = kbase + nt * 8 + (lane % 4) * 2 + (e & 1);
                    int qp = e < 2 ? qp0 : qp1;
                    if (key > qp || key >= kv_len || (p.window > 0 && key <= qp - p.window))
                        v = -INFINITY;
                }
                s[nt][e] = v;
            }
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        /* a row with no visible key yet keeps max -inf: subtract 0 instead (exp2(-inf) = 0) */
        const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
        const float a0 = exp2f(m0 - mu0), a1 = exp2f(m1 - mu1);
        m0 = mn0;
        m1 = mn1;
        float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            s[nt][0] = exp2f(s[nt][0] - mu0);
            s[nt][1] = exp2f(s[nt][1] - mu0);
            s[nt][2] = exp2f(s[nt][2] - mu1);
            s[nt][3] = exp2f(s[nt][3] - mu1);
            rs0 += s[nt][0] + s[nt][1];
            rs1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * a0 + rs0;
        l1 = l1 * a1 + rs1;
#pragma unroll
        for (int i = 0; i < DT; i++) {
            o[i][0] *= a0;
            o[i][1] *= a0;
            o[i][2] *= a1;
            o[i][3] *= a1;
        }
#pragma unroll
        for (int j = 0; j < FA_BC / 16; j++) {
            unsigned pa[4] = {gpu_pack_h16(s[2 * j][0], s[2 * j][1]),
                              gpu_pack_h16(s[2 * j][2], s[2 * j][3]),
                              gpu_pack_h16(s[2 * j + 1][0], s[2 * j + 1][1]),
                              gpu_pack_h16(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
            for (int dn = 0; dn < DT; dn += 2) {
                unsigned b[4];
                gpu_ldmatrix_x4_trans(b, cV + (j * 16 + (jm % 2) * 8 + li) * ROW + (dn + jm / 2) * 8);
                gpu_mma_h16(o[dn], pa, b[0], b[1]);
                gpu_mma_h16(o[dn + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
        tile = next;
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const int r0 = q0 + warp * 16 + lane / 4, r1 = r0 + 8;
#pragma unroll
    for (int dn = 0; dn < DT; dn++) {
        int col = dn * 8 + (lane % 4) * 2;
        if (col >= p.hd) continue;
        if (r0 < p.T)
            *(h16x2 *)(p.out + (size_t)r0 * p.qd + h * p.hd + col) =
                h16x2_from(o[dn][0] * inv0, o[dn][1] * inv0);
        if (r1 < p.T)
            *(h16x2 *)(p.out + (size_t)r1 * p.qd + h * p.hd + col) =
                h16x2_from(o[dn][2] * inv1, o[dn][3] * inv1);
    }
}

template <int HDP, int WARPS, bool SPARSE>
static int launch(cudaStream_t s, const fa_params &p, int n_heads)
{
    typedef fa_shape<HDP, WARPS> S;
    GPU_CHECK(cudaFuncSetAttribute(k_flash_prefill<HDP, WARPS, SPARSE>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::SMEM));
    dim3 grid(n_heads, (p.T + S::BR - 1) / S::BR);
    k_flash_prefill<HDP, WARPS, SPARSE><<<grid, WARPS * 32, S::SMEM, s>>>(p);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

template <bool SPARSE> static int dispatch(cudaStream_t s, const gpu_dims *d, const fa_params &p, int warps)
{
    if (warps == 8 && d->hdp == 128) return launch<128, 8, SPARSE>(s, p, d->n_heads);
    switch (d->hdp) {
    case 16: return launch<16, 4, SPARSE>(s, p, d->n_heads);
    case 32: return launch<32, 4, SPARSE>(s, p, d->n_heads);
    case 64: return launch<64, 4, SPARSE>(s, p, d->n_heads);
    case 128: return launch<128, 4, SPARSE>(s, p, d->n_heads);
    }
    return ACCEL_ERR_UNSUPPORTED;
}

int gpu_attn_prefill_ex(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                        const h16 *k, const h16 *v, size_t k_tok, size_t k_head, int interleave,
                        const gpu_block_list *bl, h16 *out, int warps, const gpu_kv_map *map)
{
    if (T <= 0) return ACCEL_OK;
    if ((T + 63) / 64 > 65535) return ACCEL_ERR_INVALID; /* grid.y bound */
    if (bl && (pos0 % FA_BLOCK || !bl->row_ptr || !bl->col ||
               bl->nb < (pos0 + T + FA_BLOCK - 1) / FA_BLOCK))
        return ACCEL_ERR_INVALID;
    if (k_tok > (1u << 24)) return ACCEL_ERR_INVALID;
    fa_params p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.out = out;
    p.k_tok = (unsigned)k_tok;
    p.k_head = k_head;
    p.T = T;
    p.pos0 = pos0;
    p.hd = d->hd;
    p.qd = d->qd;
    p.group = d->n_heads / d->n_kv;
    p.n_kv = d->n_kv;
    p.interleave = interleave;
    p.window = d->window;
    p.scale_log2 = (float)(1.4426950408889634 / sqrt((double)d->hd));
    p.row_ptr = bl ? bl->row_ptr : nullptr;
    p.col = bl ? bl->col : nullptr;
    p.nb = bl ? bl->nb : 0;
    p.map = map ? *map : gpu_kv_map{};
    return bl ? dispatch<true>(s, d, p, warps) : dispatch<false>(s, d, p, warps);
}

int gpu_attn_prefill(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                     const h16 *k, const h16 *v, int cap, h16 *out, int warps,
                     const gpu_kv_map *map)
{
    return gpu_attn_prefill_ex(s, d, T, pos0, q, k, v, (size_t)d->hd, (size_t)cap * d->hd, 0,
                               nullptr, out, warps, map);
}
