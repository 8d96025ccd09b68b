/* CRC-32C beyond the published vectors (tests/proto/test_kv_wire.c has those): every fast path
 * proto_crc32c may take equal to the table path on random buffers, lengths and alignments, and
 * proto_crc32c_combine equal to the CRC of the whole buffer on random splits. */
#include "proto/crc32c.h"
#include "tests/test.h"
#include <stdint.h>
#include <stdlib.h>

static uint64_t rnd_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    /* xorshift64* */
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 0x2545F4914F6CDD1Dull;
}

#define BIG ((size_t)3 << 20)

static uint8_t *random_buffer(void)
{
    uint8_t *m = malloc(BIG + 64);
    if (m)
        for (size_t i = 0; i < BIG + 64; i++) m[i] = (uint8_t)(rnd() >> 32);
    return m;
}

/* Lengths around every threshold and pass size of the paths (256-bit folding from 256 bytes in
 * 128-byte passes, 512-bit folding from 1 KiB in 256-byte passes, 16-byte folds, the three
 * streams' 3 x 4096 bytes), then random ones up to megabytes. */
static size_t pick_len(int i)
{
    static const size_t edge[] = {0, 1, 7, 8, 15, 16, 17, 255, 256, 257, 383, 384, 511, 512, 767, 1023, 1024,
                                  1025, 1040, 1279, 1280, 1535, 2047, 2048, 4095, 12287, 12288, 12289, 65536};
    int ne = (int)(sizeof edge / sizeof edge[0]);
    if (i < ne) return edge[i];
    if (i % 4 == 0) return (size_t)(rnd() % BIG);
    return (size_t)(rnd() % 20000);
}

TEST(crc32c_every_path_equals_the_table_on_random_buffers)
{
    uint8_t *m = random_buffer();
    REQUIRE(m);
    /* each path the CPU has: the widest folding, the 256-bit folding alone, no folding */
    for (int mode = 0; mode < 3; mode++) {
        proto_crc32c_no_512 = mode >= 1;
        proto_crc32c_no_fold = mode >= 2;
        const char *path = proto_crc32c_path();
        for (int i = 0; i < 120; i++) {
            size_t n = pick_len(i), off = (size_t)(rnd() % 64);
            uint32_t init = i % 3 ? (uint32_t)rnd() : 0;
            uint32_t want = proto_crc32c_sw(init, m + off, n);
            CHECK_MSG(proto_crc32c(init, m + off, n) == want, "%s: length %zu offset %zu from %08x", path, n, off,
                      init);
        }
    }
    proto_crc32c_no_512 = 0;
    proto_crc32c_no_fold = 0;
    free(m);
}

TEST(crc32c_combine_equals_the_whole_buffer_on_random_splits)
{
    uint8_t *m = random_buffer();
    REQUIRE(m);
    for (int i = 0; i < 200; i++) {
        size_t n = pick_len(i), off = (size_t)(rnd() % 64);
        size_t cut = n ? (size_t)(rnd() % (n + 1)) : 0;
        if (i % 10 == 0) cut = 0;
        if (i % 10 == 1) cut = n;
        uint32_t whole = proto_crc32c(0, m + off, n);
        uint32_t a = proto_crc32c(0, m + off, cut), b = proto_crc32c(0, m + off + cut, n - cut);
        CHECK_MSG(proto_crc32c_combine(a, b, n - cut) == whole, "length %zu cut at %zu", n, cut);
        /* three parts joined left to right */
        size_t cut2 = cut + (n > cut ? (size_t)(rnd() % (n - cut + 1)) : 0);
        uint32_t b1 = proto_crc32c(0, m + off + cut, cut2 - cut), b2 = proto_crc32c(0, m + off + cut2, n - cut2);
        CHECK_EQ(proto_crc32c_combine(proto_crc32c_combine(a, b1, cut2 - cut), b2, n - cut2), whole);
    }
    /* the identities: nothing after A leaves it, and the published check value from its halves */
    CHECK_EQ(proto_crc32c_combine(0xE3069283u, 0, 0), 0xE3069283u);
    CHECK_EQ(proto_crc32c_combine(proto_crc32c(0, "1234", 4), proto_crc32c(0, "56789", 5), 5), 0xE3069283u);
    /* a part longer than 4 GiB: 2^32 zero bytes shift by x^(2^35), past any table of 32 powers;
     * checked against two shifts of 2^31 */
    uint32_t a = proto_crc32c(0, m, 4096);
    uint32_t zero_crc_2g = 0, zero_crc_4g;
    {
        /* the CRC of 2^31 zero bytes, built by doubling from 1 MiB of zeros */
        uint8_t *z = calloc(1, (size_t)1 << 20);
        REQUIRE(z);
        zero_crc_2g = proto_crc32c(0, z, (size_t)1 << 20);
        for (uint64_t len = (uint64_t)1 << 20; len < ((uint64_t)1 << 31); len *= 2)
            zero_crc_2g = proto_crc32c_combine(zero_crc_2g, zero_crc_2g, len);
        zero_crc_4g = proto_crc32c_combine(zero_crc_2g, zero_crc_2g, (uint64_t)1 << 31);
        free(z);
    }
    uint32_t two_steps = proto_crc32c_combine(proto_crc32c_combine(a, zero_crc_2g, (uint64_t)1 << 31), zero_crc_2g,
                                              (uint64_t)1 << 31);
    CHECK_EQ(proto_crc32c_combine(a, zero_crc_4g, (uint64_t)1 << 32), two_steps);
    free(m);
}
