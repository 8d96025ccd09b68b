/* tools/tls_bench.c — AsyncTLS sparse decode on the CPU: fidelity at the attention level on
 * structured synthetic KV, and decode time of a model at long contexts, dense vs sparse.
 *
 *   build/tls_bench attn [--tokens 32768] [--heads 32] [--kv-heads 8] [--dim 128]
 *                        [--kind topics] [--queries 8] [--block 64] [--block-budget 128]
 *                        [--channels 32] [--seed 1] [--q-scale 1]
 *     K, V and `queries` decode queries from the "topics" synthetic below (or, with --kind, the
 *     last rows of cpu/flex_synth.h's prefill patterns), channels calibrated on 2048 of its rows; for token budgets 512 / 1024 / 2048 and each method —
 *     AsyncTLS (both levels), Quest alone (level 1, the budget in whole blocks) and Double
 *     Sparsity alone (level 2 over every key) — the dense attention mass the kept tokens hold and
 *     the relative L2 error of the attention output, averaged over query heads and queries
 *     (and the worst one); and AsyncTLS staggered (stagger=1: level 2 in the blocks level 1 chose
 *     with the step before's query, which is the same topics with fresh noise, or other topics:
 *     a switch; with --kind, the query row before). --q-scale multiplies the decode queries (sharper attention: the
 *     synthetic favours its keys by about 8 logits, which at 32K keys leaves most of the mass in
 *     the background).
 *
 *   build/tls_bench decode --model DIR --channels FILE [--context 32768] [--steps 4]
 *                          [--spec asynctls] [--threads 2] [--compare] [--seed 1]
 *     The model's KV for `context` positions imported from random int8 (as a card or GPU would
 *     ship it), then `steps` decode steps timed, dense and with the spec (one device at a time:
 *     the KV of both would not fit here at 128K); prints the median ms/token of each and the
 *     fraction of keys the sparse steps read. --compare also decodes the same steps on both and
 *     prints top-1 agreement and the KL of the sparse logits from the dense ones.
 *
 *   build/tls_bench card
 *     fpga/tls_model.h's price of a LLaMA2-7B decode step on a U280 with the KV in DDR4, for
 *     contexts 4K and 32K, token budgets 512 / 1024 / 2048 and fetched fractions of the block
 *     budget (the pipeline's temporal locality), beside the dense run from HBM. */
#include "cpu/backend.h"
#include "cpu/flex_synth.h"
#include "cpu/ops.h"
#include "cpu/tls.h"
#include "devices/devices.h"
#include "fpga/image.h"
#include "fpga/tls_model.h"
#include "model/ckpt/model.h"
#include "sparse/tls.h"
#include "sparse/tls_pipe.h"
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

static long arg_int(const char *v, long lo, long hi, const char *name)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || x < lo || x > hi) {
        fprintf(stderr, "tls_bench: %s must be an integer in [%ld, %ld]\n", name, lo, hi);
        exit(2);
    }
    return x;
}

/* The "topics" synthetic (the default of attn): attention as concentrated as a trained model's,
 * scattered over the context so that both levels matter. Per KV head, 32 topic directions whose
 * energy sits in 32 of the head_dim channels (std 1 there, 0.2 elsewhere: the outlier channels
 * Double Sparsity relies on), normalized. Key j of block b (of `bs`) is N(0, 0.3^2) noise plus,
 * for one key in four (hash-chosen), 4 x the topic of its block (topic = hash(b) mod 32). Query
 * head h of group g is 25 x the mean of 2 topics (hash of h: heads of a group share one) plus
 * N(0, 0.3^2): its keys stand about 8.8 logits above the rest. V is N(0, 1). */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static float gauss(uint64_t key) /* N(0, 1), a pure function of key */
{
    uint64_t a = mix(key), b = mix(key ^ 0x5555);
    double u = ((a >> 11) + 0.5) / 9007199254740992.0, w = (b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w));
}
typedef struct topics {
    int Hk, hd, bs;
    uint64_t seed;
    float *dir; /* (Hk, 32, hd) */
} topics;
static void topics_init(topics *t)
{
    t->dir = malloc(sizeof(float) * t->Hk * 32 * t->hd);
    for (int g = 0; g < t->Hk; g++)
        for (int c = 0; c < 32; c++) {
            float *d = t->dir + ((size_t)g * 32 + c) * t->hd;
            double n2 = 0;
            for (int i = 0; i < t->hd; i++) {
                int loud = (int)(mix(t->seed * 977 + (uint64_t)g * 131 + (uint64_t)i) % 4) == 0;
                d[i] = gauss(t->seed ^ ((uint64_t)g << 40 | (uint64_t)c << 20 | (uint64_t)i)) *
                       (loud ? 1.0f : 0.2f);
                n2 += (double)d[i] * d[i];
            }
            for (int i = 0; i < t->hd; i++) d[i] = (float)(d[i] / sqrt(n2));
        }
}
static void topics_kv(const topics *t, int j, float *k, float *v)
{
    int b = j / t->bs, strong = mix(t->seed * 31 + (uint64_t)j) % 4 == 0;
    for (int g = 0; g < t->Hk; g++) {
        const float *d = t->dir + ((size_t)g * 32 + mix(t->seed + (uint64_t)b * 7 + (uint64_t)g) % 32) * t->hd;
        for (int i = 0; i < t->hd; i++) {
            uint64_t key = t->seed ^ ((uint64_t)j << 24) ^ ((uint64_t)g << 12) ^ (uint64_t)i;
            if (k) k[(size_t)g * t->hd + i] = 0.3f * gauss(key * 3 + 1) + (strong ? 4.0f * d[i] : 0.0f);
            if (v) v[(size_t)g * t->hd + i] = gauss(key * 3 + 2);
        }
    }
}
/* query heads of a group share their 2 topics (drawn per group and query index qi), the noise
 * drawn per noise index ni */
static void topics_qn(const topics *t, int G, uint64_t qi, uint64_t ni, float *q)
{
    for (int g = 0; g < t->Hk; g++) {
        int c0 = (int)(mix(t->seed * 5 + qi * 1009 + (uint64_t)g) % 32), c1 = (int)(mix(t->seed * 11 + qi * 2003 + (uint64_t)g) % 32);
        const float *d0 = t->dir + ((size_t)g * 32 + c0) * t->hd, *d1 = t->dir + ((size_t)g * 32 + c1) * t->hd;
        for (int h = 0; h < G; h++)
            for (int i = 0; i < t->hd; i++)
                q[((size_t)g * G + h) * t->hd + i] = 25.0f * 0.5f * (d0[i] + d1[i]) +
                    0.3f * gauss(t->seed ^ (ni << 32) ^ ((uint64_t)(g * G + h) << 16) ^ (uint64_t)i ^ 0xabcdef);
    }
}
static void topics_q(const topics *t, int G, uint64_t qi, float *q)
{
    topics_qn(t, G, qi, qi, q);
}

/* ---------------------------------------------------------------- attn */

static int attn_main(int argc, char **argv)
{
    cpu_flex_synth s = {.kind = CPU_FLEX_SYNTH_STRUCTURED, .n_tokens = 32768, .n_heads = 32,
                        .n_kv_heads = 8, .head_dim = 128, .block_size = 64, .seed = 1};
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    int nq = 8, use_topics = 1;
    double qscale = 1.0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--tokens")) s.n_tokens = (int)arg_int(v, 4096, 1 << 20, a);
        else if (!strcmp(a, "--heads")) s.n_heads = (int)arg_int(v, 1, 256, a);
        else if (!strcmp(a, "--kv-heads")) s.n_kv_heads = (int)arg_int(v, 1, 256, a);
        else if (!strcmp(a, "--dim")) s.head_dim = (int)arg_int(v, 16, 1024, a);
        else if (!strcmp(a, "--queries")) nq = (int)arg_int(v, 1, 256, a);
        else if (!strcmp(a, "--q-scale")) qscale = atof(v);
        else if (!strcmp(a, "--block")) p.block_size = (int)arg_int(v, 16, 128, a);
        else if (!strcmp(a, "--block-budget")) p.block_budget = (int)arg_int(v, 1, 65536, a);
        else if (!strcmp(a, "--channels")) p.channels = (int)arg_int(v, 2, 1024, a);
        else if (!strcmp(a, "--seed")) s.seed = (uint64_t)arg_int(v, 0, 1L << 40, a);
        else if (!strcmp(a, "--kind")) {
            int k = cpu_flex_synth_kind_parse(v);
            use_topics = !strcmp(v, "topics");
            if (k < 0 && !use_topics) return fprintf(stderr, "tls_bench: unknown --kind %s\n", v), 2;
            if (k >= 0) s.kind = (enum cpu_flex_synth_kind)k;
        } else return fprintf(stderr, "tls_bench attn: unknown option %s\n", a), 2;
    }
    s.block_size = p.block_size; /* the synthetic topics change at the level-1 block edges */
    const int n = s.n_tokens, H = s.n_heads, Hk = s.n_kv_heads, hd = s.head_dim, G = H / Hk;
    const size_t kvd = (size_t)Hk * hd, qd = (size_t)H * hd;
    if (H % Hk || p.channels > hd || p.channels % 2) return fprintf(stderr, "tls_bench: bad shape\n"), 2;
    float *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
    float *q = malloc(sizeof(float) * nq * qd), *cq = malloc(sizeof(float) * qd * 64);
    float *ck = malloc(sizeof(float) * kvd * 64);
    if (!k || !v || !q || !cq || !ck) return fprintf(stderr, "tls_bench: out of memory\n"), 1;
    double t0 = now_s();
    topics tp = {.Hk = Hk, .hd = hd, .bs = p.block_size, .seed = s.seed};
    if (use_topics) {
        topics_init(&tp);
        for (int j = 0; j < n; j++) topics_kv(&tp, j, k + (size_t)j * kvd, v + (size_t)j * kvd);
        for (int i = 0; i < nq; i++) topics_q(&tp, G, (uint64_t)i, q + (size_t)i * qd);
    } else {
        cpu_flex_synth_rows(&s, 0, n, NULL, k, v);
        cpu_flex_synth_rows(&s, n - nq, n, q, NULL, NULL);
    }
    for (size_t i = 0; i < (size_t)nq * qd; i++) q[i] *= (float)qscale; /* sharper attention */
    /* channels: 2048 rows spread over the context, each query against its own key (topics:
     * queries of other topic pairs than the measured ones) */
    sparse_tls_calib *cal = sparse_tls_calib_new(1, H, Hk, hd);
    for (int c = 0; c < 32; c++) {
        int r0 = (int)((int64_t)c * (n - 64) / 32);
        if (use_topics)
            for (int i = 0; i < 64; i++) {
                topics_q(&tp, G, 1000000 + (uint64_t)(r0 + i), cq + (size_t)i * qd);
                topics_kv(&tp, r0 + i, ck + (size_t)i * kvd, NULL);
            }
        else cpu_flex_synth_rows(&s, r0, r0 + 64, cq, ck, NULL);
        sparse_tls_calib_add(cal, 0, cq, ck, 64);
    }
    uint16_t *ch = malloc(sizeof(uint16_t) * Hk * p.channels);
    sparse_tls_calib_select(cal, p.channels, ch);
    sparse_tls_calib_free(cal);
    sparse_tls_seq *ts = sparse_tls_seq_new(1, Hk, hd, p.channels, p.block_size, n, ch);
    if (!ts) return fprintf(stderr, "tls_bench: out of memory\n"), 1;
    for (int t = 0; t < n; t++) sparse_tls_put(ts, 0, t, k + (size_t)t * kvd);
    /* the cache as 16-position blocks (cpu/kv_cache.h's layout for one layer) */
    int nblk = (n + 15) / 16;
    float **kb = malloc(sizeof(float *) * nblk), **vb = malloc(sizeof(float *) * nblk);
    int32_t *table = malloc(sizeof(int32_t) * nblk);
    for (int b = 0; b < nblk; b++) {
        kb[b] = k + (size_t)b * 16 * kvd;
        vb[b] = v + (size_t)b * 16 * kvd;
        table[b] = b;
    }
    printf("attn: %d keys, %d heads / %d KV heads, head_dim %d, synthetic %s (seed %llu), %d "
           "decode queries (x%.1f), block %d, %d channels; inputs built in %.1f s\n",
           n, H, Hk, hd, use_topics ? "topics" : cpu_flex_synth_kind_name(s.kind), (unsigned long long)s.seed, nq, qscale,
           p.block_size, p.channels, now_s() - t0);
    printf("| method | token budget | kept keys | mass captured (mean / min) | output rel. error (mean / max) |\n");
    printf("|---|---|---|---|---|\n");
    float *prob = malloc(sizeof(float) * n), *sc = malloc(sizeof(float) * n);
    float *fw = malloc(sizeof(float) * sparse_tls_pipe_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * (sparse_tls_pipe_work_ints(&p, n) + 2 * (size_t)n));
    /* the staggered selection (stagger=1, sparse/tls_pipe.h) needs the step before's query: the
     * same topics with fresh noise (a decode that stays on its subject), or (topics synthetic
     * only) other topics (a switch: the blocks chosen the step before are the wrong ones) */
    float *qprev = malloc(sizeof(float) * qd);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    float scale = 1.0f / sqrtf((float)hd);
    const int budgets[3] = {512, 1024, 2048};
    const char *names[5] = {"AsyncTLS", "Quest (level 1)", "Double Sparsity (level 2)",
                            "AsyncTLS staggered, same topics before", "AsyncTLS staggered, a switch"};
    for (int method = 0; method < (use_topics ? 5 : 4); method++)
        for (int bi = 0; bi < 3; bi++) {
            sparse_tls_params mp = p;
            if (method == 0 || method >= 3) mp.token_budget = budgets[bi];
            if (method == 1) mp.block_budget = budgets[bi] / p.block_size, mp.token_budget = n;
            if (method == 2) mp.block_budget = (n + p.block_size - 1) / p.block_size,
                             mp.token_budget = budgets[bi];
            double mass = 0, mass_min = 1, err = 0, err_max = 0, kept = 0;
            for (int qi = 0; qi < nq; qi++) {
                int nk = n - nq + qi + 1;
                sparse_tls_pipe *pp = NULL;
                if (method >= 3) {
                    /* the step before (nk - 1 keys) selects synchronously, as a first step does,
                     * and chooses the set this one attends in */
                    if (use_topics) topics_qn(&tp, G, method == 3 ? (uint64_t)qi : 5000 + (uint64_t)qi,
                                              7000 + (uint64_t)qi, qprev);
                    else memcpy(qprev, q + (qi ? qi - 1 : 0) * qd, sizeof(float) * qd);
                    for (size_t i = 0; use_topics && i < qd; i++) qprev[i] *= (float)qscale;
                    pp = sparse_tls_pipe_new(&mp, 1, Hk, n);
                    if (!pp) return fprintf(stderr, "tls_bench: out of memory\n"), 1;
                    for (int g = 0; g < Hk; g++)
                        sparse_tls_pipe_step(pp, &mp, ts, 0, g, qprev + (size_t)g * G * hd, G, hd,
                                             nk - 1, pos, fw, iw, NULL);
                }
                for (int g = 0; g < Hk; g++) {
                    const float *qg = q + qi * qd + (size_t)g * G * hd;
                    int m = pp ? sparse_tls_pipe_step(pp, &mp, ts, 0, g, qg, G, hd, nk, pos, fw, iw, NULL)
                               : sparse_tls_select(&mp, ts, 0, g, qg, G, hd, nk, pos, fw, iw, NULL);
                    kept += m;
                    for (int h = 0; h < G; h++) {
                        const float *qh = qg + (size_t)h * hd;
                        float od[1024], os[1024];
                        for (int j = 0; j < nk; j++)
                            prob[j] = cpu_dot(qh, k + (size_t)j * kvd + (size_t)g * hd, hd) * scale;
                        cpu_softmax(prob, nk);
                        cpu_attend(od, qh, k + (size_t)g * hd, v + (size_t)g * hd, nk, (int)kvd,
                                   hd, scale, sc);
                        cpu_tls_attend(os, qh, kb, vb, table, 16, (size_t)g * hd, pos, m,
                                       (int)kvd, hd, scale, sc);
                        double ms = 0, e2 = 0, d2 = 0;
                        for (int j = 0; j < m; j++) ms += prob[pos[j]];
                        for (int e = 0; e < hd; e++) {
                            e2 += (double)(os[e] - od[e]) * (os[e] - od[e]);
                            d2 += (double)od[e] * od[e];
                        }
                        double re = sqrt(e2 / (d2 > 0 ? d2 : 1));
                        mass += ms;
                        mass_min = ms < mass_min ? ms : mass_min;
                        err += re;
                        err_max = re > err_max ? re : err_max;
                    }
                }
                sparse_tls_pipe_free(pp);
            }
            double cnt = (double)nq * H;
            printf("| %s | %d | %.0f | %.4f / %.4f | %.4f / %.4f |\n", names[method], budgets[bi],
                   kept / (nq * Hk), mass / cnt, mass_min, err / cnt, err_max);
        }
    return 0;
}

/* ---------------------------------------------------------------- decode */

static uint64_t rs = 1;
static inline uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* KV for positions [0, n) from random int8 (scales 1/32: values within about +-4) */
static int fill_kv(accel_dev *d, accel_seq *s, int n, uint64_t seed)
{
    const model_config *c = &accel_model(d)->cfg;
    const int chunk = 2048;
    size_t vb = proto_kv_value_bytes(PROTO_KV_INT8, chunk, c->n_kv_heads, c->head_dim);
    size_t sc = proto_kv_scale_count(PROTO_KV_INT8, chunk, c->n_kv_heads, c->head_dim);
    uint8_t *kq = malloc(vb), *vq = malloc(vb);
    uint16_t *ks = malloc(sc * 2);
    if (!kq || !vq || !ks) return ACCEL_ERR_NOMEM;
    for (size_t i = 0; i < sc; i++) ks[i] = model_f32_to_f16(1.0f / 32);
    rs = seed * 2654435761u + 1;
    int st = 0;
    for (int p0 = 0; p0 < n && !st; p0 += chunk) {
        int m = n - p0 < chunk ? n - p0 : chunk;
        for (int l = 0; l < c->n_layers && !st; l++) {
            for (size_t i = 0; i < vb; i += 8) {
                uint64_t r = rnd(), w = rnd();
                memcpy(kq + i, &r, vb - i < 8 ? vb - i : 8);
                memcpy(vq + i, &w, vb - i < 8 ? vb - i : 8);
            }
            proto_kv_layer ch = {.layer = l, .pos0 = p0, .n_tokens = m, .n_kv_heads = c->n_kv_heads,
                                 .head_dim = c->head_dim, .dtype = PROTO_KV_INT8, .k = kq, .v = vq,
                                 .k_scale = ks, .v_scale = ks};
            st = accel_kv_import(d, s, &ch);
        }
    }
    free(kq);
    free(vq);
    free(ks);
    return st;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Imports the KV, decodes `steps` tokens (one untimed first), returns the median ms; logits of
 * the timed steps into lg when not NULL. */
static double run(accel_dev *d, int ctx, int steps, const int32_t *ids, uint64_t seed, float *lg)
{
    const int V = accel_model(d)->cfg.vocab;
    accel_seq *s;
    float *out = malloc(sizeof(float) * V);
    if (!out || accel_seq_new(d, ctx + steps + 1, &s)) return -1;
    double t0 = now_s();
    if (fill_kv(d, s, ctx, seed)) return -1;
    fprintf(stderr, "  KV of %d positions imported in %.1f s\n", ctx, now_s() - t0);
    double *ms = malloc(sizeof(double) * steps);
    int st = accel_decode(d, 1, &s, &ids[0], out);
    for (int i = 0; i < steps && !st; i++) {
        double a = now_s();
        st = accel_decode(d, 1, &s, &ids[i + 1], lg ? lg + (size_t)i * V : out);
        ms[i] = (now_s() - a) * 1e3;
    }
    accel_seq_free(d, s);
    free(out);
    if (st) return -1;
    qsort(ms, steps, sizeof *ms, cmp_d);
    double med = ms[steps / 2];
    free(ms);
    return med;
}

static int decode_main(int argc, char **argv)
{
    const char *dir = NULL, *chan = NULL, *spec = "asynctls";
    int ctx = 32768, steps = 4, threads = 2, compare = 0;
    uint64_t seed = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--compare")) {
            compare = 1;
            continue;
        }
        i++;
        if (!strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--channels")) chan = v;
        else if (!strcmp(a, "--spec")) spec = v;
        else if (!strcmp(a, "--context")) ctx = (int)arg_int(v, 1, 1 << 20, a);
        else if (!strcmp(a, "--steps")) steps = (int)arg_int(v, 1, 1000, a);
        else if (!strcmp(a, "--threads")) threads = (int)arg_int(v, 1, 1024, a);
        else if (!strcmp(a, "--seed")) seed = (uint64_t)arg_int(v, 0, 1L << 40, a);
        else return fprintf(stderr, "tls_bench decode: unknown option %s\n", a), 2;
    }
    if (!dir || !chan) return fprintf(stderr, "tls_bench decode: --model and --channels\n"), 2;
    char err[512];
    model *m = model_load(dir, err, sizeof err);
    if (!m) return fprintf(stderr, "tls_bench: %s\n", err), 1;
    const int V = m->cfg.vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (steps + 1));
    for (int i = 0; i <= steps; i++) ids[i] = (int32_t)(rnd() % (uint64_t)V);
    float *lg[2] = {NULL, NULL};
    if (compare) {
        lg[0] = malloc(sizeof(float) * steps * V);
        lg[1] = malloc(sizeof(float) * steps * V);
    }
    double med[2];
    int64_t rd = 0, tot = 0;
    for (int sp = 0; sp < 2; sp++) {
        accel_opts o = {.threads = threads, .decode_sparse = sp ? spec : "off",
                        .sparse_channels = chan};
        accel_dev *d = devices_open("cpu", m, &o, err, sizeof err);
        if (!d) return fprintf(stderr, "tls_bench: %s\n", err), 1;
        med[sp] = run(d, ctx, steps, ids, seed, lg[sp]);
        if (sp) cpu_accel_tls_stats(d, &rd, &tot);
        accel_free(d);
        if (med[sp] < 0) return fprintf(stderr, "tls_bench: decode failed\n"), 1;
    }
    printf("| %d | %.1f | %.1f | %.2fx | %.3f |", ctx, med[0], med[1], med[0] / med[1],
           tot ? (double)rd / tot : 1.0);
    if (compare) {
        int agree = 0;
        double kl = 0;
        for (int i = 0; i < steps; i++) {
            const float *x = lg[0] + (size_t)i * V, *y = lg[1] + (size_t)i * V;
            int ax = 0, ay = 0;
            double mx = x[0], my = y[0], sx = 0, sy = 0;
            for (int j = 1; j < V; j++) {
                if (x[j] > x[ax]) ax = j;
                if (y[j] > y[ay]) ay = j;
            }
            mx = x[ax], my = y[ay];
            for (int j = 0; j < V; j++) sx += exp(x[j] - mx), sy += exp(y[j] - my);
            double lx = mx + log(sx), ly = my + log(sy);
            for (int j = 0; j < V; j++) kl += exp(x[j] - lx) * ((x[j] - lx) - (y[j] - ly));
            agree += ax == ay;
        }
        printf(" %d/%d | %.4g |", agree, steps, kl / steps);
    }
    printf("\n");
    model_free(m);
    return 0;
}


/* ---------------------------------------------------------------- card (model) */

static int card_main(int argc, char **argv)
{
    /* LLaMA2-7B, W4A8 g128 with an int8 lm_head (the card's smallest 7B image), int8 KV */
    model_config cfg = {.hidden = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32,
                        .head_dim = 128, .intermediate = 11008, .vocab = 32000, .max_pos = 32768,
                        .rms_eps = 1e-5f};
    fpga_quant_opts q;
    fpga_dec_desc d;
    char err[256];
    fpga_quant_opts_default(&q, 4, cfg.hidden);
    if (fpga_image_desc_cfg(&cfg, &q, &d, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    fpga_dec_layout lo;
    fpga_dec_layout_of(&d, &lo);
    double image = (double)lo.image_bytes * FPGA_DEC_CH;
    printf("LLaMA2-7B W4A8 on a U280, KV int8 (+fp16 scales), AsyncTLS block 64 x 128 blocks, "
           "32 channels: image %.2f GiB of the 8 GiB HBM\n\n", image / (1 << 30));
    printf("| context | KV GiB (DDR4) | fits HBM dense? | HBM resident GiB | fetched / block budget "
           "| budget | attend ms | select ms | fetch ms | modeled ms/token | dense ms/token (if it fitted) |\n");
    printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    const uint32_t ctxs[] = {4096, 32768};
    const double fracs[] = {0.05, 0.25, 1.0};
    const uint32_t budgets[] = {512, 1024, 2048};
    for (size_t c = 0; c < 2; c++)
        for (size_t b = 0; b < 3; b++)
            for (size_t f = 0; f < 3; f++) {
                if (b != 1 && f != 1) continue;
                fpga_tls_model_in in = {.context = ctxs[c], .token_budget = budgets[b],
                                        .block_size = 64, .block_budget = 128, .channels = 32,
                                        .fetch_frac = fracs[f]};
                fpga_tls_cost o;
                fpga_tls_model_step(&d, &in, &o);
                int fits = image + (double)o.kv_bytes <= 8.0 * (1 << 30);
                printf("| %u | %.2f | %s | %.2f | %.2f | %u | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                       ctxs[c], o.kv_bytes / 1073741824.0, fits ? "yes" : "no",
                       o.resident_bytes / 1073741824.0, fracs[f], budgets[b], o.attend_ns / 1e6,
                       o.select_ns / 1e6, o.fetch_ns / 1e6, o.modeled_ns / 1e6, o.dense_ns / 1e6);
            }
    (void)argc;
    (void)argv;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "card")) return card_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "attn")) return attn_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "decode")) return decode_main(argc, argv);
    fprintf(stderr, "usage: tls_bench attn|decode|card [options] (see the header of tools/tls_bench.c)\n");
    return 2;
}
