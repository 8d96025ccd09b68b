/* Chunk-aware sparse prefill on the CPU backend, every method (accel_prefill_req.sparse with the
 * settled parameters of sparse/sparse.h, one call per chunk as the scheduler makes them):
 *  - every block kept (FlexPrefill gamma 1 / whole budget, XAttention threshold 1, Tri-shape
 *    retaining the whole cache) gives dense prefill's logits bit for bit, in chunks of 1 block,
 *    3 blocks or the whole prompt;
 *  - XAttention's result does not depend on the chunking (a query block's estimate sees only the
 *    keys up to its diagonal): chunks of 1 block, 3 blocks and the whole prompt give the same
 *    bits, with a density below 1;
 *  - Tri-shape's result is the chunking's (OpenVINO's rule): the whole prompt in one chunk is
 *    dense, one block per chunk skips the middle of the cache;
 *  - decode after any of them runs, and the dense tail of the plan (the last tokens) runs dense. */
#include "tests/test.h"
#include "tests/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Prefills ids in chunks of `chunk` tokens (0: whole), every chunk sparse (sp may be NULL:
 * dense); all logits (n, V) malloc'ed; the density over the chunks in *density. The sequence is
 * kept in *keep when keep is not NULL. */
static float *run(accel_dev *d, const int32_t *ids, int n, int chunk, const accel_sparse *sp,
                  double *density, accel_seq **keep)
{
    const int V = accel_model(d)->cfg.vocab;
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    accel_seq *s;
    if (!lg || accel_seq_new(d, n + 8, &s)) return NULL;
    int64_t comp = 0, causal = 0;
    for (int done = 0; done < n;) {
        int k = chunk && chunk < n - done ? chunk : n - done;
        accel_sparse_report rep = {0};
        accel_prefill_req r = {.seq = s, .ids = ids + done, .n = k, .logits = lg + (size_t)done * V,
                               .all_logits = 1, .sparse = sp, .sparse_report = &rep};
        if (accel_prefill(d, &r)) {
            free(lg);
            accel_seq_free(d, s);
            return NULL;
        }
        comp += rep.blocks_computed;
        causal += rep.blocks_causal;
        done += k;
    }
    if (density) *density = causal ? (double)comp / causal : 1.0;
    if (keep) *keep = s;
    else accel_seq_free(d, s);
    return lg;
}

static accel_sparse method(int mode)
{
    accel_sparse sp;
    sparse_params_default(&sp.p, mode);
    sp.p.xattention_block_size = 32; /* several blocks on short prompts */
    sp.p.xattention_stride = 4;
    return sp;
}

TEST(cpu_sparse_every_block_equals_dense_in_any_chunking)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open_mkmodel("--preset tiny-gqa --shards 1", "cpu", &m, &d) == 0);
    const int n = 640, V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 53 + 5) % V);
    float *dense = run(d, ids, n, 0, NULL, NULL, NULL);
    REQUIRE(dense);
    accel_sparse all[3];
    all[0] = t_flex_sparse(1.0f, 0.1f, n, 0, -1);
    all[1] = method(SPARSE_MODE_XATTN);
    all[1].p.xattention_threshold = 1.0;
    all[2] = method(SPARSE_MODE_TRISHAPE);
    all[2].p.num_retained_start_tokens_in_cache = 1 << 20;
    for (int mth = 0; mth < 3; mth++) {
        const int bs = sparse_block_size(&all[mth].p);
        const int chunks[3] = {bs, 3 * bs, 0};
        for (int c = 0; c < 3; c++) {
            double dens;
            float *sp = run(d, ids, n, chunks[c], &all[mth], &dens, NULL);
            REQUIRE(sp);
            double w = t_max_abs_diff(dense, sp, (size_t)n * V);
            CHECK_MSG(w == 0, "%s chunk %d: every block differs from dense by %.3g",
                      sparse_mode_name(mth), chunks[c], w);
            CHECK_NEAR(dens, 1.0, 0);
            free(sp);
        }
    }
    free(dense);
    free(ids);
    accel_free(d);
    model_free(m);
}

TEST(cpu_sparse_xattention_chunking_invariant_trishape_chunk_defined)
{
    model *m;
    accel_dev *d;
    REQUIRE(t_open_mkmodel("--preset tiny-gqa --shards 1", "cpu", &m, &d) == 0);
    const int n = 768, V = m->cfg.vocab;
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 29 + 1) % V);
    accel_sparse xa = method(SPARSE_MODE_XATTN);
    xa.p.xattention_threshold = 0.5;
    double d1, d3, dw;
    float *a = run(d, ids, n, 32, &xa, &d1, NULL), *b = run(d, ids, n, 96, &xa, &d3, NULL);
    accel_seq *keep;
    float *c = run(d, ids, n, 0, &xa, &dw, &keep);
    REQUIRE(a && b && c);
    fprintf(stderr, "  xattention density %.4f (chunks 32), %.4f (96), %.4f (whole)\n", d1, d3, dw);
    CHECK(dw < 1.0);
    CHECK_EQ(t_max_abs_diff(a, c, (size_t)n * V), 0);
    CHECK_EQ(t_max_abs_diff(b, c, (size_t)n * V), 0);
    /* decode after the sparse prefill */
    float *lg = malloc(sizeof(float) * V);
    int32_t next = t_argmax(c + (size_t)(n - 1) * V, V);
    REQUIRE(accel_decode(d, 1, &keep, &next, lg) == 0);
    int finite = 1;
    for (int i = 0; i < V; i++) finite &= isfinite(lg[i]) != 0;
    CHECK(finite);
    accel_seq_free(d, keep);
    free(a), free(b), free(c);

    /* Tri-shape, start 128 and recent 128: whole prompt = dense; 1 block a chunk = sparse */
    accel_sparse tri = method(SPARSE_MODE_TRISHAPE);
    tri.p.num_retained_recent_tokens_in_cache = 128;
    float *dense = run(d, ids, n, 0, NULL, NULL, NULL);
    float *tw = run(d, ids, n, 0, &tri, &dw, NULL), *t1 = run(d, ids, n, 128, &tri, &d1, NULL);
    REQUIRE(dense && tw && t1);
    CHECK_EQ(t_max_abs_diff(dense, tw, (size_t)n * V), 0);
    CHECK_NEAR(dw, 1.0, 0);
    /* chunks after 384 tokens skip: 6 chunks of 6 rows... the density is the rule's count:
     * chunk k (k = 0..5) after 128 k cached tokens, c = k full blocks > 2 skips k - 2 blocks */
    const int64_t causal = 6 * 7 / 2, skipped = 1 + 2 + 3; /* k = 3, 4, 5 */
    CHECK_NEAR(d1, (double)(causal - skipped) / causal, 1e-12);
    CHECK(t_max_abs_diff(dense, t1, (size_t)n * V) > 0);
    /* the first three chunks see everything: their logits are dense's */
    CHECK_EQ(t_max_abs_diff(dense, t1, (size_t)384 * V), 0);
    free(dense), free(tw), free(t1), free(lg);
    free(ids);
    accel_free(d);
    model_free(m);
}
