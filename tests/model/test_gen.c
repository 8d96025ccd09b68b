/* model_gen: the per-choice pipeline (sample -> text -> stop -> finish) on forced tokens. */
#include "tests/test.h"
#include "model/gen/gen.h"

static int32_t force(model_gen *g, int vocab, int32_t id, model_gen_out *o)
{
    float *lg = malloc(vocab * sizeof(float));
    for (int i = 0; i < vocab; i++) lg[i] = -10;
    lg[id] = 10;
    int rc = model_gen_step(g, lg, o);
    free(lg);
    return rc ? -1 : o->token;
}

static model_tok *tok(void)
{
    char err[256];
    return model_tok_load_dir("models/stories260K", err, sizeof err);
}

TEST(gen_text_stop_and_eos)
{
    model_tok *t = tok();
    REQUIRE(t);
    int V = model_tok_vocab_size(t);
    int32_t *ids;
    size_t n;
    const char *text = "Once upon a time, Lily ran.";
    REQUIRE(model_tok_encode(t, text, strlen(text), 0, &ids, &n) == 0);
    const char *stops[] = {"Lily"};
    int32_t eos = 2, prompt[1] = {1};
    model_gen_params p = {.sampling = model_sampling_default(), .stops = stops, .n_stops = 1,
                          .max_tokens = 100, .n_ctx = 512, .eos_ids = &eos, .n_eos = 1,
                          .skip_special = 1};
    p.sampling.temperature = 0;
    char err[256], acc[256] = "";
    model_gen *g = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(g);
    model_gen_out o = {0};
    size_t k;
    for (k = 0; k < n; k++) {
        REQUIRE(force(g, V, ids[k], &o) == ids[k]);
        strncat(acc, o.text, o.len);
        if (o.finish) break;
    }
    CHECK_EQ(o.finish, MODEL_FINISH_STOP);
    CHECK(o.stop_string);
    CHECK_STR(acc, "Once upon a time, ");
    model_gen_free(g);

    /* eos: finish "stop", its text never emitted; everything held before it is released */
    const char *none[] = {"zzz"};
    p.stops = none;
    g = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(g);
    acc[0] = 0;
    for (k = 0; k < 3; k++) {
        force(g, V, ids[k], &o);
        strncat(acc, o.text, o.len);
    }
    force(g, V, eos, &o);
    strncat(acc, o.text, o.len);
    CHECK_EQ(o.finish, MODEL_FINISH_STOP);
    CHECK(!o.stop_string);
    CHECK_STR(acc, "Once upon a");
    model_gen_free(g);

    /* max_tokens: "length", and the held-back text comes out */
    p.max_tokens = 2;
    p.stops = NULL;
    p.n_stops = 0;
    g = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    acc[0] = 0;
    force(g, V, ids[0], &o);
    strncat(acc, o.text, o.len);
    CHECK_EQ(o.finish, MODEL_FINISH_NONE);
    force(g, V, ids[1], &o);
    strncat(acc, o.text, o.len);
    CHECK_EQ(o.finish, MODEL_FINISH_LENGTH);
    CHECK_STR(acc, "Once upon");
    model_gen_free(g);
    free(ids);
    model_tok_free(t);
}

TEST(gen_rejects_bad_parameters)
{
    model_gen_params p = {.sampling = model_sampling_default(), .n_ctx = 10};
    p.sampling.top_p = 2;
    char err[256];
    model_gen *g = model_gen_new(NULL, &p, 100, NULL, 0, 0, err, sizeof err);
    CHECK(g == NULL);
    CHECK(strstr(err, "top_p") != NULL);
}
