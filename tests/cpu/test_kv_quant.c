/* The reference KV quantizer against bit patterns worked out by hand from the rule in
 * proto/kv.h, and the fp16 conversion it rounds with (model_f32_to_f16) against the
 * compiler's _Float16. */
#include "cpu/kv_quant.h"
#include "model/ckpt/model.h"
#include "tests/test.h"
#include <stdint.h>
#include <stdlib.h>

TEST(kv_fp16_conversion_matches_compiler)
{
#ifndef __FLT16_MAX__
    SKIP("this compiler has no _Float16 to compare with");
#else
    /* Every half -> float. */
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 ref;
        uint16_t hb = (uint16_t)h;
        memcpy(&ref, &hb, 2);
        float want = (float)ref, got = model_f16_to_f32(hb);
        if (want != want) CHECK_MSG(got != got, "0x%04x: NaN expected", h);
        else CHECK_MSG(memcmp(&want, &got, 4) == 0, "0x%04x: %g vs %g", h, want, got);
        if (t_failed() > 5) return;
    }
    /* A sweep of float -> half over every exponent (stride prime to the mantissa width), plus
     * the ties and edges. */
    uint32_t edges[] = {0x00000000, 0x80000000, 0x33000000, 0x33000001, 0x337fffff, 0x33800000,
                        0x387fc000, 0x387fe000, 0x38800000, 0x477fe000, 0x477fefff, 0x477ff000,
                        0x477fffff, 0x7f800000, 0xff800000, 0x3f801000, 0x3f803000, 0x3f802fff};
    for (uint64_t i = 0; i < (1ULL << 32) + 18 * 7919; i += 7919) {
        uint32_t b = i < (1ULL << 32) ? (uint32_t)i : edges[(i - (1ULL << 32)) / 7919];
        float f;
        memcpy(&f, &b, 4);
        if (f != f) continue; /* NaN payloads: only NaN-ness is specified */
        _Float16 ref = (_Float16)f;
        uint16_t want, got = model_f32_to_f16(f);
        memcpy(&want, &ref, 2);
        CHECK_MSG(want == got, "float 0x%08x: half 0x%04x expected, got 0x%04x", b, want, got);
        if (t_failed() > 5) return;
    }
    float nan = __builtin_nanf("");
    uint16_t hn = model_f32_to_f16(nan);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
#endif
}

TEST(kv_quant_int8_ties_round_to_even)
{
    /* amax 127 -> scale fp16(1.0) = 0x3c00, s = 1: q = rint(x) with ties to even. */
    float x[8] = {127, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, 1.5f, -0.5f};
    uint8_t q[8];
    uint16_t s[1];
    REQUIRE(cpu_kv_quantize_int8(x, 1, 1, 8, q, s) == 0);
    CHECK_EQ(s[0], 0x3c00);
    const uint8_t want[8] = {0x7f, 0x02, 0x04, 0xfe, 0xfc, 0x00, 0x02, 0x00};
    for (int i = 0; i < 8; i++) CHECK_MSG(q[i] == want[i], "q[%d] = 0x%02x", i, q[i]);
    /* amax 254 -> scale 2.0 (0x4000): 5 / 2 = 2.5 -> 2, 7 / 2 = 3.5 -> 4, -5 / 2 -> -2. */
    float y[4] = {254, 5, 7, -5};
    REQUIRE(cpu_kv_quantize_int8(y, 1, 1, 4, q, s) == 0);
    CHECK_EQ(s[0], 0x4000);
    CHECK_EQ((int8_t)q[0], 127);
    CHECK_EQ((int8_t)q[1], 2);
    CHECK_EQ((int8_t)q[2], 4);
    CHECK_EQ((int8_t)q[3], -2);
}

TEST(kv_quant_int8_zero_heads_and_rounded_scale)
{
    /* 2 tokens x 2 heads x 4 dims; zero heads get scale 0 and q 0 without touching the others. */
    float x[16] = {0, 0, 0, 0, 1, 2, 3, 4, -0.0f, 0, -0.0f, 0, 0, 0, 0, 0};
    uint8_t q[16];
    uint16_t s[4];
    REQUIRE(cpu_kv_quantize_int8(x, 2, 2, 4, q, s) == 0);
    CHECK_EQ(s[0], 0);
    CHECK_EQ(s[2], 0);
    CHECK_EQ(s[3], 0);
    /* 4 / 127 = 0.0314960... = 2^-5 x 1.00787 -> mantissa 8.06 -> 8: 0x2808, s = 0.031494140625;
     * q = rint(1/s = 31.75, 63.50, 95.26, 127.01) = 32, 64, 95, 127. */
    CHECK_EQ(s[1], 0x2808);
    CHECK_EQ(q[4], 32);
    CHECK_EQ(q[5], 64);
    CHECK_EQ(q[6], 95);
    CHECK_EQ(q[7], 127);
    for (int i = 0; i < 4; i++) CHECK_EQ(q[i], 0);
    for (int i = 8; i < 16; i++) CHECK_EQ(q[i], 0);
}

TEST(kv_quant_clamps_at_qmax_after_fp16_scale_rounding)
{
    /* A tiny head: amax / 127 = 1.4 x 2^-24 is an fp16 subnormal that rounds down to 2^-24
     * (bits 0x0001). Then amax / s = 177.8 > 127: the clamp is what keeps q in range. */
    const float u = 0x1p-24f;
    float amax = 127.0f * 1.4f * u;
    float x[4] = {amax, -amax, 0.6f * u, 0.5f * u};
    uint8_t q[4];
    uint16_t s[1];
    REQUIRE(cpu_kv_quantize_int8(x, 1, 1, 4, q, s) == 0);
    CHECK_EQ(s[0], 0x0001);
    CHECK_EQ((int8_t)q[0], 127);
    CHECK_EQ((int8_t)q[1], -127);
    CHECK_EQ((int8_t)q[2], 1); /* 0.6 -> 1 */
    CHECK_EQ((int8_t)q[3], 0); /* 0.5 -> 0, tie to even */
    /* Same for int4 (QMAX 7): amax / 7 = 1.4 x 2^-24 -> s = 2^-24, amax / s = 9.8 -> 7. */
    float y[8] = {7.0f * 1.4f * u, 0, 0, 0, 0, 0, 0, -7.0f * 1.4f * u};
    uint8_t q4[4];
    REQUIRE(cpu_kv_quantize_int4(y, 1, 1, 8, q4, s) == 0);
    CHECK_EQ(s[0], 0x0001);
    CHECK_EQ(q4[0], 0x07);
    CHECK_EQ(q4[3], 0x90); /* -7 in the high nibble: 0x9 */
}

TEST(kv_quant_int4_packing_and_groups)
{
    /* head_dim 8 < 32: one group per head. amax 7 -> scale 1.0. Element 2j low nibble, 2j+1
     * high, two's complement. */
    float x[8] = {7, -7, 1, -1, 0, 3, -3, 6};
    uint8_t q[4];
    uint16_t s[1];
    REQUIRE(cpu_kv_quantize_int4(x, 1, 1, 8, q, s) == 0);
    CHECK_EQ(s[0], 0x3c00);
    CHECK_EQ(q[0], 0x97);
    CHECK_EQ(q[1], 0xf1);
    CHECK_EQ(q[2], 0x30);
    CHECK_EQ(q[3], 0x6d);
    float back[8];
    REQUIRE(cpu_kv_dequantize(PROTO_KV_INT4, q, s, 1, 1, 8, back) == 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(back[i], x[i]);

    /* head_dim 64: two groups of 32, each with its own scale. Group 0: x = i - 16, amax 16,
     * 16/7 = 2.2857 = 2 x 1.142857 -> mantissa 146.3 -> 146: 0x4092, s = 2.28515625.
     * Group 1: all 0.5, 0.5/7 = 2^-4 x 1.142857 -> 0x2c92, s = 0.0714111328, q = rint(7.0017)
     * = 7. */
    float y[64];
    for (int i = 0; i < 32; i++) y[i] = (float)(i - 16);
    for (int i = 32; i < 64; i++) y[i] = 0.5f;
    uint8_t q2[32];
    uint16_t s2[2];
    REQUIRE(cpu_kv_quantize_int4(y, 1, 1, 64, q2, s2) == 0);
    CHECK_EQ(s2[0], 0x4092);
    CHECK_EQ(s2[1], 0x2c92);
    /* x = -16: -7.0017 -> -7 (0x9); x = -15: -6.564 -> -7 (0x9) => byte 0 = 0x99.
     * x = 15 (i = 31): 6.564 -> 7; x = 14 (i = 30): 6.1265 -> 6 => byte 15 = 0x76.
     * x = -8 (i = 8): -3.5009 -> -4 (0xc); x = -7 (i = 9): -3.0632 -> -3 (0xd) => byte 4 = 0xdc. */
    CHECK_EQ(q2[0], 0x99);
    CHECK_EQ(q2[15], 0x76);
    CHECK_EQ(q2[4], 0xdc);
    for (int i = 16; i < 32; i++) CHECK_EQ(q2[i], 0x77);
}

TEST(kv_quant_nan_and_inf_inputs)
{
    float nan = __builtin_nanf(""), inf = __builtin_inff();
    float x[4] = {nan, 127, -2, nan};
    uint8_t q[4];
    uint16_t s[1];
    REQUIRE(cpu_kv_quantize_int8(x, 1, 1, 4, q, s) == 0);
    CHECK_EQ(s[0], 0x3c00); /* NaN ignored by amax */
    CHECK_EQ(q[0], 0);
    CHECK_EQ(q[1], 127);
    CHECK_EQ((int8_t)q[2], -2);
    CHECK_EQ(q[3], 0);
    /* An infinite value makes an infinite scale: everything quantizes to 0 (documented). */
    float y[4] = {inf, 1, -1, 0};
    REQUIRE(cpu_kv_quantize_int8(y, 1, 1, 4, q, s) == 0);
    CHECK_EQ(s[0], 0x7c00);
    for (int i = 0; i < 4; i++) CHECK_EQ(q[i], 0);
}

static float frand(unsigned *st)
{
    *st = *st * 1103515245u + 12345u;
    return ((float)((*st >> 8) & 0xffff) / 32768.0f - 1.0f);
}

TEST(kv_quant_dequant_error_within_half_step)
{
    /* Property of round-to-nearest with an unclamped scale: |x - q s| <= s / 2 for every value
     * of normal-range heads, in both dtypes, across heads with very different magnitudes. */
    enum { T = 5, H = 3, D = 64 };
    float x[T * H * D], back[T * H * D];
    unsigned st = 7;
    for (int i = 0; i < T * H * D; i++) x[i] = frand(&st) * (float)(1 << (i / D % 7));
    uint8_t q[T * H * D];
    uint16_t s[T * H * 2];
    for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++) {
        REQUIRE(cpu_kv_quantize(dt, x, T, H, D, q, s) == 0);
        REQUIRE(cpu_kv_dequantize(dt, q, s, T, H, D, back) == 0);
        int g = proto_kv_group(dt, D);
        for (int i = 0; i < T * H * D; i++) {
            float sc = model_f16_to_f32(s[i / g]);
            CHECK_MSG(fabsf(x[i] - back[i]) <= sc / 2 * (1 + 1e-6f) + 1e-30f,
                      "dtype %d element %d: %g vs %g (s %g)", dt, i, x[i], back[i], sc);
            if (t_failed()) return;
        }
    }
}

TEST(kv_quant_layer_and_bad_shapes)
{
    enum { T = 3, H = 2, D = 32 };
    float k[T * H * D], v[T * H * D];
    for (int i = 0; i < T * H * D; i++) {
        k[i] = (float)(i % 17) - 8;
        v[i] = (float)(i % 5);
    }
    size_t need = cpu_kv_layer_bytes(PROTO_KV_INT8, T, H, D);
    CHECK_EQ(need, 2 * 192 + 2 * 16);
    uint64_t buf[64];
    proto_kv_layer L;
    CHECK_EQ(cpu_kv_quantize_layer(PROTO_KV_INT8, k, v, 4, 10, T, H, D, buf, need - 1, &L), -1);
    REQUIRE(cpu_kv_quantize_layer(PROTO_KV_INT8, k, v, 4, 10, T, H, D, buf, sizeof buf, &L) == 0);
    CHECK_EQ(L.layer, 4);
    CHECK_EQ(L.pos0, 10);
    uint8_t q[T * H * D];
    uint16_t s[T * H];
    REQUIRE(cpu_kv_quantize_int8(v, T, H, D, q, s) == 0);
    CHECK(memcmp(L.v, q, sizeof q) == 0);
    CHECK(memcmp(L.v_scale, s, sizeof s) == 0);
    /* Shapes the format cannot carry. */
    CHECK_EQ(cpu_kv_quantize_int4(k, 1, 1, 48, q, s), -1); /* 48 is not a multiple of 32 */
    CHECK_EQ(cpu_kv_quantize_int8(k, 1, 1, 7, q, s), -1);  /* odd head_dim */
    CHECK_EQ(cpu_kv_quantize_int8(k, 1, 0, 8, q, s), -1);
    CHECK_EQ(cpu_kv_layer_bytes(PROTO_KV_INT4, 1, 1, 48), 0);
}
