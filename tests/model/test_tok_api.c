/* Tokenizer API behaviour: load errors name their cause, tokenizer_config.json rules, added-token
 * flags (lstrip/rstrip/single_word as tokenizers' AddedVocabulary::find_matches applies them),
 * argument edges, and the streaming decoder's holding rules. */
#include "model/tok/tokenizer.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TT_FFFD "\xEF\xBF\xBD"

static const char *write_tmp(const char *name, const char *content)
{
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/%s", t_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(content, f);
        fclose(f);
    }
    return p;
}

/* A small BPE: vocab a, b, ab, space, [, ], w, x and the given extras. */
static char *mini(const char *added, const char *extra_model, const char *pipeline)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"added_tokens\":[%s],%s"
             "\"model\":{\"type\":\"BPE\",%s\"vocab\":{\"<unk>\":0,\"a\":1,\"b\":2,\"ab\":3,\" \":4,"
             "\"[\":5,\"]\":6,\"w\":7,\"x\":8,\"<x>\":9,\"[w]\":10},\"merges\":[\"a b\"]}}",
             added, pipeline, extra_model);
    return buf;
}

static void expect_load_error(const char *json, const char *needle)
{
    char err[512];
    model_tok *t = model_tok_load(write_tmp("tokenizer.json", json), NULL, err, sizeof err);
    CHECK_MSG(!t && strstr(err, needle), "expected a load error containing \"%s\", got \"%s\"", needle,
              t ? "(loaded)" : err);
    model_tok_free(t);
}

TEST(tok_load_errors)
{
    char err[512];
    CHECK(!model_tok_load("/nonexistent/tokenizer.json", NULL, err, sizeof err));
    CHECK(strstr(err, "/nonexistent/tokenizer.json") != NULL);
    CHECK(!model_tok_load_dir("/nonexistent", err, sizeof err));
    expect_load_error("{\"model\": [1, 2", "tokenizer.json");
    expect_load_error("[]", "not a JSON object");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "model type WordPiece is not supported");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}", "merge 0");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a  a\"]}}", "merge 0");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":4194304},\"merges\":[]}}", "id is not an integer");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", "id is not an integer");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"?\"}}", "unk_token");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}}", "dropout");
    expect_load_error(mini("", "", "\"normalizer\":{\"type\":\"BertNormalizer\"},"), "normalizer type BertNormalizer");
    expect_load_error(mini("", "", "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},"), "regex");
    expect_load_error(mini("", "", "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"},"), "behavior");
    expect_load_error(mini("", "", "\"decoder\":{\"type\":\"WordPiece\"},"), "decoder type WordPiece");
    expect_load_error(mini("", "", "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}},"), "no ids");
    expect_load_error(mini("{\"id\":99,\"content\":\"\",\"special\":true}", "", "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"Z\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"Z\":{\"ids\":[100]}}},"), "outside the vocabulary");
    /* a token over the length limit (4096 bytes) */
    static char big[6000];
    char *o = big + sprintf(big, "{\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{\"");
    memset(o, 'z', 5000);
    strcpy(o + 5000, "\":0}}}");
    expect_load_error(big, "limit");
}

TEST(tok_minimal_bpe)
{
    char err[512];
    model_tok *t = model_tok_load(write_tmp("tokenizer.json", mini("", "\"unk_token\":\"<unk>\",\"fuse_unk\":true,", "")), NULL, err, sizeof err);
    REQUIRE(t);
    tt_check_encode(t, "abab", 4, 1, (const int32_t[]){3, 3}, 2, "merges");
    /* unknown characters: one fused <unk> per run (fuse_unk) */
    tt_check_encode(t, "abzzyab", 7, 0, (const int32_t[]){3, 0, 3}, 3, "fused unk");
    char *s;
    size_t l;
    /* no decoder: tokens joined with spaces (tokenizers' default) */
    CHECK(model_tok_decode(t, (const int32_t[]){3, 1, 2}, 3, 0, &s, &l) == 0);
    CHECK_STR(s, "ab a b");
    free(s);
    /* ids without a token are skipped */
    CHECK(model_tok_decode(t, (const int32_t[]){-5, 3, 1000000, 11}, 4, 0, &s, &l) == 0);
    CHECK_STR(s, "ab");
    free(s);
    CHECK_EQ(model_tok_id(t, "ab"), 3);
    CHECK_EQ(model_tok_id(t, "zz"), -1);
    CHECK(model_tok_piece(t, 11) == NULL && model_tok_piece(t, -1) == NULL);
    int32_t *ids;
    size_t n;
    CHECK(model_tok_encode(t, NULL, 0, 0, &ids, &n) == 0 && n == 0 && ids == NULL);
    CHECK(model_tok_encode(t, "a", (size_t)1 << 31, 0, &ids, &n) == -1); /* over the input limit */
    CHECK(model_tok_encode(NULL, "a", 1, 0, &ids, &n) == -1);
    model_tok_free(t);
}

TEST(tok_added_token_flags)
{
    char err[512];
    /* <x>: lstrip + rstrip; [w]: single_word; both matched on the raw text (normalized=false) */
    const char *added =
        "{\"id\":9,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true},"
        "{\"id\":10,\"content\":\"[w]\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}";
    model_tok *t = model_tok_load(write_tmp("tokenizer.json", mini(added, "", "")), NULL, err, sizeof err);
    REQUIRE(t);
    /* the spaces around <x> belong to the match */
    tt_check_encode(t, "a  <x>  b", 9, 0, (const int32_t[]){1, 9, 2}, 3, "lstrip/rstrip");
    /* single_word: only where no word character touches it */
    tt_check_encode(t, "a [w] b", 7, 0, (const int32_t[]){1, 4, 10, 4, 2}, 5, "single word");
    tt_check_encode(t, "a[w] b", 6, 0, (const int32_t[]){1, 5, 7, 6, 4, 2}, 6, "not single word");
    CHECK(model_tok_is_special(t, 9) && !model_tok_is_special(t, 10));
    char *s;
    size_t l;
    CHECK(model_tok_decode(t, (const int32_t[]){1, 9, 10}, 3, 1, &s, &l) == 0);
    CHECK_STR(s, "a [w]"); /* special <x> skipped, non-special [w] kept */
    free(s);
    model_tok_free(t);
}

TEST(tok_config_rules)
{
    char err[512], dir[512];
    snprintf(dir, sizeof dir, "%s/m", t_tmpdir());
    REQUIRE(mkdir(dir, 0700) == 0);
    char tj[600], cfg[600], jt[600];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jt, sizeof jt, "%s/chat_template.jinja", dir);
    char real[4096];
    REQUIRE(realpath("models/stories260K/tokenizer.json", real));
    REQUIRE(symlink(real, tj) == 0);
    static const struct {
        const char *config;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        /* LlamaTokenizer: the flags rebuild the template (here: eos only) */
        {"{\"tokenizer_class\":\"LlamaTokenizer\",\"add_bos_token\":false,\"add_eos_token\":true,"
         "\"bos_token\":\"<s>\",\"eos_token\":{\"content\":\"</s>\",\"__type\":\"AddedToken\"}}",
         {403, 407, 261, 378, 2}, 5},
        /* LlamaTokenizer without flags: class defaults (bos yes, eos no) */
        {"{\"tokenizer_class\":\"LlamaTokenizer\",\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
         {1, 403, 407, 261, 378}, 5},
        /* another class without flags: the tokenizer.json post-processor stays */
        {"{\"tokenizer_class\":\"PreTrainedTokenizerFast\",\"eos_token\":\"</s>\"}", {1, 403, 407, 261, 378}, 5},
        /* another class naming one flag: the other counts as false */
        {"{\"tokenizer_class\":\"PreTrainedTokenizerFast\",\"add_eos_token\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
         {403, 407, 261, 378, 2}, 4 + 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(cfg, "w");
        REQUIRE(f);
        fputs(cases[i].config, f);
        fclose(f);
        model_tok *t = model_tok_load_dir(dir, err, sizeof err);
        REQUIRE(t);
        tt_check_encode(t, "Once upon a time", 16, 1, cases[i].ids, cases[i].n, cases[i].config);
        CHECK(strlen(model_tok_special_note(t)) > 0);
        model_tok_free(t);
    }
    /* chat templates: the list form's "default", and chat_template.jinja over the config */
    FILE *f = fopen(cfg, "w");
    fputs("{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},"
          "{\"name\":\"default\",\"template\":\"{{ bos_token }}D\"}]}", f);
    fclose(f);
    model_tok *t = model_tok_load_dir(dir, err, sizeof err);
    REQUIRE(t);
    CHECK_STR(model_tok_chat_template(t), "{{ bos_token }}D");
    CHECK_STR(model_tok_bos_token(t), "<s>");
    CHECK_STR(model_tok_eos_token(t), "</s>");
    CHECK_EQ(model_tok_bos_id(t), 1);
    CHECK_EQ(model_tok_eos_id(t), 2);
    model_tok_free(t);
    f = fopen(jt, "w");
    fputs("J", f);
    fclose(f);
    t = model_tok_load_dir(dir, err, sizeof err);
    REQUIRE(t);
    CHECK_STR(model_tok_chat_template(t), "J");
    model_tok_free(t);
    /* no config: no strings, the file's post-processor */
    t = model_tok_load(tj, NULL, err, sizeof err);
    REQUIRE(t);
    CHECK(!model_tok_bos_token(t) && !model_tok_chat_template(t) && model_tok_bos_id(t) == -1);
    tt_check_encode(t, "Once upon a time", 16, 1, (const int32_t[]){1, 403, 407, 261, 378}, 5, "no config");
    model_tok_free(t);
}

static void stream_expect(model_tok_stream *s, int32_t id, const char *want)
{
    size_t l;
    const char *p = model_tok_stream_push(s, id, &l);
    CHECK_MSG(p && l == strlen(want) && !memcmp(p, want, l), "push %d: got \"%s\" expected \"%s\"", id,
              p ? p : "(null)", want);
}

TEST(tok_stream_holding)
{
    char err[512];
    model_tok *t = model_tok_load("models/tiny-llama2-mha/tokenizer.json", NULL, err, sizeof err);
    REQUIRE(t);
    /* Llama-2 "😀.": ▁ <0xF0> <0x9F> <0x98> <0x80> . — the leading space is the decoder's Strip;
     * a byte-fallback run is final only once a non-byte token closes it, because tokenizers turns
     * a run with any invalid byte into one U+FFFD per byte. */
    model_tok_stream *s = model_tok_stream_new(t, 0);
    stream_expect(s, 29871, "");
    stream_expect(s, 243, "");
    stream_expect(s, 162, "");
    stream_expect(s, 155, "");
    stream_expect(s, 131, "");
    stream_expect(s, 29889, "\xF0\x9F\x98\x80.");
    size_t l;
    CHECK(model_tok_stream_flush(s, &l) && l == 0);
    model_tok_stream_free(s);
    /* an invalid run: one U+FFFD per byte, also for valid characters inside it */
    char *out;
    CHECK(model_tok_decode(t, (const int32_t[]){0xE6 + 3, 0x97 + 3, 0xA5 + 3, 0xFF + 3}, 4, 0, &out, &l) == 0);
    CHECK_STR(out, TT_FFFD TT_FFFD TT_FFFD TT_FFFD);
    free(out);
    CHECK(model_tok_decode(t, (const int32_t[]){0xE6 + 3, 0x97 + 3, 0xA5 + 3, 29889}, 4, 0, &out, &l) == 0);
    CHECK_STR(out, "\xE6\x97\xA5.");
    free(out);
    /* an unfinished run at the end: flushed as U+FFFD per byte */
    s = model_tok_stream_new(t, 0);
    stream_expect(s, 15043, "Hello");
    stream_expect(s, 243, "");
    CHECK_STR(model_tok_stream_flush(s, &l), TT_FFFD);
    model_tok_stream_free(s);
    /* skipped special tokens do not close a run (they are gone before the decoder runs) */
    CHECK(model_tok_decode(t, (const int32_t[]){0xE6 + 3, 2, 0x97 + 3, 0xA5 + 3}, 4, 1, &out, &l) == 0);
    CHECK_STR(out, "\xE6\x97\xA5");
    free(out);
    CHECK(model_tok_decode(t, (const int32_t[]){0xE6 + 3, 2, 0x97 + 3, 0xA5 + 3}, 4, 0, &out, &l) == 0);
    CHECK_STR(out, TT_FFFD "</s>" TT_FFFD TT_FFFD);
    free(out);
    model_tok_free(t);

    /* byte-level (GPT-2): bytes are held only until their character is complete */
    t = model_tok_load("build/data/tokenizer/gpt2/tokenizer.json", NULL, err, sizeof err);
    REQUIRE(t);
    s = model_tok_stream_new(t, 0);
    stream_expect(s, 47249, ""); /* F0 9F */
    stream_expect(s, 222, "\xF0\x9F\x98\x80");
    model_tok_stream_free(s);
    /* invalid bytes: one U+FFFD per maximal invalid subsequence (from_utf8_lossy) */
    int32_t e6 = model_tok_id(t, "\xC3\xA6"), x97 = model_tok_id(t, "\xC4\xB9"), a5 = model_tok_id(t, "\xC2\xA5"),
            ff = model_tok_id(t, "\xC3\xBF");
    REQUIRE(e6 >= 0 && x97 >= 0 && a5 >= 0 && ff >= 0);
    CHECK(model_tok_decode(t, (const int32_t[]){e6, x97, a5, ff}, 4, 0, &out, &l) == 0);
    CHECK_STR(out, "\xE6\x97\xA5" TT_FFFD);
    free(out);
    s = model_tok_stream_new(t, 0);
    stream_expect(s, e6, "");
    stream_expect(s, e6, TT_FFFD);
    CHECK_STR(model_tok_stream_flush(s, &l), TT_FFFD);
    model_tok_stream_free(s);
    model_tok_free(t);
}

/* transformers' non-legacy Llama conversion: no normalizer, a Metaspace pre-tokenizer with
 * prepend_scheme "first". On text that does not start with a space it must encode exactly like
 * the legacy Prepend+Replace normalizers (both put one ▁ in front and turn spaces into ▁); after
 * a special token it must not prepend (the piece does not start the text). */
TEST(tok_metaspace_first_matches_legacy)
{
    char err[512];
    json_error_t je;
    json_t *j = json_load_file("models/tiny-llama2-mha/tokenizer.json", 0, &je);
    REQUIRE(j);
    json_object_set_new(j, "normalizer", json_null());
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", "\xE2\x96\x81",
                                  "prepend_scheme", "first", "split", 0));
    char path[512];
    snprintf(path, sizeof path, "%s/metaspace.json", t_tmpdir());
    REQUIRE(json_dump_file(j, path, 0) == 0);
    json_decref(j);
    model_tok *meta = model_tok_load(path, NULL, err, sizeof err);
    model_tok *legacy = model_tok_load("models/tiny-llama2-mha/tokenizer.json", NULL, err, sizeof err);
    REQUIRE(meta && legacy);
    json_t *g = json_load_file("tests/data/golden/tokenizer/llama2.json", JSON_ALLOW_NUL, &je);
    REQUIRE(g);
    json_t *c;
    size_t i, compared = 0;
    json_array_foreach(json_object_get(g, "cases"), i, c)
    {
        json_t *jt = json_object_get(c, "text");
        const char *s = json_string_value(jt);
        size_t n = json_string_length(jt);
        if (n == 0 || s[0] == ' ' || strstr(s, "<s>")) continue;
        int32_t *a, *b;
        size_t na, nb;
        REQUIRE(model_tok_encode(meta, s, n, 0, &a, &na) == 0 && model_tok_encode(legacy, s, n, 0, &b, &nb) == 0);
        CHECK_MSG(na == nb && !memcmp(a, b, na * sizeof *a), "Metaspace vs legacy on \"%s\"", s);
        free(a);
        free(b);
        compared++;
    }
    CHECK(compared >= 10);
    tt_check_encode(meta, "<s>Hello", 8, 0, (const int32_t[]){1, 10994}, 2, "no ▁ after a special token");
    tt_check_encode(legacy, "Hello", 5, 0, (const int32_t[]){15043}, 1, "legacy");
    json_decref(g);
    model_tok_free(meta);
    model_tok_free(legacy);
}

typedef struct {
    const model_tok *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} enc_job;

static void *enc_thread(void *arg)
{
    enc_job *j = arg;
    for (int r = 0; r < 20; r++) {
        free(j->ids);
        if (model_tok_encode(j->t, j->text, j->len, 1, &j->ids, &j->n)) j->n = (size_t)-1;
    }
    return NULL;
}

/* One loaded tokenizer, four threads encoding at once: same ids as one thread alone. */
TEST(tok_threads_share_tokenizer)
{
    char err[512];
    model_tok *t = model_tok_load("build/data/tokenizer/gpt2/tokenizer.json", NULL, err, sizeof err);
    REQUIRE(t);
    size_t len;
    char *text = t_read_file("tests/data/tokenizer/tinyllama_basic_inputs.json", &len);
    REQUIRE(text);
    int32_t *ref;
    size_t nref;
    REQUIRE(model_tok_encode(t, text, len, 1, &ref, &nref) == 0);
    enc_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (enc_job){t, text, len, NULL, 0};
        REQUIRE(pthread_create(&th[i], NULL, enc_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].n == nref && !memcmp(jobs[i].ids, ref, nref * sizeof *ref));
        free(jobs[i].ids);
    }
    free(ref);
    free(text);
    model_tok_free(t);
}

/* Normalizers on a small vocabulary; expected strings from the Unicode definitions (NFC composes
 * e + U+0301 to U+00E9, NFKC maps the ligature U+FB01 to "fi", U+0130 lowercases to "i" + U+0307). */
TEST(tok_normalizers)
{
    char err[512];
    char json[2048];
    static const struct {
        const char *norm;
        const char *text;
        int32_t ids[4];
        size_t n;
    } cases[] = {
        {"null", "e\xCC\x81", {2, 3}, 2},
        {"{\"type\":\"NFC\"}", "e\xCC\x81", {1}, 1},
        {"{\"type\":\"NFD\"}", "\xC3\xA9", {2, 3}, 2},
        {"{\"type\":\"NFKC\"}", "\xEF\xAC\x81", {4, 5}, 2},
        {"{\"type\":\"Lowercase\"}", "\xC4\xB0" "E", {5, 6, 2}, 3},
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true},"
         "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"content\":\"f\"}]}",
         " \t e \n e\xE3\x80\x80", {2, 4, 2}, 3},
        {"{\"type\":\"Prepend\",\"prepend\":\"f\"}", "i", {4, 5}, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(json, sizeof json,
                 "{\"normalizer\":%s,\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{\"\xC3\xA9\":1,"
                 "\"e\":2,\"\xCC\x81\":3,\"f\":4,\"i\":5,\"\xCC\x87\":6}}}",
                 cases[i].norm);
        model_tok *t = model_tok_load(write_tmp("tokenizer.json", json), NULL, err, sizeof err);
        REQUIRE(t);
        tt_check_encode(t, cases[i].text, strlen(cases[i].text), 0, cases[i].ids, cases[i].n, cases[i].norm);
        model_tok_free(t);
    }
}

/* Split delimiter behaviors on the example of tokenizers' documentation (SplitDelimiterBehavior):
 * "the-final--countdown" split on "-". With ignore_merges, a piece that is a vocabulary entry
 * becomes one id, so the ids show where the pieces end. */
TEST(tok_split_behaviors)
{
    char err[512], json[2048];
    static const char *vocab =
        "\"t\":0,\"h\":1,\"e\":2,\"f\":3,\"i\":4,\"n\":5,\"a\":6,\"l\":7,\"c\":8,\"o\":9,\"u\":10,"
        "\"w\":11,\"d\":12,\"-\":13,\"the\":14,\"final\":15,\"countdown\":16,\"the-\":17,\"final-\":18,"
        "\"-final\":19,\"-countdown\":20,\"--\":21";
    static const struct {
        const char *behavior;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        {"Removed", {14, 15, 16}, 3},
        {"Isolated", {14, 13, 15, 13, 13, 16}, 6},
        {"MergedWithPrevious", {17, 18, 13, 16}, 4},
        {"MergedWithNext", {14, 19, 13, 20}, 4},
        {"Contiguous", {14, 13, 15, 21, 16}, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(json, sizeof json,
                 "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\","
                 "\"invert\":false},\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"merges\":[],\"vocab\":{%s}}}",
                 cases[i].behavior, vocab);
        model_tok *t = model_tok_load(write_tmp("tokenizer.json", json), NULL, err, sizeof err);
        REQUIRE(t);
        tt_check_encode(t, "the-final--countdown", 20, 0, cases[i].ids, cases[i].n, cases[i].behavior);
        model_tok_free(t);
    }
}

/* clean_up_tokenization_spaces (tokenizer_config.json): transformers' decode removes the space
 * before . ? ! , and English contractions, after the decoder chain. Streamed output must match,
 * whatever token boundaries split the patterns. */
TEST(tok_clean_up_tokenization_spaces)
{
    char err[512], dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/m", t_tmpdir());
    REQUIRE(mkdir(dir, 0700) == 0);
    char real[4096];
    REQUIRE(realpath("build/data/tokenizer/gpt2/tokenizer.json", real));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    REQUIRE(symlink(real, path) == 0);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("{\"clean_up_tokenization_spaces\": true, \"eos_token\": \"<|endoftext|>\"}", f);
    fclose(f);
    model_tok *t = model_tok_load_dir(dir, err, sizeof err);
    REQUIRE(t);
    const char *in = "Hello , world ! I do n't know . It 's ' quoted ' , you 're sure ?";
    int32_t *ids;
    size_t n, l;
    REQUIRE(model_tok_encode(t, in, strlen(in), 0, &ids, &n) == 0);
    char *out;
    REQUIRE(model_tok_decode(t, ids, n, 0, &out, &l) == 0);
    /* pass order matters: " ," goes before " ' ", so "quoted ' ," keeps its space */
    CHECK_STR(out, "Hello, world! I don't know. It's'quoted ', you're sure?");
    free(out);
    free(ids);
    /* random sequences of the pieces the patterns are made of */
    static const char *pieces[] = {"\xC4\xA0", ".", "?", "!", ",", "'", "n", "'t", "\xC4\xA0n", "t", "s",
                                   "m", "ve", "re", "\xC4\xA0'", "a"};
    int32_t pid[16];
    for (int i = 0; i < 16; i++) REQUIRE((pid[i] = model_tok_id(t, pieces[i])) >= 0);
    uint64_t r = 0x2545F4914F6CDD1Dull;
    for (int it = 0; it < 500; it++) {
        int32_t seq[24];
        size_t m = 1 + it % 24;
        for (size_t i = 0; i < m; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            seq[i] = pid[r % 16];
        }
        REQUIRE(model_tok_decode(t, seq, m, 0, &out, &l) == 0);
        model_tok_stream *s = model_tok_stream_new(t, 0);
        char acc[256];
        size_t al = 0, pl;
        for (size_t i = 0; i <= m; i++) {
            const char *p = i < m ? model_tok_stream_push(s, seq[i], &pl) : model_tok_stream_flush(s, &pl);
            REQUIRE(p && al + pl < sizeof acc);
            memcpy(acc + al, p, pl);
            al += pl;
        }
        acc[al] = 0;
        CHECK_STR(acc, out);
        model_tok_stream_free(s);
        free(out);
    }
    model_tok_free(t);
}
