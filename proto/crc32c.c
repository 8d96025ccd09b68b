/* proto/crc32c.c — CRC-32C, table-driven (slicing-by-8) with an SSE4.2 fast path.
 *
 * The fast path runs three crc32 instruction streams over three adjacent blocks of STRIDE bytes
 * at once (the instruction has a latency of 3 cycles and a throughput of 1 per cycle: one stream
 * waits on itself, three keep the unit busy) and joins them: the CRC register is linear over
 * GF(2), so the register after A then B, started from x, is Z(reg after A from x) ^ (reg after
 * B from 0), Z being "STRIDE zero bytes more" — a linear map on 32 bits, applied with four
 * 256-entry tables (zeros[][]) built once from the table path. About 3x the single stream on
 * the KV chunks the wire reader checks (megabytes each). */
#include "proto/crc32c.h"
#include <pthread.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define POLY 0x82F63B78u /* Castagnoli, bit-reflected */

static uint32_t table[8][256];
#define STRIDE 4096
/* the 512-bit folding from here on (below, the 256-bit one: its reductions cost less) */
#define FOLD512_MIN 1024
static uint32_t zeros[4][256]; /* the register after STRIDE zero bytes, by byte of the start */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int have_sse42, have_fold, have_fold512;
/* The folding path's constants (fold_init), each x^n mod P bit-reflected and shifted left by one
 * (a 33-bit multiplier): per distance, the one for a lane's first 8 bytes, then its last 8. */
static uint64_t k_1024[2], k_128[2], k_2048[2], k_512[2];
/* x^(2^k) mod P (bit-reflected), k = 0..66: what proto_crc32c_combine shifts by (8 len_b < 2^67) */
static uint32_t x2n[67];

/* x^n mod P, P = the Castagnoli polynomial in normal bit order (x^32 implied). */
static uint32_t xpow_mod(unsigned n, uint32_t poly)
{
    uint32_t r = 1; /* x^0 */
    while (n--) r = (r & 0x80000000u) ? (r << 1) ^ poly : r << 1;
    return r;
}

/* a(x) b(x) mod P, both bit-reflected (x^0 is the top bit): the shift of zlib's crc32_combine,
 * for CRC-32C's polynomial. */
static uint32_t mult_mod(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (uint32_t m = 1u << 31; m && (a & (m | (m - 1))); m >>= 1) {
        if (a & m) p ^= b;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

static uint64_t fold_k(unsigned n, uint32_t poly)
{
    uint32_t v = xpow_mod(n, poly), rv = 0;
    for (int i = 0; i < 32; i++)
        if (v >> i & 1) rv |= 1u << (31 - i);
    return (uint64_t)rv << 1;
}

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    /* table[k][i]: the CRC of byte i followed by k zero bytes, so that 8 bytes fold at once. */
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
    have_fold = have_sse42 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq");
    have_fold512 = have_fold && __builtin_cpu_supports("avx512f");
#endif
    /* folding a 128-bit lane forward by D bits: its first 8 bytes (the higher powers, bits
     * reflected) times x^(D+32), its last 8 times x^(D-32) (Intel, "Fast CRC Computation for
     * Generic Polynomials Using PCLMULQDQ", 2009, reflected form) */
    k_1024[0] = fold_k(1024 + 32, 0x1EDC6F41u);
    k_1024[1] = fold_k(1024 - 32, 0x1EDC6F41u);
    k_128[0] = fold_k(128 + 32, 0x1EDC6F41u);
    k_128[1] = fold_k(128 - 32, 0x1EDC6F41u);
    k_2048[0] = fold_k(2048 + 32, 0x1EDC6F41u);
    k_2048[1] = fold_k(2048 - 32, 0x1EDC6F41u);
    k_512[0] = fold_k(512 + 32, 0x1EDC6F41u);
    k_512[1] = fold_k(512 - 32, 0x1EDC6F41u);
    /* x^1, then each the square of the one before (zlib's crc32_combine tables) */
    x2n[0] = 1u << 30;
    for (int k = 1; k < 67; k++) x2n[k] = mult_mod(x2n[k - 1], x2n[k - 1]);
    /* Z(1 << k) for every bit k, then each table as the sums of its byte's bits */
    static const uint8_t zero_block[STRIDE];
    uint32_t z[32];
    for (int k = 0; k < 32; k++) {
        uint32_t c = 1u << k;
        for (size_t i = 0; i < STRIDE; i++) c = (c >> 8) ^ table[0][(c ^ zero_block[i]) & 0xff];
        z[k] = c;
    }
    for (int j = 0; j < 4; j++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int k = 0; k < 8; k++)
                if (b >> k & 1) v ^= z[8 * j + k];
            zeros[j][b] = v;
        }
}

/* The register after STRIDE zero bytes more. */
static inline uint32_t shift_stride(uint32_t c)
{
    return zeros[0][c & 0xff] ^ zeros[1][(c >> 8) & 0xff] ^ zeros[2][(c >> 16) & 0xff] ^
           zeros[3][c >> 24];
}

static uint32_t sw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
/* The crc32 instruction over p[0..n) in one stream, a word at a time: what is left after the
 * three streams (hw) or the folding (fold). Inlined into both. */
__attribute__((target("sse4.2"), always_inline)) static inline uint32_t
hw_tail(uint64_t c64, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    while (n--) c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
    return (uint32_t)c64;
}

__attribute__((target("sse4.2"))) static uint32_t hw(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    while (n && ((uintptr_t)p & 7)) {
        c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
        n--;
    }
    /* three streams over blocks a, b, c of STRIDE bytes, joined: c64 = Z(Z(a) ^ b) ^ c */
    while (n >= 3 * STRIDE) {
        uint64_t ca = c64, cb = 0, cc = 0;
        for (size_t i = 0; i < STRIDE; i += 8) {
            uint64_t va, vb, vc;
            memcpy(&va, p + i, 8);
            memcpy(&vb, p + STRIDE + i, 8);
            memcpy(&vc, p + 2 * STRIDE + i, 8);
            ca = __builtin_ia32_crc32di(ca, va);
            cb = __builtin_ia32_crc32di(cb, vb);
            cc = __builtin_ia32_crc32di(cc, vc);
        }
        c64 = shift_stride(shift_stride((uint32_t)ca) ^ (uint32_t)cb) ^ (uint32_t)cc;
        p += 3 * STRIDE;
        n -= 3 * STRIDE;
    }
    return hw_tail(c64, p, n);
}

/* x folded forward by 128 bits (k128) and xored with next. */
__attribute__((target("sse4.2,pclmul"), always_inline)) static inline __m128i
fold128(__m128i x, __m128i k128, __m128i next)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k128, 0x00), _mm_clmulepi64_si128(x, k128, 0x11)), next);
}

/* The end both folds share: the 16-byte blocks left folded into x, x reduced through the CRC
 * instruction, then the last bytes. */
__attribute__((target("sse4.2,pclmul"), always_inline)) static inline uint32_t
fold_end(__m128i x, __m128i k128, const uint8_t *p, size_t n)
{
    for (; n >= 16; p += 16, n -= 16) x = fold128(x, k128, _mm_loadu_si128((const __m128i *)p));
    uint64_t c64 = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(x));
    c64 = __builtin_ia32_crc32di(c64, (uint64_t)_mm_extract_epi64(x, 1));
    return hw_tail(c64, p, n);
}

/* Carry-less folding (VPCLMULQDQ on 256-bit registers, AVX2): four registers of two 128-bit
 * lanes each take 128 bytes a pass; each lane is folded forward by 1024 bits (times x^1024 mod P,
 * as two 64x33-bit carry-less products) and the next bytes xored in, so eight independent
 * chains keep the multiplier busy where the crc32 instruction's three streams take one 8-byte
 * word a cycle. At the end the eight lanes are folded into one by 128 bits at a time, and the
 * 16 bytes left in it (the register reduced, congruent to everything before modulo P) and the
 * tail go through the crc32 instruction from 0 — no Barrett reduction needed. n >= 256. */
__attribute__((target("sse4.2,avx2,pclmul,vpclmulqdq"))) static uint32_t fold(uint32_t c, const uint8_t *p, size_t n)
{
    const __m256i k1024 = _mm256_set_epi64x((long long)k_1024[1], (long long)k_1024[0], (long long)k_1024[1],
                                            (long long)k_1024[0]);
    const __m128i k128 = _mm_set_epi64x((long long)k_128[1], (long long)k_128[0]);
    __m256i x0 = _mm256_loadu_si256((const __m256i *)p);
    __m256i x1 = _mm256_loadu_si256((const __m256i *)(p + 32));
    __m256i x2 = _mm256_loadu_si256((const __m256i *)(p + 64));
    __m256i x3 = _mm256_loadu_si256((const __m256i *)(p + 96));
    x0 = _mm256_xor_si256(x0, _mm256_set_epi64x(0, 0, 0, (long long)c)); /* the register so far */
    p += 128;
    n -= 128;
#define FOLD256(x, at)                                                                             \
    x = _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k1024, 0x00),                 \
                                          _mm256_clmulepi64_epi128(x, k1024, 0x11)),                \
                         _mm256_loadu_si256((const __m256i *)(at)))
    while (n >= 128) {
        FOLD256(x0, p);
        FOLD256(x1, p + 32);
        FOLD256(x2, p + 64);
        FOLD256(x3, p + 96);
        p += 128;
        n -= 128;
    }
#undef FOLD256
    /* the eight lanes in byte order, each folded 128 bits onto the next */
    __m128i lane[8] = {_mm256_castsi256_si128(x0), _mm256_extracti128_si256(x0, 1),
                       _mm256_castsi256_si128(x1), _mm256_extracti128_si256(x1, 1),
                       _mm256_castsi256_si128(x2), _mm256_extracti128_si256(x2, 1),
                       _mm256_castsi256_si128(x3), _mm256_extracti128_si256(x3, 1)};
    __m128i x = lane[0];
    for (int i = 1; i < 8; i++) x = fold128(x, k128, lane[i]);
    return fold_end(x, k128, p, n);
}

/* The same on 512-bit registers (AVX-512 VPCLMULQDQ): four registers of four 128-bit lanes take
 * 256 bytes a pass, each lane folded forward by 2048 bits; then each register is folded onto the
 * next by 512 bits, the last one's four lanes by 128 bits, and what is left as in fold(). The
 * xor of the two products and the next bytes is one three-way instruction (vpternlogq 0x96).
 * n >= 256. */
__attribute__((target("sse4.2,avx2,pclmul,avx512f,vpclmulqdq"))) static uint32_t fold512(uint32_t c, const uint8_t *p, size_t n)
{
    const __m512i k2048 = _mm512_set_epi64((long long)k_2048[1], (long long)k_2048[0], (long long)k_2048[1],
                                           (long long)k_2048[0], (long long)k_2048[1], (long long)k_2048[0],
                                           (long long)k_2048[1], (long long)k_2048[0]);
    const __m512i k512 = _mm512_set_epi64((long long)k_512[1], (long long)k_512[0], (long long)k_512[1],
                                          (long long)k_512[0], (long long)k_512[1], (long long)k_512[0],
                                          (long long)k_512[1], (long long)k_512[0]);
    const __m128i k128 = _mm_set_epi64x((long long)k_128[1], (long long)k_128[0]);
    __m512i x0 = _mm512_loadu_si512((const void *)p);
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 192));
    x0 = _mm512_xor_si512(x0, _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, (long long)c)); /* the register so far */
    p += 256;
    n -= 256;
    /* x = x folded by k, xored with next */
#define FOLD512(x, k, next)                                                                        \
    x = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96)
    while (n >= 256) {
        FOLD512(x0, k2048, _mm512_loadu_si512((const void *)p));
        FOLD512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        FOLD512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        FOLD512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    FOLD512(x0, k512, x1); /* x0 now stands for x0 and x1, 64 bytes later */
    FOLD512(x0, k512, x2);
    FOLD512(x0, k512, x3);
#undef FOLD512
    __m128i x = _mm512_extracti32x4_epi32(x0, 0);
    x = fold128(x, k128, _mm512_extracti32x4_epi32(x0, 1));
    x = fold128(x, k128, _mm512_extracti32x4_epi32(x0, 2));
    x = fold128(x, k128, _mm512_extracti32x4_epi32(x0, 3));
    return fold_end(x, k128, p, n);
}
#endif

uint32_t proto_crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, table_init);
    return ~sw(~crc, data, n);
}

uint32_t proto_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, table_init);
#if defined(__x86_64__)
    if (have_fold512 && n >= FOLD512_MIN && !proto_crc32c_no_fold && !proto_crc32c_no_512) return ~fold512(~crc, data, n);
    if (have_fold && n >= 256 && !proto_crc32c_no_fold) return ~fold(~crc, data, n);
    if (have_sse42) return ~hw(~crc, data, n);
#endif
    return ~sw(~crc, data, n);
}

int proto_crc32c_no_fold, proto_crc32c_no_512;

const char *proto_crc32c_path(void)
{
    pthread_once(&table_once, table_init);
    if (have_fold512 && !proto_crc32c_no_fold && !proto_crc32c_no_512) return "vpclmulqdq-512";
    return have_fold && !proto_crc32c_no_fold ? "vpclmulqdq" : have_sse42 ? "sse4.2" : "table";
}

uint32_t proto_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    pthread_once(&table_once, table_init);
    /* crc_a's register shifted by 8 len_b zero bits: times x^(8 len_b) mod P, the power built
     * from x^(2^k) for the set bits of 8 len_b (k from 3) */
    uint32_t sh = 1u << 31; /* x^0 */
    for (unsigned k = 3; len_b; len_b >>= 1, k++)
        if (len_b & 1) sh = mult_mod(x2n[k], sh);
    return mult_mod(sh, crc_a) ^ crc_b;
}
