/* scheduler/sched_token.c — the bytes each token contributes to text, for logprobs ("token" and
 * "bytes" in OpenAI's logprobs objects), computed once per scheduler from the vocabulary.
 *
 * A token's piece in tokenizer.json is not its text: SentencePiece-style vocabularies write a
 * space as U+2581 "▁" and single bytes as "<0xNN>"; byte-level (GPT-2 style) vocabularies write
 * every byte as a printable stand-in character (the bytes_to_unicode table: bytes 33-126, 161-172
 * and 174-255 stand for themselves, the other 68 bytes for U+0100 + k in byte order). Which
 * family a vocabulary is follows from whether it has byte-fallback pieces ("<0x0A>") or the
 * byte-level stand-in for "\n" ("Ċ", U+010A). Special tokens show as their content.
 *
 * (Streaming text never uses this table: it comes from the tokenizer's own decoder. This only
 * labels logprob entries, where a token's bytes are shown one token at a time.) */
#include "scheduler/sched_internal.h"
#include "proto/utf8.h"
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

/* Writes the bytes of piece into out (room for 3 * strlen(piece)); returns the length. */
static size_t piece_bytes(const char *piece, int byte_level, const int inv[324], char *out)
{
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

int sched_token_table_init(sched_token_table *t, const model_tok *tok, int vocab)
{
    memset(t, 0, sizeof *t);
    int byte_level = model_tok_id(tok, "<0x0A>") < 0 && model_tok_id(tok, "\xC4\x8A") >= 0;
    int inv[324];
    byte_level_inverse(inv);
    size_t total = 0;
    for (int id = 0; id < vocab; id++) {
        const char *p = model_tok_piece(tok, id);
        total += p ? strlen(p) : 0;
    }
    t->blob = malloc(total + 1);
    t->off = malloc(sizeof(uint32_t) * ((size_t)vocab + 1));
    if (!t->blob || !t->off || total > UINT32_MAX) {
        sched_token_table_deinit(t);
        return -1;
    }
    /* Every mapping above only shrinks a piece (a 3-byte "▁" -> 1 byte, "<0xNN>" -> 1 byte, a
     * stand-in character -> 1 byte), so the blob never outgrows the pieces' total. */
    size_t o = 0;
    for (int id = 0; id < vocab; id++) {
        t->off[id] = (uint32_t)o;
        const char *p = model_tok_piece(tok, id);
        if (p) o += piece_bytes(p, byte_level && !model_tok_is_special(tok, id), inv, t->blob + o);
    }
    t->off[vocab] = (uint32_t)o;
    t->vocab = vocab;
    return 0;
}

void sched_token_table_deinit(sched_token_table *t)
{
    free(t->blob);
    free(t->off);
    memset(t, 0, sizeof *t);
}
