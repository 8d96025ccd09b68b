// gpu/gpu_flex_index.cu — FlexPrefill's get_active_blocks on the GPU (interface: gpu/gpu_flex.h;
// the steps and quirks are those of cpu/flex_index.c, which this must match set for set).
//
// Kernels, in launch order (nothing n x n is ever stored; the largest buffers are the two n-long
// token distributions per head and, for query-aware heads only, the nb x nb block map):
//   lastq<false>   grid (heads, key chunks of 1024): the last 128 query rows against the chunk's
//                  keys, 64 at a time on tensor cores (mma.sync h16 -> fp32, gpu_flex_lastq.cu;
//                  the first WMMA form, lastq_kernel below, stays for A/B runs), corner-causal
//                  mask, per-row running max / sum of exp2 -> a partial (m, l) per (chunk, row)
//   reduce_stats   the partials of every row combined in chunk order -> m, 1 / l
//   lastq<true>    the same tiles again, now normalised: column sums -> vertical[j] (each key
//                  belongs to one chunk: written directly), diagonal sums -> slash[t] (a chunk
//                  completes t in [start + 127, end); the 127 diagonals it shares with the next
//                  chunk go to carry buffers) — FAST-Prefill's stream-and-accumulate
//   slash_fixup    the shared diagonals: own part + previous chunk's part, in that order
//   mean_q, avg_k  the mean last row (/ sqrt d) and the key-block means
//   budget         per (head, vertical|slash): radix coverage cut -> count(cumsum <= gamma),
//                  all 2 H vectors in one spread-out cut (gf_cut_run, gpu/gpu_flex_cut.cu)
//   pool           block sums of both distributions and mean_q . avg_k, a CTA per (block, head)
//   js             softmax of those scores, square-root JS, the budgets ((count + 1) // 128 + 1,
//                  clamp min then max), query-aware reset
//   select         (ids of 128, heads): top-n by rank (value desc, index asc; sink column and diagonal forced): the
//                  first n of torch.topk's order, which is what survives the overwrite with 0
//   avg_q, qa_dot, qa_softmax, cut, qa_ties, qa_emit   query-aware heads only: block-pooled
//                  causal softmax map (a tiled product, then a warp per row), coverage cut at
//                  gamma * nb, kept ids as a bit map (ties by ascending id)
//   csr_count, scan, csr_fill          the CSR rows, causal blocks only, columns ascending
// Every reduction has a fixed order, and the cut's sums are exact integers: the index is the same
// from run to run.
#include "gpu/gpu_flex_lastq.cuh"
#include <mma.h>
#include <stdlib.h>
#include <vector>

using namespace nvcuda;

#define BS 128
#define KCHUNK 1024
#define SUB 64
#define LDS (SUB + 4)
#define MAX_NB (GPU_FLEX_MAX_TOKENS / BS)

struct gpu_flex_ws {
    int cap_n, H, Hk, d;
    int borrowed; /* the buffers lie in the caller's memory (gpu_flex_ws_new_at) */
    int lastq_legacy; /* 1: the WMMA last-q kernels below, 0: gpu_flex_lastq.cu's */
    float2 *partial;
    float *m2, *inv_l, *vert, *slash, *carry_a, *carry_b, *mq, *avg_k, *vblk, *sblk, *pdot, *avg_q,
        *qa_map;
    gpu_flex_head *heads;
    uint8_t *vmask, *smask;
    gf_cut *vs_cuts, *cuts;
    void *cut_scratch;
    uint32_t *qa_keep;
    int *tiecnt, *counts;
    int32_t *row_ptr, *col;
};

#define kv_head gf_kv_head
#define kv_row gf_kv_row
static_assert(BS == GF_LASTQ_BS && KCHUNK == GF_LASTQ_KCHUNK, "gpu_flex_lastq.cu's chunking");

// The last-q kernels the workspaces made from now on run (gpu_flex_lastq.cuh).
static int g_lastq_legacy = 0;
extern "C" void gpu_flex_set_lastq_legacy(int legacy)
{
    g_lastq_legacy = legacy != 0;
}

// ---------------------------------------------------------------- the streamed estimate

template <int D> struct lastq_smem {
    static constexpr int LDQ = D + 8;
    static constexpr size_t q = (size_t)BS * LDQ * 2, k = (size_t)SUB * LDQ * 2,
                            s = (size_t)BS * LDS * 4;
    static constexpr size_t accum = (KCHUNK + BS) * 4 + 4 * SUB * 4;
    static constexpr size_t bytes(bool acc) { return q + k + s + (acc ? accum : 0); }
};

template <int D, bool ACCUM>
__global__ void __launch_bounds__(256)
    lastq_kernel(const h16 *__restrict__ q, const h16 *__restrict__ k, size_t k_tok,
                 size_t k_head, const int *tbl, long long bstride, int n, int H, int Hk,
                 int interleave, float scale_log2,
                 float2 *partial, const float *m2, const float *inv_l, float *vert, float *slash,
                 float *carry_a, float *carry_b)
{
    typedef lastq_smem<D> L;
    constexpr int LDQ = L::LDQ;
    extern __shared__ __align__(128) unsigned char smem[];
    h16 *qs = (h16 *)smem;
    h16 *ks = (h16 *)(smem + L::q);
    float *ss = (float *)(smem + L::q + L::k);
    float *sl = (float *)(smem + L::q + L::k + L::s);
    float *colpart = sl + KCHUNK + BS;

    const int chunk = blockIdx.x, h = blockIdx.y, nch = gridDim.x, tid = threadIdx.x;
    const int g = kv_head(h, H, Hk, interleave);
    const int w = tid >> 5, lane = tid & 31, row = 16 * w + (lane >> 1), half = lane & 1;
    const int t_row = n - BS + row; // the query position of this thread's row
    const int c0 = chunk * KCHUNK;

    for (int i = tid; i < BS * D / 8; i += 256) {
        const int r = i / (D / 8), c = i % (D / 8);
        *(uint4 *)(qs + r * LDQ + 8 * c) =
            *(const uint4 *)(q + ((size_t)(n - BS + r) * H + h) * D + 8 * c);
    }
    if (ACCUM)
        for (int i = tid; i < KCHUNK + BS; i += 256) sl[i] = 0;
    float m = -INFINITY, l = 0, mrow = 0, il = 0;
    if (ACCUM) {
        mrow = m2[h * BS + row];
        il = inv_l[h * BS + row];
    }

    for (int sub = 0; sub < KCHUNK / SUB; sub++) {
        const int j0 = c0 + sub * SUB;
        if (j0 >= n) break;
        __syncthreads(); // the previous sub-tile is done with ks / ss
        for (int i = tid; i < SUB * D / 8; i += 256) {
            const int r = i / (D / 8), c = i % (D / 8), j = j0 + r;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (j < n)
                v = *(const uint4 *)(k + (size_t)kv_row(tbl, bstride, j) * k_tok +
                                     (size_t)g * k_head + 8 * c);
            *(uint4 *)(ks + r * LDQ + 8 * c) = v;
        }
        __syncthreads();
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[SUB / 16];
            for (int f = 0; f < SUB / 16; f++) wmma::fill_fragment(acc[f], 0.0f);
            for (int kk = 0; kk < D / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, h16, wmma::row_major> a;
                wmma::load_matrix_sync(a, qs + 16 * w * LDQ + 16 * kk, LDQ);
                for (int f = 0; f < SUB / 16; f++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, h16, wmma::col_major> b;
                    wmma::load_matrix_sync(b, ks + 16 * f * LDQ + 16 * kk, LDQ);
                    wmma::mma_sync(acc[f], a, b, acc[f]);
                }
            }
            for (int f = 0; f < SUB / 16; f++)
                wmma::store_matrix_sync(ss + 16 * w * LDS + 16 * f, acc[f], LDS,
                                        wmma::mem_row_major);
        }
        __syncwarp();
        float *srow = ss + row * LDS + 32 * half;
        if (!ACCUM) {
            float mx = -INFINITY;
            for (int c = 0; c < 32; c++) {
                const int j = j0 + 32 * half + c;
                if (j <= t_row) mx = fmaxf(mx, srow[c] * scale_log2);
            }
            if (mx > -INFINITY) {
                if (mx > m) {
                    l *= exp2f(m - mx);
                    m = mx;
                }
                for (int c = 0; c < 32; c++) {
                    const int j = j0 + 32 * half + c;
                    if (j <= t_row) l += exp2f(srow[c] * scale_log2 - m);
                }
            }
        } else {
            for (int c = 0; c < 32; c++) {
                const int j = j0 + 32 * half + c;
                srow[c] = j <= t_row ? exp2f(srow[c] * scale_log2 - mrow) * il : 0.0f;
            }
            __syncthreads();
            // vertical: column sums, 4 partial sums of 32 rows each, combined in order
            {
                const int col = tid & (SUB - 1), part = tid >> 6;
                float s = 0;
                for (int i = 32 * part; i < 32 * part + 32; i++) s += ss[i * LDS + col];
                colpart[part * SUB + col] = s;
            }
            // slash: diagonal tt = col - i + 127 of this tile, rows ascending
            if (tid < BS + SUB - 1) {
                const int tt = tid;
                const int ilo = BS - 1 - tt > 0 ? BS - 1 - tt : 0;
                const int ihi = BS - 1 - tt + SUB - 1 < BS - 1 ? BS - 1 - tt + SUB - 1 : BS - 1;
                float s = 0;
                for (int i = ilo; i <= ihi; i++) s += ss[i * LDS + (tt + i - (BS - 1))];
                sl[sub * SUB + tt] += s;
            }
            __syncthreads();
            if (tid < SUB) {
                const float v = ((colpart[tid] + colpart[SUB + tid]) + colpart[2 * SUB + tid]) +
                                colpart[3 * SUB + tid];
                const int j = j0 + tid;
                if (j < n) vert[(size_t)h * n + j] = v * (1.0f / BS);
            }
        }
    }

    if (!ACCUM) {
        // the two halves of each row, half 0 first
        const float m1 = __shfl_xor_sync(0xffffffffu, m, 1), l1 = __shfl_xor_sync(0xffffffffu, l, 1);
        if (half == 0) {
            const float mm = fmaxf(m, m1);
            float ll = 0;
            if (mm > -INFINITY) ll = l * exp2f(m - mm) + l1 * exp2f(m1 - mm);
            partial[((size_t)h * nch + chunk) * BS + row] = make_float2(mm, ll);
        }
    } else {
        __syncthreads();
        for (int i = tid; i < KCHUNK + BS - 1; i += 256) {
            if (i < BS - 1) {
                carry_a[((size_t)h * nch + chunk) * BS + i] = sl[i];
            } else if (i < KCHUNK) {
                const int t = c0 + i;
                if (t < n) slash[(size_t)h * n + t] = sl[i] * (1.0f / BS);
            } else {
                carry_b[((size_t)h * nch + chunk) * BS + (i - KCHUNK)] = sl[i];
            }
        }
    }
}

__global__ void reduce_stats_kernel(const float2 *partial, int nch, float *m2, float *inv_l)
{
    const int h = blockIdx.x, i = threadIdx.x;
    float m = -INFINITY, l = 0;
    for (int c = 0; c < nch; c++) {
        const float2 p = partial[((size_t)h * nch + c) * BS + i];
        if (p.x == -INFINITY) continue;
        const float nm = fmaxf(m, p.x);
        l = l * exp2f(m - nm) + p.y * exp2f(p.x - nm);
        m = nm;
    }
    m2[h * BS + i] = m;
    inv_l[h * BS + i] = 1.0f / l;
}

__global__ void slash_fixup_kernel(float *slash, const float *carry_a, const float *carry_b, int n)
{
    const int c = blockIdx.x, h = blockIdx.y, nch = gridDim.x, i = threadIdx.x;
    if (i >= BS - 1) return;
    const int t = c * KCHUNK + i;
    if (t >= n) return;
    float s = carry_a[((size_t)h * nch + c) * BS + i];
    if (c > 0) s += carry_b[((size_t)h * nch + c - 1) * BS + i];
    slash[(size_t)h * n + t] = s * (1.0f / BS);
}

__global__ void mean_q_kernel(const h16 *q, int n, int H, int D, float *mq)
{
    const int h = blockIdx.x, e = threadIdx.x;
    float s = 0;
    for (int i = 0; i < BS; i++) s += h16_to(q[((size_t)(n - BS + i) * H + h) * D + e]);
    mq[h * D + e] = s / BS / sqrtf((float)D);
}

__global__ void avg_k_kernel(const h16 *k, size_t k_tok, size_t k_head, const int *tbl,
                             long long bstride, int n, int D, float *avg_k)
{
    const int b = blockIdx.x, g = blockIdx.y, e = threadIdx.x, nb = gridDim.x;
    const int j1 = (b + 1) * BS < n ? (b + 1) * BS : n;
    float s = 0;
    for (int j = b * BS; j < j1; j++)
        s += h16_to(k[(size_t)kv_row(tbl, bstride, j) * k_tok + (size_t)g * k_head + e]);
    avg_k[((size_t)g * nb + b) * D + e] = s / (float)(j1 - b * BS);
}

// ---------------------------------------------------------------- budgets and decisions

// Block sums of both distributions (double, a fixed tree over the block's 128 tokens; the CPU
// sums in index order: the float results agree but at double rounding) and the block's score
// mean_q . avg_k[b] (a fixed float tree over e): one CTA of 128 threads per (block, head).
__global__ void __launch_bounds__(BS)
    pool_kernel(const float *vert, const float *slash, const float *mq, const float *avg_k, int n,
                int nb, int H, int Hk, int D, int interleave, float *vblk, float *sblk, float *pdot)
{
    __shared__ double dred[32];
    __shared__ float fred[32];
    const int b = blockIdx.x, h = blockIdx.y, g = kv_head(h, H, Hk, interleave), j = b * BS + threadIdx.x;
    const double sv = gf_block_sum<double>(j < n ? (double)vert[(size_t)h * n + j] : 0.0, dred);
    const double ss = gf_block_sum<double>(j < n ? (double)slash[(size_t)h * n + j] : 0.0, dred);
    const int e = threadIdx.x;
    const float dot = gf_block_sum<float>(
        e < D ? mq[h * D + e] * avg_k[((size_t)g * nb + b) * D + e] : 0.0f, fred);
    if (threadIdx.x == 0) {
        vblk[(size_t)h * nb + b] = (float)sv;
        sblk[(size_t)h * nb + b] = (float)ss;
        pdot[(size_t)h * nb + b] = dot;
    }
}

// Per head: softmax of the block scores, the square-root JS distance against the pooled vertical
// distribution, the budgets and the query-aware decision.
__global__ void __launch_bounds__(1024)
    js_kernel(const float *pdot, const float *vblk, const gf_cut *vs_cuts, int nb, float tau,
              int min_b, int max_b, gpu_flex_head *heads)
{
    extern __shared__ float p[]; // nb
    __shared__ double dred[32];
    __shared__ float fred[32];
    const int h = blockIdx.x;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) p[b] = pdot[(size_t)h * nb + b];
    __syncthreads();
    float mx = -INFINITY;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) mx = fmaxf(mx, p[b]);
    mx = gf_block_max(mx, fred);
    double sum = 0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        p[b] = expf(p[b] - mx);
        sum += p[b];
    }
    sum = gf_block_sum<double>(sum, dred);
    const float inv = (float)(1.0 / sum);
    double ja = 0, jb = 0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        const double pv = p[b] * inv, qv = vblk[(size_t)h * nb + b], m = (pv + qv) / 2;
        ja += pv * log(pv / m);
        jb += qv * log(qv / m);
    }
    ja = gf_block_sum<double>(ja, dred);
    jb = gf_block_sum<double>(jb, dred);
    if (threadIdx.x == 0) {
        const float js = (float)sqrt(0.5 * ja + 0.5 * jb);
        long long nv = (long long)(vs_cuts[h * 2].count + 1) / 128 + 1; // QUIRK kept: 128, not bs
        long long ns = (long long)(vs_cuts[h * 2 + 1].count + 1) / 128 + 1;
        nv = nv < min_b ? min_b : nv;
        nv = nv > max_b ? max_b : nv;
        ns = ns < min_b ? min_b : ns;
        ns = ns > max_b ? max_b : ns;
        const int qa = js < tau; // NaN: false
        if (qa) nv = ns = min_b;
        heads[h].n_vertical = (int)nv;
        heads[h].n_slash = (int)ns;
        heads[h].query_aware = qa;
        heads[h].js = js;
    }
}

// top-n by rank (value desc, index asc), the ranks of SEL_PER_CTA ids per CTA: grid (ids, heads),
// each CTA with both of its head's vectors in shared memory.
#define SEL_PER_CTA 128
__global__ void __launch_bounds__(SEL_PER_CTA)
    select_kernel(const float *vblk, const float *sblk, int nb, const gpu_flex_head *heads,
                  uint8_t *vmask, uint8_t *smask)
{
    extern __shared__ float vs[]; // 2 nb
    float *v = vs, *s = vs + nb;
    const int h = blockIdx.y;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) {
        v[i] = i == 0 ? INFINITY : vblk[(size_t)h * nb + i];
        s[i] = i == nb - 1 ? INFINITY : sblk[(size_t)h * nb + i];
    }
    __syncthreads();
    const int nv = heads[h].n_vertical, ns = heads[h].n_slash;
    const int i = blockIdx.x * SEL_PER_CTA + threadIdx.x;
    if (i >= nb) return;
    int rv = 0, rs = 0;
    const float vi = v[i], si = s[i];
    for (int j = 0; j < nb; j++) {
        rv += v[j] > vi || (v[j] == vi && j < i);
        rs += s[j] > si || (s[j] == si && j < i);
    }
    vmask[(size_t)h * nb + i] = rv < nv;
    smask[(size_t)h * nb + (nb - 1 - i)] = rs < ns; // slash index i is offset nb - 1 - i
}

// ---------------------------------------------------------------- query-aware heads

__global__ void avg_q_kernel(const h16 *q, int n, int nb, int q0, int H, int D,
                             const gpu_flex_head *heads, float *avg_q)
{
    const int r = q0 + blockIdx.x, h = blockIdx.y, e = threadIdx.x;
    if (!heads[h].query_aware) return;
    const int pad = nb * BS - n;
    float s = 0;
    for (int t = r * BS; t < (r + 1) * BS && t < n; t++)
        s += h16_to(q[((size_t)t * H + h) * D + e]);
    float a = s / BS;
    if (r == nb - 1) a = a * (float)BS / (float)(BS - pad);
    avg_q[((size_t)h * nb + r) * D + e] = a / sqrtf((float)D);
}

// The block-pooled scores avg_q . avg_k as a tiled product: a block owns QT x QT of the map
// (tiles wholly above the diagonal are skipped), each thread 4 x 4 entries, both operands staged
// in shared memory 32 dimensions at a time. Every entry is one fma chain over e = 0 .. d - 1 in
// order, the sum the CPU reference's cpu_dot forms. Raw scores (c <= r only) go to qa_map; the
// softmax below turns each row into probabilities in place.
#define QT 64
#define QE 32
__global__ void __launch_bounds__(256)
    qa_dot_kernel(const float *avg_q, const float *avg_k, int nb, int q0, int H, int Hk, int D,
                  int interleave, const gpu_flex_head *heads, float *qa_map)
{
    __shared__ float as[QE][QT + 1], bs_[QE][QT + 1];
    const int h = blockIdx.z, r0 = q0 + blockIdx.y * QT, c0 = blockIdx.x * QT;
    if (!heads[h].query_aware || c0 > r0 + QT - 1) return;
    const int g = kv_head(h, H, Hk, interleave);
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0;
    for (int e0 = 0; e0 < D; e0 += QE) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < QT * QE; idx += blockDim.x) {
            const int rr = idx / QE, e = idx % QE;
            const int r = r0 + rr, c = c0 + rr;
            as[e][rr] = r < nb ? avg_q[((size_t)h * nb + r) * D + e0 + e] : 0.0f;
            bs_[e][rr] = c < nb ? avg_k[((size_t)g * nb + c) * D + e0 + e] : 0.0f;
        }
        __syncthreads();
        for (int e = 0; e < QE; e++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) a[i] = as[e][ty + 16 * i];
            for (int j = 0; j < 4; j++) b[j] = bs_[e][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < 4; i++) {
        const int r = r0 + ty + 16 * i;
        if (r >= nb) continue;
        for (int j = 0; j < 4; j++) {
            const int c = c0 + tx + 16 * j;
            if (c <= r) qa_map[((size_t)h * (nb - q0) + (r - q0)) * nb + c] = acc[i][j];
        }
    }
}

// Causal softmax of each row of the map, a warp per row (entries right of the diagonal -> 0).
__global__ void __launch_bounds__(256)
    qa_softmax_kernel(int nb, int q0, const gpu_flex_head *heads, float *qa_map)
{
    const int h = blockIdx.y, r = q0 + blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (!heads[h].query_aware || r >= nb) return;
    float *row = qa_map + ((size_t)h * (nb - q0) + (r - q0)) * nb;
    float mx = -INFINITY;
    for (int c = lane; c <= r; c += 32) mx = fmaxf(mx, row[c]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0;
    for (int c = lane; c <= r; c += 32) {
        const float e = expf(row[c] - mx);
        row[c] = e;
        sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = (float)(1.0 / sum);
    for (int c = lane; c < nb; c += 32) row[c] = c <= r ? row[c] * inv : 0.0f;
}

// The kept map as bits. Values above the cut are kept; of the values equal to it, the first
// `take` in id order (the order a stable sort leaves them in): qa_ties counts them per block of
// EMIT_PER_BLOCK ids, qa_emit ranks them by the counts of the blocks before plus a block scan.
#define EMIT_PER_BLOCK 8192
__global__ void __launch_bounds__(256)
    qa_ties_kernel(const float *qa_map, int nb, int rows, const gpu_flex_head *heads,
                   const gf_cut *cuts, int *tiecnt)
{
    __shared__ int red[32];
    const int h = blockIdx.y, blk = blockIdx.x, nblk = gridDim.x;
    if (!heads[h].query_aware) return;
    const gf_cut c = cuts[h];
    const long long m = (long long)rows * nb, b0 = (long long)blk * EMIT_PER_BLOCK;
    int t = 0;
    if (!c.all)
        for (long long i = b0 + threadIdx.x; i < b0 + EMIT_PER_BLOCK && i < m; i += blockDim.x)
            t += gf_bits(qa_map[(size_t)h * m + i]) == c.bits;
    t = gf_block_sum<int>(t, red);
    if (threadIdx.x == 0) tiecnt[h * nblk + blk] = t;
}

__global__ void __launch_bounds__(256)
    qa_emit_kernel(const float *qa_map, int nb, int rows, const gpu_flex_head *heads,
                   const gf_cut *cuts, const int *tiecnt, uint32_t *qa_keep)
{
    __shared__ int scan_tmp[32];
    __shared__ long long before_s;
    const int h = blockIdx.y, blk = blockIdx.x, nblk = gridDim.x;
    if (!heads[h].query_aware) return;
    const gf_cut c = cuts[h];
    const long long m = (long long)rows * nb, words = (m + 31) / 32;
    const float *x = qa_map + (size_t)h * m;
    uint32_t *keep = qa_keep + (size_t)h * words;
    if (threadIdx.x == 0) {
        long long b = 0;
        for (int j = 0; j < blk; j++) b += tiecnt[h * nblk + j];
        before_s = b;
    }
    __syncthreads();
    long long ties_before = before_s;
    const long long b0 = (long long)blk * EMIT_PER_BLOCK;
    for (long long base = b0; base < b0 + EMIT_PER_BLOCK && base < m; base += blockDim.x) {
        const long long id = base + threadIdx.x;
        const int valid = id < m;
        const uint32_t u = valid ? gf_bits(x[id]) : 0;
        const int tie = valid && !c.all && u == c.bits;
        int total;
        const int rank = gf_block_exclusive_scan(tie, &total, scan_tmp);
        const int k = valid && (c.all || u > c.bits || (tie && ties_before + rank < (long long)c.take));
        const uint32_t word = __ballot_sync(0xffffffffu, k);
        if ((threadIdx.x & 31) == 0 && id / 32 < words) keep[id / 32] = word;
        ties_before += total;
    }
}

// ---------------------------------------------------------------- CSR

static __device__ __forceinline__ int present(int h, int nb, int q0, int r, int c,
                                              const uint8_t *vmask, const uint8_t *smask,
                                              const gpu_flex_head *heads, const uint32_t *qa_keep)
{
    if (c == 0 || vmask[(size_t)h * nb + c] || smask[(size_t)h * nb + (r - c)]) return 1;
    if (!heads[h].query_aware) return 0;
    const long long words = ((long long)(nb - q0) * nb + 31) / 32;
    const long long id = (long long)(r - q0) * nb + c;
    return (int)(qa_keep[(size_t)h * words + id / 32] >> (id & 31) & 1u);
}

__global__ void csr_count_kernel(int nb, int q0, const uint8_t *vmask, const uint8_t *smask,
                                 const gpu_flex_head *heads, const uint32_t *qa_keep, int *counts)
{
    __shared__ int red[32];
    const int r = blockIdx.x, h = blockIdx.y;
    int cnt = 0;
    for (int c = threadIdx.x; r >= q0 && c <= r; c += blockDim.x)
        cnt += present(h, nb, q0, r, c, vmask, smask, heads, qa_keep);
    cnt = gf_block_sum<int>(cnt, red);
    if (threadIdx.x == 0) counts[h * nb + r] = cnt;
}

// The per-row counts (H, nb) -> row_ptr (H, nb + 1), absolute into col (one block, in order).
__global__ void __launch_bounds__(1024) csr_scan_kernel(const int *counts, int H, int nb,
                                                        int32_t *row_ptr)
{
    __shared__ int tmp[32];
    const int total = H * nb;
    int running = 0;
    for (int base = 0; base < total; base += blockDim.x) {
        const int L = base + threadIdx.x;
        const int v = L < total ? counts[L] : 0;
        int sum;
        const int ex = gf_block_exclusive_scan(v, &sum, tmp);
        if (L < total) {
            const int h = L / nb, r = L % nb;
            row_ptr[h * (nb + 1) + r] = running + ex;
            if (r == nb - 1) row_ptr[h * (nb + 1) + nb] = running + ex + v;
        }
        running += sum;
    }
}

int gf_csr_scan(const int *counts, int H, int nb, int32_t *row_ptr, cudaStream_t st)
{
    csr_scan_kernel<<<1, 1024, 0, st>>>(counts, H, nb, row_ptr);
    GF_LAUNCHED();
    return 0;
}

__global__ void csr_fill_kernel(int nb, int q0, const uint8_t *vmask, const uint8_t *smask,
                                const gpu_flex_head *heads, const uint32_t *qa_keep,
                                const int32_t *row_ptr, int32_t *col)
{
    __shared__ int tmp[32];
    const int r = q0 + blockIdx.x, h = blockIdx.y;
    const int base = row_ptr[h * (nb + 1) + r];
    int running = 0;
    for (int c0 = 0; c0 <= r; c0 += blockDim.x) {
        const int c = c0 + threadIdx.x;
        const int f = c <= r && present(h, nb, q0, r, c, vmask, smask, heads, qa_keep);
        int total;
        const int ex = gf_block_exclusive_scan(f, &total, tmp);
        if (f) col[base + running + ex] = c;
        running += total;
    }
}

// ---------------------------------------------------------------- host side

static int ws_alloc(void **p, size_t bytes)
{
    GF_CHECK(cudaMalloc(p, bytes ? bytes : 16));
    return 0;
}

// The workspace's buffers and their sizes in bytes, in one table for gpu_flex_ws_new and
// gpu_flex_ws_bytes.
#define WS_BUFFERS(X)                                                                             \
    X(partial, sizeof(float2) * H * nch * BS)                                                     \
    X(m2, sizeof(float) * H * BS)                                                                 \
    X(inv_l, sizeof(float) * H * BS)                                                              \
    X(vert, sizeof(float) * H * n)                                                                \
    X(slash, sizeof(float) * H * n)                                                               \
    X(carry_a, sizeof(float) * H * nch * BS)                                                      \
    X(carry_b, sizeof(float) * H * nch * BS)                                                      \
    X(mq, sizeof(float) * H * d)                                                                  \
    X(avg_k, sizeof(float) * Hk * nb * d)                                                         \
    X(vblk, sizeof(float) * H * nb)                                                               \
    X(sblk, sizeof(float) * H * nb)                                                               \
    X(pdot, sizeof(float) * H * nb)                                                               \
    X(avg_q, sizeof(float) * H * nb * d)                                                          \
    X(qa_map, sizeof(float) * H * nb * nb)                                                        \
    X(heads, sizeof(gpu_flex_head) * H)                                                           \
    X(vmask, H * nb)                                                                              \
    X(smask, H * nb)                                                                              \
    X(vs_cuts, sizeof(gf_cut) * H * 2)                                                            \
    X(cuts, sizeof(gf_cut) * H)                                                                   \
    X(cut_scratch, gf_cut_scratch_bytes(2 * (int)H))                                              \
    X(tiecnt, sizeof(int) * H * ((nb * nb + EMIT_PER_BLOCK - 1) / EMIT_PER_BLOCK))                \
    X(qa_keep, sizeof(uint32_t) * H * ((nb * nb + 31) / 32))                                      \
    X(counts, sizeof(int) * H * nb)                                                               \
    X(row_ptr, sizeof(int32_t) * H * (nb + 1))                                                    \
    X(col, sizeof(int32_t) * H * nb * (nb + 1) / 2)

static int ws_shape_ok(int n, int H, int Hk, int d)
{
    return n >= 2 * BS && n <= GPU_FLEX_MAX_TOKENS && H >= 1 && H <= GPU_FLEX_MAX_HEADS &&
           Hk >= 1 && H % Hk == 0 && (d == 64 || d == 128);
}

extern "C" size_t gpu_flex_ws_bytes(int n_, int H_, int Hk_, int d_)
{
    if (!ws_shape_ok(n_, H_, Hk_, d_)) return 0;
    const size_t n = n_, H = H_, Hk = Hk_, d = d_, nb = (n + BS - 1) / BS,
                 nch = (n + KCHUNK - 1) / KCHUNK;
    size_t total = 0;
#define X(name, bytes) total += ((size_t)(bytes) + 255) / 256 * 256;
    WS_BUFFERS(X)
#undef X
    return total;
}

extern "C" int gpu_flex_ws_new_at(void *mem, int n_, int H_, int Hk_, int d_, gpu_flex_ws **out)
{
    *out = NULL;
    if (!ws_shape_ok(n_, H_, Hk_, d_)) return GPU_FLEX_ERR_INVALID;
    gpu_flex_ws *w = (gpu_flex_ws *)calloc(1, sizeof *w);
    if (!w) return GPU_FLEX_ERR_NOMEM;
    w->cap_n = n_;
    w->H = H_;
    w->Hk = Hk_;
    w->d = d_;
    w->borrowed = mem != NULL;
    w->lastq_legacy = g_lastq_legacy;
    const size_t n = n_, H = H_, Hk = Hk_, d = d_, nb = (n + BS - 1) / BS,
                 nch = (n + KCHUNK - 1) / KCHUNK;
    int rc = 0;
    unsigned char *at = (unsigned char *)mem; /* carved as gpu_flex_ws_bytes counts */
#define X(name, bytes)                                                                             \
    if (at) {                                                                                      \
        *(void **)&w->name = at;                                                                   \
        at += ((size_t)(bytes) + 255) / 256 * 256;                                                 \
    } else if (!rc) {                                                                              \
        rc = ws_alloc((void **)&w->name, (size_t)(bytes));                                         \
    }
    WS_BUFFERS(X)
#undef X
    if (rc) {
        gpu_flex_ws_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

extern "C" int gpu_flex_ws_new(int n_, int H_, int Hk_, int d_, gpu_flex_ws **out)
{
    return gpu_flex_ws_new_at(NULL, n_, H_, Hk_, d_, out);
}

extern "C" void gpu_flex_ws_free(gpu_flex_ws *w)
{
    if (!w) return;
    void *ps[] = {w->partial, w->m2,      w->inv_l,       w->vert,   w->slash,  w->carry_a,
                  w->carry_b, w->mq,      w->avg_k,       w->vblk,   w->sblk,   w->avg_q,
                  w->qa_map,  w->heads,   w->vmask,       w->smask,  w->vs_cuts, w->cuts,
                  w->cut_scratch, w->qa_keep, w->tiecnt,  w->counts, w->row_ptr, w->col,
                  w->pdot};
    for (size_t i = 0; !w->borrowed && i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) cudaFree(ps[i]);
    free(w);
}

extern "C" const int32_t *gpu_flex_ws_row_ptr(const gpu_flex_ws *w)
{
    return w->row_ptr;
}
extern "C" const int32_t *gpu_flex_ws_col(const gpu_flex_ws *w)
{
    return w->col;
}
extern "C" const gpu_flex_head *gpu_flex_ws_heads(const gpu_flex_ws *w)
{
    return w->heads;
}
int gpu_flex_ws_lastq_legacy(const gpu_flex_ws *w)
{
    return w->lastq_legacy;
}

template <int D>
static int launch_lastq(gpu_flex_ws *w, const gpu_flex_params *p, const h16 *q, const h16 *k,
                        size_t k_tok, size_t k_head, const int *tbl, long long bstride, int n,
                        cudaStream_t st)
{
    const int nch = (n + KCHUNK - 1) / KCHUNK;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
    const dim3 grid(nch, w->H);
    if (!w->lastq_legacy) {
        gf_lastq_args a = {q, k, k_tok, k_head, tbl, bstride, n, w->H, w->Hk, p->gqa_interleave,
                           scale_log2, w->partial, NULL, NULL, NULL, NULL, NULL, NULL,
                           w->avg_k};
        int rc = gf_lastq_mma(D, 0, &a, st);
        if (rc) return rc;
        reduce_stats_kernel<<<w->H, BS, 0, st>>>(w->partial, nch, w->m2, w->inv_l);
        GF_LAUNCHED();
        a.partial = NULL;
        a.avg_k = NULL;
        a.m2 = w->m2;
        a.inv_l = w->inv_l;
        a.vert = w->vert;
        a.slash = w->slash;
        a.carry_a = w->carry_a;
        a.carry_b = w->carry_b;
        if ((rc = gf_lastq_mma(D, 1, &a, st))) return rc;
        slash_fixup_kernel<<<grid, BS, 0, st>>>(w->slash, w->carry_a, w->carry_b, n);
        GF_LAUNCHED();
        return 0;
    }
    const size_t s0 = lastq_smem<D>::bytes(false), s1 = lastq_smem<D>::bytes(true);
    GF_CHECK(cudaFuncSetAttribute(lastq_kernel<D, false>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s0));
    GF_CHECK(cudaFuncSetAttribute(lastq_kernel<D, true>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    lastq_kernel<D, false><<<grid, 256, s0, st>>>(q, k, k_tok, k_head, tbl, bstride, n, w->H, w->Hk,
                                                  p->gqa_interleave, scale_log2, w->partial, NULL,
                                                  NULL, NULL, NULL, NULL, NULL);
    GF_LAUNCHED();
    reduce_stats_kernel<<<w->H, BS, 0, st>>>(w->partial, nch, w->m2, w->inv_l);
    GF_LAUNCHED();
    lastq_kernel<D, true><<<grid, 256, s1, st>>>(q, k, k_tok, k_head, tbl, bstride, n, w->H, w->Hk,
                                                 p->gqa_interleave, scale_log2, NULL, w->m2,
                                                 w->inv_l, w->vert, w->slash, w->carry_a,
                                                 w->carry_b);
    GF_LAUNCHED();
    slash_fixup_kernel<<<grid, BS, 0, st>>>(w->slash, w->carry_a, w->carry_b, n);
    GF_LAUNCHED();
    return 0;
}

extern "C" int gpu_flex_index(gpu_flex_ws *w, const gpu_flex_params *p, const void *qv,
                              const void *kv, int n, void *stream)
{
    if (!w) return GPU_FLEX_ERR_INVALID;
    return gpu_flex_index_kv(w, p, qv, kv, (size_t)w->Hk * w->d, (size_t)w->d, n, stream);
}

extern "C" int gpu_flex_index_kv(gpu_flex_ws *w, const gpu_flex_params *p, const void *qv,
                                 const void *kv, size_t k_tok, size_t k_head, int n, void *stream)
{
    return gpu_flex_index_kv_paged(w, p, qv, kv, k_tok, k_head, NULL, 0, n, stream);
}

extern "C" int gpu_flex_index_kv_paged(gpu_flex_ws *w, const gpu_flex_params *p, const void *qv,
                                       const void *kv, size_t k_tok, size_t k_head,
                                       const int *tbl, long long bstride, int n, void *stream)
{
    return gpu_flex_index_chunk(w, p, qv, kv, k_tok, k_head, tbl, bstride, n, 0, stream);
}

extern "C" int gpu_flex_index_chunk(gpu_flex_ws *w, const gpu_flex_params *p, const void *qv,
                                    const void *kv, size_t k_tok, size_t k_head, const int *tbl,
                                    long long bstride, int n, int q_pos0, void *stream)
{
    if (!w || !p || !qv || !kv || n < 2 * BS || n > w->cap_n || !(p->gamma > 0 && p->gamma <= 1) ||
        !(p->tau >= 0 && p->tau <= 1) || p->min_blocks < 1 || p->max_blocks < 0 || q_pos0 < 0 ||
        q_pos0 % BS || n - q_pos0 < BS)
        return GPU_FLEX_ERR_INVALID;
    cudaStream_t st = (cudaStream_t)stream;
    const int H = w->H, Hk = w->Hk, D = w->d, nb = (n + BS - 1) / BS, q0 = q_pos0 / BS;
    /* q holds rows q_pos0 .. n - 1: the kernels index it by position (rows q_pos0 on only) */
    const h16 *q = (const h16 *)qv - (ptrdiff_t)q_pos0 * H * D, *k = (const h16 *)kv;
    const int max_b = p->max_blocks > 0 && p->max_blocks < nb ? p->max_blocks : nb;
    int rc = D == 64 ? launch_lastq<64>(w, p, q, k, k_tok, k_head, tbl, bstride, n, st)
                     : launch_lastq<128>(w, p, q, k, k_tok, k_head, tbl, bstride, n, st);
    if (rc) return rc;
    mean_q_kernel<<<H, D, 0, st>>>(q, n, H, D, w->mq);
    GF_LAUNCHED();
    if (w->lastq_legacy) { /* the mma.sync stats pass wrote them */
        avg_k_kernel<<<dim3(nb, Hk), D, 0, st>>>(k, k_tok, k_head, tbl, bstride, n, D, w->avg_k);
        GF_LAUNCHED();
    }
    rc = gf_cut_run(w->vert, w->slash, n, 2 * H, 1, (double)p->gamma, NULL, w->cut_scratch,
                    w->vs_cuts, st);
    if (rc) return rc;
    pool_kernel<<<dim3(nb, H), BS, 0, st>>>(w->vert, w->slash, w->mq, w->avg_k, n, nb, H, Hk, D,
                                             p->gqa_interleave, w->vblk, w->sblk, w->pdot);
    GF_LAUNCHED();
    js_kernel<<<H, 1024, sizeof(float) * nb, st>>>(w->pdot, w->vblk, w->vs_cuts, nb, p->tau,
                                                   p->min_blocks, max_b, w->heads);
    GF_LAUNCHED();
    select_kernel<<<dim3((nb + SEL_PER_CTA - 1) / SEL_PER_CTA, H), SEL_PER_CTA,
                    2 * sizeof(float) * nb, st>>>(w->vblk, w->sblk, nb, w->heads, w->vmask,
                                                  w->smask);
    GF_LAUNCHED();
    /* the query-aware map: the chunk's rows q0 .. nb - 1 only, (H, rows, nb) (as the CPU's) */
    const int rows = nb - q0;
    avg_q_kernel<<<dim3(rows, H), D, 0, st>>>(q, n, nb, q0, H, D, w->heads, w->avg_q);
    GF_LAUNCHED();
    const int qt = (nb + QT - 1) / QT, qr = (rows + QT - 1) / QT;
    qa_dot_kernel<<<dim3(qt, qr, H), 256, 0, st>>>(w->avg_q, w->avg_k, nb, q0, H, Hk, D,
                                                   p->gqa_interleave, w->heads, w->qa_map);
    GF_LAUNCHED();
    qa_softmax_kernel<<<dim3((rows + 7) / 8, H), 256, 0, st>>>(nb, q0, w->heads, w->qa_map);
    GF_LAUNCHED();
    // gamma * num_blocks is a Python float; torch compares it with the float32 cumsum as float32
    // (a chunk's map holds its rows only: gamma x rows, cpu/flex_index.c)
    const float limit = (float)((double)p->gamma * rows);
    rc = gf_cut_run(w->qa_map, NULL, (long long)rows * nb, H, 0, (double)limit, w->heads,
                    w->cut_scratch, w->cuts, st);
    if (rc) return rc;
    const dim3 eg((unsigned)(((long long)rows * nb + EMIT_PER_BLOCK - 1) / EMIT_PER_BLOCK), H);
    qa_ties_kernel<<<eg, 256, 0, st>>>(w->qa_map, nb, rows, w->heads, w->cuts, w->tiecnt);
    GF_LAUNCHED();
    qa_emit_kernel<<<eg, 256, 0, st>>>(w->qa_map, nb, rows, w->heads, w->cuts, w->tiecnt,
                                       w->qa_keep);
    GF_LAUNCHED();
    csr_count_kernel<<<dim3(nb, H), 128, 0, st>>>(nb, q0, w->vmask, w->smask, w->heads, w->qa_keep,
                                                  w->counts);
    GF_LAUNCHED();
    rc = gf_csr_scan(w->counts, H, nb, w->row_ptr, st);
    if (rc) return rc;
    csr_fill_kernel<<<dim3(rows, H), 128, 0, st>>>(nb, q0, w->vmask, w->smask, w->heads, w->qa_keep,
                                                 w->row_ptr, w->col);
    GF_LAUNCHED();
    return 0;
}

// The query-aware heads' ties and emission after their cut (gf_cut_run), as gpu_flex_index runs
// them, on S given maps of nb x nb (device memory; the test library's gpu_flex_test_cut drives it
// on host data). ties: gpu_flex_emit_ties(nb) ints per map.
size_t gpu_flex_emit_ties(int nb)
{
    return ((size_t)nb * nb + EMIT_PER_BLOCK - 1) / EMIT_PER_BLOCK;
}

int gpu_flex_emit(const float *map, int nb, int S, const gpu_flex_head *heads, const gf_cut *cuts,
                  int *ties, uint32_t *keep, cudaStream_t st)
{
    if (nb < 1 || nb > MAX_NB || S < 1) return GPU_FLEX_ERR_INVALID;
    const dim3 eg((unsigned)gpu_flex_emit_ties(nb), S);
    qa_ties_kernel<<<eg, 256, 0, st>>>(map, nb, nb, heads, cuts, ties);
    GF_LAUNCHED();
    qa_emit_kernel<<<eg, 256, 0, st>>>(map, nb, nb, heads, cuts, ties, keep);
    GF_LAUNCHED();
    return 0;
}
