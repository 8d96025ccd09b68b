/* gpu/kernels.cu — the element-wise and row-wise kernels of the forward pass: embedding gather,
 * RMSNorm, rotary tables and rotation (with the scatter of K and V into the cache), SwiGLU, and
 * the dtype conversions of the weight upload. Each follows the arithmetic of its cpu/ops.c
 * reference (named at each kernel); where the GPU differs (FMA, float vs double), it says so. */
#include "gpu/engine.cuh"
#include "gpu/gemv.cuh"

/* Launch shape of the row kernels: one block per row. */
#define ROW_THREADS 256

static inline unsigned blocks_for(size_t n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* ---------------------------------------------------------------- embedding */

__device__ __forceinline__ void embed_row(const h16 *table, const int *ids, int H, float *x, int t)
{
    const h16 *row = table + (size_t)ids[t] * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) x[(size_t)t * H + i] = h16_to(row[i]);
}

__global__ void k_embed(const h16 *table, const int *ids, int H, float *x)
{
    embed_row(table, ids, H, x, blockIdx.x);
}

int gpu_embed(cudaStream_t s, const h16 *table, const int *ids, int T, int H, float *x)
{
    k_embed<<<T, ROW_THREADS, 0, s>>>(table, ids, H, x);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- RMSNorm
 * cpu_rmsnorm: mean of squares in double, inv = (float)(1 / sqrt(ms + eps)), out = x * inv * w.
 * Here each thread sums its elements in double and the block reduces in double: the same value up
 * to the order of a double sum (far below float32 resolution); the output is rounded to h16.
 * The block's code is gpu_block_rmsnorm (gemv.cuh), shared with the fused decode kernels. */

__global__ void k_rmsnorm(const float *x, const int *rows, const float *w, int H, float eps,
                          h16 *out)
{
    int r = blockIdx.x;
    gpu_block_rmsnorm(x + (size_t)(rows ? rows[r] : r) * H, w, H, eps, out + (size_t)r * H);
}

int gpu_rmsnorm(cudaStream_t s, const float *x, const int *rows, const float *w, int T, int H,
                float eps, h16 *out)
{
    k_rmsnorm<<<T, ROW_THREADS, 0, s>>>(x, rows, w, H, eps, out);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- rotary embedding
 * model_rope_angles: angle = (float)pos * inv_freq[i] in float32, then cosf/sinf. sincosf here is
 * CUDA's full-range version (max 2 ulp; the angles stay below its slow-path bound of 105615 for
 * positions up to ~105K at inv_freq[0] = 1, and are exact to reduce beyond it). One table per
 * call: rows of (cos, sin) per token, read by every layer. tbl[t] picks the token's inv_freq
 * table (dynamic NTK scaling gives each sequence its own). */

__device__ __forceinline__ void rope_entry(const int *pos, const int *tbl, const float *inv, int T,
                                           int half, float2 *out, size_t i)
{
    if (i >= (size_t)T * half) return;
    int t = (int)(i / half), j = (int)(i % half);
    float a = __fmul_rn((float)pos[t], inv[(size_t)(tbl ? tbl[t] : 0) * half + j]);
    float sn, cs;
    sincosf(a, &sn, &cs);
    out[i] = make_float2(cs, sn);
}

__global__ void k_rope_table(const int *pos, const int *tbl, const float *inv, int T, int half,
                             float2 *out)
{
    rope_entry(pos, tbl, inv, T, half, out, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

/* Both at once, for a pass's prologue (one launch, one kernel boundary fewer before the first
 * layer): blocks [0, T) gather the embedding rows, the rest compute the rope table. */
__global__ void k_embed_rope(const h16 *table, const int *ids, int H, float *x, const int *pos,
                             const int *tbl, const float *inv, int T, int half, float2 *out)
{
    if ((int)blockIdx.x < T)
        embed_row(table, ids, H, x, blockIdx.x);
    else
        rope_entry(pos, tbl, inv, T, half, out, (blockIdx.x - T) * (size_t)blockDim.x + threadIdx.x);
}

int gpu_embed_rope(cudaStream_t s, const h16 *table, const int *ids, int T, int H, float *x,
                   const int *pos, const int *tbl, const float *inv, int half, float2 *rope)
{
    const size_t n = (size_t)T * half;
    k_embed_rope<<<(unsigned)T + blocks_for(n, ROW_THREADS), ROW_THREADS, 0, s>>>(table, ids, H, x, pos,
                                                                                tbl, inv, T, half, rope);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

int gpu_rope_table(cudaStream_t s, const int *pos, const int *tbl, const float *inv, int T,
                   int half, float2 *out)
{
    size_t n = (size_t)T * half;
    k_rope_table<<<blocks_for(n, 256), 256, 0, s>>>(pos, tbl, inv, T, half, out);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

/* cpu_rope: v[i] = a*cos - b*sin, v[i+half] = b*cos + a*sin with (a, b) = (v[i], v[i+half]),
 * no FMA (the __f*_rn intrinsics keep the compiler from contracting). Also adds the q/k/v biases
 * (cpu_matmul adds them to the projection output, before rotation), writes Q as h16 for
 * attention, K and V as h16 into the cache at the token's position, and K, V as float32 for the
 * export quantizer when kf is not NULL. One block per token; each thread takes 4 consecutive
 * elements of a row (16-byte float loads, 8-byte h16 stores; head_dim % 8 == 0, which
 * check_shape requires): wide accesses bring it near DRAM peak, where one element per thread
 * was far below (gpu/KERNELS.md). */
#define ROPE_VW 4

__device__ __forceinline__ void ld4(const float *p, float (&v)[4])
{
    float4 t = *(const float4 *)p;
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
}

__device__ __forceinline__ void st4(h16 *p, const float (&v)[4])
{
    h16x2 a = h16x2_from(v[0], v[1]), b = h16x2_from(v[2], v[3]);
    uint2 t;
    t.x = *(const unsigned *)&a;
    t.y = *(const unsigned *)&b;
    *(uint2 *)p = t;
}

__device__ __forceinline__ void st4(float *p, const float (&v)[4])
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void add_bias4(float (&v)[4], const float *bias, int c)
{
    if (!bias) return;
    float b[4];
    ld4(bias + c, b);
#pragma unroll
    for (int u = 0; u < 4; u++) v[u] = __fadd_rn(v[u], b[u]);
}

__global__ void k_rope_qkv(gpu_dims d, int layer, const float *qkv, const float *bias,
                           const float2 *rope, const int *seq_idx, const int *pos,
                           const gpu_seq_dev *seqs, h16 *q, float *kf, float *vf)
{
    int t = blockIdx.x, half = d.hd / 2;
    const float *row = qkv + (size_t)t * d.qkv;
    const float2 *cs = rope + (size_t)t * half;
    gpu_seq_dev sq = seqs[seq_idx[t]];
    const long long p = gpu_kv_row(sq.map, pos[t]); /* the position's row in the cache */
    int n_q = d.n_heads * half / ROPE_VW, n_k = d.n_kv * half / ROPE_VW, n_v = d.kvd / ROPE_VW;
    for (int w = threadIdx.x; w < n_q + n_k + n_v; w += blockDim.x) {
        if (w < n_q + n_k) {
            int k = w >= n_q, j = (k ? w - n_q : w) * ROPE_VW;
            int head = j / half, i = j % half;
            int c0 = (k ? d.qd : 0) + head * d.hd + i;
            float a[4], b[4], o0[4], o1[4];
            ld4(row + c0, a);
            ld4(row + c0 + half, b);
            add_bias4(a, bias, c0);
            add_bias4(b, bias, c0 + half);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float2 r = cs[i + u];
                o0[u] = __fsub_rn(__fmul_rn(a[u], r.x), __fmul_rn(b[u], r.y));
                o1[u] = __fadd_rn(__fmul_rn(b[u], r.x), __fmul_rn(a[u], r.y));
            }
            if (!k) {
                h16 *qo = q + (size_t)t * d.qd + head * d.hd + i;
                st4(qo, o0);
                st4(qo + half, o1);
            } else {
                h16 *ko = sq.k + (((size_t)layer * d.n_kv + head) * sq.cap + p) * d.hd + i;
                st4(ko, o0);
                st4(ko + half, o1);
                if (kf) {
                    st4(kf + (size_t)t * d.kvd + head * d.hd + i, o0);
                    st4(kf + (size_t)t * d.kvd + head * d.hd + i + half, o1);
                }
            }
        } else {
            int j = (w - n_q - n_k) * ROPE_VW, head = j / d.hd, i = j % d.hd;
            int c = d.qd + d.kvd + j;
            float v[4];
            ld4(row + c, v);
            add_bias4(v, bias, c);
            st4(sq.v + (((size_t)layer * d.n_kv + head) * sq.cap + p) * d.hd + i, v);
            if (vf) st4(vf + (size_t)t * d.kvd + j, v);
        }
    }
}

int gpu_rope_qkv(cudaStream_t s, const gpu_dims *d, int layer, int T, const float *qkv,
                 const float *bias, const float2 *rope, const int *seq_idx, const int *pos,
                 const gpu_seq_dev *seqs, h16 *q, float *kf, float *vf)
{
    if ((d->hd / 2) % ROPE_VW) return ACCEL_ERR_UNSUPPORTED;
    k_rope_qkv<<<T, ROW_THREADS / 2, 0, s>>>(*d, layer, qkv, bias, rope, seq_idx, pos, seqs, q, kf, vf);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- SwiGLU
 * cpu_swiglu: h = silu(g) * u, silu(g) = g / (1 + expf(-g)) — expf and the division are the
 * accurate ones here too (no fast-math). g and u come from the gate/up GEMM in h16 (one row
 * holds the I gate values, then the I up values); h is rounded to h16 for the down GEMM. */


/* Eight elements per thread with 16-byte loads (I % 8 == 0). */
__global__ void k_swiglu8(const h16 *gu, int T, int I, h16 *h)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    int per_row = I / 8;
    if (i >= (size_t)T * per_row) return;
    size_t t = i / per_row, c = (i % per_row) * 8;
    uint4 gv = *(const uint4 *)(gu + t * 2 * I + c);
    uint4 uv = *(const uint4 *)(gu + t * 2 * I + I + c);
    const h16 *g8 = (const h16 *)&gv, *u8 = (const h16 *)&uv;
    uint4 out;
    h16 *o8 = (h16 *)&out;
#pragma unroll
    for (int j = 0; j < 8; j++)
        o8[j] = h16_from(gpu_silu_mul(h16_to(g8[j]), h16_to(u8[j])));
    *(uint4 *)(h + t * I + c) = out;
}

__global__ void k_swiglu1(const h16 *gu, int T, int I, h16 *h)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * I) return;
    size_t t = i / I, c = i % I;
    h[i] = h16_from(gpu_silu_mul(h16_to(gu[t * 2 * I + c]),
                                     h16_to(gu[t * 2 * I + I + c])));
}

int gpu_swiglu(cudaStream_t s, const h16 *gu, int T, int I, h16 *h)
{
    if (I % 8 == 0)
        k_swiglu8<<<blocks_for((size_t)T * (I / 8), 256), 256, 0, s>>>(gu, T, I, h);
    else
        k_swiglu1<<<blocks_for((size_t)T * I, 256), 256, 0, s>>>(gu, T, I, h);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- dtype conversion
 * model dtypes (enum model_dtype) to h16 (round to nearest even) or float32 (exact). */

__device__ __forceinline__ float load_as_float(const void *src, int dtype, size_t i)
{
    if (dtype == MODEL_DTYPE_F32) return ((const float *)src)[i];
    unsigned short b = ((const unsigned short *)src)[i];
    if (dtype == MODEL_DTYPE_F16) return __half2float(__ushort_as_half(b));
    return __bfloat162float(__ushort_as_bfloat16(b)); /* the checkpoint's bf16, whatever h16 is */
}

/* overflow (may be NULL): set when a finite value rounds to infinity (fp16 stops at 65504) */
__global__ void k_to_h16(const void *src, int dtype, size_t n, h16 *dst, int *overflow)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = load_as_float(src, dtype, i);
    const h16 r = h16_from(v);
    dst[i] = r;
    if (overflow && isfinite(v) && isinf(h16_to(r))) *overflow = 1;
}

__global__ void k_to_f32(const void *src, int dtype, size_t n, float *dst)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = load_as_float(src, dtype, i);
}

int gpu_convert_to_h16(cudaStream_t s, const void *src, int dtype, size_t n, h16 *dst,
                       int *overflow)
{
    if (n == 0) return ACCEL_OK;
    k_to_h16<<<blocks_for(n, 256), 256, 0, s>>>(src, dtype, n, dst, overflow);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

int gpu_convert_to_f32(cudaStream_t s, const void *src, int dtype, size_t n, float *dst)
{
    if (n == 0) return ACCEL_OK;
    k_to_f32<<<blocks_for(n, 256), 256, 0, s>>>(src, dtype, n, dst);
    GPU_LAUNCHED();
    return ACCEL_OK;
}
