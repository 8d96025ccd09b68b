/* tests/fuzz/harness/fuzz_gbnf.c — libFuzzer harness for the GBNF engine (model/grammar): the
 * parser and checks (model_grammar_new), then the matcher on the text after the first NUL.
 *
 * Input: grammar text, then optionally a NUL and bytes to feed. A grammar that compiles is run:
 * its initial mask over a vocabulary of the 256 bytes and some multi-byte tokens, then every
 * byte of the tail fed one by one with the mask checked against the acceptance of each fed byte
 * (a byte the mask allows must be accepted, one it refuses must be refused: the matcher's own
 * promise) and, at every step,
 * the mask from the grammar's precomputed tables (gram_ctx.c) equals the mask of a second
 * matcher over a second compile of the grammar that walks the whole trie. Bounded work per byte
 * (MODEL_GRAMMAR_MAX_EXPAND) keeps every input within libFuzzer's timeout. */
#include "model/grammar/grammar.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static model_gvocab *vocab;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab) {
        /* every byte (any text is reachable) and some multi-byte tokens, so that the trie has
         * subtrees: a token that closes a rule and goes on (the tables' open fronts) */
        static const char *multi[] = {"ab", "abc", "\"}", "\", ", "\": ", "12", "1.5", " {\"", "true", "null",
                                      "[1", "],", "\xC3\xA9", "\xC3\xA9t", "\xE2\x82", "a\"", "\"a", "\n\n", "  ",
                                      "x = ", ");", "//", "-1", "e+"};
        enum { N_MULTI = sizeof multi / sizeof multi[0] };
        static char bytes[256];
        const char *b[256 + N_MULTI];
        size_t l[256 + N_MULTI];
        for (int i = 0; i < 256; i++) {
            bytes[i] = (char)i;
            b[i] = &bytes[i];
            l[i] = 1;
        }
        for (int i = 0; i < N_MULTI; i++) {
            b[256 + i] = multi[i];
            l[256 + i] = strlen(multi[i]);
        }
        vocab = model_gvocab_new(256 + N_MULTI, b, l, NULL, NULL, 0, 0);
        CHECK(vocab);
    }
    const uint8_t *src, *feed;
    size_t src_n, feed_n;
    fuzz_split(data, size, &src, &src_n, &feed, &feed_n);
    char *s = malloc(src_n ? src_n : 1);
    memcpy(s, src, src_n);
    char err[256];
    err[0] = 0;
    model_grammar *g = model_grammar_new(s, src_n, NULL, err, sizeof err);
    model_grammar *g2 = g ? model_grammar_new(s, src_n, NULL, err, sizeof err) : NULL;
    free(s);
    if (!g) {
        if (getenv("FUZZ_DEBUG")) fprintf(stderr, "compile: %s\n", err);
        CHECK(err[0] != 0 && memchr(err, 0, sizeof err));
        return 0;
    }
    CHECK(g2);
    model_gmatch *m = model_gmatch_new(g, vocab), *ref = model_gmatch_new(g2, vocab);
    if (ref) model_gmatch_set_tables(ref, MODEL_GMATCH_TABLES_OFF);
    if (m && ref) {
        for (size_t i = 0; i < (feed ? feed_n : 0) && i < 256; i++) {
            const uint64_t *mask, *rmask;
            int n = model_gmatch_mask(m, &mask, NULL);
            int rn = model_gmatch_mask(ref, &rmask, NULL);
            if (n < 0 || rn < 0) break; /* a bound passed: a clean error */
            CHECK(n == rn && !memcmp(mask, rmask, (size_t)(model_gvocab_size(vocab) + 63) / 64 * sizeof *mask));
            model_gmatch_accept_bytes(ref, (const char *)&feed[i], 1);
            int allowed = (int)(mask[feed[i] >> 6] >> (feed[i] & 63) & 1);
            int rc = model_gmatch_accept_bytes(m, (const char *)&feed[i], 1);
            CHECK((rc == 0) == allowed || model_gmatch_error(m)[0]);
            if (rc) break;
        }
    }
    model_gmatch_free(m);
    model_gmatch_free(ref);
    model_grammar_unref(g);
    model_grammar_unref(g2);
    return 0;
}
