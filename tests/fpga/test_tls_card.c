/* AsyncTLS's selection on the emulated card (fpga/kernels/tls_select.c through the XRT API and
 * the emulator) == the CPU reference (sparse/tls.h), position for position: budgets inside and
 * past the context, many ties (integer-valued keys), GQA groups of 1, 4 and 8. */
#include "fpga/xrt_load.h"
#include "sparse/tls.h"
#include "tests/fpga/emu_util.h"
#include "tests/test.h"
#include <stdlib.h>

static uint64_t rs_;
static float rnd(int ints)
{
    rs_ = rs_ * 6364136223846793005ull + 1442695040888963407ull;
    float f = (float)((rs_ >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
    return ints ? (float)(int)(f * 3.0f) : f; /* ints: -2 .. 2, ties everywhere */
}

typedef struct tcase {
    int n, hd, G, r, bs, bb, tb, ints;
} tcase;

/* one case: 0 when the card's positions equal the reference's */
static void run_case(fpga_xrt *x, xrtDeviceHandle d, xrtKernelHandle k, const tcase *c, uint64_t seed)
{
    rs_ = seed;
    const int n = c->n, hd = c->hd, G = c->G, r = c->r, nb = (n + c->bs - 1) / c->bs;
    float *key = malloc(sizeof(float) * n * hd), *q = malloc(sizeof(float) * G * hd);
    uint16_t *ch = malloc(sizeof(uint16_t) * r);
    for (int i = 0; i < n * hd; i++) key[i] = rnd(c->ints) + (i / hd / c->bs % 5 == 2 ? 0.7f : 0.0f);
    for (int i = 0; i < G * hd; i++) q[i] = rnd(c->ints);
    for (int i = 0; i < r; i++) ch[i] = (uint16_t)(i * (hd / r) + (int)(seed % (uint64_t)(hd / r)));
    sparse_tls_seq *s = sparse_tls_seq_new(1, 1, hd, r, c->bs, n, ch);
    REQUIRE(s);
    for (int p = 0; p < n; p++) sparse_tls_put(s, 0, p, key + (size_t)p * hd);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.block_size = c->bs;
    p.block_budget = c->bb;
    p.token_budget = c->tb;
    p.channels = r;
    float *fw = malloc(sizeof(float) * sparse_tls_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_work_ints(&p, n));
    int32_t *want = malloc(sizeof(int32_t) * n);
    int m = sparse_tls_select(&p, s, 0, 0, q, G, hd, n, want, fw, iw, NULL);
    /* the card's buffer: q, ch, summaries (max row, min row per block), codes, lmin, lstep */
    size_t q_off = 0, ch_off = q_off + (size_t)G * hd * 4, summ_off = ch_off + ((size_t)r * 2 + 3) / 4 * 4;
    size_t code_off = summ_off + (size_t)nb * 2 * hd * 4, lmin_off = code_off + ((size_t)n * (r / 2) + 3) / 4 * 4;
    size_t lstep_off = lmin_off + (size_t)n * 4, total = lstep_off + (size_t)n * 4;
    uint8_t *buf = calloc(1, total);
    memcpy(buf + q_off, q, (size_t)G * hd * 4);
    memcpy(buf + ch_off, ch, (size_t)r * 2);
    for (int b = 0; b < nb; b++) {
        memcpy(buf + summ_off + (size_t)b * 2 * hd * 4, s->kmax + (size_t)b * hd, (size_t)hd * 4);
        memcpy(buf + summ_off + (size_t)b * 2 * hd * 4 + (size_t)hd * 4, s->kmin + (size_t)b * hd, (size_t)hd * 4);
    }
    memcpy(buf + code_off, s->code, (size_t)n * (r / 2));
    memcpy(buf + lmin_off, s->lmin, (size_t)n * 4);
    memcpy(buf + lstep_off, s->lstep, (size_t)n * 4);
    size_t out_bytes = 4 + (size_t)n * 4;
    xrtBufferHandle bd = NULL, bo = NULL;
    xrtRunHandle run = NULL;
    int rc = fpga_xrt_bo_alloc(x, d, total, 0, 0, &bd);
    if (!rc) rc = fpga_xrt_bo_alloc(x, d, out_bytes, 0, 1, &bo);
    if (!rc) rc = fpga_xrt_bo_write(x, bd, buf, total, 0);
    if (!rc) rc = fpga_xrt_bo_sync(x, bd, XCL_BO_SYNC_BO_TO_DEVICE, total, 0);
    if (!rc) rc = fpga_xrt_run_open(x, k, &run);
    uint64_t offs[6] = {q_off, ch_off, summ_off, code_off, lmin_off, lstep_off};
    uint32_t sc[7] = {(uint32_t)n, (uint32_t)hd, (uint32_t)G, (uint32_t)r, (uint32_t)c->bs,
                      (uint32_t)c->bb, (uint32_t)c->tb};
    if (!rc) rc = fpga_xrt_run_set_bo(x, run, 0, bd);
    if (!rc) rc = fpga_xrt_run_set_bo(x, run, 1, bo);
    for (int i = 0; i < 6 && !rc; i++) rc = fpga_xrt_run_set_u64(x, run, 2 + i, offs[i]);
    for (int i = 0; i < 7 && !rc; i++) rc = fpga_xrt_run_set_u32(x, run, 8 + i, sc[i]);
    if (!rc) rc = fpga_xrt_run_start(x, run);
    if (!rc) rc = fpga_xrt_run_wait(x, run, 20000, NULL);
    uint8_t *got = malloc(out_bytes);
    if (!rc) rc = fpga_xrt_bo_sync(x, bo, XCL_BO_SYNC_BO_FROM_DEVICE, out_bytes, 0);
    if (!rc) rc = fpga_xrt_bo_read(x, bo, got, out_bytes, 0);
    CHECK_MSG(rc == 0, "card run: %s", fpga_xrt_error());
    if (!rc) {
        uint32_t cnt;
        memcpy(&cnt, got, 4);
        CHECK_EQ(cnt, m);
        CHECK_MSG(cnt == (uint32_t)m && memcmp(got + 4, want, (size_t)m * 4) == 0,
                  "n %d G %d bs %d bb %d tb %d ints %d: positions differ", n, G, c->bs, c->bb,
                  c->tb, c->ints);
    }
    if (run) fpga_xrt_run_close(x, run);
    if (bd) fpga_xrt_bo_free(x, bd);
    if (bo) fpga_xrt_bo_free(x, bo);
    free(got);
    free(buf);
    free(key);
    free(q);
    free(ch);
    free(fw);
    free(iw);
    free(want);
    sparse_tls_seq_free(s);
}

TEST(tls_card_select_equals_cpu)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    xrtDeviceHandle d;
    REQUIRE(fpga_xrt_device_open(x, 0, &d) == 0);
    xrtKernelHandle k;
    REQUIRE(t_emu_kernel(x, d, "tls_select", &k) == 0);
    const tcase cases[] = {
        {5000, 64, 4, 16, 64, 20, 300, 0},  {5000, 64, 4, 16, 64, 20, 300, 1},
        {3001, 128, 8, 32, 32, 40, 1024, 0}, {3001, 128, 8, 32, 32, 40, 1024, 1},
        {700, 32, 1, 8, 16, 100, 200, 0},   {700, 32, 1, 8, 16, 100, 2000, 1},
        {100, 16, 2, 4, 128, 1, 64, 1},     {9000, 64, 4, 16, 64, 128, 512, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(x, d, k, &cases[i], 100 + i);
    fpga_xrt_kernel_close(x, k);
    fpga_xrt_device_close(x, d);
}
