/* The CUDA device's decode curve (gpu/curve.c: plain C, linked into the test binary, so these run
 * with or without a GPU): on the H200 with Llama-3-8B it is the measured curve, the placement's
 * step time from it meets every point measured at longer contexts, and other devices and models
 * scale by bandwidth and bytes. */
#include "gpu/curve.h"
#include "scheduler/sched_policy.h"
#include "tests/test.h"
#include <math.h>

#define L3_KV (2.0 * 32 * 8 * 128 * 2) /* Llama-3-8B's KV bytes per position, bf16 */

TEST(gpu_curve_is_the_h200s_measured_one)
{
    /* Llama-3-8B streams 7.50 G weights a step: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x
     * 14336) + 128256 x 4096 */
    double w = gpu_curve_weight_bytes(GPU_REF_SHAPE, 2);
    CHECK_NEAR(w, 2.0 * 7504658432.0, 1);
    double bw = gpu_mem_bps(3201000, 6144); /* what an H200 reports */
    CHECK_NEAR(bw, 4.917e12, 1e9);
    accel_decode_curve c;
    REQUIRE(gpu_decode_curve(w, L3_KV, bw, 256, &c) == 0);
    const int b[5] = {1, 32, 64, 128, 256};
    const double tps[5] = {251.1, 5075.2, 8452.7, 12138.4, 15032.1}; /* 2026-11-28-kvdec */
    CHECK_EQ(c.n, 5);
    for (int i = 0; i < 5 && i < c.n; i++) {
        CHECK_EQ(c.batch[i], b[i]);
        CHECK_NEAR(c.step_s[i], b[i] / tps[i], 1e-12);
    }
    CHECK_NEAR(c.ctx, 1024, 0);
    CHECK_NEAR(c.s_per_pos, L3_KV / 4.4e12, 1e-18);
    /* the placement's step time from this curve beyond 1K, added to the same run's 1K step,
     * against every point of tests/gpu/logs/2026-11-28-batch-curve/batch_curve.log (the curve's
     * 1K steps are a later run's, after issue 20's batch-256 work: up to 5.6 % faster) */
    static const struct { int ctx, batch; double ms; } m[] = {
        {1024, 1, 4.021},    {1024, 32, 6.528},  {1024, 64, 8.038},  {1024, 128, 11.277},
        {1024, 256, 18.043}, {4096, 1, 4.196},   {4096, 32, 9.489},  {4096, 64, 13.825},
        {4096, 128, 22.747}, {8192, 1, 4.317},   {8192, 32, 13.476}, {8192, 64, 21.554},
    };
    sched_policy_dev d = {.kind = ACCEL_KIND_CUDA, .max_batch = 256, .max_running = 256, .curve = c};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        double at1k = 0;
        for (size_t j = 0; j < sizeof m / sizeof m[0]; j++)
            if (m[j].ctx == 1024 && m[j].batch == m[i].batch) at1k = m[j].ms;
        REQUIRE(at1k > 0);
        double t = at1k + (sched_policy_step_s(&d, m[i].batch, (double)m[i].batch * m[i].ctx) -
                           sched_policy_step_s(&d, m[i].batch, (double)m[i].batch * 1024)) * 1e3;
        CHECK_MSG(fabs(t / m[i].ms - 1) < 0.03, "ctx %d batch %d: %.3f ms, measured %.3f", m[i].ctx,
                  m[i].batch, t, m[i].ms);
    }
}

TEST(gpu_curve_scales_by_bandwidth_and_bytes)
{
    double w = gpu_curve_weight_bytes(GPU_REF_SHAPE, 2), h200 = gpu_mem_bps(3201000, 6144);
    accel_decode_curve ref, c;
    REQUIRE(gpu_decode_curve(w, L3_KV, h200, 256, &ref) == 0);
    /* an H100 SXM reports 2,619 MHz on 5,120 bits: 3.35 TB/s, every step 1.47x the H200's */
    double h100 = gpu_mem_bps(2619000, 5120);
    CHECK_NEAR(h100, 3.352e12, 1e9);
    REQUIRE(gpu_decode_curve(w, L3_KV, h100, 256, &c) == 0);
    CHECK_EQ(c.n, ref.n);
    for (int i = 0; i < c.n; i++) CHECK_NEAR(c.step_s[i] / ref.step_s[i], h200 / h100, 1e-9);
    CHECK_NEAR(c.s_per_pos / ref.s_per_pos, h200 / h100, 1e-9);
    /* LLaMA2-7B (MHA: 4x the KV per position, 6.48 G weights a step) on the H200: each step by
     * the bytes it reads against Llama-3-8B's */
    double w2 = gpu_curve_weight_bytes(4096, 32, 32, 32, 128, 11008, 32000, 2), kv2 = 4 * L3_KV;
    REQUIRE(gpu_decode_curve(w2, kv2, h200, 256, &c) == 0);
    for (int i = 0; i < c.n; i++) {
        double b = c.batch[i];
        double want = ref.step_s[i] * (w2 + b * 1024 * kv2) / (w + b * 1024 * L3_KV);
        CHECK_NEAR(c.step_s[i], want, 1e-12);
    }
    CHECK(c.step_s[0] < ref.step_s[0]);         /* fewer weights at batch 1 */
    CHECK(c.step_s[4] > 1.5 * ref.step_s[4]);   /* 4x the KV at batch 256 */
    CHECK_NEAR(c.s_per_pos, 4 * ref.s_per_pos, 1e-18);
    /* a device that takes 48 sequences a call: the curve stops there, interpolated */
    REQUIRE(gpu_decode_curve(w, L3_KV, h200, 48, &c) == 0);
    CHECK_EQ(c.n, 3);
    CHECK_EQ(c.batch[2], 48);
    CHECK_NEAR(c.step_s[2], (32 / 5075.2 + 64 / 8452.7) / 2, 1e-12);
    /* what it cannot know, it does not say */
    CHECK(gpu_decode_curve(w, L3_KV, 0, 256, &c) < 0 && c.n == 0);
    CHECK(gpu_decode_curve(0, L3_KV, h200, 256, &c) < 0 && c.n == 0);
    CHECK(gpu_decode_curve(w, L3_KV, h200, 0, &c) < 0 && c.n == 0);
    CHECK_EQ(gpu_mem_bps(0, 6144), 0.0);
}
