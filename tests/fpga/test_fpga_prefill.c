/* The card's prefill (fpga/kernels/prefill.c driven by fpga/prefill.c) against references it
 * was not written into:
 *  - decoding the prompt one token at a time on the same card (the decode kernel): a dense card
 *    prefill must give the same logits and the same KV bytes, bit for bit (the prefill runs every
 *    row through the decode kernel's arithmetic, fpga/kernels/dec_ops.h), and decoding must go on
 *    from it as from the decoded prompt — at W8 and W4, in one call or in chunks, in several
 *    passes of the standing workspace;
 *  - the CPU backend (float32): within the W8A8 tolerance of the decode kernel (fpga/QUANT.md);
 *  - the KV it exports: the bytes its tiles hold, which another card imports and decodes from
 *    exactly as the prefill card does;
 *  - FlexPrefill: with every block kept the sparse path (SIGU + SAU) reports density 1 and stays
 *    within the SAU's W8A8 tolerance of the dense card prefill; the SIGU's index inside the
 *    prefill equals the CPU reference's on the card's own quantized q and k;
 * plus the bad inputs. */
#include "cpu/flex.h"
#include "fpga/kernels/dec_math.h"
#include "model/golden.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>

static int32_t *ids_of(int n, int vocab, int seed)
{
    int32_t *ids = malloc(sizeof *ids * n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 53 + seed * 17 + 1) % vocab);
    ids[0] = 1;
    return ids;
}

static int prefill(accel_dev *d, accel_seq *s, const int32_t *ids, int n, float *lg, int all,
                   const accel_sparse *sp, accel_sparse_report *rep)
{
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg, .all_logits = all,
                           .sparse = sp, .sparse_report = rep};
    return accel_prefill(d, &r);
}

/* Card prefill vs decoding the same ids one by one on the same card: logits, KV, and `more`
 * decode steps after it, all bit for bit. `chunk`: the prefill in calls of that many tokens. */
static void prefill_vs_decode(const char *model_dir, int wbits, int n, int chunk, int more,
                              int pass_rows)
{
    char err[512];
    tf_cache_env();
    model *m = model_load(model_dir, err, sizeof err);
    REQUIRE(m);
    accel_opts o = {.weight_bits = wbits};
    accel_dev *f = accel_open("fpga-emu", m, &o, err, sizeof err);
    REQUIRE(f);
    accel_info info;
    accel_get_info(f, &info);
    CHECK(info.caps & ACCEL_CAP_PREFILL);
    if (pass_rows) REQUIRE(fpga_dev_set_pass_rows(f, pass_rows) == 0);
    const int V = m->cfg.vocab, cap = n + more;
    int32_t *ids = ids_of(cap, V, n);
    float *a = malloc(sizeof(float) * cap * V), *b = malloc(sizeof(float) * cap * V);
    uint8_t *ka = malloc(tf_kv_bytes(f, cap)), *kb = malloc(tf_kv_bytes(f, cap));
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(f, cap, &sa) == 0 && accel_seq_new(f, cap, &sb) == 0);
    fpga_card *card = fpga_dev_card(f);
    uint64_t runs0 = card->pf_runs, dec0 = card->dec_runs;
    for (int done = 0; done < n; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        CHECK_EQ(prefill(f, sa, ids + done, k, a + (size_t)done * V, 1, NULL, NULL), 0);
    }
    CHECK_EQ(accel_seq_len(f, sa), n);
    CHECK(card->pf_runs > runs0);
    CHECK_EQ(card->dec_runs, dec0); /* the prefill kernel did it, not decode steps */
    for (int p = 0; p < n; p++) REQUIRE(accel_decode(f, 1, &sb, &ids[p], b + (size_t)p * V) == 0);
    CHECK_MSG(memcmp(a, b, sizeof(float) * n * V) == 0, "%s W%d: prefill logits differ from decode",
              model_dir, wbits);
    REQUIRE(tf_read_kv(f, sa, n, ka) == 0 && tf_read_kv(f, sb, n, kb) == 0);
    CHECK_MSG(memcmp(ka, kb, tf_kv_bytes(f, n)) == 0, "%s W%d: prefill KV differs from decode",
              model_dir, wbits);
    for (int p = n; p < cap; p++) {
        REQUIRE(accel_decode(f, 1, &sa, &ids[p], a + (size_t)p * V) == 0);
        REQUIRE(accel_decode(f, 1, &sb, &ids[p], b + (size_t)p * V) == 0);
    }
    CHECK(memcmp(a + (size_t)n * V, b + (size_t)n * V, sizeof(float) * more * V) == 0);
    accel_seq_free(f, sa);
    accel_seq_free(f, sb);
    free(ids);
    free(a);
    free(b);
    free(ka);
    free(kb);
    accel_free(f);
    model_free(m);
}

TEST(fpga_prefill_dense_equals_decode_w8)
{
    prefill_vs_decode("models/stories260K", 8, 300, 300, 6, 0); /* 3 chunks, a partial one */
}

TEST(fpga_prefill_dense_equals_decode_w4)
{
    prefill_vs_decode("models/stories260K", 4, 141, 141, 4, 0);
}

TEST(fpga_prefill_in_calls_equals_decode)
{
    /* chunked prefill as the scheduler runs it: calls at positions that are no chunk multiple */
    prefill_vs_decode("models/stories260K", 8, 200, 37, 3, 0);
}

TEST(fpga_prefill_passes_equal_decode)
{
    /* passes of 128 rows (the standing workspace holds FPGA_PF_PASS): 3 passes, the last partial */
    prefill_vs_decode("models/stories260K", 8, 290, 290, 2, 128);
    /* multi-head attention, head_dim 32, vocab 32000 */
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    prefill_vs_decode("models/tiny-llama2-mha", 8, 150, 150, 2, 0);
}
