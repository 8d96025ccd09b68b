/* The FlexPrefill GPU path (gpu/gpu_flex_*.cu, reached with dlsym through the test library beside
 * the plugin, build/libtandem_cuda_test.so: gpu/test/flex_test_api.cu)
 * against the CPU reference on the same bf16-rounded inputs: the block sets, and block-sparse
 * attention over one index. Skipped without the CUDA build or without a device (CI). */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "gpu/gpu_flex.h"
#include "tests/test.h"
#include "tests/util.h"
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct api {
    void *lib;
    int (*device_count)(void);
    int (*index)(const float *, const float *, int, int, int, int, const gpu_flex_params *,
                 int32_t *, int32_t *, int64_t, int64_t *, gpu_flex_head *);
    int (*attention)(const float *, const float *, const float *, int, int, int, int,
                     const int32_t *, const int32_t *, int, float *);
    int (*index_layout)(const float *, const float *, int, int, int, int, int,
                        const gpu_flex_params *, int32_t *, int32_t *, int64_t, int64_t *,
                        gpu_flex_head *);
    int (*cut)(const float *, int, int, double, const int *, int *, uint32_t *,
               unsigned long long *, unsigned long long *, uint32_t *);
    void (*set_lastq_legacy)(int); /* gpu/gpu_flex_lastq.cuh: which last-q kernels run */
} api;

/* 0 with the API loaded, or -1 after SKIP-worthy absence (reason in why). */
static int api_load(api *a, char *why, size_t n)
{
    const char *b = getenv("BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/libtandem_cuda_test.so", b && *b ? b : "build");
    a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        snprintf(why, n, "no CUDA build (%.200s)", dlerror());
        return -1;
    }
    a->device_count = (int (*)(void))dlsym(a->lib, "gpu_flex_test_device_count");
    *(void **)&a->index = dlsym(a->lib, "gpu_flex_test_index");
    *(void **)&a->attention = dlsym(a->lib, "gpu_flex_test_attention");
    *(void **)&a->index_layout = dlsym(a->lib, "gpu_flex_test_index_layout");
    *(void **)&a->cut = dlsym(a->lib, "gpu_flex_test_cut");
    *(void **)&a->set_lastq_legacy = dlsym(a->lib, "gpu_flex_test_set_lastq_legacy");
    if (!a->device_count || !a->index || !a->attention || !a->index_layout || !a->cut ||
        !a->set_lastq_legacy) {
        snprintf(why, n, "%.200s lacks the gpu_flex_test_* entry points", path);
        dlclose(a->lib);
        return -1;
    }
    if (a->device_count() < 1) {
        snprintf(why, n, "no CUDA device");
        dlclose(a->lib);
        return -1;
    }
    return 0;
}

typedef struct inputs {
    int n, H, Hk, d;
    float *q, *k, *v;
    cpu_flex_qkv x;
} inputs;

static void inputs_synth(inputs *in, int n, int H, int Hk, int d, enum cpu_flex_synth_kind kind,
                         uint64_t seed)
{
    *in = (inputs){.n = n, .H = H, .Hk = Hk, .d = d};
    in->q = malloc(sizeof(float) * n * H * d);
    in->k = malloc(sizeof(float) * n * Hk * d);
    in->v = malloc(sizeof(float) * n * Hk * d);
    cpu_flex_synth s = {kind, n, H, Hk, d, GPU_FLEX_BS, seed};
    cpu_flex_synth_rows(&s, 0, n, in->q, in->k, in->v);
    for (size_t i = 0; i < (size_t)n * H * d; i++) in->q[i] = t_bf16_round(in->q[i]);
    for (size_t i = 0; i < (size_t)n * Hk * d; i++) {
        in->k[i] = t_bf16_round(in->k[i]);
        in->v[i] = t_bf16_round(in->v[i]);
    }
    in->x = (cpu_flex_qkv){n, H, Hk, d, in->q, (size_t)H * d, in->k, in->v, (size_t)Hk * d, 0};
}

static void inputs_free(inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
}

/* Jaccard similarity of head h's block sets. */
static double jaccard(const cpu_flex_index *ix, const int32_t *rp, const int32_t *col, int h)
{
    const int nb = ix->n_blocks;
    long inter = 0, uni = 0;
    for (int r = 0; r < nb; r++) {
        const int64_t *a = ix->row_ptr + (size_t)h * (nb + 1);
        const int32_t *b = rp + (size_t)h * (nb + 1);
        int64_t i = a[r], j = b[r];
        while (i < a[r + 1] || j < b[r + 1]) {
            if (j >= b[r + 1] || (i < a[r + 1] && ix->col[i] < col[j])) i++;
            else if (i >= a[r + 1] || col[j] < ix->col[i]) j++;
            else {
                i++;
                j++;
                inter++;
            }
            uni++;
        }
    }
    return uni ? (double)inter / uni : 1.0;
}

/* Index sets equal, except where the documented ties allow: a coverage count that lands on the
 * other side of a 128-token step (budget off by one block) or a JS distance within 1e-3 of tau
 * (bf16 products summed on tensor cores vs float dot products on the CPU). Both last-q forms
 * (gpu/gpu_flex_lastq.cuh: the mma.sync kernels the index runs, and the first WMMA ones kept for
 * A/B measurements), each against the CPU. */
TEST(gpu_flex_index_sets_equal_cpu)
{
    api a;
    char why[256];
    if (api_load(&a, why, sizeof why)) SKIP("%s", why);
    const struct {
        int n, H, Hk, d, kind, il, min_tokens;
    } cases[] = {
        {2048, 4, 2, 64, CPU_FLEX_SYNTH_STRUCTURED, 0, 256},
        {3000, 8, 2, 128, CPU_FLEX_SYNTH_MIXED, 1, 1024},
        {4096, 8, 8, 64, CPU_FLEX_SYNTH_MIXED, 0, 512},
        {5000, 8, 2, 128, CPU_FLEX_SYNTH_STRUCTURED, 0, 1024},
    };
    const size_t nc = sizeof cases / sizeof cases[0];
    for (size_t cf = 0; cf < 2 * nc; cf++) {
        const size_t ci = cf % nc;
        const int legacy = cf >= nc;
        a.set_lastq_legacy(legacy);
        if (ci == 0) fprintf(stderr, "  last-q form: %s\n", legacy ? "legacy WMMA" : "mma.sync");
        inputs in;
        inputs_synth(&in, cases[ci].n, cases[ci].H, cases[ci].Hk, cases[ci].d, cases[ci].kind,
                     70 + ci);
        sparse_flex_params cp;
        sparse_flex_params_default(&cp);
        cp.min_budget = cases[ci].min_tokens;
        cp.gqa_interleave = cases[ci].il;
        cpu_flex_index *ix;
        REQUIRE(cpu_flex_index_build(NULL, &cp, &in.x, &ix) == 0);
        const int nb = ix->n_blocks, H = in.H;
        gpu_flex_params gp = {cp.gamma, cp.tau, (cp.min_budget + 127) / 128, 0, cp.gqa_interleave};
        int32_t *rp = malloc(sizeof(int32_t) * H * (nb + 1));
        int64_t cap = (int64_t)H * nb * (nb + 1) / 2, nnz = 0;
        int32_t *col = malloc(sizeof(int32_t) * cap);
        gpu_flex_head *heads = malloc(sizeof *heads * H);
        int rc = a.index(in.q, in.k, in.n, H, in.Hk, in.d, &gp, rp, col, cap, &nnz, heads);
        CHECK_MSG(rc == 0, "case %zu: gpu index failed (%d)", ci, rc);
        for (int h = 0; !rc && h < H; h++) {
            double j = jaccard(ix, rp, col, h);
            int same = j == 1.0 && heads[h].n_vertical == ix->n_vertical[h] &&
                       heads[h].n_slash == ix->n_slash[h] &&
                       heads[h].query_aware == ix->query_aware[h];
            int tie = abs(heads[h].n_vertical - ix->n_vertical[h]) <= 1 &&
                      abs(heads[h].n_slash - ix->n_slash[h]) <= 1 &&
                      (heads[h].query_aware == ix->query_aware[h] ||
                       fabsf(ix->js[h] - cp.tau) < 1e-3f);
            if (!same)
                fprintf(stderr, "  case %zu head %d: jaccard %.4f gpu v %d s %d qa %d js %.5f | "
                        "cpu v %d s %d qa %d js %.5f\n", ci, h, j, heads[h].n_vertical,
                        heads[h].n_slash, heads[h].query_aware, heads[h].js, ix->n_vertical[h],
                        ix->n_slash[h], ix->query_aware[h], ix->js[h]);
            CHECK_MSG(same || tie, "case %zu head %d differs beyond a tie", ci, h);
            if (heads[h].query_aware == ix->query_aware[h] && !isnan(ix->js[h]))
                CHECK_NEAR(heads[h].js, ix->js[h], 1e-3);
        }
        free(rp);
        free(col);
        free(heads);
        cpu_flex_index_free(ix);
        inputs_free(&in);
    }
    a.set_lastq_legacy(0);
    dlclose(a.lib);
}

/* The index over K in the engine's cache layout (per head, rows of a longer capacity: what the
 * sparse prefill passes) is the index over token-major K: the same arithmetic on the same values,
 * so the same lists and per-head decisions, bit for bit. */
TEST(gpu_flex_index_cache_layout)
{
    api a;
    char why[256];
    if (api_load(&a, why, sizeof why)) SKIP("%s", why);
    inputs in;
    inputs_synth(&in, 2500, 8, 2, 128, CPU_FLEX_SYNTH_MIXED, 81);
    const int H = in.H, nb = (in.n + 127) / 128;
    gpu_flex_params gp = {0.9f, 0.1f, 4, 0, 0};
    int64_t cap = (int64_t)H * nb * (nb + 1) / 2, n1 = 0, n2 = 0;
    int32_t *rp1 = malloc(sizeof(int32_t) * H * (nb + 1)), *rp2 = malloc(sizeof(int32_t) * H * (nb + 1));
    int32_t *c1 = malloc(sizeof(int32_t) * cap), *c2 = malloc(sizeof(int32_t) * cap);
    gpu_flex_head h1[8], h2[8];
    REQUIRE(a.index_layout(in.q, in.k, in.n, H, in.Hk, in.d, 0, &gp, rp1, c1, cap, &n1, h1) == 0);
    REQUIRE(a.index_layout(in.q, in.k, in.n, H, in.Hk, in.d, 1, &gp, rp2, c2, cap, &n2, h2) == 0);
    CHECK_EQ(n1, n2);
    CHECK(memcmp(rp1, rp2, sizeof(int32_t) * H * (nb + 1)) == 0);
    CHECK(n1 == n2 && memcmp(c1, c2, sizeof(int32_t) * n1) == 0);
    CHECK(memcmp(h1, h2, sizeof h1) == 0);
    fprintf(stderr, "  cache layout: %lld blocks of %lld, identical lists\n", (long long)n1,
            (long long)cap);
    free(rp1), free(rp2), free(c1), free(c2);
    inputs_free(&in);
    dlclose(a.lib);
}

/* bf16 attention against the float reference over the same index and bf16-rounded inputs.
 * Tolerance: the output is rounded to bf16 (2^-9 relative) and so is every P (the official
 * kernel's p.to(bf16) before P.V), with fp32 accumulation: max |diff| 2e-2 and relative RMS 1e-2
 * for O(1) outputs. */
TEST(gpu_flex_attention_matches_cpu)
{
    api a;
    char why[256];
    if (api_load(&a, why, sizeof why)) SKIP("%s", why);
    const struct {
        int n, H, Hk, d, il, full;
    } cases[] = {{2000, 4, 2, 64, 0, 0}, {1500, 4, 1, 128, 1, 0}, {1100, 2, 2, 64, 0, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        inputs in;
        inputs_synth(&in, cases[ci].n, cases[ci].H, cases[ci].Hk, cases[ci].d,
                     CPU_FLEX_SYNTH_MIXED, 90 + ci);
        sparse_flex_params cp;
        sparse_flex_params_default(&cp);
        cp.min_budget = 256;
        cp.gqa_interleave = cases[ci].il;
        cpu_flex_index *ix;
        if (cases[ci].full) REQUIRE(cpu_flex_index_full(in.H, in.n, 128, &ix) == 0);
        else REQUIRE(cpu_flex_index_build(NULL, &cp, &in.x, &ix) == 0);
        const int nb = ix->n_blocks;
        int32_t *rp = malloc(sizeof(int32_t) * in.H * (nb + 1));
        int32_t *col = malloc(sizeof(int32_t) * (ix->nnz ? ix->nnz : 1));
        for (size_t i = 0; i < (size_t)in.H * (nb + 1); i++) rp[i] = (int32_t)ix->row_ptr[i];
        for (int64_t i = 0; i < ix->nnz; i++) col[i] = ix->col[i];
        const size_t m = (size_t)in.n * in.H * in.d;
        float *og = malloc(sizeof(float) * m), *oc = malloc(sizeof(float) * m);
        int rc = a.attention(in.q, in.k, in.v, in.n, in.H, in.Hk, in.d, rp, col, cases[ci].il, og);
        CHECK_MSG(rc == 0, "case %zu: gpu attention failed (%d)", ci, rc);
        REQUIRE(cpu_flex_sparse_attention(NULL, &in.x, ix, cases[ci].il, 0, oc,
                                          (size_t)in.H * in.d) == 0);
        double mx = 0, se = 0, sr = 0;
        for (size_t i = 0; !rc && i < m; i++) {
            double e = fabs((double)og[i] - oc[i]);
            if (!(e <= mx)) mx = e; /* NaN propagates */
            se += e * e;
            sr += (double)oc[i] * oc[i];
        }
        if (!rc) {
            fprintf(stderr, "  case %zu: max |diff| %.3g, rel rms %.3g\n", ci, mx, sqrt(se / sr));
            CHECK_NEAR(mx, 0, 2e-2);
            CHECK_NEAR(sqrt(se / sr), 0, 1e-2);
        }
        free(og);
        free(oc);
        free(rp);
        free(col);
        cpu_flex_index_free(ix);
        inputs_free(&in);
    }
    dlclose(a.lib);
}

/* The coverage cut and the kept-id bits of the query-aware map, spread over many blocks
 * (gpu/gpu_flex_cut.cu, qa_ties / qa_emit), against the definition: ids ordered by value
 * descending then id ascending, the longest prefix whose sum stays within the limit. Values are
 * multiples of 2^-30, so both sides sum exactly and must agree bit for bit — including a cut in
 * the middle of ~3,800 equal values scattered over every block (4000 random placements; the
 * first 1500 by id are kept), a limit above the total, a map that is half zeros, and a map of a
 * head that is not query-aware (left untouched). nb 181: 32761 ids, four blocks of the emission,
 * a partial last word. */
static int cmp_desc_id(const void *a, const void *b, void *ctx)
{
    const float *x = ctx;
    const int i = *(const int *)a, j = *(const int *)b;
    if (x[i] != x[j]) return x[i] > x[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static uint64_t cut_rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

TEST(gpu_flex_cut_matches_sorted_prefix)
{
    api a;
    char why[256];
    if (api_load(&a, why, sizeof why)) SKIP("%s", why);
    enum { NB = 181, M = NB * NB, S = 4, W = (M + 31) / 32 };
    const double unit = 0x1p-30;
    float *map = malloc(sizeof(float) * M * S);
    uint64_t rng = 99;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < M; i++) map[(size_t)s * M + i] = (float)((1 + cut_rng(&rng) % (1u << 20)) * unit);
    const float tv = (float)(3000.0 * 256 * unit); /* the tied value, mid-range */
    for (int t = 0; t < 4000; t++) map[cut_rng(&rng) % M] = tv;
    for (int r = 0; r < NB; r++) /* map 2: a causal map's zeros */
        for (int c = r + 1; c < NB; c++) map[(size_t)2 * M + r * NB + c] = 0;
    double above = 0, total1 = 0, total2 = 0;
    for (int i = 0; i < M; i++) {
        if (map[i] > tv) above += map[i];
        total1 += map[M + i];
        total2 += map[(size_t)2 * M + i];
    }
    /* one limit for all maps as the index has; map 1 is scaled so that everything fits */
    const double limit = above + 1500.5 * tv;
    const double f1 = limit / total1 * 0.999, f2 = limit / total2 * 1.6;
    for (int i = 0; i < M; i++) {
        map[M + i] = (float)(floor(map[M + i] * f1 / unit) * unit);
        map[(size_t)2 * M + i] = (float)(floor(map[(size_t)2 * M + i] * f2 / unit) * unit);
    }
    const int qa[S] = {1, 1, 1, 0};
    int all[S];
    uint32_t bits[S];
    unsigned long long take[S], count[S];
    uint32_t *keep = malloc(sizeof(uint32_t) * W * S);
    for (int s = 0; s < S; s++) {
        all[s] = 7;
        bits[s] = 0xabcdu;
        take[s] = 3;
        count[s] = 12345;
    }
    for (size_t i = 0; i < (size_t)W * S; i++) keep[i] = 0xdeadbeefu;
    int rc = a.cut(map, NB, S, limit, qa, all, bits, take, count, keep);
    REQUIRE(rc == 0);
    int *ord = malloc(sizeof(int) * M);
    for (int s = 0; s < 3; s++) {
        const float *x = map + (size_t)s * M;
        for (int i = 0; i < M; i++) ord[i] = i;
        qsort_r(ord, M, sizeof(int), cmp_desc_id, (void *)x);
        double cum = 0;
        int kept = 0;
        while (kept < M && cum + x[ord[kept]] <= limit) cum += x[ord[kept++]];
        CHECK_MSG(count[s] == (unsigned long long)kept, "map %d: count %llu, expected %d", s,
                  count[s], kept);
        CHECK_MSG(all[s] == (kept == M), "map %d: all %d with %d of %d kept", s, all[s], kept, M);
        uint8_t *want = calloc(M, 1);
        for (int i = 0; i < kept; i++) want[ord[i]] = 1;
        int bad = 0;
        for (int i = 0; i < M; i++) bad += want[i] != (keep[(size_t)s * W + i / 32] >> (i % 32) & 1u);
        CHECK_MSG(bad == 0, "map %d: %d ids kept differently", s, bad);
        for (int i = M; i < W * 32; i++)
            CHECK_MSG(!(keep[(size_t)s * W + i / 32] >> (i % 32) & 1u), "map %d: bit past the end", s);
        free(want);
    }
    CHECK_MSG(take[0] == 1500, "map 0: %llu of the tied values taken, expected 1500", take[0]);
    uint32_t tvb;
    memcpy(&tvb, &tv, 4);
    CHECK_MSG(bits[0] == tvb && !all[0], "map 0: cut at bits %08x, expected the tied value's %08x",
              bits[0], tvb);
    CHECK(all[1] == 1);
    CHECK(count[2] > 0 && count[2] < (unsigned long long)M && !all[2]);
    CHECK_MSG(all[3] == 7 && count[3] == 12345 && keep[(size_t)3 * W] == 0xdeadbeefu,
              "a map that is not query-aware was written");
    free(ord);
    free(keep);
    free(map);
    dlclose(a.lib);
}
