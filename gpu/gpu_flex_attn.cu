// gpu/gpu_flex_attn.cu — causal attention over a CSR block list, FlashAttention-2 style
// (interface: gpu/gpu_flex.h; reference: cpu_flex_sparse_attention).
//
// One thread block per (query block of 128 rows, head); 8 warps, warp w owns rows 16w..16w+15.
// For every listed key block, in ascending order, two sub-tiles of 64 keys: S = Q K^T on tensor
// cores (WMMA bf16 -> fp32) into the warp's strip of shared memory, the online softmax in base 2
// on that strip (running max and sum per row; the diagonal block masked inside, key > query),
// P rounded to bf16 (as the official Triton kernel does before its P.V dot), the row rescale of
// the fp32 output accumulator, then P V on tensor cores added into it. The accumulator lives in
// shared memory (WMMA fragments do not expose their row layout for the rescale). Output = O / l,
// rounded to bf16. GQA: kv head h / G, or h % n_kv_heads when interleaved.
//
// Shared memory at d = 128: Q 34 KiB, K and V 17 KiB each, S 34 KiB, P 18 KiB, O 66 KiB
// (~187 KiB: one block per SM, opted in with cudaFuncAttributeMaxDynamicSharedMemorySize).
#include "gpu/gpu_flex_common.cuh"
#include <mma.h>

using namespace nvcuda;

#define BS 128
#define SUB 64
#define LDS (SUB + 4)
#define LDP (SUB + 8)

template <int D> struct attn_smem {
    static constexpr int LDQ = D + 8, LDO = D + 4;
    static constexpr size_t q = (size_t)BS * LDQ * 2, k = (size_t)SUB * LDQ * 2,
                            v = (size_t)SUB * LDQ * 2, s = (size_t)BS * LDS * 4,
                            p = (size_t)BS * LDP * 2, o = (size_t)BS * LDO * 4,
                            ml = (size_t)2 * BS * 4;
    static constexpr size_t bytes = q + k + v + s + p + o + ml;
};

template <int D>
__global__ void __launch_bounds__(256)
    flex_attn_kernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                     const bf16 *__restrict__ v, bf16 *__restrict__ out, int n, int H, int Hk,
                     int interleave, float scale_log2, const int32_t *__restrict__ row_ptr,
                     const int32_t *__restrict__ col)
{
    typedef attn_smem<D> L;
    constexpr int LDQ = L::LDQ, LDO = L::LDO;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *qs = (bf16 *)smem;
    bf16 *ks = (bf16 *)(smem + L::q);
    bf16 *vs = (bf16 *)(smem + L::q + L::k);
    float *ss = (float *)(smem + L::q + L::k + L::v);
    bf16 *ps = (bf16 *)(smem + L::q + L::k + L::v + L::s);
    float *os = (float *)(smem + L::q + L::k + L::v + L::s + L::p);
    float *mrow = (float *)(smem + L::q + L::k + L::v + L::s + L::p + L::o), *lrow = mrow + BS;

    const int r = blockIdx.x, h = blockIdx.y, nb = gridDim.x, tid = threadIdx.x;
    const int g = interleave ? h % Hk : h / (H / Hk);
    const int w = tid >> 5, lane = tid & 31, row = 16 * w + (lane >> 1), half = lane & 1;
    const int t_row = r * BS + row;

    for (int i = tid; i < BS * D / 8; i += 256) {
        const int rr = i / (D / 8), c = i % (D / 8), t = r * BS + rr;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (t < n) x = *(const uint4 *)(q + ((size_t)t * H + h) * D + 8 * c);
        *(uint4 *)(qs + rr * LDQ + 8 * c) = x;
    }
    for (int i = tid; i < BS * LDO; i += 256) os[i] = 0;
    if (tid < BS) {
        mrow[tid] = -INFINITY;
        lrow[tid] = 0;
    }

    const int e0 = row_ptr[h * (nb + 1) + r], e1 = row_ptr[h * (nb + 1) + r + 1];
    for (int e = e0; e < e1; e++) {
        const int cblk = col[e];
        for (int sub = 0; sub < BS / SUB; sub++) {
            const int j0 = cblk * BS + sub * SUB;
            if (j0 >= n || j0 > r * BS + BS - 1) break; // uniform: past the prompt or the rows
            __syncthreads(); // previous sub-tile done with ks / vs
            for (int i = tid; i < SUB * D / 8; i += 256) {
                const int rr = i / (D / 8), c = i % (D / 8), j = j0 + rr;
                uint4 a = make_uint4(0, 0, 0, 0), b = a;
                if (j < n) {
                    a = *(const uint4 *)(k + ((size_t)j * Hk + g) * D + 8 * c);
                    b = *(const uint4 *)(v + ((size_t)j * Hk + g) * D + 8 * c);
                }
                *(uint4 *)(ks + rr * LDQ + 8 * c) = a;
                *(uint4 *)(vs + rr * LDQ + 8 * c) = b;
            }
            __syncthreads();
            {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[SUB / 16];
                for (int f = 0; f < SUB / 16; f++) wmma::fill_fragment(acc[f], 0.0f);
                for (int kk = 0; kk < D / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                    wmma::load_matrix_sync(a, qs + 16 * w * LDQ + 16 * kk, LDQ);
                    for (int f = 0; f < SUB / 16; f++) {
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
                        wmma::load_matrix_sync(b, ks + 16 * f * LDQ + 16 * kk, LDQ);
                        wmma::mma_sync(acc[f], a, b, acc[f]);
                    }
                }
                for (int f = 0; f < SUB / 16; f++)
                    wmma::store_matrix_sync(ss + 16 * w * LDS + 16 * f, acc[f], LDS,
                                            wmma::mem_row_major);
            }
            __syncwarp();
            // online softmax on this thread's half row (32 keys)
            {
                float *srow = ss + row * LDS + 32 * half;
                float mx = -INFINITY;
                for (int c = 0; c < 32; c++) {
                    const int j = j0 + 32 * half + c;
                    const float s = (j <= t_row && j < n) ? srow[c] * scale_log2 : -INFINITY;
                    srow[c] = s;
                    mx = fmaxf(mx, s);
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                const float m_old = mrow[row];
                const float m_new = fmaxf(m_old, mx);
                float sum = 0;
                bf16 *prow = ps + row * LDP + 32 * half;
                for (int c = 0; c < 32; c++) {
                    const float p = m_new == -INFINITY ? 0.0f : exp2f(srow[c] - m_new);
                    sum += p;
                    prow[c] = __float2bfloat16(p);
                }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                const float corr = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
                float *orow = os + row * LDO + (D / 2) * half;
                for (int c = 0; c < D / 2; c++) orow[c] *= corr;
                __syncwarp();
                if (half == 0) {
                    mrow[row] = m_new;
                    lrow[row] = lrow[row] * corr + sum;
                }
            }
            __syncwarp();
            // O[strip] += P[strip] V, one 16x16 output fragment at a time via the S strip
            for (int f = 0; f < D / 16; f++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::fill_fragment(acc, 0.0f);
                for (int kk = 0; kk < SUB / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
                    wmma::load_matrix_sync(a, ps + 16 * w * LDP + 16 * kk, LDP);
                    wmma::load_matrix_sync(b, vs + 16 * kk * LDQ + 16 * f, LDQ);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(ss + 16 * w * LDS, acc, LDS, wmma::mem_row_major);
                __syncwarp();
                for (int i = lane; i < 256; i += 32) {
                    const int rr = i >> 4, cc = i & 15;
                    os[(16 * w + rr) * LDO + 16 * f + cc] += ss[(16 * w + rr) * LDS + cc];
                }
                __syncwarp();
            }
        }
    }
    __syncthreads();
    for (int i = tid; i < BS * D; i += 256) {
        const int rr = i / D, c = i % D, t = r * BS + rr;
        if (t >= n) continue;
        const float inv = 1.0f / lrow[rr];
        out[((size_t)t * H + h) * D + c] = __float2bfloat16(os[rr * LDO + c] * inv);
    }
}

template <int D>
static int launch(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *out, int n, int H, int Hk,
                  const int32_t *row_ptr, const int32_t *col, int interleave, cudaStream_t st)
{
    const size_t smem = attn_smem<D>::bytes;
    GF_CHECK(cudaFuncSetAttribute(flex_attn_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
    const int nb = (n + BS - 1) / BS;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
    flex_attn_kernel<D><<<dim3(nb, H), 256, smem, st>>>(q, k, v, out, n, H, Hk, interleave,
                                                        scale_log2, row_ptr, col);
    GF_LAUNCHED();
    return 0;
}

extern "C" int gpu_flex_attention(const void *q, const void *k, const void *v, void *out, int n,
                                  int H, int Hk, int d, const int32_t *row_ptr,
                                  const int32_t *col, int interleave, void *stream)
{
    if (!q || !k || !v || !out || !row_ptr || !col || n < 1 || n > GPU_FLEX_MAX_TOKENS || H < 1 ||
        H > GPU_FLEX_MAX_HEADS || Hk < 1 || H % Hk || (d != 64 && d != 128))
        return GPU_FLEX_ERR_INVALID;
    cudaStream_t st = (cudaStream_t)stream;
    if (d == 64)
        return launch<64>((const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (bf16 *)out, n, H, Hk,
                          row_ptr, col, interleave, st);
    return launch<128>((const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (bf16 *)out, n, H, Hk,
                       row_ptr, col, interleave, st);
}
