/* The GBNF engine (model/grammar): llama.cpp's example grammars compile and judge sentences as
 * their notation means; bad grammars are refused with a message; token masks equal a brute-force
 * check of every token (stories260K, Llama-2 and Llama-3 vocabularies); random walks through the
 * json_object grammar's masks always produce text that jansson (not our code) parses as an
 * object; the bytes the grammar sees equal what the streaming detokenizer emits. */
#include "model/gen/gen.h"
#include "model/grammar/grammar.h"
#include "model/tok/tokenizer.h"
#include "model/sample/rng.h"
#include "tests/model/gram_test_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <jansson.h>

static model_grammar *compile(const char *text)
{
    char err[256] = "";
    model_grammar *g = model_grammar_new(text, strlen(text), NULL, err, sizeof err);
    if (!g) t_fail(__FILE__, __LINE__, "compile failed: %s", err);
    return g;
}

/* 1 when text is a complete sentence of g. */
static int accepts(model_grammar *g, const model_gvocab *v, const char *text)
{
    model_gmatch *m = model_gmatch_new(g, v);
    if (!m) return -1;
    int ok = model_gmatch_accept_bytes(m, text, strlen(text)) == 0 && model_gmatch_can_end(m);
    model_gmatch_free(m);
    return ok;
}

TEST(grammar_llamacpp_files)
{
    static const struct {
        const char *file;
        const char *yes[4];
        const char *no[4];
    } cases[] = {
        {"json", {"{\"a\": [1, 2.5e3, \"x\\u00e9\"], \"b\": {}}", "{}", "{\"k\":null}\n", NULL},
         {"[]", "{\"a\":}", "{\"a\" 1}", "{'a': 1}"}},
        {"json_arr", {"[\n1,\n{\"a\": true}]", "[\n]", NULL, NULL}, {"[1]", "[\n1,]", NULL, NULL}},
        {"chess", {"1. e4 e5\n2. Nf3 Nc6\n", "1. e4 e5\n2. O-O O-O-O\n", NULL, NULL},
         {"1. e4 e5\n", "1. e9 e5\n2. a3 a4\n", NULL, NULL}},
        {"list", {"- one\n- two\n", "- x\n", NULL, NULL}, {"- \n", "one\n", "- a\u2028b\n", NULL}},
        {"japanese", {"こんにちは", "カタカナ ひらがな", "日本語、テスト", NULL}, {"hello", "", NULL, NULL}},
        {"english", {"Hello, world!", "a b\tc", NULL, NULL}, {"", "tab\t", "caf\u00e9", NULL}},
        {"arithmetic", {"a+b=c\n", "(x *2)= 4\n", NULL, NULL}, {"a+b\n", "=1\n", NULL, NULL}},
        {"c", {"int main(){return 0;}", "float f(int x){x = x+1;}", "", NULL},
         {"int main(){return 0}", "main(){}", NULL, NULL}},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "tests/data/grammars/%s.gbnf", cases[i].file);
        size_t n;
        char *text = t_read_file(path, &n);
        CHECK_MSG(text, "cannot read %s", path);
        if (!text) continue;
        char err[256] = "";
        model_grammar *g = model_grammar_new(text, n, NULL, err, sizeof err);
        CHECK_MSG(g, "%s: %s", path, err);
        for (int k = 0; g && k < 4 && cases[i].yes[k]; k++)
            CHECK_MSG(accepts(g, v, cases[i].yes[k]) == 1, "%s should accept %s", cases[i].file, cases[i].yes[k]);
        for (int k = 0; g && k < 4 && cases[i].no[k]; k++)
            CHECK_MSG(accepts(g, v, cases[i].no[k]) == 0, "%s should refuse %s", cases[i].file, cases[i].no[k]);
        model_grammar_unref(g);
        free(text);
    }
    model_gvocab_free(v);
}

TEST(grammar_errors)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"root ::= root \"a\" | \"b\"\n", "left recursion"},
        {"root ::= x \"a\"\nx ::= y? root\ny ::= \"b\"\n", "left recursion"},
        {"root ::= \"a\"* \"\"* \"b\"\n", NULL}, /* an empty item repeated is empty: fine */
        {"root ::= (\"\")* \"b\"\n", "left recursion"}, /* a nullable group repeated loops */
        {"root ::= \"a\" root\n", "never finish"},
        {"root ::= [^\\x00-\\U0010FFFF]\n", "never finish"},
        {"root ::= undefined-rule\n", "undefined rule 'undefined-rule'"},
        {"main ::= \"a\"\n", "no rule named 'root'"},
        {"root ::= \"abc\n", "unterminated string"},
        {"root ::= [abc\n", "unterminated character class"},
        {"root ::= ( \"a\" \n", "expected ')'"},
        {"root ::= \"a\"{3,1}\n", "n below m"},
        {"root ::= \"a\"{5000}\n", "repetition count"},
        {"root ::= * \"a\"\n", "nothing before it"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        {"root ::= <|eot_id|>\n", "token references"},
        {"root \"a\"\n", "expected '::='"},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= \"\\xZZ\"\n", "hex digits"},
        {"root ::= \"a\" ) \"b\"\n", "unexpected ')'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        model_grammar *g = model_grammar_new(cases[i].text, strlen(cases[i].text), NULL, err, sizeof err);
        if (!cases[i].want) {
            CHECK_MSG(g, "%s: %s", cases[i].text, err);
        } else {
            CHECK_MSG(!g && strstr(err, cases[i].want), "%s: got '%s', want '%s'", cases[i].text, err, cases[i].want);
        }
        model_grammar_unref(g);
    }
    /* A nested-repetition bomb is bounded, not a hang or an allocation of gigabytes. */
    char bomb[1200];
    snprintf(bomb, sizeof bomb, "root ::= \"%01100d\"{1000}\n", 0);
    char err[256] = "";
    model_grammar *g = model_grammar_new(bomb, strlen(bomb), NULL, err, sizeof err);
    CHECK_MSG(!g && strstr(err, "elements"), "bomb: %s", err);
    model_grammar_unref(g);
}

TEST(grammar_repetition_and_utf8)
{
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    model_grammar *g = compile("root ::= \"x\"{2,4} [é-ë]+ \"-\"?\n");
    REQUIRE(g);
    CHECK(accepts(g, v, "xxé") == 1);
    CHECK(accepts(g, v, "xxxxëé-") == 1);
    CHECK(accepts(g, v, "xé") == 0);
    CHECK(accepts(g, v, "xxxxxé") == 0);
    CHECK(accepts(g, v, "xxe") == 0);
    /* byte by byte through a two-byte character: the first byte is a viable prefix, the
     * sentence is incomplete until the second arrives */
    model_gmatch *m = model_gmatch_new(g, v);
    REQUIRE(m);
    CHECK(model_gmatch_accept_bytes(m, "xx\xC3", 3) == 0);
    CHECK(!model_gmatch_can_end(m));
    CHECK(model_gmatch_accept_bytes(m, "\xA0", 1) == -1); /* U+00E0 'à' is outside [é-ë] */
    CHECK(model_gmatch_accept_bytes(m, "\xA9", 1) == 0);  /* U+00E9 'é' */
    CHECK(model_gmatch_can_end(m));
    CHECK(!model_gmatch_done(m));
    CHECK(model_gmatch_accept_bytes(m, "-", 1) == 0);
    CHECK(model_gmatch_done(m));
    /* the mask over single bytes after "xx\xC3": only continuation bytes of é..ë */
    model_gmatch_free(m);
    m = model_gmatch_new(g, v);
    REQUIRE(m);
    CHECK(model_gmatch_accept_bytes(m, "xx\xC3", 3) == 0);
    const uint64_t *mask;
    int n = model_gmatch_mask(m, &mask, NULL);
    CHECK_EQ(n, 3); /* 0xA9 0xAA 0xAB */
    CHECK(mask[0xA9 >> 6] >> (0xA9 & 63) & 1);
    CHECK(!(mask[0xA8 >> 6] >> (0xA8 & 63) & 1));
    model_gmatch_free(m);
    /* a refused byte leaves the state as it was */
    m = model_gmatch_new(g, v);
    CHECK(model_gmatch_accept_bytes(m, "xy", 2) == -1);
    CHECK(model_gmatch_accept_bytes(m, "xx", 2) == 0);
    model_gmatch_free(m);
    model_grammar_unref(g);
    model_gvocab_free(v);
}

/* Rule names: a written name never finds a rule made for a group or a repetition (those were
 * named "parent-K" and looked up like written ones: `root-1` below was the group's rule, and the
 * grammar was refused as defining it twice); a grammar of many written rules compiles through
 * the names' index (was a scan of every name for each, quadratic); a grammar whose start passes
 * the matcher's bound says so (was "out of memory"). */
TEST(grammar_rule_names)
{
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    model_grammar *g = compile("root ::= (\"a\") root-1 x{2}\nroot-1 ::= \"b\"\nx ::= \"c\"\n");
    REQUIRE(g);
    CHECK(accepts(g, v, "abcc") == 1);
    CHECK(accepts(g, v, "aacc") == 0);
    CHECK(accepts(g, v, "ab") == 0);
    model_grammar_unref(g);
    /* a chain of 20,000 written rules, each referring to the next, defined in reverse order */
    enum { N = 20000 };
    size_t cap = (size_t)N * 40 + 64, o = 0;
    char *text = malloc(cap);
    REQUIRE(text);
    o += (size_t)snprintf(text + o, cap - o, "root ::= r0\n");
    for (int i = N - 1; i >= 0; i--)
        o += i == N - 1 ? (size_t)snprintf(text + o, cap - o, "r%d ::= \"z\"\n", i)
                        : (size_t)snprintf(text + o, cap - o, "r%d ::= \"y\" r%d\n", i, i + 1);
    g = compile(text);
    free(text);
    REQUIRE(g);
    char *sent = malloc(N + 1);
    REQUIRE(sent);
    memset(sent, 'y', N - 1);
    sent[N - 1] = 'z';
    sent[N] = 0;
    CHECK(accepts(g, v, sent) == 1);
    sent[N - 1] = 'y';
    CHECK(accepts(g, v, sent) == 0);
    free(sent);
    model_grammar_unref(g);
    /* nested repetition counts: compiles (under the element bound), its start passes the
     * matcher's bound of expansion steps */
    char big[512];
    o = (size_t)snprintf(big, sizeof big, "root ::= ");
    for (int i = 0; i < 29; i++) big[o++] = '(';
    o += (size_t)snprintf(big + o, sizeof big - o, "\"a\"");
    for (int i = 0; i < 29; i++) o += (size_t)snprintf(big + o, sizeof big - o, "){0,1000}");
    g = compile(big);
    REQUIRE(g);
    char why[200] = "";
    model_gmatch *m = model_gmatch_new_why(g, v, why, sizeof why);
    CHECK(!m);
    CHECK_MSG(strstr(why, "too much work"), "why: %s", why);
    model_gmatch_free(m);
    model_grammar_unref(g);
    model_gvocab_free(v);
}

/* Brute force: token t is allowed after prefix when a fresh matcher takes prefix then t's
 * bytes (the first token's space dropped when the vocabulary strips it). */
static void check_masks(const char *tok_path, const char *grammar, const char *path_text, int stride)
{
    char err[256];
    model_tok *tok = model_tok_load(tok_path, NULL, err, sizeof err);
    if (!tok) {
        t_fail(__FILE__, __LINE__, "%s: %s", tok_path, err);
        return;
    }
    int V = model_tok_vocab_size(tok);
    int32_t eos = model_tok_eos_id(tok);
    model_gvocab *v = model_gen_vocab_new(tok, V, &eos, eos >= 0 ? 1 : 0);
    model_grammar *g = compile(grammar);
    int strip = model_tok_strips_first_space(tok), bl = model_tok_is_byte_level(tok);
    char *buf = malloc(8192);
    if (!v || !g || !buf) goto out;
    size_t plen = strlen(path_text);
    /* positions along path_text: 0 and a few inside */
    size_t cuts[] = {0, 1, plen / 3, plen / 2, plen - 1, plen};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        model_gmatch *m = model_gmatch_new(g, v);
        if (!m) break;
        int first = cuts[c] == 0;
        CHECK(model_gmatch_accept_bytes(m, path_text, cuts[c]) == 0);
        const uint64_t *mask;
        int n = model_gmatch_mask(m, &mask, NULL), count = 0, bad = 0;
        CHECK(n >= 0);
        for (int t = 0; t < V && n >= 0; t += (t % stride == 0) ? 1 : stride) {
            size_t len = model_tok_token_bytes(tok, t, bl, buf);
            int want;
            if (t == eos) {
                want = model_gmatch_can_end(m);
            } else if (len == 0 || model_tok_is_special(tok, t)) {
                want = 0;
            } else {
                model_gmatch *b = model_gmatch_new(g, v);
                size_t skip = first && strip && buf[0] == ' ' ? 1 : 0;
                /* a first token that is only the stripped space makes no progress: refused */
                want = len > skip && model_gmatch_accept_bytes(b, path_text, cuts[c]) == 0 &&
                       model_gmatch_accept_bytes(b, buf + skip, len - skip) == 0;
                model_gmatch_free(b);
            }
            int got = (int)(mask[t >> 6] >> (t & 63) & 1);
            if (got != want && bad++ < 5)
                t_fail(__FILE__, __LINE__, "%s cut %zu token %d (%.*s): mask %d, brute force %d", tok_path,
                       cuts[c], t, (int)len, buf, got, want);
            count += got;
        }
        if (stride == 1) CHECK_EQ(count, n);
        /* the same state again: from the cache, equal */
        int cached = 0;
        const uint64_t *again;
        int n2 = model_gmatch_mask(m, &again, &cached);
        CHECK_EQ(n2, n);
        if (!first) CHECK(cached);
        model_gmatch_free(m);
    }
out:
    free(buf);
    model_grammar_unref(g);
    model_gvocab_free(v);
    model_tok_free(tok);
}

static const char *JSON_PATH = "{\"name\": \"caf\xC3\xA9 \\\"x\\\"\", \"n\": [1, -2.5e3, true], \"o\": {}}";

TEST(grammar_mask_stories)
{
    check_masks("models/stories260K/tokenizer.json", model_grammar_json_object(), JSON_PATH, 1);
}

TEST(grammar_mask_llama2)
{
    check_masks("models/tiny-llama2-mha/tokenizer.json", model_grammar_json_object(), JSON_PATH, 7);
}

TEST(grammar_mask_llama3)
{
    check_masks("build/data/tokenizer/llama3/tokenizer.json", model_grammar_json_object(), JSON_PATH, 31);
}

/* Random walks: pick any allowed token until the grammar is done; the text must parse. Also
 * checks that the token bytes the grammar sees are what the streaming detokenizer emits. */
TEST(grammar_json_object_walks)
{
    char err[256];
    model_tok *tok = model_tok_load("models/stories260K/tokenizer.json", NULL, err, sizeof err);
    REQUIRE(tok);
    int V = model_tok_vocab_size(tok);
    int32_t eos = model_tok_eos_id(tok);
    model_gvocab *v = model_gen_vocab_new(tok, V, &eos, eos >= 0 ? 1 : 0);
    model_grammar *g = compile(model_grammar_json_object());
    REQUIRE(v && g);
    int32_t *ids = malloc(sizeof(int32_t) * 4096);
    REQUIRE(ids);
    for (int walk = 0; walk < 40; walk++) {
        model_rng rng;
        model_rng_seed(&rng, 1234 + (uint64_t)walk);
        model_gmatch *m = model_gmatch_new(g, v);
        REQUIRE(m);
        model_tok_stream *st = model_tok_stream_new(tok, 1);
        char text[65536];
        size_t tl = 0;
        int n = 0, done = 0;
        while (n < 4000 && !done) {
            const uint64_t *mask;
            int allowed = model_gmatch_mask(m, &mask, NULL);
            if (allowed <= 0) {
                text[tl] = 0;
                t_fail(__FILE__, __LINE__, "walk %d step %d: %d allowed (%s) after '%s'", walk, n, allowed,
                       model_gmatch_error(m), text);
                return;
            }
            /* prefer closing as the walk grows, so that it ends: bias toward '}' ']' '"' */
            int pick = (int)(model_rng_next(&rng) % (uint64_t)allowed), t = -1;
            for (int w = 0, seen = 0; w < (V + 63) / 64 && t < 0; w++) {
                int c = __builtin_popcountll(mask[w]);
                if (seen + c <= pick) {
                    seen += c;
                    continue;
                }
                for (int b = 0; b < 64; b++)
                    if (mask[w] >> b & 1 && seen++ == pick) {
                        t = w * 64 + b;
                        break;
                    }
            }
            if (n > 60) { /* steer toward the end: an allowed closer when there is one */
                static const char *closers[] = {"}", "]", "\"", "0", ",", NULL};
                for (int k = 0; closers[k]; k++) {
                    int32_t id = model_tok_id(tok, closers[k]);
                    if (id >= 0 && (mask[id >> 6] >> (id & 63) & 1) && model_rng_next(&rng) % 2) {
                        t = id;
                        break;
                    }
                }
            }
            REQUIRE(t >= 0);
            CHECK(model_gmatch_accept(m, t) == 0);
            ids[n++] = t;
            size_t k;
            const char *s = model_tok_stream_push(st, t, &k);
            if (s && tl + k < sizeof text) {
                memcpy(text + tl, s, k);
                tl += k;
            }
            done = model_gmatch_done(m);
        }
        size_t k;
        const char *s = model_tok_stream_flush(st, &k);
        if (s && tl + k < sizeof text) {
            memcpy(text + tl, s, k);
            tl += k;
        }
        text[tl] = 0;
        CHECK_MSG(done, "walk %d did not finish in %d tokens", walk, n);
        json_error_t je;
        json_t *j = json_loadb(text, tl, 0, &je);
        CHECK_MSG(j && json_is_object(j), "walk %d: jansson refuses %s: %s", walk, text, je.text);
        json_decref(j);
        /* the grammar's own view: the same bytes are a sentence */
        model_gmatch *b = model_gmatch_new(g, v);
        CHECK_MSG(model_gmatch_accept_bytes(b, text, tl) == 0 && model_gmatch_can_end(b), "walk %d: %s", walk, text);
        model_gmatch_free(b);
        model_tok_stream_free(st);
        model_gmatch_free(m);
    }
    free(ids);
    model_grammar_unref(g);
    model_gvocab_free(v);
    model_tok_free(tok);
}

/* The first-space rule the grammar applies equals what the streaming detokenizer does with a
 * generation's first token (the grammar sees exactly the text the client gets). */
TEST(grammar_strip_matches_decoder)
{
    static const struct {
        const char *path, *piece;
        int strips;
    } cases[] = {
        {"models/stories260K/tokenizer.json", "\xE2\x96\x81the", 1},
        {"models/tiny-llama2-mha/tokenizer.json", "\xE2\x96\x81the", 1},
        {"build/data/tokenizer/llama3/tokenizer.json", "\xC4\xA0the", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        model_tok *tok = model_tok_load(cases[i].path, NULL, err, sizeof err);
        REQUIRE(tok);
        int32_t id = model_tok_id(tok, cases[i].piece);
        REQUIRE(id >= 0);
        model_tok_stream *st = model_tok_stream_new(tok, 1);
        size_t n1 = 0, n2 = 0;
        const char *a = model_tok_stream_push(st, id, &n1);
        char text[64];
        snprintf(text, sizeof text, "%.*s", (int)n1, a ? a : "");
        const char *b = model_tok_stream_flush(st, &n2);
        snprintf(text + strlen(text), sizeof text - strlen(text), "%.*s", (int)n2, b ? b : "");
        int stream_strips = text[0] != ' ';
        CHECK_MSG(model_tok_strips_first_space(tok) == stream_strips && stream_strips == cases[i].strips,
                  "%s: strips %d, the stream gave '%s'", cases[i].path, model_tok_strips_first_space(tok), text);
        model_tok_stream_free(st);
        model_tok_free(tok);
    }
}
