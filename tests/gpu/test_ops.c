/* Each CUDA kernel against its cpu/ reference (tests/ops in DESIGN.md), on the inputs the kernel
 * really sees, in both builds of the plugin (gpu/h16.cuh: bf16 and fp16; each test runs on
 * each): values the GPU reads as h16 are rounded to h16 before the CPU sees them too, so a
 * tolerance only has to cover the GPU's own arithmetic. Tolerances, with their reasons (bf16's;
 * fp16's, with 3 more mantissa bits, 8x smaller where the 16-bit rounding sets them):
 *   h16 outputs (RMSNorm, rope's Q, SwiGLU): one rounding of the value (2^-8 relative; 2^-11),
 *     since the float32 result before rounding agrees to ~1e-6 and may sit on either side of a
 *     rounding boundary; plus 1e-6 absolute for values near zero.
 *   float32 outputs of rope (K, V for export): sincosf is within 2 ulp of glibc's cosf/sinf, two
 *     terms: 1e-5 of the row's largest value.
 *   GEMM (bf16 in, float32 accumulate): the sum order differs (tensor-core tiles, split-K), each
 *     order within ~sqrt(K) * 2^-24 of the exact sum relative to sum |x w|: 2e-5 * sum |x w|
 *     (10x margin), while one wrong element moves the result by ~sum |x w| / K >= 1e-3 of it.
 *   attention: P is rounded to bf16 before P·V (2^-9 relative per weight) while the row sum uses
 *     float32 P, and the output is rounded to bf16: each a convex-combination error of at most
 *     2^-9 * max|v|, so 3 * 2^-9 * max|v| ~ 6e-3, tested at 8e-3 * max|v| (fp16: 3 * 2^-12 ~
 *     7e-4, tested at 1e-3). The inputs make the
 *     softmax peaked (q, k uniform in +-2.6, std 1.5: scores of std ~2.25), so a key wrongly
 *     masked or leaked moves an output by ~0.1 * max|v|, far outside it.
 *   KV quantizer: bit-exact (the reason is in gpu/kv_quant.cu). */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/gpu/gpu_util.h"
#include "cpu/ops.h"
#include "cpu/kv_quant.h"

static model_tensor f32_tensor(const float *data, int64_t rows, int64_t cols)
{
    model_tensor t = {.data = data, .dtype = MODEL_DTYPE_F32, .ndim = cols > 1 ? 2 : 1,
                      .shape = {rows, cols}};
    return t;
}

/* |g - c| <= one rounding of c to the build's h16 (2^-8 relative in bf16, 2^-11 in fp16)
 * + 1e-6 */
static int h16_close(const gpu_ops *ops, float g, float c)
{
    return fabsf(g - c) <= fabsf(c) * (float)ops->ulp + 1e-6f;
}

/* attention's bound as a multiple of max|v| (header): 8e-3 in bf16, 8x less in fp16 */
static double att_tol(const gpu_ops *ops)
{
    return ops->f16 ? 1e-3 : 8e-3;
}

static void op_rmsnorm(const gpu_ops *ops)
{
    const int sizes[][2] = {{5, 4096}, {3, 64}, {2, 4100}};
    for (int s = 0; s < 3; s++) {
        int T = sizes[s][0], H = sizes[s][1];
        float *x = malloc(sizeof(float) * T * H), *w = malloc(sizeof(float) * H);
        float *g = malloc(sizeof(float) * T * H), *c = malloc(sizeof(float) * H);
        tg_fill(x, (size_t)T * H, 3.0f, 1 + s);
        tg_fill(w, H, 0.5f, 7 + s);
        for (int i = 0; i < H; i++) w[i] += 1.0f;
        REQUIRE(ops->rmsnorm(T, H, x, w, 1e-5f, g) == 0);
        model_tensor wt = f32_tensor(w, H, 1);
        int bad = 0;
        for (int t = 0; t < T; t++) {
            cpu_rmsnorm(c, x + (size_t)t * H, &wt, H, 1e-5f);
            for (int i = 0; i < H; i++)
                if (!h16_close(ops, g[(size_t)t * H + i], c[i])) bad++;
        }
        CHECK_MSG(bad == 0, "rmsnorm %dx%d: %d values off", T, H, bad);
        free(x), free(w), free(g), free(c);
    }
}

static void op_rope_llama3(const gpu_ops *ops)
{
    /* Llama-3.1 rope (the largest angles: theta 500000, inv_freq[0] = 1) at positions up to 30K */
    model_config cfg = {0};
    cfg.head_dim = 128;
    cfg.rope_theta = 500000.0f;
    cfg.rope.type = MODEL_ROPE_LLAMA3;
    cfg.rope.factor = 8;
    cfg.rope.low_freq_factor = 1;
    cfg.rope.high_freq_factor = 4;
    cfg.rope.original_max_pos = 8192;
    const int T = 7, nh = 4, nkv = 2, hd = 128, half = hd / 2;
    const int qd = nh * hd, kvd = nkv * hd, W = qd + 2 * kvd;
    const int pos[7] = {0, 1, 17, 511, 4097, 16385, 29999};
    float inv[64], cs[64], sn[64];
    model_rope_inv_freq(&cfg, 0, inv);
    float *qkv = malloc(sizeof(float) * T * W), *bias = malloc(sizeof(float) * W);
    float *q = malloc(sizeof(float) * T * qd), *k = malloc(sizeof(float) * T * kvd);
    float *v = malloc(sizeof(float) * T * kvd), *ref = malloc(sizeof(float) * W);
    tg_fill(qkv, (size_t)T * W, 2.0f, 3);
    tg_fill(bias, W, 0.1f, 4);
    REQUIRE(ops->rope(T, nh, nkv, hd, qkv, bias, pos, inv, q, k, v) == 0);
    int bad_q = 0, bad_kv = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < W; i++) ref[i] = qkv[(size_t)t * W + i] + bias[i];
        model_rope_angles(inv, half, pos[t], cs, sn);
        cpu_rope(ref, nh, hd, cs, sn);
        cpu_rope(ref + qd, nkv, hd, cs, sn);
        float amax = 0;
        for (int i = 0; i < W; i++) amax = fmaxf(amax, fabsf(ref[i]));
        for (int i = 0; i < qd; i++)
            if (!h16_close(ops, q[(size_t)t * qd + i], ref[i])) bad_q++;
        for (int i = 0; i < kvd; i++) {
            if (fabsf(k[(size_t)t * kvd + i] - ref[qd + i]) > 1e-5f * amax) bad_kv++;
            if (fabsf(v[(size_t)t * kvd + i] - ref[qd + kvd + i]) > 1e-5f * amax) bad_kv++;
        }
    }
    CHECK_MSG(bad_q == 0 && bad_kv == 0, "rope: %d q, %d k/v values off", bad_q, bad_kv);
    free(qkv), free(bias), free(q), free(k), free(v), free(ref);
}

static void op_swiglu(const gpu_ops *ops)
{
    const int shapes[][2] = {{3, 14336}, {4, 172}}; /* the 8-wide path and the scalar one */
    for (int s = 0; s < 2; s++) {
        int T = shapes[s][0], I = shapes[s][1];
        float *gu = malloc(sizeof(float) * T * 2 * I), *h = malloc(sizeof(float) * T * I);
        float *g = malloc(sizeof(float) * I), *u = malloc(sizeof(float) * I);
        tg_fill(gu, (size_t)T * 2 * I, 6.0f, 5 + s);
        tg_round(ops, gu, (size_t)T * 2 * I);
        REQUIRE(ops->swiglu(T, I, gu, h) == 0);
        int bad = 0;
        for (int t = 0; t < T; t++) {
            memcpy(g, gu + (size_t)t * 2 * I, sizeof(float) * I);
            memcpy(u, gu + (size_t)t * 2 * I + I, sizeof(float) * I);
            cpu_swiglu(g, u, I);
            for (int i = 0; i < I; i++)
                if (!h16_close(ops, h[(size_t)t * I + i], g[i])) bad++;
        }
        CHECK_MSG(bad == 0, "swiglu %dx%d: %d values off", T, I, bad);
        free(gu), free(h), free(g), free(u);
    }
}

/* The fused decode kernels (gpu/decode_fused.cu) against the unfused chain the engine runs
 * otherwise (RMSNorm, GEMV, rope + cache write, SwiGLU — each checked against cpu/ above): the
 * same bits, on a Llama-3-8B-like head layout, on an odd one (bias, head_dim 64, H not a
 * multiple of the block, items not a multiple of the grid) and on one with more work items than
 * the grid has warps. */
static void op_decode_fused(const gpu_ops *ops)
{
    const struct { int H, nh, nkv, hd, I, pos, bias; } sh[] = {
        {2048, 16, 4, 128, 5632, 1000, 0}, {776, 6, 2, 64, 1000, 0, 1}, {4096, 32, 8, 128, 1024, 70000, 0},
        /* more items than one resident wave has warps (128 heads: 10752 QKV items; I 9000):
         * warps loop over several items each */
        {1024, 128, 8, 128, 9000, 17, 0}};
    for (int c = 0; c < (int)(sizeof sh / sizeof sh[0]); c++) {
        const int H = sh[c].H, hd = sh[c].hd, I = sh[c].I, qd = sh[c].nh * hd, kvd = sh[c].nkv * hd;
        const int qkv = qd + 2 * kvd;
        float *x = malloc(sizeof(float) * H), *an = malloc(sizeof(float) * H),
              *fn = malloc(sizeof(float) * H), *bias = malloc(sizeof(float) * qkv),
              *inv = malloc(sizeof(float) * hd / 2), *wqkv = malloc(sizeof(float) * qkv * H),
              *wgu = malloc(sizeof(float) * 2 * (size_t)I * H);
        float *out[2][4];
        const size_t n_out[4] = {(size_t)qd, (size_t)kvd, (size_t)kvd, (size_t)I};
        for (int f = 0; f < 2; f++)
            for (int o = 0; o < 4; o++) out[f][o] = malloc(sizeof(float) * n_out[o]);
        tg_fill(x, H, 3.0f, 11 + c);
        tg_fill(an, H, 1.5f, 12 + c);
        tg_fill(fn, H, 1.5f, 13 + c);
        tg_fill(bias, qkv, 0.5f, 14 + c);
        tg_fill(wqkv, (size_t)qkv * H, 0.1f, 15 + c);
        tg_fill(wgu, 2 * (size_t)I * H, 0.1f, 16 + c);
        tg_round(ops, wqkv, (size_t)qkv * H);
        tg_round(ops, wgu, 2 * (size_t)I * H);
        for (int i = 0; i < hd / 2; i++) inv[i] = powf(500000.0f, -2.0f * i / hd);
        for (int f = 0; f < 2; f++)
            REQUIRE(ops->decode_fused(f, H, sh[c].nh, sh[c].nkv, hd, I, sh[c].pos, x, an, fn, wqkv,
                                      sh[c].bias ? bias : NULL, inv, wgu, 1e-5f, out[f][0],
                                      out[f][1], out[f][2], out[f][3]) == 0);
        static const char *names[4] = {"q", "k", "v", "h"};
        for (int o = 0; o < 4; o++) {
            size_t diff = 0, nonzero = 0;
            for (size_t i = 0; i < n_out[o]; i++) {
                diff += memcmp(&out[0][o][i], &out[1][o][i], sizeof(float)) != 0;
                nonzero += out[1][o][i] != 0.f;
            }
            CHECK_MSG(diff == 0, "shape %d: fused %s differs in %zu of %zu values", c, names[o],
                      diff, n_out[o]);
            CHECK_MSG(nonzero > n_out[o] / 2, "shape %d: fused %s mostly zero", c, names[o]);
        }
        for (int f = 0; f < 2; f++)
            for (int o = 0; o < 4; o++) free(out[f][o]);
        free(x), free(an), free(fn), free(bias), free(inv), free(wqkv), free(wgu);
    }
}

static void op_gemm(const gpu_ops *ops)
{
    /* T <= 8 with K % 8 == 0 runs the engine's own GEMV, the rest cuBLAS */
    /* T = 1: the test engine counts one SM, so the GEMV's warps loop over many rows */
    const int shapes[][3] = {{3, 300, 1000}, {77, 96, 64}, {1, 513, 172}, {130, 40, 4096},
                             {1, 1000, 4096}, {8, 257, 14336}, {5, 33, 64}, {1, 1001, 2048}};
    for (int s = 0; s < 8; s++) {
        int T = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
        float *g = malloc(sizeof(float) * T * N), *c = malloc(sizeof(float) * T * N);
        tg_fill(x, (size_t)T * K, 1.0f, 11 + s);
        tg_fill(w, (size_t)N * K, 0.05f, 21 + s);
        tg_round(ops, x, (size_t)T * K);
        tg_round(ops, w, (size_t)N * K);
        REQUIRE(ops->gemm(T, N, K, x, w, g) == 0);
        model_tensor wt = f32_tensor(w, N, K);
        cpu_matmul(NULL, c, x, T, &wt, NULL);
        int bad = 0;
        double worst = 0;
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double mag = 0;
                for (int k = 0; k < K; k++) mag += fabs((double)x[(size_t)t * K + k] * w[(size_t)n * K + k]);
                double d = fabs((double)g[(size_t)t * N + n] - c[(size_t)t * N + n]) / (mag + 1e-30);
                if (d > worst || d != d) worst = d;
                if (!(d <= 2e-5)) bad++;
            }
        CHECK_MSG(bad == 0, "gemm %dx%dx%d: %d values off (worst %.3g of sum|xw|)", T, N, K, bad, worst);
        free(x), free(w), free(g), free(c);
    }
}

/* The float64 reference of one output: sum_k x[k] w[k], and its magnitude sum |x[k] w[k]| in *mag
 * (what the GEMM bounds scale with). */
static double ref_dot(const float *x, const float *w, int K, double *mag)
{
    double acc = 0, m = 0;
    for (int k = 0; k < K; k++) {
        const double p = (double)x[k] * w[k];
        acc += p;
        m += fabs(p);
    }
    *mag = m;
    return acc;
}

/* Every cuBLASLt candidate gemm_tune.cu may pick (gpu/gemm_tune.cu: the heuristic's, float32
 * reductions only) on the engine's operand layouts: float32 output with and without the residual
 * add (beta = 1), h16 output, a column range of a wider output (the lm_head chunks: columns past N
 * untouched), and a K long enough for split-K candidates. Each against a float64 reference of the
 * same h16-rounded operands: within 2e-5 of sum |x w| (+ |c|) as op_gemm, plus the output's own
 * rounding (ulp |ref|) for h16; split-K only reorders float32 sums. And each candidate run twice
 * gives the same bits (a tuned engine is deterministic step to step). */
static void op_gemm_candidates(const gpu_ops *ops)
{
    static const struct {
        int T, N, K, ldc, f32, beta;
    } sh[] = {{64, 384, 512, 384, 1, 0},   {200, 256, 1536, 256, 1, 1}, {33, 1000, 512, 1000, 0, 0},
              {130, 464, 512, 2000, 1, 0}, {256, 256, 4096, 256, 1, 1}, {8, 96, 64, 96, 1, 1}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        const int T = sh[s].T, N = sh[s].N, K = sh[s].K, ldc = sh[s].ldc;
        const size_t no = (size_t)T * ldc;
        float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
        float *c = malloc(sizeof(float) * no), *g = malloc(sizeof(float) * no);
        float *g2 = malloc(sizeof(float) * no);
        double *ref = malloc(sizeof(double) * no), *mag = malloc(sizeof(double) * no);
        REQUIRE(x && w && c && g && g2 && ref && mag);
        tg_fill(x, (size_t)T * K, 1.0f, 31 + s);
        tg_fill(w, (size_t)N * K, 0.05f, 41 + s);
        tg_fill(c, no, 2.0f, 51 + s);
        tg_round(ops, x, (size_t)T * K);
        tg_round(ops, w, (size_t)N * K);
        if (!sh[s].f32) tg_round(ops, c, no);
        for (int t = 0; t < T; t++)
            for (int n = 0; n < ldc; n++) {
                double m = 0;
                const size_t o = (size_t)t * ldc + n;
                double acc = n < N ? ref_dot(x + (size_t)t * K, w + (size_t)n * K, K, &m) : 0;
                if (sh[s].beta || n >= N) acc += c[o], m += fabs(c[o]);
                ref[o] = acc;
                mag[o] = m;
            }
        int n_cands = 0, splitk = 1, split_seen = 0;
        REQUIRE(ops->gemm_candidate(T, N, K, ldc, sh[s].f32, sh[s].beta, x, w, c, -1, g, &n_cands,
                                    &splitk) == 0);
        CHECK_MSG(n_cands >= 1, "gemm %dx%dx%d: no cuBLASLt candidate", T, N, K);
        for (int i = 0; i < n_cands; i++) {
            int n2 = 0, sk2 = 1;
            REQUIRE(ops->gemm_candidate(T, N, K, ldc, sh[s].f32, sh[s].beta, x, w, c, i, g, &n_cands,
                                        &splitk) == 0);
            REQUIRE(ops->gemm_candidate(T, N, K, ldc, sh[s].f32, sh[s].beta, x, w, c, i, g2, &n2,
                                        &sk2) == 0);
            split_seen += splitk > 1;
            int bad = 0;
            double worst = 0;
            for (size_t o = 0; o < no; o++) {
                const double d = fabs((double)g[o] - ref[o]);
                const double tol = (sh[s].f32 ? 0 : ops->ulp * fabs(ref[o])) + 2e-5 * mag[o];
                if (d / (mag[o] + 1e-30) > worst || d != d) worst = d / (mag[o] + 1e-30);
                if (!(d <= tol)) bad++;
            }
            CHECK_MSG(bad == 0, "gemm %dx%dx%d ldc %d %s%s, candidate %d (split-K %d): %d values off "
                      "(worst %.3g of sum|xw|)", T, N, K, ldc, sh[s].f32 ? "f32" : "h16",
                      sh[s].beta ? " +c" : "", i, splitk, bad, worst);
            CHECK_MSG(n2 == n_cands && memcmp(g, g2, sizeof(float) * no) == 0,
                      "gemm %dx%dx%d candidate %d: two runs differ", T, N, K, i);
        }
        fprintf(stderr, "  gemm %dx%dx%d ldc %d %s%s: %d cuBLASLt candidates (%d split K) within "
                "bounds\n", T, N, K, ldc, sh[s].f32 ? "f32" : "h16", sh[s].beta ? " +c" : "",
                n_cands, split_seen);
        free(x), free(w), free(c), free(g), free(g2), free(ref), free(mag);
    }
}

/* The small-T projection kernel (gpu/gemm_small.cuh: gpu_gemm with gemm_small=16 takes 2..16
 * rows) against a float64 reference of the same h16-rounded operands, the bound of
 * op_gemm_candidates: 2e-5 of sum |x w| (+ |c| where the residual is added), plus the output's own
 * rounding (ulp |ref|) for h16. Every T of 2..16 on odd small shapes (N not a multiple of the
 * 16-row tile, K not of the 32-wide chunk, K shorter than one chunk per warp; and K % 8 != 0,
 * which it declines for cuBLAS), and each Llama-3-8B
 * projection as the engine calls it (qkv, o + residual, gate/up in h16, down + residual, an
 * lm_head column chunk of a wider output: columns past N untouched) at a few T; on an engine of
 * one SM (each block loops over many tiles) and of 132 (a tile per block). Large shapes check
 * every 37th output feature and the last tile's (37 is prime to the 16-row tile: every position
 * in a tile is checked). Each case run twice gives the same bits. */
static void small_case(const gpu_ops *ops, int T, int N, int K, int ldc, int f32, int beta, int sms,
                       uint32_t seed, int *bad_total)
{
    const size_t no = (size_t)T * ldc;
    float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
    float *c = malloc(sizeof(float) * no), *g = malloc(sizeof(float) * no), *g2 = malloc(sizeof(float) * no);
    REQUIRE(x && w && c && g && g2);
    tg_fill(x, (size_t)T * K, 1.0f, seed);
    tg_fill(w, (size_t)N * K, 0.05f, seed + 1);
    tg_fill(c, no, 2.0f, seed + 2);
    tg_round(ops, x, (size_t)T * K);
    tg_round(ops, w, (size_t)N * K);
    if (!f32) tg_round(ops, c, no);
    REQUIRE(ops->gemm_small(16, sms, T, N, K, ldc, f32, beta, x, w, c, g) == 0);
    REQUIRE(ops->gemm_small(16, sms, T, N, K, ldc, f32, beta, x, w, c, g2) == 0);
    const int step = (size_t)N * K > (1u << 22) ? 37 : 1;
    int bad = 0;
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < ldc; n++) {
            if (n < N && n % step && n < (N - 1) / 16 * 16) continue;
            double m = 0;
            const size_t o = (size_t)t * ldc + n;
            double acc = n < N ? ref_dot(x + (size_t)t * K, w + (size_t)n * K, K, &m) : 0;
            if (beta || n >= N) acc += c[o], m += fabs(c[o]);
            const double d = fabs((double)g[o] - acc);
            const double tol = (f32 ? 0 : ops->ulp * fabs(acc)) + 2e-5 * m;
            if (d / (m + 1e-30) > worst || d != d) worst = d / (m + 1e-30);
            if (!(d <= tol)) bad++;
        }
    CHECK_MSG(bad == 0, "gemm_small T=%d %dx%d ldc %d %s%s sms %d: %d values off (worst %.3g of sum|xw|)",
              T, N, K, ldc, f32 ? "f32" : "h16", beta ? " +c" : "", sms, bad, worst);
    CHECK_MSG(memcmp(g, g2, sizeof(float) * no) == 0, "gemm_small T=%d %dx%d: two runs differ", T, N, K);
    *bad_total += bad;
    free(x), free(w), free(c), free(g), free(g2);
}

static void op_gemm_small(const gpu_ops *ops)
{
    static const struct {
        int N, K, ldc, f32, beta;
    } odd[] = {{1, 8, 1, 1, 0}, {17, 40, 17, 1, 1}, {33, 1000, 33, 0, 0}, {100, 4104, 100, 1, 1},
               {40, 64, 96, 1, 0},
               /* the shapes gemm_small declines for K not a multiple of 8 (cuBLAS takes them,
                * gpu/gemm.cu); an h16 output plus the residual, which it declines too, is no call
                * the engine makes (cuBLAS was up to 0.003 of sum |x w| off there, past this
                * bound: tests/gpu/logs/2026-11-29-lead8) */
               {24, 36, 24, 1, 1}, {20, 44, 20, 0, 0}};
    int bad = 0;
    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
        for (int T = 2; T <= 16; T++)
            small_case(ops, T, odd[s].N, odd[s].K, odd[s].ldc, odd[s].f32, odd[s].beta, T % 2 ? 132 : 0,
                       (uint32_t)(100 + 20 * s + T), &bad);
    static const struct {
        int T, N, K, ldc, f32, beta;
    } l3[] = {{2, 6144, 4096, 6144, 1, 0},      {8, 6144, 4096, 6144, 1, 0},
              {3, 4096, 4096, 4096, 1, 1},      {16, 4096, 4096, 4096, 1, 1},
              {8, 28672, 4096, 28672, 0, 0},    {13, 28672, 4096, 28672, 0, 0},
              {4, 4096, 14336, 4096, 1, 1},     {8, 4096, 14336, 4096, 1, 1},
              {11, 4096, 14336, 4096, 1, 1},    {8, 8064, 4096, 32128, 1, 0}};
    for (size_t s = 0; s < sizeof l3 / sizeof l3[0]; s++)
        small_case(ops, l3[s].T, l3[s].N, l3[s].K, l3[s].ldc, l3[s].f32, l3[s].beta, s % 2 ? 0 : 132,
                   (uint32_t)(400 + 7 * s), &bad);
    fprintf(stderr, "  gemm_small (%s): %zu odd shapes x T 2..16, %zu Llama-3-8B cases: %d values off\n",
            ops->h16(), sizeof odd / sizeof odd[0], sizeof l3 / sizeof l3[0], bad);
}

/* gate/up + SwiGLU in the small-T kernel (gpu_gemm_swiglu: forward.cu's MLP at 2..gemm_small
 * rows) against float64: g and u as op_gemm_small (within 2e-5 of their sum |x w|), each then
 * rounded to h16 as the unfused chain's gate/up buffer is (a sum on a rounding boundary may round
 * either way: one h16 step, ulp |g|), then silu(g) u rounded once more. The bound adds those
 * errors through the derivatives (|d silu/dg| <= 1.1): 1.1 |u| dg + |silu(g)| du + ulp |h|, x 2.
 * Llama-3-8B's shape (I 14336, K 4096) at T 2, 8, 16 (a sample of 37th features as above) and
 * odd shapes at every T; on one SM and on 132. */
static void swiglu_case(const gpu_ops *ops, int T, int I, int K, int sms, uint32_t seed, int *bad_total)
{
    float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * 2 * I * K);
    float *h = malloc(sizeof(float) * T * I);
    REQUIRE(x && w && h);
    tg_fill(x, (size_t)T * K, 1.0f, seed);
    tg_fill(w, (size_t)2 * I * K, 0.05f, seed + 1);
    tg_round(ops, x, (size_t)T * K);
    tg_round(ops, w, (size_t)2 * I * K);
    REQUIRE(ops->gemm_swiglu(16, sms, T, I, K, x, w, h) == 0);
    const int step = (size_t)I * K > (1u << 22) ? 37 : 1;
    int bad = 0;
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < I; i++) {
            if (i % step && i < (I - 1) / 16 * 16) continue;
            double gu[2], mag[2];
            for (int p = 0; p < 2; p++) gu[p] = ref_dot(x + (size_t)t * K, w + ((size_t)p * I + i) * K, K, &mag[p]);
            const double g = gu[0], u = gu[1], silu = g / (1 + exp(-g)), ref = silu * u;
            const double dg = 2e-5 * mag[0] + ops->ulp * fabs(g), du = 2e-5 * mag[1] + ops->ulp * fabs(u);
            const double tol = 2 * (1.1 * fabs(u) * dg + fabs(silu) * du + ops->ulp * fabs(ref)) + 1e-6;
            const double d = fabs((double)h[(size_t)t * I + i] - ref);
            if (d / tol > worst || d != d) worst = d / tol;
            if (!(d <= tol)) bad++;
        }
    CHECK_MSG(bad == 0, "gemm_swiglu T=%d I=%d K=%d sms %d: %d values off (worst %.3g of the bound)", T,
              I, K, sms, bad, worst);
    *bad_total += bad;
    free(x), free(w), free(h);
}

static void op_gemm_swiglu(const gpu_ops *ops)
{
    int bad = 0;
    static const int odd[][2] = {{17, 40}, {100, 4104}, {8, 64}};
    for (int s = 0; s < 3; s++)
        for (int T = 2; T <= 16; T++)
            swiglu_case(ops, T, odd[s][0], odd[s][1], T % 2 ? 132 : 0, (uint32_t)(700 + 20 * s + T), &bad);
    swiglu_case(ops, 2, 14336, 4096, 132, 801, &bad);
    swiglu_case(ops, 8, 14336, 4096, 0, 802, &bad);
    swiglu_case(ops, 16, 14336, 4096, 132, 803, &bad);
    /* one row is the single-token path's: declined (forward.cu then runs the fused T = 1 kernels
     * or gemm + swiglu) */
    float x1[8] = {0}, w1[128] = {0}, h1[8];
    CHECK(ops->gemm_swiglu(16, 0, 1, 8, 8, x1, w1, h1) == ACCEL_ERR_INVALID);
    fprintf(stderr, "  gemm_swiglu (%s): 3 odd shapes x T 2..16, Llama-3-8B at T 2, 8, 16: %d values off\n",
            ops->h16(), bad);
}

struct att_case {
    int kernel, T, pos0, nh, nkv, hd, window;
};

/* keep: where not NULL, the kernel's output is copied there (T x heads x hd); returns 0 where the
 * kernel ran, 1 where it was skipped (no wgmma on this GPU or build) */
static int attention_case_keep(const gpu_ops *ops, const struct att_case *a, uint32_t seed, float *keep)
{
    const int n = a->pos0 + a->T, qd = a->nh * a->hd, kvd = a->nkv * a->hd;
    float *q = malloc(sizeof(float) * a->T * qd), *k = malloc(sizeof(float) * n * kvd);
    float *v = malloc(sizeof(float) * n * kvd), *g = malloc(sizeof(float) * a->T * qd);
    float *scores = malloc(sizeof(float) * n), ref[128];
    tg_fill(q, (size_t)a->T * qd, 2.6f, seed);
    tg_fill(k, (size_t)n * kvd, 2.6f, seed + 1);
    tg_fill(v, (size_t)n * kvd, 1.0f, seed + 2);
    tg_round(ops, q, (size_t)a->T * qd);
    tg_round(ops, k, (size_t)n * kvd);
    tg_round(ops, v, (size_t)n * kvd);
    int st = ops->attention(a->kernel, a->T, a->pos0, a->nh, a->nkv, a->hd, a->window, q, k, v, g);
    if (st == ACCEL_ERR_UNSUPPORTED && a->kernel >= 3) { /* no wgmma on this GPU or build; 11: rows of several ranges here */
        free(q), free(k), free(v), free(g), free(scores);
        return 1;
    }
    if (st != 0) {
        t_fail(__FILE__, __LINE__, "attention kernel %d T=%d pos0=%d: status %d", a->kernel, a->T,
               a->pos0, st);
        free(q), free(k), free(v), free(g), free(scores);
        return 1;
    }
    if (keep) memcpy(keep, g, sizeof(float) * a->T * qd);
    float scale = (float)pow(a->hd, -0.5);
    double worst = 0;
    int group = a->nh / a->nkv;
    for (int t = 0; t < a->T; t++) {
        int pos = a->pos0 + t, first = 0;
        if (a->window > 0 && pos + 1 > a->window) first = pos + 1 - a->window;
        for (int h = 0; h < a->nh; h++) {
            size_t base = (size_t)first * kvd + (size_t)(h / group) * a->hd;
            cpu_attend(ref, q + (size_t)t * qd + h * a->hd, k + base, v + base, pos + 1 - first, kvd,
                       a->hd, scale, scores);
            for (int i = 0; i < a->hd; i++) {
                double d = fabs((double)g[(size_t)t * qd + h * a->hd + i] - ref[i]);
                if (d > worst || d != d) worst = d != d ? INFINITY : d;
            }
        }
    }
    CHECK_MSG(worst <= att_tol(ops), "attention kernel %d T=%d pos0=%d heads %d/%d hd %d window %d: "
              "worst |diff| %.3g > %g", a->kernel, a->T, a->pos0, a->nh, a->nkv, a->hd,
              a->window, worst, att_tol(ops));
    if (a->kernel >= 99)
        fprintf(stderr, "  split kernel %d T=%d pos0=%d heads %d/%d window %d: worst vs cpu %.3g\n",
                a->kernel, a->T, a->pos0, a->nh, a->nkv, a->window, worst);
    free(q), free(k), free(v), free(g), free(scores);
    return 0;
}

static void attention_case(const gpu_ops *ops, const struct att_case *a, uint32_t seed)
{
    attention_case_keep(ops, a, seed, NULL);
}

/* Every case on every tiled kernel: 0 the engine's (mma.sync, 4 warps), 2 mma.sync with 8
 * warps (head_dim 128; else the same as 0), 3..6 the wgmma kernels (gpu/test_api.cu: the
 * engine's choice, one warpgroup, warp-specialized without ping-pong, with 3 stages; Hopper
 * builds only, skipped where the GPU or build lacks them). */
static void op_attention_prefill(const gpu_ops *ops)
{
    const struct att_case cases[] = {
        {0, 300, 0, 2, 2, 128, 150}, /* window across several key tiles */
        {0, 129, 130, 2, 1, 128, 0}, /* 129 rows: a 1-row last tile (BR 64 and 128) */
        {0, 200, 0, 8, 2, 128, 0},   /* GQA 4:1, Llama head size, partial last tile */
        {0, 130, 70, 4, 4, 64, 0},   /* a chunk after 70 cached positions */
        {0, 65, 0, 8, 4, 8, 0},      /* stories260K's shape (head_dim 8 padded to 16) */
        {0, 100, 0, 4, 4, 32, 37},   /* sliding window */
        {0, 70, 5, 2, 1, 96, 0},     /* head_dim 96 padded to 128, MQA */
        {0, 64, 1000, 4, 2, 128, 0}, /* a short chunk after a long cache */
        /* the warp-specialized kernel (head_dim 128): many key tiles through its 2- and 3-slot
         * rings, a chunk start that is no multiple of its 128-key tile, a window over tiles */
        {0, 1000, 77, 4, 1, 128, 0},
        {0, 700, 300, 2, 2, 128, 250},
        {0, 257, 0, 2, 1, 128, 0},   /* 1 row in the last query tile */
        {0, 50, 0, 4, 2, 128, 0},    /* fewer keys than one tile */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int kernel = 0; kernel <= 6; kernel += kernel ? 1 : 2) {
            struct att_case c = cases[i];
            c.kernel = kernel;
            attention_case(ops, &c, 100 + i);
        }
}

/* Block lists for the sparse form: per (head, query block r), block 0 and r always (FlexPrefill
 * keeps the sink and the diagonal), each other block with probability keep_pct / 100 (all when
 * keep_pct is 100). A negative keep_pct forces nothing: each block with probability -keep_pct /
 * 100, so some rows list no block at all (their output must be zeros, as cpu_attend over no keys
 * gives). row_ptr (nh, nb + 1), col (nh * nb * (nb + 1) / 2 at most). */
static void random_lists(int nh, int nb, int keep_pct, uint32_t seed, int32_t *row_ptr, int32_t *col)
{
    uint32_t x = seed * 2654435761u + 1;
    int32_t nnz = 0;
    const int forced = keep_pct >= 0, pct = forced ? keep_pct : -keep_pct;
    for (int h = 0; h < nh; h++) {
        for (int r = 0; r < nb; r++) {
            row_ptr[h * (nb + 1) + r] = nnz;
            for (int c = 0; c <= r; c++) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                if ((forced && (c == 0 || c == r)) || (int)(x % 100) < pct) col[nnz++] = c;
            }
        }
        row_ptr[h * (nb + 1) + nb] = nnz;
    }
}

/* kernel (gpu_test_attention_sparse): 4, 8 the mma.sync kernel's warps; 1, 2, 3 the
 * warp-specialized kernel (2 stages with ping-pong, without, 3 stages), head_dim 128 only */
struct sparse_case {
    int kernel, T, pos0, nh, nkv, hd, keep_pct;
};

/* The block-sparse kernel against cpu_attend over exactly the listed keys of each query (masked
 * dense attention on the same blocks), with the dense case's tolerance and reasons (above); with
 * every block listed, against the same kernel's dense form too (the same tiles in the same order:
 * the same bits expected, one bf16 ulp allowed). */
static void sparse_case_run(const gpu_ops *ops, const struct sparse_case *a, uint32_t seed)
{
    const int n = a->pos0 + a->T, qd = a->nh * a->hd, kvd = a->nkv * a->hd, nb = (n + 127) / 128;
    float *q = malloc(sizeof(float) * a->T * qd), *k = malloc(sizeof(float) * n * kvd);
    float *v = malloc(sizeof(float) * n * kvd), *g = malloc(sizeof(float) * a->T * qd);
    float *kk = malloc(sizeof(float) * n * a->hd), *vv = malloc(sizeof(float) * n * a->hd);
    float *scores = malloc(sizeof(float) * n), ref[128];
    int32_t *rp = malloc(sizeof(int32_t) * a->nh * (nb + 1));
    int32_t *col = malloc(sizeof(int32_t) * ((size_t)a->nh * nb * (nb + 1) / 2 + 1));
    tg_fill(q, (size_t)a->T * qd, 2.6f, seed);
    tg_fill(k, (size_t)n * kvd, 2.6f, seed + 1);
    tg_fill(v, (size_t)n * kvd, 1.0f, seed + 2);
    tg_round(ops, q, (size_t)a->T * qd);
    tg_round(ops, k, (size_t)n * kvd);
    tg_round(ops, v, (size_t)n * kvd);
    random_lists(a->nh, nb, a->keep_pct, seed + 3, rp, col);
    int st = ops->attention_sparse(a->kernel, a->T, a->pos0, a->nh, a->nkv, a->hd, q, k, v, rp,
                                   col, nb, g);
    if (st == ACCEL_ERR_UNSUPPORTED && (a->kernel < 4 || a->kernel > 100)) { /* no wgmma here */
        free(q), free(k), free(v), free(g), free(kk), free(vv), free(scores), free(rp), free(col);
        return;
    }
    REQUIRE(st == 0);
    const float scale = (float)pow(a->hd, -0.5);
    const int group = a->nh / a->nkv;
    double worst = 0;
    for (int t = 0; t < a->T; t++) {
        const int pos = a->pos0 + t, r = pos / 128;
        for (int h = 0; h < a->nh; h++) {
            int m = 0;
            for (int e = rp[h * (nb + 1) + r]; e < rp[h * (nb + 1) + r + 1]; e++)
                for (int j = col[e] * 128; j < col[e] * 128 + 128 && j <= pos; j++, m++) {
                    memcpy(kk + (size_t)m * a->hd, k + (size_t)j * kvd + (h / group) * a->hd,
                           sizeof(float) * a->hd);
                    memcpy(vv + (size_t)m * a->hd, v + (size_t)j * kvd + (h / group) * a->hd,
                           sizeof(float) * a->hd);
                }
            cpu_attend(ref, q + (size_t)t * qd + h * a->hd, kk, vv, m, a->hd, a->hd, scale, scores);
            for (int i = 0; i < a->hd; i++) {
                double d = fabs((double)g[(size_t)t * qd + h * a->hd + i] - ref[i]);
                if (d > worst || d != d) worst = d != d ? INFINITY : d;
            }
        }
    }
    fprintf(stderr, "  block-sparse T=%d pos0=%d heads %d/%d hd %d keep %d%% kernel %d: worst %.3g\n",
            a->T, a->pos0, a->nh, a->nkv, a->hd, a->keep_pct, a->kernel, worst);
    CHECK_MSG(worst <= att_tol(ops), "block-sparse attention kernel %d T=%d pos0=%d heads %d/%d "
              "hd %d keep %d%%: worst |diff| %.3g > %g", a->kernel, a->T, a->pos0, a->nh, a->nkv,
              a->hd, a->keep_pct, worst, att_tol(ops));
    if (a->keep_pct == 100) {
        float *dense = malloc(sizeof(float) * a->T * qd);
        /* the dense form: gpu_test_attention's kernel of the same shape */
        const int dk = a->kernel > 100 ? a->kernel /* the dense form with the same splits */
                       : a->kernel == 8 ? 2 : a->kernel == 4 ? 0 : a->kernel == 1 ? 3 : a->kernel + 3;
        REQUIRE(ops->attention(dk, a->T, a->pos0, a->nh, a->nkv, a->hd, 0, q, k, v, dense) == 0);
        double dmax = 0;
        long ndiff = 0;
        for (size_t i = 0; i < (size_t)a->T * qd; i++) {
            double d = fabs((double)dense[i] - g[i]);
            ndiff += dense[i] != g[i];
            if (d > dmax || d != d) dmax = d != d ? INFINITY : d;
        }
        fprintf(stderr, "    vs the dense kernel: %ld values differ, max %.3g\n", ndiff, dmax);
        /* identical arithmetic; allow one bf16 ulp of max|v| in case the two instantiations
         * contract a multiply-add differently */
        CHECK_MSG(dmax <= 1.0 / 256, "every block listed: the sparse kernel %d differs from the "
                  "dense one by %.3g", a->kernel, dmax);
        free(dense);
    }
    free(q), free(k), free(v), free(g), free(kk), free(vv), free(scores), free(rp), free(col);
}

static void op_attention_block_sparse(const gpu_ops *ops)
{
    const struct sparse_case cases[] = {
        {4, 1000, 0, 8, 2, 128, 30},  /* Llama head, GQA 4:1, partial last block */
        {8, 700, 0, 4, 1, 128, 50},   /* 8 warps (128 rows: one whole query block), MQA */
        {4, 384, 256, 4, 4, 64, 40},  /* a chunk after two cached blocks */
        {4, 300, 0, 2, 2, 64, 0},     /* sink and diagonal only */
        {4, 900, 0, 4, 2, 128, -30},  /* nothing forced: some rows list no block */
        {4, 1000, 0, 8, 2, 128, 100}, /* every block: the dense kernel's bits */
        {8, 520, 128, 4, 2, 128, 100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) sparse_case_run(ops, &cases[i], 300 + i);
}

/* The warp-specialized kernel's block-sparse form (Hopper builds; skipped elsewhere), each case on
 * its three variants: random lists, sink and diagonal only, rows with no block, chunks after
 * cached blocks, GQA and MQA, T not a multiple of 128 (a 1-row and a 104-row last block), and every block listed (the
 * dense ws kernel's bits). */
static void op_attention_block_sparse_ws(const gpu_ops *ops)
{
    const struct sparse_case cases[] = {
        {1, 1000, 0, 8, 2, 128, 30},   /* GQA 4:1, partial last block */
        {1, 700, 0, 4, 1, 128, 50},    /* MQA */
        {1, 384, 256, 4, 4, 128, 40},  /* a chunk after two cached blocks */
        {1, 300, 0, 2, 2, 128, 0},     /* sink and diagonal only */
        {1, 900, 0, 4, 2, 128, -30},   /* nothing forced: some rows list no block */
        {1, 1025, 640, 4, 2, 128, 20}, /* a long chunk after 5 cached blocks, 1-row last block */
        {1, 1000, 0, 8, 2, 128, 100},  /* every block: the dense kernel's bits */
        {1, 520, 128, 4, 2, 128, 100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int kernel = 1; kernel <= 3; kernel++) {
            struct sparse_case c = cases[i];
            c.kernel = kernel;
            sparse_case_run(ops, &c, 400 + i);
        }
}

/* A short chunk's keys split over blocks (the warp-specialized kernel, gpu/attn_prefill_ws.cu;
 * Hopper builds, skipped elsewhere): each case against cpu_attend (the dense cases' tolerance and
 * reasons: a split rounds P against its own running max, the same bound per split, and the merge
 * is in float32) and against the unsplit kernel on the same inputs, within twice that (each is
 * within it of the exact result); a dropped, doubled or mis-weighted split moves an output by
 * ~0.1 max|v|. Cases: GQA 4:1 and MQA, chunk starts that are no multiple of the 128-key tile (the
 * causal edge inside the last split's tiles; rows of the first query tile that see none of the
 * last split's keys), T not a multiple of the 128-row tile (1 and 2 rows in the last), a sliding
 * window (the splits start past key 0), split counts that divide the tiles unevenly, more splits
 * than tiles (empty splits: l = 0, m = -inf), and the engine's automatic choice (kernel 99). */
static void op_attention_prefill_split(const gpu_ops *ops)
{
    const struct att_case cases[] = {
        {102, 130, 4000, 8, 2, 128, 0},  /* GQA, 2 rows in the 2nd query tile, pos0 % 128 = 32 */
        {103, 130, 4000, 8, 2, 128, 0},
        {107, 130, 4000, 8, 2, 128, 0},
        {99, 130, 4000, 8, 2, 128, 0},
        {105, 64, 3000, 4, 4, 128, 0},   /* one partial query tile */
        {103, 200, 1500, 4, 1, 128, 700}, /* MQA, window over the splits */
        {99, 256, 8192, 4, 2, 128, 0},   /* two full query tiles, the automatic choice */
        {140, 256, 8192, 4, 2, 128, 0},  /* 66 tiles in 40 splits of 1-2 */
        {180, 129, 8000, 2, 1, 128, 0},  /* more splits than tiles (64): empty splits */
        {104, 10, 300, 2, 1, 128, 0},    /* 3 tiles in 4 splits, the diagonal in the last */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct att_case *c = &cases[i];
        const size_t n = (size_t)c->T * c->nh * c->hd;
        float *split = malloc(sizeof(float) * n), *whole = malloc(sizeof(float) * n);
        struct att_case u = *c;
        u.kernel = 3; /* the unsplit kernel the engine takes */
        if (attention_case_keep(ops, c, 600 + (uint32_t)i, split) == 0 &&
            attention_case_keep(ops, &u, 600 + (uint32_t)i, whole) == 0) {
            double dmax = 0;
            for (size_t j = 0; j < n; j++) {
                double d = fabs((double)split[j] - whole[j]);
                if (d > dmax || d != d) dmax = d != d ? INFINITY : d;
            }
            fprintf(stderr, "    vs the unsplit kernel: max %.3g\n", dmax);
            CHECK_MSG(dmax <= 2 * att_tol(ops), "split kernel %d T=%d pos0=%d vs unsplit: %.3g > %g",
                      c->kernel, c->T, c->pos0, dmax, 2 * att_tol(ops));
        }
        free(split), free(whole);
    }
}

/* The block-sparse form with key splits (the list of each (head, query block) split in order):
 * random lists, rows with no block (every split empty), every block listed (the dense split
 * kernel's bits: the same tiles in the same splits). */
static void op_attention_block_sparse_split(const gpu_ops *ops)
{
    const struct sparse_case cases[] = {
        {103, 384, 1024, 4, 2, 128, 40},  /* three query blocks after 8 cached ones */
        {102, 130, 2048, 4, 1, 128, -30}, /* some rows list nothing */
        {105, 128, 3072, 8, 2, 128, 100}, /* every block: the dense split kernel's bits */
        {120, 200, 1280, 4, 2, 128, 30},  /* more splits than most lists */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) sparse_case_run(ops, &cases[i], 700 + i);
}

static void op_attention_decode(const gpu_ops *ops)
{
    const struct att_case cases[] = {
        {1, 3, 3000, 32, 8, 128, 0}, /* Llama-3-8B heads over a long cache: many splits */
        {1, 5, 300, 8, 4, 8, 0},     /* stories260K's shape */
        {1, 2, 1000, 16, 2, 64, 0},  /* group of 8 */
        {1, 4, 500, 4, 4, 32, 100},  /* sliding window */
        {1, 2, 700, 16, 1, 64, 0},   /* group of 16: two slices of 8 heads */
        {1, 1, 0, 4, 2, 128, 0},     /* the first token: one key */
        /* the one-kernel form (head_dim 128): ranges of one tile and of many, every group
         * slice, a window, tokens of a batch at different positions, near-empty ranges */
        {7, 3, 3000, 32, 8, 128, 0},
        {7, 1, 70000, 32, 8, 128, 0},
        {7, 5, 300, 8, 8, 128, 0},
        {7, 2, 1000, 16, 8, 128, 0},
        {7, 2, 700, 32, 2, 128, 0},
        {7, 4, 500, 8, 4, 128, 100},
        {7, 1, 0, 4, 2, 128, 0},
        {7, 8, 10, 8, 2, 128, 0},
        {7, 2, 700, 28, 4, 128, 0},  /* group 7: a slice of 8 with one head unused */
        {7, 2, 700, 24, 2, 128, 0},  /* group 12: slices of 8 and 4 */
        {7, 256, 100, 8, 8, 128, 0}, /* the largest batch, MHA: the last counter; ranges per
                                        token from 2 to 6 in one launch */
        {1, 2, 700, 28, 4, 128, 0},
        {1, 1, 70000, 32, 8, 128, 0},
        /* its cluster form (Hopper; short rows in the engine, any length here): fewer keys than
         * ranges (empty ranges in a cluster), the engine's 1K case, a window, group slices, long
         * rows, the largest batch with positions that differ per token */
        {8, 1, 0, 4, 2, 128, 0},
        {8, 8, 10, 8, 2, 128, 0},
        {8, 1, 1024, 32, 8, 128, 0},
        {8, 3, 2000, 32, 8, 128, 0},
        {8, 4, 500, 8, 4, 128, 100},
        {8, 2, 700, 28, 4, 128, 0},
        {8, 2, 700, 24, 2, 128, 0},
        {8, 1, 9000, 32, 8, 128, 0},
        {8, 256, 100, 8, 8, 128, 0},
        /* both with the ranges on the tensor cores (9: one-kernel, 10: cluster; P in bf16 as in
         * the prefill kernels, the same tolerance): steps of 8 keys with a partial last one, every
         * group slice (group 7's unused head, 12's slice of 4), a window, a batch, empty ranges */
        {9, 3, 3000, 32, 8, 128, 0},
        {9, 1, 70000, 32, 8, 128, 0},
        {9, 5, 300, 8, 8, 128, 0},
        {9, 2, 1000, 16, 8, 128, 0},
        {9, 2, 700, 32, 2, 128, 0},
        {9, 4, 500, 8, 4, 128, 100},
        {9, 1, 0, 4, 2, 128, 0},
        {9, 8, 10, 8, 2, 128, 0},
        {9, 2, 700, 28, 4, 128, 0},
        {9, 2, 700, 24, 2, 128, 0},
        {9, 256, 100, 8, 8, 128, 0},
        {10, 1, 0, 4, 2, 128, 0},
        {10, 8, 10, 8, 2, 128, 0},
        {10, 1, 1024, 32, 8, 128, 0},
        {10, 3, 2000, 32, 8, 128, 0},
        {10, 4, 500, 8, 4, 128, 100},
        {10, 2, 700, 28, 4, 128, 0},
        {10, 2, 700, 24, 2, 128, 0},
        {10, 1, 9000, 32, 8, 128, 0},
        {10, 256, 100, 8, 8, 128, 0},
        /* the rows form (11: batches whose rows are one range each; bit for bit kernel 9's ranges,
         * compared inside): MHA at the largest batch, the Llama-3 group over 1K-long rows with a
         * partial last step, a window, short rows where most warps get no step, the first token */
        {11, 256, 100, 8, 8, 128, 0},
        {11, 72, 1000, 32, 8, 128, 0},
        {11, 100, 500, 8, 4, 128, 100},
        {11, 140, 10, 16, 8, 128, 0},
        {11, 64, 0, 32, 8, 128, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attention_case(ops, &cases[i], 200 + i);
}

/* Values that exercise every branch of the rule: ordinary rows, exact halves (x / s = k + 0.5),
 * a zero row (scale 0), rows whose scale is an fp16 subnormal, rows that overflow fp16 (scale
 * inf: all zeros), float subnormal inputs, and the clamp. */
static void quant_input(float *x, int T, int nkv, int hd, uint32_t seed)
{
    tg_fill(x, (size_t)T * nkv * hd, 4.0f, seed);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nkv; h++) {
            float *r = x + ((size_t)t * nkv + h) * hd;
            int kind = (t * nkv + h) % 7;
            for (int i = 0; i < hd; i++) {
                if (kind == 1) r[i] = (float)((i % 9) - 4) * 0.5f * (127.0f / 2.0f) / 64.0f;
                if (kind == 2) r[i] = 0.0f;
                if (kind == 3) r[i] *= 1e-6f;
                if (kind == 4) r[i] *= 1e20f;
                if (kind == 5) r[i] *= 1e-39f;
                if (kind == 6 && i == 3) r[i] = 1e4f;
            }
        }
}

static void quant_case(const gpu_ops *ops, enum proto_kv_dtype dt, int T, int nkv, int hd)
{
    size_t n = (size_t)T * nkv * hd, vb = proto_kv_value_bytes(dt, T, nkv, hd);
    size_t ns = proto_kv_scale_count(dt, T, nkv, hd);
    float *x = malloc(sizeof(float) * n);
    uint8_t *qg = malloc(vb), *qc = malloc(vb);
    uint16_t *sg = malloc(ns * 2), *sc = malloc(ns * 2);
    quant_input(x, T, nkv, hd, (uint32_t)(T * 31 + hd));
    REQUIRE(ops->kv_quantize(dt, T, nkv, hd, x, qg, sg) == 0);
    if (dt == PROTO_KV_INT8)
        cpu_kv_quantize_int8(x, T, nkv, hd, qc, sc);
    else
        cpu_kv_quantize_int4(x, T, nkv, hd, qc, sc);
    size_t bad_q = 0, bad_s = 0;
    for (size_t i = 0; i < vb; i++) bad_q += qg[i] != qc[i];
    for (size_t i = 0; i < ns; i++) bad_s += sg[i] != sc[i];
    CHECK_MSG(bad_q == 0 && bad_s == 0, "%s T=%d kv=%d hd=%d: %zu value bytes, %zu scales differ",
              dt == PROTO_KV_INT8 ? "int8" : "int4", T, nkv, hd, bad_q, bad_s);
    free(x), free(qg), free(qc), free(sg), free(sc);
}

static void op_kv_quantize_bit_exact(const gpu_ops *ops)
{
    const int shapes[][3] = {{33, 8, 128}, {17, 4, 8}, {9, 4, 32}, {5, 2, 64}};
    for (int s = 0; s < 4; s++) {
        quant_case(ops, PROTO_KV_INT8, shapes[s][0], shapes[s][1], shapes[s][2]);
        quant_case(ops, PROTO_KV_INT4, shapes[s][0], shapes[s][1], shapes[s][2]);
    }
}

/* every op on both builds of the plugin (bf16, fp16) */
TEST(gpu_op_rmsnorm) { TG_EACH_BUILD(op_rmsnorm); }
TEST(gpu_op_rope_llama3) { TG_EACH_BUILD(op_rope_llama3); }
TEST(gpu_op_swiglu) { TG_EACH_BUILD(op_swiglu); }
TEST(gpu_op_decode_fused) { TG_EACH_BUILD(op_decode_fused); }
TEST(gpu_op_gemm) { TG_EACH_BUILD(op_gemm); }
TEST(gpu_op_gemm_candidates) { TG_EACH_BUILD(op_gemm_candidates); }
TEST(gpu_op_gemm_small) { TG_EACH_BUILD(op_gemm_small); }
TEST(gpu_op_gemm_swiglu) { TG_EACH_BUILD(op_gemm_swiglu); }
TEST(gpu_op_attention_prefill) { TG_EACH_BUILD(op_attention_prefill); }
TEST(gpu_op_attention_block_sparse) { TG_EACH_BUILD(op_attention_block_sparse); }
TEST(gpu_op_attention_block_sparse_ws) { TG_EACH_BUILD(op_attention_block_sparse_ws); }
TEST(gpu_op_attention_decode) { TG_EACH_BUILD(op_attention_decode); }
TEST(gpu_op_attention_prefill_split) { TG_EACH_BUILD(op_attention_prefill_split); }
TEST(gpu_op_attention_block_sparse_split) { TG_EACH_BUILD(op_attention_block_sparse_split); }
TEST(gpu_op_kv_quantize_bit_exact) { TG_EACH_BUILD(op_kv_quantize_bit_exact); }
