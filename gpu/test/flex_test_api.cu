// gpu/test/flex_test_api.cu — host-array entry points of the FlexPrefill GPU path for tests and
// the benchmark (declared in gpu/gpu_flex.h, found with dlsym in build/libtandem_cuda_test.so,
// the test library beside the plugin: the Makefile): they
// round float inputs to h16 on upload, run on the default device's default stream and copy
// the results back. Device memory is released before returning, also on errors.
#include "gpu/gpu_flex_lastq.cuh"
#include "gpu/engine.cuh"
#include <algorithm>
#include <cxxabi.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define BS GPU_FLEX_BS

namespace {

// Device buffers released at scope exit.
struct dbuf {
    void *p = nullptr;
    ~dbuf()
    {
        if (p) cudaFree(p);
    }
};

int upload_h16(dbuf &d, const float *x, size_t n)
{
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; i++) h[i] = h16_bits_host(x[i]);
    GF_CHECK(cudaMalloc(&d.p, n * sizeof(h16)));
    GF_CHECK(cudaMemcpy(d.p, h.data(), n * sizeof(h16), cudaMemcpyHostToDevice));
    return 0;
}

int upload(dbuf &d, const void *x, size_t bytes)
{
    GF_CHECK(cudaMalloc(&d.p, bytes ? bytes : 16));
    if (bytes) GF_CHECK(cudaMemcpy(d.p, x, bytes, cudaMemcpyHostToDevice));
    return 0;
}

int shape_ok(int n, int H, int Hk, int d)
{
    return n >= 1 && n <= GPU_FLEX_MAX_TOKENS && H >= 1 && H <= GPU_FLEX_MAX_HEADS && Hk >= 1 &&
           H % Hk == 0 && (d == 64 || d == 128);
}

struct ws_guard {
    gpu_flex_ws *w = nullptr;
    ~ws_guard() { gpu_flex_ws_free(w); }
};

// Copies the workspace's index out: row_ptr (H * (nb + 1)), col up to cap, heads (may be NULL).
int copy_index(const gpu_flex_ws *w, int H, int nb, int32_t *row_ptr, int32_t *col, int64_t cap,
               int64_t *nnz, gpu_flex_head *heads)
{
    std::vector<int32_t> rp((size_t)H * (nb + 1));
    GF_CHECK(cudaMemcpy(rp.data(), gpu_flex_ws_row_ptr(w), rp.size() * 4, cudaMemcpyDeviceToHost));
    const int64_t total = rp.back();
    if (nnz) *nnz = total;
    if (row_ptr) memcpy(row_ptr, rp.data(), rp.size() * 4);
    if (col) {
        if (total > cap) return GPU_FLEX_ERR_INVALID;
        GF_CHECK(cudaMemcpy(col, gpu_flex_ws_col(w), (size_t)total * 4, cudaMemcpyDeviceToHost));
    }
    if (heads)
        GF_CHECK(cudaMemcpy(heads, gpu_flex_ws_heads(w), sizeof(gpu_flex_head) * H,
                            cudaMemcpyDeviceToHost));
    return 0;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

} // namespace

// Which last-q kernels the workspaces made from now on run (gpu/gpu_flex_lastq.cuh): 0 the
// mma.sync form (the default), 1 the first WMMA form; for A/B tests and measurements.
extern "C" void gpu_flex_test_set_lastq_legacy(int legacy)
{
    gpu_flex_set_lastq_legacy(legacy);
}

extern "C" int gpu_flex_test_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no driver" state
        return 0;
    }
    return n;
}

extern "C" int gpu_flex_test_index(const float *q, const float *k, int n, int H, int Hk, int d,
                                   const gpu_flex_params *p, int32_t *row_ptr, int32_t *col,
                                   int64_t col_cap, int64_t *nnz, gpu_flex_head *heads)
{
    return gpu_flex_test_index_layout(q, k, n, H, Hk, d, 0, p, row_ptr, col, col_cap, nnz, heads);
}

extern "C" int gpu_flex_test_index_layout(const float *q, const float *k, int n, int H, int Hk,
                                          int d, int head_major, const gpu_flex_params *p,
                                          int32_t *row_ptr, int32_t *col, int64_t col_cap,
                                          int64_t *nnz, gpu_flex_head *heads)
{
    if (!q || !k || !p || !shape_ok(n, H, Hk, d) || n < 2 * BS) return GPU_FLEX_ERR_INVALID;
    dbuf dq, dk;
    ws_guard ws;
    int rc;
    /* head-major as the engine's KV cache: (Hk, cap, d) with cap past n (padding rows unread) */
    const int cap = n + 64;
    std::vector<float> kt;
    if (head_major) {
        kt.assign((size_t)Hk * cap * d, 0.0f);
        for (int j = 0; j < n; j++)
            for (int g = 0; g < Hk; g++)
                memcpy(&kt[((size_t)g * cap + j) * d], k + ((size_t)j * Hk + g) * d, sizeof(float) * d);
    }
    if ((rc = upload_h16(dq, q, (size_t)n * H * d)) ||
        (rc = head_major ? upload_h16(dk, kt.data(), kt.size()) : upload_h16(dk, k, (size_t)n * Hk * d)) ||
        (rc = gpu_flex_ws_new(n, H, Hk, d, &ws.w)))
        return rc;
    rc = head_major ? gpu_flex_index_kv(ws.w, p, dq.p, dk.p, (size_t)d, (size_t)cap * d, n, nullptr)
                    : gpu_flex_index(ws.w, p, dq.p, dk.p, n, nullptr);
    if (rc) return rc;
    GF_CHECK(cudaDeviceSynchronize());
    return copy_index(ws.w, H, (n + BS - 1) / BS, row_ptr, col, col_cap, nnz, heads);
}

extern "C" int gpu_flex_test_attention(const float *q, const float *k, const float *v, int n, int H,
                                       int Hk, int d, const int32_t *row_ptr, const int32_t *col,
                                       int interleave, float *out)
{
    if (!q || !k || !v || !row_ptr || !col || !out || !shape_ok(n, H, Hk, d))
        return GPU_FLEX_ERR_INVALID;
    const int nb = (n + BS - 1) / BS;
    const int64_t nnz = row_ptr[(size_t)H * (nb + 1) - 1];
    dbuf dq, dk, dv, drp, dcol, dout;
    int rc;
    if ((rc = upload_h16(dq, q, (size_t)n * H * d)) || (rc = upload_h16(dk, k, (size_t)n * Hk * d)) ||
        (rc = upload_h16(dv, v, (size_t)n * Hk * d)) ||
        (rc = upload(drp, row_ptr, sizeof(int32_t) * H * (nb + 1))) ||
        (rc = upload(dcol, col, sizeof(int32_t) * nnz)))
        return rc;
    GF_CHECK(cudaMalloc(&dout.p, sizeof(h16) * n * H * d));
    if ((rc = gpu_flex_attention(dq.p, dk.p, dv.p, dout.p, n, H, Hk, d, (const int32_t *)drp.p,
                                 (const int32_t *)dcol.p, interleave, nullptr)))
        return rc;
    GF_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> h((size_t)n * H * d);
    GF_CHECK(cudaMemcpy(h.data(), dout.p, h.size() * sizeof(h16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); i++) out[i] = h16_float_host(h[i]);
    return 0;
}

extern "C" int gpu_flex_bench(const float *q, const float *k, const float *v, int n, int H, int Hk,
                              int d, const gpu_flex_params *p, int reps, int dense,
                              gpu_flex_bench_result *res, int32_t *row_ptr, int32_t *col,
                              int64_t col_cap)
{
    if (!q || !k || !v || !p || !res || !shape_ok(n, H, Hk, d) || n < 2 * BS || reps < 1)
        return GPU_FLEX_ERR_INVALID;
    memset(res, 0, sizeof *res);
    cudaDeviceProp prop;
    GF_CHECK(cudaGetDeviceProperties(&prop, 0));
    snprintf(res->device, sizeof res->device, "%s", prop.name);
    const int nb = (n + BS - 1) / BS;
    dbuf dq, dk, dv, dout, drp, dcol;
    ws_guard ws;
    int rc;
    if ((rc = upload_h16(dq, q, (size_t)n * H * d)) || (rc = upload_h16(dk, k, (size_t)n * Hk * d)) ||
        (rc = upload_h16(dv, v, (size_t)n * Hk * d)) || (rc = gpu_flex_ws_new(n, H, Hk, d, &ws.w)))
        return rc;
    GF_CHECK(cudaMalloc(&dout.p, sizeof(h16) * n * H * d));
    cudaEvent_t e0, e1;
    GF_CHECK(cudaEventCreate(&e0));
    GF_CHECK(cudaEventCreate(&e1));
    std::vector<double> t_index, t_sparse, t_sparse4, t_sparse8, t_ws3, t_dense, t_kernel;
    for (int i = 0; i <= reps && !rc; i++) { // i == 0: warm-up
        cudaEventRecord(e0);
        rc = gpu_flex_index(ws.w, p, dq.p, dk.p, n, nullptr);
        cudaEventRecord(e1);
        if (!rc && cudaEventSynchronize(e1) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i) t_index.push_back(ms);
    }
    for (int i = 0; i <= reps && !rc; i++) {
        cudaEventRecord(e0);
        rc = gpu_flex_attention(dq.p, dk.p, dv.p, dout.p, n, H, Hk, d, gpu_flex_ws_row_ptr(ws.w),
                                gpu_flex_ws_col(ws.w), p->gqa_interleave, nullptr);
        cudaEventRecord(e1);
        if (!rc && cudaEventSynchronize(e1) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i) t_sparse.push_back(ms);
    }
    // the same lists on the mma.sync kernel with 4 and 8 warps (8: 128 query rows per block, one
    // FlexPrefill block, each K/V tile loaded once for all of them), and on the warp-specialized
    // kernel with 3 stages
    gpu_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.n_heads = H, dd.n_kv = Hk, dd.hd = d, dd.hdp = d, dd.qd = H * d, dd.kvd = Hk * d;
    const gpu_block_list bl = {gpu_flex_ws_row_ptr(ws.w), gpu_flex_ws_col(ws.w), nb};
    // which: 4, 8 mma.sync warps; 3 the ws kernel, 3 stages (skipped where it cannot run)
    auto time_kernel = [&](int which, const gpu_block_list *b, std::vector<double> &t) {
        for (int i = 0; i <= reps && !rc; i++) {
            cudaEventRecord(e0);
            if (which == 3)
                rc = gpu_attn_prefill_ws_ex(nullptr, &dd, n, 0, (const h16 *)dq.p, (const h16 *)dk.p,
                                            (const h16 *)dv.p, (size_t)Hk * d, (size_t)d,
                                            p->gqa_interleave, b, (h16 *)dout.p, 2);
            else
                rc = gpu_attn_prefill_ex(nullptr, &dd, n, 0, (const h16 *)dq.p, (const h16 *)dk.p,
                                         (const h16 *)dv.p, (size_t)Hk * d, (size_t)d,
                                         p->gqa_interleave, b, (h16 *)dout.p, which);
            cudaEventRecord(e1);
            if (rc == ACCEL_ERR_UNSUPPORTED) {
                cudaEventSynchronize(e1);
                rc = 0;
                t.clear();
                return;
            }
            if (!rc && cudaEventSynchronize(e1) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (i) t.push_back(ms);
        }
    };
    time_kernel(4, &bl, t_sparse4);
    if (d == 128) time_kernel(8, &bl, t_sparse8);
    if (d == 128 && gpu_flex_ws_here()) time_kernel(3, &bl, t_ws3);
    std::vector<gpu_flex_head> heads(H);
    if (!rc) rc = copy_index(ws.w, H, nb, row_ptr, col, col_cap, &res->nnz, heads.data());
    if (!rc && dense) {
        // every causal block: the same kernel as dense attention
        std::vector<int32_t> frp((size_t)H * (nb + 1)), fcol;
        fcol.reserve((size_t)H * nb * (nb + 1) / 2);
        for (int h = 0; h < H; h++) {
            for (int r = 0; r < nb; r++) {
                frp[(size_t)h * (nb + 1) + r] = (int32_t)fcol.size();
                for (int c = 0; c <= r; c++) fcol.push_back(c);
            }
            frp[(size_t)h * (nb + 1) + nb] = (int32_t)fcol.size();
        }
        if (!(rc = upload(drp, frp.data(), frp.size() * 4)) &&
            !(rc = upload(dcol, fcol.data(), fcol.size() * 4)))
            for (int i = 0; i <= reps && !rc; i++) {
                cudaEventRecord(e0);
                rc = gpu_flex_attention(dq.p, dk.p, dv.p, dout.p, n, H, Hk, d,
                                        (const int32_t *)drp.p, (const int32_t *)dcol.p,
                                        p->gqa_interleave, nullptr);
                cudaEventRecord(e1);
                if (!rc && cudaEventSynchronize(e1) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                if (i) t_dense.push_back(ms);
            }
        // the dense kernel of gpu_flex_attention's family (tile range, no lists) on the same
        // tensors: the warp-specialized one (2 stages, ping-pong, as the engine's dense prefill)
        // where it runs, else mma.sync with 4 warps
        for (int i = 0; i <= reps && !rc; i++) {
            cudaEventRecord(e0);
            rc = ACCEL_ERR_UNSUPPORTED;
            if (d == 128 && gpu_flex_ws_here())
                rc = gpu_attn_prefill_ws_ex(nullptr, &dd, n, 0, (const h16 *)dq.p, (const h16 *)dk.p,
                                            (const h16 *)dv.p, (size_t)Hk * d, (size_t)d,
                                            p->gqa_interleave, nullptr, (h16 *)dout.p, 0);
            if (rc == ACCEL_ERR_UNSUPPORTED)
                rc = gpu_attn_prefill_ex(nullptr, &dd, n, 0, (const h16 *)dq.p, (const h16 *)dk.p,
                                         (const h16 *)dv.p, (size_t)Hk * d, (size_t)d,
                                         p->gqa_interleave, nullptr, (h16 *)dout.p, 4);
            cudaEventRecord(e1);
            if (!rc && cudaEventSynchronize(e1) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (i) t_kernel.push_back(ms);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc) return rc;
    res->index_ms = median(t_index);
    res->sparse_ms = median(t_sparse);
    res->sparse4_ms = median(t_sparse4);
    res->sparse8_ms = median(t_sparse8);
    res->sparse_ws3_ms = median(t_ws3);
    res->dense_ms = median(t_dense);
    res->dense_kernel_ms = median(t_kernel);
    res->density = (double)res->nnz / ((double)H * nb * (nb + 1) / 2);
    for (int h = 0; h < H; h++) res->n_query_aware += heads[h].query_aware;
    return 0;
}

// The query-aware cut and emission on given maps (tests/gpu/test_flex_gpu.c). map:
// S maps of nb x nb values (host); limit as the index passes it; qa[s] says whether map s is a
// query-aware head's (others are skipped: their outputs are left as they are). Out, per map:
// all, bits, take, count of the cut and the kept bits ((nb * nb + 31) / 32 words).
extern "C" int gpu_flex_test_cut(const float *map, int nb, int S, double limit, const int *qa,
                                 int *all, uint32_t *bits, unsigned long long *take,
                                 unsigned long long *count, uint32_t *keep)
{
    if (!map || !qa || nb < 1 || nb > GPU_FLEX_MAX_TOKENS / BS || S < 1 || S > GPU_FLEX_MAX_HEADS)
        return GPU_FLEX_ERR_INVALID;
    const size_t m = (size_t)nb * nb, words = (m + 31) / 32;
    const size_t nblk = gpu_flex_emit_ties(nb);
    float *dmap = NULL;
    gpu_flex_head *dheads = NULL;
    gf_cut *dcuts = NULL;
    void *scratch = NULL;
    int *dties = NULL;
    uint32_t *dkeep = NULL;
    std::vector<gpu_flex_head> heads(S);
    std::vector<gf_cut> cuts(S);
    for (int s = 0; s < S; s++) heads[s] = gpu_flex_head{0, 0, qa[s] != 0, 0.0f};
    int rc = 0;
    cudaError_t e = cudaSuccess;
#define T_TRY(call) if (e == cudaSuccess) e = (call)
    T_TRY(cudaMalloc(&dmap, sizeof(float) * m * S));
    T_TRY(cudaMalloc(&dheads, sizeof(gpu_flex_head) * S));
    T_TRY(cudaMalloc(&dcuts, sizeof(gf_cut) * S));
    T_TRY(cudaMalloc(&scratch, gf_cut_scratch_bytes(S)));
    T_TRY(cudaMalloc(&dties, sizeof(int) * nblk * S));
    T_TRY(cudaMalloc(&dkeep, sizeof(uint32_t) * words * S));
    T_TRY(cudaMemcpy(dmap, map, sizeof(float) * m * S, cudaMemcpyHostToDevice));
    T_TRY(cudaMemcpy(dheads, heads.data(), sizeof(gpu_flex_head) * S, cudaMemcpyHostToDevice));
    for (int s = 0; s < S; s++) {
        cuts[s] = gf_cut{all[s], bits[s], take[s], count[s]};
    }
    T_TRY(cudaMemcpy(dcuts, cuts.data(), sizeof(gf_cut) * S, cudaMemcpyHostToDevice));
    T_TRY(cudaMemcpy(dkeep, keep, sizeof(uint32_t) * words * S, cudaMemcpyHostToDevice));
    if (e == cudaSuccess) {
        rc = gf_cut_run(dmap, NULL, (long long)m, S, 0, limit, dheads, scratch, dcuts, 0);
        if (!rc) rc = gpu_flex_emit(dmap, nb, S, dheads, dcuts, dties, dkeep, 0);
        if (!rc) {
            T_TRY(cudaDeviceSynchronize());
            T_TRY(cudaMemcpy(cuts.data(), dcuts, sizeof(gf_cut) * S, cudaMemcpyDeviceToHost));
            T_TRY(cudaMemcpy(keep, dkeep, sizeof(uint32_t) * words * S, cudaMemcpyDeviceToHost));
        }
    }
#undef T_TRY
    void *ps[] = {dmap, dheads, dcuts, scratch, dties, dkeep};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) cudaFree(ps[i]);
    if (e != cudaSuccess) {
        fprintf(stderr, "gpu_flex_test_cut: %s\n", cudaGetErrorString(e));
        return GPU_FLEX_ERR_DEVICE;
    }
    if (rc) return rc;
    for (int s = 0; s < S; s++) {
        all[s] = cuts[s].all;
        bits[s] = cuts[s].bits;
        take[s] = cuts[s].take;
        count[s] = cuts[s].count;
    }
    return 0;
}

// ---------------------------------------------------------------- a chunk's kernels, one by one
//
// gpu_flex_bench_chunk: FlexPrefill's per-layer work for one chunk of a chunked prefill, as the
// engine's sparse_layers runs it (gpu/prefill_sparse.cu): gpu_flex_index_chunk over the chunk's
// queries and every cached key, then the warp-specialized kernel's block-sparse form over the lists
// with the automatic key split. K and V lie head-major as in the engine's cache ((Hk, n, d); no
// block table). The index is captured once into a CUDA graph (its code unchanged), and the graph's
// nodes are replayed one by one on the stream with an event between each two, so every kernel the
// index launches gets its own time; the replayed index must equal the direct call's (same).

struct gpu_flex_chunk_kernel {
    char name[64];
    unsigned grid[3], block, smem;
    double ms; // median of reps
};
struct gpu_flex_chunk_result {
    double index_ms;  // the whole gpu_flex_index_chunk (events around the call), median
    double replay_ms; // the nodes replayed one by one: first event to last, median
    double sparse_ms; // block-sparse attention of the chunk over the lists (ws kernel, auto split)
    double dense_ms;  // the same kernel dense causal (what dense prefill runs for the chunk)
    long long nnz, causal; // blocks listed for the chunk's rows / causal blocks of those rows
    int n_query_aware, splits, same, nk;
    gpu_flex_chunk_kernel k[64];
    // the other last-q form's index (gpu_flex_lastq.cuh) on the same inputs: blocks in one list
    // and not the other (both ways), heads whose budgets or query-awareness differ, and its time
    long long ab_diff;
    int ab_heads, legacy;
    double ab_index_ms;
};

namespace {

const char *node_name(const void *func, char *buf, size_t cap)
{
    const char *nm = nullptr;
    if (cudaFuncGetName(&nm, func) != cudaSuccess || !nm) {
        cudaGetLastError();
        nm = "?";
    }
    int st = 0;
    char *dm = abi::__cxa_demangle(nm, nullptr, nullptr, &st);
    const char *s = st == 0 && dm ? dm : nm;
    if (!strncmp(s, "void ", 5)) s += 5;
    size_t l = strcspn(s, "(");
    snprintf(buf, cap, "%.*s", (int)(l < cap - 1 ? l : cap - 1), s);
    free(dm);
    return buf;
}

struct events {
    std::vector<cudaEvent_t> e;
    ~events()
    {
        for (cudaEvent_t x : e) cudaEventDestroy(x);
    }
    int make(size_t n)
    {
        while (e.size() < n) {
            cudaEvent_t x;
            GF_CHECK(cudaEventCreate(&x));
            e.push_back(x);
        }
        return 0;
    }
};

struct graph_guard {
    cudaGraph_t g = nullptr;
    cudaStream_t s = nullptr;
    ~graph_guard()
    {
        if (g) cudaGraphDestroy(g);
        if (s) cudaStreamDestroy(s);
    }
};

} // namespace

extern "C" int gpu_flex_bench_chunk(const float *q, const float *k, const float *v, int n, int pos0,
                                    int H, int Hk, int d, const gpu_flex_params *p, int reps,
                                    gpu_flex_chunk_result *res)
{
    if (!q || !k || !v || !p || !res || !shape_ok(n, H, Hk, d) || d != 128 || pos0 < 0 ||
        pos0 % BS || n - pos0 < BS || reps < 1 || reps > 100)
        return GPU_FLEX_ERR_INVALID;
    memset(res, 0, sizeof *res);
    const int T = n - pos0, nb = (n + BS - 1) / BS, q0 = pos0 / BS;
    // K, V head-major as the engine's cache; Q the chunk's rows only
    std::vector<float> kh((size_t)n * Hk * d), vh((size_t)n * Hk * d);
    for (int g = 0; g < Hk; g++)
        for (int j = 0; j < n; j++)
            for (int e = 0; e < d; e++) {
                kh[((size_t)g * n + j) * d + e] = k[((size_t)j * Hk + g) * d + e];
                vh[((size_t)g * n + j) * d + e] = v[((size_t)j * Hk + g) * d + e];
            }
    dbuf dq, dk, dv, dout, so, sml;
    ws_guard ws;
    graph_guard gg;
    int rc;
    if ((rc = upload_h16(dq, q + (size_t)pos0 * H * d, (size_t)T * H * d)) ||
        (rc = upload_h16(dk, kh.data(), kh.size())) || (rc = upload_h16(dv, vh.data(), vh.size())) ||
        (rc = gpu_flex_ws_new(n, H, Hk, d, &ws.w)))
        return rc;
    kh = std::vector<float>();
    vh = std::vector<float>();
    GF_CHECK(cudaMalloc(&dout.p, sizeof(h16) * T * H * d));
    GF_CHECK(cudaStreamCreateWithFlags(&gg.s, cudaStreamNonBlocking));
    cudaStream_t s = gg.s;
    const size_t k_tok = d, k_head = (size_t)n * d;
    auto index = [&]() {
        return gpu_flex_index_chunk(ws.w, p, dq.p, dk.p, k_tok, k_head, nullptr, 0, n, pos0, s);
    };
    events ev;
    if ((rc = ev.make(2))) return rc;
    std::vector<double> t;
    for (int i = 0; i <= reps && !rc; i++) { // i == 0: warm-up
        cudaEventRecord(ev.e[0], s);
        rc = index();
        cudaEventRecord(ev.e[1], s);
        if (!rc && cudaEventSynchronize(ev.e[1]) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
        float ms = 0;
        cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]);
        if (i) t.push_back(ms);
    }
    if (rc) return rc;
    res->index_ms = median(t);
    std::vector<int32_t> rp0((size_t)H * (nb + 1)), rp1(rp0.size());
    GF_CHECK(cudaMemcpy(rp0.data(), gpu_flex_ws_row_ptr(ws.w), rp0.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<int32_t> col0(rp0.back() > 0 ? rp0.back() : 1), col1(col0.size());
    GF_CHECK(cudaMemcpy(col0.data(), gpu_flex_ws_col(ws.w), (size_t)rp0.back() * 4,
                        cudaMemcpyDeviceToHost));
    std::vector<gpu_flex_head> heads(H);
    GF_CHECK(cudaMemcpy(heads.data(), gpu_flex_ws_heads(ws.w), H * sizeof(gpu_flex_head),
                        cudaMemcpyDeviceToHost));
    for (int h = 0; h < H; h++) res->n_query_aware += heads[h].query_aware != 0;
    res->nnz = rp0.back();
    res->causal = (long long)H * ((long long)nb * (nb + 1) / 2 - (long long)q0 * (q0 + 1) / 2);

    // capture, order the nodes (one stream: a chain; Kahn's order all the same), replay one by one
    GF_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    rc = index();
    cudaError_t ce = cudaStreamEndCapture(s, &gg.g);
    if (rc) return rc;
    GF_CHECK(ce);
    size_t nn = 0, ne = 0;
    GF_CHECK(cudaGraphGetNodes(gg.g, nullptr, &nn));
    GF_CHECK(cudaGraphGetEdges(gg.g, nullptr, nullptr, nullptr, &ne));
    if (nn < 1 || nn > 64) return GPU_FLEX_ERR_INVALID;
    std::vector<cudaGraphNode_t> nodes(nn), from(ne ? ne : 1), to(ne ? ne : 1), order;
    GF_CHECK(cudaGraphGetNodes(gg.g, nodes.data(), &nn));
    if (ne) GF_CHECK(cudaGraphGetEdges(gg.g, from.data(), to.data(), nullptr, &ne));
    std::vector<int> indeg(nn, 0), done(nn, 0);
    auto at = [&](cudaGraphNode_t x) {
        return (int)(std::find(nodes.begin(), nodes.end(), x) - nodes.begin());
    };
    for (size_t i = 0; i < ne; i++) indeg[at(to[i])]++;
    while (order.size() < nn) {
        size_t i = 0;
        while (i < nn && (done[i] || indeg[i])) i++;
        if (i == nn) return GPU_FLEX_ERR_INVALID; // a cycle cannot happen
        done[i] = 1;
        order.push_back(nodes[i]);
        for (size_t j = 0; j < ne; j++)
            if (from[j] == nodes[i]) indeg[at(to[j])]--;
    }
    struct step {
        int kernel;
        cudaKernelNodeParams kp;
        cudaMemsetParams mp;
    };
    std::vector<step> steps(nn);
    for (size_t i = 0; i < nn; i++) {
        cudaGraphNodeType ty;
        GF_CHECK(cudaGraphNodeGetType(order[i], &ty));
        step &st = steps[i];
        memset(&st, 0, sizeof st);
        gpu_flex_chunk_kernel &kk = res->k[i];
        if (ty == cudaGraphNodeTypeKernel) {
            st.kernel = 1;
            GF_CHECK(cudaGraphKernelNodeGetParams(order[i], &st.kp));
            node_name(st.kp.func, kk.name, sizeof kk.name);
            kk.grid[0] = st.kp.gridDim.x, kk.grid[1] = st.kp.gridDim.y, kk.grid[2] = st.kp.gridDim.z;
            kk.block = st.kp.blockDim.x * st.kp.blockDim.y * st.kp.blockDim.z;
            kk.smem = st.kp.sharedMemBytes;
        } else if (ty == cudaGraphNodeTypeMemset) {
            GF_CHECK(cudaGraphMemsetNodeGetParams(order[i], &st.mp));
            if (st.mp.elementSize != 1) return GPU_FLEX_ERR_INVALID;
            snprintf(kk.name, sizeof kk.name, "memset");
            kk.grid[0] = (unsigned)(st.mp.width * st.mp.height);
        } else {
            return GPU_FLEX_ERR_INVALID; // the index launches kernels and memsets only
        }
    }
    res->nk = (int)nn;
    if ((rc = ev.make(nn + 1))) return rc;
    std::vector<std::vector<double>> tk(nn);
    t.clear();
    for (int r = 0; r <= reps; r++) {
        cudaEventRecord(ev.e[0], s);
        for (size_t i = 0; i < nn; i++) {
            const step &st = steps[i];
            if (st.kernel)
                GF_CHECK(cudaLaunchKernel(st.kp.func, st.kp.gridDim, st.kp.blockDim, st.kp.kernelParams,
                                          st.kp.sharedMemBytes, s));
            else
                GF_CHECK(cudaMemset2DAsync(st.mp.dst, st.mp.pitch ? st.mp.pitch : st.mp.width,
                                           (int)st.mp.value, st.mp.width, st.mp.height, s));
            cudaEventRecord(ev.e[i + 1], s);
        }
        GF_CHECK(cudaEventSynchronize(ev.e[nn]));
        if (!r) continue;
        for (size_t i = 0; i < nn; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev.e[i], ev.e[i + 1]);
            tk[i].push_back(ms);
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, ev.e[0], ev.e[nn]);
        t.push_back(ms);
    }
    for (size_t i = 0; i < nn; i++) res->k[i].ms = median(tk[i]);
    res->replay_ms = median(t);
    GF_CHECK(cudaMemcpy(rp1.data(), gpu_flex_ws_row_ptr(ws.w), rp1.size() * 4, cudaMemcpyDeviceToHost));
    res->same = rp1 == rp0;
    if (res->same) {
        GF_CHECK(cudaMemcpy(col1.data(), gpu_flex_ws_col(ws.w), (size_t)rp1.back() * 4,
                            cudaMemcpyDeviceToHost));
        res->same = col1 == col0;
    }

    // the other last-q form on the same inputs: its lists against these, and its time
    {
        const int legacy = ws.w ? gpu_flex_ws_lastq_legacy(ws.w) : 0;
        res->legacy = legacy;
        ws_guard w2;
        gpu_flex_set_lastq_legacy(!legacy);
        rc = gpu_flex_ws_new(n, H, Hk, d, &w2.w);
        gpu_flex_set_lastq_legacy(legacy);
        if (rc) return rc;
        t.clear();
        for (int i = 0; i <= reps && !rc; i++) {
            cudaEventRecord(ev.e[0], s);
            rc = gpu_flex_index_chunk(w2.w, p, dq.p, dk.p, k_tok, k_head, nullptr, 0, n, pos0, s);
            cudaEventRecord(ev.e[1], s);
            if (!rc && cudaEventSynchronize(ev.e[1]) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
            float ms = 0;
            cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]);
            if (i) t.push_back(ms);
        }
        if (rc) return rc;
        res->ab_index_ms = median(t);
        std::vector<int32_t> rp2((size_t)H * (nb + 1));
        GF_CHECK(cudaMemcpy(rp2.data(), gpu_flex_ws_row_ptr(w2.w), rp2.size() * 4, cudaMemcpyDeviceToHost));
        std::vector<int32_t> col2(rp2.back() > 0 ? rp2.back() : 1);
        GF_CHECK(cudaMemcpy(col2.data(), gpu_flex_ws_col(w2.w), (size_t)rp2.back() * 4,
                            cudaMemcpyDeviceToHost));
        std::vector<gpu_flex_head> h2(H);
        GF_CHECK(cudaMemcpy(h2.data(), gpu_flex_ws_heads(w2.w), H * sizeof(gpu_flex_head),
                            cudaMemcpyDeviceToHost));
        for (int hh = 0; hh < H; hh++) {
            res->ab_heads += heads[hh].n_vertical != h2[hh].n_vertical ||
                             heads[hh].n_slash != h2[hh].n_slash ||
                             heads[hh].query_aware != h2[hh].query_aware;
            for (int r = 0; r < nb; r++) { // both rows ascending: a merge
                const size_t at = (size_t)hh * (nb + 1) + r;
                int32_t i = rp0[at], j = rp2[at];
                while (i < rp0[at + 1] || j < rp2[at + 1]) {
                    if (j >= rp2[at + 1] || (i < rp0[at + 1] && col0[i] < col2[j])) i++, res->ab_diff++;
                    else if (i >= rp0[at + 1] || col2[j] < col0[i]) j++, res->ab_diff++;
                    else i++, j++;
                }
            }
        }
    }

    // the chunk's attention as sparse_layers runs it: the ws kernel over the lists, key split auto
    if (!gpu_flex_ws_here()) return 0;
    int sms = 0;
    GF_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    gpu_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.n_heads = H, dd.n_kv = Hk, dd.hd = d, dd.hdp = d, dd.qd = H * d, dd.kvd = Hk * d, dd.L = 1;
    gpu_attn_split sp = {nullptr, nullptr, gpu_attn_split_rows(sms), sms, 0};
    GF_CHECK(cudaMalloc(&so.p, sp.rows * 128 * sizeof(float)));
    GF_CHECK(cudaMalloc(&sml.p, sp.rows * sizeof(float2)));
    sp.o = (float *)so.p;
    sp.ml = (float2 *)sml.p;
    res->splits = gpu_attn_split_count(&sp, &dd, T, pos0);
    const gpu_block_list bl = {gpu_flex_ws_row_ptr(ws.w), gpu_flex_ws_col(ws.w), nb};
    for (int which = 0; which < 2 && !rc; which++) {
        t.clear();
        for (int i = 0; i <= reps && !rc; i++) {
            cudaEventRecord(ev.e[0], s);
            rc = gpu_attn_prefill_ws_ex(s, &dd, T, pos0, (const h16 *)dq.p, (const h16 *)dk.p,
                                        (const h16 *)dv.p, k_tok, k_head, p->gqa_interleave,
                                        which ? nullptr : &bl, (h16 *)dout.p, 0, nullptr, &sp);
            cudaEventRecord(ev.e[1], s);
            if (!rc && cudaEventSynchronize(ev.e[1]) != cudaSuccess) rc = GPU_FLEX_ERR_DEVICE;
            float ms = 0;
            cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]);
            if (i) t.push_back(ms);
        }
        (which ? res->dense_ms : res->sparse_ms) = median(t);
    }
    return rc;
}
