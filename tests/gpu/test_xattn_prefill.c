/* XAttention and Tri-shape wired into the CUDA prefill (accel_prefill_req.sparse ->
 * gpu_prefill_sparse), whole prompts and chunks after cached tokens, on a head_dim-128 GQA model
 * written by mkmodel (2 layers, 4 query / 2 KV heads). Skipped without a CUDA device.
 *
 *   - every block kept (XAttention threshold 1; Tri-shape whose skipped range is empty) in chunks
 *     of 1 block, 3 blocks and the whole prompt equals dense prefill of the same chunks within the
 *     bounds test_flex_prefill.c holds the every-block FlexPrefill path to (max |logit diff| 0.05,
 *     mean KL 1e-4: the same tiles in another loop order), and reports density 1;
 *   - real selections in the same chunkings against the CPU backend given the same chunks (the
 *     method's defined result): Tri-shape's lists are the same sets on both, so the logits are held
 *     to the GPU-vs-CPU bounds of random-weight models (tests/gpu/README.md: 0.05, KL 1e-3);
 *     XAttention's sets may also differ at the threshold edge (test_xattn_gpu.c), one block more or
 *     less of a diffuse row, so its bound is max |diff| 0.1 and KL 1e-3 (the worst values are
 *     printed); the densities reported by both devices agree within 1 % (exactly for Tri-shape);
 *   - decode after the chunked sparse prefill runs and agrees with the CPU's decode the same way;
 *   - FlexPrefill the same way (its chunks after cached tokens, gpu_flex_index_chunk; whole
 *     prompts are test_flex_prefill.c's). */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/gpu/gpu_util.h"
#include "devices/devices.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HD128 "--hidden 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 768 " \
              "--vocab 2000 --max-pos 4096"

/* tune: the GPU's gpu_tune string (NULL: the defaults) */
static int open_both(model **m, accel_dev **g, accel_dev **c, const char *tune, char *why, size_t n)
{
    char dir[512], err[512];
    if (t_mkmodel(HD128, "xhd128", dir, sizeof dir)) return -1;
    const accel_opts go = {.gpu_tune = tune};
    int r = tg_open(dir, tune ? &go : NULL, m, g, why, n);
    if (r) return r;
    accel_opts co = {.threads = 4};
    *c = devices_open("cpu", *m, &co, err, sizeof err);
    if (!*c) {
        t_fail(__FILE__, __LINE__, "cpu: %s", err);
        return -1;
    }
    return 0;
}

#define OPEN_OR_SKIP(m, g, c, tune)                                                                \
    model *m;                                                                                      \
    accel_dev *g, *c;                                                                              \
    do {                                                                                           \
        char why_[600];                                                                            \
        int r_ = open_both(&m, &g, &c, tune, why_, sizeof why_);                                   \
        if (r_ > 0) SKIP("%s", why_);                                                              \
        REQUIRE(r_ == 0);                                                                          \
    } while (0)

/* Prefills ids in chunks of `chunk` tokens (the last may be shorter: it runs dense, the tail),
 * each sparse chunk with sp (NULL: all dense); the last position's logits into out, the summed
 * report into rep; the sequence (capacity n + extra) in *keep. 0 or -1 after a failure. */
static int chunked(accel_dev *d, const int32_t *ids, int n, int sparse_end, int chunk,
                   const accel_sparse *sp, float *out, accel_sparse_report *rep, int extra,
                   accel_seq **keep)
{
    accel_seq *s;
    if (accel_seq_new(d, n + extra, &s)) return -1;
    memset(rep, 0, sizeof *rep);
    for (int done = 0; done < n;) {
        int len = done < sparse_end ? (sparse_end - done < chunk ? sparse_end - done : chunk)
                                    : n - done;
        accel_sparse_report r = {0};
        accel_prefill_req q = {.seq = s, .ids = ids + done, .n = len,
                               .logits = done + len == n ? out : NULL,
                               .sparse = done < sparse_end ? sp : NULL, .sparse_report = &r};
        int st = accel_prefill(d, &q);
        if (st) {
            t_fail(__FILE__, __LINE__, "chunk at %d of %d: %s", done, len, accel_strerror(st));
            accel_seq_free(d, s);
            return -1;
        }
        /* the chunks that ran sparse (FlexPrefill's first chunk under two blocks runs dense on
         * both devices, each reporting it its own way) */
        if (r.layers_sparse > 0) {
            rep->layers_sparse += r.layers_sparse;
            rep->blocks_computed += r.blocks_computed;
            rep->blocks_causal += r.blocks_causal;
        }
        done += len;
    }
    rep->density = rep->blocks_causal ? (double)rep->blocks_computed / rep->blocks_causal : 1.0;
    if (keep) *keep = s;
    else accel_seq_free(d, s);
    return 0;
}

static void cmp(const char *what, const float *ref, const float *got, int rows, int V, double mx_b,
                double kl_b)
{
    double kl, top1, mx;
    tg_compare(ref, got, rows, V, &kl, &top1, &mx);
    fprintf(stderr, "  %s: max |diff| %.4g, KL %.3g, top-1 %.3f\n", what, mx, kl, top1);
    CHECK_MSG(mx <= mx_b && kl <= kl_b, "%s: max |diff| %.4g, KL %.3g", what, mx, kl);
}

static accel_sparse xattn(double thr)
{
    accel_sparse sp;
    sparse_params_default(&sp.p, SPARSE_MODE_XATTN);
    sp.p.xattention_threshold = thr;
    return sp;
}

static accel_sparse tri(int start, int recent)
{
    accel_sparse sp;
    sparse_params_default(&sp.p, SPARSE_MODE_TRISHAPE);
    sp.p.num_retained_start_tokens_in_cache = start;
    sp.p.num_retained_recent_tokens_in_cache = recent;
    return sp;
}

static const int chunks[] = {128, 384, 1 << 20}; /* 1 block, 3 blocks, the whole sparse part */

TEST(gpu_xattn_prefill_every_block_equals_dense)
{
    OPEN_OR_SKIP(m, g, c, NULL);
    const int n = 1500, V = m->cfg.vocab, end = 1280;
    int32_t *ids = tg_ids(n, V, 31);
    float *dense = malloc(sizeof(float) * V), *sp = malloc(sizeof(float) * V);
    accel_sparse all[3] = {xattn(1.0), tri(0, 4096), t_flex_sparse(1.0f, 0.1f, n, 0, -1)};
    const char *names[3] = {"xattention threshold 1", "trishape, recent 4096",
                            "flexprefill gamma 1, min_budget the prompt"};
    for (int mi = 0; mi < 3; mi++)
        for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
            accel_sparse_report rd, rs;
            REQUIRE(chunked(g, ids, n, end, chunks[ci], NULL, dense, &rd, 0, NULL) == 0);
            REQUIRE(chunked(g, ids, n, end, chunks[ci], &all[mi], sp, &rs, 0, NULL) == 0);
            char what[128];
            snprintf(what, sizeof what, "%s, chunks of %d vs dense", names[mi],
                     chunks[ci] > n ? end : chunks[ci]);
            cmp(what, dense, sp, 1, V, 0.05, 1e-4);
            CHECK(rs.layers_sparse > 0);
            CHECK_EQ(rs.blocks_computed, rs.blocks_causal);
        }
    free(dense), free(sp), free(ids);
    accel_free(c), accel_free(g);
    model_free(m);
}

static void vs_cpu(const char *name, const accel_sparse *sp, int n, double mx_b, double kl_b,
                   double dens_tol, const char *tune)
{
    OPEN_OR_SKIP(m, g, c, tune);
    const int V = m->cfg.vocab, steps = 3;
    const int end = sparse_plan(&sp->p, n);
    REQUIRE(end > 0);
    int32_t *ids = tg_ids(n + steps, V, 32);
    float *lg = malloc(sizeof(float) * V), *lc = malloc(sizeof(float) * V);
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        accel_sparse_report rg, rc;
        accel_seq *sg = NULL, *sc = NULL;
        REQUIRE(chunked(g, ids, n, end, chunks[ci], sp, lg, &rg, steps, &sg) == 0);
        REQUIRE(chunked(c, ids, n, end, chunks[ci], sp, lc, &rc, steps, &sc) == 0);
        char what[160];
        snprintf(what, sizeof what, "%s, chunks of %d: gpu vs cpu (density gpu %.4f cpu %.4f)",
                 name, chunks[ci] > n ? end : chunks[ci], rg.density, rc.density);
        cmp(what, lc, lg, 1, V, mx_b, kl_b);
        CHECK_EQ(rg.blocks_causal, rc.blocks_causal);
        CHECK_MSG(fabs(rg.density - rc.density) <= dens_tol, "%s: density gpu %.5f cpu %.5f", name,
                  rg.density, rc.density);
        /* Tri-shape skips nothing in a chunk at position 0: the whole-prompt chunking is dense */
        if (sp->p.mode != SPARSE_MODE_TRISHAPE || chunks[ci] < end) CHECK(rg.density < 1.0);
        for (int k = 0; k < steps; k++) {
            REQUIRE(accel_decode(g, 1, &sg, &ids[n + k], lg) == 0);
            REQUIRE(accel_decode(c, 1, &sc, &ids[n + k], lc) == 0);
        }
        snprintf(what, sizeof what, "%s, chunks of %d: decode step %d after it", name,
                 chunks[ci] > n ? end : chunks[ci], steps);
        cmp(what, lc, lg, 1, V, mx_b, kl_b);
        accel_seq_free(g, sg), accel_seq_free(c, sc);
    }
    free(lg), free(lc), free(ids);
    accel_free(c), accel_free(g);
    model_free(m);
}

TEST(gpu_xattn_prefill_chunked_matches_cpu)
{
    accel_sparse sp = xattn(0.6);
    sp.p.xattention_stride = 16;
    vs_cpu("xattention 0.6, stride 16", &sp, 2000, 0.1, 1e-3, 0.01, NULL);
}

/* gpu_tune xattn_fp8=1: the engine's XAttention estimate in FP8 (gpu/gpu_xattn_fp8.h; its buffers
 * lent with the sparse workspace), whose sets are checked against the CPU's FP8 scoring in
 * test_xattn_gpu.c; here the engine's chunked prefill and decode after it stay within the bf16
 * path's bounds of the CPU backend (bf16 sets) and its densities within 2 %. */
TEST(gpu_xattn_fp8_prefill_chunked_near_cpu)
{
    accel_sparse sp = xattn(0.6);
    sp.p.xattention_stride = 16;
    vs_cpu("xattention 0.6, stride 16, gpu fp8", &sp, 2000, 0.1, 1e-3, 0.02, "xattn_fp8=1");
}

TEST(gpu_trishape_prefill_chunked_matches_cpu)
{
    accel_sparse sp = tri(128, 256);
    vs_cpu("trishape start 128 recent 256", &sp, 2000, 0.05, 1e-3, 0.0, NULL);
}

/* FlexPrefill in chunks after cached tokens (gpu_flex_index_chunk): its sets may differ from the
 * CPU's at the documented ties (test_flex_gpu.c), hence XAttention's bounds */
TEST(gpu_flex_prefill_chunked_matches_cpu)
{
    accel_sparse sp = t_flex_sparse(0.9f, 0.1f, 256, 0, -1);
    vs_cpu("flexprefill gamma 0.9 tau 0.1 min_budget 256", &sp, 2000, 0.1, 1e-3, 0.01, NULL);
}
