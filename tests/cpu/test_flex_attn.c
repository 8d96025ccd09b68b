/* Block-sparse causal attention over FlexPrefill indexes (cpu/flex_attn.c): against dense
 * attention (cpu_attend) bit for bit when every block is listed, against an independent
 * double-precision masked attention for real indexes, and the dense short-prompt path. */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "cpu/ops.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>

typedef struct inputs {
    int n, H, Hk, d;
    float *q, *k, *v;
    cpu_flex_qkv x;
} inputs;

static void inputs_synth(inputs *in, int n, int H, int Hk, int d, enum cpu_flex_synth_kind kind,
                         int bs, uint64_t seed)
{
    *in = (inputs){.n = n, .H = H, .Hk = Hk, .d = d};
    in->q = malloc((size_t)n * H * d * sizeof(float));
    in->k = malloc((size_t)n * Hk * d * sizeof(float));
    in->v = malloc((size_t)n * Hk * d * sizeof(float));
    in->x = (cpu_flex_qkv){n, H, Hk, d, in->q, (size_t)H * d, in->k, in->v, (size_t)Hk * d, 0};
    cpu_flex_synth s = {kind, n, H, Hk, d, bs, seed};
    cpu_flex_synth_rows(&s, 0, n, in->q, in->k, in->v);
}

static void inputs_free(inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
}

/* Attention of query t, head h, over the keys the index lists for its block (and j <= t), in
 * double, written from the definition: softmax(q . k_j / sqrt(d)) . v over that key set. */
static void masked_attention_f64(const inputs *in, const cpu_flex_index *ix, int il, int t, int h,
                                 double *out)
{
    const int d = in->d, bs = ix->block_size, nb = ix->n_blocks, r = t / bs;
    const int g = il ? h % in->Hk : h / (in->H / in->Hk);
    const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
    double *w = malloc(sizeof(double) * (t + 1));
    char *allowed = calloc((size_t)t + 1, 1);
    for (int64_t e = rp[r]; e < rp[r + 1]; e++)
        for (int j = ix->col[e] * bs; j < (ix->col[e] + 1) * bs && j <= t; j++) allowed[j] = 1;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j <= t; j++) {
        if (!allowed[j]) continue;
        double s = 0;
        for (int e = 0; e < d; e++)
            s += (double)in->q[((size_t)t * in->H + h) * d + e] * in->k[((size_t)j * in->Hk + g) * d + e];
        w[j] = s / sqrt((double)d);
        if (w[j] > mx) mx = w[j];
    }
    for (int j = 0; j <= t; j++)
        if (allowed[j]) sum += (w[j] = exp(w[j] - mx));
    for (int e = 0; e < d; e++) out[e] = 0;
    for (int j = 0; j <= t; j++)
        if (allowed[j])
            for (int e = 0; e < d; e++) out[e] += w[j] / sum * in->v[((size_t)j * in->Hk + g) * d + e];
    free(w);
    free(allowed);
}

/* A full block list computes dense causal attention with the same arithmetic as cpu_attend:
 * identical bits, for both GQA mappings and a length that is not a multiple of the block. */
TEST(flex_sparse_full_index_is_dense_bit_exact)
{
    const int n = 700, H = 4, Hk = 2, d = 32, bs = 64;
    inputs in;
    inputs_synth(&in, n, H, Hk, d, CPU_FLEX_SYNTH_MIXED, bs, 21);
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_full(H, n, bs, &ix) == 0);
    float *a = malloc(sizeof(float) * n * H * d), *b = malloc(sizeof(float) * n * H * d);
    cpu_pool *pool = cpu_pool_new(2);
    for (int il = 0; il < 2; il++) {
        REQUIRE(cpu_flex_sparse_attention(pool, &in.x, ix, il, 0, a, (size_t)H * d) == 0);
        REQUIRE(cpu_flex_dense_attention(NULL, &in.x, il, 0, b, (size_t)H * d) == 0);
        CHECK(memcmp(a, b, sizeof(float) * n * H * d) == 0);
        /* and dense is cpu_attend itself */
        float ref[32], scores[700];
        int t = 555, h = 3, g = il ? h % Hk : h / 2;
        cpu_attend(ref, in.q + ((size_t)t * H + h) * d, in.k + g * d, in.v + g * d, t + 1, Hk * d,
                   d, 1.0f / sqrtf(32.0f), scores);
        CHECK(memcmp(ref, b + ((size_t)t * H + h) * d, sizeof ref) == 0);
    }
    cpu_pool_free(pool);
    cpu_flex_index_free(ix);
    free(a);
    free(b);
    inputs_free(&in);
}

/* Sparse attention over a real FlexPrefill index equals attention restricted to the listed
 * blocks computed independently in double. Tolerance 2e-5: float32 scores of d = 32 products
 * (|q.k| up to ~100 here, so ~1e-5 absolute logit error) and a float32 value sum of O(1)
 * values; measured max is ~3e-6. */
TEST(flex_sparse_equals_masked_dense_f64)
{
    const int n = 1200, H = 4, Hk = 1, d = 32, bs = 64;
    inputs in;
    inputs_synth(&in, n, H, Hk, d, CPU_FLEX_SYNTH_MIXED, bs, 9);
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    p.block_size = bs;
    p.min_budget = 128;
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    CHECK(cpu_flex_index_density(ix, -1) < 0.9); /* really sparse */
    float *o = malloc(sizeof(float) * n * H * d);
    REQUIRE(cpu_flex_sparse_attention(NULL, &in.x, ix, 0, 0, o, (size_t)H * d) == 0);
    double ref[32], worst = 0;
    for (int t = 0; t < n; t += 7)
        for (int h = 0; h < H; h++) {
            masked_attention_f64(&in, ix, 0, t, h, ref);
            for (int e = 0; e < d; e++) {
                double err = fabs(ref[e] - o[((size_t)t * H + h) * d + e]);
                if (err > worst) worst = err;
            }
        }
    CHECK_NEAR(worst, 0, 2e-5);
    cpu_flex_index_free(ix);
    free(o);
    inputs_free(&in);
}

/* gamma = 1 and min_budget = the whole prompt: flex attention is dense attention, bit for bit;
 * the report says every causal block was computed. */
TEST(flex_attention_gamma_one_is_dense)
{
    const int n = 640, H = 2, Hk = 1, d = 32, bs = 32, nb = 20;
    inputs in;
    inputs_synth(&in, n, H, Hk, d, CPU_FLEX_SYNTH_STRUCTURED, bs, 4);
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    p.block_size = bs;
    p.gamma = 1.0f;
    p.min_budget = n;
    p.dense_below = 0; /* force the sparse path */
    float *a = malloc(sizeof(float) * n * H * d), *b = malloc(sizeof(float) * n * H * d);
    cpu_flex_report rep;
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_attention(NULL, &p, &in.x, a, (size_t)H * d, &rep, &ix) == 0);
    REQUIRE(ix != NULL);
    CHECK_EQ(rep.dense, 0);
    CHECK_EQ(rep.blocks_computed, (int64_t)H * nb * (nb + 1) / 2);
    CHECK_EQ(rep.blocks_causal, rep.blocks_computed);
    CHECK_NEAR(rep.density, 1.0, 0);
    CHECK_NEAR(rep.official_ratio, (double)H * nb * (nb + 1) / 2 / (H * nb * nb), 1e-12);
    REQUIRE(cpu_flex_dense_attention(NULL, &in.x, 0, 0, b, (size_t)H * d) == 0);
    CHECK(memcmp(a, b, sizeof(float) * n * H * d) == 0);
    cpu_flex_index_free(ix);
    free(a);
    free(b);
    inputs_free(&in);
}

/* Prompts at or below max(2 bs, ceil(min_budget / bs) bs) run dense and say so; one token more
 * runs sparse. */
TEST(flex_attention_short_prompt_runs_dense)
{
    const int H = 2, Hk = 2, d = 16, bs = 16;
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    p.block_size = bs;
    p.min_budget = 100; /* ceil(100 / 16) * 16 = 112 > 2 * 16 */
    for (int n = 112; n <= 113; n++) {
        inputs in;
        inputs_synth(&in, n, H, Hk, d, CPU_FLEX_SYNTH_MIXED, bs, 2);
        float *a = malloc(sizeof(float) * n * H * d), *b = malloc(sizeof(float) * n * H * d);
        cpu_flex_report rep;
        cpu_flex_index *ix;
        REQUIRE(cpu_flex_attention(NULL, &p, &in.x, a, (size_t)H * d, &rep, &ix) == 0);
        CHECK_EQ(rep.dense, n == 112);
        CHECK_EQ(ix == NULL, n == 112);
        CHECK_EQ(rep.n_blocks, n == 112 ? 7 : 8);
        if (n == 112) {
            REQUIRE(cpu_flex_dense_attention(NULL, &in.x, 0, 0, b, (size_t)H * d) == 0);
            CHECK(memcmp(a, b, sizeof(float) * n * H * d) == 0);
            CHECK_NEAR(rep.density, 1.0, 0);
        } else {
            CHECK_EQ(rep.blocks_computed, ix->nnz);
            CHECK_NEAR(rep.density, cpu_flex_index_density(ix, -1), 0);
        }
        cpu_flex_index_free(ix);
        free(a);
        free(b);
        inputs_free(&in);
    }
}

TEST(flex_attention_rejects_bad_input)
{
    inputs in;
    inputs_synth(&in, 300, 2, 1, 16, CPU_FLEX_SYNTH_RANDOM, 16, 1);
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    float *o = malloc(sizeof(float) * 300 * 2 * 16);
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_full(2, 300, 16, &ix) == 0);
    /* an index for another length */
    in.x.n_tokens = 299;
    CHECK_EQ(cpu_flex_sparse_attention(NULL, &in.x, ix, 0, 0, o, 32), CPU_FLEX_ERR_INVALID);
    in.x.n_tokens = 300;
    CHECK_EQ(cpu_flex_sparse_attention(NULL, &in.x, ix, 0, 0, o, 31), CPU_FLEX_ERR_INVALID);
    p.block_size = 100;
    CHECK_EQ(cpu_flex_attention(NULL, &p, &in.x, o, 32, NULL, NULL), CPU_FLEX_ERR_INVALID);
    cpu_flex_index *none;
    CHECK_EQ(cpu_flex_index_full(0, 300, 16, &none), CPU_FLEX_ERR_INVALID);
    CHECK(none == NULL);
    cpu_flex_index_free(ix);
    free(o);
    inputs_free(&in);
}
