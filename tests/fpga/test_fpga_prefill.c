/* The card's prefill (fpga/kernels/prefill.c driven by fpga/prefill.c) against references it
 * was not written into:
 *  - decoding the prompt one token at a time on the same card (the decode kernel): a dense card
 *    prefill must give the same logits and the same KV bytes, bit for bit (the prefill runs every
 *    row through the decode kernel's arithmetic, fpga/kernels/dec_ops.h), and decoding must go on
 *    from it as from the decoded prompt — at W8 and W4, in one call or in chunks, in several
 *    passes of the standing workspace;
 *  - the CPU backend (float32): within the W8A8 tolerance of the decode kernel (fpga/QUANT.md),
 *    dense in the conformance suite (tests/accel: conf_prefill_vs_cpu_fpga_emu), sparse here;
 *  - the KV it exports: the bytes its tiles hold, which another card imports and decodes from
 *    exactly as the prefill card does;
 *  - FlexPrefill: with every block kept the sparse path (SIGU + SAU) reports density 1 and stays
 *    within the SAU's W8A8 tolerance of the dense card prefill; the SIGU's index inside the
 *    prefill equals the CPU reference's on the card's own quantized q and k;
 * plus the bad inputs. */
#include "cpu/flex.h"
#include "devices/devices.h"
#include "fpga/flex_host.h"
#include "fpga/kernels/dec_math.h"
#include "model/ckpt/golden.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "tests/util.h"
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
    accel_prefill_req r = {.seq = s,
                           .ids = ids,
                           .n = n,
                           .logits = lg,
                           .all_logits = all,
                           .sparse = sp,
                           .sparse_report = rep};
    return accel_prefill(d, &r);
}

/* Card prefill vs decoding the same ids one by one on the same card: logits, KV, and `more`
 * decode steps after it, all bit for bit. `chunk`: the prefill in calls of that many tokens. */
/* Decodes ids[from .. to) on both sequences, logits of position p at row p of a and b. */
static void decode_pair(accel_dev *f, accel_seq *sa, accel_seq *sb, const int32_t *ids, int from,
                        int to, int V, float *a, float *b)
{
    for (int p = from; p < to; p++) {
        REQUIRE(accel_decode(f, 1, &sa, &ids[p], a + (size_t)p * V) == 0);
        REQUIRE(accel_decode(f, 1, &sb, &ids[p], b + (size_t)p * V) == 0);
    }
}

/* Frees what a two-sequence comparison holds. */
static void pair_free(accel_dev *f, model *m, accel_seq *sa, accel_seq *sb, void *p0, void *p1,
                      void *p2, void *p3, void *p4)
{
    accel_seq_free(f, sa);
    accel_seq_free(f, sb);
    free(p0), free(p1), free(p2), free(p3), free(p4);
    accel_free(f);
    model_free(m);
}

static void prefill_vs_decode(const char *model_dir, int wbits, int n, int chunk, int more,
                              int pass_rows, int run_rows)
{
    char err[512];
    tf_cache_env();
    model *m = model_load(model_dir, err, sizeof err);
    REQUIRE(m);
    accel_opts o = {.weight_bits = wbits};
    accel_dev *f = devices_open("fpga-emu", m, &o, err, sizeof err);
    REQUIRE(f);
    accel_info info;
    accel_get_info(f, &info);
    CHECK(info.caps & ACCEL_CAP_PREFILL);
    if (pass_rows) REQUIRE(fpga_dev_set_pass_rows(f, pass_rows, run_rows) == 0);
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
    decode_pair(f, sa, sb, ids, n, cap, V, a, b);
    CHECK(memcmp(a + (size_t)n * V, b + (size_t)n * V, sizeof(float) * more * V) == 0);
    pair_free(f, m, sa, sb, ids, a, b, ka, kb);
}

TEST(fpga_prefill_dense_equals_decode_w8)
{
    prefill_vs_decode("models/stories260K", 8, 300, 300, 6, 0, 0); /* 3 chunks, a partial one */
}

TEST(fpga_prefill_dense_equals_decode_w4)
{
    prefill_vs_decode("models/stories260K", 4, 141, 141, 4, 0, 0);
}

TEST(fpga_prefill_in_calls_equals_decode)
{
    /* chunked prefill as the scheduler runs it: calls at positions that are no chunk multiple */
    prefill_vs_decode("models/stories260K", 8, 200, 37, 3, 0, 0);
}

TEST(fpga_prefill_passes_equal_decode)
{
    /* passes of 128 rows (the standing workspace holds FPGA_PF_PASS): 3 passes, the last partial;
     * then one pass in runs of 128 rows */
    prefill_vs_decode("models/stories260K", 8, 290, 290, 2, 128, 0);
    prefill_vs_decode("models/stories260K", 8, 290, 290, 2, FPGA_PF_PASS, 128);
    /* multi-head attention, head_dim 32, vocab 32000 */
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    prefill_vs_decode("models/tiny-llama2-mha", 8, 150, 150, 2, 0, 0);
}

/* mean and max KL(a || b) over n rows */
static void kl_rows(const float *a, const float *b, int n, int V, double *mean, double *mx)
{
    double sum = 0;
    *mx = 0;
    for (int p = 0; p < n; p++) {
        double kl = tf_kl(a + (size_t)p * V, b + (size_t)p * V, V);
        sum += kl;
        if (kl > *mx) *mx = kl;
    }
    *mean = sum / n;
}

static int argmax(const float *x, int n)
{
    int k = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[k]) k = i;
    return k;
}

/* The SAU's attention is W8A8 (int8 q per row and head, int8 P per row, flex_kernel.h) where
 * the dense path's is the decode datapath's (fp32 q and P): on these prompts the sparse path with
 * every block kept moves the logits by a mean KL of 0.0023-0.0026 from the dense card prefill
 * (and from the CPU reference by 0.0033 where the dense card prefill is at 0.0026), the size of
 * the W8A8 error itself: 0.01 bounds the mean with ~4x margin, 0.25 any one row as for decode. */
#define SAU_MEAN_KL 0.01

/* FlexPrefill with every block kept: min_budget covers the whole prompt, so every head keeps
 * every causal block (as the CPU reference's sparse_all_blocks test on the daemon). The sparse
 * path runs (SIGU + SAU in every layer) and reports density 1 exactly, agrees with the dense card
 * prefill within the SAU's tolerance (not bit for bit: see SAU_MEAN_KL), writes identical KV for
 * layer 0 (computed before any attention), and decoding goes on from it. */
TEST(fpga_prefill_sparse_all_blocks_near_dense)
{
    model *m;
    accel_dev *f;
    if (tf_open("fpga-emu", 8, &m, &f)) return;
    enum { N = 400, MORE = 4 };
    const int V = m->cfg.vocab, L = m->cfg.n_layers, H = m->cfg.n_heads;
    int32_t *ids = ids_of(N + MORE, V, 5);
    float *a = malloc(sizeof(float) * (N + MORE) * V), *b = malloc(sizeof(float) * (N + MORE) * V);
    uint8_t *ka = malloc(tf_kv_bytes(f, N)), *kb = malloc(tf_kv_bytes(f, N));
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(f, N + MORE, &sa) == 0 && accel_seq_new(f, N + MORE, &sb) == 0);
    accel_sparse_report rd, rs;
    accel_sparse all = t_flex_sparse(1.0f, 0.1f, N, 0, 256);
    CHECK_EQ(prefill(f, sa, ids, N, a, 1, NULL, &rd), 0);
    CHECK_EQ(prefill(f, sb, ids, N, b, 1, &all, &rs), 0);
    CHECK_EQ(rd.layers_sparse, 0);
    CHECK_EQ(rd.density, 1.0);
    CHECK_EQ(rs.layers_sparse, L);
    const int nb = (N + 127) / 128;
    CHECK_EQ(rs.blocks_causal, (int64_t)L * H * nb * (nb + 1) / 2);
    CHECK_EQ(rs.blocks_computed, rs.blocks_causal);
    CHECK_EQ(rs.density, 1.0);
    double mean, mx;
    kl_rows(a, b, N, V, &mean, &mx);
    int agree = 0;
    for (int p = 0; p < N; p++)
        agree += argmax(a + (size_t)p * V, V) == argmax(b + (size_t)p * V, V);
    /* measured: mean 0.0026, max 0.067, 379 of 400 (random ids: flat distributions, near ties) */
    CHECK_MSG(mean <= SAU_MEAN_KL, "mean KL %.5f", mean);
    CHECK_MSG(mx <= 0.25, "max KL %.4f", mx);
    CHECK_MSG(agree >= N * 9 / 10, "argmax agreement %d of %d", agree, N);
    REQUIRE(tf_read_kv(f, sa, N, ka) == 0 && tf_read_kv(f, sb, N, kb) == 0);
    const uint64_t layer_bytes = tf_kv_bytes(f, N) / L;
    CHECK(memcmp(ka, kb, layer_bytes) == 0);

    decode_pair(f, sa, sb, ids, N, N + MORE, V, a, b);
    kl_rows(a + (size_t)N * V, b + (size_t)N * V, MORE, V, &mean, &mx);
    CHECK_MSG(mean <= SAU_MEAN_KL, "decoding after: mean KL %.5f", mean); /* measured 0.0013 */
    pair_free(f, m, sa, sb, ids, a, b, ka, kb);
}

/* A sparse prefill of a structured prompt: the report adds up (density below 1, the SAU's
 * cache counts consistent), and the index the SIGU built inside the prefill for the last layer
 * equals the CPU reference's (cpu_flex_index_build) on the card's own quantized q and k of that
 * layer, read back from the workspace. */
static void sparse_index(const char *dir, int n, int min_budget, int run_rows)
{
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    model *m;
    accel_dev *f;
    if (tf_open_dir(dir, "fpga-emu", 8, &m, &f)) return;
    const int L = m->cfg.n_layers, H = m->cfg.n_heads, Hk = m->cfg.n_kv_heads, d = m->cfg.head_dim;
    REQUIRE(fpga_dev_set_pass_rows(f, FPGA_PF_PASS, run_rows) == 0);
    int32_t *ids = tf_structured_ids(m, n);
    REQUIRE(ids);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *s;
    REQUIRE(accel_seq_new(f, n + 1, &s) == 0);
    accel_sparse sp = t_flex_sparse(0.9f, 0.1f, min_budget, 0, -1);
    accel_sparse_report rep;
    CHECK_EQ(prefill(f, s, ids, n, lg, 0, &sp, &rep), 0);
    fpga_pf_result res;
    uint64_t ws_off;
    uint32_t ws_rows, ws_flags;
    REQUIRE(fpga_dev_last_prefill(f, &res, &ws_off, &ws_rows, &ws_flags) == 0);
    const int nb = (n + 127) / 128;
    CHECK_EQ(rep.layers_sparse, L);
    CHECK_EQ(rep.blocks_causal, (int64_t)L * H * nb * (nb + 1) / 2);
    CHECK(rep.density > 0 && rep.density < 1);
    const int per_run = run_rows ? run_rows : FPGA_PF_RUN_ROWS, runs = (n + per_run - 1) / per_run;
    CHECK_EQ(res.runs, (uint64_t)L * (2 * runs + 1) + 1); /* QKV, ATTN, POST per layer; HEAD */
    CHECK_EQ(res.hits + res.misses, res.accesses);
    CHECK_EQ(res.hot_hits + res.cold_hits, res.hits);
    CHECK_EQ(res.kv_bytes, res.misses * fpga_flex_kvblock_bytes(d));
    CHECK_EQ(res.kv_bytes_nocache, res.accesses * fpga_flex_kvblock_bytes(d));
    /* decoding goes on from it */
    int32_t next = argmax(lg, m->cfg.vocab);
    CHECK_EQ(accel_decode(f, 1, &s, &next, lg), 0);

    /* the last layer's q, k, v and index, as the units left them */
    tf_pf_last w;
    REQUIRE(tf_pf_last_read(f, n, &w) == 0);
    sparse_flex_params cp;
    sparse_flex_params_default(&cp);
    cp.min_budget = min_budget;
    cpu_flex_qkv x = {n, H, Hk, d, w.q, (size_t)H * d, w.k, w.v, (size_t)Hk * d, 0};
    cpu_flex_index *ix;
    REQUIRE(cpu_flex_index_build(NULL, &cp, &x, &ix) == 0);
    CHECK_MSG(tf_pf_last_same_index(&w, ix),
              "%s: the prefill's index (nnz %u) differs from the CPU reference's (nnz %lld)", dir,
              w.nnz, (long long)ix->nnz);
    cpu_flex_index_free(ix);
    tf_pf_last_free(&w);
    accel_seq_free(f, s);
    free(lg);
    free(ids);
    accel_free(f);
    model_free(m);
}

TEST(fpga_prefill_sparse_index_equals_cpu)
{
    sparse_index("models/stories260K", 500, 128, 0); /* a partial last block */
    /* a structured long prompt: 2K tokens, 16 blocks, multi-head attention; QKV and POST in
     * runs of 512 rows */
    sparse_index("models/tiny-llama2-mha", 2048, 256, 512);
}

/* The KV a card prefill exports: per pass every layer in order, exactly the bytes its tiles hold
 * (the decode kernel's, bit for bit); another card imports it and decodes exactly as the
 * prefill card does from its own tiles. */
TEST(fpga_prefill_exports_its_kv)
{
    model *m;
    accel_dev *a;
    if (tf_open("fpga-emu:0", 8, &m, &a)) return;
    char err[512];
    accel_opts o = {.weight_bits = 8};
    accel_dev *b = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(b);
    REQUIRE(fpga_dev_set_pass_rows(a, 128, 0) == 0);
    enum { N = 300, MORE = 5 };
    const int V = m->cfg.vocab, L = m->cfg.n_layers;
    const int Hk = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    int32_t *ids = ids_of(N + MORE, V, 9);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    tf_kv kv;
    REQUIRE(tf_cpu_kv(a, ids, N, lb, &kv) == 0); /* the sink's chunks, deep-copied */
    CHECK_EQ(kv.n_chunks, 3 * L);                /* 3 passes of 128 rows, every layer each */
    for (int i = 0; i < kv.n_chunks; i++) {
        CHECK_EQ(kv.chunks[i].layer, i % L);
        CHECK_EQ(kv.chunks[i].pos0, i / L * 128);
        CHECK_EQ(kv.chunks[i].n_tokens, i / L < 2 ? 128 : N - 256);
    }
    /* the same prompt prefilled into a kept sequence: its tiles hold the exported bytes */
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(a, N + MORE, &sa) == 0 && accel_seq_new(b, N + MORE, &sb) == 0);
    REQUIRE(prefill(a, sa, ids, N, la, 0, NULL, NULL) == 0);
    CHECK(memcmp(la, lb, sizeof(float) * V) == 0);
    uint8_t *tiles = malloc(tf_kv_bytes(a, N));
    REQUIRE(tf_read_kv(a, sa, N, tiles) == 0);
    int bad = 0;
    for (int i = 0; i < kv.n_chunks; i++) {
        const proto_kv_layer *c = &kv.chunks[i];
        for (int t = 0; t < c->n_tokens; t++)
            for (int h = 0; h < Hk; h++) {
                const uint8_t *r =
                    tiles + (((size_t)c->layer * N + c->pos0 + t) * Hk + h) * 2 * (hd + 2);
                size_t e = (size_t)t * Hk + h;
                bad += memcmp(r, c->k + e * hd, hd) || memcmp(r + hd, &c->k_scale[e], 2) ||
                       memcmp(r + hd + 2, c->v + e * hd, hd) ||
                       memcmp(r + 2 * hd + 2, &c->v_scale[e], 2);
            }
    }
    CHECK_EQ(bad, 0);
    REQUIRE(tf_import(b, sb, &kv) == 0);
    CHECK_EQ(accel_seq_len(b, sb), N);
    for (int p = N; p < N + MORE; p++) {
        REQUIRE(accel_decode(a, 1, &sa, &ids[p], la) == 0);
        REQUIRE(accel_decode(b, 1, &sb, &ids[p], lb) == 0);
        CHECK(memcmp(la, lb, sizeof(float) * V) == 0);
    }
    accel_seq_free(a, sa);
    accel_seq_free(b, sb);
    tf_kv_free(&kv);
    free(tiles);
    free(ids);
    free(la);
    free(lb);
    accel_free(b);
    accel_free(a);
    model_free(m);
}

static int fail_layer(void *ctx, const proto_kv_layer *c)
{
    int *left = ctx;
    (void)c;
    return --*left < 0 ? ACCEL_ERR_INVALID : 0; /* the sink's status, not the card's */
}

/* Bad requests are refused before anything runs; a sink without a function and one that refuses
 * the third layer stop a prefill (the cancel flag and a sink's status in general are the
 * conformance suite's, tests/accel: conf_cancel_*, conf_sink_error_*); a sequence whose import
 * failed refuses to prefill; runs whose arguments the kernel cannot honour end in a device
 * error, not a crash. */
TEST(fpga_prefill_bad_inputs)
{
    model *m;
    accel_dev *f;
    if (tf_open("fpga-emu", 8, &m, &f)) return;
    enum { N = 300 };
    const int V = m->cfg.vocab;
    int32_t *ids = ids_of(N, V, 3);
    float *lg = malloc(sizeof(float) * V);
    accel_seq *s;
    REQUIRE(accel_seq_new(f, N, &s) == 0);
    /* FlexPrefill parameters out of range */
    accel_sparse bad = t_flex_sparse(2.0f, 0.1f, 128, 0, -1);
    CHECK_EQ(prefill(f, s, ids, N, lg, 0, &bad, NULL), ACCEL_ERR_INVALID);
    bad = t_flex_sparse(0.9f, -1.0f, 128, 0, -1);
    CHECK_EQ(prefill(f, s, ids, N, lg, 0, &bad, NULL), ACCEL_ERR_INVALID);
    /* more tokens than the sequence holds, an id outside the vocabulary */
    CHECK_EQ(prefill(f, s, ids, N + 1, lg, 0, NULL, NULL), ACCEL_ERR_INVALID);
    int32_t keep = ids[7];
    ids[7] = V;
    CHECK_EQ(prefill(f, s, ids, N, lg, 0, NULL, NULL), ACCEL_ERR_INVALID);
    ids[7] = keep;
    /* a sink without a function; a sink that refuses the third layer */
    accel_kv_sink nosink = {NULL, NULL};
    accel_prefill_req r = {.seq = s, .ids = ids, .n = N, .logits = lg, .kv = &nosink};
    CHECK_EQ(accel_prefill(f, &r), ACCEL_ERR_INVALID);
    int left = 2;
    accel_kv_sink sink = {fail_layer, &left};
    r.kv = &sink;
    CHECK_EQ(accel_prefill(f, &r), ACCEL_ERR_INVALID);
    CHECK_EQ(accel_seq_len(f, s), 0);
    accel_info info;
    accel_get_info(f, &info);
    CHECK_EQ(info.health, ACCEL_HEALTH_OK); /* a refusing sink is not a card fault */
    /* the kernel's own checks: a workspace outside the banks, an unknown mode, a row range not
     * on a chunk boundary, sparse attention on a pass too short for the units */
    fpga_card *c = fpga_dev_card(f);
    uint64_t ws_off;
    fpga_dec_kvmap km; /* these runs address a slab at the bottom of the pool */
    REQUIRE(fpga_dev_seq_kvmap(f, s, &km) == 0);
    const uint64_t kv_off = km.base;
    const uint32_t part_tiles = fpga_dec_part_tiles(64, c->desc.kv_parts);
    CHECK_EQ(accel_prefill(f, &(accel_prefill_req){.seq = s, .ids = ids, .n = 10, .logits = lg}),
             0);
    REQUIRE(fpga_dev_last_prefill(f, NULL, &ws_off, NULL, NULL) == 0);
    CHECK_EQ(fpga_card_pf_run(c, FPGA_PF_DENSE | FPGA_PF_F_KVF, 0, 10, 10, 0, 10, kv_off,
                              part_tiles, c->bank_bytes, 0),
             ACCEL_ERR_DEVICE);
    CHECK_EQ(fpga_card_pf_run(c, 9, 0, 10, 10, 0, 10, kv_off, part_tiles, ws_off, 0),
             ACCEL_ERR_DEVICE);
    CHECK_EQ(fpga_card_pf_run(c, FPGA_PF_DENSE, 0, 10, 10, 3, 10, kv_off, part_tiles, ws_off, 0),
             ACCEL_ERR_DEVICE);
    CHECK_EQ(fpga_card_pf_run(c, FPGA_PF_DENSE, m->cfg.n_layers, 10, 10, 0, 10, kv_off, part_tiles,
                              ws_off, 0),
             ACCEL_ERR_DEVICE);
    CHECK_EQ(fpga_card_pf_run(c, FPGA_PF_ATTN | FPGA_PF_F_KVF | FPGA_PF_F_SPARSE, 0, 0, 10, 0, 10,
                              kv_off, part_tiles, ws_off, 0),
             ACCEL_ERR_DEVICE);
    /* the card is fine: the sequence goes on */
    CHECK_EQ(accel_decode(f, 1, &s, &ids[10], lg), 0);
    CHECK_EQ(accel_seq_len(f, s), 11);
    accel_seq_free(f, s);
    /* a sequence whose import failed refuses to prefill */
    REQUIRE(accel_seq_new(f, N, &s) == 0);
    tf_kv kv;
    accel_opts oc = {.threads = 1};
    char err[256];
    accel_dev *cpu = devices_open("cpu", m, &oc, err, sizeof err);
    REQUIRE(cpu && tf_cpu_kv(cpu, ids, 4, lg, &kv) == 0);
    ((uint8_t *)kv.chunks[0].k)[3] = 0x80; /* -128: not a proto/kv.h value */
    CHECK_EQ(tf_import(f, s, &kv), ACCEL_ERR_CORRUPT);
    CHECK_EQ(prefill(f, s, ids, 4, lg, 0, NULL, NULL), ACCEL_ERR_CORRUPT);
    accel_get_info(f, &info);
    CHECK_EQ(info.health, ACCEL_HEALTH_OK);
    tf_kv_free(&kv);
    accel_free(cpu);
    accel_seq_free(f, s);
    free(ids);
    free(lg);
    accel_free(f);
    model_free(m);
}

/* A sparse card prefill against the CPU backend's sparse prefill (cpu/flex.h, float32) with the
 * same FlexPrefill parameters on a structured prompt: the same density (the index is built from
 * W8A8 q and k on the card, from float ones on the CPU: measured equal here) and logits within
 * the card's W8A8 tolerance of the CPU's (measured mean KL 0.0027, the dense paths' 0.0026). */
TEST(fpga_prefill_sparse_matches_cpu_sparse)
{
    model *m;
    accel_dev *f;
    if (tf_open("fpga-emu", 8, &m, &f)) return;
    char err[256];
    accel_opts oc = {.threads = 1};
    accel_dev *c = devices_open("cpu", m, &oc, err, sizeof err);
    REQUIRE(c);
    enum { N = 400 };
    const int V = m->cfg.vocab;
    int32_t *ids = tf_structured_ids(m, N);
    REQUIRE(ids);
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    accel_seq *sc, *sf;
    REQUIRE(accel_seq_new(c, N, &sc) == 0 && accel_seq_new(f, N, &sf) == 0);
    accel_sparse sp = t_flex_sparse(0.9f, 0.1f, 128, 0, 256);
    accel_sparse_report rc, rf;
    REQUIRE(prefill(c, sc, ids, N, a, 1, &sp, &rc) == 0);
    REQUIRE(prefill(f, sf, ids, N, b, 1, &sp, &rf) == 0);
    CHECK_EQ(rf.layers_sparse, rc.layers_sparse);
    CHECK(rf.density < 1);
    CHECK_MSG(fabs(rf.density - rc.density) <= 0.05, "density card %.4f cpu %.4f", rf.density,
              rc.density);
    double mean, mx;
    kl_rows(a, b, N, V, &mean, &mx);
    CHECK_MSG(mean <= 0.005, "mean KL %.5f", mean);
    CHECK_MSG(mx <= 0.25, "max KL %.4f", mx);
    accel_seq_free(c, sc);
    accel_seq_free(f, sf);
    free(ids);
    free(a);
    free(b);
    accel_free(c);
    accel_free(f);
    model_free(m);
}
