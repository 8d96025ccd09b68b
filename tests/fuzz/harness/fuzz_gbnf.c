/* tests/fuzz/harness/fuzz_gbnf.c — libFuzzer harness for the GBNF engine (model/grammar): the
 * parser and checks (model_grammar_new), then the matcher on the text after the first NUL.
 *
 * Input: grammar text, then optionally a NUL and bytes to feed. A grammar that compiles is run:
 * its initial mask over a 256-token byte vocabulary, then every byte of the tail fed one by one
 * with the mask checked against the acceptance of each fed byte (a byte the mask allows must be
 * accepted, one it refuses must be refused) — the matcher's own promise. Bounded work per byte
 * (MODEL_GRAMMAR_MAX_EXPAND) keeps every input within libFuzzer's timeout. */
#include "model/grammar/grammar.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static model_gvocab *vocab;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab) {
        static char bytes[256];
        const char *b[256];
        size_t l[256];
        for (int i = 0; i < 256; i++) {
            bytes[i] = (char)i;
            b[i] = &bytes[i];
            l[i] = 1;
        }
        vocab = model_gvocab_new(256, b, l, NULL, NULL, 0, 0);
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
    free(s);
    if (!g) {
        if (getenv("FUZZ_DEBUG")) fprintf(stderr, "compile: %s\n", err);
        CHECK(err[0] != 0 && memchr(err, 0, sizeof err));
        return 0;
    }
    model_gmatch *m = model_gmatch_new(g, vocab);
    if (m) {
        for (size_t i = 0; i < (feed ? feed_n : 0) && i < 256; i++) {
            const uint64_t *mask;
            int n = model_gmatch_mask(m, &mask, NULL);
            if (n < 0) break; /* a bound passed: a clean error */
            int allowed = (int)(mask[feed[i] >> 6] >> (feed[i] & 63) & 1);
            int rc = model_gmatch_accept_bytes(m, (const char *)&feed[i], 1);
            CHECK((rc == 0) == allowed || model_gmatch_error(m)[0]);
            if (rc) break;
        }
        model_gmatch_free(m);
    }
    model_grammar_unref(g);
    return 0;
}
