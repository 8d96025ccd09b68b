/* Fuzz-style properties over all four bundled tokenizers (seeded, so failures reproduce):
 * random bytes (invalid UTF-8, NULs) encode without error to ids in range and decode to valid
 * UTF-8; streamed decoding equals the full decode for random id sequences; for byte-level BPE,
 * decode(encode(text)) == text on valid UTF-8. */
#include "model/tok/tokenizer.h"
#include "proto/utf8.h"
#include "tests/model/tok_test_util.h"
#include "tests/test.h"

static const char *const tokenizers[] = {
    "models/stories260K/tokenizer.json",
    "models/tiny-llama2-mha/tokenizer.json",
    "build/data/tokenizer/gpt2/tokenizer.json",
    "build/data/tokenizer/llama3/tokenizer.json",
};

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Random bytes biased towards text: ASCII, spaces, NUL, UTF-8 lead/continuation bytes, whole
 * characters, and the added tokens' bracket syntax. */
static size_t random_bytes(char *b, size_t cap)
{
    size_t n = rnd() % cap, i = 0;
    static const char *frags[] = {" ", "  ", "\n", "\t", "<s>", "</s>", "<|endoftext|>", "<|eot_id|>",
                                  "\xE2\x96\x81", "'s", "'RE", "\xF0\x9F\x98", "\x80", "\xC3",
                                  "\xE6\x97\xA5", "<0x41>", "\xEF\xBF\xBD", "123456"};
    while (i < n) {
        uint32_t r = rnd() % 10;
        if (r < 4) {
            b[i++] = (char)(32 + rnd() % 95);
        } else if (r < 6) {
            b[i++] = (char)(rnd() % 256);
        } else if (r == 6) {
            b[i++] = 0;
        } else {
            const char *f = frags[rnd() % (sizeof frags / sizeof *frags)];
            size_t l = strlen(f);
            if (i + l > n) break;
            memcpy(b + i, f, l);
            i += l;
        }
    }
    return i;
}

/* Random valid UTF-8: code points from several planes (no surrogates). */
static size_t random_text(char *b, size_t cap)
{
    size_t n = 0, want = rnd() % (cap / 4);
    for (size_t k = 0; k < want; k++) {
        uint32_t r = rnd() % 8, cp;
        if (r < 3) cp = 32 + rnd() % 95;
        else if (r == 3) cp = " \n\t\r"[rnd() % 4];
        else if (r == 4) cp = 0x80 + rnd() % 0x780;
        else if (r == 5) cp = 0x800 + rnd() % 0xD000;
        else if (r == 6) cp = 0xE000 + rnd() % 0x2000;
        else cp = 0x10000 + rnd() % 0x10000;
        unsigned char *d = (unsigned char *)b + n;
        if (cp < 0x80) d[0] = (unsigned char)cp, n += 1;
        else if (cp < 0x800) d[0] = (unsigned char)(0xC0 | cp >> 6), d[1] = (unsigned char)(0x80 | (cp & 63)), n += 2;
        else if (cp < 0x10000) d[0] = (unsigned char)(0xE0 | cp >> 12), d[1] = (unsigned char)(0x80 | ((cp >> 6) & 63)), d[2] = (unsigned char)(0x80 | (cp & 63)), n += 3;
        else d[0] = (unsigned char)(0xF0 | cp >> 18), d[1] = (unsigned char)(0x80 | ((cp >> 12) & 63)), d[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)), d[3] = (unsigned char)(0x80 | (cp & 63)), n += 4;
    }
    return n;
}

/* Streams ids and checks every piece is valid UTF-8 and the whole equals model_tok_decode. */
static void check_stream(const model_tok *t, const int32_t *ids, size_t n, int skip)
{
    char *full;
    size_t flen;
    if (model_tok_decode(t, ids, n, skip, &full, &flen) != 0) {
        t_fail(__FILE__, __LINE__, "decode failed");
        return;
    }
    CHECK(proto_utf8_valid(full, flen));
    model_tok_stream *s = model_tok_stream_new(t, skip);
    char *acc = malloc(flen + 1);
    size_t al = 0, l;
    int ok = 1;
    for (size_t i = 0; i <= n && ok; i++) {
        const char *p = i < n ? model_tok_stream_push(s, ids[i], &l) : model_tok_stream_flush(s, &l);
        if (!p || !proto_utf8_valid(p, l) || al + l > flen || memcmp(full + al, p, l) != 0) ok = 0;
        else al += l;
    }
    CHECK_MSG(ok && al == flen, "stream != decode for %zu ids %s (skip=%d)", n, tt_ids_str(ids, n), skip);
    free(acc);
    free(full);
    model_tok_stream_free(s);
}

TEST(tok_fuzz_random_bytes)
{
    rng_state = 0x9E3779B97F4A7C15ull;
    char buf[512];
    for (size_t k = 0; k < sizeof tokenizers / sizeof *tokenizers; k++) {
        char err[512];
        model_tok *t = model_tok_load(tokenizers[k], NULL, err, sizeof err);
        REQUIRE(t);
        int vocab = model_tok_vocab_size(t);
        for (int it = 0; it < 400; it++) {
            size_t n = random_bytes(buf, sizeof buf);
            int32_t *ids;
            size_t m;
            int add = (int)(rnd() & 1);
            REQUIRE(model_tok_encode(t, buf, n, add, &ids, &m) == 0);
            for (size_t i = 0; i < m; i++) CHECK(ids[i] >= 0 && ids[i] < vocab && model_tok_piece(t, ids[i]));
            check_stream(t, ids, m, 0);
            check_stream(t, ids, m, 1);
            free(ids);
        }
        model_tok_free(t);
    }
}

TEST(tok_fuzz_random_ids_stream)
{
    rng_state = 0x243F6A8885A308D3ull;
    int32_t ids[64];
    for (size_t k = 0; k < sizeof tokenizers / sizeof *tokenizers; k++) {
        char err[512];
        model_tok *t = model_tok_load(tokenizers[k], NULL, err, sizeof err);
        REQUIRE(t);
        int vocab = model_tok_vocab_size(t);
        for (int it = 0; it < 400; it++) {
            size_t n = rnd() % 64;
            for (size_t i = 0; i < n; i++) {
                /* favour the byte tokens (<0xNN> are ids 3..258 in the Llama-2 family) and
                 * out-of-range ids, which decode skips */
                uint32_t r = rnd() % 8;
                if (r < 4)
                    ids[i] = (int32_t)(3 + rnd() % 256);
                else if (r == 4)
                    ids[i] = (int32_t)(rnd() % 4) - 2; /* -2, -1: skipped */
                else if (r == 5)
                    ids[i] = vocab + (int32_t)(rnd() % 3); /* past the vocabulary: skipped */
                else
                    ids[i] = (int32_t)(rnd() % (uint32_t)vocab);
            }
            check_stream(t, ids, n, 0);
            check_stream(t, ids, n, 1);
        }
        model_tok_free(t);
    }
}

TEST(tok_fuzz_byte_level_identity)
{
    rng_state = 0xB7E151628AED2A6Bull;
    char buf[1024];
    for (size_t k = 2; k < 4; k++) { /* GPT-2, Llama-3 */
        char err[512];
        model_tok *t = model_tok_load(tokenizers[k], NULL, err, sizeof err);
        REQUIRE(t);
        for (int it = 0; it < 300; it++) {
            size_t n = random_text(buf, sizeof buf);
            int32_t *ids;
            size_t m;
            REQUIRE(model_tok_encode(t, buf, n, 0, &ids, &m) == 0);
            char *text;
            size_t len;
            REQUIRE(model_tok_decode(t, ids, m, 0, &text, &len) == 0);
            CHECK_MSG(len == n && !memcmp(text, buf, n), "%s: decode(encode(x)) != x", tokenizers[k]);
            free(text);
            free(ids);
        }
        model_tok_free(t);
    }
}
