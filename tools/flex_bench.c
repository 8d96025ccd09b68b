/* tools/flex_bench.c — the FlexPrefill CPU reference on synthetic inputs: what it selects and
 * how long it takes here.
 *
 *   build/flex_bench [--tokens 8192] [--heads 8] [--kv-heads 2] [--dim 128] [--kind mixed]
 *                    [--gamma 0.9] [--tau 0.1] [--min-budget 1024] [--max-budget 0]
 *                    [--block 128] [--threads 2] [--seed 1] [--attn] [--dense] [--heads-detail]
 *                    [--xattention-stride S [--xattention-threshold 0.9]]
 *                    [--q-file F --k-file F] [--mass]
 *
 * --q-file / --k-file: Q and K from files instead of the synthetic ones (float32, little-endian,
 * [tokens][heads][dim] and [tokens][kv-heads][dim], the layout `tandem sparse-index` reads; V
 * stays synthetic). --mass: per head, the exact attention mass the selection keeps (the softmax
 * of the last query row of every query block over its causal keys, summed over the kept
 * blocks): the mean over query blocks, the last query block's, the mean over the last tenth of
 * the query blocks and the smallest; for FlexPrefill and, with --xattention-stride, XAttention.
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
#include "cpu/ops.h"
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

static float *read_f32(const char *path, size_t count)
{
    FILE *f = fopen(path, "rb");
    float *x = f ? malloc(count * sizeof(float)) : NULL;
    int ok = x && fread(x, sizeof(float), count, f) == count && fgetc(f) == EOF;
    if (f) fclose(f);
    if (!ok) {
        fprintf(stderr, "flex_bench: %s must hold exactly %zu floats\n", path, count);
        free(x);
        exit(2);
    }
    return x;
}

/* The kept attention mass of ix per head (see the header), printed as one line per head with
 * detail and a summary line. */
static void mass_report(const char *name, const cpu_flex_qkv *x, const cpu_flex_index *ix,
                        int gqa_interleave, int detail)
{
    const int n = x->n_tokens, d = x->head_dim, bs = ix->block_size, nb = ix->n_blocks;
    const int tail = (nb + 9) / 10;
    const float rs = 1.0f / sqrtf((float)d);
    float *p = malloc((size_t)n * sizeof(float)), *lq = malloc((size_t)d * sizeof(float));
    uint8_t *keep = malloc((size_t)nb);
    if (!p || !lq || !keep) exit(1);
    double s_mean = 0, s_last = 0, s_tail = 0, worst_last = 1, worst_min = 1;
    for (int h = 0; h < x->n_heads; h++) {
        const int g = cpu_flex_kv_head(h, x->n_heads, x->n_kv_heads, gqa_interleave);
        double mean = 0, last = 0, tl = 0, mn = 1;
        for (int r = 0; r < nb; r++) {
            const int t = (r + 1) * bs - 1 < n - 1 ? (r + 1) * bs - 1 : n - 1;
            const float *q = x->q + (size_t)t * x->q_stride + (size_t)h * d;
            for (int e = 0; e < d; e++) lq[e] = q[e] * rs;
            for (int j = 0; j <= t; j++) p[j] = cpu_dot(lq, x->k + (size_t)j * x->kv_stride + (size_t)g * d, d);
            cpu_softmax(p, t + 1);
            memset(keep, 0, (size_t)nb);
            const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
            for (int64_t i = rp[r]; i < rp[r + 1]; i++) keep[ix->col[i]] = 1;
            double m = 0;
            for (int j = 0; j <= t; j++)
                if (keep[j / bs]) m += p[j];
            mean += m / nb;
            if (r == nb - 1) last = m;
            if (r >= nb - tail) tl += m / tail;
            if (m < mn) mn = m;
        }
        if (detail)
            printf("mass %-11s head %3d mean %.4f last block %.4f last tenth %.4f min %.4f density %.4f%s\n",
                   name, h, mean, last, tl, mn, cpu_flex_index_density(ix, h),
                   ix->query_aware && ix->query_aware[h] ? " query-aware" : "");
        s_mean += mean / x->n_heads;
        s_last += last / x->n_heads;
        s_tail += tl / x->n_heads;
        if (last < worst_last) worst_last = last;
        if (mn < worst_min) worst_min = mn;
    }
    printf("mass %-11s density %.4f: kept mass mean %.4f, last query block %.4f (worst head %.4f), "
           "last tenth %.4f, smallest %.4f\n",
           name, cpu_flex_index_density(ix, -1), s_mean, s_last, worst_last, s_tail, worst_min);
    free(p);
    free(lq);
    free(keep);
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
    int threads = 2, attn = 0, dense = 0, detail = 0, xstride = 0, mass = 0;
    const char *qfile = NULL, *kfile = NULL;
    double xthr = 0.9;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--attn")) attn = 1;
        else if (!strcmp(a, "--dense")) dense = 1;
        else if (!strcmp(a, "--heads-detail")) detail = 1;
        else if (!strcmp(a, "--mass")) mass = 1;
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
            else if (!strcmp(a, "--q-file")) qfile = v;
            else if (!strcmp(a, "--k-file")) kfile = v;
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
    if (!qfile != !kfile) {
        fprintf(stderr, "flex_bench: --q-file and --k-file go together\n");
        return 2;
    }
    if (qfile) {
        float *fq = read_f32(qfile, (size_t)N * H * d), *fk = read_f32(kfile, (size_t)N * Hk * d);
        memcpy(q, fq, (size_t)N * H * d * sizeof(float));
        memcpy(k, fk, (size_t)N * Hk * d * sizeof(float));
        free(fq);
        free(fk);
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
    if (mass) mass_report("flexprefill", &x, ix, p.gqa_interleave, detail);
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
        if (mass) mass_report("xattention", &x, xi, 0, detail);
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
