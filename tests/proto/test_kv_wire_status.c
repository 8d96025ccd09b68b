/* The KV wire reader's statuses in the process's one error space (scheduler/sched.h): every
 * PROTO_KV_ERR_* lies in -300 .. -399 with a name of its own, and a status the reader's callback
 * returns (a device's, -1 .. -99) comes out of the reader unchanged, never confusable with the
 * reader's own. tests/scheduler/test_sched_status.c checks the three ranges against each other. */
#include "proto/kv_wire.h"
#include "tests/test.h"
#include <stdint.h>

static const int kv_codes[] = {PROTO_KV_ERR_MAGIC,  PROTO_KV_ERR_VERSION,   PROTO_KV_ERR_MODEL,
                               PROTO_KV_ERR_BOUNDS, PROTO_KV_ERR_ORDER,     PROTO_KV_ERR_CRC,
                               PROTO_KV_ERR_TRUNCATED, PROTO_KV_ERR_NOMEM, PROTO_KV_ERR_STATE};
#define N_KV ((int)(sizeof kv_codes / sizeof kv_codes[0]))

TEST(kv_wire_status_range_and_names)
{
    CHECK_EQ(PROTO_KV_ERR_RANGE_HI, -300);
    CHECK_EQ(PROTO_KV_ERR_RANGE_LO, -399);
    CHECK_STR(proto_kv_wire_strerror(PROTO_KV_OK), "ok");
    for (int i = 0; i < N_KV; i++) {
        int st = kv_codes[i];
        CHECK_MSG(PROTO_KV_IS_ERR(st), "%d outside -300..-399", st);
        const char *name = proto_kv_wire_strerror(st);
        CHECK_MSG(name && name[0] && strcmp(name, "unknown KV wire status") && strcmp(name, "ok"),
                  "%d: \"%s\"", st, name ? name : "(null)");
        for (int j = 0; j < i; j++) {
            CHECK_MSG(kv_codes[j] != st, "two codes are %d", st);
            CHECK_MSG(strcmp(proto_kv_wire_strerror(kv_codes[j]), name), "%d and %d are both \"%s\"",
                      kv_codes[j], st, name);
        }
    }
    /* every named value of the range is one of the codes above */
    int named = 0;
    for (int st = PROTO_KV_ERR_RANGE_HI; st >= PROTO_KV_ERR_RANGE_LO; st--)
        named += strcmp(proto_kv_wire_strerror(st), "unknown KV wire status") != 0;
    CHECK_EQ(named, N_KV);
    /* outside the range, nothing is the reader's */
    for (int st = -1; st > -300; st--) CHECK(!PROTO_KV_IS_ERR(st));
    for (int st = -400; st > -1000; st--) CHECK(!PROTO_KV_IS_ERR(st));
    CHECK_STR(proto_kv_wire_strerror(-6), "unknown KV wire status");
    CHECK_STR(proto_kv_wire_strerror(-204), "unknown KV wire status");
}

/* ---------------------------------------------------------------- a one-chunk stream */

enum { D = 64 };

static size_t one_chunk_stream(uint8_t *out, size_t cap, const uint8_t fp[32])
{
    static uint8_t k[D], v[D];
    static uint16_t ks = 0x3c00, vs = 0x3c00; /* fp16 1.0 */
    for (int i = 0; i < D; i++) {
        k[i] = (uint8_t)(i * 3);
        v[i] = (uint8_t)(200 - i);
    }
    proto_kv_header h = {.n_layers = 1, .n_kv_heads = 1, .head_dim = D, .n_tokens = 1, .pos0 = 0,
                         .dtype = PROTO_KV_INT8, .block_tokens = 16};
    memcpy(h.fingerprint, fp, 32);
    if (proto_kv_header_write(&h, out) != PROTO_KV_HEADER_BYTES) return 0;
    proto_kv_layer c = {.layer = 0, .pos0 = 0, .n_tokens = 1, .n_kv_heads = 1, .head_dim = D,
                        .dtype = PROTO_KV_INT8, .k = k, .v = v, .k_scale = &ks, .v_scale = &vs};
    long long w = proto_kv_chunk_write(&h, &c, out + PROTO_KV_HEADER_BYTES, cap - PROTO_KV_HEADER_BYTES);
    return w > 0 ? PROTO_KV_HEADER_BYTES + (size_t)w : 0;
}

static int refuse(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                  const proto_kv_chunk_info *info)
{
    return *(const int *)ctx;
}

TEST(kv_wire_status_callback_passes_through)
{
    uint8_t fp[32], bytes[4096];
    for (int i = 0; i < 32; i++) fp[i] = (uint8_t)i;
    size_t n = one_chunk_stream(bytes, sizeof bytes, fp);
    REQUIRE(n > PROTO_KV_HEADER_BYTES);
    proto_kv_expect e = {.fingerprint = fp, .n_layers = 1, .n_kv_heads = 1, .head_dim = D,
                         .max_tokens = 16, .max_pos = 4096};
    /* the device's statuses (scheduler/accel.h's range, -1 .. -99: a corrupt import, a
     * fault) come out as they went in, outside the reader's own range */
    const int theirs[] = {-6, -2, -1, -99};
    for (int i = 0; i < 4; i++) {
        int st = theirs[i];
        proto_kv_reader *r = proto_kv_reader_new(&e, refuse, &st);
        REQUIRE(r);
        int got = proto_kv_reader_feed(r, bytes, n);
        CHECK_EQ(got, st);
        CHECK(!PROTO_KV_IS_ERR(got));
        CHECK_EQ(proto_kv_reader_feed(r, bytes, 1), PROTO_KV_ERR_STATE); /* then the reader's */
        proto_kv_reader_free(r);
    }
    /* the reader's own refusal of the same bytes, one flipped: in its range */
    int zero = 0;
    bytes[n - 1] ^= 1;
    proto_kv_reader *r = proto_kv_reader_new(&e, refuse, &zero);
    REQUIRE(r);
    int got = proto_kv_reader_feed(r, bytes, n);
    CHECK(PROTO_KV_IS_ERR(got));
    CHECK_MSG(got == PROTO_KV_ERR_CRC || got == PROTO_KV_ERR_BOUNDS, "%d: %s", got,
              proto_kv_wire_strerror(got));
    proto_kv_reader_free(r);
}
