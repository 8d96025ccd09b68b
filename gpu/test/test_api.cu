/* gpu/test/test_api.cu — single-op entry points for tests/gpu (found with dlsym) and the
 * attention benchmark (tools/bench_gpu.c), built into the test library beside each plugin
 * (build/libtandem_cuda_test.so, _f16_test.so: the Makefile), never into the plugin itself. Each
 * call runs on device 0 with its own allocations, copies float32 host arrays in (rounding to h16
 * where the kernel reads h16) and results out (h16 results widened to float), and returns
 * ACCEL_OK or a negative ACCEL_ERR_* (ACCEL_ERR_NOT_FOUND: no CUDA device). Not for serving:
 * nothing here is tuned, and every call synchronizes. */
#include "gpu/engine.cuh"
#include "gpu/gemm_small.cuh" /* gpu_gemm_swiglu */
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

extern "C" {
const char *gpu_test_h16(void);
int gpu_test_device_count(void);
int gpu_test_rmsnorm(int T, int H, const float *x, const float *w, float eps, float *out);
int gpu_test_rope(int T, int n_heads, int n_kv, int hd, const float *qkv, const float *bias,
                  const int *pos, const float *inv_freq, float *q, float *k, float *v);
int gpu_test_swiglu(int T, int I, const float *gu, float *h);
int gpu_test_gemm(int T, int N, int K, const float *x, const float *w, float *out);
int gpu_test_gemm_candidate(int T, int N, int K, int ldc, int out_f32, int beta, const float *x,
                            const float *w, const float *c, int cand, float *out, int *n_cands,
                            int *splitk);
int gpu_test_gemm_small(int rows_max, int sms, int T, int N, int K, int ldc, int out_f32, int beta,
                        const float *x, const float *w, const float *c, float *out);
int gpu_test_gemm_swiglu(int rows_max, int sms, int T, int I, int K, const float *x, const float *w,
                         float *h);
int gpu_test_attention(int kernel, int T, int pos0, int n_heads, int n_kv, int hd, int window,
                       const float *q, const float *k, const float *v, float *out);
int gpu_test_kv_quantize(int dtype, int T, int n_kv, int hd, const float *x, unsigned char *q,
                         unsigned short *scales);
int gpu_test_attention_sparse(int kernel, int T, int pos0, int n_heads, int n_kv, int hd,
                              const float *q, const float *k, const float *v,
                              const int32_t *row_ptr, const int32_t *col, int nb, float *out);
int gpu_test_decode_fused(int fused, int H, int n_heads, int n_kv, int hd, int I, int pos,
                          const float *x, const float *attn_norm, const float *ffn_norm,
                          const float *w_qkv, const float *bias, const float *inv_freq,
                          const float *w_gu, float eps, float *q, float *k, float *v, float *h);
int gpu_bench_attention(int variant, int T, int n_heads, int n_kv, int hd, int reps, double *ms);
int gpu_bench_attention_chunk(int splits, int T, int pos0, int n_heads, int n_kv, int reps,
                              double *ms, int *used);
int gpu_test_argmax(int rows, int V, const float *x, int32_t *out);
}

/* "bf16" or "fp16": the 16-bit type of this build (gpu/h16.cuh), so that a test rounds its
 * inputs as the kernels will */
const char *gpu_test_h16(void)
{
    return GPU_H16_NAME;
}

namespace {

/* Device buffers freed at scope exit; any failure turns into a status. */
struct scratch {
    std::vector<void *> bufs;
    ~scratch()
    {
        for (void *p : bufs) cudaFree(p);
    }
    template <typename T> int alloc(T **p, size_t n)
    {
        GPU_CHECK(cudaMalloc((void **)p, (n ? n : 1) * sizeof(T)));
        bufs.push_back(*p);
        return ACCEL_OK;
    }
    int f32(float **p, const float *src, size_t n)
    {
        GPU_TRY(alloc(p, n));
        if (src) GPU_CHECK(cudaMemcpy(*p, src, n * sizeof(float), cudaMemcpyHostToDevice));
        return ACCEL_OK;
    }
    int half(h16 **p, const float *src, size_t n)
    {
        GPU_TRY(alloc(p, n));
        if (src) {
            std::vector<unsigned short> h(n);
            for (size_t i = 0; i < n; i++) h[i] = h16_bits_host(src[i]);
            GPU_CHECK(cudaMemcpy(*p, h.data(), n * 2, cudaMemcpyHostToDevice));
        }
        return ACCEL_OK;
    }
};

int get_half(float *dst, const h16 *src, size_t n)
{
    std::vector<unsigned short> h(n);
    GPU_CHECK(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = h16_float_host(h[i]);
    return ACCEL_OK;
}

int ready(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return ACCEL_ERR_NOT_FOUND;
    }
    GPU_CHECK(cudaSetDevice(0));
    return ACCEL_OK;
}

gpu_dims dims_of(int n_heads, int n_kv, int hd, int window)
{
    gpu_dims d;
    memset(&d, 0, sizeof d);
    d.n_heads = n_heads;
    d.n_kv = n_kv;
    d.hd = hd;
    d.qd = n_heads * hd;
    d.kvd = n_kv * hd;
    d.qkv = d.qd + 2 * d.kvd;
    d.hdp = hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : 128;
    d.window = window;
    d.L = 1;
    return d;
}

int sms_of_device0(void)
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return 1;
    return sms;
}

} // namespace

int gpu_test_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int gpu_test_rmsnorm(int T, int H, const float *x, const float *w, float eps, float *out)
{
    GPU_TRY(ready());
    scratch s;
    float *dx, *dw;
    h16 *dout;
    GPU_TRY(s.f32(&dx, x, (size_t)T * H));
    GPU_TRY(s.f32(&dw, w, H));
    GPU_TRY(s.alloc(&dout, (size_t)T * H));
    GPU_TRY(gpu_rmsnorm(0, dx, NULL, dw, T, H, eps, dout));
    GPU_CHECK(cudaDeviceSynchronize());
    return get_half(out, dout, (size_t)T * H);
}

/* One layer, one sequence with capacity T holding positions pos[t]: q (T, qd) as h16 ->
 * float, k and v (T, kvd) float32 (the export path's copies, before the cache's h16). */
int gpu_test_rope(int T, int n_heads, int n_kv, int hd, const float *qkv, const float *bias,
                  const int *pos, const float *inv_freq, float *q, float *k, float *v)
{
    GPU_TRY(ready());
    gpu_dims d = dims_of(n_heads, n_kv, hd, 0);
    int cap = 0;
    for (int t = 0; t < T; t++) cap = pos[t] + 1 > cap ? pos[t] + 1 : cap;
    scratch s;
    float *dqkv, *dbias = NULL, *dinv, *dkf, *dvf;
    float2 *drope;
    int *dpos, *dseq;
    h16 *dq, *dcache;
    gpu_seq_dev *dseqs;
    GPU_TRY(s.f32(&dqkv, qkv, (size_t)T * d.qkv));
    if (bias) GPU_TRY(s.f32(&dbias, bias, d.qkv));
    GPU_TRY(s.f32(&dinv, inv_freq, hd / 2));
    GPU_TRY(s.alloc(&drope, (size_t)T * hd / 2));
    GPU_TRY(s.alloc(&dpos, T));
    GPU_TRY(s.alloc(&dseq, T));
    GPU_TRY(s.alloc(&dq, (size_t)T * d.qd));
    GPU_TRY(s.alloc(&dkf, (size_t)T * d.kvd));
    GPU_TRY(s.alloc(&dvf, (size_t)T * d.kvd));
    GPU_TRY(s.alloc(&dcache, 2 * (size_t)cap * d.kvd));
    GPU_TRY(s.alloc(&dseqs, 1));
    GPU_CHECK(cudaMemcpy(dpos, pos, T * sizeof(int), cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(dseq, 0, T * sizeof(int)));
    gpu_seq_dev sq = {dcache, dcache + (size_t)cap * d.kvd, cap, 0};
    GPU_CHECK(cudaMemcpy(dseqs, &sq, sizeof sq, cudaMemcpyHostToDevice));
    GPU_TRY(gpu_rope_table(0, dpos, NULL, dinv, T, hd / 2, drope));
    GPU_TRY(gpu_rope_qkv(0, &d, 0, T, dqkv, dbias, drope, dseq, dpos, dseqs, dq, dkf, dvf));
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_TRY(get_half(q, dq, (size_t)T * d.qd));
    GPU_CHECK(cudaMemcpy(k, dkf, (size_t)T * d.kvd * 4, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(v, dvf, (size_t)T * d.kvd * 4, cudaMemcpyDeviceToHost));
    return ACCEL_OK;
}

int gpu_test_swiglu(int T, int I, const float *gu, float *h)
{
    GPU_TRY(ready());
    scratch s;
    h16 *dgu, *dh;
    GPU_TRY(s.half(&dgu, gu, (size_t)T * 2 * I));
    GPU_TRY(s.alloc(&dh, (size_t)T * I));
    GPU_TRY(gpu_swiglu(0, dgu, T, I, dh));
    GPU_CHECK(cudaDeviceSynchronize());
    return get_half(h, dh, (size_t)T * I);
}

int gpu_test_gemm(int T, int N, int K, const float *x, const float *w, float *out)
{
    GPU_TRY(ready());
    gpu_engine e;
    memset(&e, 0, sizeof e);
    e.pdl = 1; /* the engine's default on Hopper: T = 1 takes the GEMV's early-load path */
    GPU_CUBLAS(cublasCreate(&e.blas));
    scratch s;
    h16 *dx, *dw;
    float *dout;
    int st = s.half(&dx, x, (size_t)T * K);
    if (!st) st = s.half(&dw, w, (size_t)N * K);
    if (!st) st = s.alloc(&dout, (size_t)T * N);
    if (!st) st = gpu_gemm(&e, T, N, K, dw, dx, dout, 1, 0.f);
    cudaError_t ce = cudaDeviceSynchronize();
    if (!st && ce != cudaSuccess) st = gpu_cuda_status(ce, "gemm", __FILE__, __LINE__);
    if (!st)
        st = cudaMemcpy(out, dout, (size_t)T * N * 4, cudaMemcpyDeviceToHost) == cudaSuccess
                 ? ACCEL_OK : ACCEL_ERR_DEVICE;
    cublasDestroy(e.blas);
    return st;
}

/* cuBLASLt heuristic candidate `cand` of the shape as gemm_tune.cu asks for them (gemm_tune.cu
 * gpu_gemm_lt_candidate): out (T rows of ldc, columns 0..N-1; c its initial values, read when
 * beta = 1) = x (T, K) · w (N, K)^T (+ c), float32 or h16 (widened) output; columns past N keep c.
 * *n_cands: how many there are (cand out of range: none run), *splitk: the candidate's split of K. */
int gpu_test_gemm_candidate(int T, int N, int K, int ldc, int out_f32, int beta, const float *x,
                            const float *w, const float *c, int cand, float *out, int *n_cands,
                            int *splitk)
{
    GPU_TRY(ready());
    scratch s;
    h16 *dx, *dw;
    void *ws;
    const size_t no = (size_t)T * ldc, ws_bytes = 32u << 20;
    GPU_TRY(s.half(&dx, x, (size_t)T * K));
    GPU_TRY(s.half(&dw, w, (size_t)N * K));
    GPU_TRY(s.alloc((unsigned char **)&ws, ws_bytes));
    if (out_f32) {
        float *dout;
        GPU_TRY(s.f32(&dout, c, no));
        GPU_TRY(gpu_gemm_lt_candidate(T, N, K, ldc, 1, beta ? 1.f : 0.f, dw, dx, dout, ws, ws_bytes,
                                      cand, n_cands, splitk));
        GPU_CHECK(cudaMemcpy(out, dout, no * 4, cudaMemcpyDeviceToHost));
        return ACCEL_OK;
    }
    h16 *dout;
    GPU_TRY(s.half(&dout, c, no));
    GPU_TRY(gpu_gemm_lt_candidate(T, N, K, ldc, 0, beta ? 1.f : 0.f, dw, dx, dout, ws, ws_bytes, cand,
                                  n_cands, splitk));
    return get_half(out, dout, no);
}

/* The engine the small-T tests call through: PDL on, gemm_small=rows_max, sms SMs (0: one). */
static void small_engine(gpu_engine *e, int rows_max, int sms)
{
    memset(e, 0, sizeof *e);
    e->pdl = 1;
    e->sms = sms;
    e->tune.gemm_small = rows_max;
}

/* gpu_gemm as the engine calls it with gemm_small=rows_max (0: cuBLAS), on an engine counting
 * sms SMs (0: one), PDL on: out (T rows of ldc; c its initial values) = x (T, K) · w (N, K)^T
 * (+ c where beta), float32 or h16 (widened) output. ldc > N: gpu_gemm_cols (float32, beta 0: the
 * lm_head's column chunks). */
int gpu_test_gemm_small(int rows_max, int sms, int T, int N, int K, int ldc, int out_f32, int beta,
                        const float *x, const float *w, const float *c, float *out)
{
    GPU_TRY(ready());
    if (ldc < N || (ldc > N && (!out_f32 || beta))) return ACCEL_ERR_INVALID;
    gpu_engine e;
    small_engine(&e, rows_max, sms);
    GPU_CUBLAS(cublasCreate(&e.blas));
    scratch s;
    h16 *dx, *dw;
    const size_t no = (size_t)T * ldc;
    int st = s.half(&dx, x, (size_t)T * K);
    if (!st) st = s.half(&dw, w, (size_t)N * K);
    if (!st && out_f32) {
        float *dout;
        st = s.f32(&dout, c, no);
        if (!st)
            st = ldc > N ? gpu_gemm_cols(&e, T, N, K, dw, dx, dout, ldc)
                         : gpu_gemm(&e, T, N, K, dw, dx, dout, 1, beta ? 1.f : 0.f);
        cudaError_t ce = cudaDeviceSynchronize();
        if (!st && ce != cudaSuccess) st = gpu_cuda_status(ce, "gemm", __FILE__, __LINE__);
        if (!st && cudaMemcpy(out, dout, no * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
            st = ACCEL_ERR_DEVICE;
    } else if (!st) {
        h16 *dout;
        st = s.half(&dout, c, no);
        if (!st) st = gpu_gemm(&e, T, N, K, dw, dx, dout, 0, beta ? 1.f : 0.f);
        cudaError_t ce = cudaDeviceSynchronize();
        if (!st && ce != cudaSuccess) st = gpu_cuda_status(ce, "gemm", __FILE__, __LINE__);
        if (!st) st = get_half(out, dout, no);
    }
    cublasDestroy(e.blas);
    return st;
}

/* gpu_gemm_swiglu as forward.cu calls it with gemm_small=rows_max on an engine of sms SMs (0: one),
 * PDL on: h (T, I) = SwiGLU of x (T, K) · w (2I, K)^T (gate rows first), h16 widened.
 * ACCEL_ERR_INVALID where it declines (the engine then runs the two kernels). */
int gpu_test_gemm_swiglu(int rows_max, int sms, int T, int I, int K, const float *x, const float *w,
                         float *h)
{
    GPU_TRY(ready());
    gpu_engine e;
    small_engine(&e, rows_max, sms);
    scratch s;
    h16 *dx, *dw, *dh;
    GPU_TRY(s.half(&dx, x, (size_t)T * K));
    GPU_TRY(s.half(&dw, w, (size_t)2 * I * K));
    GPU_TRY(s.alloc(&dh, (size_t)T * I));
    const int st = gpu_gemm_swiglu(&e, T, I, K, dw, dx, dh);
    if (st < 0) return st;
    if (st == 0) return ACCEL_ERR_INVALID;
    cudaError_t ce = cudaDeviceSynchronize();
    if (ce != cudaSuccess) return gpu_cuda_status(ce, "gemm_swiglu", __FILE__, __LINE__);
    return get_half(h, dh, (size_t)T * I);
}

/* One decode token's QKV (+ bias, rope, cache write at pos) and gate/up + SwiGLU, either through
 * the fused kernels (fused = 1: decode_fused.cu) or the unfused chain (RMSNorm, GEMV, rope, SwiGLU
 * kernels) the engine runs otherwise. x (H) float32; norms (H); w_qkv (qkv, H) and w_gu (2I, H)
 * rounded to h16; bias (qkv) or NULL; inv_freq (hd/2). Out: q (qd), the cache's k and v rows at
 * pos (kvd each) and h (I), all h16 widened to float. */
int gpu_test_decode_fused(int fused, int H, int n_heads, int n_kv, int hd, int I, int pos,
                          const float *x, const float *attn_norm, const float *ffn_norm,
                          const float *w_qkv, const float *bias, const float *inv_freq,
                          const float *w_gu, float eps, float *q, float *k, float *v, float *h)
{
    GPU_TRY(ready());
    gpu_dims d = dims_of(n_heads, n_kv, hd, 0);
    d.H = H;
    d.I = I;
    d.eps = eps;
    if (fused && !gpu_fused_ok(&d)) return ACCEL_ERR_UNSUPPORTED;
    const int cap = pos + 1;
    scratch s;
    float *dx, *dan, *dfn, *dbias = NULL, *dinv, *dqkv;
    h16 *dwqkv, *dwgu, *dxb, *dq, *dcache, *dgu, *dh;
    float2 *drope;
    int *dpos, *dseq;
    gpu_seq_dev *dseqs;
    GPU_TRY(s.f32(&dx, x, H));
    GPU_TRY(s.f32(&dan, attn_norm, H));
    GPU_TRY(s.f32(&dfn, ffn_norm, H));
    if (bias) GPU_TRY(s.f32(&dbias, bias, d.qkv));
    GPU_TRY(s.f32(&dinv, inv_freq, hd / 2));
    GPU_TRY(s.alloc(&dqkv, d.qkv));
    GPU_TRY(s.half(&dwqkv, w_qkv, (size_t)d.qkv * H));
    GPU_TRY(s.half(&dwgu, w_gu, (size_t)2 * I * H));
    GPU_TRY(s.alloc(&dxb, H));
    GPU_TRY(s.alloc(&dq, d.qd));
    GPU_TRY(s.alloc(&dcache, 2 * (size_t)cap * d.kvd));
    GPU_TRY(s.alloc(&dgu, 2 * (size_t)I));
    GPU_TRY(s.alloc(&dh, I));
    GPU_TRY(s.alloc(&drope, hd / 2));
    GPU_TRY(s.alloc(&dpos, 1));
    GPU_TRY(s.alloc(&dseq, 1));
    GPU_TRY(s.alloc(&dseqs, 1));
    GPU_CHECK(cudaMemcpy(dpos, &pos, sizeof(int), cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(dseq, 0, sizeof(int)));
    GPU_CHECK(cudaMemset(dcache, 0, 2 * (size_t)cap * d.kvd * sizeof(h16)));
    /* the cache of one layer: (n_kv, cap, hd) for K, then V */
    gpu_seq_dev sq = {dcache, dcache + (size_t)cap * d.kvd, cap, 0};
    GPU_CHECK(cudaMemcpy(dseqs, &sq, sizeof sq, cudaMemcpyHostToDevice));
    GPU_TRY(gpu_rope_table(0, dpos, NULL, dinv, 1, hd / 2, drope));
    gpu_engine e;
    memset(&e, 0, sizeof e);
    const int sms = sms_of_device0();
    int st = ACCEL_OK;
    if (fused) {
        st = gpu_qkv_fused(0, 1, sms, &d, 0, dwqkv, dbias, dx, dan, drope, dseq, dpos, dseqs, dq);
        if (!st) st = gpu_gu_fused(0, 1, sms, &d, dwgu, dx, dfn, dh);
    } else {
        if (H % 8) return ACCEL_ERR_UNSUPPORTED; /* the GEMV needs 16-byte rows */
        st = gpu_rmsnorm(0, dx, NULL, dan, 1, H, eps, dxb);
        if (!st) st = gpu_gemm(&e, 1, d.qkv, H, dwqkv, dxb, dqkv, 1, 0.f);
        if (!st)
            st = gpu_rope_qkv(0, &d, 0, 1, dqkv, dbias, drope, dseq, dpos, dseqs, dq, NULL, NULL);
        if (!st) st = gpu_rmsnorm(0, dx, NULL, dfn, 1, H, eps, dxb);
        if (!st) st = gpu_gemm(&e, 1, 2 * I, H, dwgu, dxb, dgu, 0, 0.f);
        if (!st) st = gpu_swiglu(0, dgu, 1, I, dh);
    }
    if (st) return st;
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_TRY(get_half(q, dq, d.qd));
    for (int g = 0; g < n_kv; g++) {
        GPU_TRY(get_half(k + (size_t)g * hd, dcache + ((size_t)g * cap + pos) * hd, hd));
        GPU_TRY(get_half(v + (size_t)g * hd, sq.v + ((size_t)g * cap + pos) * hd, hd));
    }
    return get_half(h, dh, I);
}

/* Causal attention of T query rows at positions pos0.. over keys 0..pos0+T-1.
 * q (T, n_heads*hd); k, v (pos0+T, n_kv*hd) token-major as in the CPU cache.
 * kernel 0: the tiled prefill kernel the engine uses (mma.sync, 4 warps); 1: the split-K decode
 * kernel, one row per query; 2: the tiled kernel with 8 warps (head_dim 128; else 4); 3: the
 * wgmma path as the engine takes it, 4: the one-warpgroup wgmma kernel, 5: the warp-specialized
 * one without ping-pong, 6: with 3 stages (ACCEL_ERR_UNSUPPORTED where the build or GPU lacks
 * wgmma, or for 5 and 6 where head_dim is not 128); 7: the decode kernel's one-kernel form
 * (head_dim 128; run twice, so the second call finds the range counters reset), 1 its
 * two-kernel form. The warp-specialized kernel with its keys split over blocks (head_dim 128;
 * ACCEL_ERR_UNSUPPORTED without wgmma): 99 the engine's automatic choice (this GPU's SMs, the
 * engine's workspace bound), 100 + z exactly z splits. */
/* a split workspace for gpu_test_attention's kernels 99 and 100 + z, T rows of n_heads heads */
static int split_ws(scratch &s, int kernel, int T, int n_heads, gpu_attn_split *sp)
{
    const int sms = sms_of_device0();
    const size_t rows = kernel == 99 ? gpu_attn_split_rows(sms)
                                     : (size_t)(kernel - 100) * n_heads * ((T + 127) / 128) * 128;
    *sp = gpu_attn_split{nullptr, nullptr, rows, sms, kernel == 99 ? 0 : kernel - 100};
    GPU_TRY(s.alloc(&sp->o, rows * 128));
    GPU_TRY(s.alloc(&sp->ml, rows));
    /* poisoned: a partial the merge reads but no block wrote shows as NaN */
    GPU_CHECK(cudaMemset(sp->o, 0xff, rows * 128 * sizeof(float)));
    GPU_CHECK(cudaMemset(sp->ml, 0xff, rows * sizeof(float2)));
    return ACCEL_OK;
}

static int sm90_variant(int kernel)
{
    return kernel == 4 ? GPU_SM90_ONE_WG : kernel == 5 ? GPU_SM90_WS_NOPP : kernel == 6 ? GPU_SM90_WS_3ST
                                                                                     : GPU_SM90_AUTO;
}

int gpu_test_attention(int kernel, int T, int pos0, int n_heads, int n_kv, int hd, int window,
                       const float *q, const float *k, const float *v, float *out)
{
    GPU_TRY(ready());
    gpu_dims d = dims_of(n_heads, n_kv, hd, window);
    int n = pos0 + T, cap = n;
    /* the cache layout: (n_kv, cap, hd) per layer */
    std::vector<float> kc((size_t)n * d.kvd), vc((size_t)n * d.kvd);
    for (int p = 0; p < n; p++)
        for (int g = 0; g < n_kv; g++)
            for (int i = 0; i < hd; i++) {
                kc[((size_t)g * cap + p) * hd + i] = k[(size_t)p * d.kvd + g * hd + i];
                vc[((size_t)g * cap + p) * hd + i] = v[(size_t)p * d.kvd + g * hd + i];
            }
    scratch s;
    h16 *dq, *dk, *dv, *dout;
    GPU_TRY(s.half(&dq, q, (size_t)T * d.qd));
    GPU_TRY(s.half(&dk, kc.data(), kc.size()));
    GPU_TRY(s.half(&dv, vc.data(), vc.size()));
    GPU_TRY(s.alloc(&dout, (size_t)T * d.qd));
    GPU_CHECK(cudaMemset(dout, 0xff, (size_t)T * d.qd * 2)); /* poison: NaN where not written */
    if (kernel >= 99 && kernel <= 99 + 1024) {
        int sm90 = gpu_attn_sm90_available(0);
        if (sm90 < 0) return sm90;
        if (!sm90 || hd != 128) return ACCEL_ERR_UNSUPPORTED;
        gpu_attn_split sp;
        GPU_TRY(split_ws(s, kernel, T, n_heads, &sp));
        GPU_TRY(gpu_attn_prefill_ws(0, &d, T, pos0, dq, dk, dv, cap, dout, 0, nullptr, &sp));
    } else if (kernel >= 3 && kernel <= 6) {
        int sm90 = gpu_attn_sm90_available(0);
        if (sm90 < 0) return sm90;
        if (!sm90 || hd > 128) return ACCEL_ERR_UNSUPPORTED;
        GPU_TRY(gpu_attn_prefill_sm90_ex(0, &d, T, pos0, dq, dk, dv, cap, dout, sm90_variant(kernel)));
    } else if (kernel == 0 || kernel == 2) {
        GPU_TRY(gpu_attn_prefill(0, &d, T, pos0, dq, dk, dv, cap, dout, kernel == 2 ? 8 : 4));
    } else {
        int sms = sms_of_device0();
        size_t slots = gpu_attn_decode_slots(&d, sms, T);
        float *po;
        float2 *pml;
        int *dpos, *dseq;
        gpu_seq_dev *dseqs;
        GPU_TRY(s.alloc(&po, slots * d.hdp));
        GPU_TRY(s.alloc(&pml, slots));
        GPU_TRY(s.alloc(&dpos, T));
        GPU_TRY(s.alloc(&dseq, T));
        GPU_TRY(s.alloc(&dseqs, 1));
        std::vector<int> pos(T);
        for (int t = 0; t < T; t++) pos[t] = pos0 + t;
        GPU_CHECK(cudaMemcpy(dpos, pos.data(), T * sizeof(int), cudaMemcpyHostToDevice));
        GPU_CHECK(cudaMemset(dseq, 0, T * sizeof(int)));
        gpu_seq_dev sq = {dk, dv, cap, 0};
        GPU_CHECK(cudaMemcpy(dseqs, &sq, sizeof sq, cudaMemcpyHostToDevice));
        /* kernel 7: the one-kernel form (head_dim 128), 8: its cluster form, 9 / 10: the same with
         * the ranges on the tensor cores (d2_mma_range), 11: the rows form (k_decode_rows: every
         * row one range; ACCEL_ERR_UNSUPPORTED where the shape or GPU gives a row several), else
         * the two-kernel one */
        const int rows = kernel == 11;
        if (rows) {
            if (!gpu_attn_decode_rows_ok(&d, sms, T)) return ACCEL_ERR_UNSUPPORTED;
            kernel = 9;
        }
        const int mma = kernel == 9 || kernel == 10, cluster = kernel == 8 || kernel == 10;
        if (mma) kernel -= 2;
        int *cnt = NULL;
        if (kernel == 7) {
            GPU_TRY(s.alloc(&cnt, (size_t)GPU_MAX_BATCH * n_heads));
            GPU_CHECK(cudaMemset(cnt, 0, (size_t)GPU_MAX_BATCH * n_heads * sizeof(int)));
        }
        if (cluster && !gpu_attn_decode_cluster_ok(&d)) return ACCEL_ERR_UNSUPPORTED;
        GPU_TRY(gpu_attn_decode(0, 1, 0, cluster, &d, sms, 0, T, dq, dseq, dpos, dseqs, po, pml,
                                cnt, dout, nullptr, nullptr, mma, rows));
        if (kernel == 7 || kernel == 8) {
            /* again, with the partials and the output poisoned (NaN): the second call must find
             * the counters reset and merge only what it wrote; both outputs must agree bit for
             * bit (the first is returned, the second compared). The second call also takes the
             * decode path's early first-tile loads (one_row = 1: legitimate here, as nothing
             * writes the cache while it runs), which must not change a bit either. The rows form
             * (kernel 11) is compared so with the one-kernel form (kernel 9) of the same ranges:
             * the same arithmetic, so the same bits. */
            std::vector<unsigned short> first((size_t)T * d.qd), second((size_t)T * d.qd);
            GPU_CHECK(cudaMemcpy(first.data(), dout, first.size() * 2, cudaMemcpyDeviceToHost));
            GPU_CHECK(cudaMemset(dout, 0xff, (size_t)T * d.qd * 2));
            GPU_CHECK(cudaMemset(po, 0xff, slots * d.hdp * sizeof(float)));
            GPU_CHECK(cudaMemset(pml, 0xff, slots * sizeof(float2)));
            GPU_TRY(gpu_attn_decode(0, 1, 1, cluster, &d, sms, 0, T, dq, dseq, dpos, dseqs, po,
                                    pml, cnt, dout, nullptr, nullptr, mma, 0));
            GPU_CHECK(cudaDeviceSynchronize());
            GPU_CHECK(cudaMemcpy(second.data(), dout, second.size() * 2, cudaMemcpyDeviceToHost));
            if (first != second) {
                fprintf(stderr, "gpu_test_attention: kernel %d's second call differs from its first\n",
                        rows ? 11 : kernel);
                return ACCEL_ERR_DEVICE;
            }
            GPU_CHECK(cudaMemcpy(dout, first.data(), first.size() * 2, cudaMemcpyHostToDevice));
        }
    }
    GPU_CHECK(cudaDeviceSynchronize());
    return get_half(out, dout, (size_t)T * d.qd);
}

/* The block-sparse form of a prefill kernel on the cache layout, as the engine runs it: T query
 * rows at positions pos0.. (pos0 a multiple of 128) over keys 0..pos0+T-1 of k, v (token-major
 * (pos0 + T, kvd) here, laid out per head on the device), attending only to the 128-key blocks
 * listed for (head, query block): row_ptr (n_heads, nb + 1), col ascending, none above the
 * diagonal (checked: ACCEL_ERR_INVALID otherwise). kernel 4 or 8: the mma.sync kernel with that
 * many warps; 1, 2, 3: the warp-specialized kernel (2 stages with ping-pong, without, 3 stages
 * with: gpu_test_attention's kernels 3, 5, 6 in dense form), 100 + z: the first with z key
 * splits (gpu_test_attention's kernel 100 + z in dense form), ACCEL_ERR_UNSUPPORTED where the
 * build or GPU lacks wgmma or head_dim is not 128. */
int gpu_test_attention_sparse(int kernel, int T, int pos0, int n_heads, int n_kv, int hd,
                              const float *q, const float *k, const float *v,
                              const int32_t *row_ptr, const int32_t *col, int nb, float *out)
{
    GPU_TRY(ready());
    const int n = pos0 + T, cap = n;
    if (T <= 0 || pos0 < 0 || pos0 % 128 || nb < (n + 127) / 128 || nb > 1 << 16)
        return ACCEL_ERR_INVALID;
    for (int h = 0; h < n_heads; h++)
        for (int r = 0; r < nb; r++) {
            const int32_t *rp = row_ptr + (size_t)h * (nb + 1);
            if (rp[r + 1] < rp[r] || (h + r == 0 && rp[0] != 0)) return ACCEL_ERR_INVALID;
            for (int32_t e = rp[r]; e < rp[r + 1]; e++)
                if (col[e] < 0 || col[e] > r || (e > rp[r] && col[e] <= col[e - 1]))
                    return ACCEL_ERR_INVALID;
            if (r == nb - 1 && h + 1 < n_heads && row_ptr[(size_t)(h + 1) * (nb + 1)] != rp[nb])
                return ACCEL_ERR_INVALID;
        }
    const size_t nnz = (size_t)row_ptr[(size_t)n_heads * (nb + 1) - 1];
    const bool split = kernel > 100 && kernel <= 100 + 1024;
    const bool ws = (kernel >= 1 && kernel <= 3) || split;
    if (!ws && kernel != 4 && kernel != 8) return ACCEL_ERR_INVALID;
    if (ws) {
        int sm90 = gpu_attn_sm90_available(0);
        if (sm90 < 0) return sm90;
        if (!sm90 || hd != 128) return ACCEL_ERR_UNSUPPORTED;
    }
    gpu_dims d = dims_of(n_heads, n_kv, hd, 0);
    std::vector<float> kc((size_t)n * d.kvd), vc((size_t)n * d.kvd);
    for (int p = 0; p < n; p++)
        for (int g = 0; g < n_kv; g++)
            for (int i = 0; i < hd; i++) {
                kc[((size_t)g * cap + p) * hd + i] = k[(size_t)p * d.kvd + g * hd + i];
                vc[((size_t)g * cap + p) * hd + i] = v[(size_t)p * d.kvd + g * hd + i];
            }
    scratch s;
    h16 *dq, *dk, *dv, *dout;
    int32_t *drp, *dcol;
    GPU_TRY(s.half(&dq, q, (size_t)T * d.qd));
    GPU_TRY(s.half(&dk, kc.data(), kc.size()));
    GPU_TRY(s.half(&dv, vc.data(), vc.size()));
    GPU_TRY(s.alloc(&dout, (size_t)T * d.qd));
    GPU_TRY(s.alloc(&drp, (size_t)n_heads * (nb + 1)));
    GPU_TRY(s.alloc(&dcol, nnz));
    GPU_CHECK(cudaMemcpy(drp, row_ptr, sizeof(int32_t) * n_heads * (nb + 1), cudaMemcpyHostToDevice));
    if (nnz) GPU_CHECK(cudaMemcpy(dcol, col, sizeof(int32_t) * nnz, cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(dout, 0xff, (size_t)T * d.qd * 2)); /* poison: NaN where not written */
    gpu_block_list bl = {drp, dcol, nb};
    gpu_attn_split sp = {};
    if (split) GPU_TRY(split_ws(s, kernel, T, n_heads, &sp));
    if (ws)
        GPU_TRY(gpu_attn_prefill_ws_ex(0, &d, T, pos0, dq, dk, dv, (size_t)hd, (size_t)cap * hd, 0,
                                       &bl, dout, split ? 0 : kernel - 1, nullptr, split ? &sp : nullptr));
    else
        GPU_TRY(gpu_attn_prefill_ex(0, &d, T, pos0, dq, dk, dv, (size_t)hd, (size_t)cap * hd, 0,
                                    &bl, dout, kernel));
    GPU_CHECK(cudaDeviceSynchronize());
    return get_half(out, dout, (size_t)T * d.qd);
}

int gpu_test_kv_quantize(int dtype, int T, int n_kv, int hd, const float *x, unsigned char *q,
                         unsigned short *scales)
{
    GPU_TRY(ready());
    enum proto_kv_dtype t = (enum proto_kv_dtype)dtype;
    if (t != PROTO_KV_INT8 && t != PROTO_KV_INT4) return ACCEL_ERR_INVALID;
    size_t vb = proto_kv_value_bytes(t, T, n_kv, hd), ns = proto_kv_scale_count(t, T, n_kv, hd);
    scratch s;
    float *dx;
    unsigned char *dq;
    unsigned short *ds;
    GPU_TRY(s.f32(&dx, x, (size_t)T * n_kv * hd));
    GPU_TRY(s.alloc(&dq, vb));
    GPU_TRY(s.alloc(&ds, ns));
    GPU_TRY(gpu_kv_quantize(0, t, dx, T, n_kv, hd, dq, ds));
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaMemcpy(q, dq, vb, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(scales, ds, ns * 2, cudaMemcpyDeviceToHost));
    return ACCEL_OK;
}

/* Median time (ms) of a tiled prefill attention kernel (variant 0: mma.sync 4 warps, 2: mma.sync
 * 8 warps, 3..6: the wgmma kernels as in gpu_test_attention) for a causal T-token prompt on random h16 inputs (uniform in +-1). */
__global__ void k_fill_random(h16 *p, size_t n, unsigned seed)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)(i * 2654435761u) ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = h16_from(((h >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f);
}

int gpu_bench_attention(int variant, int T, int n_heads, int n_kv, int hd, int reps, double *ms)
{
    GPU_TRY(ready());
    gpu_dims d = dims_of(n_heads, n_kv, hd, 0);
    scratch s;
    h16 *dq, *dk, *dv, *dout;
    size_t nq = (size_t)T * d.qd, nk = (size_t)T * d.kvd;
    GPU_TRY(s.alloc(&dq, nq));
    GPU_TRY(s.alloc(&dk, nk));
    GPU_TRY(s.alloc(&dv, nk));
    GPU_TRY(s.alloc(&dout, nq));
    k_fill_random<<<(unsigned)((nq + 255) / 256), 256>>>(dq, nq, 1);
    k_fill_random<<<(unsigned)((nk + 255) / 256), 256>>>(dk, nk, 2);
    k_fill_random<<<(unsigned)((nk + 255) / 256), 256>>>(dv, nk, 3);
    GPU_LAUNCHED();
    cudaEvent_t a, b;
    GPU_CHECK(cudaEventCreate(&a));
    GPU_CHECK(cudaEventCreate(&b));
    std::vector<float> t(reps > 0 ? reps : 1);
    const bool wg = variant >= 3 && variant <= 6;
    int sm90 = wg ? gpu_attn_sm90_available(0) : 0;
    if (sm90 < 0) return sm90;
    if (wg && (!sm90 || hd > 128)) return ACCEL_ERR_UNSUPPORTED;
    auto run = [&]() {
        return wg ? gpu_attn_prefill_sm90_ex(0, &d, T, 0, dq, dk, dv, T, dout, sm90_variant(variant))
                            : gpu_attn_prefill(0, &d, T, 0, dq, dk, dv, T, dout, variant == 2 ? 8 : 4);
    };
    int st = run(); /* warm-up */
    for (int r = 0; !st && r < (int)t.size(); r++) {
        cudaEventRecord(a);
        st = run();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t[r], a, b);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    GPU_CHECK(cudaDeviceSynchronize());
    if (st) return st;
    std::sort(t.begin(), t.end());
    *ms = t[t.size() / 2];
    return ACCEL_OK;
}

/* Median time (ms) of the warp-specialized prefill attention for a chunk of T rows after pos0
 * cached keys (random h16 inputs, the cache layout with cap = pos0 + T), the engine's dense chunk
 * call: splits 0 none, -1 the automatic choice with the engine's workspace bound, z >= 1 exactly
 * z. *used: the splits it took. ACCEL_ERR_UNSUPPORTED without wgmma. */
int gpu_bench_attention_chunk(int splits, int T, int pos0, int n_heads, int n_kv, int reps,
                              double *ms, int *used)
{
    GPU_TRY(ready());
    int sm90 = gpu_attn_sm90_available(0);
    if (sm90 < 0) return sm90;
    if (!sm90) return ACCEL_ERR_UNSUPPORTED;
    gpu_dims d = dims_of(n_heads, n_kv, 128, 0);
    const int cap = pos0 + T, sms = sms_of_device0();
    scratch s;
    h16 *dq, *dk, *dv, *dout;
    size_t nq = (size_t)T * d.qd, nk = (size_t)cap * d.kvd;
    GPU_TRY(s.alloc(&dq, nq));
    GPU_TRY(s.alloc(&dk, nk));
    GPU_TRY(s.alloc(&dv, nk));
    GPU_TRY(s.alloc(&dout, nq));
    k_fill_random<<<(unsigned)((nq + 255) / 256), 256>>>(dq, nq, 1);
    k_fill_random<<<(unsigned)((nk + 255) / 256), 256>>>(dk, nk, 2);
    k_fill_random<<<(unsigned)((nk + 255) / 256), 256>>>(dv, nk, 3);
    GPU_LAUNCHED();
    gpu_attn_split sp = {nullptr, nullptr, 0, sms, splits > 0 ? splits : 0};
    sp.rows = gpu_attn_split_rows(sms);
    if (splits > 0) {
        size_t need = (size_t)splits * n_heads * ((T + 127) / 128) * 128;
        if (need > sp.rows) sp.rows = need;
    }
    GPU_TRY(s.alloc(&sp.o, sp.rows * 128));
    GPU_TRY(s.alloc(&sp.ml, sp.rows));
    *used = splits == 0 ? 1 : gpu_attn_split_count(&sp, &d, T, pos0);
    const gpu_attn_split *use = splits == 0 ? nullptr : &sp;
    cudaEvent_t a, b;
    GPU_CHECK(cudaEventCreate(&a));
    GPU_CHECK(cudaEventCreate(&b));
    std::vector<float> t(reps > 0 ? reps : 1);
    auto run = [&]() { return gpu_attn_prefill_ws(0, &d, T, pos0, dq, dk, dv, cap, dout, 0, nullptr, use); };
    int st = run(); /* warm-up */
    for (int r = 0; !st && r < (int)t.size(); r++) {
        cudaEventRecord(a);
        st = run();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t[r], a, b);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    GPU_CHECK(cudaDeviceSynchronize());
    if (st) return st;
    std::sort(t.begin(), t.end());
    *ms = t[t.size() / 2];
    return ACCEL_OK;
}

/* gpu_argmax_rows (gpu/logits.cu) on rows x V float32 logits */
int gpu_test_argmax(int rows, int V, const float *x, int32_t *out)
{
    GPU_TRY(ready());
    scratch s;
    float *dx;
    int32_t *dout;
    GPU_TRY(s.f32(&dx, x, (size_t)rows * V));
    GPU_TRY(s.alloc(&dout, (size_t)rows));
    GPU_TRY(gpu_argmax_rows(0, dx, rows, V, dout));
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaMemcpy(out, dout, (size_t)rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
    return ACCEL_OK;
}
