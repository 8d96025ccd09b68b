/* accel_decode_argmax on the CUDA device (issue 20: batched decode at batch 256 without the
 * float32 logits crossing PCIe): the greedy token of each row picked on the GPU
 * (gpu/logits.cu) and only the rows asked for copied back.
 *
 *   gpu_argmax_kernel   the kernel against model_sample_argmax and the CPU sampler's greedy
 *                       step (model_sampler_sample at temperature 0) on rows made to test the
 *                       rule: ties (within one thread's ids, across threads and warps, at the
 *                       last id), NaN anywhere (never chosen), +inf tied with FLT_MAX (the
 *                       sampler counts +inf as FLT_MAX: the lower id wins), -0 tied with +0,
 *                       rows with no finite logit (-1), subnormals, constant rows, and random
 *                       rows of 1 .. 128,256 (Llama-3's vocabulary) ids. Equal, every row, both
 *                       builds.
 *   gpu_decode_argmax_* the engine through accel.h on an mkmodel GQA checkpoint with the Llama-3
 *                       head: batches of 3 (the lm_head in the graph) and 40 (in column chunks
 *                       after it), some rows' logits asked for; every wanted row's token equals
 *                       model_sample_argmax of the logits that came back with it (bit for bit);
 *                       the same step decoded again with accel_decode (full logits, after
 *                       truncating one position) gives the same logits for the wanted rows
 *                       (reported: the step is deterministic), and then every row's token
 *                       (wanted or not) must equal the host's argmax of that step's row. The fp16
 *                       build too; also with graphs=0 (the ungraphed path),
 *                       logits_chunks=1, and argmax=0 (the device declines: no
 *                       ACCEL_CAP_DECODE_ARGMAX, the wrapper takes the argmax on the host). */
#include "model/sample/sample.h"
#include "tests/gpu/gpu_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HD128 "--hidden 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 768 " \
              "--vocab 2000 --max-pos 4096"

static uint32_t rng_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* The CPU sampler's own greedy choice of row (a copy: it rewrites NaN), -1 without a finite logit */
static int32_t sampler_greedy(const float *row, int V)
{
    int finite = 0;
    for (int i = 0; i < V && !finite; i++) finite = isfinite(row[i]);
    if (!finite) return -1; /* the scheduler refuses such a row before sampling */
    model_sampling p = model_sampling_default();
    p.temperature = 0;
    p.has_seed = 1;
    char err[128];
    model_sampler *s = model_sampler_new(&p, V, NULL, 0, 0, err, sizeof err);
    float *cp = malloc(sizeof(float) * (size_t)V);
    if (!s || !cp) {
        model_sampler_free(s);
        free(cp);
        return -2;
    }
    memcpy(cp, row, sizeof(float) * (size_t)V);
    int32_t t = model_sampler_sample(s, cp, NULL);
    model_sampler_free(s);
    free(cp);
    return t;
}

enum { KINDS = 12 };

/* Row kind k of V ids (seeded) */
static void make_row(float *r, int V, int kind, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (int i = 0; i < V; i++) r[i] = (float)((int)(rng_next(&s) % 2001) - 1000) / 100.0f;
    const int a = (int)(rng_next(&s) % V), b = (int)(rng_next(&s) % V);
    switch (kind) {
    case 0: break; /* random: ties among 2001 values are common at large V */
    case 1:        /* the max at two random ids, and at ids one thread apart (1024 threads) */
        r[a] = r[b] = 50;
        if (a + 1024 < V) r[a + 1024] = 50;
        break;
    case 2: /* the max only at the last id, and a tie with it in the middle */
        r[V - 1] = 60;
        if (V > 2) r[V / 2] = 60;
        break;
    case 3: /* NaN at the start, at random ids and where the max would be */
        r[0] = NAN;
        r[a] = NAN;
        for (int i = 0; i < V; i += 7) r[i] = NAN;
        break;
    case 4: /* +inf later than FLT_MAX: the lower id wins (both count as FLT_MAX) */
        r[a > b ? b : a] = FLT_MAX;
        r[a > b ? a : b] = INFINITY;
        break;
    case 5: /* +inf before FLT_MAX */
        r[a > b ? b : a] = INFINITY;
        r[a > b ? a : b] = FLT_MAX;
        break;
    case 6: /* every value negative but -0 and +0 (-0 first): they tie */
        for (int i = 0; i < V; i++) r[i] = -1.0f - (float)(i % 5);
        r[a > b ? b : a] = -0.0f;
        r[a > b ? a : b] = 0.0f;
        break;
    case 7: /* no finite logit: -inf, NaN and +inf only */
        for (int i = 0; i < V; i++) r[i] = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? NAN : INFINITY;
        break;
    case 8: /* every logit -inf */
        for (int i = 0; i < V; i++) r[i] = -INFINITY;
        break;
    case 9: /* a constant row: id 0 */
        for (int i = 0; i < V; i++) r[i] = 0.25f;
        break;
    case 10: /* subnormals around zero, the max a subnormal at two ids */
        for (int i = 0; i < V; i++) r[i] = -(float)(i % 9 + 1) * 1e-40f;
        r[a] = r[b] = 3e-42f;
        break;
    case 11: /* one finite logit among -inf and NaN */
        for (int i = 0; i < V; i++) r[i] = i % 2 ? -INFINITY : NAN;
        r[a] = -1e30f;
        break;
    }
}

static void kernel_case(const gpu_ops *o)
{
    static const int Vs[] = {1, 3, 31, 1000, 1025, 4099, 32000, 128256};
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        const int V = Vs[vi], rows = 3 * KINDS;
        float *x = malloc(sizeof(float) * (size_t)rows * V);
        int32_t *got = malloc(sizeof(int32_t) * rows);
        REQUIRE(x && got);
        for (int r = 0; r < rows; r++) make_row(x + (size_t)r * V, V, r % KINDS, (uint32_t)(r * 31 + V));
        REQUIRE(o->argmax(rows, V, x, got) == 0);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            const float *row = x + (size_t)r * V;
            int32_t ref = model_sample_argmax(row, V), smp = sampler_greedy(row, V);
            CHECK_MSG(ref == smp, "V %d row kind %d: model_sample_argmax %d, the sampler %d", V,
                      r % KINDS, ref, smp);
            if (got[r] != ref && bad++ < 5)
                t_fail(__FILE__, __LINE__, "V %d row kind %d: gpu %d, host %d", V, r % KINDS, got[r], ref);
        }
        free(x), free(got);
    }
}

TEST(gpu_argmax_kernel)
{
    TG_EACH_BUILD(kernel_case);
}

/* The engine: N sequences of different lengths, STEPS greedy steps through accel_decode_argmax
 * (row i's logits wanted where (i + step) % 3 == 0), each step checked as the top says. */
static void engine_case(int N, const char *tune, enum accel_gpu_half half)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.gpu_tune = tune, .gpu_half = half};
    int r = tg_open_mkmodel(HD128, "hd128am", &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_info info;
    accel_get_info(d, &info);
    const int declined = tune && strstr(tune, "argmax=0");
    CHECK_MSG((!(info.caps & ACCEL_CAP_DECODE_ARGMAX)) == declined, "caps 0x%x with tune %s", info.caps,
              tune ? tune : "-");
    enum { STEPS = 3 };
    const int V = m->cfg.vocab;
    accel_seq **seqs = calloc((size_t)N, sizeof *seqs);
    int32_t *tok = malloc(sizeof(int32_t) * N), *am = malloc(sizeof(int32_t) * N);
    unsigned char *want = malloc((size_t)N);
    float *lg = accel_host_alloc(d, sizeof(float) * (size_t)N * V);
    float *full = accel_host_alloc(d, sizeof(float) * (size_t)N * V);
    REQUIRE(seqs && tok && am && want && lg && full);
    for (int i = 0; i < N; i++) {
        int len = 5 + (i * 379) % 696;
        int32_t *ids = tg_ids(len, V, 300 + i);
        REQUIRE(ids && accel_seq_new(d, len + STEPS + 1, &seqs[i]) == 0);
        accel_prefill_req pr = {.seq = seqs[i], .ids = ids, .n = len - 1};
        REQUIRE(accel_prefill(d, &pr) == 0);
        tok[i] = ids[len - 1];
        free(ids);
    }
    int same_rows = 0, wanted_rows = 0, rows = 0, agree = 0, mismatch_wanted = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < N; i++) want[i] = (i + step) % 3 == 0;
        REQUIRE(accel_decode_argmax(d, N, seqs, tok, lg, want, am) == 0);
        for (int i = 0; i < N; i++)
            if (want[i]) {
                wanted_rows++;
                int32_t ref = model_sample_argmax(lg + (size_t)i * V, V);
                if (am[i] != ref && mismatch_wanted++ < 5)
                    t_fail(__FILE__, __LINE__, "step %d row %d: device %d, host argmax of its row %d",
                           step, i, am[i], ref);
            }
        /* the same step again with every row's logits */
        for (int i = 0; i < N; i++) REQUIRE(accel_seq_truncate(d, seqs[i], accel_seq_len(d, seqs[i]) - 1) == 0);
        REQUIRE(accel_decode(d, N, seqs, tok, full) == 0);
        int det = 1;
        for (int i = 0; i < N; i++)
            if (want[i]) {
                int eq = !memcmp(lg + (size_t)i * V, full + (size_t)i * V, sizeof(float) * (size_t)V);
                det &= eq;
                same_rows += eq;
            }
        for (int i = 0; i < N; i++, rows++) {
            int32_t ref = model_sample_argmax(full + (size_t)i * V, V);
            agree += am[i] == ref;
            if (det) CHECK_MSG(am[i] == ref, "step %d row %d (logits %s): device %d, host %d", step, i,
                               want[i] ? "wanted" : "not wanted", am[i], ref);
        }
        for (int i = 0; i < N; i++) tok[i] = am[i] >= 0 ? am[i] : 0;
    }
    fprintf(stderr, "  decode_argmax batch %d%s%s%s: %d of %d wanted rows bit-equal on a second decode, "
                    "tokens %d of %d equal to the host's argmax\n",
            N, half == ACCEL_GPU_HALF_F16 ? " fp16" : "", tune ? " " : "", tune ? tune : "", same_rows, wanted_rows, agree, rows);
    /* where a second decode did not give the same bits (not seen: the step is deterministic),
     * tokens may differ at near-ties only */
    CHECK_MSG(same_rows == wanted_rows || agree >= rows * 95 / 100, "tokens %d of %d", agree, rows);
    /* want NULL: every row */
    REQUIRE(accel_decode_argmax(d, N, seqs, tok, lg, NULL, am) == 0);
    for (int i = 0; i < N; i++) CHECK_EQ(am[i], model_sample_argmax(lg + (size_t)i * V, V));
    /* the wrapper's bounds */
    CHECK_EQ(accel_decode_argmax(d, N, seqs, tok, lg, want, NULL), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_decode_argmax(d, N, seqs, tok, NULL, want, am), ACCEL_ERR_INVALID);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(accel_seq_len(d, seqs[i]), 5 + (i * 379) % 696 - 1 + STEPS + 1);
        accel_seq_free(d, seqs[i]);
    }
    accel_host_free(d, lg);
    accel_host_free(d, full);
    free(seqs), free(tok), free(am), free(want);
    accel_free(d);
    model_free(m);
}

TEST(gpu_decode_argmax_batch3) { engine_case(3, NULL, ACCEL_GPU_HALF_AUTO); }
TEST(gpu_decode_argmax_batch40) { engine_case(40, NULL, ACCEL_GPU_HALF_AUTO); }
TEST(gpu_decode_argmax_batch40_fp16) { engine_case(40, NULL, ACCEL_GPU_HALF_F16); }
TEST(gpu_decode_argmax_batch40_unchunked) { engine_case(40, "logits_chunks=1", ACCEL_GPU_HALF_AUTO); }
TEST(gpu_decode_argmax_batch40_no_graphs) { engine_case(40, "graphs=0", ACCEL_GPU_HALF_AUTO); }
TEST(gpu_decode_argmax_declined) { engine_case(40, "argmax=0", ACCEL_GPU_HALF_AUTO); }
