// gpu/test/xattn_test_api.cu — timing entry of XAttention's and Tri-shape's GPU paths for the
// benchmark (tools/flex_gpu_bench.c `methods`; found with dlsym in build/libtandem_cuda_test.so):
// host float Q/K/V rounded to h16 on upload, the method's index and the block-sparse attention
// over it (the engine's kernels: the warp-specialized one on Hopper for head_dim 128), and dense
// causal attention of the same kernel family, each the median of `reps` runs (events on one
// stream). XAttention runs over the whole prompt (one sparse chunk, as the scheduler hands a
// whole prompt over); Tri-shape in its chunks of SPARSE_TRI_CHUNK tokens (its index and attention
// summed over them). Device memory is released before returning. For XAttention also the index
// of the sparse part's last 128-token block alone, after the rest (the chunk a chunked prefill
// runs at that depth), with and without the estimate's key splits. fp8 (may be NULL: all 0): per
// parameter set, XAttention's estimate in FP8 (gpu/gpu_xattn_fp8.h: GPU_XATTN_FP8_WS, _WG,
// _WS_RAW); then also the FP8 sets of the
// whole sparse part against the bf16 estimate's on the same inputs: Jaccard, and per (head, query
// block) the share of the bf16 estimate's mass the FP8 set keeps (the lowest; the rows below the
// threshold).
extern "C" { // a C header without guards of its own, first: engine.cuh includes it too
#include "sparse/sparse.h"
}
#include "gpu/engine.cuh"
#include "gpu/gpu_flex_common.cuh"
#include "gpu/gpu_xattn.h"
#include "gpu/gpu_xattn_fp8.h"
#include <algorithm>
#include <string.h>
#include <vector>

extern "C" {
typedef struct gpu_sparse_bench_result {
    double index_ms, attn_ms, dense_ms; // medians; index and attention summed over chunks
    double density;                     // blocks computed / causal blocks of the sparse rows
    long long nnz, causal;
    double last_block_ms[2];            // XAttention: the index of the sparse part's last block
                                        // after the rest is cached ([0]: keys split over CTAs as
                                        // the estimate chooses, [1]: not split); medians
    int fp8_used;                       // the whole part's estimate ran in FP8
    double fp8_jaccard, fp8_kept_min;   // FP8 sets vs bf16 sets; lowest kept share of bf16 mass
    long long fp8_rows_under, fp8_rows; // rows keeping less than the threshold of it; rows
} gpu_sparse_bench_result;
int gpu_sparse_bench(const sparse_params *ps, const int *fp8, int np, const float *q,
                     const float *k, const float *v, int n, int H, int Hk, int d, int reps,
                     gpu_sparse_bench_result *rs);
}

namespace {
struct dmem {
    void *p = nullptr;
    ~dmem()
    {
        if (p) cudaFree(p);
    }
};
int up(dmem &d, const float *x, size_t n)
{
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; i++) h[i] = h16_bits_host(x[i]);
    GF_CHECK(cudaMalloc(&d.p, n * 2));
    GF_CHECK(cudaMemcpy(d.p, h.data(), n * 2, cudaMemcpyHostToDevice));
    return 0;
}
struct ws_hold {
    gpu_xattn_ws *w = nullptr;
    ~ws_hold() { gpu_xattn_ws_free(w); }
};

// Rows pos0 .. pos0 + T - 1 of q against keys 0 .. pos0 + T - 1 (bl NULL: dense causal).
int attn(const h16 *q, const h16 *k, const h16 *v, h16 *out, int T, int pos0, int H, int Hk, int d,
         const gpu_block_list *bl, cudaStream_t st)
{
    gpu_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.n_heads = H;
    dd.n_kv = Hk;
    dd.hd = d;
    dd.hdp = d;
    dd.qd = H * d;
    dd.kvd = Hk * d;
    dd.L = 1;
    if (d == 128 && gpu_flex_ws_here()) {
        int s = gpu_attn_prefill_ws_ex(st, &dd, T, pos0, q, k, v, (size_t)Hk * d, (size_t)d, 0, bl,
                                       out, 0);
        if (s != ACCEL_ERR_UNSUPPORTED) return s;
    }
    return gpu_attn_prefill_ex(st, &dd, T, pos0, q, k, v, (size_t)Hk * d, (size_t)d, 0, bl, out, 4);
}

double median(std::vector<double> t)
{
    std::sort(t.begin(), t.end());
    return t.empty() ? 0 : t[t.size() / 2];
}
} // namespace

static int one(const sparse_params *p, int fp8, const h16 *Q, const h16 *K, const h16 *V, h16 *O,
               int n, int H, int Hk, int d, int reps, gpu_sparse_bench_result *r);

// Each of the np parameter sets on the same inputs (uploaded once).
extern "C" int gpu_sparse_bench(const sparse_params *ps, const int *fp8, int np, const float *q,
                                const float *k, const float *v, int n, int H, int Hk, int d,
                                int reps, gpu_sparse_bench_result *rs)
{
    for (int i = 0; i < np; i++) {
        const sparse_params *p = &ps[i];
        memset(&rs[i], 0, sizeof rs[i]);
        if (p->mode == SPARSE_MODE_FLEX || sparse_params_check(p, NULL, 0, NULL) ||
            (p->mode == SPARSE_MODE_XATTN && p->xattention_block_size != 128))
            return GPU_FLEX_ERR_INVALID;
    }
    if (n < 256 || n > GPU_FLEX_MAX_TOKENS || (d != 64 && d != 128) || H % Hk || reps < 1)
        return GPU_FLEX_ERR_INVALID;
    dmem dq, dk, dv, dout;
    int rc = up(dq, q, (size_t)n * H * d);
    if (!rc) rc = up(dk, k, (size_t)n * Hk * d);
    if (!rc) rc = up(dv, v, (size_t)n * Hk * d);
    if (rc) return rc;
    GF_CHECK(cudaMalloc(&dout.p, (size_t)n * H * d * 2));
    for (int i = 0; i < np && !rc; i++)
        rc = one(&ps[i], fp8 ? fp8[i] : 0, (const h16 *)dq.p, (const h16 *)dk.p, (const h16 *)dv.p, (h16 *)dout.p, n,
                 H, Hk, d, reps, &rs[i]);
    return rc;
}

// The FP8 estimate's sets of the whole sparse part [0, end) against the bf16 estimate's.
static int fp8_vs_bf16(gpu_xattn_ws *w, int fp8, const sparse_params *p, const h16 *Q, const h16 *K,
                       int end, int H, int Hk, int d, cudaStream_t st, gpu_sparse_bench_result *r)
{
    const int nb = (end + 127) / 128;
    std::vector<int32_t> rp[2], col[2];
    std::vector<float> mass((size_t)H * nb * nb);
    for (int pass = 0; pass < 2; pass++) { /* 0: bf16, 1: FP8 */
        gpu_xattn_ws_fp8(w, pass ? fp8 : 0);
        const gpu_xattn_params xp = {p->xattention_threshold, 128, p->xattention_stride, 0, 0};
        int rc = gpu_xattn_index(w, &xp, Q, (size_t)H * d, K, (size_t)Hk * d, (size_t)d, NULL, 0,
                                 end, 0, st);
        if (rc) return rc;
        GF_CHECK(cudaStreamSynchronize(st));
        if (pass == 1) r->fp8_used = gpu_xattn_ws_fp8_used(w);
        rp[pass].resize((size_t)H * (nb + 1));
        GF_CHECK(cudaMemcpy(rp[pass].data(), gpu_xattn_ws_row_ptr(w), rp[pass].size() * 4,
                            cudaMemcpyDeviceToHost));
        col[pass].resize((size_t)rp[pass].back() + 1);
        GF_CHECK(cudaMemcpy(col[pass].data(), gpu_xattn_ws_col(w), (size_t)rp[pass].back() * 4,
                            cudaMemcpyDeviceToHost));
        if (pass == 0)
            GF_CHECK(cudaMemcpy(mass.data(), gpu_xattn_ws_mass(w), mass.size() * 4,
                                cudaMemcpyDeviceToHost));
    }
    long long in = 0, un = 0;
    double low = 1;
    std::vector<uint8_t> a(nb), b(nb);
    for (int h = 0; h < H; h++)
        for (int I = 0; I < nb; I++) {
            std::fill(a.begin(), a.end(), 0);
            std::fill(b.begin(), b.end(), 0);
            for (int s = 0; s < 2; s++) {
                const int32_t *row = rp[s].data() + (size_t)h * (nb + 1);
                for (int32_t e = row[I]; e < row[I + 1]; e++) (s ? b : a)[col[s][e]] = 1;
            }
            const float *m = mass.data() + ((size_t)h * nb + I) * nb;
            double tot = 0, kept = 0;
            for (int J = 0; J <= I; J++) {
                in += a[J] && b[J];
                un += a[J] || b[J];
                tot += m[J];
                kept += b[J] ? m[J] : 0;
            }
            const double share = tot > 0 ? kept / tot : 1;
            if (share < low) low = share;
            r->fp8_rows_under += share < p->xattention_threshold;
            r->fp8_rows++;
        }
    r->fp8_jaccard = un ? (double)in / un : 1;
    r->fp8_kept_min = low;
    gpu_xattn_ws_fp8(w, fp8);
    return 0;
}

static int one(const sparse_params *p, int fp8, const h16 *Q, const h16 *K, const h16 *V, h16 *O,
               int n, int H, int Hk, int d, int reps, gpu_sparse_bench_result *r)
{
    int rc;
    const int xat = p->mode == SPARSE_MODE_XATTN;
    ws_hold w;
    rc = gpu_xattn_ws_new(n, H, Hk, d, 128, xat, &w.w);
    if (rc) return rc;
    if (xat && fp8 && (rc = gpu_xattn_ws_fp8(w.w, fp8)) != 0) return rc;
    cudaStream_t st = 0;
    cudaEvent_t e0, e1, e2;
    GF_CHECK(cudaEventCreate(&e0));
    GF_CHECK(cudaEventCreate(&e1));
    GF_CHECK(cudaEventCreate(&e2));
    // the sparse part: the whole prompt up to sparse_plan's end (the dense tail not timed)
    const int end = sparse_plan(p, n);
    const int nb = (n + 127) / 128;
    std::vector<double> ti, ta, td;
    for (int rep = 0; rep <= reps; rep++) { // rep 0: warm-up
        double si = 0, sa = 0;
        long long nnz = 0, causal = 0;
        for (int pos0 = 0; pos0 < end;) {
            const int len = xat ? end : sparse_chunk_len(p, end, pos0, end);
            const int N = pos0 + len, nbc = (N + 127) / 128, q0 = pos0 / 128;
            GF_CHECK(cudaEventRecord(e0, st));
            if (xat) {
                const gpu_xattn_params xp = {p->xattention_threshold, 128, p->xattention_stride, 0, 0};
                rc = gpu_xattn_index(w.w, &xp, Q + (size_t)pos0 * H * d, (size_t)H * d, K,
                                     (size_t)Hk * d, (size_t)d, NULL, 0, N, pos0, st);
            } else {
                int lo, hi;
                sparse_tri_skip(p, pos0, &lo, &hi);
                rc = gpu_trishape_index(w.w, lo / 128, hi / 128, N, pos0, st);
            }
            if (rc) return rc;
            GF_CHECK(cudaEventRecord(e1, st));
            const gpu_block_list bl = {gpu_xattn_ws_row_ptr(w.w), gpu_xattn_ws_col(w.w), nbc};
            rc = attn(Q + (size_t)pos0 * H * d, K, V, O + (size_t)pos0 * H * d, len, pos0, H, Hk, d,
                      &bl, st);
            if (rc) return rc;
            GF_CHECK(cudaEventRecord(e2, st));
            int32_t last = 0;
            GF_CHECK(cudaMemcpy(&last, gpu_xattn_ws_row_ptr(w.w) + (size_t)H * (nbc + 1) - 1, 4,
                                cudaMemcpyDeviceToHost));
            float a = 0, b = 0;
            GF_CHECK(cudaEventElapsedTime(&a, e0, e1));
            GF_CHECK(cudaEventElapsedTime(&b, e1, e2));
            si += a;
            sa += b;
            nnz += last;
            causal += (long long)H * ((long long)nbc * (nbc + 1) / 2 - (long long)q0 * (q0 + 1) / 2);
            pos0 = N;
        }
        GF_CHECK(cudaEventRecord(e0, st));
        rc = attn(Q, K, V, O, end, 0, H, Hk, d, NULL, st);
        if (rc) return rc;
        GF_CHECK(cudaEventRecord(e1, st));
        GF_CHECK(cudaEventSynchronize(e1));
        float dm = 0;
        GF_CHECK(cudaEventElapsedTime(&dm, e0, e1));
        if (rep > 0) {
            ti.push_back(si);
            ta.push_back(sa);
            td.push_back(dm);
        }
        r->nnz = nnz;
        r->causal = causal;
    }
    (void)nb;
    for (int sv = 0; xat && sv < 2; sv++) { /* the last block after the rest is cached */
        std::vector<double> tc;
        const int pos0 = (end - 1) / 128 * 128;
        for (int rep = 0; rep <= reps; rep++) {
            gpu_xattn_params xp = {p->xattention_threshold, 128, p->xattention_stride, 0, 0, 0};
            xp.key_splits = sv; /* 0: as chosen, 1: none */
            GF_CHECK(cudaEventRecord(e0, st));
            rc = gpu_xattn_index(w.w, &xp, Q + (size_t)pos0 * H * d, (size_t)H * d, K,
                                 (size_t)Hk * d, (size_t)d, NULL, 0, end, pos0, st);
            if (rc) return rc;
            GF_CHECK(cudaEventRecord(e1, st));
            GF_CHECK(cudaEventSynchronize(e1));
            float a = 0;
            GF_CHECK(cudaEventElapsedTime(&a, e0, e1));
            if (rep > 0) tc.push_back(a);
        }
        r->last_block_ms[sv] = median(tc);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(e2);
    r->index_ms = median(ti);
    r->attn_ms = median(ta);
    r->dense_ms = median(td);
    r->density = r->causal ? (double)r->nnz / (double)r->causal : 1.0;
    if (xat && fp8) return fp8_vs_bf16(w.w, fp8, p, Q, K, end, H, Hk, d, st, r);
    return 0;
}
