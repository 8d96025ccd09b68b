/* The CPU backend against Hugging Face transformers' float64 outputs (tests/data/golden).
 * Tolerance 1e-3 on logits and logsumexp (issue 2): float32 arithmetic over these short, shallow
 * models lands around 1e-5 (measured 7.6e-6 worst on stories260K, 1.0e-6 on tiny-llama2-mha), so
 * 1e-3 has two orders of margin and still catches any wrong op (those move logits by > 1e-2). */
#include "tests/test.h"
#include "tests/util.h"
#include "model/ckpt/golden.h"
#include "scheduler/accel.h"

#define TOL 1e-3

static void check_case(accel_dev *d, const model *m, const char *path)
{
    char err[512];
    int vocab = m->cfg.vocab;
    model_golden *g = model_golden_load(path, vocab, err, sizeof err);
    CHECK_MSG(g, "%s", err);
    if (!g) return;
    float *lg = t_prefill_all(d, g->ids, g->n_ids);
    REQUIRE(lg);
    double worst = 0;
    for (int p = 0; p < g->n_ids; p++) {
        const float *row = lg + (size_t)p * vocab;
        for (int k = 0; k < g->topk; k++) {
            int32_t id = g->top_ids[(size_t)p * g->topk + k];
            double diff = fabs(row[id] - g->top_logits[(size_t)p * g->topk + k]);
            if (diff > worst) worst = diff;
        }
        double lse = t_logsumexp(row, vocab);
        if (fabs(lse - g->logsumexp[p]) > worst) worst = fabs(lse - g->logsumexp[p]);
        if (g->all_logits)
            for (int i = 0; i < vocab; i++) {
                double diff = fabs(row[i] - g->all_logits[(size_t)p * vocab + i]);
                if (diff > worst) worst = diff;
            }
    }
    const float *last = lg + (size_t)(g->n_ids - 1) * vocab;
    for (int i = 0; g->last_logits && i < vocab; i++)
        if (fabs(last[i] - g->last_logits[i]) > worst) worst = fabs(last[i] - g->last_logits[i]);
    CHECK_MSG(worst <= TOL, "%s: worst logit difference %.3g > %g", g->name, worst, TOL);
    free(lg);
    model_golden_free(g);
}

static void check_model(const char *model_dir, const char *golden_dir)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open(model_dir, "cpu", &m, &d) == 0);
    char **paths;
    int n = model_golden_list(golden_dir, &paths);
    CHECK(n >= 5);
    for (int i = 0; i < n; i++) {
        check_case(d, m, paths[i]);
        free(paths[i]);
    }
    free(paths);
    accel_free(d);
    model_free(m);
}

TEST(cpu_golden_stories260k_logits)
{
    check_model("models/stories260K", "tests/data/golden/stories260K");
}

TEST(cpu_golden_tiny_llama2_bf16_logits)
{
    check_model("models/tiny-llama2-mha", "tests/data/golden/tiny-llama2-mha");
}

/* stories260K is trained: greedy ids are an exact-match test (smallest margin 0.0027). */
TEST(cpu_golden_stories260k_greedy)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open("models/stories260K", "cpu", &m, &d) == 0);
    char **paths, err[512];
    int n = model_golden_list("tests/data/golden/stories260K", &paths);
    for (int i = 0; i < n; i++) {
        model_golden *g = model_golden_load(paths[i], m->cfg.vocab, err, sizeof err);
        CHECK_MSG(g, "%s", err);
        if (g) {
            int32_t *out = t_greedy(d, g->ids, g->n_ids, g->n_greedy);
            REQUIRE(out);
            int first_diff = -1;
            for (int k = 0; k < g->n_greedy && first_diff < 0; k++)
                if (out[k] != g->greedy_ids[k]) first_diff = k;
            CHECK_MSG(first_diff < 0, "%s: greedy ids differ at step %d (%d vs %d)", g->name,
                      first_diff, first_diff >= 0 ? out[first_diff] : 0,
                      first_diff >= 0 ? g->greedy_ids[first_diff] : 0);
            free(out);
        }
        model_golden_free(g);
        free(paths[i]);
    }
    free(paths);
    accel_free(d);
    model_free(m);
}
