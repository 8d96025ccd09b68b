/* tests/fuzz/harness/fuzz_peer_msg.c — libFuzzer harness for the peer protocol's parsers
 * (peer/msg.c): every message another daemon sends goes through one of them before anything
 * is allocated or used.
 *
 * Input: byte 0 picks the parser (mod 14), the rest is the bytes as they came off the wire:
 *   0 a frame header, bounded as before authentication     5 SEQ_NEW/FREE/TRUNCATE words
 *   1 a frame header, bounded as after it                  6 KV (the fixed part)
 *   2 HELLO                                                7 DECODE
 *   3 CHALLENGE                                            8 LOGITS (n, vocab from bytes 1-2)
 *   4 WELCOME / INFO (the device list)                     9 REFUSE's reason
 *  10 ADDR (a worker address)                             11 a tagged chunk: token, fixed, chunk
 *  12 DECODE_ARGMAX                                       13 TOKENS (n, vocab, n_want: bytes 1-3)
 * What a parser accepts is checked against its promises: counts within bounds, names
 * terminated and valid, views inside the input; and written back, it parses to the same. */
#include "peer/msg.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int which = data[0] % 14;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    /* a copy of exactly n bytes, so that ASan sees any read past the end */
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return 0;
    memcpy(b, p, n);
    switch (which) {
    case 0:
    case 1: {
        if (n < PEER_HEADER_BYTES) break;
        peer_header h;
        uint32_t max = which == 0 ? PEER_MAX_PREAUTH : PEER_MAX_PAYLOAD;
        if (peer_header_read(b, max, &h) == PEER_OK) {
            CHECK(h.length <= max);
            CHECK(h.type >= 1 && h.type <= PEER_TYPE_LAST);
            uint8_t again[PEER_HEADER_BYTES];
            peer_header_write(again, h.type, h.length);
            CHECK(memcmp(again, b, PEER_HEADER_BYTES) == 0);
        }
        break;
    }
    case 2:
    case 3: {
        peer_hello h;
        int mac = which == 3;
        if (peer_hello_read(b, n, mac, &h) == PEER_OK) {
            CHECK(peer_name_valid(h.name));
            uint8_t out[PEER_MAX_PREAUTH];
            size_t w = peer_hello_write(out, &h, mac);
            CHECK(w == n && memcmp(out, b, n) == 0);
        }
        break;
    }
    case 4: {
        static peer_info in;
        if (peer_info_read(b, n, &in) == PEER_OK) {
            CHECK(in.n_devs >= 0 && in.n_devs <= PEER_MAX_DEVS);
            CHECK(n == peer_info_bytes(in.n_devs));
            for (int i = 0; i < in.n_devs; i++) {
                CHECK(strlen(in.devs[i].name) <= PEER_DEV_NAME_MAX &&
                      peer_dev_name_valid(in.devs[i].name, NULL, 0));
                CHECK(in.devs[i].max_batch >= 1 && in.devs[i].max_batch <= PEER_MAX_BATCH);
                CHECK(in.devs[i].mem_free <= in.devs[i].mem_total);
                CHECK(in.devs[i].kv_block_tokens >= 0 && in.devs[i].kv_block_tokens <= 4096);
                CHECK(peer_curve_check(&in.devs[i].curve) == PEER_OK);
            }
            uint8_t *out = malloc(peer_info_bytes(in.n_devs));
            if (out) {
                static peer_info again;
                CHECK(peer_info_write(out, &in) == n);
                CHECK(peer_info_read(out, n, &again) == PEER_OK && again.n_devs == in.n_devs);
                for (int i = 0; i < in.n_devs; i++) /* name, curve and block size: bit for bit */
                    CHECK(
                        !strcmp(again.devs[i].name, in.devs[i].name) &&
                        again.devs[i].kv_block_tokens == in.devs[i].kv_block_tokens &&
                        !memcmp(&again.devs[i].curve, &in.devs[i].curve, sizeof in.devs[i].curve));
                free(out);
            }
        }
        break;
    }
    case 5: {
        peer_words w;
        for (int k = 0; k <= 4; k++)
            if (peer_words_read(b, n, k, &w) == PEER_OK) {
                CHECK(n == 4 * (size_t)k);
                sink += w.w[0];
            }
        break;
    }
    case 6: {
        peer_kv k;
        if (peer_kv_read(b, n, &k) == PEER_OK) {
            CHECK(k.bytes == b + PEER_KV_FIXED && k.n_bytes == n - PEER_KV_FIXED && k.n_bytes > 0);
            CHECK((k.flags & ~PEER_KV_RUN_START) == 0);
            sink += k.bytes[k.n_bytes - 1];
        }
        break;
    }
    case 7: {
        static uint32_t seqs[PEER_MAX_BATCH];
        static int32_t ids[PEER_MAX_BATCH];
        uint32_t dev;
        int k;
        if (peer_decode_read(b, n, &dev, &k, seqs, ids) == PEER_OK) {
            CHECK(k >= 1 && k <= PEER_MAX_BATCH && n == peer_decode_bytes(k));
            sink += seqs[k - 1] + (unsigned)ids[k - 1];
        }
        break;
    }
    case 8: {
        if (n < 2) break;
        int k = 1 + b[0] % 8, vocab = 1 + b[1];
        int32_t st;
        const uint8_t *l;
        if (peer_logits_read(b + 2, n - 2, k, vocab, &st, &l) == PEER_OK && st == 0) {
            CHECK(l == b + 2 + PEER_LOGITS_FIXED);
            CHECK(n - 2 == PEER_LOGITS_FIXED + 4 * (size_t)k * (size_t)vocab);
            sink += l[4 * (size_t)k * (size_t)vocab - 1];
        }
        break;
    }
    case 9: {
        char why[PEER_REASON_MAX + 1];
        if (peer_reason_read(b, n, why) == PEER_OK) CHECK(strlen(why) == n);
        break;
    }
    case 10: {
        uint64_t base;
        const uint8_t *a;
        size_t len;
        if (peer_addr_read(b, n, &base, &a, &len) == PEER_OK) {
            CHECK(len >= 1 && len <= PEER_ADDR_MAX && a == b + PEER_ADDR_FIXED && n == PEER_ADDR_FIXED + len);
            sink += a[len - 1];
            uint8_t *out = malloc(n);
            if (out) {
                CHECK(peer_addr_write(out, base, a, len) == n && memcmp(out, b, n) == 0);
                free(out);
            }
        }
        break;
    }
    case 11: {
        peer_kv k;
        if (peer_kv_tag_read(b, n, &k) == PEER_OK) {
            CHECK(n > PEER_KV_TAG_FIXED && n <= PEER_KV_TAG_MAX &&
                  (k.flags & ~(PEER_KV_RUN_START | PEER_KV_TAG_AHEAD)) == 0);
            CHECK(k.bytes == b + PEER_KV_TAG_FIXED && k.n_bytes == n - PEER_KV_TAG_FIXED);
            uint8_t out[PEER_KV_TAG_FIXED];
            peer_kv_tag_write_fixed(out, b, &k); /* the token as it came */
            CHECK(memcmp(out, b, PEER_KV_TAG_FIXED) == 0);
            sink += k.bytes[k.n_bytes - 1];
        }
        break;
    }
    case 12: {
        static uint32_t seqs[PEER_MAX_BATCH];
        static int32_t ids[PEER_MAX_BATCH];
        static unsigned char want[PEER_MAX_BATCH];
        uint32_t dev;
        int k, nw;
        if (peer_decode_argmax_read(b, n, &dev, &k, seqs, ids, want, &nw) == PEER_OK) {
            CHECK(k >= 1 && k <= PEER_MAX_BATCH && n == peer_decode_argmax_bytes(k));
            int count = 0;
            for (int i = 0; i < k; i++) {
                CHECK(want[i] <= 1);
                count += want[i];
            }
            CHECK(count == nw);
            uint8_t *out = malloc(n);
            if (out) {
                CHECK(peer_decode_argmax_write(out, dev, k, seqs, ids, want) == n && memcmp(out, b, n) == 0);
                free(out);
            }
        }
        break;
    }
    case 13: {
        if (n < 3) break;
        int k = 1 + b[0] % 8, vocab = 1 + b[1], nw = b[2] % (k + 1);
        int32_t st, am[8];
        const uint8_t *l;
        if (peer_tokens_read(b + 3, n - 3, k, vocab, nw, &st, am, &l) == PEER_OK && st == 0) {
            CHECK(l == b + 3 + PEER_TOKENS_FIXED + 4 * (size_t)k);
            CHECK(n - 3 == PEER_TOKENS_FIXED + 4 * (size_t)k + 4 * (size_t)nw * (size_t)vocab);
            for (int i = 0; i < k; i++) CHECK(am[i] >= -1 && am[i] < vocab);
            if (nw) sink += l[4 * (size_t)nw * (size_t)vocab - 1];
        }
        break;
    }
    }
    free(b);
    return 0;
}
