/* Llama-3's tokenizer.json (tests/data/tokenizer/llama3/, unpacked to build/data/): byte-level BPE with its own split regex
 * ((?i:'s|'t|...), \p{L}, \p{N}{1,3}, \s+(?!\S)), ignore_merges and 256 special tokens.
 * Expected ids: llama.cpp's models/ggml-vocab-llama-bpe.gguf.{inp,out} (written by transformers'
 * AutoTokenizer for Meta-Llama-3-8B, add_special_tokens=False), a selection of its cases. */
#include "model/tok/tok_internal.h"
#include "model/tok/tokenizer.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"

#define LLAMA3_JSON "build/data/tokenizer/llama3/tokenizer.json"

static const struct {
    const char *text;
    const int32_t *ids;
    size_t n;
} llama_bpe_cases[] = {
    {"ied 4 \xC2\xBD months",
     (const int32_t[]){1142, 220, 19, 220, 27154, 4038}, 6},
    {"  ",
     (const int32_t[]){256}, 1},
    {"   ",
     (const int32_t[]){262}, 1},
    {"\t\n",
     (const int32_t[]){1602}, 1},
    {"Hello, world!",
     (const int32_t[]){9906, 11, 1917, 0}, 4},
    {" Hello, world!",
     (const int32_t[]){22691, 11, 1917, 0}, 4},
    {" this is \xF0\x9F\xA6\x99.cpp",
     (const int32_t[]){420, 374, 11410, 99, 247, 13, 11055}, 7},
    {"w048 7tuijk dsdfhu",
     (const int32_t[]){86, 23904, 220, 22, 83, 2005, 42908, 11729, 3013, 17156}, 10},
    {"\xF0\x9F\x9A\x80 (normal) \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F (multiple emojis concatenated) \xE2\x9C\x85 (only emoji that has its own token)",
     (const int32_t[]){9468, 248, 222, 320, 8416, 8, 27623, 114, 102470, 9468, 234, 104, 31643, 320, 36773, 100166, 98634, 8, 26602, 227, 320, 3323, 43465, 430, 706, 1202, 1866, 4037, 8}, 29},
    {"   Hello",
     (const int32_t[]){256, 22691}, 2},
    {"    Hello",
     (const int32_t[]){262, 22691}, 2},
    {"    Hello\n    Hello",
     (const int32_t[]){262, 22691, 198, 262, 22691}, 5},
    {"\n =",
     (const int32_t[]){198, 284}, 2},
    {"' era",
     (const int32_t[]){6, 11639}, 2},
    {"Hello, y'all! How are you \xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8""apple\xE5\xB7\xA5\xE4\xBD\x9C""1314151\xE5\xA4\xA9\xEF\xBD\x9E",
     (const int32_t[]){9906, 11, 379, 65948, 0, 2650, 527, 499, 27623, 223, 949, 37046, 101067, 19000, 23182, 102301, 9263, 18136, 16, 36827, 21909}, 21},
    {"3333333",
     (const int32_t[]){8765, 8765, 18}, 3},
    {"333333333",
     (const int32_t[]){8765, 8765, 8765}, 3},
    {"C\xE1\xBB\xAD""a Vi\xE1\xBB\x87t",
     (const int32_t[]){34, 91163, 101798}, 3},
    {"\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\xF0\x9F\x9A\x80 (normal) \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F (multiple emojis concatenated) \xE2\x9C\x85 \xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 \xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B\xE1\x9E\x8F\xE1\x9F\x82\xE1\x9E\x96\xE1\x9E\xB7\xE1\x9E\x9F\xE1\x9F\x81\xE1\x9E\x9F\xE1\x9E\xA2\xE1\x9E\xB6\xE1\x9E\x85\xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8""apple\xE5\xB7\xA5\xE4\xBD\x9C""1314151\xE5\xA4\xA9\xEF\xBD\x9E ------======= \xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0 \xD0\x91\xD1\x8A\xD0\xBB\xD0\xB3\xD0\xB0\xD1\x80\xD1\x81\xD0\xBA\xD0\xB8 ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
     (const int32_t[]){198, 4815, 15073, 66597, 8004, 1602, 2355, 79772, 11187, 9468, 248, 222, 320, 8416, 8, 27623, 114, 102470, 9468, 234, 104, 31643, 320, 36773, 100166, 98634, 8, 26602, 227, 11410, 99, 247, 9468, 99, 247, 220, 18, 220, 1644, 220, 8765, 220, 8765, 18, 220, 8765, 1644, 220, 8765, 8765, 220, 8765, 8765, 18, 220, 8765, 8765, 1644, 220, 18, 13, 18, 220, 18, 497, 18, 220, 18, 1131, 18, 220, 21549, 222, 98629, 241, 45358, 233, 21549, 237, 45358, 224, 21549, 244, 21549, 115, 21549, 253, 45358, 223, 21549, 253, 21549, 95, 98629, 227, 76460, 223, 949, 37046, 101067, 19000, 23182, 102301, 9263, 18136, 16, 36827, 21909, 56560, 54337, 19175, 102118, 13373, 64571, 34694, 3114, 112203, 80112, 3436, 106451, 14196, 14196, 74694, 3089, 3089, 29249, 17523, 3001, 27708, 7801, 358, 3077, 1027, 364, 83, 820, 568, 596, 1070, 11, 364, 793, 499, 2771, 30, 364, 44, 539, 2771, 358, 3358, 1304, 433, 11, 364, 35, 499, 1093, 1063, 15600, 30, 1226, 6, 43712, 264, 64966, 43}, 167},
};

TEST(tok_llama3_llama_cpp_vectors)
{
    char err[512];
    model_tok *t = model_tok_load(LLAMA3_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    for (size_t i = 0; i < sizeof llama_bpe_cases / sizeof *llama_bpe_cases; i++) {
        const char *s = llama_bpe_cases[i].text;
        tt_check_encode(t, s, strlen(s), 0, llama_bpe_cases[i].ids, llama_bpe_cases[i].n, "llama-bpe");
        char *text;
        size_t len;
        CHECK(model_tok_decode(t, llama_bpe_cases[i].ids, llama_bpe_cases[i].n, 0, &text, &len) == 0);
        CHECK_STR(text, s);
        free(text);
    }
    model_tok_free(t);
}

TEST(tok_llama3_special_tokens)
{
    char err[512];
    model_tok *t = model_tok_load(LLAMA3_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    CHECK_EQ(model_tok_vocab_size(t), 128256);
    CHECK_EQ(model_tok_id(t, "<|begin_of_text|>"), 128000);
    CHECK_EQ(model_tok_id(t, "<|end_of_text|>"), 128001);
    CHECK_EQ(model_tok_id(t, "<|eot_id|>"), 128009);
    CHECK(model_tok_is_special(t, 128000) && model_tok_is_special(t, 128255));
    CHECK(!model_tok_is_special(t, 9906));
    CHECK_STR(model_tok_piece(t, 22691), "\xC4\xA0Hello"); /* "ĠHello" */
    /* The post-processor (TemplateProcessing) puts <|begin_of_text|> first. */
    tt_check_encode(t, "Hello world", 11, 1, (const int32_t[]){128000, 9906, 1917}, 3, "bos");
    tt_check_encode(t, "", 0, 1, (const int32_t[]){128000}, 1, "empty with bos");
    /* Special tokens in the text are matched whole, before the regex split. */
    const char *chat = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    tt_check_encode(t, chat, strlen(chat), 0,
                    (const int32_t[]){128006, 882, 128007, 271, 13347, 128009}, 6, "chat");
    int32_t *ids;
    size_t n;
    REQUIRE(model_tok_encode(t, chat, strlen(chat), 1, &ids, &n) == 0);
    char *text;
    size_t len;
    CHECK(model_tok_decode(t, ids, n, 0, &text, &len) == 0);
    CHECK_STR(text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    free(text);
    CHECK(model_tok_decode(t, ids, n, 1, &text, &len) == 0);
    CHECK_STR(text, "user\n\nHi");
    free(text);
    free(ids);
    model_tok_free(t);
}

TEST(tok_llama3_round_trips)
{
    char err[512];
    model_tok *t = model_tok_load(LLAMA3_JSON, NULL, err, sizeof err);
    REQUIRE(t);
    static const char *texts[] = {
        "The quick brown fox jumps over the lazy dog.",
        "  leading and trailing spaces  ",
        "tabs\tand\nnewlines\r\n\r\n",
        "I'M SURE IT'S FINE, YOU'LL SEE, WE'D GO",
        "数字 12345678901234567890 and 3.14159",
        "Grüße aus Zürich — 日本語のテスト 🚀 👨\xE2\x80\x8D👩\xE2\x80\x8D👧",
        "def f(x):\n    return x ** 2  # comment\n",
        "\xC2\xA0non-breaking\xE3\x80\x80ideographic space",
        "a\0b", /* NUL */
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        size_t l = i == 8 ? 3 : strlen(texts[i]);
        int32_t *ids;
        size_t n;
        REQUIRE(model_tok_encode(t, texts[i], l, 0, &ids, &n) == 0);
        CHECK(n > 0);
        char *text;
        size_t len;
        CHECK(model_tok_decode(t, ids, n, 0, &text, &len) == 0);
        CHECK_MSG(len == l && !memcmp(text, texts[i], l), "round trip of \"%s\" gave \"%s\"", texts[i], text);
        free(text);
        free(ids);
    }
    model_tok_free(t);
}

/* The word cache of a long text starts its hash from a random seed per call: a list of words
 * made offline to share one slot under a fixed start (an audit's: 64K such words, one 576 KB
 * request, 2 s of probing against 0.07) spreads out, and the cache still gives the ids each word
 * gives alone. */
TEST(tok_llama3_word_cache_seeded)
{
    char err[256];
    model_tok *t = model_tok_load(LLAMA3_JSON, NULL, err, sizeof err);
    CHECK_MSG(t, "%s", err);
    REQUIRE(t);
    enum { N = 512, W = 9, SLOTS = 4096 }; /* " " + 8 letters: one piece each; the first table */
    static char words[N][W];
    uint64_t x = 88172645463325252ull;
    const uint64_t target = (model_tok_hash(" aaaaaaaa", W) | 1) & (SLOTS - 1);
    for (int k = 0;
         k < N;) { /* words colliding under the fixed start, found as an attacker would */
        char w[W] = {' '};
        for (int i = 1; i < W; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[i] = (char)('a' + x % 26);
        }
        if (((model_tok_hash(w, W) | 1) & (SLOTS - 1)) == target) memcpy(words[k++], w, W);
    }
    uint64_t s1 = model_tok_hash_seed(), s2 = model_tok_hash_seed();
    CHECK(s1 != s2);
    static int bucket[SLOTS];
    int most = 0;
    for (int k = 0; k < N; k++) {
        int b = (int)((model_tok_hash_from(s1, words[k], W) | 1) & (SLOTS - 1));
        if (++bucket[b] > most) most = bucket[b];
    }
    CHECK_MSG(most <= 8, "%d of the words share one slot under a random start", most);
    /* the text (words twice: the second time from the cache) against each word alone */
    char *text = malloc(2 * N * W);
    REQUIRE(text);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < N; k++) memcpy(text + (r * N + k) * W, words[k], W);
    int32_t *all = NULL, *one = NULL;
    size_t n_all = 0, n_one = 0, at = 0;
    REQUIRE(model_tok_encode(t, text, 2 * N * W, 0, &all, &n_all) == 0);
    int same = 1;
    for (int r = 0; r < 2 && same; r++)
        for (int k = 0; k < N && same; k++) {
            REQUIRE(model_tok_encode(t, words[k], W, 0, &one, &n_one) == 0);
            same = at + n_one <= n_all && !memcmp(all + at, one, n_one * sizeof *one);
            at += n_one;
            free(one);
        }
    CHECK_MSG(same && at == n_all, "the cached ids differ from each word's own at id %zu", at);
    free(all);
    free(text);
    model_tok_free(t);
}
