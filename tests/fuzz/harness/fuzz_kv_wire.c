/* tests/fuzz/harness/fuzz_kv_wire.c — libFuzzer harness for the KV wire reader (proto/kv_wire.c),
 * which takes bytes from another device or node.
 *
 * Input: byte 0 configures the run, the rest is the stream.
 *   bits 0-1  the dtype the receiver takes (0: int8 or int4, 1: int8, 2: int4, 3: int8)
 *   bits 2-4  the piece size the stream arrives in: all at once, 1, 7, 48, 64, 96, 1000, 4096
 *   bit  5    the receiver checks the model fingerprint (32 bytes of 0xa0 + i) and states its
 *             block size (16 positions: a version 2 stream cut otherwise is refused)
 *   bit  6    feed from an odd address (the reader copies instead of handing out in place)
 *   bit  7    leave the checksums as they are; when clear, the harness first rewrites every
 *             CRC32C it can locate (header, chunk headers, payloads) so that mutations reach
 *             the checks behind them instead of dying at the first checksum
 * The receiver expects 2 layers x 2 KV heads x head_dim 32, at most 64 positions within a
 * 4096-token context (tests/fuzz/harness/mkseeds.c writes seeds of that shape, in versions 2
 * and 1). Every chunk the callback receives is read whole (ASan checks it lies in memory), its
 * fields checked against the header and the layout, and its block slices (version 2's block
 * description, or version 1's chunks in the receiver's blocks) checked to tile its positions
 * and to lie inside its payload's sections. */
#include "proto/crc32c.h"
#include "proto/kv_wire.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FZ_LAYERS = 2, FZ_HEADS = 2, FZ_HEAD_DIM = 32, FZ_MAX_TOKENS = 64, FZ_MAX_POS = 4096 };

typedef struct seen {
    int chunks;
    int next_layer;
    int block_tokens; /* the receiver's, 0: any */
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
    /* the block description */
    CHECK(info->version == h->version && (h->version == 1 || h->version == 2));
    int bt = info->block_tokens;
    CHECK(bt >= 1 && bt <= PROTO_KV_MAX_BLOCK_TOKENS && bt == h->block_tokens);
    CHECK(!s->block_tokens || bt == s->block_tokens);
    CHECK(h->version == 2 || bt == (s->block_tokens ? s->block_tokens : PROTO_KV_V1_BLOCK_TOKENS));
    CHECK(info->block0 == c->pos0 / bt && info->block_offset == c->pos0 % bt);
    CHECK(info->n_blocks == proto_kv_n_blocks(c->pos0, c->n_tokens, bt));
    int next = c->pos0;
    for (int j = 0; j < info->n_blocks; j++) {
        proto_kv_block_slice sl;
        CHECK(proto_kv_block_slice_of(c, info, j, &sl) == 0);
        CHECK(sl.block == info->block0 + j && sl.block * bt + sl.offset == next);
        CHECK(sl.n_tokens >= 1 && sl.offset + sl.n_tokens <= bt && sl.token0 == next - c->pos0);
        CHECK(sl.k + sl.value_bytes <= L.k + L.value_bytes && sl.v + sl.value_bytes <= L.v + L.value_bytes);
        CHECK(sl.k_scale + sl.scale_bytes <= L.k_scale + L.scale_bytes &&
              sl.v_scale + sl.scale_bytes <= L.v_scale + L.scale_bytes);
        next += sl.n_tokens;
    }
    CHECK(next == c->pos0 + c->n_tokens);
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
 * (offsets are from KV_FORMAT.md; by the version at byte 8 — 1: a 96-byte header with its CRC
 * at 92, 48-byte chunk headers with theirs at 44; else 128 / 124 and 64 / 60; the payload CRC
 * at 40 and the payload bytes at 32 in both). */
static void fix_crcs(uint8_t *p, size_t n)
{
    const int v1 = n > 8 && p[8] == 1;
    const size_t hb = v1 ? PROTO_KV_HEADER_V1_BYTES : PROTO_KV_HEADER_BYTES;
    const size_t cb = v1 ? PROTO_KV_CHUNK_HEADER_V1_BYTES : PROTO_KV_CHUNK_HEADER_BYTES;
    if (n < hb) return;
    wr32(p + hb - 4, proto_crc32c(0, p, hb - 4));
    size_t off = hb;
    while (n - off >= cb) {
        uint8_t *ch = p + off;
        uint64_t total = rd64(ch + 32);
        off += cb;
        if (total <= n - off) wr32(ch + 40, proto_crc32c(0, p + off, (size_t)total));
        wr32(ch + cb - 4, proto_crc32c(0, ch, cb - 4));
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
                         .max_pos = FZ_MAX_POS,
                         .block_tokens = cfg & 0x20 ? 16 : 0};
    size_t n = size - 1, piece = pieces[(cfg >> 2) & 7];
    /* an exact-size heap copy (8-byte aligned from malloc, or at an odd address) */
    int odd = (cfg & 0x40) != 0;
    uint8_t *buf = malloc(n + odd + 1), *p = buf + odd;
    if (!buf) return 0;
    memcpy(p, data + 1, n);
    if (!(cfg & 0x80)) fix_crcs(p, n);

    seen s = {.block_tokens = e.block_tokens};
    proto_kv_reader *r = proto_kv_reader_new(&e, on_chunk, &s);
    if (!r) abort();
    int rc = 0;
    if (!piece) {
        rc = proto_kv_reader_feed(r, p, n);
    } else {
        for (size_t off = 0; off < n && rc == 0; off += piece)
            rc = proto_kv_reader_feed(r, p + off, off + piece <= n ? piece : n - off);
    }
    int at = proto_kv_reader_at_boundary(r); /* the bytes fed end where a chunk ends */
    int fin = proto_kv_reader_finish(r);
    if (rc != 0) {
        CHECK(rc < 0 && fin == PROTO_KV_ERR_STATE);
        CHECK(proto_kv_reader_feed(r, p, 1) == PROTO_KV_ERR_STATE || n == 0);
        CHECK(proto_kv_reader_error(r)[0] != 0);
    }
    if (rc == 0 && !at) CHECK(fin == PROTO_KV_ERR_TRUNCATED); /* a chunk cut short */
    if (rc != 0) CHECK(!at);
    if (fin == 0) {
        CHECK(at && proto_kv_reader_at_boundary(r));
        const proto_kv_header *h = proto_kv_reader_header(r);
        CHECK(h && proto_kv_reader_tokens_done(r) == h->n_tokens);
        CHECK(s.chunks % FZ_LAYERS == 0 && s.chunks >= FZ_LAYERS);
    }
    proto_kv_reader_free(r);
    free(buf);
    return 0;
}
