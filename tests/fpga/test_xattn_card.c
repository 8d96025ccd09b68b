/* The card's XAttention / Tri-shape block-list unit (fpga/kernels/xattn_est.c) on the emulated
 * U280 against the CPU reference (cpu/xattn.c, itself checked against the official
 * xattn_estimate): the block sets are equal on the same (dequantized) inputs — random and
 * structured, GQA and MHA, strides 4 / 8 / 16, whole prompts and chunks after cached tokens,
 * threshold 1 keeping every causal block — and the unit's timing-model charges equal
 * fpga_xattn_model's, so the 32K / 128K figures of BENCHMARKS.md price what the unit does. */
#include "cpu/flex_synth.h"
#include "cpu/sparse_idx.h"
#include "fpga/flex_host.h"
#include "fpga/xattn_model.h"
#include "fpga/xrt/u280.h"
#include "tests/fpga/emu_util.h"
#include "tests/fpga/flex_pack.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>

/* Card CSR == reference CSR (row offsets and ids); the number of differing rows. */
static int compare(const fpga_xattn_result *r, const cpu_flex_index *ix, const char *what)
{
    const int nb = ix->n_blocks;
    int bad = 0;
    for (int h = 0; h < ix->n_heads; h++)
        for (int row = 0; row < nb; row++) {
            const int64_t c0 = ix->row_ptr[(size_t)h * (nb + 1) + row],
                          c1 = ix->row_ptr[(size_t)h * (nb + 1) + row + 1];
            const uint32_t f0 = r->row_ptr[(size_t)h * (nb + 1) + row],
                           f1 = r->row_ptr[(size_t)h * (nb + 1) + row + 1];
            int same = c1 - c0 == (int64_t)(f1 - f0);
            for (int64_t e = 0; same && e < c1 - c0; e++) same = (uint32_t)ix->col[c0 + e] == r->col[f0 + e];
            if (!same && bad++ < 4)
                t_fail(__FILE__, __LINE__, "%s: head %d row %d: card %u blocks, cpu %lld", what, h,
                       row, f1 - f0, (long long)(c1 - c0));
        }
    return bad;
}

static fpga_xattn_params xattn_params(int stride, double thr)
{
    fpga_xattn_params p = {.method = FPGA_XATTN_METHOD_XATTN, .stride = (uint32_t)stride};
    fpga_xattn_f64_bits(thr, &p.thr_lo, &p.thr_hi);
    return p;
}

/* The run's charges equal the model's: compute, bytes and commands. */
static void check_model(const fpga_xattn_result *r, const tf_packed *p, int q0,
                        const fpga_xattn_params *xp)
{
    const uint64_t nnz = r->row_ptr[(size_t)p->H * (r->n_blocks + 1) - 1];
    fpga_xattn_cost m;
    fpga_xattn_model((uint32_t)p->n, (uint32_t)q0, (uint32_t)p->H, (uint32_t)p->Hk, (uint32_t)p->d,
                     xp, nnz, &m);
    CHECK_EQ(r->run.compute_ns, (uint64_t)m.compute_ns);
    CHECK_EQ(r->run.bytes_read, m.read_bytes);
    CHECK_EQ(r->run.bytes_written, m.write_bytes);
}

/* XAttention: card sets == reference sets; density below 1 where the threshold is below 1. */
TEST(fpga_xattn_sets_equal_cpu)
{
    fpga_xrt *x = t_emu_load();
    if (!x) return;
    xrtDeviceHandle dev;
    REQUIRE(fpga_xrt_device_open(x, 0, &dev) == 0);
    const struct {
        int n, H, Hk, d, kind, stride, q0;
        double thr;
    } cases[] = {
        {2048, 4, 2, 64, CPU_FLEX_SYNTH_STRUCTURED, 8, 0, 0.9},
        {1800, 4, 1, 32, CPU_FLEX_SYNTH_MIXED, 16, 0, 0.8},
        {2304, 6, 2, 64, CPU_FLEX_SYNTH_RANDOM, 8, 8, 0.9},     /* a chunk after 1024 tokens */
        {2100, 4, 4, 64, CPU_FLEX_SYNTH_STRUCTURED, 4, 13, 0.95}, /* MHA, chunk, partial block */
        {1536, 8, 2, 128, CPU_FLEX_SYNTH_MIXED, 16, 3, 0.8},
        {1024, 4, 2, 64, CPU_FLEX_SYNTH_RANDOM, 8, 0, 0.5},
        {1280, 4, 2, 64, CPU_FLEX_SYNTH_STRUCTURED, 8, 2, 1.0},  /* every causal block */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        tf_packed p;
        tf_packed_synth(&p, cases[ci].n, cases[ci].H, cases[ci].Hk, cases[ci].d, cases[ci].kind,
                     70 + ci);
        const int q0 = cases[ci].q0;
        fpga_xattn_params xp = xattn_params(cases[ci].stride, cases[ci].thr);
        fpga_xattn_result r;
        int rc = fpga_xattn_index(x, dev, &xp, p.q, p.kv, p.n, q0, p.H, p.Hk, p.d, &r);
        CHECK_MSG(rc == 0, "case %zu: %s (%s)", ci, accel_strerror(rc), fpga_xrt_error());
        if (rc) {
            tf_packed_free(&p);
            continue;
        }
        sparse_params sp;
        sparse_params_default(&sp, SPARSE_MODE_XATTN);
        sp.xattention_threshold = cases[ci].thr;
        sp.xattention_stride = cases[ci].stride;
        cpu_flex_qkv v = tf_packed_view(&p, q0 * FPGA_FLEX_BS);
        cpu_flex_index *ix;
        REQUIRE(cpu_xattn_index_build(NULL, &sp, &v, 0, &ix, NULL) == 0);
        char what[32];
        snprintf(what, sizeof what, "case %zu", ci);
        CHECK_EQ(compare(&r, ix, what), 0);
        const double density = cpu_flex_index_density(ix, -1);
        if (cases[ci].thr < 1) CHECK_MSG(density < 1, "case %zu: density %g", ci, density);
        else CHECK_EQ(ix->nnz, (int64_t)p.H * cpu_flex_index_causal(ix));
        check_model(&r, &p, q0, &xp);
        cpu_flex_index_free(ix);
        fpga_xattn_result_free(&r);
        tf_packed_free(&p);
    }
    fpga_xrt_device_close(x, dev);
    fpga_xrt_free(x);
}

/* Tri-shape: the card's lists are OpenVINO's rule as the reference writes it, for chunks after
 * cached tokens with and without a skipped range. */
TEST(fpga_trishape_lists_equal_cpu)
{
    fpga_xrt *x = t_emu_load();
    if (!x) return;
    xrtDeviceHandle dev;
    REQUIRE(fpga_xrt_device_open(x, 0, &dev) == 0);
    const struct {
        int n, cached, start, recent;
    } cases[] = {
        {3000, 2048, 128, 512}, /* skips blocks [1, 12) */
        {1500, 1024, 128, 1920}, /* too little cached: nothing skipped */
        {2000, 0, 128, 256},     /* a whole prompt: nothing skipped */
        {4096, 3072, 256, 128},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        tf_packed p;
        tf_packed_synth(&p, cases[ci].n, 4, 2, 32, CPU_FLEX_SYNTH_RANDOM, 90 + ci);
        sparse_params sp;
        sparse_params_default(&sp, SPARSE_MODE_TRISHAPE);
        sp.num_retained_start_tokens_in_cache = cases[ci].start;
        sp.num_retained_recent_tokens_in_cache = cases[ci].recent;
        int lo, hi;
        sparse_tri_skip(&sp, cases[ci].cached, &lo, &hi);
        fpga_xattn_params xp = {.method = FPGA_XATTN_METHOD_TRISHAPE,
                                .tri_lo = (uint32_t)(lo / FPGA_FLEX_BS),
                                .tri_hi = (uint32_t)(hi / FPGA_FLEX_BS)};
        const int q0 = cases[ci].cached / FPGA_FLEX_BS;
        fpga_xattn_result r;
        REQUIRE(fpga_xattn_index(x, dev, &xp, p.q, p.kv, p.n, q0, p.H, p.Hk, p.d, &r) == 0);
        cpu_flex_qkv v = tf_packed_view(&p, cases[ci].cached);
        cpu_flex_index *ix;
        REQUIRE(cpu_trishape_index_build(&sp, &v, &ix) == 0);
        char what[32];
        snprintf(what, sizeof what, "trishape case %zu", ci);
        CHECK_EQ(compare(&r, ix, what), 0);
        if (ci == 0) CHECK(cpu_flex_index_density(ix, -1) < 1);
        check_model(&r, &p, q0, &xp);
        cpu_flex_index_free(ix);
        fpga_xattn_result_free(&r);
        tf_packed_free(&p);
    }
    fpga_xrt_device_close(x, dev);
    fpga_xrt_free(x);
}

/* Outside the unit's bounds the host refuses before any run. */
TEST(fpga_xattn_rejects_bad_shapes)
{
    fpga_xattn_params p = xattn_params(8, 0.9);
    CHECK(fpga_xattn_ok(2048, 0, 4, 2, 64, &p));
    CHECK(!fpga_xattn_ok(2048, 16, 4, 2, 64, &p)); /* q0 past the last block */
    fpga_xattn_params bad = xattn_params(3, 0.9);  /* stride must divide 128 */
    CHECK(!fpga_xattn_ok(2048, 0, 4, 2, 64, &bad));
    bad = xattn_params(8, 0.0);
    CHECK(!fpga_xattn_ok(2048, 0, 4, 2, 64, &bad));
    bad = xattn_params(8, 1.5);
    CHECK(!fpga_xattn_ok(2048, 0, 4, 2, 64, &bad));
    bad = xattn_params(1, 0.9); /* 128 x 128K logits: more than the on-chip buffer */
    CHECK(!fpga_xattn_ok(FPGA_FLEX_MAX_TOKENS, 0, 4, 2, 64, &bad));
    fpga_xattn_params tri = {.method = FPGA_XATTN_METHOD_TRISHAPE, .tri_lo = 3, .tri_hi = 2};
    CHECK(!fpga_xattn_ok(2048, 8, 4, 2, 64, &tri));
}
