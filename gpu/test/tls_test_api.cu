/* gpu/test/tls_test_api.cu — AsyncTLS's kernels (gpu/tls_kernels.cu) on host arrays, for
 * tests/gpu/test_tls_gpu.c (dlsym through the test library beside the plugin). One layer of
 * one sequence over a contiguous cache on device 0; every call synchronizes. */
#include "gpu/tls.cuh"
#include <string.h>
#include <vector>

extern "C" {
int gpu_tls_test_device_count(void);
int gpu_tls_test_step(int n_heads, int n_kv, int hd, int n, int bs, int r, int block_budget,
                      int token_budget, int rebuilt, int on, const float *q, const float *k,
                      const float *v, const unsigned short *ch, int32_t *idx, int32_t *cnt,
                      float *att, float *bscore, unsigned long long *counters, int form);
}

int gpu_tls_test_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

namespace {
struct bufs {
    std::vector<void *> v;
    ~bufs()
    {
        for (void *p : v) cudaFree(p);
    }
    template <typename T> int alloc(T **p, size_t n)
    {
        GPU_CHECK(cudaMalloc((void **)p, (n ? n : 1) * sizeof(T)));
        GPU_CHECK(cudaMemset(*p, 0, (n ? n : 1) * sizeof(T)));
        v.push_back(*p);
        return ACCEL_OK;
    }
};

int to_half(h16 *dst, const float *src, size_t n)
{
    std::vector<unsigned short> h(n);
    for (size_t i = 0; i < n; i++) h[i] = h16_bits_host(src[i]);
    GPU_CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
    return ACCEL_OK;
}
} // namespace

/* Keys 0 .. n-1 of one layer: K, V (n, n_kv, hd) token-major, q (n_heads, hd) the query of the
 * last position, ch (n_kv, r). The summaries of positions [0, rebuilt) are rebuilt at once
 * (gpu_tls_rebuild), then the layer runs once per position rebuilt .. n-1 (each step records
 * its newest key, as decode does; the query of every step is q); what the last step gives comes
 * back: idx (n_kv, GPU_TLS_MAX_TOKENS) its lists, cnt (n_kv) their lengths (-n: dense), att
 * (n_heads, hd) the attention output, bscore (n_kv, ceil(n / bs)) the level-1 scores (valid
 * when the blocks exceed block_budget), counters (4) the sequence's counters. on 0: a dense
 * row. form: gpu_tls_attn_layer's (1 the one-kernel form, 2 the three kernels, 3 the three with
 * the selection in CTAs of 512 threads, 4 / 5 the one-kernel form in CTAs of 256 / 512, 6 the
 * one-kernel form in clusters of 2 CTAs of 512). */
int gpu_tls_test_step(int n_heads, int n_kv, int hd, int n, int bs, int r, int block_budget,
                      int token_budget, int rebuilt, int on, const float *q, const float *k,
                      const float *v, const unsigned short *ch, int32_t *idx, int32_t *cnt,
                      float *att, float *bscore, unsigned long long *counters, int form)
{
    if (gpu_tls_test_device_count() < 1) return ACCEL_ERR_NOT_FOUND;
    if (n < 1 || rebuilt < 0 || rebuilt >= n || hd > 128 || hd % 8 || n_heads % n_kv ||
        n_heads / n_kv > GPU_TLS_MAX_GROUP || token_budget > GPU_TLS_MAX_TOKENS ||
        block_budget * bs > GPU_TLS_MAX_CAND || (n + bs - 1) / bs > GPU_TLS_MAX_CAND)
        return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(0));
    GPU_TRY(gpu_tls_kernels_init());
    bufs b;
    const size_t kvd = (size_t)n_kv * hd;
    /* the cache's layout for one layer: (n_kv, cap, hd) per K and V, cap = n */
    std::vector<float> kt(kvd * n), vt(kvd * n);
    for (int p = 0; p < n; p++)
        for (int g = 0; g < n_kv; g++)
            for (int e = 0; e < hd; e++) {
                kt[((size_t)g * n + p) * hd + e] = k[(size_t)p * kvd + (size_t)g * hd + e];
                vt[((size_t)g * n + p) * hd + e] = v[(size_t)p * kvd + (size_t)g * hd + e];
            }
    h16 *dk, *dv, *dq, *dout;
    GPU_TRY(b.alloc(&dk, kvd * n));
    GPU_TRY(b.alloc(&dv, kvd * n));
    GPU_TRY(b.alloc(&dq, (size_t)n_heads * hd));
    GPU_TRY(b.alloc(&dout, (size_t)n_heads * hd));
    GPU_TRY(to_half(dk, kt.data(), kt.size()));
    GPU_TRY(to_half(dv, vt.data(), vt.size()));
    GPU_TRY(to_half(dq, q, (size_t)n_heads * hd));
    gpu_tls_cfg c;
    memset(&c, 0, sizeof c);
    c.L = 1, c.n_heads = n_heads, c.n_kv = n_kv, c.hd = hd, c.bs = bs, c.r = r;
    c.nb_max = (n + bs - 1) / bs;
    GPU_CHECK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned short *dch;
    GPU_TRY(b.alloc(&dch, (size_t)n_kv * r));
    GPU_CHECK(cudaMemcpy(dch, ch, (size_t)n_kv * r * 2, cudaMemcpyHostToDevice));
    c.ch = dch;
    GPU_TRY(b.alloc(&c.bscore, (size_t)n_kv * c.nb_max));
    GPU_TRY(b.alloc(&c.idx, (size_t)n_kv * GPU_TLS_MAX_TOKENS));
    GPU_TRY(b.alloc(&c.cnt_idx, (size_t)n_kv));
    GPU_TRY(b.alloc(&c.po, (size_t)n_heads * GPU_TLS_SPLITS * hd));
    GPU_TRY(b.alloc(&c.pml, (size_t)n_heads * GPU_TLS_SPLITS));
    GPU_TRY(b.alloc(&c.arrive, (size_t)n_kv));
    unsigned char *mem;
    GPU_TRY(b.alloc(&mem, gpu_tls_seq_bytes(c, n)));
    gpu_tls_dev t;
    memset(&t, 0, sizeof t);
    gpu_tls_seq_carve(c, mem, n, &t);
    t.on = on;
    t.block_budget = block_budget;
    t.token_budget = token_budget;
    gpu_seq_dev sq;
    memset(&sq, 0, sizeof sq);
    sq.k = dk, sq.v = dv, sq.cap = n;
    gpu_tls_dev *dt;
    gpu_seq_dev *dsq;
    int *dpos;
    GPU_TRY(b.alloc(&dt, 1));
    GPU_TRY(b.alloc(&dsq, 1));
    GPU_TRY(b.alloc(&dpos, 1));
    GPU_CHECK(cudaMemcpy(dt, &t, sizeof t, cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemcpy(dsq, &sq, sizeof sq, cudaMemcpyHostToDevice));
    GPU_TRY(gpu_tls_rebuild(0, c, sq, t, 0, rebuilt));
    for (int p = rebuilt; p < n; p++) {
        GPU_CHECK(cudaMemcpy(dpos, &p, sizeof p, cudaMemcpyHostToDevice));
        GPU_TRY(gpu_tls_attn_layer(0, c, 0, 1, dq, dpos, dsq, dt, dout, 0, form));
    }
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaMemcpy(idx, c.idx, (size_t)n_kv * GPU_TLS_MAX_TOKENS * 4, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(cnt, c.cnt_idx, (size_t)n_kv * 4, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(bscore, c.bscore, (size_t)n_kv * c.nb_max * 4, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(counters, t.cnt, 4 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<unsigned short> h((size_t)n_heads * hd);
    GPU_CHECK(cudaMemcpy(h.data(), dout, h.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); i++) att[i] = h16_float_host(h[i]);
    return ACCEL_OK;
}

/* The staggered selection (gpu/tls.cuh) over `steps` decode steps of one layer: K, V as above
 * for positions 0 .. n0 + steps - 1, the summaries of [0, n0) rebuilt at once, then step i at
 * position n0 + i with its own query q + i * n_heads * hd: the layer (form as above) with the row
 * staggered (state 1), or restarting (state 2: the first step, and every step with restart[i]
 * set, as a fork or a truncation leaves it), then the next-step launch (gpu_tls_next_layers).
 * Per step: idx (steps, n_kv, GPU_TLS_MAX_TOKENS), cnt (steps, n_kv), att (steps, n_heads, hd). */
extern "C" int gpu_tls_test_stagger(int n_heads, int n_kv, int hd, int n0, int steps, int bs, int r,
                                    int block_budget, int token_budget, const float *q, const float *k,
                                    const float *v, const unsigned short *ch, const int *restart,
                                    int32_t *idx, int32_t *cnt, float *att, int form);
int gpu_tls_test_stagger(int n_heads, int n_kv, int hd, int n0, int steps, int bs, int r,
                         int block_budget, int token_budget, const float *q, const float *k,
                         const float *v, const unsigned short *ch, const int *restart, int32_t *idx,
                         int32_t *cnt, float *att, int form)
{
    if (gpu_tls_test_device_count() < 1) return ACCEL_ERR_NOT_FOUND;
    const int n = n0 + steps;
    if (n0 < 1 || steps < 1 || hd > 128 || hd % 8 || n_heads % n_kv ||
        n_heads / n_kv > GPU_TLS_MAX_GROUP || token_budget > GPU_TLS_MAX_TOKENS ||
        (block_budget + 2) * bs > GPU_TLS_MAX_CAND || (n + bs - 1) / bs > GPU_TLS_MAX_CAND)
        return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(0));
    GPU_TRY(gpu_tls_kernels_init());
    bufs b;
    const size_t kvd = (size_t)n_kv * hd, qd = (size_t)n_heads * hd;
    std::vector<float> kt(kvd * n), vt(kvd * n);
    for (int p = 0; p < n; p++)
        for (int g = 0; g < n_kv; g++)
            for (int e = 0; e < hd; e++) {
                kt[((size_t)g * n + p) * hd + e] = k[(size_t)p * kvd + (size_t)g * hd + e];
                vt[((size_t)g * n + p) * hd + e] = v[(size_t)p * kvd + (size_t)g * hd + e];
            }
    h16 *dk, *dv, *dq, *dout;
    GPU_TRY(b.alloc(&dk, kvd * n));
    GPU_TRY(b.alloc(&dv, kvd * n));
    GPU_TRY(b.alloc(&dq, qd * steps));
    GPU_TRY(b.alloc(&dout, qd));
    GPU_TRY(to_half(dk, kt.data(), kt.size()));
    GPU_TRY(to_half(dv, vt.data(), vt.size()));
    GPU_TRY(to_half(dq, q, qd * steps));
    gpu_tls_cfg c;
    memset(&c, 0, sizeof c);
    c.L = 1, c.n_heads = n_heads, c.n_kv = n_kv, c.hd = hd, c.bs = bs, c.r = r;
    c.nb_max = (n + bs - 1) / bs;
    GPU_CHECK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned short *dch;
    GPU_TRY(b.alloc(&dch, (size_t)n_kv * r));
    GPU_CHECK(cudaMemcpy(dch, ch, (size_t)n_kv * r * 2, cudaMemcpyHostToDevice));
    c.ch = dch;
    GPU_TRY(b.alloc(&c.bscore, (size_t)n_kv * c.nb_max));
    GPU_TRY(b.alloc(&c.idx, (size_t)n_kv * GPU_TLS_MAX_TOKENS));
    GPU_TRY(b.alloc(&c.cnt_idx, (size_t)n_kv));
    GPU_TRY(b.alloc(&c.po, (size_t)n_heads * GPU_TLS_SPLITS * hd));
    GPU_TRY(b.alloc(&c.pml, (size_t)n_heads * GPU_TLS_SPLITS));
    GPU_TRY(b.alloc(&c.arrive, (size_t)n_kv));
    unsigned char *mem;
    GPU_TRY(b.alloc(&mem, gpu_tls_seq_bytes(c, n)));
    gpu_tls_dev t;
    memset(&t, 0, sizeof t);
    gpu_tls_seq_carve(c, mem, n, &t);
    t.on = 1;
    t.block_budget = block_budget;
    t.token_budget = token_budget;
    gpu_seq_dev sq;
    memset(&sq, 0, sizeof sq);
    sq.k = dk, sq.v = dv, sq.cap = n;
    gpu_tls_dev *dt;
    gpu_seq_dev *dsq;
    int *dpos;
    GPU_TRY(b.alloc(&dt, 1));
    GPU_TRY(b.alloc(&dsq, 1));
    GPU_TRY(b.alloc(&dpos, 1));
    GPU_CHECK(cudaMemcpy(dsq, &sq, sizeof sq, cudaMemcpyHostToDevice));
    GPU_TRY(gpu_tls_rebuild(0, c, sq, t, 0, n0));
    std::vector<unsigned short> h(qd);
    for (int i = 0; i < steps; i++) {
        const int p = n0 + i;
        t.stagger = i == 0 || restart[i] ? 2 : 1;
        GPU_CHECK(cudaMemcpy(dt, &t, sizeof t, cudaMemcpyHostToDevice));
        GPU_CHECK(cudaMemcpy(dpos, &p, sizeof p, cudaMemcpyHostToDevice));
        GPU_TRY(gpu_tls_attn_layer(0, c, 0, 1, dq + qd * i, dpos, dsq, dt, dout, 0, form));
        GPU_TRY(gpu_tls_next_layers(0, c, 0, 1, 0, 1, dpos, dt));
        GPU_CHECK(cudaDeviceSynchronize());
        GPU_CHECK(cudaMemcpy(idx + (size_t)i * n_kv * GPU_TLS_MAX_TOKENS, c.idx,
                             (size_t)n_kv * GPU_TLS_MAX_TOKENS * 4, cudaMemcpyDeviceToHost));
        GPU_CHECK(cudaMemcpy(cnt + (size_t)i * n_kv, c.cnt_idx, (size_t)n_kv * 4, cudaMemcpyDeviceToHost));
        GPU_CHECK(cudaMemcpy(h.data(), dout, qd * 2, cudaMemcpyDeviceToHost));
        for (size_t j = 0; j < qd; j++) att[(size_t)i * qd + j] = h16_float_host(h[j]);
    }
    return ACCEL_OK;
}

/* ---------------------------------------------------------------- kernel timings (bench_gpu) */

extern "C" int gpu_tls_bench_kernels(int n_heads, int n_kv, int hd, int n, int bs, int r,
                                     int block_budget, int token_budget, int B, int reps,
                                     double *us);

namespace {
__global__ void fill_k(h16 *x, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        x[i] = h16_from(((h & 0xffff) / 32768.0f - 1.0f) * 0.5f);
    }
}
} // namespace

/* gpu/tls_kernels.cu: clusters of cl CTAs of 512 threads (2 or GPU_TLS_CLUSTER) of the one-kernel
 * form for group width index gi (G <= 4, 8, 16) that run at once on the current device. */
int gpu_tls_fit_clusters(int gi, int cl);

/* One layer on B rows of n keys each (one random cache shared by the rows, each row its own
 * summaries), timed over reps launches back to back: us[0] microseconds per launch of the
 * one-kernel form, us[1] of the three kernels; us[2 .. 2 + GPU_TLS_PHASES) the one-kernel
 * form's phases (gpu_tls_cfg.trace) in one more launch, microseconds after its start; us[13],
 * us[14] the one-kernel form in CTAs of 256 and of 512 threads, us[15 .. 17] the staggered
 * form's (below); us[18] the one-kernel form in clusters of 2 (form 6), us[19] the same
 * staggered, us[20] / us[21] the clusters of 2 / of GPU_TLS_CLUSTER (CTAs of 512) that fit at
 * once; us[22 ..] the phases (as us[2 ..]) of the staggered one-kernel form, then of the one-kernel
 * form in clusters of 2, then of that staggered (us: 22 + 3 x GPU_TLS_PHASES doubles). */
int gpu_tls_bench_kernels(int n_heads, int n_kv, int hd, int n, int bs, int r, int block_budget,
                          int token_budget, int B, int reps, double *us)
{
    if (gpu_tls_test_device_count() < 1) return ACCEL_ERR_NOT_FOUND;
    if (B < 1 || B > 256 || reps < 1 || n < 2 || hd > 128 || n_heads % n_kv ||
        token_budget > GPU_TLS_MAX_TOKENS || (block_budget + 2) * bs > GPU_TLS_MAX_CAND)
        return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(0));
    GPU_TRY(gpu_tls_kernels_init());
    bufs b;
    const size_t kvd = (size_t)n_kv * hd;
    h16 *dk, *dv, *dq, *dout;
    GPU_TRY(b.alloc(&dk, kvd * n));
    GPU_TRY(b.alloc(&dv, kvd * n));
    GPU_TRY(b.alloc(&dq, (size_t)B * n_heads * hd));
    GPU_TRY(b.alloc(&dout, (size_t)B * n_heads * hd));
    fill_k<<<1024, 256>>>(dk, kvd * n, 1);
    fill_k<<<1024, 256>>>(dv, kvd * n, 2);
    fill_k<<<64, 256>>>(dq, (size_t)B * n_heads * hd, 3);
    GPU_LAUNCHED();
    gpu_tls_cfg c;
    memset(&c, 0, sizeof c);
    c.L = 1, c.n_heads = n_heads, c.n_kv = n_kv, c.hd = hd, c.bs = bs, c.r = r;
    c.nb_max = (n + bs - 1) / bs;
    GPU_CHECK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, 0));
    std::vector<unsigned short> ch((size_t)n_kv * r);
    for (int g = 0; g < n_kv; g++)
        for (int i = 0; i < r; i++) ch[(size_t)g * r + i] = (unsigned short)(i * (hd / r));
    unsigned short *dch;
    GPU_TRY(b.alloc(&dch, ch.size()));
    GPU_CHECK(cudaMemcpy(dch, ch.data(), ch.size() * 2, cudaMemcpyHostToDevice));
    c.ch = dch;
    GPU_TRY(b.alloc(&c.bscore, (size_t)B * n_kv * c.nb_max));
    GPU_TRY(b.alloc(&c.idx, (size_t)B * n_kv * GPU_TLS_MAX_TOKENS));
    GPU_TRY(b.alloc(&c.cnt_idx, (size_t)B * n_kv));
    GPU_TRY(b.alloc(&c.po, (size_t)B * n_heads * GPU_TLS_SPLITS * hd));
    GPU_TRY(b.alloc(&c.pml, (size_t)B * n_heads * GPU_TLS_SPLITS));
    GPU_TRY(b.alloc(&c.arrive, (size_t)B * n_kv));
    gpu_seq_dev sq;
    memset(&sq, 0, sizeof sq);
    sq.k = dk, sq.v = dv, sq.cap = n;
    std::vector<gpu_tls_dev> t(B);
    std::vector<gpu_seq_dev> sqs(B, sq);
    std::vector<int> pos(B, n - 1);
    const size_t sb = gpu_tls_seq_bytes(c, n);
    for (int i = 0; i < B; i++) {
        unsigned char *mem;
        GPU_TRY(b.alloc(&mem, sb));
        memset(&t[i], 0, sizeof t[i]);
        gpu_tls_seq_carve(c, mem, n, &t[i]);
        t[i].on = 1, t[i].block_budget = block_budget, t[i].token_budget = token_budget;
        GPU_TRY(gpu_tls_rebuild(0, c, sq, t[i], 0, n - 1));
    }
    gpu_tls_dev *dt;
    gpu_seq_dev *dsq;
    int *dpos;
    GPU_TRY(b.alloc(&dt, B));
    GPU_TRY(b.alloc(&dsq, B));
    GPU_TRY(b.alloc(&dpos, B));
    GPU_CHECK(cudaMemcpy(dt, t.data(), B * sizeof(gpu_tls_dev), cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemcpy(dsq, sqs.data(), B * sizeof(gpu_seq_dev), cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemcpy(dpos, pos.data(), B * sizeof(int), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    GPU_CHECK(cudaEventCreate(&e0));
    GPU_CHECK(cudaEventCreate(&e1));
    static const int forms[5] = {1, 2, 4, 5, 6}, slot[5] = {0, 1, 13, 14, 18};
    for (int fi = 0; fi < 5; fi++) {
        const int form = forms[fi];
        GPU_TRY(gpu_tls_attn_layer(0, c, 0, B, dq, dpos, dsq, dt, dout, 0, form)); /* warm-up */
        GPU_CHECK(cudaEventRecord(e0, 0));
        for (int i = 0; i < reps; i++) GPU_TRY(gpu_tls_attn_layer(0, c, 0, B, dq, dpos, dsq, dt, dout, 0, form));
        GPU_CHECK(cudaEventRecord(e1, 0));
        GPU_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        GPU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        us[slot[fi]] = 1e3 * ms / reps;
    }
    /* the phases of one more launch (gpu_tls_cfg.trace) into dst: the clock at point i after
     * point 0 (-1: not reached) */
    unsigned long long *dtr, tr[GPU_TLS_PHASES];
    GPU_TRY(b.alloc(&dtr, GPU_TLS_PHASES));
    auto trace = [&](int form, double *dst) -> int {
        GPU_CHECK(cudaMemset(dtr, 0, sizeof tr));
        gpu_tls_cfg ct = c;
        ct.trace = dtr;
        GPU_TRY(gpu_tls_attn_layer(0, ct, 0, B, dq, dpos, dsq, dt, dout, 0, form));
        GPU_CHECK(cudaDeviceSynchronize());
        GPU_CHECK(cudaMemcpy(tr, dtr, sizeof tr, cudaMemcpyDeviceToHost));
        for (int i = 0; i < GPU_TLS_PHASES; i++) dst[i] = tr[i] ? 1e-3 * (double)(tr[i] - tr[0]) : -1;
        return ACCEL_OK;
    };
    GPU_TRY(trace(1, us + 2));
    GPU_TRY(trace(6, us + 22 + GPU_TLS_PHASES));
    /* the staggered rows (gpu/tls.cuh): one restarting step saves the query and the next-step
     * launch selects the set, then the layer from the set: us[15] the one-kernel form, us[16]
     * the three kernels, us[17] the next-step launch (this one layer's), us[19] the one-kernel
     * form in clusters of 2 */
    for (int i = 0; i < B; i++) t[i].stagger = 2;
    GPU_CHECK(cudaMemcpy(dt, t.data(), B * sizeof(gpu_tls_dev), cudaMemcpyHostToDevice));
    GPU_TRY(gpu_tls_attn_layer(0, c, 0, B, dq, dpos, dsq, dt, dout, 0, 1));
    GPU_TRY(gpu_tls_next_layers(0, c, 0, 1, 0, B, dpos, dt));
    for (int i = 0; i < B; i++) t[i].stagger = 1;
    GPU_CHECK(cudaMemcpy(dt, t.data(), B * sizeof(gpu_tls_dev), cudaMemcpyHostToDevice));
    static const int sslot[4] = {15, 16, 17, 19};
    for (int fi = 0; fi < 4; fi++) {
        const int form = fi == 0 ? 1 : fi == 3 ? 6 : 2;
        GPU_CHECK(cudaEventRecord(e0, 0));
        for (int i = 0; i < reps; i++)
            GPU_TRY(fi != 2 ? gpu_tls_attn_layer(0, c, 0, B, dq, dpos, dsq, dt, dout, 0, form)
                            : gpu_tls_next_layers(0, c, 0, 1, 0, B, dpos, dt));
        GPU_CHECK(cudaEventRecord(e1, 0));
        GPU_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        GPU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        us[sslot[fi]] = 1e3 * ms / reps;
    }
    GPU_TRY(trace(1, us + 22));
    GPU_TRY(trace(6, us + 22 + 2 * GPU_TLS_PHASES));
    for (int i = 0; i < B; i++) t[i].stagger = 0;
    GPU_CHECK(cudaMemcpy(dt, t.data(), B * sizeof(gpu_tls_dev), cudaMemcpyHostToDevice));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const int G = n_heads / n_kv, gi = G <= 4 ? 0 : G <= 8 ? 1 : 2;
    us[20] = gpu_tls_fit_clusters(gi, 2);
    us[21] = gpu_tls_fit_clusters(gi, GPU_TLS_CLUSTER);
    return ACCEL_OK;
}
