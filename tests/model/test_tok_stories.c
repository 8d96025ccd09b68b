/* The stories260K tokenizer against the golden files transformers produced for it
 * (tests/data/golden/stories260K/NAME.json): every prompt "text" encodes to "ids" (BOS included),
 * and greedy_ids decode to greedy_text, both in one call and streamed token by token. */
#include "model/tok/tokenizer.h"
#include "proto/utf8.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"
#include <dirent.h>
#include <jansson.h>

static void check_golden(model_tok *t, const char *path, int *n_text, int *n_greedy)
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
        (*n_greedy)++;
    }
    json_decref(g);
}

TEST(tok_stories260k_golden)
{
    char err[512];
    model_tok *t = model_tok_load_dir("models/stories260K", err, sizeof err);
    REQUIRE(t);
    DIR *d = opendir("tests/data/golden/stories260K");
    REQUIRE(d);
    struct dirent *e;
    int n_text = 0, n_greedy = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/golden/stories260K/%s", e->d_name);
        check_golden(t, path, &n_text, &n_greedy);
    }
    closedir(d);
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
    static const char *names[] = {"code", "hello", "multi"};
    int n_text = 0, n_greedy = 0;
    for (int i = 0; i < 3; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/golden/tiny-llama2-mha/%s.json", names[i]);
        check_golden(t, path, &n_text, &n_greedy);
    }
    CHECK_EQ(n_text, 3);
    model_tok_free(t);
}
