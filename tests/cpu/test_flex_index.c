/* FlexPrefill's block selection (cpu/flex_index.c): small cases worked out by hand from the
 * official code's steps, its quirks (the hard-coded 128 divisor, NaN JS distances, the clamp
 * order), and invariants on the synthetic pattern inputs. */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>

typedef struct inputs {
    int n, H, Hk, d;
    float *q, *k, *v;
    cpu_flex_qkv x;
} inputs;

static void inputs_new(inputs *in, int n, int H, int Hk, int d)
{
    *in = (inputs){.n = n, .H = H, .Hk = Hk, .d = d};
    in->q = calloc((size_t)n * H * d, sizeof(float));
    in->k = calloc((size_t)n * Hk * d, sizeof(float));
    in->v = calloc((size_t)n * Hk * d, sizeof(float));
    in->x = (cpu_flex_qkv){n, H, Hk, d, in->q, (size_t)H * d, in->k, in->v, (size_t)Hk * d, 0};
}

static void inputs_free(inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
}

static void synth(inputs *in, enum cpu_flex_synth_kind kind, int bs, uint64_t seed)
{
    cpu_flex_synth s = {kind, in->n, in->H, in->Hk, in->d, bs, seed};
    cpu_flex_synth_rows(&s, 0, in->n, in->q, in->k, in->v);
}

/* Columns of row r of head h. */
static int row_cols(const cpu_flex_index *ix, int h, int r, const int32_t **cols)
{
    const int64_t *rp = ix->row_ptr + (size_t)h * (ix->n_blocks + 1);
    *cols = ix->col + rp[r];
    return (int)(rp[r + 1] - rp[r]);
}

static sparse_flex_params small_params(int bs)
{
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    p.block_size = bs;
    p.min_budget = 0; /* the official None: 1 token = 1 block */
    return p;
}

TEST(flex_params_defaults_and_dense_rule)
{
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    CHECK(p.gamma == 0.9f && p.tau == 0.1f && p.min_budget == 1024 && p.block_size == 128);
    CHECK_EQ(sparse_flex_params_check(&p, NULL, 0), 0);
    /* max(2 * 128, ceil(1024 / 128) * 128) */
    CHECK_EQ(sparse_flex_dense_threshold(&p), 1024);
    p.min_budget = 0;
    CHECK_EQ(sparse_flex_dense_threshold(&p), 256);
    p.min_budget = 1000; /* ceil(1000 / 128) * 128 */
    CHECK_EQ(sparse_flex_dense_threshold(&p), 1024);
    p.min_budget = 1025;
    CHECK_EQ(sparse_flex_dense_threshold(&p), 1152);
    p.dense_below = 5;
    CHECK_EQ(sparse_flex_dense_threshold(&p), 5);
    char err[128];
    sparse_flex_params bad = p;
    bad.block_size = 96;
    CHECK_EQ(sparse_flex_params_check(&bad, err, sizeof err), CPU_FLEX_ERR_INVALID);
    bad = p;
    bad.gamma = 0;
    CHECK_EQ(sparse_flex_params_check(&bad, err, sizeof err), CPU_FLEX_ERR_INVALID);
    bad = p;
    bad.gamma = NAN;
    CHECK_EQ(sparse_flex_params_check(&bad, err, sizeof err), CPU_FLEX_ERR_INVALID);
    bad = p;
    bad.tau = 1.5f;
    CHECK_EQ(sparse_flex_params_check(&bad, err, sizeof err), CPU_FLEX_ERR_INVALID);
    bad = p;
    bad.min_budget = -1;
    CHECK_EQ(sparse_flex_params_check(&bad, err, sizeof err), CPU_FLEX_ERR_INVALID);
}

TEST(flex_index_rejects_bad_shapes)
{
    inputs in;
    inputs_new(&in, 64, 4, 3, 16); /* 4 heads over 3 kv heads */
    sparse_flex_params p = small_params(16);
    cpu_flex_index *ix = (cpu_flex_index *)1;
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &in.x, &ix), CPU_FLEX_ERR_INVALID);
    CHECK(ix == NULL);
    in.x.n_kv_heads = 2;
    in.x.n_tokens = 31; /* < 2 blocks */
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &in.x, &ix), CPU_FLEX_ERR_INVALID);
    in.x.n_tokens = 64;
    in.x.q_stride = 10; /* narrower than 4 heads of 16 */
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &in.x, &ix), CPU_FLEX_ERR_INVALID);
    in.x.q_stride = 64;
    in.x.head_dim = 0;
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &in.x, &ix), CPU_FLEX_ERR_INVALID);
    in.x.head_dim = 16;
    in.x.n_tokens = CPU_FLEX_MAX_TOKENS + 1;
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &in.x, &ix), CPU_FLEX_ERR_INVALID);
    in.x.n_tokens = 64;
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &in.x, &ix), 0);
    cpu_flex_index_free(ix);
    inputs_free(&in);
}

/* One head, n = 96, bs = 16 (nb = 6), d = 16. Every query is c e0 and only key 0 is c e0, so the
 * last rows put all their mass on key 0:
 *   vertical = [1, 0, ...] -> cover count 0 + 1 = 1 token -> 1 // 128 + 1 = 1 block;
 *   slash: key 0 lies on t = 0 - i + 15 for rows i = 0..15, 1/16 each; 14 of them keep the
 *     cumsum <= 0.9 -> 15 tokens -> 1 block;
 *   the selection is the sink column and the diagonal: row r = {0, r}.
 * With c^2 / 4 = 200 the other keys' weights underflow to exactly 0 in the fp32 softmax, so the
 * pooled vertical has zeros and the JS distance is NaN (0 * log 0): the head is not query-aware
 * (the official code's comparison NaN < tau is false). */
TEST(flex_index_sink_head_by_hand_and_nan_js)
{
    inputs in;
    inputs_new(&in, 96, 1, 1, 16);
    const float c = sqrtf(800.0f);
    for (int t = 0; t < 96; t++) in.q[(size_t)t * 16] = c;
    in.k[0] = c;
    sparse_flex_params p = small_params(16);
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    CHECK_EQ(ix->n_blocks, 6);
    CHECK_EQ(ix->n_vertical[0], 1);
    CHECK_EQ(ix->n_slash[0], 1);
    CHECK(isnan(ix->js[0]));
    CHECK_EQ(ix->query_aware[0], 0);
    CHECK_EQ(ix->nnz, 11);
    for (int r = 0; r < 6; r++) {
        const int32_t *cols;
        int nc = row_cols(ix, 0, r, &cols);
        CHECK_EQ(nc, r == 0 ? 1 : 2);
        CHECK_EQ(cols[0], 0);
        if (r) CHECK_EQ(cols[1], r);
    }
    CHECK_NEAR(cpu_flex_index_density(ix, 0), 11.0 / 21.0, 1e-12);
    CHECK_NEAR(cpu_flex_index_density(ix, -1), 11.0 / 21.0, 1e-12);
    cpu_flex_index_free(ix);
    inputs_free(&in);
}

/* The same head with c^2 = 384 (row logits 96, block logits c^2 / 64 = 6): the estimate
 * softmax(mean q . avg_k) = [e^6, 1, 1, 1, 1, 1] / (e^6 + 5) = [0.98775, 0.00245 x 5] against
 * v = [1 - eps, ~0 ...] gives m = [0.99388, 0.001225 x 5],
 *   KL(p||m) = 0.98775 ln(0.98775 / 0.99388) + 5 (0.00245 ln 2) = 0.00241,
 *   KL(v||m) ~ ln(1 / 0.99388) = 0.00614, D = sqrt((0.00241 + 0.00614) / 2) = 0.0654 < 0.1:
 * query-aware, so both budgets are reset to min_budget (set here to 32 tokens = 2 blocks) and
 * the block-pooled map is added: every query block's mean query is c e0 / 4, so each row's
 * block scores put ~all mass on column 0 (already selected). */
TEST(flex_index_query_aware_decision_by_hand)
{
    inputs in;
    inputs_new(&in, 96, 1, 1, 16);
    const float c = sqrtf(384.0f);
    for (int t = 0; t < 96; t++) in.q[(size_t)t * 16] = c;
    in.k[0] = c;
    sparse_flex_params p = small_params(16);
    p.min_budget = 32;
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    CHECK_NEAR(ix->js[0], 0.0654, 0.001);
    CHECK_EQ(ix->query_aware[0], 1);
    CHECK_EQ(ix->n_vertical[0], 2);
    CHECK_EQ(ix->n_slash[0], 2);
    /* budgets 2: vertical = sink + the best other column block; slash = diagonal + the best
     * other band. All pooled values but the kept ones are 0 here (ties: lowest index first),
     * so vertical adds block 1 (wherever causal: rows >= 1) and slash index 0 -> offset 5
     * (row 5, column 0: already there). Rows: {0}, {0,1}, {0,1,2}, {0,1,3}, {0,1,4}, {0,1,5}. */
    const int want_n[6] = {1, 2, 3, 3, 3, 3};
    for (int r = 0; r < 6; r++) {
        const int32_t *cols;
        int nc = row_cols(ix, 0, r, &cols);
        CHECK_EQ(nc, want_n[r]);
        CHECK_EQ(cols[0], 0);
        if (r >= 1) CHECK_EQ(cols[1], 1);
        if (r >= 2) CHECK_EQ(cols[nc - 1], r);
    }
    cpu_flex_index_free(ix);
    inputs_free(&in);
}

/* All-zero keys: every logit is 0, so last row i (position n - bs + i) attends uniformly to its
 * n - bs + i + 1 keys and vertical[j] = (1/bs) sum_{i : n - bs + i >= j} 1 / (n - bs + i + 1).
 * The budget is count(cumsum <= 0.9) + 1 tokens divided by a HARD-CODED 128 (plus 1), not by the
 * block size (16 here): we compute both from the formula and require the official one.
 * tau = 0 (the function's own default): this near-uniform head would otherwise be query-aware
 * (its key-block means are all 0, so the block estimate is uniform too) and reset to min. */
TEST(flex_index_budget_uses_128_not_block_size)
{
    const int n = 640, bs = 16;
    inputs in;
    inputs_new(&in, n, 1, 1, 16);
    for (int t = 0; t < n; t++) in.q[(size_t)t * 16] = 1.0f;
    double vert[640], cum = 0;
    for (int j = 0; j < n; j++) {
        vert[j] = 0;
        for (int i = 0; i < bs; i++)
            if (n - bs + i >= j) vert[j] += 1.0 / (n - bs + i + 1);
        vert[j] /= bs;
    }
    /* vert is already non-increasing in j */
    int cnt = 0;
    for (int j = 0; j < n; j++) {
        cum += vert[j];
        if (cum > (double)0.9f) break;
        cnt++;
    }
    const int official = (cnt + 1) / 128 + 1, per_block = (cnt + 1) / bs + 1;
    CHECK(official != per_block);
    sparse_flex_params p = small_params(bs);
    p.tau = 0;
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    CHECK_EQ(ix->query_aware[0], 0);
    CHECK_EQ(ix->n_vertical[0], official);
    CHECK_EQ(official, 5); /* 576 tokens -> 576 // 128 + 1 */
    /* equal pooled values tie: lowest index first, so the vertical blocks are 0..4 */
    const int32_t *cols;
    int nc = row_cols(ix, 0, 39, &cols);
    for (int c = 0; c < 5; c++) CHECK_EQ(cols[c], c);
    CHECK(nc >= 5);
    cpu_flex_index_free(ix);
    inputs_free(&in);
}

/* min_budget > max_budget: the official code clamps to min first, then to max, so max wins —
 * except for query-aware heads, which are then reset to min_budget unclamped. */
TEST(flex_index_clamp_order_min_then_max)
{
    inputs in;
    inputs_new(&in, 512, 2, 1, 32);
    synth(&in, CPU_FLEX_SYNTH_RANDOM, 64, 3);
    sparse_flex_params p = small_params(64);
    p.min_budget = 256; /* 4 blocks */
    p.max_budget = 128; /* 2 blocks */
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    int qa = 0;
    for (int h = 0; h < 2; h++) {
        int want = ix->query_aware[h] ? 4 : 2;
        qa += ix->query_aware[h];
        CHECK_EQ(ix->n_vertical[h], want);
        CHECK_EQ(ix->n_slash[h], want);
    }
    p.tau = 0; /* no query-aware head: every budget is max */
    cpu_flex_index_free(ix);
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    for (int h = 0; h < 2; h++) CHECK(ix->n_vertical[h] == 2 && ix->n_slash[h] == 2);
    CHECK(qa > 0); /* (the first run did exercise the reset) */
    cpu_flex_index_free(ix);
    inputs_free(&in);
}

/* Invariants on every synthetic kind, both GQA mappings, a length that is not a multiple of the
 * block: sorted rows of causal blocks holding the sink and the diagonal, budgets within the
 * clamp (query-aware heads at min), the last row holding the whole vertical selection, and the
 * same index for 1 and 2 threads. */
TEST(flex_index_invariants_on_patterns)
{
    const int n = 2000, H = 8, Hk = 2, d = 32, bs = 64, nb = (n + bs - 1) / bs;
    cpu_pool *pool = cpu_pool_new(2);
    for (int kind = 0; kind <= CPU_FLEX_SYNTH_STRUCTURED; kind++)
        for (int il = 0; il < 2; il++) {
            inputs in;
            inputs_new(&in, n, H, Hk, d);
            synth(&in, (enum cpu_flex_synth_kind)kind, bs, 11 + kind);
            sparse_flex_params p;
            sparse_flex_params_default(&p);
            p.block_size = bs;
            p.min_budget = 256; /* 4 blocks */
            p.max_budget = 1280; /* 20 blocks */
            p.gqa_interleave = il;
            cpu_flex_index *a, *b;
            REQUIRE(cpu_flex_index_build(pool, &p, &in.x, &a) == 0);
            REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &b) == 0);
            CHECK_EQ(a->nnz, b->nnz);
            CHECK(memcmp(a->row_ptr, b->row_ptr, sizeof(int64_t) * H * (nb + 1)) == 0);
            CHECK(memcmp(a->col, b->col, sizeof(int32_t) * a->nnz) == 0);
            for (int h = 0; h < H; h++) {
                CHECK(a->n_vertical[h] >= 4 && a->n_vertical[h] <= 20);
                CHECK(a->n_slash[h] >= 4 && a->n_slash[h] <= 20);
                if (a->query_aware[h]) CHECK(a->n_vertical[h] == 4 && a->n_slash[h] == 4);
                for (int r = 0; r < nb; r++) {
                    const int32_t *cols;
                    int nc = row_cols(a, h, r, &cols);
                    REQUIRE(nc >= 1);
                    CHECK_EQ(cols[0], 0);
                    CHECK_EQ(cols[nc - 1], r);
                    for (int e = 1; e < nc; e++) CHECK(cols[e] > cols[e - 1]);
                }
                /* the last row sees every vertical column (all are <= nb - 1) */
                const int32_t *cols;
                CHECK(row_cols(a, h, nb - 1, &cols) >= a->n_vertical[h]);
                double den = cpu_flex_index_density(a, h);
                CHECK(den > 0 && den <= 1);
            }
            cpu_flex_index_free(a);
            cpu_flex_index_free(b);
            inputs_free(&in);
            if (t_failed()) break;
        }
    cpu_pool_free(pool);
}

/* gamma = 1 with the minimum budget = the whole prompt: every causal block, every head. */
TEST(flex_index_gamma_one_full_budget_is_dense)
{
    const int n = 1000, bs = 32, nb = 32;
    inputs in;
    inputs_new(&in, n, 4, 2, 32);
    synth(&in, CPU_FLEX_SYNTH_MIXED, bs, 5);
    sparse_flex_params p = small_params(bs);
    p.gamma = 1.0f;
    p.min_budget = n;
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    CHECK_EQ(ix->nnz, 4LL * nb * (nb + 1) / 2);
    CHECK_NEAR(cpu_flex_index_density(ix, -1), 1.0, 0);
    cpu_flex_index_free(ix);
    inputs_free(&in);
}

/* What the patterns give (the numbers BENCHMARKS.md quotes for small prompts come from
 * tools/flex_bench): structured heads are sparse, random ones are not, query_blocks heads are
 * recognised as query-aware. */
TEST(flex_index_patterns_have_expected_character)
{
    const int n = 8192, H = 4, d = 64;
    inputs in;
    inputs_new(&in, n, H, 1, d);
    synth(&in, CPU_FLEX_SYNTH_MIXED, 128, 1);
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    cpu_pool *pool = cpu_pool_new(2);
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(pool, &p, &in.x, &ix) == 0);
    /* heads: 0 random, 1 sink_local, 2 vertical_slash, 3 query_blocks */
    CHECK(cpu_flex_index_density(ix, 0) > 0.5);
    CHECK(cpu_flex_index_density(ix, 1) < 0.3);
    CHECK(cpu_flex_index_density(ix, 2) < 0.3);
    CHECK_EQ(ix->query_aware[3], 1);
    CHECK_EQ(ix->query_aware[2], 0);
    cpu_flex_index_free(ix);
    cpu_pool_free(pool);
    inputs_free(&in);
}

/* The query-aware map's cut is over the WHOLE flattened nb x nb map, not per query row
 * (official get_active_blocks: attn.view(-1), then score_cover_idx(attn, gamma * num_blocks)).
 * All-zero Q and K: the head is diffuse and query-aware (JS < tau), and row r of the block map
 * is uniform, r + 1 entries of 1 / (r + 1). Sorted descending, the early rows' large entries
 * come first, so the cut at 0.85 x 10 = 8.5 keeps rows 0..7 whole (mass 8), then 4 of row 8's
 * nine 1/9 entries (8 + 4/9 <= 8.5 < 8 + 5/9; ties: lower id first, columns 0..3), and nothing
 * of row 9. With min_budget one block the skeleton adds only the sink column and the diagonal:
 * the last query block keeps 2 of its 10 blocks while the density is 43 / 55 = 0.78 — why
 * FlexPrefill's last positions lose far more attention mass than XAttention's per-row threshold
 * at the same density on random-weight (diffuse) models (BENCHMARKS.md, issue 22). */
TEST(flex_index_query_aware_cut_is_global_not_per_row)
{
    const int bs = 16, nb = 10;
    inputs in;
    inputs_new(&in, nb * bs, 1, 1, 16);
    sparse_flex_params p = small_params(bs);
    p.gamma = 0.85f;
    p.min_budget = bs;
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &p, &in.x, &ix) == 0);
    CHECK_EQ(ix->query_aware[0], 1);
    CHECK(ix->js[0] < p.tau);
    CHECK_EQ(ix->n_vertical[0], 1);
    CHECK_EQ(ix->n_slash[0], 1);
    for (int r = 0; r < 8; r++) {
        const int32_t *cols;
        int nc = row_cols(ix, 0, r, &cols);
        CHECK_EQ(nc, r + 1);
        for (int c = 0; c < nc; c++) CHECK_EQ(cols[c], c);
    }
    const int32_t *cols;
    const int32_t want8[5] = {0, 1, 2, 3, 8};
    REQUIRE(row_cols(ix, 0, 8, &cols) == 5);
    for (int c = 0; c < 5; c++) CHECK_EQ(cols[c], want8[c]);
    REQUIRE(row_cols(ix, 0, 9, &cols) == 2);
    CHECK_EQ(cols[0], 0);
    CHECK_EQ(cols[1], 9);
    CHECK_EQ(ix->nnz, 36 + 5 + 2);
    CHECK_NEAR(cpu_flex_index_density(ix, 0), 43.0 / 55.0, 1e-12);
    cpu_flex_index_free(ix);
    inputs_free(&in);
}
