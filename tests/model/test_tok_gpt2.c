/* GPT-2's tokenizer.json (byte-level BPE) against swift-transformers' recorded encoding and
 * llama.cpp's gpt-2 vectors (tests/data/tokenizer/gpt2/). */
#include "model/tok/tokenizer.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"
#include <jansson.h>

#define GPT2_JSON "build/data/tokenizer/gpt2/tokenizer.json"

TEST(tok_gpt2_swift_transformers)
{
    char err[512];
    model_tok *t = model_tok_load(GPT2_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    json_error_t je;
    json_t *g = json_load_file("tests/data/tokenizer/gpt2/gpt2_encoded_tokens.json", 0, &je);
    REQUIRE(g);
    json_t *jt = json_object_get(g, "text"), *jids = json_object_get(g, "token_ids");
    json_t *jtok = json_object_get(g, "bpe_tokens");
    size_t n = json_array_size(jids);
    REQUIRE(n > 100);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
    tt_check_encode(t, json_string_value(jt), json_string_length(jt), 1, ids, n, "gpt2 text");
    for (size_t i = 0; i < n; i++)
        CHECK_STR(model_tok_piece(t, ids[i]), json_string_value(json_array_get(jtok, i)));
    char *text;
    size_t len;
    CHECK(model_tok_decode(t, ids, n, 0, &text, &len) == 0);
    CHECK_STR(text, json_string_value(json_object_get(g, "decoded_text")));
    free(text);
    free(ids);
    json_decref(g);
    model_tok_free(t);
}

TEST(tok_gpt2_ggml_vectors)
{
    char err[512];
    model_tok *t = model_tok_load(GPT2_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    tt_case *c;
    long n = tt_ggml_cases("tests/data/tokenizer/gpt2/ggml-vocab-gpt-2.gguf.inp",
                           "tests/data/tokenizer/gpt2/ggml-vocab-gpt-2.gguf.out", &c);
    REQUIRE(n >= 40);
    for (long i = 0; i < n; i++) {
        tt_check_encode(t, c[i].text, c[i].len, 0, c[i].ids, c[i].n, "gpt-2");
        char *text;
        size_t len;
        CHECK(model_tok_decode(t, c[i].ids, c[i].n, 0, &text, &len) == 0);
        CHECK_MSG(len == c[i].len && !memcmp(text, c[i].text, len), "gpt-2 round trip of case %ld", i);
        free(text);
    }
    tt_cases_free(c, n);
    model_tok_free(t);
}
