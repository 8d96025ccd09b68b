/* FlexPrefill wired into the CPU prefill (accel_prefill_req.sparse). With every causal block
 * kept (gamma 1, budgets = the whole prompt) the sparse path must give dense prefill's logits
 * bit for bit (cpu/flex.h: same per-query arithmetic); with real budgets it reports a density
 * below 1 and stays finite; a chunk after existing KV runs dense. */
#include "tests/test.h"
#include "tests/util.h"

TEST(cpu_flex_prefill_full_budget_equals_dense)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open_mkmodel("--preset tiny-gqa --shards 1", "cpu", &m, &d) == 0);
    int n = 700, V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 131 + 7) % V);
    float *dense = t_prefill_all(d, ids, n), *sp = malloc((size_t)n * V * sizeof(float));
    REQUIRE(dense);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    accel_sparse cfg = t_flex_sparse(1.0f, 0.1f, n, 0, 256);
    accel_sparse_report rep;
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = sp, .all_logits = 1,
                           .sparse = &cfg, .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(rep.layers_sparse, m->cfg.n_layers);
    CHECK_NEAR(rep.density, 1.0, 1e-12);
    double w = t_max_abs_diff(sp, dense, (size_t)n * V);
    CHECK_MSG(w == 0, "sparse with every block differs from dense by %.3g", w);
    accel_seq_free(d, s);
    free(sp);
    free(dense);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(cpu_flex_prefill_reports_density_and_chunks_run_dense)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open_mkmodel("--preset tiny-gqa --shards 1", "cpu", &m, &d) == 0);
    int n = 1024, V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 17 + 3) % V);
    float *lg = malloc(V * sizeof(float));
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n + 8, &s) == 0);
    accel_sparse cfg = t_flex_sparse(0.9f, 0.1f, 128, 0, -1);
    accel_sparse_report rep;
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg, .sparse = &cfg,
                           .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(rep.layers_sparse, m->cfg.n_layers);
    CHECK(rep.density > 0 && rep.density < 1);
    for (int i = 0; i < V; i++) CHECK(isfinite(lg[i]));
    /* a chunk after existing KV: dense, density 1 */
    r.ids = ids;
    r.n = 8;
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(rep.layers_sparse, 0);
    CHECK_NEAR(rep.density, 1.0, 0);
    /* bad parameters are refused */
    accel_seq *s2;
    REQUIRE(accel_seq_new(d, n, &s2) == 0);
    accel_sparse bad = t_flex_sparse(1.5f, 0.1f, 128, 0, -1);
    accel_prefill_req rb = {.seq = s2, .ids = ids, .n = n, .logits = lg, .sparse = &bad};
    CHECK_EQ(accel_prefill(d, &rb), ACCEL_ERR_INVALID);
    accel_seq_free(d, s2);
    accel_seq_free(d, s);
    free(lg);
    free(ids);
    accel_free(d);
    model_free(m);
}
