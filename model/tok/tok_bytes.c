/* model/tok/tok_bytes.c — the bytes a token contributes to text, one token at a time.
 *
 * A token's piece in tokenizer.json is not its text: SentencePiece-style vocabularies write a
 * space as U+2581 "▁" and single bytes as "<0xNN>"; byte-level (GPT-2 style) vocabularies write
 * every byte as a printable stand-in character (the bytes_to_unicode table: bytes 33-126, 161-172
 * and 174-255 stand for themselves, the other 68 bytes for U+0100 + k in byte order). Which
 * family a vocabulary is follows from whether it has byte-fallback pieces ("<0x0A>") or the
 * byte-level stand-in for "\n" ("Ċ", U+010A). Special tokens show as their content.
 * (Used for logprobs' token bytes and for the grammar's vocabulary; streaming text comes from the
 * decoder itself.) */
#include "model/tok/tok_internal.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* bytes_to_unicode inverse: code point -> byte, -1 where none. */
static void byte_level_inverse(int inv[324])
{
    for (int i = 0; i < 324; i++) inv[i] = -1;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (printable) inv[b] = b;
        else inv[256 + k++] = b;
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int inv[324]; /* byte-level code point -> byte (-1: none), built once */
static pthread_once_t inv_once = PTHREAD_ONCE_INIT;

static void inv_build(void)
{
    byte_level_inverse(inv);
}

static size_t piece_bytes(const char *piece, int byte_level, char *out)
{
    /* once, for every thread: the flag-then-table version was a data race (formally undefined:
     * a thread could see the flag before the table) */
    pthread_once(&inv_once, inv_build);
    size_t n = strlen(piece), o = 0;
    if (n == 6 && piece[0] == '<' && piece[1] == '0' && piece[2] == 'x' && piece[5] == '>' &&
        hexval(piece[3]) >= 0 && hexval(piece[4]) >= 0) {
        out[0] = (char)(hexval(piece[3]) * 16 + hexval(piece[4]));
        return 1;
    }
    if (byte_level) {
        const unsigned char *p = (const unsigned char *)piece;
        for (size_t i = 0; i < n;) {
            size_t k = 0;
            uint32_t cp = 0;
            if (proto_utf8_scan(p + i, n - i, &k, &cp) != PROTO_UTF8_OK) k = 0;
            if (!k || cp >= 324 || inv[cp] < 0) { /* not a byte-level piece: show it as it is */
                memcpy(out, piece, n);
                return n;
            }
            out[o++] = (char)inv[cp];
            i += (size_t)k;
        }
        return o;
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(piece + i, "\xE2\x96\x81", 3)) { /* U+2581 */
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = piece[i++];
        }
    }
    return o;
}

int model_tok_is_byte_level(const model_tok *t)
{
    return model_tok_id(t, "<0x0A>") < 0 && model_tok_id(t, "\xC4\x8A") >= 0;
}

size_t model_tok_token_bytes(const model_tok *t, int32_t id, int byte_level, char *out)
{
    const char *p = model_tok_piece(t, id);
    if (!p) return 0;
    return piece_bytes(p, byte_level && !model_tok_is_special(t, id), out);
}

int32_t model_tok_space_probe(const model_tok *t)
{
    /* "▁" then a letter ("▁▁" would keep a space after stripping one) */
    int n = model_tok_vocab_size(t);
    for (int32_t id = 0; id < n; id++) {
        const char *p = model_tok_piece(t, id);
        if (p && !strncmp(p, "\xE2\x96\x81", 3) &&
            ((p[3] >= 'a' && p[3] <= 'z') || (p[3] >= 'A' && p[3] <= 'Z')) &&
            !model_tok_is_special(t, id))
            return id;
    }
    return -1;
}

int model_tok_strips_first_space(const model_tok *t)
{
    /* a piece "▁x...": does decoding it alone keep the space its bytes start with? */
    int32_t id = model_tok_space_probe(t);
    if (id < 0) return 0;
    char *text = NULL;
    size_t len = 0;
    if (model_tok_decode(t, &id, 1, 0, &text, &len) < 0) return 0;
    int strips = len > 0 && text[0] != ' ';
    free(text);
    return strips;
}
