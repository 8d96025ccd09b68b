/* tools/flex_gpu_bench.c — the FlexPrefill GPU path on the lent GPU: index sets against the CPU
 * reference, inputs for the official code's comparison, and the timings of issue 8.
 *
 *   build/flex_gpu_bench check DIR          GPU vs CPU index on Llama-3-8B-shaped synthetic
 *                                           prompts (4K-16K); writes each prompt's bf16 Q/K/V
 *                                           and both CSR indexes under DIR for
 *                                           bench/flex_official.py
 *   build/flex_gpu_bench bench [N,N,...]    index / sparse / dense attention times (default
 *                                           32768,65536,131072), kinds x gamma
 *   build/flex_gpu_bench dump DIR N KIND    one prompt's bf16 Q/K/V for timing the official code
 *   build/flex_gpu_bench methods [N,...]    the three sparse-prefill methods side by side (issue
 *                                           22): index ms, block-sparse attention ms, density,
 *                                           dense attention ms, for FlexPrefill (--gammas' first,
 *                                           tau 0.1, min_budget 1024), XAttention (thresholds
 *                                           --xthr, strides --xstride) and Tri-shape (recent
 *                                           --recent, start 128; its 1024-token chunks);
 *                                           then XAttention's index of the last block alone
 *                                           after the rest (a chunked prefill's chunk at that
 *                                           depth), with and without the estimate's key splits;
 *                                           --xfp8 0,1 adds XAttention's FP8 estimate
 *                                           (gpu/gpu_xattn_fp8.h; 2, 3: the kernels that
 *                                           accumulate in the tensor cores) beside bf16, and
 *                                           its sets against bf16's (Jaccard, mass kept)
 *   build/flex_gpu_bench chunk [N,...]      the dense prefill attention of a chunked prefill's
 *                                           chunk (--chunk-rows, default 128,256) after N cached
 *                                           keys (default 32768,65536,131072): unsplit, the
 *                                           automatic key split, and 2/4/8 splits (ms, median)
 *   build/flex_gpu_bench flexchunk [N,...]  FlexPrefill's work for one chunk of a chunked prefill
 *                                           (--chunk-rows rows) after N cached keys, one layer:
 *                                           every kernel gpu_flex_index_chunk launches, timed
 *                                           alone (its captured graph replayed node by node),
 *                                           the whole index, and the chunk's block-sparse and
 *                                           dense attention (ws kernel, automatic key split);
 *                                           the config's defaults (gamma 0.9, tau 0.1,
 *                                           min_budget 1024), synthetic kind --kinds' first
 *                                           (each also runs the other last-q form's index on the
 *                                           same inputs: its time and how its lists differ)
 * Options before the command: --lib PATH (build/libtandem_cuda_test.so: the test library beside
 * the plugin, gpu/test/, which loads build/libtandem_cuda.so), --lastq mma|legacy (which last-q
 * kernels the index runs: gpu/gpu_flex_lastq.cuh; mma, the default), --threads T (16),
 * --heads H --kv-heads G --dim D (32, 8, 128: Llama-3-8B), --reps R (3), --kinds K[,K]
 * (structured,mixed), --gammas G[,G] (0.8,0.9,0.95).
 * The plugin is the daemon's libtandem_cuda.so: it takes the accel_* and model_* functions it
 * calls from the host program, so this tool links them in (plugin_needs below).
 *
 * Files (little-endian): q.bf16 (n, H, d) uint16, k.bf16 / v.bf16 (n, G, d), meta.txt
 * "n H G d gamma tau min_budget gqa_interleave kind", {gpu,cpu}_rowptr.i32 (H, nb + 1) and
 * {gpu,cpu}_col.i32. */
#include "cpu/flex.h"
#include "devices/devices.h"
#include "cpu/flex_synth.h"
#include "cpu/pool.h"
#include "gpu/gpu_flex.h"
#include "sparse/sparse.h"
#include "scheduler/accel.h"
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct api {
    int (*count)(void);
    int (*index)(const float *, const float *, int, int, int, int, const gpu_flex_params *,
                 int32_t *, int32_t *, int64_t, int64_t *, gpu_flex_head *);
    int (*bench)(const float *, const float *, const float *, int, int, int, int,
                 const gpu_flex_params *, int, int, gpu_flex_bench_result *, int32_t *, int32_t *,
                 int64_t);
} api;

static int H = 32, HK = 8, D = 128, THREADS = 16, REPS = 3, LASTQ_LEGACY = 0;
static char KINDS[128] = "structured,mixed", GAMMAS[128] = "0.8,0.9,0.95";
static char XTHR[128] = "0.8,0.9,0.95", XSTRIDE[64] = "8,16", RECENT[128] = "1920,8192";
static char XFP8[16] = "0";

/* gpu/test/xattn_test_api.cu */
typedef struct gpu_sparse_bench_result {
    double index_ms, attn_ms, dense_ms, density;
    long long nnz, causal;
    double last_block_ms[2]; /* XAttention: the last block's index after the rest (split, not) */
    int fp8_used;            /* the estimate ran in FP8 (gpu/gpu_xattn_fp8.h) */
    double fp8_jaccard, fp8_kept_min; /* FP8 sets vs bf16; lowest share of bf16 mass kept */
    long long fp8_rows_under, fp8_rows;
} gpu_sparse_bench_result;
typedef int (*sparse_bench_fn)(const sparse_params *, const int *, int, const float *,
                               const float *, const float *, int, int, int, int, int,
                               gpu_sparse_bench_result *);

/* devices_open pulls the composition root, the backends and the model code out of libtandem.a
 * into this program; the CUDA plugin resolves its calls to them when dlopen'ed (RTLD_NOW). */
void *plugin_needs[] = {(void *)devices_open};

/* ---------------------------------------------------------------- inputs */

typedef struct prompt {
    int n;
    enum cpu_flex_synth_kind kind;
    float *q, *k, *v;
} prompt;

typedef struct gen_job {
    const cpu_flex_synth *s;
    prompt *p;
    int t0, t1;
} gen_job;

static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void *gen_range(void *arg)
{
    gen_job *j = arg;
    const cpu_flex_synth *s = j->s;
    prompt *p = j->p;
    size_t qo = (size_t)j->t0 * H * D, ko = (size_t)j->t0 * HK * D;
    cpu_flex_synth_rows(s, j->t0, j->t1, p->q + qo, p->k + ko, p->v + ko);
    for (size_t i = qo; i < (size_t)j->t1 * H * D; i++) p->q[i] = bf16_round(p->q[i]);
    for (size_t i = ko; i < (size_t)j->t1 * HK * D; i++) {
        p->k[i] = bf16_round(p->k[i]);
        p->v[i] = bf16_round(p->v[i]);
    }
    return NULL;
}

/* The synthetic prompt, rounded to bf16 (what the GPU sees), generated on THREADS threads. */
static int prompt_new(prompt *p, int n, enum cpu_flex_synth_kind kind, uint64_t seed)
{
    *p = (prompt){n, kind, malloc(sizeof(float) * n * H * D), malloc(sizeof(float) * n * HK * D),
                  malloc(sizeof(float) * n * HK * D)};
    if (!p->q || !p->k || !p->v) return -1;
    cpu_flex_synth s = {kind, n, H, HK, D, GPU_FLEX_BS, seed};
    pthread_t th[64];
    gen_job jobs[64];
    int T = THREADS < 64 ? THREADS : 64;
    for (int i = 0; i < T; i++) {
        jobs[i] = (gen_job){&s, p, (int)((int64_t)n * i / T), (int)((int64_t)n * (i + 1) / T)};
        pthread_create(&th[i], NULL, gen_range, &jobs[i]);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    return 0;
}

static void prompt_free(prompt *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
}

static int write_file(const char *dir, const char *name, const void *data, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "flex_gpu_bench: cannot write %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    return fclose(f);
}

static int write_bf16(const char *dir, const char *name, const float *x, size_t n)
{
    uint16_t *b = malloc(n * 2);
    if (!b) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        b[i] = (uint16_t)(u >> 16); /* already rounded */
    }
    int rc = write_file(dir, name, b, n * 2);
    free(b);
    return rc;
}

static int write_prompt(const char *dir, const prompt *p, const sparse_flex_params *cp)
{
    char meta[256];
    snprintf(meta, sizeof meta, "%d %d %d %d %.9g %.9g %d %d %s\n", p->n, H, HK, D, cp->gamma,
             cp->tau, cp->min_budget, cp->gqa_interleave, cpu_flex_synth_kind_name(p->kind));
    return write_file(dir, "meta.txt", meta, strlen(meta)) ||
           write_bf16(dir, "q.bf16", p->q, (size_t)p->n * H * D) ||
           write_bf16(dir, "k.bf16", p->k, (size_t)p->n * HK * D) ||
           write_bf16(dir, "v.bf16", p->v, (size_t)p->n * HK * D);
}

/* ---------------------------------------------------------------- check */

static double jaccard_head(const int64_t *ar, const int32_t *ac, const int32_t *br,
                           const int32_t *bc, int nb)
{
    long inter = 0, uni = 0;
    for (int r = 0; r < nb; r++) {
        int64_t i = ar[r], j = br[r];
        while (i < ar[r + 1] || j < br[r + 1]) {
            if (j >= br[r + 1] || (i < ar[r + 1] && ac[i] < bc[j])) i++;
            else if (i >= ar[r + 1] || bc[j] < ac[i]) j++;
            else {
                i++;
                j++;
                inter++;
            }
            uni++;
        }
    }
    return uni ? (double)inter / uni : 1;
}

static int check(const api *a, const char *dir)
{
    const struct {
        int n, kind, il, min_budget;
        float gamma;
    } cases[] = {
        {4096, CPU_FLEX_SYNTH_MIXED, 1, 1024, 0.9f},
        {8192, CPU_FLEX_SYNTH_MIXED, 0, 1024, 0.9f},
        {8192, CPU_FLEX_SYNTH_STRUCTURED, 0, 1024, 0.95f},
        {16384, CPU_FLEX_SYNTH_STRUCTURED, 0, 1024, 0.9f},
    };
    cpu_pool *pool = cpu_pool_new(THREADS);
    mkdir(dir, 0755);
    printf("## GPU index vs CPU reference (same bf16 inputs)\n\n");
    printf("| n | kind | gamma | interleave | density cpu | density gpu | heads identical | "
           "mean Jaccard | min Jaccard |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        prompt p;
        if (prompt_new(&p, cases[ci].n, (enum cpu_flex_synth_kind)cases[ci].kind, 100 + ci)) {
            fprintf(stderr, "flex_gpu_bench: out of memory\n");
            return 1;
        }
        sparse_flex_params cp;
        sparse_flex_params_default(&cp);
        cp.gamma = cases[ci].gamma;
        cp.min_budget = cases[ci].min_budget;
        cp.gqa_interleave = cases[ci].il;
        cpu_flex_qkv x = {p.n, H, HK, D, p.q, (size_t)H * D, p.k, p.v, (size_t)HK * D, 0};
        cpu_flex_index *ix;
        if (cpu_flex_index_build(pool, &cp, &x, &ix)) return 1;
        const int nb = ix->n_blocks;
        gpu_flex_params gp = {cp.gamma, cp.tau, (cp.min_budget + 127) / 128, 0, cp.gqa_interleave};
        int32_t *rp = malloc(sizeof(int32_t) * H * (nb + 1));
        int64_t cap = (int64_t)H * nb * (nb + 1) / 2, nnz = 0;
        int32_t *col = malloc(sizeof(int32_t) * cap);
        gpu_flex_head heads[256];
        int rc = a->index(p.q, p.k, p.n, H, HK, D, &gp, rp, col, cap, &nnz, heads);
        if (rc) {
            printf("| %d | %s | gpu index failed: %d |\n", p.n, cpu_flex_synth_kind_name(p.kind), rc);
            bad++;
            continue;
        }
        int same = 0;
        double jsum = 0, jmin = 1;
        for (int h = 0; h < H; h++) {
            double j = jaccard_head(ix->row_ptr + (size_t)h * (nb + 1), ix->col,
                                    rp + (size_t)h * (nb + 1), col, nb);
            jsum += j;
            if (j < jmin) jmin = j;
            int eq = j == 1 && heads[h].n_vertical == ix->n_vertical[h] &&
                     heads[h].n_slash == ix->n_slash[h] && heads[h].query_aware == ix->query_aware[h];
            same += eq;
            if (!eq)
                fprintf(stderr, "n %d head %d: jaccard %.4f gpu v %d s %d qa %d js %.6f | cpu v %d "
                        "s %d qa %d js %.6f\n", p.n, h, j, heads[h].n_vertical, heads[h].n_slash,
                        heads[h].query_aware, heads[h].js, ix->n_vertical[h], ix->n_slash[h],
                        ix->query_aware[h], ix->js[h]);
        }
        bad += same != H;
        printf("| %d | %s | %.2f | %d | %.4f | %.4f | %d/%d | %.4f | %.4f |\n", p.n,
               cpu_flex_synth_kind_name(p.kind), cp.gamma, cp.gqa_interleave,
               cpu_flex_index_density(ix, -1), (double)nnz / ((double)H * nb * (nb + 1) / 2), same,
               H, jsum / H, jmin);
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/case%zu", dir, ci);
        mkdir(sub, 0755);
        int32_t *crp = malloc(sizeof(int32_t) * H * (nb + 1));
        for (size_t i = 0; i < (size_t)H * (nb + 1); i++) crp[i] = (int32_t)ix->row_ptr[i];
        if (write_prompt(sub, &p, &cp) || write_file(sub, "gpu_rowptr.i32", rp, 4 * H * (nb + 1)) ||
            write_file(sub, "gpu_col.i32", col, 4 * (size_t)nnz) ||
            write_file(sub, "cpu_rowptr.i32", crp, 4 * H * (nb + 1)) ||
            write_file(sub, "cpu_col.i32", ix->col, 4 * (size_t)ix->nnz))
            bad++;
        free(crp);
        free(rp);
        free(col);
        cpu_flex_index_free(ix);
        prompt_free(&p);
        fflush(stdout);
    }
    cpu_pool_free(pool);
    printf("\n");
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- bench */

static int bench(const api *a, const char *sizes)
{
    printf("## GPU timings (bf16, batch 1, H %d, KV heads %d, d %d; median of %d)\n\n", H, HK, D,
           REPS);
    printf("| n | kind | gamma | density | query-aware | index ms | sparse ms | sparse ms (ws, 3 "
           "stages) | sparse ms (mma 4 warps) | sparse ms (mma 8 warps) | dense ms (lists, every "
           "block) | dense ms (tile range) | index / dense | dense / sparse | sparse TFLOP/s "
           "(dense-equivalent / actual) |\n"
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int kinds[8], nk = 0;
    float gammas[8];
    int ngm = 0;
    for (char *t = KINDS; *t && nk < 8;) {
        char name[32];
        size_t l = strcspn(t, ",");
        snprintf(name, sizeof name, "%.*s", (int)(l < 31 ? l : 31), t);
        int k = cpu_flex_synth_kind_parse(name);
        if (k < 0) {
            fprintf(stderr, "flex_gpu_bench: unknown kind %s\n", name);
            return 2;
        }
        kinds[nk++] = k;
        t += l + (t[l] == ',');
    }
    for (char *t = GAMMAS; *t && ngm < 8;) {
        char *end;
        double g = strtod(t, &end);
        if (end == t || !(g > 0 && g <= 1)) {
            fprintf(stderr, "flex_gpu_bench: bad gamma list %s\n", GAMMAS);
            return 2;
        }
        gammas[ngm++] = (float)g;
        t = *end == ',' ? end + 1 : end;
    }
    char dev[128] = "";
    for (const char *s = sizes; s && *s;) {
        char *end;
        long n = strtol(s, &end, 10);
        if (end == s || n < 256 || n > GPU_FLEX_MAX_TOKENS) {
            fprintf(stderr, "flex_gpu_bench: bad size list at %s\n", s);
            return 2;
        }
        s = *end == ',' ? end + 1 : end;
        /* causal attention FLOPs of the whole prompt: 4 d per (query, key) pair, n(n+1)/2 pairs */
        const double flops = 4.0 * D * H * ((double)n * (n + 1) / 2);
        for (int ki = 0; ki < nk; ki++) {
            prompt p;
            if (prompt_new(&p, (int)n, (enum cpu_flex_synth_kind)kinds[ki], 7)) {
                fprintf(stderr, "flex_gpu_bench: out of memory at n %ld\n", n);
                return 1;
            }
            double dense_ms = 0, kernel_ms = 0;
            for (int gi = 0; gi < ngm; gi++) {
                gpu_flex_params gp = {gammas[gi], 0.1f, 8, 0, 0};
                gpu_flex_bench_result r;
                int dense = gi == 0; /* one dense run per prompt: it does not depend on gamma */
                int rc = a->bench(p.q, p.k, p.v, p.n, H, HK, D, &gp, REPS, dense, &r, NULL, NULL, 0);
                if (rc) {
                    printf("| %d | %s | %.2f | failed: %d |\n", p.n,
                           cpu_flex_synth_kind_name(p.kind), gp.gamma, rc);
                    continue;
                }
                if (dense) {
                    dense_ms = r.dense_ms;
                    kernel_ms = r.dense_kernel_ms;
                }
                snprintf(dev, sizeof dev, "%s", r.device);
                printf("| %d | %s | %.2f | %.4f | %d/%d | %.2f | %.2f | %.2f | %.2f | %.2f | %s%.2f | "
                       "%s%.2f | %.2f%% | %.2fx | %.0f / %.0f |\n",
                       p.n, cpu_flex_synth_kind_name(p.kind), gp.gamma, r.density, r.n_query_aware,
                       H, r.index_ms, r.sparse_ms, r.sparse_ws3_ms, r.sparse4_ms, r.sparse8_ms,
                       dense ? "" : "~", dense_ms,
                       dense ? "" : "~",
                       kernel_ms, 100 * r.index_ms / kernel_ms, kernel_ms / r.sparse_ms,
                       flops / (r.sparse_ms * 1e-3) / 1e12,
                       flops * r.density / (r.sparse_ms * 1e-3) / 1e12);
                fflush(stdout);
            }
            prompt_free(&p);
        }
    }
    printf("\ndevice: %s. sparse ms: gpu_flex_attention, the engine's block-sparse kernel (on "
           "Hopper with d 128 the warp-specialized one, 2 stages, ping-pong; else mma.sync, 4 "
           "warps); 0: not run. \"~\": the dense times measured at the first gamma for that prompt "
           "(they do not depend on gamma). dense / sparse and index / dense use the tile-range "
           "kernel of the same family (the engine's dense attention); TFLOP/s: causal FLOPs "
           "(4 d H n(n+1)/2) over the sparse time, and that times the density (the work actually "
           "done).\n\n", dev);
    return 0;
}

/* "a,b,c" -> up to max doubles; the count, or -1 on a bad list. */
static int dlist(const char *t, double *out, int max)
{
    int c = 0;
    while (*t && c < max) {
        char *end;
        out[c++] = strtod(t, &end);
        if (end == t) return -1;
        t = *end == ',' ? end + 1 : end;
    }
    return c;
}

/* gpu/test/test_api.cu */
typedef int (*chunk_bench_fn)(int, int, int, int, int, int, double *, int *);
static char CHUNK_ROWS[64] = "128,256";

static int chunk_bench(chunk_bench_fn cb, const char *depths)
{
    double dp[8], tr[8];
    const int nd = dlist(depths, dp, 8), nt = dlist(CHUNK_ROWS, tr, 8);
    if (nd < 1 || nt < 1) {
        fprintf(stderr, "flex_gpu_bench: bad depth or --chunk-rows list\n");
        return 2;
    }
    printf("## The chunk's dense attention (warp-specialized kernel, H %d, KV heads %d, d 128; "
           "median of %d): ms per layer\n\n| rows | cached keys | unsplit | auto (splits) | 2 | 4 | 8 "
           "| unsplit / auto |\n|---|---|---|---|---|---|---|---|\n", H, HK, REPS);
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nd; j++) {
            const int T = (int)tr[i], pos0 = (int)dp[j];
            const int sp[5] = {0, -1, 2, 4, 8};
            double ms[5];
            int used[5];
            for (int k = 0; k < 5; k++) {
                int st = cb(sp[k], T, pos0, H, HK, REPS, &ms[k], &used[k]);
                if (st) {
                    fprintf(stderr, "flex_gpu_bench: chunk %d at %d, splits %d: status %d\n", T, pos0,
                            sp[k], st);
                    return 1;
                }
            }
            printf("| %d | %d | %.3f | %.3f (%d) | %.3f | %.3f | %.3f | %.2fx |\n", T, pos0, ms[0],
                   ms[1], used[1], ms[2], ms[3], ms[4], ms[0] / ms[1]);
            fflush(stdout);
        }
    printf("\n");
    return 0;
}

/* gpu/test/flex_test_api.cu */
typedef struct gpu_flex_chunk_kernel {
    char name[64];
    unsigned grid[3], block, smem;
    double ms;
} gpu_flex_chunk_kernel;
typedef struct gpu_flex_chunk_result {
    double index_ms, replay_ms, sparse_ms, dense_ms;
    long long nnz, causal;
    int n_query_aware, splits, same, nk;
    gpu_flex_chunk_kernel k[64];
    long long ab_diff; /* the other last-q form's lists against these: blocks in one only */
    int ab_heads, legacy;
    double ab_index_ms;
} gpu_flex_chunk_result;
typedef int (*flex_chunk_fn)(const float *, const float *, const float *, int, int, int, int, int,
                             const gpu_flex_params *, int, gpu_flex_chunk_result *);

static int flex_chunk(flex_chunk_fn fc, const char *depths)
{
    double dp[8], tr[8];
    const int nd = dlist(depths, dp, 8), nt = dlist(CHUNK_ROWS, tr, 8);
    char kind[32];
    snprintf(kind, sizeof kind, "%.*s", (int)strcspn(KINDS, ","), KINDS);
    const int kd = cpu_flex_synth_kind_parse(kind);
    int tmax = 0, bad = nd < 1 || nt < 1 || kd < 0;
    for (int i = 0; i < nt; i++) {
        bad |= tr[i] < GPU_FLEX_BS || (int)tr[i] % GPU_FLEX_BS || tr[i] > 8192;
        if ((int)tr[i] > tmax) tmax = (int)tr[i];
    }
    if (bad) {
        fprintf(stderr, "flex_gpu_bench: flexchunk: depths, --chunk-rows (multiples of 128 up to "
                        "8192) or --kinds\n");
        return 2;
    }
    sparse_flex_params cp;
    sparse_flex_params_default(&cp);
    const gpu_flex_params gp = {cp.gamma, cp.tau, (cp.min_budget + GPU_FLEX_BS - 1) / GPU_FLEX_BS, 0,
                                cp.gqa_interleave};
    static char sum[16384];
    size_t sn = 0;
    sum[0] = 0;
    printf("## FlexPrefill per chunk, kernel by kernel (one layer: H %d, KV heads %d, d %d; %s; "
           "gamma %.2f, tau %.2f, min_budget %d; median of %d)\n\n", H, HK, D, kind, cp.gamma,
           cp.tau, cp.min_budget, REPS);
    for (int j = 0; j < nd; j++) {
        const int pos0 = (int)dp[j];
        if (pos0 < GPU_FLEX_BS || pos0 % GPU_FLEX_BS || pos0 + tmax > GPU_FLEX_MAX_TOKENS) {
            fprintf(stderr, "flex_gpu_bench: depth %d: a multiple of 128, depth + rows <= 256K\n", pos0);
            return 2;
        }
        prompt p; /* one prompt per depth; each chunk size takes its first pos0 + rows tokens */
        if (prompt_new(&p, pos0 + tmax, (enum cpu_flex_synth_kind)kd, 7)) return 1;
        for (int i = 0; i < nt; i++) {
            const int T = (int)tr[i];
            gpu_flex_chunk_result r;
            int st = fc(p.q, p.k, p.v, pos0 + T, pos0, H, HK, D, &gp, REPS, &r);
            if (st) {
                fprintf(stderr, "flex_gpu_bench: flexchunk %d at %d: status %d\n", T, pos0, st);
                prompt_free(&p);
                return 1;
            }
            printf("### %d rows after %d cached keys\n\n| # | kernel | grid | threads | smem | ms "
                   "| share of index |\n|---:|---|---|---:|---:|---:|---:|\n", T, pos0);
            for (int k = 0; k < r.nk; k++)
                printf("| %d | %s | %u x %u x %u | %u | %u | %.4f | %.1f%% |\n", k, r.k[k].name,
                       r.k[k].grid[0], r.k[k].grid[1], r.k[k].grid[2], r.k[k].block, r.k[k].smem,
                       r.k[k].ms, 100 * r.k[k].ms / r.replay_ms);
            printf("\nindex %.3f ms (the call), %.3f ms (replayed node by node; replayed lists %s "
                   "the call's); query-aware heads %d of %d; attention over the lists %.3f ms "
                   "(%d key splits), dense %.3f ms; density %.4f (%lld of %lld causal blocks)\n",
                   r.index_ms, r.replay_ms, r.same ? "equal" : "DIFFER FROM", r.n_query_aware, H,
                   r.sparse_ms, r.splits, r.dense_ms, (double)r.nnz / (double)r.causal, r.nnz,
                   r.causal);
            printf("last-q form: %s; the other form (%s): index %.3f ms, its lists differ in %lld "
                   "blocks, %d heads' budgets or query-awareness differ\n\n",
                   r.legacy ? "legacy WMMA" : "mma.sync", r.legacy ? "mma.sync" : "legacy WMMA",
                   r.ab_index_ms, r.ab_diff, r.ab_heads);
            if (sn < sizeof sum - 256)
                sn += (size_t)snprintf(sum + sn, sizeof sum - sn,
                                       "| %d | %d | %.3f | %.3f | %lld | %.3f | %.3f | %.4f | %.3f | %.1f | %.1f |\n",
                                       T, pos0, r.index_ms, r.ab_index_ms, r.ab_diff, r.sparse_ms, r.dense_ms,
                                       (double)r.nnz / (double)r.causal,
                                       r.index_ms + r.sparse_ms, 32 * (r.index_ms + r.sparse_ms),
                                       32 * r.dense_ms);
            fflush(stdout);
        }
        prompt_free(&p);
    }
    printf("### Summary (ms; x 32: one layer's time times Llama-3-8B's 32 layers, attention part "
           "only: no GEMMs; the other last-q form's index and how many blocks its lists differ in)\n\n"
           "| rows | cached keys | index | other form's index | lists differ | sparse attention | "
           "dense attention | density | index + sparse | x 32 | dense x 32 |\n|---:|---:|---:|---:|"
           "---:|---:|---:|---:|---:|---:|---:|\n%s\n", sum);
    return 0;
}

static int methods(const api *a, sparse_bench_fn sb, const char *sizes)
{
    double xt[8], xs[4], rc[4], xf[4];
    const int nxt = dlist(XTHR, xt, 8), nxs = dlist(XSTRIDE, xs, 4), nrc = dlist(RECENT, rc, 4);
    const int nxf = dlist(XFP8, xf, 4);
    double g0[1];
    static char fb[4096]; /* the FP8 rows' comparison with bf16, printed after the table */
    size_t fbn = 0;
    fb[0] = 0;
    int badf = 0;
    for (int f = 0; f < nxf; f++) badf |= xf[f] != 0 && xf[f] != 1 && xf[f] != 2 && xf[f] != 3;
    if (nxt < 1 || nxs < 1 || nrc < 1 || nxf < 1 || badf || dlist(GAMMAS, g0, 1) != 1) {
        fprintf(stderr, "flex_gpu_bench: bad --xthr / --xstride / --recent / --gammas\n");
        return 2;
    }
    static char lb[8192]; /* XAttention's last-block rows, printed after the table */
    size_t lbn = 0;
    lb[0] = 0;
    printf("## Sparse prefill methods on the GPU (bf16, H %d, KV heads %d, d %d; median of %d)\n\n"
           "| n | kind | method | parameters | density | index ms | attention ms | dense ms | "
           "index / dense | dense / (index + attention) |\n"
           "|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n", H, HK, D, REPS);
    for (const char *s = sizes; s && *s;) {
        char *end;
        long n = strtol(s, &end, 10);
        if (end == s || n < 2048 || n > GPU_FLEX_MAX_TOKENS) {
            fprintf(stderr, "flex_gpu_bench: bad size list at %s\n", s);
            return 2;
        }
        s = *end == ',' ? end + 1 : end;
        for (char *t = KINDS; *t;) {
            char name[32];
            size_t l = strcspn(t, ",");
            snprintf(name, sizeof name, "%.*s", (int)(l < 31 ? l : 31), t);
            t += l + (t[l] == ',');
            int kind = cpu_flex_synth_kind_parse(name);
            prompt p;
            if (kind < 0 || prompt_new(&p, (int)n, (enum cpu_flex_synth_kind)kind, 7)) {
                fprintf(stderr, "flex_gpu_bench: kind %s / memory at n %ld\n", name, n);
                return 1;
            }
            gpu_flex_params gp = {(float)g0[0], 0.1f, 8, 0, 0};
            gpu_flex_bench_result fr;
            if (!a->bench(p.q, p.k, p.v, p.n, H, HK, D, &gp, REPS, 1, &fr, NULL, NULL, 0))
                printf("| %ld | %s | flexprefill | gamma %.2f tau 0.1 min 1024 | %.4f | %.2f | %.2f | "
                       "%.2f | %.2f%% | %.2fx |\n", n, name, gp.gamma, fr.density, fr.index_ms,
                       fr.sparse_ms, fr.dense_kernel_ms, 100 * fr.index_ms / fr.dense_kernel_ms,
                       fr.dense_kernel_ms / (fr.index_ms + fr.sparse_ms));
            else
                printf("| %ld | %s | flexprefill | failed |\n", n, name);
            sparse_params ps[8 * 4 * 4 + 4];
            int np = 0, f8[8 * 4 * 4 + 4] = {0};
            for (int i = 0; i < nxt; i++)
                for (int j = 0; j < nxs; j++)
                    for (int f = 0; f < nxf; f++) {
                        sparse_params_default(&ps[np], SPARSE_MODE_XATTN);
                        ps[np].xattention_threshold = xt[i];
                        f8[np] = (int)xf[f];
                        ps[np++].xattention_stride = (int)xs[j];
                    }
            for (int i = 0; i < nrc; i++) {
                sparse_params_default(&ps[np], SPARSE_MODE_TRISHAPE);
                ps[np++].num_retained_recent_tokens_in_cache = (int)rc[i];
            }
            gpu_sparse_bench_result rs[8 * 4 * 4 + 4];
            int st = sb(ps, f8, np, p.q, p.k, p.v, p.n, H, HK, D, REPS, rs);
            for (int i = 0; i < np; i++) {
                char par[96];
                if (ps[i].mode == SPARSE_MODE_XATTN)
                    snprintf(par, sizeof par, "threshold %.2f stride %d%s", ps[i].xattention_threshold,
                             ps[i].xattention_stride,
                             f8[i] == 1 ? " fp8" : f8[i] == 2 ? " fp8 wg-raw" : f8[i] == 3 ? " fp8 ws-raw" : "");
                else
                    snprintf(par, sizeof par, "start %d recent %d (chunks of %d)",
                             ps[i].num_retained_start_tokens_in_cache,
                             ps[i].num_retained_recent_tokens_in_cache, SPARSE_TRI_CHUNK);
                if (st) {
                    printf("| %ld | %s | %s | %s | failed: %d |\n", n, name,
                           sparse_mode_name(ps[i].mode), par, st);
                    continue;
                }
                const gpu_sparse_bench_result *r = &rs[i];
                printf("| %ld | %s | %s | %s | %.4f | %.2f | %.2f | %.2f | %.2f%% | %.2fx |\n", n,
                       name, sparse_mode_name(ps[i].mode), par, r->density, r->index_ms, r->attn_ms,
                       r->dense_ms, 100 * r->index_ms / r->dense_ms,
                       r->dense_ms / (r->index_ms + r->attn_ms));
                if (f8[i] && fbn < sizeof fb - 200)
                    fbn += (size_t)snprintf(fb + fbn, sizeof fb - fbn,
                                            "| %ld | %s | %s | %s | %.5f | %.4f | %lld of %lld |\n", n,
                                            name, par, r->fp8_used ? "yes" : "no", r->fp8_jaccard,
                                            r->fp8_kept_min, r->fp8_rows_under, r->fp8_rows);
                if (ps[i].mode == SPARSE_MODE_XATTN && lbn < sizeof lb - 200)
                    lbn += (size_t)snprintf(lb + lbn, sizeof lb - lbn, "| %ld | %s | %s | %.3f | %.3f |\n",
                                            n, name, par, r->last_block_ms[0], r->last_block_ms[1]);
            }
            fflush(stdout);
            prompt_free(&p);
        }
    }
    if (lbn)
        printf("\n| n | kind | XAttention | last block's index ms: keys split | one CTA per query tile |\n"
               "|---:|---|---|---:|---:|\n%s\nlast block: the index of the sparse part's last 128 "
               "query tokens alone, over every key before them (a chunked prefill's chunk at that "
               "depth), with the estimate's key splits as it chooses them and without.\n", lb);
    if (fbn)
        printf("\n| n | kind | XAttention | FP8 ran | Jaccard vs bf16 sets | lowest share of the bf16 "
               "estimate's mass kept | rows below the threshold |\n|---:|---|---|---|---:|---:|---:|\n%s"
               "\nFP8 vs bf16: the whole sparse part's sets of the FP8 estimate against the bf16 "
               "estimate's on the same inputs; per (head, query block) the bf16 masses of the blocks "
               "the FP8 set keeps over the row's bf16 mass.\n", fb);
    printf("\nindex ms: the method's block selection (XAttention: the estimate + selection + CSR; "
           "Tri-shape: its lists, summed over its chunks); attention ms: the engine's block-sparse "
           "kernel over them (Tri-shape: summed over its chunks); dense ms: the dense kernel of the "
           "same family over the sparse part (FlexPrefill: the whole prompt; the others: up to "
           "sparse_plan's end, the last num_last_dense_tokens_in_prefill tokens excluded).\n\n");
    return 0;
}

static int dump(const char *dir, int n, const char *kind)
{
    int k = cpu_flex_synth_kind_parse(kind);
    if (k < 0 || n < 256 || n > GPU_FLEX_MAX_TOKENS) {
        fprintf(stderr, "flex_gpu_bench: dump DIR N KIND (N 256..256K, KIND a synth kind)\n");
        return 2;
    }
    mkdir(dir, 0755);
    prompt p;
    if (prompt_new(&p, n, (enum cpu_flex_synth_kind)k, 7)) return 1;
    sparse_flex_params cp;
    sparse_flex_params_default(&cp);
    int rc = write_prompt(dir, &p, &cp);
    prompt_free(&p);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *lib = "build/libtandem_cuda_test.so";
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        int x = atoi(v);
        if (!strcmp(o, "--lib")) lib = v;
        else if (!strcmp(o, "--threads") && x >= 1 && x <= 64) THREADS = x;
        else if (!strcmp(o, "--heads") && x >= 1 && x <= GPU_FLEX_MAX_HEADS) H = x;
        else if (!strcmp(o, "--kv-heads") && x >= 1 && x <= GPU_FLEX_MAX_HEADS) HK = x;
        else if (!strcmp(o, "--dim") && (x == 64 || x == 128)) D = x;
        else if (!strcmp(o, "--reps") && x >= 1 && x <= 100) REPS = x;
        else if (!strcmp(o, "--kinds") && strlen(v) < sizeof KINDS) snprintf(KINDS, sizeof KINDS, "%s", v);
        else if (!strcmp(o, "--gammas") && strlen(v) < sizeof GAMMAS)
            snprintf(GAMMAS, sizeof GAMMAS, "%s", v);
        else if (!strcmp(o, "--xthr") && strlen(v) < sizeof XTHR) snprintf(XTHR, sizeof XTHR, "%s", v);
        else if (!strcmp(o, "--xstride") && strlen(v) < sizeof XSTRIDE)
            snprintf(XSTRIDE, sizeof XSTRIDE, "%s", v);
        else if (!strcmp(o, "--xfp8") && strlen(v) < sizeof XFP8) snprintf(XFP8, sizeof XFP8, "%s", v);
        else if (!strcmp(o, "--recent") && strlen(v) < sizeof RECENT)
            snprintf(RECENT, sizeof RECENT, "%s", v);
        else if (!strcmp(o, "--chunk-rows") && strlen(v) < sizeof CHUNK_ROWS)
            snprintf(CHUNK_ROWS, sizeof CHUNK_ROWS, "%s", v);
        else if (!strcmp(o, "--lastq") && (!strcmp(v, "mma") || !strcmp(v, "legacy")))
            LASTQ_LEGACY = !strcmp(v, "legacy");
        else {
            fprintf(stderr, "flex_gpu_bench: bad option %s %s (see tools/flex_gpu_bench.c)\n", o, v);
            return 2;
        }
    }
    if (i >= argc || H % HK) {
        fprintf(stderr, "usage: flex_gpu_bench [options] check DIR | bench [N,...] | methods [N,...] | chunk [N,...] | flexchunk [N,...] | dump DIR N KIND\n");
        return 2;
    }
    const char *cmd = argv[i];
    if (!strcmp(cmd, "dump")) return i + 3 < argc ? dump(argv[i + 1], atoi(argv[i + 2]), argv[i + 3]) : 2;
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "flex_gpu_bench: %s\n", dlerror());
        return 2;
    }
    api a;
    *(void **)&a.count = dlsym(h, "gpu_flex_test_device_count");
    *(void **)&a.index = dlsym(h, "gpu_flex_test_index");
    *(void **)&a.bench = dlsym(h, "gpu_flex_bench");
    if (!a.count || !a.index || !a.bench || a.count() < 1) {
        fprintf(stderr, "flex_gpu_bench: no CUDA device or entry points in %s\n", lib);
        return 2;
    }
    void (*set_lastq)(int) = (void (*)(int))dlsym(h, "gpu_flex_test_set_lastq_legacy");
    if (set_lastq) set_lastq(LASTQ_LEGACY);
    else if (LASTQ_LEGACY) {
        fprintf(stderr, "flex_gpu_bench: %s has one last-q form only\n", lib);
        return 2;
    }
    if (!strcmp(cmd, "check")) return i + 1 < argc ? check(&a, argv[i + 1]) : 2;
    if (!strcmp(cmd, "bench")) return bench(&a, i + 1 < argc ? argv[i + 1] : "32768,65536,131072");
    if (!strcmp(cmd, "chunk")) {
        chunk_bench_fn cb = (chunk_bench_fn)dlsym(h, "gpu_bench_attention_chunk");
        if (!cb) {
            fprintf(stderr, "flex_gpu_bench: %s lacks gpu_bench_attention_chunk\n", lib);
            return 2;
        }
        return chunk_bench(cb, i + 1 < argc ? argv[i + 1] : "32768,65536,131072");
    }
    if (!strcmp(cmd, "flexchunk")) {
        flex_chunk_fn fc = (flex_chunk_fn)dlsym(h, "gpu_flex_bench_chunk");
        if (!fc) {
            fprintf(stderr, "flex_gpu_bench: %s lacks gpu_flex_bench_chunk\n", lib);
            return 2;
        }
        return flex_chunk(fc, i + 1 < argc ? argv[i + 1] : "32768,65536,131072");
    }
    if (!strcmp(cmd, "methods")) {
        sparse_bench_fn sb = (sparse_bench_fn)dlsym(h, "gpu_sparse_bench");
        if (!sb) {
            fprintf(stderr, "flex_gpu_bench: %s lacks gpu_sparse_bench\n", lib);
            return 2;
        }
        return methods(&a, sb, i + 1 < argc ? argv[i + 1] : "32768,65536,131072");
    }
    fprintf(stderr, "flex_gpu_bench: unknown command %s\n", cmd);
    return 2;
}
