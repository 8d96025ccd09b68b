/* tests/fuzz/harness/fuzz_tokenizer.c — libFuzzer harness for tokenizer.json load, encode and
 * decode (model/tok_*.c).
 *
 * Input: tokenizer.json, then optionally a NUL and the text to encode, then optionally another
 * NUL and a tokenizer_config.json (JSON holds no raw NUL, so the split is unambiguous). Without
 * a text, a fixed one with added tokens, byte fallback, invalid UTF-8 and NULs is encoded.
 * A loaded tokenizer must keep model/tokenizer.h's promises: ids inside the vocabulary, decoded
 * text valid UTF-8, and the streamed decode equal to the whole decode. The text is also escaped
 * as a user message's content (model/tok/tok_escape.c): the escaped content restores to the
 * text exactly, and it, and a cut through it (a marker a template sliced), encode in range. */
#include "model/tok/tokenizer.h"
#include "proto/utf8.h"
#include "tests/fuzz/harness/harness_util.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char default_text[] = "Hello world! <s>Once upon a time</s> 123  caf\xc3\xa9 "
                                   "\xf0\x9f\x98\x80\n\ttabs <0x41> \xff\xc3 bad\0nul <|eot_id|>";

static void check_decode(const model_tok *t, const int32_t *ids, size_t n, int skip_special)
{
    char *text = NULL;
    size_t len = 0;
    if (model_tok_decode(t, ids, n, skip_special, &text, &len) != 0) abort(); /* OOM only */
    CHECK(text && text[len] == 0);
    CHECK(proto_utf8_valid(text, len));
    model_tok_stream *s = model_tok_stream_new(t, skip_special);
    if (!s) abort();
    char *cat = malloc(len + 1);
    size_t got = 0;
    int ok = 1;
    for (size_t i = 0; i <= n && ok; i++) {
        size_t k = 0;
        const char *piece =
            i < n ? model_tok_stream_push(s, ids[i], &k) : model_tok_stream_flush(s, &k);
        if (!piece) abort();
        if (got + k > len || memcmp(text + got, piece, k) != 0) {
            ok = 0;
        } else {
            memcpy(cat + got, piece, k);
            got += k;
        }
    }
    if (!ok || got != len) {
        fprintf(stderr,
                "streamed decode differs from decode (skip_special %d): whole \"%s\", "
                "streamed prefix \"%.*s\"\n",
                skip_special, text, (int)got, cat);
        abort();
    }
    model_tok_stream_free(s);
    free(cat);
    free(text);
}

static void check_ids(const int32_t *ids, size_t n, int vocab)
{
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < vocab);
}

static void check_escape(const model_tok *t, const char *txt, size_t n, int vocab)
{
    model_tok_esc e;
    if (model_tok_esc_init(&e)) abort();
    /* JSON strings are UTF-8: other texts reach the escaping only through the encoder */
    json_t *c = json_pack("{s:[{s:s,s:s%}]}", "messages", "role", "user", "content", txt, n);
    char *ctx = c ? json_dumps(c, JSON_COMPACT) : NULL, *esc = NULL;
    json_decref(c);
    const char *s = txt;
    size_t sn = n;
    json_t *r = NULL;
    if (ctx) {
        int st = model_tok_esc_context(t, &e, ctx, strlen(ctx), MODEL_TOK_ESC_UNTRUSTED, &esc);
        CHECK(st >= -3 && (st == 1) == (esc != NULL));
        if (st == MODEL_TOK_ESC_EFAIL) abort(); /* OOM only: ctx is JSON */
        if (esc) {
            r = json_loads(esc, JSON_ALLOW_NUL, NULL);
            json_t *v =
                json_object_get(json_array_get(json_object_get(r, "messages"), 0), "content");
            CHECK(json_is_string(v));
            s = json_string_value(v);
            sn = json_string_length(v);
            char *back = NULL;
            size_t bl = 0;
            if (model_tok_esc_restore(t, &e, s, sn, &back, &bl)) abort();
            CHECK(bl == n && memcmp(back, txt, n) == 0);
            free(back);
        }
    }
    for (int cut = 0; cut <= 1; cut++) {
        int32_t *ids = NULL;
        size_t k = 0;
        if (model_tok_encode_esc(t, &e, s, cut ? sn / 2 : sn, 0, &ids, &k)) abort();
        check_ids(ids, k, vocab);
        free(ids);
    }
    json_decref(r);
    free(esc);
    free(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *json, *rest, *text, *config;
    size_t json_n, rest_n, text_n, config_n;
    fuzz_split(data, size, &json, &json_n, &rest, &rest_n);
    if (rest) {
        fuzz_split(rest, rest_n, &text, &text_n, &config, &config_n);
    } else {
        text = (const uint8_t *)default_text;
        text_n = sizeof default_text - 1;
        config = NULL;
        config_n = 0;
    }
    const char *dir = fuzz_tmpdir();
    char tok_path[1024], cfg_path[1024];
    snprintf(tok_path, sizeof tok_path, "%s", fuzz_write(dir, "tokenizer.json", json, json_n));
    if (config)
        snprintf(cfg_path, sizeof cfg_path, "%s",
                 fuzz_write(dir, "tokenizer_config.json", config, config_n));
    char err[512];
    err[0] = 0;
    model_tok *t = model_tok_load(tok_path, config ? cfg_path : NULL, err, sizeof err);
    if (!t && getenv("FUZZ_DEBUG")) fprintf(stderr, "load: %s\n", err);
    if (!t) {
        CHECK(err[0] != 0 && memchr(err, 0, sizeof err));
        return 0;
    }
    int vocab = model_tok_vocab_size(t);
    CHECK(vocab >= 0);
    (void)model_tok_chat_template(t);
    (void)model_tok_special_note(t);
    const char *bos = model_tok_bos_token(t), *eos = model_tok_eos_token(t);
    if (bos) (void)model_tok_id(t, bos);
    if (eos) (void)model_tok_id(t, eos);
    /* the text in its own exact-size allocation */
    char *txt = malloc(text_n ? text_n : 1);
    memcpy(txt, text, text_n);
    for (int add_special = 0; add_special <= 1; add_special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (model_tok_encode(t, txt, text_n, add_special, &ids, &n) != 0) abort(); /* OOM only */
        /* in range; not necessarily with a token: a post-processor may name a hole in the
         * vocabulary, and tokenizers emits it as well */
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < vocab);
        check_decode(t, ids, n, add_special);
        free(ids);
    }
    check_escape(t, txt, text_n, vocab);
    /* decode of ids the tokenizer never produced (holes, out of range, special) */
    int32_t odd[] = {-1, 0, 1, 2, vocab - 1, vocab, vocab + 1000, 3, 0x7fffffff};
    check_decode(t, odd, sizeof odd / sizeof odd[0], 0);
    check_decode(t, odd, sizeof odd / sizeof odd[0], 1);
    free(txt);
    model_tok_free(t);
    return 0;
}
