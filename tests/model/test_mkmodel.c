/* Checkpoints written by tools/mkmodel: GQA with llama3 rope scaling and tied embeddings in
 * bfloat16, sharded; Qwen2-style biases; linear/dynamic rope. The CPU backend must load them,
 * agree with the naive float64 forward (tests/ref_forward.c) within 1e-3 and be consistent
 * between prefill and decode. */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/ref_forward.h"

static void check_dir(const char *args, const char *name, int n, int decode_check)
{
    char dir[512];
    REQUIRE(t_mkmodel(args, name, dir, sizeof dir) == 0);
    model *m;
    accel_dev *d;
    REQUIRE(t_open(dir, "cpu", &m, &d) == 0);
    int V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 1) % V);
    /* one prefill call for the whole prompt: dynamic NTK rotates by the call's end, so the
     * reference (one forward of all n) is only comparable to a single call */
    float *lg = malloc((size_t)n * V * sizeof(float));
    accel_seq *s0;
    REQUIRE(accel_seq_new(d, n, &s0) == 0);
    accel_prefill_req r0 = {.seq = s0, .ids = ids, .n = n, .logits = lg, .all_logits = 1};
    REQUIRE(accel_prefill(d, &r0) == 0);
    accel_seq_free(d, s0);
    double *ref = ref_forward(m, ids, n);
    double worst = 0;
    for (size_t i = 0; i < (size_t)n * V; i++)
        if (fabs(lg[i] - ref[i]) > worst) worst = fabs(lg[i] - ref[i]);
    CHECK_MSG(worst < 1e-3, "%s: cpu vs float64 reference: %.3g", name, worst);
    /* decode the second half against the prefill (not for dynamic NTK past the trained length:
     * there transformers itself rotates each new key with the base of its own step) */
    if (decode_check) {
        accel_seq *s;
        REQUIRE(accel_seq_new(d, n, &s) == 0);
        float *one = malloc(V * sizeof(float));
        accel_prefill_req r = {.seq = s, .ids = ids, .n = n / 2};
        REQUIRE(accel_prefill(d, &r) == 0);
        double w2 = 0;
        for (int p = n / 2; p < n; p++) {
            REQUIRE(accel_decode(d, 1, &s, &ids[p], one) == 0);
            double w = t_max_abs_diff(one, lg + (size_t)p * V, V);
            if (w > w2) w2 = w;
        }
        CHECK_MSG(w2 <= 1e-4, "%s: decode vs prefill %.3g", name, w2);
        accel_seq_free(d, s);
        free(one);
    }
    free(ref);
    free(lg);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(mkmodel_gqa_llama3_tied_bf16_sharded)
{
    char err[256], dir[512];
    REQUIRE(t_mkmodel("--preset tiny-gqa", "gqa", dir, sizeof dir) == 0);
    model *m = model_load(dir, err, sizeof err);
    REQUIRE(m);
    CHECK_EQ(m->n_files, 2);
    CHECK_EQ(m->cfg.n_kv_heads * 4, m->cfg.n_heads);
    CHECK_EQ(m->cfg.rope.type, MODEL_ROPE_LLAMA3);
    CHECK(m->cfg.tie_embeddings);
    CHECK_EQ(m->embed.dtype, MODEL_DTYPE_BF16);
    CHECK(m->lm_head.data == m->embed.data);
    model_free(m);
    /* 300 positions: past original_max_position_embeddings (256), so all three llama3 bands act */
    check_dir("--preset tiny-gqa", "gqa2", 300, 1);
}

TEST(mkmodel_qwen2_bias_untied_f16)
{
    check_dir("--preset tiny-gqa --bias --untie --dtype f16 --rope none --shards 1", "qwen", 40, 1);
}

TEST(mkmodel_rope_linear_and_dynamic_f32)
{
    check_dir("--preset tiny-gqa --dtype f32 --rope linear --rope-factor 4 --shards 1", "lin", 40, 1);
    /* dynamic: max_pos 64, so 100 positions cross into the rescaled base */
    check_dir("--preset tiny-gqa --dtype f32 --rope dynamic --rope-factor 2 --max-pos 64 --shards 3",
              "dyn", 100, 0);
    check_dir("--preset tiny-gqa --dtype f32 --rope dynamic --rope-factor 2 --max-pos 64 --shards 3",
              "dyn2", 50, 1);
    /* one call longer than the backend's 512-token sub-batches, past the trained length: every
     * token rotates with the base of the call's end, as transformers computes it */
    check_dir("--preset tiny-gqa --dtype f32 --rope dynamic --rope-factor 16 --max-pos 64 --shards 1",
              "dyn3", 600, 0);
}
