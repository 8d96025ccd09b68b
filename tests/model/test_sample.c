/* The sampler: greedy, seeding, penalties and logit bias (exact amounts), logprobs against a
 * direct log-softmax, parameter bounds. The truncation filters are in test_sample_filter.c. */
#include "tests/model/sample_util.h"
#include "tests/test.h"
#include <float.h>
#include <string.h>

TEST(sample_greedy_is_argmax_lowest_id_on_ties)
{
    model_sampling p = model_sampling_default();
    p.temperature = 0;
    model_sampler *s = su_new(p, 6, 1);
    REQUIRE(s);
    float l[6] = {1, 3, -2, 3, 0.5f, 2};
    CHECK_EQ(model_sampler_sample(s, l, NULL), 1);
    float l2[6] = {-5, -4, -3, -2, -1, -0.5f};
    CHECK_EQ(model_sampler_sample(s, l2, NULL), 5);
    /* NaN is never the argmax, even first; +inf is. */
    float l3[6] = {NAN, 0, 1, NAN, 1, -1};
    CHECK_EQ(model_sampler_sample(s, l3, NULL), 2);
    float l4[6] = {0, INFINITY, 1, 2, INFINITY, 3};
    CHECK_EQ(model_sampler_sample(s, l4, NULL), 1);
    model_sampler_free(s);

    /* Below vLLM's 1e-5 the temperature means greedy too; a large vocabulary, many repeats. */
    p.temperature = 1e-6f;
    enum { V = 32000 };
    static float big[V];
    s = su_new(p, V, 2);
    REQUIRE(s);
    for (int t = 0; t < 20; t++) {
        su_gauss(big, V, 3, (uint64_t)t);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (big[i] > big[best]) best = i;
        CHECK_EQ(model_sampler_sample(s, big, NULL), best);
    }
    model_sampler_free(s);
}

TEST(sample_no_finite_logit_is_an_error)
{
    model_sampling p = model_sampling_default();
    model_sampler *s = su_new(p, 4, 1);
    REQUIRE(s);
    float l[4] = {-INFINITY, NAN, -INFINITY, NAN};
    CHECK_EQ(model_sampler_sample(s, l, NULL), -1);
    model_sampler_free(s);
}

/* 300 draws from a 1000-token distribution, as a sequence. */
static void draw_seq(model_sampler *s, int32_t *out, int n)
{
    enum { V = 1000 };
    float l[V];
    for (int t = 0; t < n; t++) {
        su_gauss(l, V, 1.0f, 100 + (uint64_t)t); /* same logits for every sampler */
        out[t] = model_sampler_sample(s, l, NULL);
    }
}

static int same_seq(const int32_t *a, const int32_t *b, int n)
{
    int same = 0;
    for (int i = 0; i < n; i++) same += a[i] == b[i];
    return same;
}

TEST(sample_seed_reproducible_and_streams_differ)
{
    enum { N = 300 };
    int32_t a[N], b[N], c[N], d[N], e[N], f[N];
    model_sampling p = model_sampling_default();
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.seed = 1234;
    p.has_seed = 1;
    char err[128];
    model_sampler *s[6] = {
        model_sampler_new(&p, 1000, NULL, 0, 0, err, sizeof err),
        model_sampler_new(&p, 1000, NULL, 0, 0, err, sizeof err), /* same seed, same index */
        model_sampler_new(&p, 1000, NULL, 0, 1, err, sizeof err), /* same seed, choice 1 */
        model_sampler_new(&p, 1000, NULL, 0, 1, err, sizeof err),
    };
    p.seed = 1235;
    s[4] = model_sampler_new(&p, 1000, NULL, 0, 0, err, sizeof err); /* another seed */
    p.has_seed = 0;
    s[5] = model_sampler_new(&p, 1000, NULL, 0, 0, err, sizeof err); /* from the CSPRNG */
    for (int i = 0; i < 6; i++) REQUIRE(s[i]);
    draw_seq(s[0], a, N);
    draw_seq(s[1], b, N);
    draw_seq(s[2], c, N);
    draw_seq(s[3], d, N);
    draw_seq(s[4], e, N);
    draw_seq(s[5], f, N);
    CHECK_EQ(same_seq(a, b, N), N);
    CHECK_EQ(same_seq(c, d, N), N);
    /* Independent streams agree by chance on a few tokens at most (the most likely token of
     * these rows has probability ~1%): far below N. */
    CHECK(same_seq(a, c, N) < N / 4);
    CHECK(same_seq(a, e, N) < N / 4);
    CHECK(same_seq(a, f, N) < N / 4);
    for (int i = 0; i < 6; i++) model_sampler_free(s[i]);
}

/* The penalized logits as the sampler sees them: dist() leaves them in the row. */
TEST(sample_penalties_exact_amounts)
{
    enum { V = 10 };
    model_sampling p = model_sampling_default();
    p.temperature = 0;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    model_logit_bias bias[] = {{5, 2.0f}, {6, -150.0f}, {1, 0.75f}, {5, 1.5f}};
    p.logit_bias = bias;
    p.n_logit_bias = 4;
    const int32_t prompt[] = {1, 2, 2, 7};
    char err[128];
    model_sampler *s = model_sampler_new(&p, V, prompt, 4, 0, err, sizeof err);
    REQUIRE(s);
    const int32_t gen[] = {3, 3, 4, 7, 3, 12345, -1};
    for (int i = 0; i < 7; i++) CHECK_EQ(model_sampler_accept(s, gen[i]), 0);

    const float base[V] = {1.0f, 2.0f, -1.5f, 0.8f, -0.4f, 0.3f, 4.0f, 2.5f, -3.0f, 0.0f};
    float l[V], probs[V];
    memcpy(l, base, sizeof l);
    model_sampler_dist(s, l, probs);

    /* Expected, step by step as sample.h documents (float arithmetic, same order). */
    float e[V];
    memcpy(e, base, sizeof e);
    e[5] += 1.5f;   /* repeated id: the last value wins */
    e[6] += -100.f; /* clamped */
    e[1] += 0.75f;
    const int rep[] = {1, 2, 7, 3, 4}; /* prompt + generated, distinct */
    for (int i = 0; i < 5; i++) {
        float x = e[rep[i]];
        e[rep[i]] = x > 0 ? x / 1.3f : x * 1.3f;
    }
    const int gid[] = {3, 4, 7};
    const int gcount[] = {3, 1, 1};
    for (int i = 0; i < 3; i++) {
        e[gid[i]] -= (float)gcount[i] * 0.5f;
        e[gid[i]] -= 0.25f;
    }
    for (int i = 0; i < V; i++) CHECK_MSG(l[i] == e[i], "logit %d: %.9g, want %.9g", i, l[i], e[i]);
    /* Spot values by hand: token 2 (prompt only, negative): -1.5 * 1.3; token 3 (generated 3x,
     * positive): 0.8 / 1.3 - 1.5 - 0.25; token 6 banned by the clamped bias: 4 - 100. */
    CHECK_NEAR(l[2], -1.95, 1e-6);
    CHECK_NEAR(l[3], 0.8 / 1.3 - 1.75, 1e-6);
    CHECK_NEAR(l[6], -96.0, 1e-6);
    model_sampler_free(s);
}

TEST(sample_penalties_off_leave_logits_alone)
{
    enum { V = 8 };
    model_sampling p = model_sampling_default();
    p.temperature = 0;
    const int32_t prompt[] = {1, 2, 3};
    char err[128];
    model_sampler *s = model_sampler_new(&p, V, prompt, 3, 0, err, sizeof err);
    REQUIRE(s);
    for (int i = 0; i < 5; i++) model_sampler_accept(s, 2);
    float base[V] = {0.1f, -2, 3, 0.5f, 1, -0.25f, 2, 0}, l[V], probs[V];
    memcpy(l, base, sizeof l);
    model_sampler_dist(s, l, probs);
    CHECK(memcmp(l, base, sizeof l) == 0);
    CHECK_EQ(probs[2], 1);
    model_sampler_free(s);
}

TEST(sample_logit_bias_flips_and_bans)
{
    enum { V = 5 };
    model_sampling p = model_sampling_default();
    p.temperature = 0;
    model_logit_bias up[] = {{4, 100.0f}};
    p.logit_bias = up;
    p.n_logit_bias = 1;
    model_sampler *s = su_new(p, V, 1);
    REQUIRE(s);
    float l[V] = {10, 20, 30, 40, -50};
    CHECK_EQ(model_sampler_sample(s, l, NULL), 4); /* -50 + 100 = 50 > 40 */
    model_sampler_free(s);

    /* A -100 bias makes a token's probability negligible for sampling at temperature 1. */
    p = model_sampling_default();
    model_logit_bias ban[] = {{0, -100.0f}, {1, -100.0f}};
    p.logit_bias = ban;
    p.n_logit_bias = 2;
    s = su_new(p, V, 3);
    REQUIRE(s);
    for (int t = 0; t < 2000; t++) {
        float r[V] = {5, 5, 0, 0, 0};
        int32_t id = model_sampler_sample(s, r, NULL);
        CHECK(id >= 2 && id < V);
        if (t_failed()) break;
    }
    model_sampler_free(s);
}

TEST(sample_logprobs_are_the_raw_log_softmax)
{
    enum { V = 5000, NTOP = 20 };
    static float base[V], l[V];
    su_gauss(base, V, 2.0f, 99);
    base[17] = base[4000] = 9.0f; /* a tie at the top: the lower id comes first */
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) m = fmax(m, base[i]);
    for (int i = 0; i < V; i++) sum += exp((double)base[i] - m);
    double lse = m + log(sum);

    model_sampling p = model_sampling_default();
    p.temperature = 0.7f; /* neither temperature, nor bias, nor top-k change the reported values */
    p.top_k = 50;
    model_logit_bias b[] = {{3, 30.0f}};
    p.logit_bias = b;
    p.n_logit_bias = 1;
    p.logprobs = 1;
    p.top_logprobs = NTOP;
    model_sampler *s = su_new(p, V, 5);
    REQUIRE(s);
    for (int t = 0; t < 5; t++) {
        memcpy(l, base, sizeof l);
        model_logprobs lp;
        int32_t id = model_sampler_sample(s, l, &lp);
        REQUIRE(id >= 0);
        CHECK_EQ(lp.id, id);
        CHECK_EQ(id, 3); /* the bias makes 3 dominant... */
        CHECK_NEAR(lp.logprob, base[3] - lse, 1e-4); /* ...but its logprob is the model's */
        REQUIRE(lp.n_top == NTOP);
        CHECK_EQ(lp.top_ids[0], 17);
        CHECK_EQ(lp.top_ids[1], 4000);
        /* The top list equals the NTOP best raw logits, best first, by brute force. */
        for (int k = 0; k < NTOP; k++) {
            int32_t tid = lp.top_ids[k];
            int better = 0;
            for (int i = 0; i < V; i++)
                better += base[i] > base[tid] || (base[i] == base[tid] && i < tid);
            CHECK_EQ(better, k);
            CHECK_NEAR(lp.top_logprobs[k], base[tid] - lse, 1e-4);
        }
    }
    model_sampler_free(s);
}

TEST(sample_logprobs_sum_to_one)
{
    /* Steer the chosen id with logit bias (which does not touch the raw row) and collect the
     * reported logprob of every token: exp of them sums to 1. */
    enum { V = 300 };
    float base[V], l[V];
    su_gauss(base, V, 1.5f, 31);
    double total = 0;
    for (int i = 0; i < V; i++) {
        model_sampling p = model_sampling_default();
        p.temperature = 0;
        p.logprobs = 1;
        model_logit_bias b[] = {{i, 100.0f}};
        p.logit_bias = b;
        p.n_logit_bias = 1;
        model_sampler *s = su_new(p, V, 1);
        REQUIRE(s);
        memcpy(l, base, sizeof l);
        model_logprobs lp;
        REQUIRE(model_sampler_sample(s, l, &lp) == i);
        CHECK_EQ(lp.n_top, 0);
        total += exp((double)lp.logprob);
        model_sampler_free(s);
    }
    CHECK_NEAR(total, 1.0, 1e-5);
}

TEST(sample_logprobs_off)
{
    model_sampling p = model_sampling_default();
    model_sampler *s = su_new(p, 4, 1);
    REQUIRE(s);
    float l[4] = {0, 1, 2, 3};
    model_logprobs lp;
    memset(&lp, 0x55, sizeof lp);
    int32_t id = model_sampler_sample(s, l, &lp);
    CHECK_EQ(lp.id, id);
    CHECK_EQ(lp.n_top, 0);
    CHECK(lp.logprob == 0);
    model_sampler_free(s);
}

/* model_sampler_new with one field changed must fail naming `name`. */
static void reject(model_sampling p, int vocab, const int32_t *prompt, int n_prompt, int index,
                   const char *name)
{
    char err[256] = "";
    model_sampler *s = model_sampler_new(&p, vocab, prompt, n_prompt, index, err, sizeof err);
    CHECK_MSG(!s, "accepted, expected an error naming %s", name);
    CHECK_MSG(strstr(err, name), "error \"%s\" does not name %s", err, name);
    model_sampler_free(s);
}

static void accept_ok(model_sampling p, int vocab)
{
    char err[256] = "";
    model_sampler *s = model_sampler_new(&p, vocab, NULL, 0, 0, err, sizeof err);
    CHECK_MSG(s, "rejected: %s", err);
    model_sampler_free(s);
}

TEST(sample_bounds_rejected)
{
    const model_sampling d = model_sampling_default();
    model_sampling p;
#define BAD(field, value, name)                                                                    \
    do {                                                                                           \
        p = d;                                                                                     \
        p.field = value;                                                                           \
        reject(p, 100, NULL, 0, 0, name);                                                          \
    } while (0)
#define GOOD(field, value)                                                                         \
    do {                                                                                           \
        p = d;                                                                                     \
        p.field = value;                                                                           \
        accept_ok(p, 100);                                                                         \
    } while (0)
    BAD(temperature, -0.01f, "temperature");
    BAD(temperature, 2.01f, "temperature");
    BAD(temperature, NAN, "temperature");
    GOOD(temperature, 2.0f);
    GOOD(temperature, 0.0f);
    BAD(top_p, 1.5f, "top_p");
    BAD(top_p, -0.1f, "top_p");
    BAD(top_p, NAN, "top_p");
    GOOD(top_p, 0.0f);
    BAD(top_k, -2, "top_k");
    GOOD(top_k, -1);
    GOOD(top_k, 1000000);
    BAD(min_p, 1.01f, "min_p");
    BAD(min_p, -0.5f, "min_p");
    GOOD(min_p, 1.0f);
    BAD(repetition_penalty, 0.0f, "repetition_penalty");
    BAD(repetition_penalty, -1.0f, "repetition_penalty");
    BAD(repetition_penalty, INFINITY, "repetition_penalty");
    BAD(repetition_penalty, NAN, "repetition_penalty");
    BAD(frequency_penalty, 2.5f, "frequency_penalty");
    BAD(frequency_penalty, -2.5f, "frequency_penalty");
    GOOD(frequency_penalty, -2.0f);
    BAD(presence_penalty, 2.001f, "presence_penalty");
    GOOD(presence_penalty, 2.0f);
    BAD(top_logprobs, 21, "top_logprobs");
    BAD(top_logprobs, -1, "top_logprobs");
    BAD(top_logprobs, 3, "top_logprobs"); /* without logprobs */
    p = d;
    p.logprobs = 1;
    p.top_logprobs = 20;
    accept_ok(p, 100);

    static model_logit_bias many[MODEL_MAX_LOGIT_BIAS + 1];
    for (int i = 0; i <= MODEL_MAX_LOGIT_BIAS; i++) many[i] = (model_logit_bias){i, 1e6f};
    p = d;
    p.logit_bias = many;
    p.n_logit_bias = MODEL_MAX_LOGIT_BIAS + 1;
    reject(p, 1000, NULL, 0, 0, "logit_bias");
    p.n_logit_bias = MODEL_MAX_LOGIT_BIAS; /* 300 entries, values clamped */
    accept_ok(p, 1000);
    p.n_logit_bias = -1;
    reject(p, 1000, NULL, 0, 0, "logit_bias");
    model_logit_bias oob[] = {{100, 1.0f}}, neg[] = {{-1, 1.0f}}, nan[] = {{3, NAN}};
    p.n_logit_bias = 1;
    p.logit_bias = oob;
    reject(p, 100, NULL, 0, 0, "logit_bias");
    p.logit_bias = neg;
    reject(p, 100, NULL, 0, 0, "logit_bias");
    p.logit_bias = nan;
    reject(p, 100, NULL, 0, 0, "logit_bias");

    p = d;
    reject(p, 0, NULL, 0, 0, "vocab");
    reject(p, MODEL_MAX_VOCAB + 1, NULL, 0, 0, "vocab");
    reject(p, 100, NULL, 0, MODEL_MAX_CHOICES, "choice");
    reject(p, 100, NULL, 0, -1, "choice");
    const int32_t prompt[] = {5, 100};
    reject(p, 100, prompt, 2, 0, "prompt");
    reject(p, 100, NULL, 3, 0, "prompt");
    char err[64];
    CHECK(!model_sampler_new(NULL, 100, NULL, 0, 0, err, sizeof err));
#undef BAD
#undef GOOD
}

/* model_sample_argmax (what a device's own greedy pick must equal: accel_decode_argmax) against
 * the sampler's greedy step on rows made for the rule — ties, NaN, +inf with FLT_MAX, -0 with +0,
 * no finite logit — and on many random rows with repeated values; and which samplers are plain
 * greedy (the scheduler lets the device pick only for those). */
TEST(sample_argmax_is_the_greedy_step)
{
    model_sampling p = model_sampling_default();
    p.temperature = 0;
    enum { V = 4099 };
    static float row[V], cp[V];
    model_sampler *s = su_new(p, V, 3);
    REQUIRE(s);
    CHECK(model_sampler_plain_greedy(s));
    model_rng r;
    model_rng_seed(&r, 11);
    for (int t = 0; t < 400; t++) {
        for (int i = 0; i < V; i++) row[i] = (float)(int)(model_rng_uniform(&r) * 64) - 32; /* ties */
        int a = (int)(model_rng_uniform(&r) * V), b = (int)(model_rng_uniform(&r) * V);
        switch (t % 8) {
        case 1: row[a] = NAN, row[0] = NAN; break;
        case 2: row[a] = INFINITY, row[b] = FLT_MAX; break;
        case 3: row[a] = FLT_MAX, row[b] = INFINITY; break;
        case 4:
            for (int i = 0; i < V; i++) row[i] = -1 - (float)(i % 3);
            row[a] = -0.0f, row[b] = 0.0f;
            break;
        case 5: row[V - 1] = 1000; break;
        case 6: for (int i = 0; i < V; i += 2) row[i] = NAN; break;
        }
        memcpy(cp, row, sizeof row);
        int32_t want = model_sampler_sample(s, cp, NULL);
        CHECK_EQ(model_sample_argmax(row, V), want);
    }
    float none[4] = {NAN, -INFINITY, INFINITY, NAN}; /* no finite logit: -1 */
    CHECK_EQ(model_sample_argmax(none, 4), -1);
    float inf_first[4] = {INFINITY, 1, FLT_MAX, NAN}; /* +inf ties with FLT_MAX: the lower id */
    CHECK_EQ(model_sample_argmax(inf_first, 4), 0);
    float zeros[3] = {-1, -0.0f, 0.0f};
    CHECK_EQ(model_sample_argmax(zeros, 3), 1);
    model_sampler_free(s);

    /* plain greedy only without bias, penalties and logprobs, at temperature 0 */
    model_logit_bias lb = {1, 2};
    model_sampling q[6];
    for (int i = 0; i < 6; i++) q[i] = p;
    q[0].temperature = 0.7f;
    q[1].logit_bias = &lb, q[1].n_logit_bias = 1;
    q[2].repetition_penalty = 1.1f;
    q[3].frequency_penalty = 0.5f;
    q[4].presence_penalty = -0.5f;
    q[5].logprobs = 1;
    for (int i = 0; i < 6; i++) {
        model_sampler *x = su_new(q[i], V, 1);
        REQUIRE(x);
        CHECK_MSG(!model_sampler_plain_greedy(x), "case %d", i);
        model_sampler_free(x);
    }
}
