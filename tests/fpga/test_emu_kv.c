/* KV shipping end to end on the emulated card: CPU quantize -> wire -> per-layer xrtBOWrite +
 * sync into HBM banks -> the kv_gather kernel reads it back -> exactly the bytes written; and a
 * corrupted chunk is stopped by the reader before any of it reaches the card. */
#include "cpu/kv_quant.h"
#include "proto/crc32c.h"
#include "proto/kv_wire.h"
#include "tests/fpga/emu_util.h"
#include "tests/test.h"
#include <stdlib.h>

enum { NL = 4, NH = 2, HD = 32, NT = 37, POS0 = 0 };

typedef struct ship {
    fpga_xrt *x;
    xrtDeviceHandle d;
    xrtBufferHandle bo[NL]; /* one region per layer, layer l in pseudo-channel l */
    size_t fill[NL];
    int chunks;
} ship;

/* The receiving side of an import: each validated chunk's payload goes verbatim into its
 * layer's bank (host copy, then exactly that range synced). */
static int ship_chunk(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                      const proto_kv_chunk_info *info)
{
    ship *s = ctx;
    int l = c->layer;
    int rc = fpga_xrt_bo_write(s->x, s->bo[l], info->payload, info->payload_bytes, s->fill[l]);
    if (!rc)
        rc = fpga_xrt_bo_sync(s->x, s->bo[l], XCL_BO_SYNC_BO_TO_DEVICE, info->payload_bytes,
                              s->fill[l]);
    if (rc) return rc;
    s->fill[l] += info->payload_bytes;
    s->chunks++;
    return 0;
}

/* Builds the stream of one prompt of NT tokens sent as two runs (a chunked prefill: RUN1 then
 * NT - RUN1 positions). Returns its bytes; off[r][l] is where run r's chunk of layer l starts. */
enum { RUN1 = 20 };
static uint8_t *make_stream(enum proto_kv_dtype dt, size_t *n, size_t off[2][NL], float *k0)
{
    size_t cap = PROTO_KV_HEADER_BYTES +
                 2 * NL * (PROTO_KV_CHUNK_HEADER_BYTES + 4 * NT * NH * HD + 4096);
    uint8_t *b = malloc(cap);
    proto_kv_header h = {.n_layers = NL, .n_kv_heads = NH, .head_dim = HD, .n_tokens = NT,
                         .pos0 = POS0, .dtype = dt, .block_tokens = 16};
    memset(h.fingerprint, 0x5a, 32);
    proto_kv_header_write(&h, b);
    *n = PROTO_KV_HEADER_BYTES;
    unsigned st = 99;
    /* All floats first, (layer, token, head, dim), so that both runs slice the same data. */
    static float k[NL][NT * NH * HD], v[NL][NT * NH * HD];
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < NT * NH * HD; i++) {
            st = st * 1664525u + 1013904223u;
            k[l][i] = (float)(int)(st >> 16 & 0xfff) / 256.0f - 8.0f;
            v[l][i] = (float)(int)(st >> 4 & 0xfff) / 1024.0f - 2.0f;
        }
    memcpy(k0, k[0], sizeof k[0]);
    int runs[2][2] = {{0, RUN1}, {RUN1, NT - RUN1}};
    for (int r = 0; r < 2; r++)
        for (int l = 0; l < NL; l++) {
            int p = runs[r][0], cnt = runs[r][1];
            size_t need = cpu_kv_layer_bytes(dt, cnt, NH, HD);
            void *q = aligned_alloc(8, (need + 7) & ~(size_t)7);
            proto_kv_layer c;
            cpu_kv_quantize_layer(dt, k[l] + (size_t)p * NH * HD, v[l] + (size_t)p * NH * HD, l,
                                  POS0 + p, cnt, NH, HD, q, need, &c);
            off[r][l] = *n;
            *n += (size_t)proto_kv_chunk_write(&h, &c, b + *n, cap - *n);
            free(q);
        }
    return b;
}

/* Bytes of the chunk at offset o of the stream (payload only). */
static size_t payload_len(const uint8_t *wire, size_t o)
{
    const uint8_t *p = wire + o + 32; /* payload_bytes, little-endian u64 */
    size_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int open_ship(ship *s, fpga_xrt *x)
{
    memset(s, 0, sizeof *s);
    s->x = x;
    if (fpga_xrt_device_open(x, 0, &s->d)) return -1;
    for (int l = 0; l < NL; l++)
        if (fpga_xrt_bo_alloc(x, s->d, 1 << 20, 0, (uint32_t)l, &s->bo[l])) return -1;
    return 0;
}

static void close_ship(ship *s)
{
    for (int l = 0; l < NL; l++)
        if (s->bo[l]) fpga_xrt_bo_free(s->x, s->bo[l]);
    fpga_xrt_device_close(s->x, s->d);
}

/* kv_gather reads layer l's region back; returns the bytes (caller frees). */
static uint8_t *gather_layer(ship *s, xrtKernelHandle k, xrtBufferHandle out, int l, size_t n)
{
    uint8_t *got = malloc(n);
    if (t_emu_gather(s->x, k, s->bo[l], out, 0, 0, n, 5000, NULL) ||
        fpga_xrt_bo_sync(s->x, out, XCL_BO_SYNC_BO_FROM_DEVICE, n, 0) ||
        fpga_xrt_bo_read(s->x, out, got, n, 0)) {
        t_fail(__FILE__, __LINE__, "gather layer %d: %s", l, fpga_xrt_error());
        free(got);
        return NULL;
    }
    return got;
}

TEST(emu_kv_round_trip_exact_bytes)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++) {
        size_t n, off[2][NL];
        float k0[NT * NH * HD];
        uint8_t *wire = make_stream(dt, &n, off, k0);
        ship s;
        REQUIRE(open_ship(&s, x) == 0);
        uint8_t fp[32];
        memset(fp, 0x5a, 32);
        proto_kv_expect e = {.fingerprint = fp, .n_layers = NL, .n_kv_heads = NH, .head_dim = HD,
                             .max_tokens = 4096, .max_pos = 4096};
        proto_kv_reader *r = proto_kv_reader_new(&e, ship_chunk, &s);
        REQUIRE(r);
        /* Arrives in pieces, as over a socket. */
        for (size_t p = 0; p < n; p += 1000)
            CHECK_EQ(proto_kv_reader_feed(r, wire + p, p + 1000 <= n ? 1000 : n - p), 0);
        CHECK_EQ(proto_kv_reader_finish(r), 0);
        CHECK_EQ(s.chunks, 2 * NL);
        proto_kv_reader_free(r);

        xrtKernelHandle k;
        REQUIRE(t_emu_kernel(x, s.d, "kv_gather", &k) == 0);
        xrtBufferHandle out;
        REQUIRE(fpga_xrt_bo_alloc(x, s.d, 1 << 20, 0, 31, &out) == 0);
        size_t total = 0;
        for (int l = 0; l < NL; l++) {
            /* The layer's region holds run 1's payload then run 2's, exactly as sent. */
            size_t len0 = payload_len(wire, off[0][l]), len1 = payload_len(wire, off[1][l]);
            size_t len = len0 + len1;
            uint8_t *sent = malloc(len);
            memcpy(sent, wire + off[0][l] + PROTO_KV_CHUNK_HEADER_BYTES, len0);
            memcpy(sent + len0, wire + off[1][l] + PROTO_KV_CHUNK_HEADER_BYTES, len1);
            CHECK_EQ(s.fill[l], len);
            uint8_t *got = gather_layer(&s, k, out, l, len);
            REQUIRE(got);
            CHECK_MSG(memcmp(got, sent, len) == 0, "dtype %d layer %d: HBM differs", dt, l);
            /* Each chunk header's payload CRC holds for what the kernel read. */
            for (int r = 0; r < 2; r++) {
                const uint8_t *h = wire + off[r][l];
                uint32_t crc = (uint32_t)h[40] | (uint32_t)h[41] << 8 | (uint32_t)h[42] << 16 |
                               (uint32_t)h[43] << 24;
                CHECK_EQ(proto_crc32c(0, got + (r ? len0 : 0), r ? len1 : len0), crc);
            }
            if (l == 0) {
                /* ... and run 1's K section is what the quantizer made of the floats. */
                uint8_t q[NT * NH * HD];
                uint16_t sc[NT * NH * 2];
                REQUIRE(cpu_kv_quantize(dt, k0, RUN1, NH, HD, q, sc) == 0);
                CHECK(memcmp(got, q, proto_kv_value_bytes(dt, RUN1, NH, HD)) == 0);
            }
            free(got);
            free(sent);
            total += len;
        }
        fpga_emu_card_stats st;
        REQUIRE(fpga_xrt_emu_card_stats(x, s.d, &st) == 0);
        CHECK_EQ(st.h2d_bytes, total);
        CHECK_EQ(st.h2d_syncs, 2 * NL);
        for (int l = 0; l < NL; l++) CHECK_EQ(st.bank_used[l], 1 << 20);
        fpga_xrt_bo_free(x, out);
        fpga_xrt_kernel_close(x, k);
        close_ship(&s);
        free(wire);
    }
    fpga_xrt_free(x);
}

TEST(emu_kv_corrupt_chunk_never_reaches_the_card)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    size_t n, off[2][NL];
    float k0[NT * NH * HD];
    uint8_t *wire = make_stream(PROTO_KV_INT8, &n, off, k0);
    /* One bit in layer 2's K, in the second run: the whole first run has been shipped. */
    wire[off[1][2] + PROTO_KV_CHUNK_HEADER_BYTES + 123] ^= 0x04;
    ship s;
    REQUIRE(open_ship(&s, x) == 0);
    proto_kv_expect e = {.n_layers = NL, .n_kv_heads = NH, .head_dim = HD, .max_tokens = NT};
    proto_kv_reader *r = proto_kv_reader_new(&e, ship_chunk, &s);
    REQUIRE(r);
    CHECK_EQ(proto_kv_reader_feed(r, wire, n), PROTO_KV_ERR_CRC);
    CHECK_EQ(s.chunks, NL + 2);
    proto_kv_reader_free(r);
    /* Run 1 and run 2's layers 0, 1 crossed PCIe; nothing of the corrupt chunk did. */
    size_t len0 = payload_len(wire, off[0][2]), len1 = payload_len(wire, off[1][2]);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(x, s.d, &st) == 0);
    CHECK_EQ(st.h2d_syncs, NL + 2);
    CHECK_EQ(st.h2d_bytes, s.fill[0] + s.fill[1] + s.fill[2] + s.fill[3]);
    CHECK_EQ(s.fill[2], len0);
    CHECK_EQ(s.fill[3], len0);
    xrtKernelHandle k;
    REQUIRE(t_emu_kernel(x, s.d, "kv_gather", &k) == 0);
    xrtBufferHandle out;
    REQUIRE(fpga_xrt_bo_alloc(x, s.d, 1 << 20, 0, 31, &out) == 0);
    uint8_t *got = gather_layer(&s, k, out, 2, len0 + len1);
    REQUIRE(got);
    CHECK(memcmp(got, wire + off[0][2] + PROTO_KV_CHUNK_HEADER_BYTES, len0) == 0);
    int zeros = 1;
    for (size_t i = len0; i < len0 + len1; i++) zeros &= got[i] == 0;
    CHECK_MSG(zeros, "bytes of the corrupt chunk reached HBM");
    free(got);
    fpga_xrt_bo_free(x, out);
    fpga_xrt_kernel_close(x, k);
    close_ship(&s);
    free(wire);
    fpga_xrt_free(x);
}
