/* model_gen: the per-choice pipeline (sample -> text -> stop -> finish) on forced tokens. */
#include "tests/test.h"
#include "model/gen/gen.h"
#include <pthread.h>

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

/* model_gen_prefetch (the mask computed on another thread while the logits are computed,
 * scheduler/sched_mask.c) changes nothing a step gives: two choices with the same seed and
 * logits, one prefetched on a second thread before every step, sample the same tokens. */
typedef struct prefetch_job {
    model_gen *g;
} prefetch_job;

static void *prefetch_main(void *arg)
{
    model_gen_prefetch(((prefetch_job *)arg)->g);
    return NULL;
}

TEST(gen_prefetch_same_tokens)
{
    model_tok *t = tok();
    REQUIRE(t);
    int V = model_tok_vocab_size(t);
    int32_t eos = 2, prompt[1] = {1};
    model_gvocab *gv = model_gen_vocab_new(t, V, &eos, 1);
    char err[256];
    const char *text = model_grammar_json_object();
    model_grammar *gr = model_grammar_new(text, strlen(text), NULL, err, sizeof err);
    REQUIRE(gv && gr);
    model_gen_params p = {.sampling = model_sampling_default(), .max_tokens = 200, .n_ctx = 512, .eos_ids = &eos,
                          .n_eos = 1, .skip_special = 1, .grammar = gr, .gvocab = gv};
    p.sampling.seed = 7;
    p.sampling.has_seed = 1;
    model_gen *a = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    model_gen *b = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(a && b);
    CHECK(model_gen_has_grammar(a));
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    uint64_t x = 88172645463325252ull;
    int steps = 0;
    for (; steps < 200; steps++) {
        for (int i = 0; i < V; i++) { /* xorshift: a fixed pseudo-random row per step */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            la[i] = lb[i] = (float)(x % 2000) / 200.0f;
        }
        pthread_t th;
        prefetch_job j = {a};
        if (steps) { /* the first step is the prefill's: no decode call to overlap */
            REQUIRE(pthread_create(&th, NULL, prefetch_main, &j) == 0);
            pthread_join(th, NULL);
        }
        model_gen_out oa, ob;
        int ra = model_gen_step(a, la, &oa), rb = model_gen_step(b, lb, &ob);
        CHECK_EQ(ra, rb);
        CHECK_EQ(oa.token, ob.token);
        if (ra || oa.token != ob.token || oa.finish != MODEL_FINISH_NONE) break;
    }
    CHECK(steps > 3);
    free(la);
    free(lb);
    model_gen_free(a);
    model_gen_free(b);
    model_grammar_unref(gr);
    model_gvocab_free(gv);
    model_tok_free(t);
}

/* A continuation (completions) over a prompt longer than the stream's skip window: the text is
 * what decoding prompt + generated adds after the prompt's text, the leading space included; a
 * reply of its own (continuation 0) drops it, as decode(generated) does. */
TEST(gen_continuation_after_long_prompt)
{
    model_tok *t = tok();
    REQUIRE(t);
    int V = model_tok_vocab_size(t);
    const char *ptext = "Lily and Ben went to the park. They saw a big dog. It was brown and it ran "
                        "to them. Lily was happy and Ben was happy too. They played with the dog "
                        "all day long and then they went home to eat with their mom. They saw a big dog";
    const char *gtext = "named Max. Max was very happy."; /* encodes as "\u2581named ..." */
    int32_t *pid, *gid;
    size_t np, ng;
    REQUIRE(model_tok_encode(t, ptext, strlen(ptext), 1, &pid, &np) == 0);
    REQUIRE(model_tok_encode(t, gtext, strlen(gtext), 0, &gid, &ng) == 0);
    CHECK(np > 80); /* past gen.c's window */
    int32_t eos = 2;
    for (int cont = 0; cont <= 1; cont++) {
        model_gen_params p = {.sampling = model_sampling_default(), .max_tokens = (int)ng,
                              .n_ctx = 512, .eos_ids = &eos, .n_eos = 1, .skip_special = 1,
                              .continuation = cont};
        p.sampling.temperature = 0;
        char err[256], acc[256] = "";
        model_gen *g = model_gen_new(t, &p, V, pid, (int)np, 0, err, sizeof err);
        REQUIRE(g);
        model_gen_out o = {0};
        for (size_t k = 0; k < ng; k++) {
            REQUIRE(force(g, V, gid[k], &o) == gid[k]);
            strncat(acc, o.text, o.len);
        }
        CHECK_EQ(o.finish, MODEL_FINISH_LENGTH); /* max_tokens: the held text is out */
        /* the reference: decode(prompt + generated) after decode(prompt) */
        int32_t *all = malloc((np + ng) * sizeof *all);
        memcpy(all, pid, np * sizeof *all);
        memcpy(all + np, gid, ng * sizeof *all);
        char *whole, *prompt;
        size_t lw, lp;
        REQUIRE(model_tok_decode(t, all, np + ng, 1, &whole, &lw) == 0 &&
                model_tok_decode(t, pid, np, 1, &prompt, &lp) == 0);
        CHECK_STR(acc, cont ? whole + lp : gtext);
        if (cont) CHECK(acc[0] == ' ' && !strcmp(acc + 1, gtext));
        free(whole);
        free(prompt);
        free(all);
        model_gen_free(g);
    }
    free(pid);
    free(gid);
    model_tok_free(t);
}

/* A grammar sees the text the client gets: a continuation after a prompt with text keeps the
 * first token's space (" named"), so "\u2581named" is allowed by `" named"` and refused by
 * `"named"`; a reply of its own drops it, the other way round. (Before, the matcher always
 * dropped it, as for a reply: a completion under `"a"*` could return " aaaa".) */
TEST(gen_grammar_sees_the_continuation_text)
{
    model_tok *t = tok();
    REQUIRE(t);
    int V = model_tok_vocab_size(t);
    int32_t named = model_tok_id(t, "\xE2\x96\x81named");
    REQUIRE(named >= 0);
    int32_t *pid;
    size_t np;
    const char *ptext = "They saw a big dog";
    REQUIRE(model_tok_encode(t, ptext, strlen(ptext), 1, &pid, &np) == 0);
    int32_t eos = 2;
    model_gvocab *gv = model_gen_vocab_new(t, V, &eos, 1);
    REQUIRE(gv);
    static const struct {
        int cont;
        const char *grammar, *text;
        int allowed;
    } cases[] = {
        {1, "root ::= \" named\"", " named", 1},
        {1, "root ::= \"named\"", NULL, 0},
        {0, "root ::= \"named\"", "named", 1},
        {0, "root ::= \" named\"", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        model_grammar *gr =
            model_grammar_new(cases[i].grammar, strlen(cases[i].grammar), NULL, err, sizeof err);
        REQUIRE(gr);
        model_gen_params p = {.sampling = model_sampling_default(),
                              .max_tokens = 4,
                              .n_ctx = 512,
                              .eos_ids = &eos,
                              .n_eos = 1,
                              .skip_special = 1,
                              .continuation = cases[i].cont,
                              .grammar = gr,
                              .gvocab = gv};
        p.sampling.temperature = 0;
        model_gen *g = model_gen_new(t, &p, V, pid, (int)np, 0, err, sizeof err);
        REQUIRE(g);
        model_gen_out o = {0};
        int32_t got = force(g, V, named, &o);
        CHECK_MSG((got == named) == cases[i].allowed, "case %zu: %d", i, got);
        if (cases[i].allowed)
            CHECK_MSG(o.len == strlen(cases[i].text) && !memcmp(o.text, cases[i].text, o.len),
                      "case %zu: '%.*s'", i, (int)o.len, o.text);
        model_gen_free(g);
        model_grammar_unref(gr);
    }
    model_gvocab_free(gv);
    free(pid);
    model_tok_free(t);
}

/* model_gen_step_token (the device picked the greedy token: accel_decode_argmax) against
 * model_gen_step on the same rows: the same tokens, text and finish, step by step; refused for a
 * choice that is not plain greedy. */
TEST(gen_step_token_is_the_greedy_step)
{
    model_tok *t = tok();
    REQUIRE(t);
    int V = model_tok_vocab_size(t);
    int32_t eos = 2, prompt[1] = {1};
    const char *stops[] = {" ran"};
    model_gen_params p = {.sampling = model_sampling_default(), .stops = stops, .n_stops = 1,
                          .max_tokens = 40, .n_ctx = 512, .eos_ids = &eos, .n_eos = 1,
                          .skip_special = 1};
    p.sampling.temperature = 0;
    char err[256];
    model_gen *a = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err),
              *b = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(a && b);
    CHECK(model_gen_plain_greedy(a));
    float *lg = malloc(sizeof(float) * V);
    REQUIRE(lg);
    uint32_t s = 5;
    int steps = 0;
    model_gen_out oa, ob;
    do {
        for (int i = 0; i < V; i++) {
            s = s * 1664525u + 1013904223u;
            lg[i] = (float)(s >> 24) / 16.0f; /* ties are common */
        }
        int32_t pick = model_sample_argmax(lg, V);
        REQUIRE(model_gen_step(a, lg, &oa) == 0);
        REQUIRE(model_gen_step_token(b, pick, &ob) == 0);
        CHECK_EQ(oa.token, ob.token);
        CHECK_EQ(oa.finish, ob.finish);
        CHECK_EQ(oa.stop_string, ob.stop_string);
        CHECK(oa.len == ob.len && !memcmp(oa.text, ob.text, oa.len));
        steps++;
    } while (oa.finish == MODEL_FINISH_NONE && steps < 100);
    CHECK_EQ(model_gen_generated(a), model_gen_generated(b));
    model_gen_free(a);
    model_gen_free(b);
    /* a token out of range: refused, nothing done */
    a = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(a);
    CHECK_EQ(model_gen_step_token(a, V, &oa), -3);
    CHECK_EQ(model_gen_step_token(a, -1, &oa), -3);
    CHECK_EQ(model_gen_generated(a), 0);
    model_gen_free(a);
    /* not plain greedy: refused, nothing done */
    p.sampling.temperature = 0.5f;
    p.sampling.has_seed = 1;
    a = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(a);
    CHECK(!model_gen_plain_greedy(a));
    CHECK_EQ(model_gen_step_token(a, 3, &oa), -3);
    CHECK_EQ(model_gen_generated(a), 0);
    model_gen_free(a);
    p.sampling.temperature = 0;
    p.sampling.logprobs = 1;
    a = model_gen_new(t, &p, V, prompt, 1, 0, err, sizeof err);
    REQUIRE(a);
    CHECK(!model_gen_plain_greedy(a));
    CHECK_EQ(model_gen_step_token(a, V, &oa), -3);
    model_gen_free(a);
    free(lg);
    model_tok_free(t);
}
