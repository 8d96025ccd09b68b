/* The CUDA backend's paged KV (gpu/kv_pool.cu) through its head_dim-128 kernels: the checks of
 * tests/accel/paged_checks.h (copy-on-write of a shared partial block, save/load bit for bit,
 * interleaved blocks equal to consecutive ones, the export of held KV equal to the prefill's
 * export, NOMEM and recovery; the blocks loaded from host memory overlapped with the prefill
 * after them) on an mkmodel GQA checkpoint
 * with the Llama-3 head (the conformance suite's stories260K has head_dim 8, so it never reaches
 * the warp-specialized prefill kernel's tensor maps or the one-kernel decode attention), once per
 * kernel choice that reads the cache another way (gpu/tuning.h: the mma.sync prefill kernel, the
 * two-kernel decode attention, no CUDA graphs, no fused decode kernels), plus head_dim 64 (the
 * one-warpgroup wgmma kernel and the split decode kernel), and FlexPrefill's sparse prefill
 * (index and block-sparse attention through the table) into scattered blocks == into
 * consecutive ones. Bit for bit throughout (paged_checks.h says why). Skipped without a GPU. */
#include "tests/accel/paged_checks.h"
#include "tests/gpu/gpu_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdio.h>

#define HD128 "--hidden 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 768 " \
              "--vocab 2000 --max-pos 4096"
#define HD64 "--hidden 256 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 --intermediate 512 " \
             "--vocab 1000 --max-pos 4096"

static void paged_case(const char *args, const char *name, const char *tune)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.gpu_tune = tune};
    int r = tg_open_mkmodel(args, name, &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab;
    int f0 = t_failed();
    pc_fork_cow(d, V);
    pc_save_load(d, V);
    pc_interleaved(d, V, 8);
    pc_export_held(d, V);
    if (t_failed() != f0) fprintf(stderr, "  (above: %s, tune %s)\n", name, tune ? tune : "-");
    accel_free(d);
    model_free(m);
}

TEST(gpu_paged_hd128) { paged_case(HD128, "paged128", NULL); }
TEST(gpu_paged_hd128_mma8) { paged_case(HD128, "paged128", "attn=mma8"); }
TEST(gpu_paged_hd128_two_kernel_decode) { paged_case(HD128, "paged128", "decode_attn=two,graphs=0"); }
TEST(gpu_paged_hd128_unfused) { paged_case(HD128, "paged128", "fused=0,pdl=0"); }
TEST(gpu_paged_hd64_wgmma) { paged_case(HD64, "paged64", "attn=wgmma"); }
TEST(gpu_paged_hd64) { paged_case(HD64, "paged64", NULL); }

/* The export of held KV in int4 (the int8 export runs in every case above). */
TEST(gpu_paged_export_held_int4)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.kv_dtype = PROTO_KV_INT4};
    int r = tg_open_mkmodel(HD128, "paged128", &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    pc_export_held(d, m->cfg.vocab);
    accel_free(d);
    model_free(m);
}

/* A prefix-cache hit (a fork of a holder's first two blocks, then the prompt's rest prefilled)
 * against the same prompt cold, in both kernel families that read the cache: the prompt's last
 * row and 3 decode steps. Not bit for bit (the rest is prefilled over cached keys: another order
 * of float32 sums), so held to the bound of two GPU computations that differ in their order of
 * sums on this checkpoint (max |diff| 0.05, mean KL 1e-4: tests/gpu/test_flex_prefill.c's) and
 * the same greedy token on every row. */
static void hit_vs_cold_case(const char *tune)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.gpu_tune = tune};
    int r = tg_open_mkmodel(HD128, "paged128", &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab;
    float *cold = malloc(sizeof(float) * 4 * (size_t)V), *hit = malloc(sizeof(float) * 4 * (size_t)V);
    REQUIRE(cold && hit);
    pc_hit_vs_cold_rows(d, V, cold, hit);
    double kl, top1, mx;
    tg_compare(cold, hit, 4, V, &kl, &top1, &mx);
    fprintf(stderr, "  hit vs cold (tune %s): max |diff| %.4g, mean KL %.3g, top-1 %.2f\n",
            tune ? tune : "-", mx, kl, top1);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4 && top1 == 1.0, "hit vs cold: max |diff| %.4g, KL %.3g, top-1 %.2f",
              mx, kl, top1);
    free(cold), free(hit);
    accel_free(d);
    model_free(m);
}

TEST(gpu_paged_hit_vs_cold) { hit_vs_cold_case(NULL); }
TEST(gpu_paged_hit_vs_cold_mma8) { hit_vs_cold_case("attn=mma8"); }

TEST(gpu_paged_nomem_hd128)
{
    model *m;
    accel_dev *d;
    char why[600];
    int r = tg_open_mkmodel(HD128, "paged128", NULL, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_info i;
    accel_get_info(d, &i);
    accel_free(d);
    accel_opts o = {.mem_limit = 3 * i.kv_block_bytes};
    r = tg_open_mkmodel(HD128, "paged128", &o, &m, &d, why, sizeof why);
    REQUIRE(r == 0);
    pc_nomem(d, m->cfg.vocab);
    accel_free(d);
    model_free(m);
}

/* Sparse prefill (every block kept) of one prompt into a fresh pool and into blocks scattered by
 * other sequences: the same logits and the same decode after it. */
TEST(gpu_paged_sparse_scattered)
{
    model *m;
    accel_dev *d;
    char why[600];
    int r = tg_open_mkmodel(HD128, "paged128", NULL, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_info in;
    accel_get_info(d, &in);
    const int V = m->cfg.vocab, n = 700, B = in.kv_block_tokens;
    int32_t *ids = malloc(sizeof(int32_t) * n);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    REQUIRE(ids && la && lb);
    pc_ids(ids, n, V, 53);
    accel_sparse sp = t_flex_sparse(1.0f, 0.1f, n, 0, 256);
    accel_sparse_report rep;
    accel_seq *a, *b, *x, *y;
    REQUIRE(accel_seq_new(d, n + 4, &a) == 0);
    accel_prefill_req ra = {.seq = a, .ids = ids, .n = n, .logits = la, .sparse = &sp,
                            .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &ra) == 0);
    CHECK(rep.layers_sparse > 0); /* it did run sparse */
    REQUIRE(pc_decode(d, a, ids[1], la) == 0);
    /* scatter: x and y grow in turns, x is freed: b takes x's blocks, between y's */
    REQUIRE(accel_seq_new(d, 2 * n, &x) == 0 && accel_seq_new(d, 2 * n, &y) == 0);
    for (int p = 0; p < n; p += B) {
        REQUIRE(pc_prefill(d, x, ids, B, NULL) == 0);
        REQUIRE(pc_prefill(d, y, ids, B, NULL) == 0);
    }
    accel_seq_free(d, x);
    REQUIRE(accel_seq_new(d, n + 4, &b) == 0);
    accel_prefill_req rb = {.seq = b, .ids = ids, .n = n, .logits = lb, .sparse = &sp,
                            .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &rb) == 0);
    REQUIRE(pc_decode(d, b, ids[1], lb) == 0);
    CHECK_MSG(pc_same(la, lb, V), "sparse prefill into scattered blocks differs");
    accel_seq_free(d, a);
    accel_seq_free(d, b);
    accel_seq_free(d, y);
    free(ids);
    free(la);
    free(lb);
    accel_free(d);
    model_free(m);
}

/* The sparse prefill's workspace is admitted like KV (gpu/prefill_sparse.cu, sparse_ws_new: whole
 * chunks of free blocks lent from the pool for the call): in a pool of 64 blocks held by other
 * sequences but for 6 (the prompt's own KV: no whole free chunk), the sparse prefill is NOMEM with
 * nothing taken — although the GPU has memory to spare outside the pool — and once they are freed
 * it runs, with the logits of the same prefill into an empty pool, and gives its blocks back. */
TEST(gpu_paged_sparse_workspace_admitted)
{
    model *m;
    accel_dev *d;
    char why[600];
    int r = tg_open_mkmodel(HD128, "paged128", NULL, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_info in;
    accel_get_info(d, &in);
    accel_free(d);
    accel_opts o = {.mem_limit = 64 * in.kv_block_bytes};
    r = tg_open_mkmodel(HD128, "paged128", &o, &m, &d, why, sizeof why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab, n = 700, B = in.kv_block_tokens, fill = 29 * B;
    int32_t *ids = malloc(sizeof(int32_t) * fill);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    REQUIRE(ids && la && lb);
    pc_ids(ids, fill, V, 61);
    accel_sparse sp = t_flex_sparse(1.0f, 0.1f, n, 0, 256);
    accel_sparse_report rep;
    accel_seq *a, *b, *f1, *f2;
    REQUIRE(accel_seq_new(d, n, &a) == 0);
    accel_prefill_req ra = {.seq = a, .ids = ids, .n = n, .logits = la, .sparse = &sp,
                            .sparse_report = &rep};
    REQUIRE(accel_prefill(d, &ra) == 0);
    CHECK(rep.layers_sparse > 0);
    accel_get_info(d, &in);
    CHECK_MSG(in.kv_blocks_used == (n + B - 1) / B, "%d blocks used after a sparse prefill",
              in.kv_blocks_used);
    accel_seq_free(d, a);
    REQUIRE(accel_seq_new(d, fill, &f1) == 0 && accel_seq_new(d, fill, &f2) == 0);
    REQUIRE(pc_prefill(d, f1, ids, fill, NULL) == 0 && pc_prefill(d, f2, ids, fill, NULL) == 0);
    REQUIRE(accel_seq_new(d, n, &b) == 0);
    accel_prefill_req rb = {.seq = b, .ids = ids, .n = n, .logits = lb, .sparse = &sp,
                            .sparse_report = &rep};
    CHECK_EQ(accel_prefill(d, &rb), ACCEL_ERR_NOMEM);
    CHECK_EQ(accel_seq_len(d, b), 0);
    accel_get_info(d, &in);
    CHECK_EQ(in.kv_blocks_used, 2 * 29);
    CHECK_EQ(in.health, ACCEL_HEALTH_OK);
    accel_seq_free(d, f1);
    accel_seq_free(d, f2);
    REQUIRE(accel_prefill(d, &rb) == 0);
    CHECK(rep.layers_sparse > 0);
    CHECK_MSG(pc_same(la, lb, V), "the sparse prefill admitted after NOMEM differs");
    accel_get_info(d, &in);
    CHECK_EQ(in.kv_blocks_used, (n + B - 1) / B);
    accel_seq_free(d, b);
    free(ids);
    free(la);
    free(lb);
    accel_free(d);
    model_free(m);
}

/* A short chunk after a long cached prefix through the paged cache: the warp-specialized
 * attention splits its keys over blocks (gpu/attn_prefill_ws.cu; here 200 rows after 2,900 keys:
 * 4 heads x 2 query tiles = 8 blocks, 25 key tiles, so the automatic choice takes 3 splits on any
 * GPU of 12+ SMs), dense and block-sparse (FlexPrefill, every block kept, a 256-row chunk after
 * 2,944 keys). Its logits against the same calls with prefill_split=0, within test_shapes.c's
 * bounds for random-weight models (max |logit diff| 0.05, mean KL 1e-4: a split rounds P against
 * its own running max; a dropped or mis-weighted split is far outside them). Hopper with
 * head_dim 128 only (elsewhere both runs are the same kernel: still compared). */
static int split_chunk_run(const char *tune, int sparse, float *lg, int rows)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.gpu_tune = tune};
    int r = tg_open_mkmodel(HD128, "paged128", &o, &m, &d, why, sizeof why);
    if (r) return r;
    const int V = m->cfg.vocab, n0 = sparse ? 2944 : 2900, n = n0 + rows;
    int32_t *ids = malloc(sizeof(int32_t) * n);
    accel_seq *s = NULL;
    pc_ids(ids, n, V, 71);
    accel_sparse sp = t_flex_sparse(1.0f, 0.1f, n, 0, 256);
    accel_sparse_report rep = {0};
    accel_prefill_req rq = {.ids = ids + n0, .n = rows, .logits = lg, .all_logits = 1,
                            .sparse = sparse ? &sp : NULL, .sparse_report = &rep};
    r = accel_seq_new(d, n, &s);
    if (!r) r = pc_prefill(d, s, ids, n0, NULL);
    rq.seq = s;
    if (!r) r = accel_prefill(d, &rq);
    if (!r && sparse && rep.layers_sparse == 0) r = -2; /* it did not run sparse */
    if (s) accel_seq_free(d, s);
    free(ids);
    accel_free(d);
    model_free(m);
    return r ? -1 : 0;
}

static void split_chunk_case(int sparse)
{
    const int rows = sparse ? 256 : 200, V = 2000;
    float *a = malloc(sizeof(float) * rows * V), *b = malloc(sizeof(float) * rows * V);
    REQUIRE(a && b);
    int r = split_chunk_run(NULL, sparse, a, rows);
    if (r > 0) {
        free(a), free(b);
        SKIP("no CUDA device");
    }
    REQUIRE(r == 0);
    REQUIRE(split_chunk_run("prefill_split=0", sparse, b, rows) == 0);
    double kl, top1, mx;
    tg_compare(b, a, rows, V, &kl, &top1, &mx);
    fprintf(stderr, "  %s chunk, split vs unsplit: max |diff| %.4g, mean KL %.3g, top-1 %.4f\n",
            sparse ? "sparse" : "dense", mx, kl, top1);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "split vs unsplit chunk: max |diff| %.4g, KL %.3g", mx, kl);
    free(a), free(b);
}

TEST(gpu_paged_split_chunk) { split_chunk_case(0); }
TEST(gpu_paged_split_chunk_sparse) { split_chunk_case(1); }
