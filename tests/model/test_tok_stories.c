/* The stories260K tokenizer against the golden files transformers produced for it
 * (tests/data/golden/stories260K/NAME.json): every prompt "text" encodes to "ids" (BOS included),
 * and greedy_ids decode to greedy_text, both in one call and streamed token by token. A completion's
 * text (the stream skipped over the prompt: model_tok_stream_skip) is what transformers' pipeline
 * returns, decode(ids + greedy_ids)[len(decode(ids)):]: greedy_text with the space the first greedy
 * piece's "\u2581" stands for (read from tokenizer.json's own vocabulary) unless the prompt has no
 * text, and without what the prompt's decode holds at its end (a trailing byte-fallback "\n"). */
#include "model/tok/tokenizer.h"
#include "proto/utf8.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"
#include <dirent.h>
#include <jansson.h>

/* The piece of id in tokenizer.json (dir/tokenizer.json's model.vocab), or NULL. */
static const char *vocab_piece(json_t *tj, int32_t id)
{
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(json_object_get(tj, "model"), "vocab"), k, v) {
        if (json_integer_value(v) == id) return k;
    }
    return NULL;
}

/* The stream skipped over ids[0..np), fed g[0..ng), flushed: the text after the prompt's. */
static char *continuation(model_tok *t, const int32_t *ids, size_t np, const int32_t *g, size_t ng)
{
    model_tok_stream *s = model_tok_stream_new(t, 1);
    if (!s || model_tok_stream_skip(s, ids, np)) return NULL;
    size_t cap = 8192, al = 0, l;
    char *acc = malloc(cap);
    for (size_t i = 0; i <= ng; i++) {
        const char *p = i < ng ? model_tok_stream_push(s, g[i], &l) : model_tok_stream_flush(s, &l);
        if (!p || al + l + 1 > cap) break;
        memcpy(acc + al, p, l);
        al += l;
    }
    acc[al] = 0;
    model_tok_stream_free(s);
    return acc;
}

static void check_continuation(model_tok *t, json_t *tj, json_t *jids, json_t *gi, json_t *gt,
                               const char *path)
{
    size_t np = json_array_size(jids), ng = json_array_size(gi);
    int32_t *all = malloc((np + ng + 1) * sizeof *all);
    for (size_t i = 0; i < np; i++) all[i] = (int32_t)json_integer_value(json_array_get(jids, i));
    for (size_t i = 0; i < ng; i++) all[np + i] = (int32_t)json_integer_value(json_array_get(gi, i));
    char *cont = continuation(t, all, np, all + np, ng), *whole, *prompt;
    size_t lw, lp;
    CHECK(cont && model_tok_decode(t, all, np + ng, 1, &whole, &lw) == 0 &&
          model_tok_decode(t, all, np, 1, &prompt, &lp) == 0);
    if (cont && lw >= lp) {
        CHECK_MSG(!strcmp(cont, whole + lp), "%s: continuation %.40s vs decode(all) after the prompt %.40s",
                  path, cont, whole + lp);
        const char *piece = vocab_piece(tj, all[np]);
        /* the space is the prompt's text's own: a prompt with no text (BOS alone) strips it */
        int space = lp > 0 && piece && !strncmp(piece, "\xe2\x96\x81", 3);
        CHECK_MSG(space ? cont[0] == ' ' && !strcmp(cont + 1, json_string_value(gt))
                        : !strcmp(cont, json_string_value(gt)),
                  "%s: continuation %.40s, greedy_text %.40s, first piece %s", path, cont,
                  json_string_value(gt), piece ? piece : "?");
        free(whole);
        free(prompt);
    }
    free(cont);
    free(all);
}

static void check_golden(model_tok *t, json_t *tj, const char *path, int *n_text, int *n_greedy)
{
    json_error_t je;
    json_t *g = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!g) {
        t_fail(__FILE__, __LINE__, "%s: %s", path, je.text);
        return;
    }
    json_t *jt = json_object_get(g, "text"), *jids = json_object_get(g, "ids");
    if (json_is_string(jt)) {
        size_t n = json_array_size(jids);
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        tt_check_encode(t, json_string_value(jt), json_string_length(jt), 1, ids, n, path);
        free(ids);
        (*n_text)++;
    }
    json_t *gi = json_object_get(g, "greedy_ids"), *gt = json_object_get(g, "greedy_text");
    if (json_is_array(gi) && json_is_string(gt)) {
        size_t n = json_array_size(gi);
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(gi, i));
        char *text;
        size_t len;
        CHECK(model_tok_decode(t, ids, n, 1, &text, &len) == 0);
        CHECK_STR(text, json_string_value(gt));
        free(text);
        /* streamed: the same text, each piece valid UTF-8 */
        model_tok_stream *s = model_tok_stream_new(t, 1);
        char acc[8192];
        size_t al = 0, l;
        for (size_t i = 0; i < n; i++) {
            const char *p = model_tok_stream_push(s, ids[i], &l);
            CHECK(p && proto_utf8_valid(p, l) && al + l < sizeof acc);
            memcpy(acc + al, p, l);
            al += l;
        }
        const char *p = model_tok_stream_flush(s, &l);
        memcpy(acc + al, p, l);
        al += l;
        acc[al] = 0;
        CHECK_STR(acc, json_string_value(gt));
        model_tok_stream_free(s);
        free(ids);
        if (json_is_string(jt)) check_continuation(t, tj, jids, gi, gt, path);
        (*n_greedy)++;
    }
    json_decref(g);
}

TEST(tok_stories260k_golden)
{
    char err[512];
    model_tok *t = model_tok_load_dir("models/stories260K", err, sizeof err);
    REQUIRE(t);
    json_error_t je;
    json_t *tj = json_load_file("models/stories260K/tokenizer.json", 0, &je);
    REQUIRE(tj);
    DIR *d = opendir("tests/data/golden/stories260K");
    REQUIRE(d);
    struct dirent *e;
    int n_text = 0, n_greedy = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/golden/stories260K/%s", e->d_name);
        check_golden(t, tj, path, &n_text, &n_greedy);
    }
    closedir(d);
    json_decref(tj);
    CHECK(n_text >= 5);
    CHECK(n_greedy >= 5);
    model_tok_free(t);
}

/* tiny-llama2-mha's goldens were encoded by the same Llama-2 tokenizer. */
TEST(tok_tiny_llama2_golden_prompts)
{
    char err[512];
    model_tok *t = model_tok_load_dir("models/tiny-llama2-mha", err, sizeof err);
    REQUIRE(t);
    json_error_t je;
    json_t *tj = json_load_file("models/tiny-llama2-mha/tokenizer.json", 0, &je);
    REQUIRE(tj);
    static const char *names[] = {"code", "hello", "multi"};
    int n_text = 0, n_greedy = 0;
    for (int i = 0; i < 3; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/golden/tiny-llama2-mha/%s.json", names[i]);
        check_golden(t, tj, path, &n_text, &n_greedy);
    }
    json_decref(tj);
    CHECK_EQ(n_text, 3);
    model_tok_free(t);
}
