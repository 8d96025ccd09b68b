/* tests/fuzz/harness/fuzz_kv_wire.c — libFuzzer harness for the KV wire reader (proto/kv_wire.c),
 * which takes bytes from another device or node.
 *
 * Input: byte 0 configures the run, the rest is the stream.
 *   bits 0-1  the dtype the receiver takes (0: int8 or int4, 1: int8, 2: int4, 3: int8)
 *   bits 2-4  the piece size the stream arrives in: all at once, 1, 7, 48, 64, 96, 1000, 4096
 *   bit  5    the receiver checks the model fingerprint (32 bytes of 0xa0 + i)
 *   bit  6    feed from an odd address (the reader copies instead of handing out in place)
 *   bit  7    leave the checksums as they are; when clear, the harness first rewrites every
 *             CRC32C it can locate (header, chunk headers, payloads) so that mutations reach
 *             the checks behind them instead of dying at the first checksum
 * The receiver expects 2 layers x 2 KV heads x head_dim 32, at most 64 positions within a
 * 4096-token context (tests/fuzz/harness/mkseeds.c writes seeds of that shape).
 * Every chunk the callback receives is read whole (ASan checks it lies in memory) and its
 * fields checked against the header and the layout. */
#include "proto/crc32c.h"
#include "proto/kv_wire.h"
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

enum { FZ_LAYERS = 2, FZ_HEADS = 2, FZ_HEAD_DIM = 32, FZ_MAX_TOKENS = 64, FZ_MAX_POS = 4096 };

typedef struct seen {
    int chunks;
    int next_layer;
    unsigned sum; /* keeps the reads of every byte alive */
} seen;

static int on_chunk(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                    const proto_kv_chunk_info *info)
{
    seen *s = ctx;
    CHECK(h->n_layers == FZ_LAYERS && h->n_kv_heads == FZ_HEADS && h->head_dim == FZ_HEAD_DIM);
    CHECK(h->n_tokens >= 1 && h->n_tokens <= FZ_MAX_TOKENS && h->pos0 >= 0 &&
          h->pos0 + h->n_tokens <= FZ_MAX_POS);
    CHECK(c->layer == s->next_layer);
    CHECK(c->n_tokens >= 1 && c->pos0 >= h->pos0 && c->pos0 + c->n_tokens <= h->pos0 + h->n_tokens);
    CHECK(c->dtype == h->dtype && c->n_kv_heads == h->n_kv_heads && c->head_dim == h->head_dim);
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim, &L);
    CHECK(!memcmp(&L, &info->layout, sizeof L) && info->payload_bytes == L.total);
    CHECK(proto_crc32c(0, info->payload, info->payload_bytes) == info->payload_crc);
    CHECK(((uintptr_t)c->k_scale & 1) == 0 && ((uintptr_t)c->v_scale & 1) == 0);
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t sc = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    for (size_t i = 0; i < vb; i++) s->sum += c->k[i] + c->v[i];
    for (size_t i = 0; i < sc; i++) s->sum += c->k_scale[i] + c->v_scale[i];
    s->chunks++;
    s->next_layer = (s->next_layer + 1) % h->n_layers;
    return 0;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites the checksums of the stream in place, walking the chunks by their own "total" field
 * (offsets are from KV_FORMAT.md: header CRC at 92 over 0..91; chunk header payload CRC at 40,
 * header CRC at 44 over 0..43, payload bytes at 32). */
static void fix_crcs(uint8_t *p, size_t n)
{
    if (n < PROTO_KV_HEADER_BYTES) return;
    wr32(p + 92, proto_crc32c(0, p, 92));
    size_t off = PROTO_KV_HEADER_BYTES;
    while (n - off >= PROTO_KV_CHUNK_HEADER_BYTES) {
        uint8_t *ch = p + off;
        uint64_t total = rd64(ch + 32);
        off += PROTO_KV_CHUNK_HEADER_BYTES;
        if (total <= n - off) wr32(ch + 40, proto_crc32c(0, p + off, (size_t)total));
        wr32(ch + 44, proto_crc32c(0, ch, 44));
        if (total > n - off) break;
        off += (size_t)total;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t cfg = data[0];
    static const size_t pieces[8] = {0, 1, 7, 48, 64, 96, 1000, 4096};
    static const enum proto_kv_dtype dts[4] = {0, PROTO_KV_INT8, PROTO_KV_INT4, PROTO_KV_INT8};
    uint8_t fp[32];
    for (int i = 0; i < 32; i++) fp[i] = (uint8_t)(0xa0 + i);
    proto_kv_expect e = {.fingerprint = cfg & 0x20 ? fp : NULL,
                         .n_layers = FZ_LAYERS,
                         .n_kv_heads = FZ_HEADS,
                         .head_dim = FZ_HEAD_DIM,
                         .dtype = dts[cfg & 3],
                         .max_tokens = FZ_MAX_TOKENS,
                         .max_pos = FZ_MAX_POS};
    size_t n = size - 1, piece = pieces[(cfg >> 2) & 7];
    /* an exact-size heap copy (8-byte aligned from malloc, or at an odd address) */
    int odd = (cfg & 0x40) != 0;
    uint8_t *buf = malloc(n + odd + 1), *p = buf + odd;
    if (!buf) return 0;
    memcpy(p, data + 1, n);
    if (!(cfg & 0x80)) fix_crcs(p, n);

    seen s = {0};
    proto_kv_reader *r = proto_kv_reader_new(&e, on_chunk, &s);
    if (!r) abort();
    int rc = 0;
    if (!piece) {
        rc = proto_kv_reader_feed(r, p, n);
    } else {
        for (size_t off = 0; off < n && rc == 0; off += piece)
            rc = proto_kv_reader_feed(r, p + off, off + piece <= n ? piece : n - off);
    }
    int fin = proto_kv_reader_finish(r);
    if (rc != 0) {
        CHECK(rc < 0 && fin == PROTO_KV_ERR_STATE);
        CHECK(proto_kv_reader_feed(r, p, 1) == PROTO_KV_ERR_STATE || n == 0);
        CHECK(proto_kv_reader_error(r)[0] != 0);
    }
    if (fin == 0) {
        const proto_kv_header *h = proto_kv_reader_header(r);
        CHECK(h && proto_kv_reader_tokens_done(r) == h->n_tokens);
        CHECK(s.chunks % FZ_LAYERS == 0 && s.chunks >= FZ_LAYERS);
    }
    proto_kv_reader_free(r);
    free(buf);
    return 0;
}
