// gpu/gpu_xattn.cu — XAttention's antidiagonal block estimate on the tensor cores (interface and
// contract: gpu/gpu_xattn.h; the reference it must match: cpu/xattn.c).
//
// One kernel, grid (query tiles of a launch, heads). A CTA owns XT = 128 reshaped query rows
// i (whole query blocks: B / S rows each) and walks the reshaped keys j in tiles of 128 up to its
// last row, each tile a GEMM over the reduction S * d in chunks of 64 (mma.sync m16n8k16, h16 in,
// fp32 out; a 3-stage cp.async ring that runs on across tile boundaries):
//   Q_r[i][t * d + e] = Q[i S + S - 1 - t][e]   (reversed within the stride group)
//   K_r[j][t * d + e] = K[j S + t][e]           (through the paged cache's block table)
// positions past n read as zeros (the official zero padding). Each finished tile goes to shared
// memory; two threads per row then take its logits (x log2(e) / sqrt(d) / S; j > i and keys
// holding no real position masked), move the row's running max, rescale its running sum and
// write, per key block of the tile, the sum of exp2(x - running max) to P[row][J], and the
// running max to Mt[row][tile]. After the last tile the row's final max m and sum l are known,
// and the CTA folds its rows into the block masses:
//   A[I][J] = sum over rows i of block I of P[i][J] * exp2(Mt[i][tile(J)] - m_i) / l_i
// (the softmax over keys summed over the (B/S) x (B/S) tile, in fp32). P is (tiles of a launch,
// heads, 128 rows, nb) floats: the launches cover the query tiles in groups so it stays bounded
// (XATTN_P_BYTES); nothing n x n, nor n/S x n/S, is ever stored. This mma.sync kernel runs where
// the Hopper one (gpu/gpu_xattn_wg.cu: wgmma, 256-key tiles, the softmax in registers) does not:
// other GPUs, and B / S < 8.
//
// Block sizes: the index takes 16/32/64/128 (tests, `tandem sparse-index --device cuda`), but
// the engine's sparse prefill takes XAttention's lists for block 128 only (gpu/accel.c; other
// sizes run dense). Its Hopper attention kernel (gpu/attn_prefill_ws.cu) computes 128 query rows
// x 128-key tiles, one CSR row and one CSR entry each (and 128 is the paged cache's block): a
// 16/32/64 selection would have to be coarsened to 128, computing keys the method did not select
// (not the CPU's result). The mma.sync kernel (gpu/attn_prefill.cu, 4 warps) has 64 x 64 tiles
// and could take block 64 with its CSR block made a parameter, at about half the Hopper kernel's
// rate (266 vs ~560 TFLOP/s on the H200); blocks 16 and 32 are below either kernel's tile.
extern "C" { // sparse/sparse.h is a C header without guards of its own
#include "sparse/sparse.h"
}
#include "gpu/gpu_xattn_fp8.h"
#include "gpu/gpu_xattn_impl.cuh"
#include "gpu/mma.cuh"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define XK 64     // reduction chunk
#define XLD 72    // shared row stride of a chunk (halves): ldmatrix rows on distinct banks
#define XST 3     // ring stages
#define SLD 129   // shared row stride of the logit tile (floats; odd: two-way conflicts at most)
#define XATTN_P_BYTES ((size_t)768 << 20) // P and Mt of a launch
#define KV_BLOCK 128 // the paged cache's block (gpu/engine.cuh), as gpu/gpu_flex_index.cu

static constexpr size_t smem_bytes()
{
    return (size_t)2 * XST * XT * XLD * sizeof(h16) + (size_t)XT * SLD * sizeof(float) +
           2 * XT * sizeof(float);
}

static __device__ __forceinline__ long long key_row(const int *tbl, long long bstride, long long j)
{
    return tbl ? (long long)tbl[j / KV_BLOCK] * bstride + j % KV_BLOCK : j;
}

__global__ void __launch_bounds__(256, 1) xattn_score_kernel(xargs a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    h16 *sA = (h16 *)smem;
    h16 *sB = sA + XST * XT * XLD;
    float *Ss = (float *)(sB + XST * XT * XLD);
    float *mfin = Ss + XT * SLD, *linv = mfin + XT;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // grid (heads, tiles): the heaviest tiles of every head first (longest first), and the heads
    // of a GQA group, which read the same keys, side by side
    const int tl = a.ntl - 1 - (int)blockIdx.y;
    const int h = blockIdx.x;
    const int g = a.interleave ? h % a.Hk : h / (a.H / a.Hk);
    const int ibase = a.i0 + (a.tile0 + tl) * XT;
    const int ilast = min(ibase + XT, a.nrs) - 1;
    const int D = a.D, S = a.S, n = a.n;
    const int KC = (S * D + XK - 1) / XK;
    const int steps = (ilast / XT + 1) * KC;
    const h16 *qh = a.q + (size_t)h * D;
    const h16 *kg = a.k + (size_t)g * a.k_head;

    // The loader: thread tid copies 16 bytes (8 elements, piece pc) of rows r0 + 32 it of both
    // tiles. Per row, what does not change from step to step is kept: Q_r row i's last position
    // (i S + S - 1; column group t reads position i S + S - 1 - t) and pointer, K_r row j's
    // first position and cache row (its S positions share one 128-key block of the table: S
    // divides the block, which divides 128), refreshed once per key tile.
    const int pc = tid & 7, r0 = tid >> 3;
    const h16 *baseA[4];
    int posA[4], posB[4];
    bool okA[4];
    long long rowB[4];
#pragma unroll
    for (int it = 0; it < 4; it++) {
        const int i = ibase + r0 + 32 * it;
        posA[it] = i * S + S - 1;
        okA[it] = i < a.nrs;
        baseA[it] = okA[it] ? qh + (long long)(posA[it] - a.q_pos0) * (long long)a.q_tok : a.q;
        posB[it] = 0;
        rowB[it] = 0;
    }
    int ktB = -1;
    auto load = [&](int st, int buf) {
        const int kt = st / KC, kc = st - kt * KC;
        if (kt != ktB) {
            ktB = kt;
#pragma unroll
            for (int it = 0; it < 4; it++) {
                posB[it] = (kt * XT + r0 + 32 * it) * S;
                rowB[it] = posB[it] < n ? key_row(a.tbl, a.bstride, posB[it]) : 0;
            }
        }
        const int kk = kc * XK + pc * 8, t = kk / D, e = kk - t * D;
        h16 *dA = sA + buf * XT * XLD + pc * 8, *dB = sB + buf * XT * XLD + pc * 8;
#pragma unroll
        for (int it = 0; it < 4; it++) {
            const int r = r0 + 32 * it;
            const bool va = t < S && okA[it] && posA[it] - t < n;
            gpu_cp_async16(dA + r * XLD, va ? baseA[it] - (long long)t * (long long)a.q_tok + e : a.q,
                           va);
            const bool vb = t < S && posB[it] + t < n;
            gpu_cp_async16(dB + r * XLD, vb ? kg + (rowB[it] + t) * (long long)a.k_tok + e : a.k, vb);
        }
    };

    const int wm = warp >> 1, wn = warp & 1; // warp tile: rows 32 wm .., cols 64 wn ..
    const int jm = lane / 8, li = lane % 8;
    float acc[2][8][4];
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 8; y++)
            for (int z = 0; z < 4; z++) acc[x][y][z] = 0.f;

    // the softmax side: two threads per row, 64 columns each
    const int row = tid >> 1, half = tid & 1;
    const int i_row = ibase + row;
    const bool row_ok = i_row < a.nrs;
    const size_t prow = ((size_t)h * a.ntl + tl) * XT + row;
    float m_run = -INFINITY, l_run = 0.f;

    for (int s = 0; s < XST - 1; s++) {
        if (s < steps) load(s, s);
        gpu_cp_async_commit();
    }
    for (int st = 0; st < steps; st++) {
        gpu_cp_async_wait<XST - 2>();
        __syncthreads();
        if (st + XST - 1 < steps) load(st + XST - 1, (st + XST - 1) % XST);
        gpu_cp_async_commit();
        const h16 *cA = sA + (st % XST) * XT * XLD, *cB = sB + (st % XST) * XT * XLD;
#pragma unroll
        for (int kk = 0; kk < XK / 16; kk++) {
            unsigned af[2][4];
            for (int mt = 0; mt < 2; mt++)
                gpu_ldmatrix_x4(af[mt], cA + (wm * 32 + mt * 16 + li + (jm % 2) * 8) * XLD +
                                            kk * 16 + (jm / 2) * 8);
#pragma unroll
            for (int nt = 0; nt < 8; nt += 2) {
                unsigned b[4];
                gpu_ldmatrix_x4(b, cB + (wn * 64 + (nt + jm / 2) * 8 + li) * XLD + kk * 16 +
                                       (jm % 2) * 8);
                for (int mt = 0; mt < 2; mt++) {
                    gpu_mma_h16(acc[mt][nt], af[mt], b[0], b[1]);
                    gpu_mma_h16(acc[mt][nt + 1], af[mt], b[2], b[3]);
                }
            }
        }
        if (st % KC != KC - 1) continue;

        // ---- a key tile is complete: logits to shared memory
        const int kt = st / KC, j0 = kt * XT;
        for (int mt = 0; mt < 2; mt++)
            for (int nt = 0; nt < 8; nt++) {
                const int r = wm * 32 + mt * 16 + lane / 4, c = wn * 64 + nt * 8 + 2 * (lane % 4);
                Ss[r * SLD + c] = acc[mt][nt][0];
                Ss[r * SLD + c + 1] = acc[mt][nt][1];
                Ss[(r + 8) * SLD + c] = acc[mt][nt][2];
                Ss[(r + 8) * SLD + c + 1] = acc[mt][nt][3];
                acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
            }
        __syncthreads();
        const float *sr = Ss + row * SLD + half * 64;
        const int jh = j0 + half * 64;
        float tmax = -INFINITY;
        for (int c = 0; c < 64; c++) {
            const int j = jh + c;
            if (row_ok && j <= i_row && (long long)j * S < n) tmax = fmaxf(tmax, sr[c] * a.scale_log2);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        const float mnew = fmaxf(m_run, tmax);
        const float mref = mnew == -INFINITY ? 0.f : mnew;
        const int rpb = a.rpb;
        float tsum = 0.f, bsum = 0.f;
        for (int c = 0; c < 64; c++) {
            const int j = jh + c;
            float e = 0.f;
            if (row_ok && j <= i_row && (long long)j * S < n) e = exp2f(sr[c] * a.scale_log2 - mref);
            bsum += e;
            if (rpb <= 64 && (c + 1) % rpb == 0) {
                const int J = (jh + c) / rpb;
                if (row_ok && (long long)J * rpb <= i_row) a.P[prow * a.nb + J] = bsum;
                tsum += bsum;
                bsum = 0.f;
            }
        }
        if (rpb > 64) { // one block across both halves (B / S = 128)
            const float other = __shfl_xor_sync(0xffffffffu, bsum, 1);
            const float both = half ? other + bsum : bsum + other;
            if (half == 0 && row_ok) a.P[prow * a.nb + j0 / rpb] = both;
            tsum = both;
        } else {
            const float other = __shfl_xor_sync(0xffffffffu, tsum, 1);
            tsum = half ? other + tsum : tsum + other;
        }
        if (row_ok && tmax > -INFINITY) {
            l_run = (m_run == -INFINITY ? 0.f : l_run * exp2f(m_run - mnew)) + tsum;
            m_run = mnew;
        }
        if (half == 0 && row_ok) a.Mt[prow * a.nkt + kt] = m_run;
    }
    if (half == 0) {
        mfin[row] = row_ok ? m_run : 0.f;
        linv[row] = row_ok ? 1.f / l_run : 0.f;
    }
    __syncthreads(); // also orders this CTA's P / Mt writes before the reads below

    // ---- fold the rows into the block masses of the CTA's query blocks
    const int rpb = a.rpb, tpb = XT / rpb > 0 ? XT / rpb : 1;
    const size_t p0 = ((size_t)h * a.ntl + tl) * XT;
    for (int qb = 0; qb < tpb; qb++) {
        const int I = ibase / rpb + qb;
        if ((long long)I * rpb >= a.nrs) break;
        float *dst = a.A + ((size_t)h * (a.nb - a.q0) + (I - a.q0)) * a.nb;
        for (int J = tid; J <= I; J += 256) {
            const int kt = (int)((long long)J * rpb / XT);
            float s = 0.f;
            for (int r = qb * rpb; r < (qb + 1) * rpb; r++) {
                if (ibase + r >= a.nrs) break;
                s += a.P[(p0 + r) * a.nb + J] * exp2f(a.Mt[(p0 + r) * a.nkt + kt] - mfin[r]) *
                     linv[r];
            }
            dst[J] = s;
        }
    }
}

// ---------------------------------------------------------------- workspace

static int ws_shape_ok(int n, int H, int Hk, int d, int block)
{
    return n >= 1 && n <= GPU_XATTN_MAX_TOKENS && H >= 1 && H <= GPU_FLEX_MAX_HEADS && Hk >= 1 &&
           H % Hk == 0 && d >= 8 && d <= 256 && d % 8 == 0 &&
           (block == 16 || block == 32 || block == 64 || block == 128) &&
           (n + block - 1) / block <= GPU_XATTN_MAX_BLOCKS;
}

struct ws_sizes {
    size_t P, Mt, A, keep, counts, row_ptr, col;
    int nb, nkt, tpl;
};

static ws_sizes sizes_of(int n, int H, int block, int estimate)
{
    ws_sizes z;
    z.nb = (n + block - 1) / block;
    z.nkt = (n + XT - 1) / XT; // stride 1: n reshaped keys
    /* one pool for P and Mt, split per call by the stride's key tiles (gpu_xattn_index): at
     * least one tile of the worst case (stride 1), at most XATTN_P_BYTES or what every tile of
     * the worst case takes */
    const size_t per_tile = (size_t)H * XT * (z.nb + z.nkt) * sizeof(float);
    const size_t all = per_tile * (size_t)z.nkt;
    size_t pool = all < XATTN_P_BYTES ? all : XATTN_P_BYTES;
    if (pool < per_tile) pool = per_tile;
    z.tpl = (int)(pool / per_tile);
    z.P = estimate ? pool : 0;
    z.Mt = 0;
    z.A = estimate ? (size_t)H * z.nb * z.nb * sizeof(float) : 0;
    z.keep = (size_t)H * z.nb * ((z.nb + 31) / 32) * sizeof(uint32_t);
    z.counts = (size_t)H * z.nb * sizeof(int);
    z.row_ptr = (size_t)H * (z.nb + 1) * sizeof(int32_t);
    z.col = (size_t)H * z.nb * (z.nb + 1) / 2 * sizeof(int32_t);
    return z;
}

static size_t r256(size_t b)
{
    return (b + 255) / 256 * 256;
}

extern "C" size_t gpu_xattn_ws_bytes(int n, int H, int Hk, int d, int block, int estimate)
{
    if (!ws_shape_ok(n, H, Hk, d, block)) return 0;
    const ws_sizes z = sizes_of(n, H, block, estimate);
    return r256(z.P) + r256(z.Mt) + r256(z.A) + r256(z.keep) + r256(z.counts) + r256(z.row_ptr) +
           r256(z.col);
}

extern "C" void gpu_xattn_ws_free(gpu_xattn_ws *w)
{
    if (!w) return;
    void *ps[] = {w->P, w->Mt, w->A, w->keep, w->counts, w->row_ptr, w->col};
    for (size_t i = 0; !w->borrowed && i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) cudaFree(ps[i]);
    if (w->f8 && !w->f8_borrowed) cudaFree(w->f8);
    free(w);
}

extern "C" int gpu_xattn_ws_new_at(void *mem, int n, int H, int Hk, int d, int block,
                                   int estimate, gpu_xattn_ws **out)
{
    *out = NULL;
    if (!ws_shape_ok(n, H, Hk, d, block)) return GPU_FLEX_ERR_INVALID;
    gpu_xattn_ws *w = (gpu_xattn_ws *)calloc(1, sizeof *w);
    if (!w) return GPU_FLEX_ERR_NOMEM;
    const ws_sizes z = sizes_of(n, H, block, estimate);
    *w = (gpu_xattn_ws){n, H, Hk, d, block, z.nb, z.tpl, z.nkt};
    w->estimate = estimate;
    w->borrowed = mem != NULL;
    cudaError_t e = cudaSuccess;
    void **ps[] = {(void **)&w->P,      (void **)&w->Mt,      (void **)&w->A,  (void **)&w->keep,
                   (void **)&w->counts, (void **)&w->row_ptr, (void **)&w->col};
    const size_t bs[] = {z.P, z.Mt, z.A, z.keep, z.counts, z.row_ptr, z.col};
    unsigned char *at = (unsigned char *)mem; /* carved as gpu_xattn_ws_bytes counts */
    for (int i = 0; i < 7 && e == cudaSuccess; i++) {
        if (at && bs[i]) {
            *ps[i] = at;
            at += r256(bs[i]);
        } else if (!at && (bs[i] || i >= 3)) {
            e = cudaMalloc(ps[i], bs[i] ? bs[i] : 16); /* lists only: no P, Mt, A */
        }
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        gpu_xattn_ws_free(w);
        return e == cudaErrorMemoryAllocation ? GPU_FLEX_ERR_NOMEM : GPU_FLEX_ERR_DEVICE;
    }
    *out = w;
    return 0;
}

extern "C" int gpu_xattn_ws_new(int n, int H, int Hk, int d, int block, int estimate,
                                gpu_xattn_ws **out)
{
    return gpu_xattn_ws_new_at(NULL, n, H, Hk, d, block, estimate, out);
}

extern "C" const int32_t *gpu_xattn_ws_row_ptr(const gpu_xattn_ws *w)
{
    return w->row_ptr;
}
extern "C" const int32_t *gpu_xattn_ws_col(const gpu_xattn_ws *w)
{
    return w->col;
}
extern "C" const float *gpu_xattn_ws_mass(const gpu_xattn_ws *w)
{
    return w->A;
}

// ---------------------------------------------------------------- the estimate

static int sm_count(void)
{
    static int n = 0; /* the first device's: every GPU this plugin drives is the same kind */
    if (!n) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v < 1)
            v = 132;
        n = v;
    }
    return n;
}

extern "C" int gpu_xattn_index(gpu_xattn_ws *w, const gpu_xattn_params *p, const void *q,
                               size_t q_tok, const void *k, size_t k_tok, size_t k_head,
                               const int *tbl, long long bstride, int n, int q_pos0, void *stream)
{
    if (!w || !w->estimate || !p || !q || !k || n < 1 || n > w->cap_n || p->block != w->block || p->stride < 1 ||
        p->stride > p->block || p->block % p->stride || q_pos0 < 0 || q_pos0 % p->block ||
        q_pos0 >= n || !(p->threshold > 0.0 && p->threshold <= 1.0))
        return GPU_FLEX_ERR_INVALID;
    cudaStream_t st = (cudaStream_t)stream;
    const int B = p->block, S = p->stride, nb = (n + B - 1) / B, q0 = q_pos0 / B;
    w->fp8_used = 0;
    if (p->threshold < 1.0) {
        xargs a;
        memset(&a, 0, sizeof a);
        a.q = (const h16 *)q;
        a.k = (const h16 *)k;
        a.q_tok = q_tok;
        a.k_tok = k_tok;
        a.k_head = k_head;
        a.tbl = tbl;
        a.bstride = bstride;
        a.n = n;
        a.q_pos0 = q_pos0;
        a.H = w->H;
        a.Hk = w->Hk;
        a.D = w->d;
        a.S = S;
        a.rpb = B / S;
        a.interleave = p->gqa_interleave;
        a.nrs = (n + S - 1) / S;
        a.i0 = q_pos0 / S;
        a.nb = nb;
        a.q0 = q0;
        const int wgk = gpu_xattn_wg_usable(a.rpb); /* the Hopper kernel (gpu/gpu_xattn_wg.cu) */
        const int ktile = wgk ? XWN : XT;
        a.nkt = (a.nrs + ktile - 1) / ktile; // key tiles of a row at most
        /* P (tiles, H, 128 rows, nb) and Mt (tiles, H, 128 rows, nkt) from the pool, in launches
         * of equal size */
        const size_t per_tile = (size_t)w->H * XT * (nb + a.nkt);
        const size_t pool = (size_t)w->tpl * w->H * XT * (w->nb + w->nkt);
        int tpl = (int)(pool / per_tile);
        a.scale_log2 = (float)(1.4426950408889634 / sqrt((double)w->d) / S);
        a.P = w->P;
        a.A = w->A;
        const size_t smem = smem_bytes();
        GF_CHECK(cudaFuncSetAttribute(xattn_score_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        const int tiles = (a.nrs - a.i0 + XT - 1) / XT;
        if (tpl > tiles) tpl = tiles;
        const int launches = (tiles + tpl - 1) / tpl, per = (tiles + launches - 1) / launches;
        a.Mt = w->P + (size_t)per * w->H * XT * nb;
        /* few query tiles (a chunk after cached tokens: often one): the Hopper estimate splits
         * each tile's keys over several CTAs (gpu/gpu_xattn_ws.cu), so that the GPU is full, when
         * the pool has room for the splits' (max, sum) per row after P and Mt */
        a.nsplit = 1;
        a.kps = a.nkt;
        if (wgk && launches == 1 && p->key_splits != 1) {
            const int full = (a.nrs - 1) / XWN + 1; /* key tiles of the last row */
            const int want = 2 * sm_count() / (w->H * tiles);
            int ns = want < full / 2 ? want : full / 2;
            if (ns >= 2) {
                a.kps = (full + ns - 1) / ns;
                ns = (full + a.kps - 1) / a.kps;
                const size_t used = (size_t)per * w->H * XT * (nb + a.nkt);
                const size_t ml = (size_t)tiles * w->H * ns * XT * 2;
                if (ns >= 2 && used + ml <= pool) {
                    a.nsplit = ns;
                    a.ML = w->P + used;
                } else {
                    a.kps = a.nkt;
                }
            }
        }
        /* the FP8 estimate where asked and usable (gpu/gpu_xattn_fp8.h): its pre-pass first */
        int f8 = wgk && gpu_xattn_fp8_usable(w, a.rpb, a.nsplit);
        if (f8) {
            const int rc = gpu_xattn_fp8_prep(w, a, st);
            if (rc < 0) return rc;
            f8 = rc == 0; /* 1: the caller's buffers are too small for this call: bf16 */
            w->fp8_used = f8;
        }
        /* the launches heaviest first too (the last query tiles have the most keys) */
        for (int t0 = (tiles - 1) / per * per; t0 >= 0; t0 -= per) {
            a.tile0 = t0;
            a.ntl = tiles - t0 < per ? tiles - t0 : per;
            if (wgk) {
                const int rc = f8           ? gpu_xattn_fp8_launch(w, a, st)
                               : a.nsplit > 1 ? gpu_xattn_ws_launch(a, st)
                                              : gpu_xattn_wg_launch(a, st);
                if (rc) return rc;
            } else {
                xattn_score_kernel<<<dim3(w->H, a.ntl), 256, smem, st>>>(a);
                GF_LAUNCHED();
            }
        }
    }
    return gpu_xattn_select(w, p, nb, q0, st);
}

// ---------------------------------------------------------------- host entry

namespace {
struct dmem {
    void *p = nullptr;
    ~dmem()
    {
        if (p) cudaFree(p);
    }
};
} // namespace

static int up_h16(dmem &d, const float *x, size_t n)
{
    std::vector<uint16_t> hb(n ? n : 1);
    for (size_t i = 0; i < n; i++) hb[i] = h16_bits_host(x[i]);
    GF_CHECK(cudaMalloc(&d.p, (n ? n : 1) * sizeof(h16)));
    GF_CHECK(cudaMemcpy(d.p, hb.data(), n * sizeof(h16), cudaMemcpyHostToDevice));
    return 0;
}

static int host_run(const sparse_params *p, int oc, int fp8, const float *q, const float *k,
                    int n, int q_from, int H, int Hk, int D, int64_t **row_ptr, int32_t **col,
                    float **mass, int *used, double *ms)
{
    const int B = sparse_block_size(p), nb = (n + B - 1) / B, q0 = q_from / B;
    dmem dq, dk;
    int rc = up_h16(dq, q, (size_t)(n - q_from) * H * D);
    if (!rc) rc = up_h16(dk, k, (size_t)n * Hk * D);
    if (rc) return rc;
    gpu_xattn_ws *w = NULL;
    rc = gpu_xattn_ws_new(n, H, Hk, D, B, p->mode == SPARSE_MODE_XATTN, &w);
    if (rc) return rc;
    if (fp8 && (rc = gpu_xattn_ws_fp8(w, fp8)) != 0) {
        gpu_xattn_ws_free(w);
        return rc;
    }
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    if (mass && w->A) cudaMemset(w->A, 0, (size_t)H * nb * nb * sizeof(float));
    cudaEventRecord(e0, 0);
    if (p->mode == SPARSE_MODE_XATTN) {
        const gpu_xattn_params xp = {p->xattention_threshold, B, p->xattention_stride, oc, 0};
        rc = gpu_xattn_index(w, &xp, dq.p, (size_t)H * D, dk.p, (size_t)Hk * D, (size_t)D, NULL,
                             0, n, q_from, 0);
    } else {
        int lo, hi;
        sparse_tri_skip(p, q_from, &lo, &hi);
        rc = gpu_trishape_index(w, lo / B, hi / B, n, q_from, 0);
    }
    cudaEventRecord(e1, 0);
    cudaError_t ce = cudaDeviceSynchronize();
    if (!rc && ce != cudaSuccess) {
        fprintf(stderr, "gpu_xattn: %s\n", cudaGetErrorString(ce));
        rc = GPU_FLEX_ERR_DEVICE;
    }
    if (used) *used = w->fp8_used;
    float t = 0;
    if (!rc && ms && cudaEventElapsedTime(&t, e0, e1) == cudaSuccess) *ms = t;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::vector<int32_t> rp((size_t)H * (nb + 1));
    if (!rc && cudaMemcpy(rp.data(), w->row_ptr, rp.size() * 4, cudaMemcpyDeviceToHost))
        rc = GPU_FLEX_ERR_DEVICE;
    if (!rc) {
        const int64_t nnz = rp.back();
        *row_ptr = (int64_t *)malloc(rp.size() * sizeof(int64_t));
        *col = (int32_t *)malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int32_t));
        if (!*row_ptr || !*col) rc = GPU_FLEX_ERR_NOMEM;
        for (size_t i = 0; !rc && i < rp.size(); i++) (*row_ptr)[i] = rp[i];
        if (!rc && nnz && cudaMemcpy(*col, w->col, (size_t)nnz * 4, cudaMemcpyDeviceToHost))
            rc = GPU_FLEX_ERR_DEVICE;
    }
    if (!rc && mass) {
        const size_t m = (size_t)H * (nb - q0) * nb;
        *mass = (float *)malloc(m * sizeof(float));
        if (!*mass) rc = GPU_FLEX_ERR_NOMEM;
        else if (cudaMemcpy(*mass, w->A, m * sizeof(float), cudaMemcpyDeviceToHost))
            rc = GPU_FLEX_ERR_DEVICE;
        for (int h = 0; !rc && h < H; h++) /* right of the diagonal: 0, as the CPU's */
            for (int r = q0; r < nb; r++)
                for (int c = r + 1; c < nb; c++) (*mass)[((size_t)h * (nb - q0) + r - q0) * nb + c] = 0;
    }
    gpu_xattn_ws_free(w);
    return rc;
}

extern "C" int gpu_sparse_index_host(int device, const sparse_params *p, int official_chunk,
                                     const float *q,
                                     const float *k, int n, int q_from, int H, int Hk, int D,
                                     int64_t **row_ptr, int32_t **col, float **mass, double *ms,
                                     char *err, size_t errlen)
{
    return gpu_sparse_index_host_ex(device, p, official_chunk, 0, q, k, n, q_from, H, Hk, D,
                                    row_ptr, col, mass, NULL, ms, err, errlen);
}

extern "C" int gpu_sparse_index_host_ex(int device, const sparse_params *p, int official_chunk,
                                        int fp8, const float *q, const float *k, int n, int q_from,
                                        int H, int Hk, int D, int64_t **row_ptr, int32_t **col,
                                        float **mass, int *used, double *ms, char *err,
                                        size_t errlen)
{
    if (used) *used = 0;
    *row_ptr = NULL;
    *col = NULL;
    if (mass) *mass = NULL;
    if (!p || sparse_params_check(p, err, errlen, NULL)) return GPU_FLEX_ERR_INVALID;
    const int B = sparse_block_size(p);
    if (p->mode == SPARSE_MODE_FLEX) {
        snprintf(err, errlen, "cuda: sparse-index runs xattention and trishape on the GPU");
        return GPU_FLEX_ERR_INVALID;
    }
    if (!ws_shape_ok(n, H, Hk, D, B) || q_from < 0 || q_from >= n || q_from % B) {
        snprintf(err, errlen,
                 "cuda: shape out of the GPU index's range (n <= %d, <= %d blocks, head_dim a "
                 "multiple of 8 <= 256, the chunk on a block boundary)",
                 GPU_XATTN_MAX_TOKENS, GPU_XATTN_MAX_BLOCKS);
        return GPU_FLEX_ERR_INVALID;
    }
    if (cudaSetDevice(device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "cuda: no CUDA device %d", device);
        return GPU_FLEX_ERR_DEVICE;
    }
    int rc = host_run(p, official_chunk, fp8, q, k, n, q_from, H, Hk, D, row_ptr, col,
                      p->mode == SPARSE_MODE_XATTN ? mass : NULL, used, ms);
    if (rc) {
        free(*row_ptr);
        free(*col);
        *row_ptr = NULL;
        *col = NULL;
        if (mass) {
            free(*mass);
            *mass = NULL;
        }
        snprintf(err, errlen, "cuda: the GPU index failed (%d)", rc);
    }
    return rc;
}
