/* The KV wire format: CRC32C against published vectors, round trips through the streaming
 * reader in pieces of every size, and every corruption or lie in a stream refused cleanly. */
#include "cpu/kv_quant.h"
#include "proto/crc32c.h"
#include "proto/kv_wire.h"
#include "tests/test.h"
#include <stdint.h>
#include <stdlib.h>

TEST(kv_crc32c_published_vectors)
{
    /* The CRC catalogue's check value, and RFC 3720 appendix B.4. */
    CHECK_EQ(proto_crc32c(0, "123456789", 9), 0xE3069283u);
    uint8_t b[32];
    memset(b, 0, 32);
    CHECK_EQ(proto_crc32c(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, 32);
    CHECK_EQ(proto_crc32c(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    CHECK_EQ(proto_crc32c(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
    CHECK_EQ(proto_crc32c(0, b, 32), 0x113FDB5Cu);
    CHECK_EQ(proto_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    /* Both paths agree at every length and alignment, and chaining equals one pass. */
    uint8_t big[300];
    for (int i = 0; i < 300; i++) big[i] = (uint8_t)(i * 31 + 7);
    for (int off = 0; off < 9; off++)
        for (int n = 0; n < 280; n += 13) {
            CHECK_EQ(proto_crc32c(0, big + off, n), proto_crc32c_sw(0, big + off, n));
            uint32_t c = proto_crc32c(0, big + off, n / 3);
            CHECK_EQ(proto_crc32c(c, big + off + n / 3, n - n / 3), proto_crc32c(0, big + off, n));
        }
    /* past the three-stream threshold (3 x 4096 bytes) and its joins: every residue of the
     * block, odd starts, and a chained call that splits a block */
    size_t nb = 5 * 12288 + 99 + 2; /* the longest length at the largest offset */
    uint8_t *m = malloc(nb);
    REQUIRE(m);
    unsigned st = 7;
    for (size_t i = 0; i < nb; i++) {
        st = st * 1103515245u + 12345u;
        m[i] = (uint8_t)(st >> 16);
    }
    size_t lens[] = {12287, 12288, 12289, 2 * 12288 + 8, 3 * 12288 + 4095, 5 * 12288 + 99};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int off = 0; off < 3; off++) {
            CHECK_MSG(proto_crc32c(0, m + off, lens[i]) == proto_crc32c_sw(0, m + off, lens[i]),
                      "length %zu offset %d", lens[i], off);
            uint32_t c = proto_crc32c(0xdeadbeef, m + off, 5000);
            CHECK_EQ(proto_crc32c(c, m + off + 5000, lens[i] - 5000),
                     proto_crc32c_sw(0xdeadbeef, m + off, lens[i]));
        }
    /* the folding path (proto_crc32c_path: "vpclmulqdq" where the CPU has it) from its
     * threshold (256 bytes) on, every tail of its 128-byte passes and 16-byte folds, odd
     * starts, chained from a register other than 0 */
    for (size_t n = 200; n < 1400; n += 7)
        for (int off = 0; off < 3; off++) {
            CHECK_MSG(proto_crc32c(0, m + off, n) == proto_crc32c_sw(0, m + off, n), "%s: length %zu offset %d",
                      proto_crc32c_path(), n, off);
            CHECK_EQ(proto_crc32c(0x12345678, m + off, n), proto_crc32c_sw(0x12345678, m + off, n));
        }
    free(m);
}

/* ---------------------------------------------------------------- a stream to play with */

enum { L = 3, H = 2, D = 64, RUN1 = 5, RUN2 = 3, MAXC = 2 * L };

typedef struct stream {
    uint8_t *bytes;
    size_t n;
    size_t chunk_off[MAXC]; /* where each chunk starts in bytes */
    proto_kv_layer want[MAXC];
    void *bufs[MAXC];
    int n_chunks;
    uint8_t fp[32];
} stream;

static float frand(unsigned *st)
{
    *st = *st * 1103515245u + 12345u;
    return (float)((*st >> 8) & 0xffff) / 8192.0f - 4.0f;
}

/* Blocks of 4 positions: the runs of 5 and 3 positions cross block boundaries. */
enum { BT = 4 };

/* version: 2 (the writer's), or 1 (what an older writer sent). */
static void stream_make_v(stream *s, enum proto_kv_dtype dt, int pos0, int version)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 32; i++) s->fp[i] = (uint8_t)(0xa0 + i);
    proto_kv_header h = {.n_layers = L, .n_kv_heads = H, .head_dim = D, .n_tokens = RUN1 + RUN2,
                         .pos0 = pos0, .dtype = dt, .block_tokens = BT, .version = version};
    memcpy(h.fingerprint, s->fp, 32);
    s->bytes = malloc(1 << 20);
    CHECK_EQ((size_t)proto_kv_header_write(&h, s->bytes), proto_kv_header_bytes(&h));
    s->n = proto_kv_header_bytes(&h);
    unsigned st = 1;
    int runs[2] = {RUN1, RUN2}, p = pos0;
    for (int r = 0; r < 2; r++) {
        for (int l = 0; l < L; l++) {
            int n = runs[r];
            float k[RUN1 * H * D], v[RUN1 * H * D];
            for (int i = 0; i < n * H * D; i++) {
                k[i] = frand(&st);
                v[i] = frand(&st) * 0.25f;
            }
            size_t need = cpu_kv_layer_bytes(dt, n, H, D);
            void *buf = aligned_alloc(8, (need + 7) & ~(size_t)7);
            proto_kv_layer *c = &s->want[s->n_chunks];
            CHECK(cpu_kv_quantize_layer(dt, k, v, l, p, n, H, D, buf, need, c) == 0);
            s->bufs[s->n_chunks] = buf;
            s->chunk_off[s->n_chunks++] = s->n;
            long long w = proto_kv_chunk_write(&h, c, s->bytes + s->n, (1 << 20) - s->n);
            CHECK(w > 0 && (size_t)w == proto_kv_chunk_bytes(&h, c));
            s->n += (size_t)w;
        }
        p += runs[r];
    }
}

static void stream_make(stream *s, enum proto_kv_dtype dt, int pos0)
{
    stream_make_v(s, dt, pos0, 0);
}

static void stream_free(stream *s)
{
    free(s->bytes);
    for (int i = 0; i < s->n_chunks; i++) free(s->bufs[i]);
}

static proto_kv_expect expect_of(const stream *s)
{
    return (proto_kv_expect){.fingerprint = s->fp, .n_layers = L, .n_kv_heads = H,
                             .head_dim = D, .max_tokens = 64, .max_pos = 4096};
}

typedef struct got {
    const stream *s;
    int n;
    int mismatches;
} got;

static int on_chunk(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                    const proto_kv_chunk_info *info)
{
    got *g = ctx;
    if (g->n >= g->s->n_chunks) {
        g->mismatches++;
        return 0;
    }
    const proto_kv_layer *w = &g->s->want[g->n++];
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t sb = 2 * proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    int ok = c->layer == w->layer && c->pos0 == w->pos0 && c->n_tokens == w->n_tokens &&
             c->n_kv_heads == w->n_kv_heads && c->head_dim == w->head_dim &&
             c->dtype == w->dtype && !memcmp(c->k, w->k, vb) && !memcmp(c->v, w->v, vb) &&
             !memcmp(c->k_scale, w->k_scale, sb) && !memcmp(c->v_scale, w->v_scale, sb) &&
             h->n_tokens == RUN1 + RUN2 && info->payload_crc == proto_crc32c(0, info->payload,
                                                                             info->payload_bytes) &&
             ((uintptr_t)c->k_scale & 1) == 0 && info->payload_bytes % 64 == 0;
    if (!ok) g->mismatches++;
    return 0;
}

/* Feeds the stream in pieces of `piece` bytes (0: all at once). */
static int feed_all(proto_kv_reader *r, const uint8_t *p, size_t n, size_t piece)
{
    if (!piece) return proto_kv_reader_feed(r, p, n);
    for (size_t off = 0; off < n; off += piece) {
        int rc = proto_kv_reader_feed(r, p + off, off + piece <= n ? piece : n - off);
        if (rc) return rc;
    }
    return 0;
}

TEST(kv_wire_round_trip_in_any_pieces)
{
    for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++) {
        stream s;
        stream_make(&s, dt, 100);
        size_t pieces[] = {0, 1, 7, 48, 96, 1000, 4096};
        for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
            proto_kv_expect e = expect_of(&s);
            got g = {.s = &s};
            proto_kv_reader *r = proto_kv_reader_new(&e, on_chunk, &g);
            REQUIRE(r);
            CHECK_EQ(feed_all(r, s.bytes, s.n, pieces[i]), 0);
            CHECK_EQ(proto_kv_reader_finish(r), 0);
            CHECK_MSG(g.n == 2 * L && g.mismatches == 0, "dtype %d pieces %zu: %d chunks, %d bad "
                      "(%s)", dt, pieces[i], g.n, g.mismatches, proto_kv_reader_error(r));
            CHECK_EQ(proto_kv_reader_tokens_done(r), RUN1 + RUN2);
            CHECK(proto_kv_reader_at_boundary(r));
            const proto_kv_header *h = proto_kv_reader_header(r);
            CHECK(h && h->pos0 == 100 && h->dtype == (enum proto_kv_dtype)dt);
            /* Bytes after the end are refused. */
            CHECK_EQ(proto_kv_reader_feed(r, s.bytes, 1), PROTO_KV_ERR_STATE);
            proto_kv_reader_free(r);
        }
        stream_free(&s);
    }
}

/* proto_kv_reader_crc_hint: a CRC the caller computed stands for the payload it names (a wrong
 * one fails a good chunk: the hint is what was compared), names nothing else (a wrong one for
 * other bytes changes nothing), and holds for one feed call only. */
TEST(kv_wire_crc_hint_stands_for_exactly_its_bytes)
{
    stream s;
    stream_make(&s, PROTO_KV_INT8, 100);
    for (int mode = 0; mode < 4; mode++) {
        proto_kv_expect e = expect_of(&s);
        got g = {.s = &s};
        proto_kv_reader *r = proto_kv_reader_new(&e, on_chunk, &g);
        REQUIRE(r);
        int rc = 0, at = -1;
        for (int i = 0; i < s.n_chunks && !rc; i++) {
            size_t from = i ? s.chunk_off[i] : 0, to = i + 1 < s.n_chunks ? s.chunk_off[i + 1] : s.n;
            const uint8_t *pay = s.bytes + s.chunk_off[i] + PROTO_KV_CHUNK_HEADER_BYTES;
            size_t np = s.bytes + to - pay;
            uint32_t crc = proto_crc32c(0, pay, np);
            if (mode == 0) proto_kv_reader_crc_hint(r, pay, np, crc);        /* right: accepted */
            if (mode == 1 && i == 2) proto_kv_reader_crc_hint(r, pay, np, crc ^ 1); /* refused */
            if (mode == 2) proto_kv_reader_crc_hint(r, pay + 8, np - 8, crc ^ 1); /* not its bytes */
            if (mode == 3 && i == 2) { /* one call's only: an empty feed ends it */
                proto_kv_reader_crc_hint(r, pay, np, crc ^ 1);
                CHECK_EQ(proto_kv_reader_feed(r, s.bytes + from, 0), 0);
            }
            rc = proto_kv_reader_feed(r, s.bytes + from, to - from);
            if (rc) at = i;
        }
        if (mode == 1) {
            CHECK_MSG(rc == PROTO_KV_ERR_CRC && at == 2 && g.n == 2, "mode 1: status %d at chunk %d, %d delivered", rc, at, g.n);
        } else {
            CHECK_MSG(rc == 0 && g.n == 2 * L && g.mismatches == 0, "mode %d: status %d (%s), %d chunks, %d bad", mode,
                      rc, proto_kv_reader_error(r), g.n, g.mismatches);
            CHECK_EQ(proto_kv_reader_finish(r), 0);
        }
        proto_kv_reader_free(r);
    }
    stream_free(&s);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* proto_kv_payload_crc (what a device that stored a chunk in its own layout compares with the
 * wire) equals the payload CRC the writer puts in the chunk header, padding included: the
 * stream's chunks, and odd shapes whose every section is padded. */
TEST(kv_wire_payload_crc_equals_the_written_one)
{
    for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++) {
        stream s;
        stream_make(&s, dt, 7);
        for (int i = 0; i < s.n_chunks; i++)
            CHECK_EQ(proto_kv_payload_crc(&s.want[i]),
                     le32(s.bytes + s.chunk_off[i] + 40));
        stream_free(&s);
    }
    unsigned st = 5;
    int shapes[][3] = {{1, 3, 10}, {3, 1, 6}, {2, 5, 34}, {17, 2, 32}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int n = shapes[i][0], h = shapes[i][1], d = shapes[i][2];
        enum proto_kv_dtype dt = d % 32 == 0 ? PROTO_KV_INT4 : PROTO_KV_INT8;
        float k[17 * 5 * 34], v[17 * 5 * 34];
        for (int j = 0; j < n * h * d; j++) {
            k[j] = frand(&st);
            v[j] = frand(&st);
        }
        size_t need = cpu_kv_layer_bytes(dt, n, h, d);
        void *buf = aligned_alloc(8, (need + 7) & ~(size_t)7);
        proto_kv_layer c;
        REQUIRE(cpu_kv_quantize_layer(dt, k, v, 2, 9, n, h, d, buf, need, &c) == 0);
        proto_kv_header sh = {.n_layers = 3, .n_kv_heads = h, .head_dim = d, .n_tokens = n,
                              .pos0 = 9, .dtype = dt, .block_tokens = 16};
        size_t len = proto_kv_chunk_bytes(&sh, &c);
        uint8_t *w = malloc(len);
        CHECK_EQ(proto_kv_chunk_write(&sh, &c, w, len), (long long)len);
        CHECK_MSG(proto_kv_payload_crc(&c) == le32(w + 40), "shape %d x %d x %d", n, h, d);
        /* one changed value changes it */
        ((uint8_t *)c.v)[n * h * (dt == PROTO_KV_INT8 ? d : d / 2) - 1] ^= 0x04;
        CHECK(proto_kv_payload_crc(&c) != le32(w + 40));
        free(w);
        free(buf);
    }
    proto_kv_layer bad = {.n_tokens = 0};
    CHECK_EQ(proto_kv_payload_crc(&bad), 0u);
}

/* Runs the stream (modified by the caller) through a reader; returns the feed status and the
 * number of chunks the callback saw. */
static int run_reader(const stream *s, const uint8_t *bytes, size_t n, const proto_kv_expect *e,
                      int *seen, char *err, size_t errlen)
{
    got g = {.s = s};
    proto_kv_reader *r = proto_kv_reader_new(e, on_chunk, &g);
    if (!r) return PROTO_KV_ERR_NOMEM;
    int rc = proto_kv_reader_feed(r, bytes, n);
    if (rc == 0) rc = proto_kv_reader_finish(r);
    snprintf(err, errlen, "%s", proto_kv_reader_error(r));
    if (rc) CHECK_EQ(proto_kv_reader_feed(r, bytes, 1), PROTO_KV_ERR_STATE);
    *seen = g.n;
    CHECK_EQ(g.mismatches, 0);
    proto_kv_reader_free(r);
    return rc;
}

TEST(kv_wire_corrupt_chunk_rejected_before_delivery)
{
    stream s;
    stream_make(&s, PROTO_KV_INT8, 0);
    proto_kv_expect e = expect_of(&s);
    uint8_t *b = malloc(s.n);
    char err[256];
    int seen;
    /* A flipped byte in the payload of chunk 4 (layer 1 of the second run). */
    memcpy(b, s.bytes, s.n);
    b[s.chunk_off[4] + PROTO_KV_CHUNK_HEADER_BYTES + 5] ^= 0x01;
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_CRC);
    CHECK_EQ(seen, 4);
    CHECK_MSG(strstr(err, "layer 1"), "err: %s", err);
    /* In a scale. */
    memcpy(b, s.bytes, s.n);
    b[s.chunk_off[1] + PROTO_KV_CHUNK_HEADER_BYTES + 2 * 640 + 1] ^= 0x80;
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_CRC);
    CHECK_EQ(seen, 1);
    /* In a chunk header (its token count). */
    memcpy(b, s.bytes, s.n);
    b[s.chunk_off[2] + 12] ^= 0x02;
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_CRC);
    CHECK_EQ(seen, 2);
    /* In the stream header. */
    memcpy(b, s.bytes, s.n);
    b[50] ^= 0x10;
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_CRC);
    CHECK_EQ(seen, 0);
    /* Wrong magic. */
    memcpy(b, s.bytes, s.n);
    b[s.chunk_off[3]] = 'X';
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_MAGIC);
    CHECK_EQ(seen, 3);
    free(b);
    stream_free(&s);
}

TEST(kv_wire_refuses_other_models_and_bounds)
{
    stream s;
    stream_make(&s, PROTO_KV_INT4, 1000);
    char err[256];
    int seen;
    proto_kv_expect e = expect_of(&s);
    uint8_t other[32];
    memset(other, 0x11, 32);
    e.fingerprint = other;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_MODEL);
    e = expect_of(&s);
    e.n_layers = L + 1;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_MODEL);
    e = expect_of(&s);
    e.dtype = PROTO_KV_INT8;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_MODEL);
    e = expect_of(&s);
    e.max_tokens = RUN1 + RUN2 - 1; /* the receiver reserved fewer positions */
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_BOUNDS);
    e = expect_of(&s);
    e.max_pos = 1000 + RUN1 + RUN2 - 1; /* past the context */
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_BOUNDS);
    CHECK_EQ(seen, 0);
    e = expect_of(&s);
    e.max_pos = 1000 + RUN1 + RUN2;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), 0);
    stream_free(&s);
}

/* Re-seals a modified stream header (a hostile writer computes CRCs too). */
static void reseal_header(uint8_t *h)
{
    size_t n = h[8] == 1 ? PROTO_KV_HEADER_V1_BYTES : PROTO_KV_HEADER_BYTES;
    uint32_t c = proto_crc32c(0, h, n - 4);
    for (int i = 0; i < 4; i++) h[n - 4 + i] = (uint8_t)(c >> (8 * i));
}
static void reseal_chunk_header_n(uint8_t *h, size_t n)
{
    uint32_t c = proto_crc32c(0, h, n - 4);
    for (int i = 0; i < 4; i++) h[n - 4 + i] = (uint8_t)(c >> (8 * i));
}
static void reseal_chunk_header(uint8_t *h)
{
    reseal_chunk_header_n(h, PROTO_KV_CHUNK_HEADER_BYTES);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

TEST(kv_wire_hostile_fields_refused_before_allocation)
{
    stream s;
    stream_make(&s, PROTO_KV_INT8, 0);
    proto_kv_expect e = expect_of(&s);
    e.max_tokens = 0; /* take any count the format allows: the format's own bounds must hold */
    uint8_t *b = malloc(s.n);
    char err[256];
    int seen;
    struct {
        size_t off;
        uint32_t v;
        int want;
    } cases[] = {
        {60, 0xffffffffu, PROTO_KV_ERR_BOUNDS},  /* n_tokens */
        {60, 0, PROTO_KV_ERR_BOUNDS},            /* no tokens */
        {56, 1u << 20, PROTO_KV_ERR_BOUNDS},     /* head_dim */
        {56, 63, PROTO_KV_ERR_BOUNDS},           /* odd head_dim */
        {52, 0, PROTO_KV_ERR_BOUNDS},            /* no heads */
        {48, 0x80000000u, PROTO_KV_ERR_BOUNDS},  /* layers */
        {64, 0x7ffffffcu, PROTO_KV_ERR_BOUNDS},  /* pos0 + n wraps past INT32_MAX */
        {72, 32, PROTO_KV_ERR_BOUNDS},           /* group disagrees with dtype */
        {12, 1, PROTO_KV_ERR_VERSION},           /* unknown flag */
        {8, 3, PROTO_KV_ERR_VERSION},            /* version 3 (with the 16-bit header size) */
        {8, 0, PROTO_KV_ERR_VERSION},            /* version 0 */
        {8, 1, PROTO_KV_ERR_VERSION},            /* version 1 with version 2's header size */
        {76, 0, PROTO_KV_ERR_BOUNDS},            /* no block size */
        {76, PROTO_KV_MAX_BLOCK_TOKENS + 1, PROTO_KV_ERR_BOUNDS}, /* block size */
        {76, 8, PROTO_KV_ERR_BOUNDS},            /* block size the block fields disagree with */
        {80, 1, PROTO_KV_ERR_BOUNDS},            /* first block */
        {84, 0xffffffffu, PROTO_KV_ERR_BOUNDS},  /* block count */
        {88, 1, PROTO_KV_ERR_VERSION},           /* reserved */
        {68, 0x0201, PROTO_KV_ERR_VERSION},      /* order byte (71) 0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, s.bytes, s.n);
        if (cases[i].off == 68) { /* one byte: the order at 71 */
            b[71] = 0;
        } else {
            put32(b + cases[i].off, cases[i].v);
        }
        if (cases[i].off == 8) put32(b + 8, cases[i].v | (128u << 16));
        reseal_header(b);
        int rc = run_reader(&s, b, s.n, &e, &seen, err, sizeof err);
        CHECK_MSG(rc == cases[i].want, "case %zu: %d (%s)", i, rc, err);
        CHECK_EQ(seen, 0);
    }
    /* Chunk headers: a token count beyond the stream, lying section sizes, wrong order. */
    struct {
        int chunk;
        size_t off;
        uint32_t v;
        int want;
    } cc[] = {
        {0, 12, RUN1 + RUN2 + 1, PROTO_KV_ERR_BOUNDS}, /* more tokens than remain */
        {0, 12, 0, PROTO_KV_ERR_BOUNDS},
        {1, 12, RUN1 - 1, PROTO_KV_ERR_ORDER},         /* layer 1 disagrees with layer 0 */
        {0, 36, 0x7fffffffu, PROTO_KV_ERR_BOUNDS},     /* payload_bytes (high word) huge */
        {0, 16, 5, PROTO_KV_ERR_BOUNDS},               /* value_bytes */
        {1, 4, 2, PROTO_KV_ERR_ORDER},                 /* layer 2 where layer 1 belongs */
        {3, 8, 0, PROTO_KV_ERR_ORDER},                 /* second run restarting at 0 */
        {0, 44, 1, PROTO_KV_ERR_BOUNDS},               /* first block */
        {0, 48, 0x7fffffffu, PROTO_KV_ERR_BOUNDS},     /* block count */
        {3, 52, 0, PROTO_KV_ERR_BOUNDS},               /* offset in the first block (5 % 4) */
        {4, 56, 1, PROTO_KV_ERR_BOUNDS},               /* reserved */
    };
    for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) {
        memcpy(b, s.bytes, s.n);
        uint8_t *h = b + s.chunk_off[cc[i].chunk];
        put32(h + cc[i].off, cc[i].v);
        reseal_chunk_header(h);
        int rc = run_reader(&s, b, s.n, &e, &seen, err, sizeof err);
        CHECK_MSG(rc == cc[i].want, "chunk case %zu: %d (%s)", i, rc, err);
        CHECK_EQ(seen, cc[i].chunk);
    }
    /* A stream cut short, and one with a chunk missing. */
    CHECK_EQ(run_reader(&s, s.bytes, s.chunk_off[5], &e, &seen, err, sizeof err),
             PROTO_KV_ERR_TRUNCATED);
    CHECK_EQ(seen, 5);
    memcpy(b, s.bytes, s.chunk_off[1]);
    memcpy(b + s.chunk_off[1], s.bytes + s.chunk_off[2], s.n - s.chunk_off[2]);
    CHECK_EQ(run_reader(&s, b, s.n - (s.chunk_off[2] - s.chunk_off[1]), &e, &seen, err,
                        sizeof err), PROTO_KV_ERR_ORDER);
    CHECK_EQ(seen, 1);
    free(b);
    stream_free(&s);
}

static int refuse_second(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                         const proto_kv_chunk_info *info)
{
    int *n = ctx;
    return ++*n == 2 ? -42 : 0;
}

TEST(kv_wire_receiver_refusal_stops_the_stream)
{
    stream s;
    stream_make(&s, PROTO_KV_INT8, 0);
    proto_kv_expect e = expect_of(&s);
    int n = 0;
    proto_kv_reader *r = proto_kv_reader_new(&e, refuse_second, &n);
    REQUIRE(r);
    CHECK_EQ(proto_kv_reader_feed(r, s.bytes, s.n), -42);
    CHECK_EQ(n, 2);
    CHECK_EQ(proto_kv_reader_finish(r), PROTO_KV_ERR_STATE);
    proto_kv_reader_free(r);
    /* The writer refuses short buffers and bad shapes. */
    uint8_t small[PROTO_KV_HEADER_BYTES];
    proto_kv_header sh = {.n_layers = L, .n_kv_heads = H, .head_dim = D, .n_tokens = RUN1 + RUN2,
                          .dtype = PROTO_KV_INT8, .block_tokens = BT};
    CHECK_EQ(proto_kv_chunk_write(&sh, &s.want[0], small, sizeof small), PROTO_KV_ERR_BOUNDS);
    proto_kv_layer bad = s.want[0];
    bad.head_dim = 7;
    CHECK_EQ(proto_kv_chunk_bytes(&sh, &bad), 0);
    bad = s.want[0];
    bad.layer = L; /* not a layer of the stream */
    CHECK_EQ(proto_kv_chunk_bytes(&sh, &bad), 0);
    proto_kv_header h = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 48, .n_tokens = 1,
                         .dtype = PROTO_KV_INT4, .block_tokens = 16};
    CHECK_EQ(proto_kv_header_write(&h, small), PROTO_KV_ERR_BOUNDS);
    h = sh;
    h.block_tokens = 0; /* version 2 needs a block size */
    CHECK_EQ(proto_kv_header_write(&h, small), PROTO_KV_ERR_BOUNDS);
    h.version = 3;
    CHECK_EQ(proto_kv_header_write(&h, small), PROTO_KV_ERR_VERSION);
    stream_free(&s);
}

/* ---------------------------------------------------------------- version 2: blocks */

typedef struct blocks_seen {
    const stream *s;
    int n, bad;
    int bt;      /* the block size the receiver expects the chunks described in */
    int version; /* the stream's */
    int covered[64]; /* per (position - 96): layers whose slice covered it */
} blocks_seen;

/* Checks the chunk's block description against its positions, and that each slice's bytes are
 * exactly the chunk's tokens of that block (compared with the arrays the writer was given). */
static int on_blocks(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                     const proto_kv_chunk_info *info)
{
    blocks_seen *g = ctx;
    const proto_kv_layer *w = &g->s->want[g->n++];
    int ok = info->version == g->version && h->version == g->version &&
             info->block_tokens == g->bt && h->block_tokens == g->bt &&
             info->block0 == c->pos0 / g->bt && info->block_offset == c->pos0 % g->bt &&
             info->n_blocks == (c->pos0 + c->n_tokens - 1) / g->bt - c->pos0 / g->bt + 1;
    int next = c->pos0;
    for (int j = 0; j < info->n_blocks; j++) {
        proto_kv_block_slice sl;
        if (proto_kv_block_slice_of(c, info, j, &sl)) {
            ok = 0;
            break;
        }
        int p = sl.block * g->bt + sl.offset;
        ok &= p == next && sl.n_tokens >= 1 && sl.offset + sl.n_tokens <= g->bt &&
              sl.token0 == p - c->pos0;
        size_t vpt = proto_kv_value_bytes(c->dtype, 1, c->n_kv_heads, c->head_dim);
        size_t spt = 2 * proto_kv_scale_count(c->dtype, 1, c->n_kv_heads, c->head_dim);
        ok &= sl.value_bytes == vpt * (size_t)sl.n_tokens && sl.scale_bytes == spt * (size_t)sl.n_tokens;
        ok &= !memcmp(info->payload + sl.k, w->k + vpt * (size_t)sl.token0, sl.value_bytes) &&
              !memcmp(info->payload + sl.v, w->v + vpt * (size_t)sl.token0, sl.value_bytes) &&
              !memcmp(info->payload + sl.k_scale, (const uint8_t *)w->k_scale + spt * (size_t)sl.token0,
                      sl.scale_bytes) &&
              !memcmp(info->payload + sl.v_scale, (const uint8_t *)w->v_scale + spt * (size_t)sl.token0,
                      sl.scale_bytes);
        for (int t = 0; t < sl.n_tokens; t++)
            if (p + t - 96 >= 0 && p + t - 96 < 64) g->covered[p + t - 96]++;
        next = p + sl.n_tokens;
    }
    ok &= next == c->pos0 + c->n_tokens;
    proto_kv_block_slice sl;
    ok &= proto_kv_block_slice_of(c, info, info->n_blocks, &sl) == PROTO_KV_ERR_BOUNDS &&
          proto_kv_block_slice_of(c, info, -1, &sl) == PROTO_KV_ERR_BOUNDS;
    if (!ok) g->bad++;
    return 0;
}

TEST(kv_wire_v2_blocks_describe_each_chunk)
{
    /* pos0 101: the first run [101, 106) touches blocks 25 (3 positions from offset 1) and 26
     * (2); the second [106, 109) blocks 26 (from offset 2) and 27 */
    for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++)
        for (int version = 1; version <= 2; version++) {
            stream s;
            stream_make_v(&s, dt, 101, version);
            if (version == 2) {
                CHECK_EQ(le32(s.bytes + 76), (uint32_t)BT);
                CHECK_EQ(le32(s.bytes + 80), 25u);
                CHECK_EQ(le32(s.bytes + 84), 3u);
            } else {
                CHECK_EQ(s.chunk_off[0], (size_t)PROTO_KV_HEADER_V1_BYTES);
            }
            size_t pieces[] = {0, 1, 61, 4096};
            for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
                proto_kv_expect e = expect_of(&s);
                /* version 1 states no block size: described in the receiver's (here 2) */
                e.block_tokens = version == 2 ? BT : 2;
                blocks_seen g = {.s = &s, .bt = e.block_tokens, .version = version};
                proto_kv_reader *r = proto_kv_reader_new(&e, on_blocks, &g);
                REQUIRE(r);
                CHECK_EQ(feed_all(r, s.bytes, s.n, pieces[i]), 0);
                CHECK_EQ(proto_kv_reader_finish(r), 0);
                CHECK_MSG(g.n == 2 * L && g.bad == 0, "dtype %d version %d pieces %zu: %d chunks, "
                          "%d bad (%s)", dt, version, pieces[i], g.n, g.bad, proto_kv_reader_error(r));
                for (int p = 101; p < 101 + RUN1 + RUN2; p++) CHECK_EQ(g.covered[p - 96], L);
                proto_kv_reader_free(r);
            }
            /* and a receiver that states no block size: version 2's own, version 1 the default */
            proto_kv_expect e = expect_of(&s);
            blocks_seen g = {.s = &s, .bt = version == 2 ? BT : PROTO_KV_V1_BLOCK_TOKENS,
                             .version = version};
            proto_kv_reader *r = proto_kv_reader_new(&e, on_blocks, &g);
            CHECK_EQ(proto_kv_reader_feed(r, s.bytes, s.n), 0);
            CHECK_EQ(proto_kv_reader_finish(r), 0);
            CHECK_EQ(g.bad, 0);
            proto_kv_reader_free(r);
            stream_free(&s);
        }
}

TEST(kv_wire_v2_other_block_size_refused)
{
    stream s;
    stream_make(&s, PROTO_KV_INT8, 0);
    proto_kv_expect e = expect_of(&s);
    e.block_tokens = 16; /* the receiver's blocks are not the stream's */
    char err[256];
    int seen;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_MODEL);
    CHECK_EQ(seen, 0);
    CHECK_MSG(strstr(err, "blocks of 4"), "err: %s", err);
    e.block_tokens = BT;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), 0);
    CHECK_EQ(seen, 2 * L);
    stream_free(&s);
}

/* Version 1 streams are still read and checked as before: a corrupt payload, a lying header,
 * a truncated chunk; an unknown version is refused with a message that names it. */
TEST(kv_wire_v1_still_read_and_checked)
{
    stream s;
    stream_make_v(&s, PROTO_KV_INT8, 0, 1);
    proto_kv_expect e = expect_of(&s);
    uint8_t *b = malloc(s.n);
    char err[256];
    int seen;
    CHECK_EQ(run_reader(&s, s.bytes, s.n, &e, &seen, err, sizeof err), 0);
    CHECK_EQ(seen, 2 * L);
    memcpy(b, s.bytes, s.n);
    b[s.chunk_off[2] + PROTO_KV_CHUNK_HEADER_V1_BYTES + 9] ^= 0x20;
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_CRC);
    CHECK_EQ(seen, 2);
    memcpy(b, s.bytes, s.n);
    put32(b + s.chunk_off[1] + 12, RUN1 + 1);
    reseal_chunk_header_n(b + s.chunk_off[1], PROTO_KV_CHUNK_HEADER_V1_BYTES);
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_ORDER);
    CHECK_EQ(seen, 1);
    CHECK_EQ(run_reader(&s, s.bytes, s.chunk_off[4] + 30, &e, &seen, err, sizeof err),
             PROTO_KV_ERR_TRUNCATED);
    CHECK_EQ(seen, 4);
    /* v1 with reserved bytes where version 2 has its block fields: refused */
    memcpy(b, s.bytes, s.n);
    put32(b + 76, BT);
    reseal_header(b);
    CHECK_EQ(run_reader(&s, b, s.n, &e, &seen, err, sizeof err), PROTO_KV_ERR_VERSION);
    /* version 9: refused at its first 12 bytes, whatever follows */
    memcpy(b, s.bytes, s.n);
    b[8] = 9;
    CHECK_EQ(run_reader(&s, b, 12, &e, &seen, err, sizeof err), PROTO_KV_ERR_VERSION);
    CHECK_MSG(strstr(err, "version 9") && strstr(err, "1 and 2"), "err: %s", err);
    free(b);
    stream_free(&s);
}

/* A stream cut anywhere — inside the header, a chunk header or a payload — delivers only the
 * chunks that arrived whole, and finish says it was truncated. */
TEST(kv_wire_truncated_anywhere)
{
    stream s;
    stream_make(&s, PROTO_KV_INT4, 40);
    proto_kv_expect e = expect_of(&s);
    size_t cuts[] = {0, 5, 12, 100, PROTO_KV_HEADER_BYTES, s.chunk_off[1] - 1, s.chunk_off[1],
                     s.chunk_off[1] + 10, s.chunk_off[3] + PROTO_KV_CHUNK_HEADER_BYTES + 1, s.n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        for (size_t piece = 0; piece <= 7; piece += 7) {
            got g = {.s = &s};
            proto_kv_reader *r = proto_kv_reader_new(&e, on_chunk, &g);
            CHECK_EQ(feed_all(r, s.bytes, cuts[i], piece), 0);
            int boundary = cuts[i] == PROTO_KV_HEADER_BYTES;
            for (int c = 0; c < s.n_chunks; c++) boundary |= cuts[i] == s.chunk_off[c];
            CHECK_MSG(proto_kv_reader_at_boundary(r) == boundary, "cut at %zu", cuts[i]);
            CHECK_MSG(proto_kv_reader_finish(r) == PROTO_KV_ERR_TRUNCATED, "cut at %zu", cuts[i]);
            CHECK(!proto_kv_reader_at_boundary(r));
            int whole = 0;
            for (int c = 0; c < s.n_chunks; c++)
                if ((c + 1 < s.n_chunks ? s.chunk_off[c + 1] : s.n) <= cuts[i]) whole++;
            CHECK_MSG(g.n == whole && g.mismatches == 0, "cut at %zu: %d chunks, %d whole", cuts[i],
                      g.n, whole);
            CHECK(proto_kv_reader_error(r)[0]);
            proto_kv_reader_free(r);
        }
    }
    stream_free(&s);
}
