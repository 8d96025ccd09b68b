/* gpu/gemm_tune.cu — the decode batches' projections on the fastest cuBLASLt algorithm, picked
 * by timing at engine open (gemm_tune=1, gpu/tuning.h).
 *
 * cublasGemmEx (gemm.cu) runs cuBLAS's first heuristic guess for a shape. For the decode
 * batches (T = 2 .. GPU_MAX_BATCH rows) the engine asks cuBLASLt's heuristic for up to
 * GT_CANDS algorithms of each projection it runs — qkv, o, gate/up, down and the lm_head (whole,
 * and the column chunks of logits_overlapped) — at each bucket edge of gt_edges, times each one
 * and the default on the model's own weights (every layer's in turn, as a decode step reads
 * them: nothing L2-resident), and keeps a candidate only when it beats the default by GT_MARGIN.
 * A call with T rows takes the pick of the smallest edge >= T, after cublasLtMatmulAlgoCheck
 * says the algorithm runs at T (once per shape and T); everything else (prefill passes over
 * GPU_MAX_BATCH rows, unaligned pointers, shapes not tuned, T = 1) stays on cublasGemmEx. The
 * buckets whose sizes all go to the small-T kernel (gemm_small=N, gpu/gemm_small.cuh) are not
 * timed.
 *
 * Numerics: the same operands and float32 accumulation; an algorithm may split K (its partial
 * sums then add in another order: not the default's bits, the GPU tests bound the difference).
 * The heuristic is asked only for reductions in float32 outside the output (no in-place split-K
 * reduction, none in h16: the engine's "no reduced-precision reductions"). Repeated calls of
 * one algorithm give the same bits (tested), so one engine is deterministic step to step.
 *
 * Cost: at open, about (candidates + 2) x 3 passes over the layers' projections per edge: 2.0 s
 * for the Llama-3-8B shape on an H200, milliseconds for the test models. What it buys there
 * (BENCHMARKS.md, 2026-11-28-kvdec3): 1-2 % a step at batch 64-128, nothing at 256, where every
 * candidate is within 3 % of the default (the heuristic's own first guess is already its best). */
#include "gpu/engine.cuh"
#include <cublasLt.h>
#include <stdlib.h>

#define GT_SHAPES 8      /* qkv, o, gate/up, down, lm_head, two lm_head chunk widths (+1) */
#define GT_CANDS 16      /* heuristic candidates asked for per shape and edge */
#define GT_MARGIN 0.97   /* a candidate replaces the default when at most this fraction of it */
#define GT_ALIGN 256     /* pointer alignment the heuristic assumes (its default preference) */
static const int gt_edges[] = {8, 16, 32, 64, 128, 192, 256};
#define GT_BUCKETS ((int)(sizeof gt_edges / sizeof gt_edges[0]))

enum gt_kind { GT_QKV, GT_O, GT_GU, GT_DOWN, GT_LM };
static const char *const gt_names[] = {"qkv", "o", "gate/up", "down", "lm_head"};

struct gt_shape {
    int kind, N, K, ldc, out_f32, beta1;
    int from, to; /* the buckets tuned, [from, to) */
};
struct gt_pick {
    int use; /* 1: algo, 0: the default */
    cublasLtMatmulAlgo_t algo;
    float us_def, us_best; /* per call */
    int cands;
};
struct gpu_gemm_picks {
    cublasLtHandle_t lt;
    cublasLtMatmulDescOpaque_t op;
    int n_shapes;
    gt_shape shape[GT_SHAPES];
    gt_pick pick[GT_SHAPES][GT_BUCKETS];
    unsigned char ok[GT_SHAPES][GPU_MAX_BATCH + 1]; /* 0 unchecked, 1 the pick runs at T, 2 not */
};

#define LT_TRY(call)                                                                               \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) return gpu_cublas_status(s_, #call, __FILE__, __LINE__);  \
    } while (0)

static int op_init(cublasLtMatmulDescOpaque_t *op)
{
    LT_TRY(cublasLtMatmulDescInit(op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    return ACCEL_OK;
}

/* The layouts of out (T, N; rows of ldc) = x (T, K) · W^T (W (N, K) row-major), column-major as
 * cuBLAS sees them: A = W (K x N), B = x (K x T), C = D = out (N x T). */
struct gt_layouts {
    cublasLtMatrixLayoutOpaque_t a, b, c;
};
static int layouts(gt_layouts *l, int T, int N, int K, int ldc, int out_f32)
{
    LT_TRY(cublasLtMatrixLayoutInit(&l->a, GPU_H16_CUDA, K, N, K));
    LT_TRY(cublasLtMatrixLayoutInit(&l->b, GPU_H16_CUDA, K, T, K));
    LT_TRY(cublasLtMatrixLayoutInit(&l->c, out_f32 ? CUDA_R_32F : GPU_H16_CUDA, N, T, ldc));
    return ACCEL_OK;
}

static int lt_matmul(cublasLtHandle_t lt, cublasLtMatmulDescOpaque_t *op, gt_layouts *l,
                     const cublasLtMatmulAlgo_t *algo, const h16 *W, const h16 *x, void *out,
                     float beta, void *ws, size_t ws_bytes, cudaStream_t s)
{
    const float alpha = 1.0f;
    LT_TRY(cublasLtMatmul(lt, op, &alpha, W, &l->a, x, &l->b, &beta, out, &l->c, out, &l->c, algo,
                          ws, ws_bytes, s));
    return ACCEL_OK;
}

/* Up to `want` heuristic candidates for the shape at T (reductions as the header says). */
static int candidates(cublasLtHandle_t lt, cublasLtMatmulDescOpaque_t *op, gt_layouts *l,
                      int out_f32, size_t ws_bytes, cublasLtMatmulHeuristicResult_t *res, int want,
                      int *got)
{
    cublasLtMatmulPreference_t pref;
    *got = 0;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (out_f32) mask |= CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE; /* float32 = the compute type */
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &mask, sizeof mask);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt, op, &l->a, &l->b, &l->c, &l->c, pref, want, res, got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) { /* no algorithm for this shape: the default only */
        *got = 0;
        return ACCEL_OK;
    }
    LT_TRY(s);
    int n = 0;
    for (int i = 0; i < *got; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws_bytes) res[n++] = res[i];
    *got = n;
    return ACCEL_OK;
}

static int default_gemm(gpu_engine *e, int T, const gt_shape &s, const h16 *W, const h16 *x, void *out)
{
    const float alpha = 1.0f, beta = s.beta1 ? 1.0f : 0.0f;
    GPU_CUBLAS(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, T, s.K, &alpha, W, GPU_H16_CUDA,
                            s.K, x, GPU_H16_CUDA, s.K, &beta, out,
                            s.out_f32 ? CUDA_R_32F : GPU_H16_CUDA, s.ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    return ACCEL_OK;
}

/* The operands a shape reads and writes at open (the engine's own workspace, nothing live yet):
 * layer l's weight, the activation buffer of that projection, its output. */
static void operands(gpu_engine *e, const gt_shape &s, int l, const h16 **W, const h16 **x, void **out)
{
    const gpu_layer_w &w = e->layers[l];
    switch (s.kind) {
    case GT_QKV: *W = w.w_qkv, *x = e->xb, *out = e->qkv; break;
    case GT_O: *W = w.w_o, *x = e->att, *out = e->x; break;
    case GT_GU: *W = w.w_gu, *x = e->xb, *out = e->gu; break;
    case GT_DOWN: *W = w.w_down, *x = e->h, *out = e->x; break;
    default: *W = e->lm_head, *x = e->xn, *out = e->logits; break;
    }
}

/* us per call of the default (algo NULL) or algo at T: one warm pass, then two timed, each pass a
 * call per layer (the lm_head: 4 calls). */
static int time_us(gpu_engine *e, gpu_gemm_picks *g, const gt_shape &s, int T,
                   const cublasLtMatmulAlgo_t *algo, cudaEvent_t ev[2], double *us)
{
    gt_layouts l;
    GPU_TRY(layouts(&l, T, s.N, s.K, s.ldc, s.out_f32));
    const int per = s.kind == GT_LM ? 4 : e->d.L;
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) GPU_CHECK(cudaEventRecord(ev[0], e->compute));
        for (int i = 0; i < per; i++) {
            const h16 *W, *x;
            void *out;
            operands(e, s, s.kind == GT_LM ? 0 : i, &W, &x, &out);
            if (algo)
                GPU_TRY(lt_matmul(g->lt, &g->op, &l, algo, W, x, out, s.beta1 ? 1.f : 0.f,
                                  e->blas_ws, e->blas_ws_bytes, e->compute));
            else
                GPU_TRY(default_gemm(e, T, s, W, x, out));
        }
    }
    GPU_CHECK(cudaEventRecord(ev[1], e->compute));
    GPU_CHECK(cudaEventSynchronize(ev[1]));
    float ms = 0;
    GPU_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    *us = ms * 1e3 / (2.0 * per);
    return ACCEL_OK;
}

/* Deterministic h16 values in [-1, 1) (the activations' role at open). */
__global__ void k_gt_fill(h16 *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned v = (unsigned)i * 2654435761u ^ seed;
        v ^= v >> 15;
        v *= 0x2c1b3c6du;
        v ^= v >> 12;
        p[i] = h16_from((v & 0xffff) / 32768.0f - 1.0f);
    }
}

static void add_shape(gpu_gemm_picks *g, int kind, int N, int K, int ldc, int out_f32, int beta1,
                      int from, int to)
{
    for (int i = 0; i < g->n_shapes; i++) {
        gt_shape &s = g->shape[i];
        if (s.N == N && s.K == K && s.ldc == ldc && s.out_f32 == out_f32 && s.beta1 == beta1) {
            s.from = from < s.from ? from : s.from; /* one shape in two roles: both ranges */
            s.to = to > s.to ? to : s.to;
            return;
        }
    }
    if (g->n_shapes < GT_SHAPES)
        g->shape[g->n_shapes++] = gt_shape{kind, N, K, ldc, out_f32, beta1, from, to};
}

static int tune(gpu_engine *e, gpu_gemm_picks *g, int log)
{
    const gpu_dims &d = e->d;
    /* the activation buffers hold t_max rows (a decode batch at most that many) */
    const int rows = e->t_max < GPU_MAX_BATCH ? e->t_max : GPU_MAX_BATCH;
    h16 *const fills[] = {e->xb, e->att, e->h, e->xn};
    const size_t counts[] = {(size_t)rows * d.H, (size_t)rows * d.qd, (size_t)rows * d.I,
                             (size_t)GPU_LOGIT_ROWS * d.H};
    for (int i = 0; i < 4; i++) k_gt_fill<<<256, 256, 0, e->compute>>>(fills[i], counts[i], 17u + i);
    GPU_CHECK(cudaGetLastError());
    GPU_CHECK(cudaMemsetAsync(e->x, 0, (size_t)rows * d.H * sizeof(float), e->compute));
    cudaEvent_t ev[2];
    GPU_CHECK(cudaEventCreate(&ev[0]));
    if (cudaEventCreate(&ev[1]) != cudaSuccess) {
        cudaEventDestroy(ev[0]);
        return gpu_cuda_status(cudaGetLastError(), "cudaEventCreate", __FILE__, __LINE__);
    }
    int st = ACCEL_OK, replaced = 0, tuned = 0;
    cublasLtMatmulHeuristicResult_t res[GT_CANDS];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int si = 0; si < g->n_shapes && !st; si++)
        for (int b = g->shape[si].from; b < g->shape[si].to && !st; b++) {
            const gt_shape &s = g->shape[si];
            const int T = gt_edges[b];
            if (T > rows) break;
            if (T <= e->tune.gemm_small) continue; /* every size up to T on gemm_small.cuh */
            gt_pick &p = g->pick[si][b];
            gt_layouts l;
            int got = 0;
            st = layouts(&l, T, s.N, s.K, s.ldc, s.out_f32);
            if (!st) st = candidates(g->lt, &g->op, &l, s.out_f32, e->blas_ws_bytes, res, GT_CANDS, &got);
            double d0 = 0, d1 = 0, best = 1e30;
            int bi = -1;
            if (!st) st = time_us(e, g, s, T, NULL, ev, &d0);
            for (int i = 0; i < got && !st; i++) {
                double us;
                st = time_us(e, g, s, T, &res[i].algo, ev, &us);
                if (!st && us < best) best = us, bi = i;
            }
            if (!st) st = time_us(e, g, s, T, NULL, ev, &d1);
            if (st) break;
            const double def = d0 < d1 ? d0 : d1; /* the default's better run: wins are real */
            p.cands = got;
            p.us_def = (float)def;
            p.us_best = bi >= 0 ? (float)best : (float)def;
            p.use = bi >= 0 && (e->tune.gemm_tune == GPU_GEMM_TUNE_FORCE || best <= GT_MARGIN * def);
            if (p.use) p.algo = res[bi].algo;
            tuned++;
            replaced += p.use;
            if (log)
                fprintf(stderr, "tandem cuda: gemm_tune T=%d %s (N=%d K=%d): default %.1f us, best of %d "
                        "candidates %.1f us (%.0f TFLOP/s)%s\n", T, gt_names[s.kind], s.N, s.K, def,
                        got, p.us_best, 2.0 * T * s.N * s.K / p.us_best / 1e6, p.use ? ", taken" : "");
        }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!st && log)
        fprintf(stderr, "tandem cuda: gemm_tune: %d of %d (size, shape) pairs on a cuBLASLt pick, "
                "%.2f s\n", replaced, tuned, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return st;
}

int gpu_gemm_tune_open(gpu_engine *e)
{
    if (!e->tune.gemm_tune) return ACCEL_OK;
    const gpu_dims &d = e->d;
    gpu_gemm_picks *g = (gpu_gemm_picks *)calloc(1, sizeof *g);
    if (!g) return ACCEL_ERR_NOMEM;
    if (cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return ACCEL_ERR_DEVICE;
    }
    e->gt = g;
    if (op_init(&g->op)) {
        gpu_gemm_tune_free(e);
        return ACCEL_OK;
    }
    add_shape(g, GT_QKV, d.qkv, d.H, d.qkv, 1, 0, 0, GT_BUCKETS);
    add_shape(g, GT_O, d.H, d.qd, d.H, 1, 1, 0, GT_BUCKETS);
    add_shape(g, GT_GU, 2 * d.I, d.H, 2 * d.I, 0, 0, 0, GT_BUCKETS);
    add_shape(g, GT_DOWN, d.H, d.I, d.H, 1, 1, 0, GT_BUCKETS);
    /* the lm_head: whole (every batch when logits_chunks=1, else only those below
     * GPU_LOGIT_CHUNK_MIN: the first edge) and its column chunks (forward.cu logits_overlapped:
     * 64-multiples and a remainder) */
    const int chunks = e->logits_chunks;
    add_shape(g, GT_LM, d.V, d.H, d.V, 1, 0, 0, chunks > 1 ? 1 : GT_BUCKETS);
    if (chunks > 1) {
        const int per = ((d.V + chunks - 1) / chunks + 63) / 64 * 64;
        add_shape(g, GT_LM, per < d.V ? per : d.V, d.H, d.V, 1, 0, 0, GT_BUCKETS);
        if (d.V % per) add_shape(g, GT_LM, d.V % per, d.H, d.V, 1, 0, 0, GT_BUCKETS);
    }
    const int st = tune(e, g, e->tune.gemm_tune == GPU_GEMM_TUNE_LOG);
    if (st) {
        /* not worth failing the open over: every projection stays on cublasGemmEx */
        fprintf(stderr, "tandem cuda:%d: gemm_tune failed (%s); cuBLAS's default algorithms\n",
                e->index, accel_strerror(st));
        cudaGetLastError();
        gpu_gemm_tune_free(e);
    }
    return ACCEL_OK;
}

void gpu_gemm_tune_free(gpu_engine *e)
{
    if (!e->gt) return;
    cublasLtDestroy(e->gt->lt);
    free(e->gt);
    e->gt = NULL;
}

static int aligned(const void *p)
{
    return ((uintptr_t)p % GT_ALIGN) == 0;
}

int gpu_gemm_tuned(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
                   int out_f32, float beta, int ldc)
{
    gpu_gemm_picks *g = e->gt;
    if (!g || T < 2 || T > GPU_MAX_BATCH || (beta != 0.f && beta != 1.f)) return 1;
    int si = 0;
    while (si < g->n_shapes &&
           !(g->shape[si].N == N && g->shape[si].K == K && g->shape[si].ldc == ldc &&
             g->shape[si].out_f32 == out_f32 && g->shape[si].beta1 == (beta != 0.f)))
        si++;
    if (si == g->n_shapes) return 1;
    int b = 0;
    while (gt_edges[b] < T) b++; /* T <= GPU_MAX_BATCH = the last edge */
    const gt_pick &p = g->pick[si][b];
    if (!p.use || !aligned(W) || !aligned(x) || !aligned(out)) return 1;
    gt_layouts l;
    GPU_TRY(layouts(&l, T, N, K, ldc, out_f32));
    unsigned char &ok = g->ok[si][T];
    if (!ok) {
        cublasLtMatmulHeuristicResult_t r;
        ok = cublasLtMatmulAlgoCheck(g->lt, &g->op, &l.a, &l.b, &l.c, &l.c, &p.algo, &r) ==
                         CUBLAS_STATUS_SUCCESS && r.workspaceSize <= e->blas_ws_bytes ? 1 : 2;
    }
    if (ok != 1) return 1;
    return lt_matmul(g->lt, &g->op, &l, &p.algo, W, x, out, beta, e->blas_ws, e->blas_ws_bytes,
                     e->compute);
}

/* ---------------------------------------------------------------- tests (gpu/test/test_api.cu) */

int gpu_gemm_lt_candidate(int T, int N, int K, int ldc, int out_f32, float beta, const h16 *W,
                          const h16 *x, void *out, void *ws, size_t ws_bytes, int cand, int *n_cands,
                          int *splitk)
{
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return ACCEL_ERR_DEVICE;
    cublasLtMatmulDescOpaque_t op;
    gt_layouts l;
    cublasLtMatmulHeuristicResult_t res[GT_CANDS];
    int got = 0;
    int st = op_init(&op);
    if (!st) st = layouts(&l, T, N, K, ldc, out_f32);
    if (!st) st = candidates(lt, &op, &l, out_f32, ws_bytes, res, GT_CANDS, &got);
    *n_cands = got;
    *splitk = 1;
    if (!st && cand >= 0 && cand < got) {
        size_t wr;
        cublasLtMatmulAlgoConfigGetAttribute(&res[cand].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                             splitk, sizeof *splitk, &wr);
        st = lt_matmul(lt, &op, &l, &res[cand].algo, W, x, out, beta, ws, ws_bytes, 0);
    }
    cudaError_t ce = cudaDeviceSynchronize();
    if (!st && ce != cudaSuccess) st = gpu_cuda_status(ce, "gemm candidate", __FILE__, __LINE__);
    cublasLtDestroy(lt);
    return st;
}
