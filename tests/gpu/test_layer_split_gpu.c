/* Layer-split prefill on the CUDA device (accel_prefill_req.layer0 / layers, gpu/gpu_split.h):
 * a chunk's layers spread over several calls gives whole calls' results bit for bit — every
 * kernel sees the inputs it sees in a whole call (only the residual stream lives in the
 * sequence's buffer), in the same passes. On a head_dim-128 GQA model written by mkmodel (5
 * layers, 4 query / 2 KV heads), 512 tokens in chunks of one 128-token block and whole, k = 1
 * and 3 layers a call against whole calls: dense, FlexPrefill, XAttention (block 128) and
 * Tri-shape; the logits of every row, the KV chunks handed to a sink during the prefill, the KV
 * exported after it, the density and a decode step after it (tests/layer_split.h). And a
 * dense chunk longer than the engine's pass (gpu_tune chunk=256) split without a sink: the same
 * logits; with a sink it is refused (ACCEL_ERR_UNSUPPORTED, gpu_split.h), the sequence as it
 * was. Skipped without a CUDA device. */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/gpu/gpu_util.h"
#include "tests/layer_split.h"
#include <stdlib.h>
#include <string.h>

#define SPLIT_HD128 "--hidden 512 --layers 5 --heads 4 --kv-heads 2 --head-dim 128 " \
                    "--intermediate 768 --vocab 2000 --max-pos 4096"

TEST(gpu_layer_split_equals_whole_calls)
{
    model *m;
    accel_dev *d;
    char why[600];
    int r = tg_open_mkmodel(SPLIT_HD128, "split128", NULL, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_info info;
    accel_get_info(d, &info);
    CHECK(info.caps & ACCEL_CAP_LAYER_SPLIT);
    const int n = 512, V = m->cfg.vocab;
    int32_t *ids = tg_ids(n, V, 7);
    REQUIRE(ids);
    accel_sparse meth[3];
    meth[0] = t_flex_sparse(0.5f, 0.1f, 0, 0, -1);
    sparse_params_default(&meth[1].p, SPARSE_MODE_XATTN);
    meth[1].p.xattention_block_size = 128;
    meth[1].p.xattention_threshold = 0.5;
    sparse_params_default(&meth[2].p, SPARSE_MODE_TRISHAPE);
    meth[2].p.num_retained_start_tokens_in_cache = 128;
    meth[2].p.num_retained_recent_tokens_in_cache = 0;
    for (int mth = -1; mth < 3; mth++) {
        const accel_sparse *sp = mth < 0 ? NULL : &meth[mth];
        REQUIRE(ls_check_split(d, ids, n, 128, sp) >= 0);
        REQUIRE(ls_check_split(d, ids, n, 0, sp) >= 0);
    }
    accel_get_info(d, &info);
    CHECK_EQ(info.n_seqs, 0);
    free(ids);
    accel_free(d);
    model_free(m);
}

static int ignore_layer(void *ctx, const proto_kv_layer *c)
{
    (void)ctx, (void)c;
    return ACCEL_OK;
}

TEST(gpu_layer_split_dense_past_one_pass)
{
    model *m;
    accel_dev *d;
    char why[600];
    const accel_opts o = {.gpu_tune = "chunk=256"};
    int r = tg_open_mkmodel(SPLIT_HD128, "split128p", &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int n = 640, V = m->cfg.vocab;
    int32_t *ids = tg_ids(n, V, 11);
    float *ref = malloc(sizeof(float) * (size_t)n * V), *lg = malloc(sizeof(float) * (size_t)n * V);
    REQUIRE(ids && ref && lg);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    accel_prefill_req w = {.seq = s, .ids = ids, .n = n, .logits = ref, .all_logits = 1};
    REQUIRE(accel_prefill(d, &w) == 0);
    accel_seq_free(d, s);
    for (int k = 1; k <= 3; k += 2) {
        REQUIRE(accel_seq_new(d, n, &s) == 0);
        accel_kv_sink sink = {ignore_layer, NULL};
        accel_prefill_req q = {.seq = s, .ids = ids, .n = n, .logits = lg, .all_logits = 1,
                               .kv = &sink, .layer0 = 0, .layers = k};
        CHECK_EQ(accel_prefill(d, &q), ACCEL_ERR_UNSUPPORTED);
        CHECK_EQ(accel_seq_len(d, s), 0);
        q.kv = NULL;
        for (int l0 = 0; l0 < m->cfg.n_layers; l0 += k) {
            q.layer0 = l0;
            q.layers = k < m->cfg.n_layers - l0 ? k : m->cfg.n_layers - l0;
            REQUIRE(accel_prefill(d, &q) == 0);
        }
        CHECK_EQ(accel_seq_len(d, s), n);
        CHECK_MSG(t_max_abs_diff(ref, lg, (size_t)n * V) == 0, "k %d: max |diff| %g", k,
                  t_max_abs_diff(ref, lg, (size_t)n * V));
        accel_seq_free(d, s);
    }
    free(ids);
    free(ref);
    free(lg);
    accel_free(d);
    model_free(m);
}
