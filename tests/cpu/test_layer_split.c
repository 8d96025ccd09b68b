/* Layer-split prefill on the CPU backend (accel_prefill_req.layer0 / layers, ACCEL_CAP_LAYER_SPLIT):
 * a chunk's layers spread over several calls gives whole calls' results bit for bit.
 *  - dense and each sparse method (FlexPrefill, XAttention, Tri-shape, each actually sparse),
 *    chunks of one block and the whole prompt, k = 1 and 3 of 5 layers per call (3 + 2) against
 *    whole calls (k = all): the same logits (every row), the same KV (accel_kv_export of the
 *    whole prompt), the same stream of KV chunks through a sink, the same density, and the same
 *    decode step after it (tests/layer_split.h, shared with the GPU's test);
 *  - the length grows only with the call that runs the last layer, logits are written only there;
 *  - a continuation that does not match the chunk in progress is refused;
 *  - a cancel between layers abandons the chunk (length unchanged, the chunk prefills again from
 *    layer 0 to the same bits); truncate, a decode step and free of a sequence mid-split leave
 *    no blocks behind. */
#include "tests/test.h"
#include "tests/util.h"
#include "cpu/backend.h"
#include "tests/layer_split.h"
#include <stdlib.h>
#include <string.h>

#define SPLIT_LAYERS 5
#define SPLIT_MODEL "--preset tiny-gqa --layers 5 --shards 1" /* mkmodel: SPLIT_LAYERS layers */

TEST(cpu_layer_split_equals_whole_calls_dense_and_sparse)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open_mkmodel(SPLIT_MODEL, "cpu", &m, &d) == 0);
    REQUIRE(m->cfg.n_layers == SPLIT_LAYERS);
    accel_info info;
    accel_get_info(d, &info);
    CHECK(info.caps & ACCEL_CAP_LAYER_SPLIT);
    const int n = 384, V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    accel_sparse meth[3];
    meth[0] = t_flex_sparse(0.3f, 0.0f, 0, 0, -1);
    sparse_params_default(&meth[1].p, SPARSE_MODE_XATTN);
    meth[1].p.xattention_block_size = 32;
    meth[1].p.xattention_stride = 4;
    meth[1].p.xattention_threshold = 0.5;
    sparse_params_default(&meth[2].p, SPARSE_MODE_TRISHAPE);
    meth[2].p.num_retained_start_tokens_in_cache = 128;
    meth[2].p.num_retained_recent_tokens_in_cache = 0;
    for (int mth = -1; mth < 3; mth++) {
        const accel_sparse *sp = mth < 0 ? NULL : &meth[mth];
        const int bs = sp ? sparse_block_size(&sp->p) : 64;
        const int chunks[2] = {bs, 0};
        for (int c = 0; c < 2; c++) {
            double density = ls_check_split(d, ids, n, chunks[c], sp);
            REQUIRE(density >= 0);
            /* actually sparse where the method skips anything at these chunks */
            if (sp && (chunks[c] || sp->p.mode != SPARSE_MODE_TRISHAPE)) CHECK(density < 1.0);
        }
    }
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(cpu_layer_split_cancel_truncate_free)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open_mkmodel(SPLIT_MODEL, "cpu", &m, &d) == 0);
    const int n = 256, c = 128, V = m->cfg.vocab;
    int32_t ids[256];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 13 + 7) % V);
    float *ref = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
    REQUIRE(ref && lg);
    accel_seq *s;
    /* the reference: two whole calls */
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    accel_prefill_req w = {.seq = s, .ids = ids, .n = c};
    REQUIRE(accel_prefill(d, &w) == 0);
    w.ids = ids + c;
    w.logits = ref;
    REQUIRE(accel_prefill(d, &w) == 0);
    accel_seq_free(d, s);

    REQUIRE(accel_seq_new(d, n, &s) == 0);
    REQUIRE(accel_prefill(d, &(accel_prefill_req){.seq = s, .ids = ids, .n = c}) == 0);
    /* the second chunk: layers 0-1, then a mismatched continuation, then a cancelled one */
    accel_prefill_req r = {.seq = s, .ids = ids + c, .n = c, .logits = lg, .layer0 = 0, .layers = 2};
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(accel_seq_len(d, s), c);
    accel_prefill_req bad = r;
    bad.layer0 = 3;
    CHECK_EQ(accel_prefill(d, &bad), ACCEL_ERR_INVALID);
    bad = r;
    bad.layer0 = 2;
    bad.n = c - 1;
    CHECK_EQ(accel_prefill(d, &bad), ACCEL_ERR_INVALID);
    bad = r;
    bad.layer0 = 2;
    bad.layers = SPLIT_LAYERS; /* past the last layer */
    CHECK_EQ(accel_prefill(d, &bad), ACCEL_ERR_INVALID);
    volatile int cancel = 1;
    accel_prefill_req cr = r;
    cr.layer0 = 2;
    cr.layers = 2;
    cr.cancel = &cancel;
    CHECK_EQ(accel_prefill(d, &cr), ACCEL_ERR_CANCELLED);
    CHECK_EQ(accel_seq_len(d, s), c);
    /* abandoned: a continuation is refused; the chunk runs again from layer 0 */
    cr.cancel = NULL;
    CHECK_EQ(accel_prefill(d, &cr), ACCEL_ERR_INVALID);
    r.layers = 4;
    REQUIRE(accel_prefill(d, &r) == 0);
    r.layer0 = 4;
    r.layers = 1;
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(accel_seq_len(d, s), n);
    CHECK_EQ(t_max_abs_diff(ref, lg, (size_t)V), 0);
    /* truncate mid-split: the chunk is abandoned, the sequence goes on from the cut */
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layer0 = 0;
    r.layers = 3;
    REQUIRE(accel_prefill(d, &r) == 0);
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layer0 = 3;
    r.layers = 2;
    CHECK_EQ(accel_prefill(d, &r), ACCEL_ERR_INVALID);
    r.layer0 = 0;
    r.layers = 0; /* a whole call after it */
    REQUIRE(accel_prefill(d, &r) == 0);
    CHECK_EQ(t_max_abs_diff(ref, lg, (size_t)V), 0);
    /* a decode step of a sequence mid-split abandons the chunk */
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layers = 1;
    REQUIRE(accel_prefill(d, &r) == 0);
    int32_t tok = ids[c];
    REQUIRE(accel_decode(d, 1, &s, &tok, lg) == 0);
    CHECK_EQ(accel_seq_len(d, s), c + 1);
    r.layer0 = 1;
    CHECK_EQ(accel_prefill(d, &r), ACCEL_ERR_INVALID);
    /* free mid-split */
    REQUIRE(accel_seq_truncate(d, s, c) == 0);
    r.layer0 = 0;
    r.layers = 2;
    REQUIRE(accel_prefill(d, &r) == 0);
    accel_seq_free(d, s);
    CHECK_EQ(cpu_accel_kv_blocks_in_use(d), 0);
    free(ref);
    free(lg);
    accel_free(d);
    model_free(m);
}
