/* AsyncTLS's staggered selection on the GPU (gpu/tls.cuh: a row's set from the step before,
 * level 1 for the next step in one launch after the layer; reached with dlsym through the test
 * library, gpu/test/tls_test_api.cu's gpu_tls_test_stagger) against the CPU reference of the
 * same semantics, sparse_tls_pipe_step (sparse/tls_pipe.h), step by step over several decode
 * steps on the same h16-rounded keys and queries: the first step (selected synchronously),
 * steps whose position begins a new block, a restart in the middle (what a fork or a truncation
 * leaves: the host marks the row), every form of the layer. The lists must equal the CPU's
 * exactly (the same scores in the same arithmetic order, tests/gpu/test_tls_gpu.c's header);
 * the attention over them within the decode attention's bound (8e-3 x max|v|). Skipped without
 * the CUDA build or a device. */
#include "cpu/tls.h"
#include "gpu/gpu.h"
#include "model/ckpt/model.h"
#include "sparse/tls.h"
#include "sparse/tls_pipe.h"
#include "tests/test.h"
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*stagger_fn)(int, int, int, int, int, int, int, int, int, const float *,
                          const float *, const float *, const unsigned short *, const int *,
                          int32_t *, int32_t *, float *, int);

static stagger_fn load(char *why, size_t n)
{
    const char *b = getenv("BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/libtandem_cuda_test.so", b && *b ? b : "build");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, n, "no CUDA build (%.200s)", dlerror());
        return NULL;
    }
    int (*count)(void) = (int (*)(void))dlsym(lib, "gpu_tls_test_device_count");
    stagger_fn f;
    *(void **)&f = dlsym(lib, "gpu_tls_test_stagger");
    if (!count || !f) {
        snprintf(why, n, "test library without the staggered entry point");
        return NULL;
    }
    if (count() < 1) {
        snprintf(why, n, "no CUDA device");
        return NULL;
    }
    return f;
}

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static float bf16(float x)
{
    return model_bf16_to_f32(model_f32_to_bf16(x));
}

typedef struct scase {
    int n_heads, n_kv, hd, n0, steps, bs, r, bb, tb;
    uint32_t seed;
} scase;

/* Keys uniform in [-0.5, 0.5) with every 5th block a "topic" block leaning toward the base
 * query (+0.6 x the sign of its channel); blocks 3 and 11 copies of block 5 (level-1 ties), runs
 * of equal rows inside every 4th block (level-2 ties); values uniform in [-1, 1). Step i's
 * query: the base query plus noise of 0.4, the sign flipped on every third step (the topic
 * blocks fall out of favour: the set level 1 chose the step before is then the wrong one). */
static void synth(const scase *c, float *q, float *k, float *v)
{
    uint32_t s = c->seed;
    const int n = c->n0 + c->steps, kvd = c->n_kv * c->hd, qd = c->n_heads * c->hd;
    const int G = c->n_heads / c->n_kv;
    for (int i = 0; i < qd; i++) q[i] = rnd(&s);
    for (int p = 0; p < n; p++) {
        const int blk = p / c->bs, topic = blk % 5 == 2;
        for (int g = 0; g < c->n_kv; g++)
            for (int e = 0; e < c->hd; e++) {
                float x = 0.5f * rnd(&s);
                if (topic) x = 0.6f * (q[(size_t)g * G * c->hd + e] > 0 ? 1.0f : -1.0f) + 0.3f * rnd(&s);
                k[(size_t)p * kvd + (size_t)g * c->hd + e] = bf16(x);
                v[(size_t)p * kvd + (size_t)g * c->hd + e] = bf16(rnd(&s));
            }
        if (blk % 4 == 1 && p % c->bs >= 8 && p % c->bs < 16)
            memcpy(k + (size_t)p * kvd, k + (size_t)(p - 1) * kvd, sizeof(float) * kvd);
    }
    if (n / c->bs > 11)
        for (int dst = 3; dst <= 11; dst += 8)
            memcpy(k + (size_t)dst * c->bs * kvd, k + (size_t)5 * c->bs * kvd, sizeof(float) * c->bs * kvd);
    for (int i = c->steps - 1; i >= 0; i--)
        for (int j = 0; j < qd; j++) {
            const float base = q[j] * (i % 3 == 2 ? -1.0f : 1.0f);
            q[(size_t)i * qd + j] = bf16(base + 0.4f * rnd(&s));
        }
}

static void run_case(stagger_fn f, const scase *c, int form)
{
    const int n = c->n0 + c->steps, kvd = c->n_kv * c->hd, qd = c->n_heads * c->hd;
    const int G = c->n_heads / c->n_kv, S = c->steps;
    float *q = malloc(sizeof(float) * qd * S), *k = malloc(sizeof(float) * kvd * n),
          *v = malloc(sizeof(float) * kvd * n), *att = malloc(sizeof(float) * qd * S);
    int32_t *idx = malloc(sizeof(int32_t) * S * c->n_kv * GPU_TLS_MAX_TOKENS),
            *cnt = malloc(sizeof(int32_t) * S * c->n_kv);
    unsigned short *ch = malloc(sizeof(unsigned short) * c->n_kv * c->r);
    int *restart = calloc(S, sizeof(int));
    REQUIRE(q && k && v && att && idx && cnt && ch && restart);
    synth(c, q, k, v);
    for (int g = 0; g < c->n_kv; g++)
        for (int i = 0; i < c->r; i++)
            ch[g * c->r + i] = (unsigned short)((i * c->hd) / c->r + g % (c->hd / c->r));
    restart[S / 2] = 1; /* a fork's or a truncation's first step */
    int st = f(c->n_heads, c->n_kv, c->hd, c->n0, S, c->bs, c->r, c->bb, c->tb, q, k, v, ch,
               restart, idx, cnt, att, form);
    CHECK_MSG(st == 0, "gpu_tls_test_stagger: %d", st);
    if (st) goto out;
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.block_size = c->bs, p.block_budget = c->bb, p.token_budget = c->tb, p.channels = c->r;
    p.dense_layers = 0, p.stagger = 1;
    sparse_tls_seq *s = sparse_tls_seq_new(1, c->n_kv, c->hd, c->r, c->bs, n, ch);
    sparse_tls_pipe *pipe = sparse_tls_pipe_new(&p, 1, c->n_kv, n);
    float *fw = malloc(sizeof(float) * sparse_tls_pipe_work_floats(&p, c->hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_pipe_work_ints(&p, n));
    int32_t *pos = malloc(sizeof(int32_t) * n);
    float *ref = malloc(sizeof(float) * c->hd), *scr = malloc(sizeof(float) * n);
    REQUIRE(s && pipe && fw && iw && pos && ref && scr);
    float vmax = 0;
    for (size_t i = 0; i < (size_t)kvd * n; i++) vmax = fabsf(v[i]) > vmax ? fabsf(v[i]) : vmax;
    float *kb[1] = {k}, *vb[1] = {v};
    const int32_t table[1] = {0};
    double worst = 0;
    int bad = 0;
    for (int pp = 0; pp < c->n0; pp++) sparse_tls_put(s, 0, pp, k + (size_t)pp * kvd);
    for (int i = 0; i < S; i++) {
        const int pp = c->n0 + i;
        sparse_tls_put(s, 0, pp, k + (size_t)pp * kvd);
        if (restart[i]) sparse_tls_pipe_reset_layer(pipe, 0);
        for (int g = 0; g < c->n_kv; g++) {
            const float *qg = q + (size_t)i * qd + (size_t)g * G * c->hd;
            const int m = sparse_tls_pipe_step(pipe, &p, s, 0, g, qg, G, c->hd, pp + 1, pos, fw, iw, NULL);
            const int32_t *gl = idx + ((size_t)i * c->n_kv + g) * GPU_TLS_MAX_TOKENS;
            const int gm = cnt[(size_t)i * c->n_kv + g];
            int diff = gm == m ? -1 : 0;
            for (int j = 0; diff < 0 && j < m; j++)
                if (gl[j] != pos[j]) diff = j;
            if (diff >= 0 && bad++ < 4)
                CHECK_MSG(0, "form %d n0 %d bs %d bb %d tb %d step %d head %d: GPU %d kept, CPU %d; "
                          "lists differ at %d (GPU %d, CPU %d)", form, c->n0, c->bs, c->bb, c->tb, i,
                          g, gm, m, diff, diff < gm ? gl[diff] : -1, diff < m ? pos[diff] : -1);
            for (int h = 0; h < G; h++) {
                cpu_tls_attend(ref, qg + (size_t)h * c->hd, kb, vb, table, n, (size_t)g * c->hd, pos,
                               m, kvd, c->hd, 1.0f / sqrtf((float)c->hd), scr);
                for (int e = 0; e < c->hd; e++) {
                    double d = fabs((double)ref[e] - att[(size_t)i * qd + ((size_t)g * G + h) * c->hd + e]);
                    worst = d > worst ? d : worst;
                }
            }
        }
    }
    CHECK_MSG(bad == 0, "%d of %d (step, head) lists differ", bad, S * c->n_kv);
    CHECK_MSG(worst <= 8e-3 * vmax, "attention over the kept keys off by %.3g (bound %.3g)", worst,
              8e-3 * vmax);
    fprintf(stderr, "  stagger form %d n0=%d steps %d bs %d bb %d tb %d: lists equal, attention "
            "worst %.3g; level 1 moved %lld blocks in (baseline %lld)\n", form, c->n0, S, c->bs,
            c->bb, c->tb, worst, (long long)pipe->fetched, (long long)pipe->baseline);
    sparse_tls_pipe_free(pipe);
    sparse_tls_seq_free(s);
    free(fw);
    free(iw);
    free(pos);
    free(ref);
    free(scr);
out:
    free(q);
    free(k);
    free(v);
    free(att);
    free(idx);
    free(cnt);
    free(ch);
    free(restart);
}

TEST(gpu_tls_stagger_equals_cpu)
{
    char why[300];
    stagger_fn f = load(why, sizeof why);
    if (!f) SKIP("%s", why);
    const scase cs[] = {
        /* steps across a block boundary (block 64: positions 3070 .. 3081 begin block 48) */
        {32, 8, 128, 3070, 12, 64, 32, 8, 256, 1},
        {8, 2, 128, 4090, 12, 64, 32, 16, 1024, 3},  /* level-1 ties (copied blocks) */
        {8, 2, 128, 3990, 10, 64, 32, 100, 512, 4},  /* level 1 keeps all but a few */
        {8, 2, 128, 3990, 10, 64, 32, 12, 4096, 5},  /* level 2 keeps every candidate */
        {4, 4, 64, 2395, 12, 16, 16, 40, 300, 8},    /* MHA, head_dim 64, block 16 */
        {16, 2, 128, 2940, 10, 128, 32, 10, 700, 9}, /* group of 8, block 128 */
        {4, 2, 96, 1947, 10, 32, 24, 20, 333, 10},   /* head_dim 96, r 24 */
        /* level 1 over 8,750 blocks (selected over the cluster in the one-kernel form) */
        {8, 2, 128, 11985, 8, 64, 32, 160, 1024, 12},
    };
    for (int form = 1; form <= 6; form++)
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(f, &cs[i], form);
}
