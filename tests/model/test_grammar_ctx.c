/* The grammar's precomputed per-position tables (model/grammar/gram_ctx.c) change how a mask is
 * computed, never what it is: along random walks through many grammars (json_object, JSON
 * Schemas, every llama.cpp grammar in tests/data/grammars) at three vocabularies, each state's
 * mask from the tables equals, bit for bit, the mask of the whole-trie walk (the engine's first
 * algorithm, itself checked against brute force in test_grammar.c). The two matchers use
 * separately compiled grammars, so neither reads masks the other computed. */
#include "model/gen/gen.h"
#include "model/grammar/grammar.h"
#include "model/sample/rng.h"
#include "model/tok/tokenizer.h"
#include "proto/buf.h"
#include "proto/json_schema.h"
#include "tests/test.h"
#include "tests/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0},"
    "\"email\":{\"type\":\"string\"},\"admin\":{\"type\":\"boolean\"},\"role\":{\"enum\":[\"user\",\"editor\",\"owner\"]}},"
    "\"required\":[\"name\",\"age\",\"role\"]}",
    "{\"type\":\"object\",\"properties\":{\"order\":{\"type\":\"integer\"},\"items\":{\"type\":\"array\",\"maxItems\":8,"
    "\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\"},"
    "\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"qty\",\"price\"]}},\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"order\",\"items\",\"note\"]}",
    "{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},"
    "\"required\":[\"x\",\"y\"]}},\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},"
    "\"path\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pt\"}},\"label\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}},"
    "\"required\":[\"id\",\"path\",\"label\"]}",
    "{\"type\":\"array\",\"minItems\":1,\"items\":{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"x\\u00e9\\\"\"},"
    "\"v\":{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}}}}}",
};

static const char *GBNF[] = {"arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list"};

/* walks random paths through g (text: its GBNF) comparing both masks at every state; returns the
 * number of states compared */
static int compare_walks(const char *what, const char *text, const model_gvocab *v, int walks, int steps,
                         uint64_t seed)
{
    char err[512];
    model_grammar *ga = model_grammar_new(text, strlen(text), NULL, err, sizeof err);
    model_grammar *gb = model_grammar_new(text, strlen(text), NULL, err, sizeof err);
    if (!ga || !gb) {
        t_fail(__FILE__, __LINE__, "%s: %s", what, err);
        model_grammar_unref(ga);
        model_grammar_unref(gb);
        return 0;
    }
    int V = model_gvocab_size(v), words = (V + 63) / 64, compared = 0;
    model_gprep_stats ps;
    model_grammar_prepare_stats(ga, v, &ps);
    CHECK_MSG(ps.keys > 0, "%s: no tables", what);
    long fallbacks = 0;
    for (int w = 0; w < walks; w++) {
        model_rng rng;
        model_rng_seed(&rng, seed + (uint64_t)w);
        model_gmatch *a = model_gmatch_new(ga, v), *b = model_gmatch_new(gb, v);
        CHECK(a && b);
        if (!a || !b) {
            model_gmatch_free(a);
            model_gmatch_free(b);
            break;
        }
        model_gmatch_set_tables(b, MODEL_GMATCH_TABLES_OFF);
        for (int s = 0; s < steps; s++) {
            const uint64_t *ma, *mb;
            int na = model_gmatch_mask(a, &ma, NULL), nb = model_gmatch_mask(b, &mb, NULL);
            CHECK_MSG(na == nb, "%s walk %d step %d: %d allowed with tables, %d by the trie walk", what, w, s, na, nb);
            if (na != nb || na <= 0) break;
            int diff = -1;
            for (int k = 0; k < words && diff < 0; k++)
                if (ma[k] != mb[k]) diff = k * 64 + __builtin_ctzll(ma[k] ^ mb[k]);
            CHECK_MSG(diff < 0, "%s walk %d step %d: token %d differs", what, w, s, diff);
            if (diff >= 0) break;
            compared++;
            /* a random allowed token; past half the steps, the fewest-allowed-first bias of
             * preferring short tokens is not needed: any allowed token keeps the walk valid */
            int pick = (int)(model_rng_next(&rng) % (uint64_t)na), t = -1;
            for (int k = 0, seen = 0; k < words && t < 0; k++) {
                int c = __builtin_popcountll(ma[k]);
                if (seen + c <= pick) {
                    seen += c;
                    continue;
                }
                for (uint64_t bits = ma[k]; bits; bits &= bits - 1)
                    if (seen++ == pick) {
                        t = k * 64 + __builtin_ctzll(bits);
                        break;
                    }
            }
            CHECK(t >= 0);
            if (t < 0) break;
            CHECK(model_gmatch_accept(a, t) == 0);
            CHECK(model_gmatch_accept(b, t) == 0);
            if (model_gmatch_done(a)) break;
        }
        fallbacks += model_gmatch_fallbacks(a);
        model_gmatch_free(a);
        model_gmatch_free(b);
    }
    /* every state of these grammars is covered by the tables: no whole-trie walks */
    CHECK_MSG(fallbacks == 0, "%s: %ld masks fell back to the trie walk", what, fallbacks);
    model_grammar_unref(ga);
    model_grammar_unref(gb);
    return compared;
}

static void compare_all(const char *tok_path, int walks, int steps)
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
    REQUIRE(v);
    int total = compare_walks("json_object", model_grammar_json_object(), v, walks, steps, 1);
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof SCHEMAS[0]; i++) {
        proto_buf b;
        proto_buf_init(&b);
        char what[32];
        snprintf(what, sizeof what, "schema %zu", i);
        if (proto_jschema_grammar(SCHEMAS[i], strlen(SCHEMAS[i]), &b, err, sizeof err) == 0)
            total += compare_walks(what, b.p, v, walks, steps, 100 + i);
        else
            t_fail(__FILE__, __LINE__, "%s: %s", what, err);
        proto_buf_deinit(&b);
    }
    for (size_t i = 0; i < sizeof GBNF / sizeof GBNF[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "tests/data/grammars/%s.gbnf", GBNF[i]);
        char *text = t_read_file(path, NULL);
        if (!text) {
            t_fail(__FILE__, __LINE__, "%s: cannot read", path);
            continue;
        }
        total += compare_walks(GBNF[i], text, v, walks, steps, 200 + i);
        free(text);
    }
    /* many states: the walks are not stuck at their start */
    CHECK_MSG(total > walks * 13 * 4, "%s: only %d states compared", tok_path, total);
    model_gvocab_free(v);
    model_tok_free(tok);
}

TEST(grammar_ctx_masks_stories)
{
    compare_all("models/stories260K/tokenizer.json", 40, 120);
}

TEST(grammar_ctx_masks_llama2)
{
    compare_all("models/tiny-llama2-mha/tokenizer.json", 6, 60);
}

TEST(grammar_ctx_masks_llama3)
{
    compare_all("build/data/tokenizer/llama3/tokenizer.json", 3, 40);
}

/* A grammar of more positions than the tables take (gram_ctx.c's PTAB_MAX_KEYS) gets no tables:
 * it still compiles, its masks walk the trie, and they are still right. */
TEST(grammar_ctx_too_large_falls_back)
{
    enum { ALTS = 5000 };
    proto_buf b;
    proto_buf_init(&b);
    proto_buf_add(&b, "root ::= ", 9);
    for (int i = 0; i < ALTS; i++) {
        char alt[32];
        int n = snprintf(alt, sizeof alt, "%s\"w%04d\"", i ? " | " : "", i);
        proto_buf_add(&b, alt, (size_t)n);
    }
    proto_buf_add(&b, "\n", 2);
    char err[256];
    model_tok *tok = model_tok_load("models/stories260K/tokenizer.json", NULL, err, sizeof err);
    REQUIRE(tok);
    int V = model_tok_vocab_size(tok);
    int32_t eos = model_tok_eos_id(tok);
    model_gvocab *v = model_gen_vocab_new(tok, V, &eos, eos >= 0 ? 1 : 0);
    model_grammar *g = model_grammar_new(b.p, strlen(b.p), NULL, err, sizeof err);
    REQUIRE(v && g);
    model_gprep_stats ps;
    model_grammar_prepare_stats(g, v, &ps);
    CHECK_EQ(ps.keys, 0);
    CHECK(model_grammar_prepared(g, v));
    model_gmatch *m = model_gmatch_new(g, v);
    REQUIRE(m);
    CHECK(model_gmatch_accept_bytes(m, "w12", 3) == 0);
    const uint64_t *mask;
    int n = model_gmatch_mask(m, &mask, NULL), want = 0;
    /* brute force: the tokens whose text continues "w12" into a word of the grammar */
    for (int t = 0; t < V; t++) {
        char buf[64];
        size_t len = model_tok_token_bytes(tok, t, model_tok_is_byte_level(tok), buf);
        int ok = len > 0 && len <= 2 && !model_tok_is_special(tok, t);
        for (size_t i = 0; ok && i < len; i++) ok = buf[i] >= '0' && buf[i] <= '9';
        want += ok;
        CHECK_MSG((int)(mask[t >> 6] >> (t & 63) & 1) == ok, "token %d", t);
    }
    CHECK_EQ(n, want);
    model_gmatch_free(m);
    model_grammar_unref(g);
    model_gvocab_free(v);
    model_tok_free(tok);
    proto_buf_deinit(&b);
}

/* model_gmatch_apply sets exactly the refused logits to -inf (whole words, mixed words, a last
 * partial word) and every logit past the grammar's vocabulary. */
TEST(grammar_apply_matches_mask)
{
    enum { V = 150, ROW = 200 };
    static char bytes[V];
    const char *b[V];
    size_t l[V];
    for (int i = 0; i < V; i++) {
        bytes[i] = (char)(i < 128 ? i : 'a'); /* tokens 128.. are "a" again */
        b[i] = &bytes[i];
        l[i] = 1;
    }
    model_gvocab *v = model_gvocab_new(V, b, l, NULL, NULL, 0, 0);
    char err[128];
    const char *text = "root ::= [a-z0-9]+\n";
    model_grammar *g = model_grammar_new(text, strlen(text), NULL, err, sizeof err);
    REQUIRE(v && g);
    model_gmatch *m = model_gmatch_new(g, v);
    REQUIRE(m);
    for (int step = 0; step < 2; step++) {
        float row[ROW];
        for (int i = 0; i < ROW; i++) row[i] = (float)i;
        const uint64_t *mask;
        int n = model_gmatch_mask(m, &mask, NULL);
        CHECK_EQ(model_gmatch_apply(m, row, ROW), n);
        for (int i = 0; i < ROW; i++) {
            int allowed = i < V && (mask[i >> 6] >> (i & 63) & 1);
            CHECK_MSG(allowed ? row[i] == (float)i : isinf(row[i]) && row[i] < 0, "step %d logit %d", step, i);
        }
        CHECK(model_gmatch_accept_bytes(m, "a", 1) == 0);
    }
    model_gmatch_free(m);
    model_grammar_unref(g);
    model_gvocab_free(v);
}
