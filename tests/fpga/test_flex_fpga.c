/* The FAST-Prefill kernels on the emulated U280 (fpga/kernels/flex_sigu.c, flex_sau.c) against the
 * CPU reference: the SIGU's block sets equal cpu_flex_index_build's on the same (dequantized)
 * inputs, the SAU's W8A8 output is within its tolerance of the float block-sparse attention
 * over the same index, and the KV cache's bookkeeping matches schedules worked out by hand. */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "fpga/flex_host.h"
#include "tests/fpga/emu_util.h"
#include "tests/fpga/flex_pack.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>

typedef struct card {
    fpga_xrt *x;
    xrtDeviceHandle d;
} card;

static int card_open(card *c)
{
    c->x = t_emu_load();
    if (!c->x) return -1;
    if (fpga_xrt_device_open(c->x, 0, &c->d)) {
        t_fail(__FILE__, __LINE__, "device: %s", fpga_xrt_error());
        fpga_xrt_free(c->x);
        return -1;
    }
    return 0;
}

static void card_close(card *c)
{
    fpga_xrt_device_close(c->x, c->d);
    fpga_xrt_free(c->x);
}

/* SIGU index == CPU index; returns the number of differing heads (and reports them). */
static int compare_index(const fpga_flex_result *r, const cpu_flex_index *ix)
{
    const int nb = ix->n_blocks;
    int bad = 0;
    for (int h = 0; h < ix->n_heads; h++) {
        const fpga_flex_head_info *hi = &r->info[h];
        int same = (int)hi->n_vertical == ix->n_vertical[h] &&
                   (int)hi->n_slash == ix->n_slash[h] && (int)hi->query_aware == ix->query_aware[h];
        for (int row = 0; same && row < nb; row++) {
            const int64_t c0 = ix->row_ptr[(size_t)h * (nb + 1) + row],
                          c1 = ix->row_ptr[(size_t)h * (nb + 1) + row + 1];
            const uint32_t f0 = r->row_ptr[(size_t)h * (nb + 1) + row],
                           f1 = r->row_ptr[(size_t)h * (nb + 1) + row + 1];
            if (c1 - c0 != (int64_t)(f1 - f0)) same = 0;
            for (int64_t e = 0; same && e < c1 - c0; e++)
                if ((uint32_t)ix->col[c0 + e] != r->col[f0 + e]) same = 0;
        }
        if (!same) {
            bad++;
            t_fail(__FILE__, __LINE__,
                   "head %d: fpga v %u s %u qa %u js %g | cpu v %d s %d qa %d js %g", h,
                   hi->n_vertical, hi->n_slash, hi->query_aware, fpga_flex_f32(hi->js_bits),
                   ix->n_vertical[h], ix->n_slash[h], ix->query_aware[h], ix->js[h]);
        }
    }
    return bad;
}

/* W8A8 output tolerance against float attention over the same dequantized inputs and index:
 * P is quantized per row to int8 with scale max(P x v_scale) / 127, so each weight carries up
 * to 0.5/127 of the row's largest weight as error; summed over a block row of random-sign
 * values that stays within ~1% of the output's RMS, and a few 1e-2 absolute for O(1) values.
 * Measured on these cases: max |diff| 0.023-0.026, relative RMS 0.005-0.013; the bounds leave
 * about 2x. */
#define W8A8_MAX_ABS 0.05
#define W8A8_REL_RMS 0.02

static void compare_out(const tf_packed *p, const cpu_flex_index *ix, const float *out, int il)
{
    cpu_flex_qkv x = tf_packed_view(p, 0);
    const size_t m = (size_t)p->n * p->H * p->d;
    float *ref = malloc(sizeof(float) * m);
    REQUIRE(cpu_flex_sparse_attention(NULL, &x, ix, il, 0, ref, (size_t)p->H * p->d) == 0);
    double mx = 0, se = 0, sr = 0;
    for (size_t i = 0; i < m; i++) {
        double e = fabs((double)out[i] - ref[i]);
        if (e > mx) mx = e;
        se += e * e;
        sr += (double)ref[i] * ref[i];
    }
    CHECK_NEAR(mx, 0, W8A8_MAX_ABS);
    CHECK_NEAR(sqrt(se / sr), 0, W8A8_REL_RMS);
    free(ref);
}

static sparse_flex_params cpu_params(const fpga_flex_opts *o)
{
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    p.gamma = o->gamma;
    p.tau = o->tau;
    p.min_budget = o->min_blocks * FPGA_FLEX_BS;
    p.max_budget = o->max_blocks * FPGA_FLEX_BS;
    p.gqa_interleave = o->gqa_interleave;
    return p;
}

/* Structured and mixed patterns, both GQA mappings, a length that is not a multiple of 128. */
TEST(fpga_flex_sigu_sets_equal_cpu_and_sau_output)
{
    card c;
    if (card_open(&c)) return;
    const struct {
        int n, H, Hk, d, kind, il, min_blocks;
    } cases[] = {
        {2048, 4, 2, 64, CPU_FLEX_SYNTH_STRUCTURED, 0, 2},
        {1800, 4, 1, 32, CPU_FLEX_SYNTH_MIXED, 1, 1},
        {2304, 6, 2, 64, CPU_FLEX_SYNTH_MIXED, 0, 4},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        tf_packed p;
        tf_packed_synth(&p, cases[ci].n, cases[ci].H, cases[ci].Hk, cases[ci].d, cases[ci].kind,
                     40 + ci);
        fpga_flex_opts o;
        fpga_flex_opts_default(&o, p.d);
        o.min_blocks = cases[ci].min_blocks;
        o.gqa_interleave = cases[ci].il;
        o.window = 4;
        fpga_flex_result r;
        int rc = fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, p.n, p.H, p.Hk, p.d, &r);
        CHECK_MSG(rc == 0, "case %zu: %s (%s)", ci, accel_strerror(rc), fpga_xrt_error());
        if (rc) {
            tf_packed_free(&p);
            continue;
        }
        sparse_flex_params cp = cpu_params(&o);
        cpu_flex_qkv x = tf_packed_view(&p, 0);
        cpu_flex_index *ix;
        REQUIRE(cpu_flex_index_build(NULL, &cp, &x, &ix) == 0);
        CHECK_EQ(compare_index(&r, ix), 0);
        int qa = 0;
        for (int h = 0; h < p.H; h++) qa += ix->query_aware[h];
        if (ci == 0) CHECK(qa > 0 && qa < p.H); /* both kinds of heads were exercised */
        compare_out(&p, ix, r.out, o.gqa_interleave);
        /* the SAU computed exactly the listed tiles */
        CHECK_EQ(r.sau.jobs, (uint64_t)ix->nnz);
        CHECK_EQ(r.sau.hits + r.sau.misses, r.sau.accesses);
        CHECK_EQ(r.sau.hot_hits + r.sau.cold_hits, r.sau.hits);
        CHECK_EQ(r.sau.kv_bytes, r.sau.misses * fpga_flex_kvblock_bytes(p.d));
        CHECK_EQ(r.sau.kv_bytes_nocache, r.sau.accesses * fpga_flex_kvblock_bytes(p.d));
        CHECK_EQ(r.sau.kv_bytes_naive, r.sau.jobs * fpga_flex_kvblock_bytes(p.d));
        CHECK(r.sigu_run.modeled_ns > 0 && r.sau_run.modeled_ns > 0);
        cpu_flex_index_free(ix);
        fpga_flex_result_free(&r);
        tf_packed_free(&p);
    }
    card_close(&c);
}

/* A CSR given by hand: row r lists {0, r - 1, r} (sink, one slash below the diagonal, the
 * diagonal), nb = 8, windows of 2 query blocks. Remaining uses: block 0 -> 8, blocks 1..6 -> 2,
 * block 7 -> 1; the hot threshold is 8 / 2 = 4.
 *   window 0 (rows 0,1): b0 miss (6 left > 4: hot), b1 miss (1 left: cold)
 *   window 1 (rows 2,3): b0 hot hit, b1 cold hit (dies: evicted), b2 miss (dies), b3 miss (cold)
 *   window 2 (rows 4,5): b0 hot hit, b3 cold hit (dies), b4 miss (dies), b5 miss (cold)
 *   window 3 (rows 6,7): b0 hot hit (dies), b5 cold hit (dies), b6 miss (dies), b7 miss (dies)
 * = 14 accesses, 6 hits (3 hot, 3 cold), 8 misses, 21 tiles, 1 hot + 3 cold admissions, 4 dead
 * evictions. With one slot, all of it hot, the cold blocks bypass: 3 hits, 11 misses. */
TEST(fpga_flex_sau_cache_by_hand)
{
    card c;
    if (card_open(&c)) return;
    enum { N = 1024, NB = 8, D = 16 };
    tf_packed p;
    tf_packed_synth(&p, N, 1, 1, D, CPU_FLEX_SYNTH_RANDOM, 3);
    uint32_t rows[NB + 1], col[3 * NB];
    int k = 0;
    for (int r = 0; r < NB; r++) {
        rows[r] = (uint32_t)k;
        col[k++] = 0;
        if (r >= 2) col[k++] = (uint32_t)(r - 1);
        if (r >= 1) col[k++] = (uint32_t)r;
    }
    rows[NB] = (uint32_t)k;
    CHECK_EQ(k, 21);
    fpga_flex_opts o;
    fpga_flex_opts_default(&o, D);
    o.window = 2;
    o.cache_blocks = 4;
    o.hot_blocks = 2;
    o.index_row_ptr = rows;
    o.index_col = col;
    fpga_flex_result r;
    int rc = fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, N, 1, 1, D, &r);
    REQUIRE(rc == 0);
    CHECK_EQ(r.sigu_ran, 0);
    CHECK_EQ(r.sau.accesses, 14);
    CHECK_EQ(r.sau.hits, 6);
    CHECK_EQ(r.sau.hot_hits, 3);
    CHECK_EQ(r.sau.cold_hits, 3);
    CHECK_EQ(r.sau.misses, 8);
    CHECK_EQ(r.sau.jobs, 21);
    CHECK_EQ(r.sau.admitted_hot, 1);
    CHECK_EQ(r.sau.admitted_cold, 3);
    CHECK_EQ(r.sau.evicted_dead, 4);
    CHECK_EQ(r.sau.evicted_live, 0);
    CHECK_EQ(r.sau.bypassed, 0);
    /* and the output is attention over exactly those blocks */
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_full(1, N, FPGA_FLEX_BS, &ix) == 0);
    for (int r2 = 0; r2 <= NB; r2++) ix->row_ptr[r2] = rows[r2];
    for (int e = 0; e < k; e++) ix->col[e] = (int32_t)col[e];
    ix->nnz = k;
    compare_out(&p, ix, r.out, 0);
    fpga_flex_sau_stats full = r.sau;
    fpga_flex_result_free(&r);

    o.cache_blocks = 1;
    o.hot_blocks = 1;
    REQUIRE(fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, N, 1, 1, D, &r) == 0);
    CHECK_EQ(r.sau.hits, 3);
    CHECK_EQ(r.sau.misses, 11);
    CHECK_EQ(r.sau.bypassed, 3);
    CHECK_EQ(r.sau.admitted_cold, 0);
    fpga_flex_result_free(&r);

    /* schedule-only mode keeps the statistics, skips the arithmetic */
    o.cache_blocks = 4;
    o.hot_blocks = 2;
    o.schedule_only = 1;
    REQUIRE(fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, N, 1, 1, D, &r) == 0);
    CHECK(r.out == NULL);
    CHECK(memcmp(&r.sau, &full, sizeof full) == 0);
    fpga_flex_result_free(&r);
    cpu_flex_index_free(ix);
    tf_packed_free(&p);
    card_close(&c);
}

/* A malformed index (a block above the diagonal) ends the run in error, it does not crash. */
TEST(fpga_flex_sau_rejects_bad_index)
{
    card c;
    if (card_open(&c)) return;
    enum { N = 512, NB = 4, D = 16 };
    tf_packed p;
    tf_packed_synth(&p, N, 1, 1, D, CPU_FLEX_SYNTH_RANDOM, 1);
    uint32_t rows[NB + 1] = {0, 1, 2, 3, 4}, col[NB] = {0, 0, 3, 0}; /* row 2 lists block 3 */
    fpga_flex_opts o;
    fpga_flex_opts_default(&o, D);
    o.index_row_ptr = rows;
    o.index_col = col;
    fpga_flex_result r;
    CHECK_EQ(fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, N, 1, 1, D, &r), ACCEL_ERR_DEVICE);
    col[2] = 2;
    CHECK_EQ(fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, N, 1, 1, D, &r), 0);
    fpga_flex_result_free(&r);
    CHECK_EQ(fpga_flex_attention(c.x, c.d, &o, p.q, p.kv, 100, 1, 1, D, &r), ACCEL_ERR_INVALID);
    tf_packed_free(&p);
    card_close(&c);
}
