/* tools/flex_bench.c — the FlexPrefill CPU reference on synthetic inputs: what it selects and
 * how long it takes here.
 *
 *   build/flex_bench [--tokens 8192] [--heads 8] [--kv-heads 2] [--dim 128] [--kind mixed]
 *                    [--gamma 0.9] [--tau 0.1] [--min-budget 1024] [--max-budget 0]
 *                    [--block 128] [--threads 2] [--seed 1] [--attn] [--dense] [--heads-detail]
 *                    [--xattention-stride S [--xattention-threshold 0.9]]
 *
 * With --xattention-stride, XAttention's estimate (cpu/sparse_idx.h, block --block) runs on the
 * same inputs too: its time and density are printed, and --attn then uses its block list.
 * Prints, per query head, its synthetic kind, the pattern FlexPrefill chose (query-aware or
 * vertical-slash), the JS distance, the budgets and the density (computed / causal blocks);
 * then the index time and, with --attn, the sparse attention time (and with --dense the dense
 * attention time and the largest difference between the two). */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "cpu/sparse_idx.h"
#include "cpu/pool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int arg_int(const char *v, long lo, long hi, const char *name)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "flex_bench: %s must be an integer in [%ld, %ld]\n", name, lo, hi);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv)
{
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    cpu_flex_synth s = {.kind = CPU_FLEX_SYNTH_MIXED, .n_tokens = 8192, .n_heads = 8,
                        .n_kv_heads = 2, .head_dim = 128, .block_size = 128, .seed = 1};
    int threads = 2, attn = 0, dense = 0, detail = 0, xstride = 0;
    double xthr = 0.9;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--attn")) attn = 1;
        else if (!strcmp(a, "--dense")) dense = 1;
        else if (!strcmp(a, "--heads-detail")) detail = 1;
        else if (!v) {
            fprintf(stderr, "flex_bench: %s needs a value (see the header of tools/flex_bench.c)\n", a);
            return 2;
        } else {
            i++;
            if (!strcmp(a, "--tokens")) s.n_tokens = arg_int(v, 1, CPU_FLEX_MAX_TOKENS, a);
            else if (!strcmp(a, "--heads")) s.n_heads = arg_int(v, 1, CPU_FLEX_MAX_HEADS, a);
            else if (!strcmp(a, "--kv-heads")) s.n_kv_heads = arg_int(v, 1, CPU_FLEX_MAX_HEADS, a);
            else if (!strcmp(a, "--dim")) s.head_dim = arg_int(v, 16, CPU_FLEX_MAX_HEAD_DIM, a);
            else if (!strcmp(a, "--block")) p.block_size = arg_int(v, 16, 128, a);
            else if (!strcmp(a, "--threads")) threads = arg_int(v, 1, 256, a);
            else if (!strcmp(a, "--seed")) s.seed = (uint64_t)arg_int(v, 0, 1 << 30, a);
            else if (!strcmp(a, "--min-budget")) p.min_budget = arg_int(v, 0, 1 << 30, a);
            else if (!strcmp(a, "--max-budget")) p.max_budget = arg_int(v, 0, 1 << 30, a);
            else if (!strcmp(a, "--gamma")) p.gamma = strtof(v, NULL);
            else if (!strcmp(a, "--tau")) p.tau = strtof(v, NULL);
            else if (!strcmp(a, "--xattention-stride")) xstride = arg_int(v, 1, 128, a);
            else if (!strcmp(a, "--xattention-threshold")) xthr = strtod(v, NULL);
            else if (!strcmp(a, "--kind")) {
                int k = cpu_flex_synth_kind_parse(v);
                if (k < 0) {
                    fprintf(stderr, "flex_bench: unknown kind %s\n", v);
                    return 2;
                }
                s.kind = (enum cpu_flex_synth_kind)k;
            } else {
                fprintf(stderr, "flex_bench: unknown option %s\n", a);
                return 2;
            }
        }
    }
    s.block_size = p.block_size;
    char err[128];
    if (sparse_flex_params_check(&p, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    const int N = s.n_tokens, H = s.n_heads, Hk = s.n_kv_heads, d = s.head_dim;
    float *q = malloc((size_t)N * H * d * sizeof(float));
    float *k = malloc((size_t)N * Hk * d * sizeof(float));
    float *v = malloc((size_t)N * Hk * d * sizeof(float));
    float *o = malloc((size_t)N * H * d * sizeof(float));
    if (!q || !k || !v || !o || cpu_flex_synth_rows(&s, 0, N, q, k, v)) {
        fprintf(stderr, "flex_bench: cannot build the inputs (memory or shape)\n");
        return 1;
    }
    cpu_pool *pool = cpu_pool_new(threads);
    cpu_flex_qkv x = {N, H, Hk, d, q, (size_t)H * d, k, v, (size_t)Hk * d, 0};
    double t0 = now_s();
    cpu_flex_index *ix;
    int rc = cpu_flex_index_build(pool, &p, &x, &ix);
    double t_index = now_s() - t0;
    if (rc) {
        fprintf(stderr, "flex_bench: index: %s\n", cpu_flex_strerror(rc));
        return 1;
    }
    printf("tokens %d heads %d kv %d dim %d kind %s gamma %.3f tau %.3f min %d max %d bs %d\n", N,
           H, Hk, d, cpu_flex_synth_kind_name(s.kind), p.gamma, p.tau, p.min_budget,
           p.max_budget, p.block_size);
    int nqa = 0;
    double kind_den[5] = {0};
    int kind_n[5] = {0};
    for (int h = 0; h < H; h++) {
        int kind = cpu_flex_synth_head_kind(&s, h);
        double den = cpu_flex_index_density(ix, h);
        kind_den[kind] += den;
        kind_n[kind]++;
        nqa += ix->query_aware[h];
        if (detail)
            printf("head %3d %-14s %-14s js %.4f budgets v %d s %d density %.4f\n", h,
                   cpu_flex_synth_kind_name(kind),
                   ix->query_aware[h] ? "query-aware" : "vertical-slash", ix->js[h],
                   ix->n_vertical[h], ix->n_slash[h], den);
    }
    for (int kind = 0; kind < 4; kind++)
        if (kind_n[kind])
            printf("kind %-14s heads %d mean density %.4f\n",
                   cpu_flex_synth_kind_name((enum cpu_flex_synth_kind)kind), kind_n[kind],
                   kind_den[kind] / kind_n[kind]);
    printf("density %.4f (official ratio %.4f), query-aware heads %d/%d\n",
           cpu_flex_index_density(ix, -1),
           (double)ix->nnz / ((double)ix->n_blocks * ix->n_blocks * H), nqa, H);
    printf("index %.3f s (%d threads)\n", t_index, threads);
    if (xstride) {
        sparse_params xp;
        sparse_params_default(&xp, SPARSE_MODE_XATTN);
        xp.xattention_stride = xstride;
        xp.xattention_block_size = p.block_size;
        xp.xattention_threshold = xthr;
        cpu_flex_index *xi;
        t0 = now_s();
        rc = cpu_xattn_index_build(pool, &xp, &x, 0, &xi, NULL);
        double t_x = now_s() - t0;
        if (rc) {
            fprintf(stderr, "flex_bench: xattention: %s\n", cpu_flex_strerror(rc));
            return 1;
        }
        printf("xattention stride %d threshold %.3f: density %.4f, index %.3f s\n", xstride, xthr,
               cpu_flex_index_density(xi, -1), t_x);
        cpu_flex_index_free(ix);
        ix = xi; /* --attn runs over XAttention's lists */
    }
    if (attn) {
        t0 = now_s();
        cpu_flex_sparse_attention(pool, &x, ix, p.gqa_interleave, 0, o, (size_t)H * d);
        printf("sparse attention %.3f s\n", now_s() - t0);
    }
    if (dense) {
        float *od = malloc((size_t)N * H * d * sizeof(float));
        t0 = now_s();
        cpu_flex_dense_attention(pool, &x, p.gqa_interleave, 0, od, (size_t)H * d);
        printf("dense attention %.3f s\n", now_s() - t0);
        if (attn) {
            double mx = 0, rms = 0;
            for (size_t i = 0; i < (size_t)N * H * d; i++) {
                double e = fabs((double)o[i] - od[i]);
                if (e > mx) mx = e;
                rms += e * e;
            }
            printf("sparse vs dense: max |diff| %.4g, rms %.4g\n", mx,
                   sqrt(rms / ((double)N * H * d)));
        }
        free(od);
    }
    cpu_flex_index_free(ix);
    cpu_pool_free(pool);
    free(q);
    free(k);
    free(v);
    free(o);
    return 0;
}
