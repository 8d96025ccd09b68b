/* Llama-2's tokenizer.json (SentencePiece-style BPE) against references we did not write:
 * tokenizers 0.23.2's encodings (tests/data/golden/tokenizer/llama2.json), transformers 4.57.1's
 * TinyLlama encodings (tests/data/tokenizer/tinyllama_basic_*), llama.cpp's llama-spm vectors. */
#include "model/tok/tokenizer.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"
#include <jansson.h>

#define LLAMA2_JSON "models/tiny-llama2-mha/tokenizer.json"

static int32_t *json_ids(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

TEST(tok_llama2_golden)
{
    char err[512];
    model_tok *t = model_tok_load(LLAMA2_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    json_error_t je;
    json_t *g = json_load_file("tests/data/golden/tokenizer/llama2.json", JSON_ALLOW_NUL, &je);
    REQUIRE(g);
    json_t *cs = json_object_get(g, "cases"), *c;
    size_t i;
    REQUIRE(json_array_size(cs) >= 20);
    json_array_foreach(cs, i, c)
    {
        json_t *jt = json_object_get(c, "text");
        size_t n;
        int32_t *ids = json_ids(json_object_get(c, "ids"), &n);
        /* the golden encodings carry no special tokens (add_special_tokens=False) */
        tt_check_encode(t, json_string_value(jt), json_string_length(jt), 0, ids, n, "llama2 golden");
        char *text;
        size_t len;
        CHECK(model_tok_decode(t, ids, n, 0, &text, &len) == 0);
        json_t *jd = json_object_get(c, "decoded");
        CHECK_MSG(len == json_string_length(jd) && !memcmp(text, json_string_value(jd), len),
                  "decode of case %zu: \"%s\" expected \"%s\"", i, text, json_string_value(jd));
        free(text);
        free(ids);
    }
    json_decref(g);
    model_tok_free(t);
}

TEST(tok_tinyllama_recorded)
{
    char err[512];
    /* the model directory: tokenizer_config.json (LlamaTokenizer, add_bos_token) applies */
    model_tok *t = model_tok_load_dir("models/tiny-llama2-mha", err, sizeof err);
    REQUIRE(t);
    json_error_t je;
    json_t *in = json_load_file("tests/data/tokenizer/tinyllama_basic_inputs.json", 0, &je);
    json_t *base = json_load_file("tests/data/tokenizer/tinyllama_basic_baseline.json", 0, &je);
    REQUIRE(in && base);
    json_t *entries = json_object_get(base, "entries"), *x;
    size_t i, checked = 0;
    json_array_foreach(json_object_get(in, "inputs"), i, x)
    {
        const char *id = json_string_value(json_object_get(x, "id"));
        json_t *e = json_object_get(entries, id), *jt = json_object_get(x, "text");
        if (!e) continue;
        size_t n;
        int32_t *ids = json_ids(json_object_get(e, "input_ids"), &n);
        tt_check_encode(t, json_string_value(jt), json_string_length(jt), 1, ids, n, id);
        json_t *toks = json_object_get(e, "tokens");
        for (size_t k = 0; k < n && k < json_array_size(toks); k++)
            CHECK_STR(model_tok_piece(t, ids[k]), json_string_value(json_array_get(toks, k)));
        char *text;
        size_t len;
        CHECK(model_tok_decode(t, ids, n, 0, &text, &len) == 0);
        CHECK_STR(text, json_string_value(json_object_get(e, "decoded_with_special")));
        free(text);
        CHECK(model_tok_decode(t, ids, n, 1, &text, &len) == 0);
        CHECK_STR(text, json_string_value(json_object_get(e, "decoded_skip_special")));
        free(text);
        free(ids);
        checked++;
    }
    CHECK_EQ(checked, 30);
    json_decref(in);
    json_decref(base);
    model_tok_free(t);
}

TEST(tok_llama_spm_vectors)
{
    char err[512];
    model_tok *t = model_tok_load(LLAMA2_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    tt_case *c;
    long n = tt_ggml_cases("tests/data/tokenizer/ggml-vocab-llama-spm.gguf.inp",
                           "tests/data/tokenizer/ggml-vocab-llama-spm.gguf.out", &c);
    REQUIRE(n >= 40);
    /* llama.cpp wrote these with tokenizer.encode(text, add_special_tokens=False) */
    for (long i = 0; i < n; i++) tt_check_encode(t, c[i].text, c[i].len, 0, c[i].ids, c[i].n, "llama-spm");
    tt_cases_free(c, n);
    model_tok_free(t);
}
