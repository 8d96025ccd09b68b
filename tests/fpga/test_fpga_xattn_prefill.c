/* XAttention and Tri-shape inside the card's prefill (fpga/kernels/prefill.c: the xattn_est unit
 * beside the SIGU, then the SAU), whole prompts and chunks after cached positions:
 *  - with every block kept (XAttention threshold 1, Tri-shape skipping nothing, FlexPrefill
 *    with its budget over the prompt) the three methods run the SAU over the same full lists:
 *    density 1 and logits and KV bit for bit equal, in one call or in chunks — the chunks'
 *    keys before them come from the card's tiles, the same int8 bytes the whole prompt wrote;
 *    and within the SAU's W8A8 tolerance of the dense card prefill (test_fpga_prefill.c);
 *  - a chunk after cached positions: the index the unit built inside the prefill for the last
 *    layer equals the CPU reference's (cpu_xattn_index_build, cpu_trishape_index_build,
 *    cpu_flex_index_build: FlexPrefill's SIGU over the chunk's query blocks) on the
 *    card's own quantized q and k — the cached positions' keys read back from the workspace
 *    the ATTN run filled from the tiles — and the report's blocks add up;
 *  - decoding goes on from a chunked sparse prefill. */
#include "cpu/sparse_idx.h"
#include "devices/devices.h"
#include "fpga/flex_host.h"
#include "model/ckpt/golden.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static accel_sparse xattn_sparse(double thr, int stride)
{
    accel_sparse s;
    sparse_params_default(&s.p, SPARSE_MODE_XATTN);
    s.p.xattention_threshold = thr;
    s.p.xattention_stride = stride;
    return s;
}

static accel_sparse flex_sparse(float gamma, float tau)
{
    accel_sparse s;
    sparse_params_default(&s.p, SPARSE_MODE_FLEX);
    s.p.flex.gamma = gamma;
    s.p.flex.tau = tau;
    return s;
}

static accel_sparse tri_sparse(int start, int recent)
{
    accel_sparse s;
    sparse_params_default(&s.p, SPARSE_MODE_TRISHAPE);
    s.p.num_retained_start_tokens_in_cache = start;
    s.p.num_retained_recent_tokens_in_cache = recent;
    return s;
}

static int prefill(accel_dev *d, accel_seq *s, const int32_t *ids, int n, float *lg, int all,
                   const accel_sparse *sp, accel_sparse_report *rep)
{
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg, .all_logits = all,
                           .sparse = sp, .sparse_report = rep};
    return accel_prefill(d, &r);
}

/* Prefills ids[0..n) in chunks of the given lengths (the last one takes the rest), every chunk
 * with sp; sums the reports. */
static int prefill_chunks(accel_dev *d, accel_seq *s, const int32_t *ids, int n, const int *len,
                          int n_len, float *lg, int V, const accel_sparse *sp,
                          accel_sparse_report *sum)
{
    *sum = (accel_sparse_report){0};
    for (int done = 0, c = 0; done < n; c++) {
        int k = c < n_len ? len[c] : n - done;
        if (k > n - done) k = n - done;
        accel_sparse_report rep;
        int st = prefill(d, s, ids + done, k, lg + (size_t)done * V, 1, sp, &rep);
        if (st) return st;
        sum->layers_sparse += rep.layers_sparse;
        sum->blocks_computed += rep.blocks_computed;
        sum->blocks_causal += rep.blocks_causal;
        done += k;
    }
    sum->density = sum->blocks_causal ? (double)sum->blocks_computed / sum->blocks_causal : 1;
    return 0;
}

static int32_t *ids_of(int n, int vocab, int seed)
{
    int32_t *ids = malloc(sizeof *ids * n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 53 + seed * 17 + 1) % vocab);
    ids[0] = 1;
    return ids;
}

static double mean_kl(const float *a, const float *b, int n, int V)
{
    double s = 0;
    for (int p = 0; p < n; p++) s += tf_kl(a + (size_t)p * V, b + (size_t)p * V, V);
    return s / n;
}

static accel_dev *open_card(const char *dir, model **m)
{
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    accel_dev *f;
    return tf_open_dir(dir, "fpga-emu", 8, m, &f) ? NULL : f;
}

/* Every block kept: the three methods, whole and in chunks of 1 / 3 blocks, give the same
 * logits and KV bit for bit, density 1; near the dense card prefill. */
TEST(fpga_prefill_every_block_kept_same_for_all_methods)
{
    model *m;
    accel_dev *f = open_card("models/stories260K", &m);
    if (!f) return;
    enum { N = 400, MORE = 3 };
    const int V = m->cfg.vocab, L = m->cfg.n_layers, H = m->cfg.n_heads;
    int32_t *ids = ids_of(N + MORE, V, 7);
    accel_sparse xa = xattn_sparse(1.0, 8), tri = tri_sparse(128, 1920);
    accel_sparse fx = t_flex_sparse(1.0f, 0.1f, N, 0, 256);
    const accel_sparse *methods[] = {&xa, &tri, &fx, &xa, &tri, NULL};
    const int one_block[] = {128, 128, 128}, three_blocks[] = {384};
    float *ref = malloc(sizeof(float) * (N + MORE) * V), *lg = malloc(sizeof(float) * (N + MORE) * V);
    uint8_t *kref = malloc(tf_kv_bytes(f, N)), *kv = malloc(tf_kv_bytes(f, N));
    for (int i = 0; i < 6; i++) {
        accel_seq *s;
        REQUIRE(accel_seq_new(f, N + MORE, &s) == 0);
        accel_sparse_report rep;
        float *out = i == 0 ? ref : lg;
        int st;
        if (i == 3) st = prefill_chunks(f, s, ids, N, one_block, 3, out, V, methods[i], &rep);
        else if (i == 4) st = prefill_chunks(f, s, ids, N, three_blocks, 1, out, V, methods[i], &rep);
        else if (i == 5) st = prefill(f, s, ids, N, out, 1, NULL, &rep); /* dense */
        else st = prefill(f, s, ids, N, out, 1, methods[i], &rep);
        CHECK_MSG(st == 0, "case %d: %s", i, accel_strerror(st));
        if (st) {
            accel_seq_free(f, s);
            continue;
        }
        const int nb = (N + 127) / 128;
        if (i < 5) {
            CHECK_EQ(rep.density, 1.0);
            CHECK_EQ(rep.blocks_computed, rep.blocks_causal);
            CHECK_EQ(rep.blocks_causal, (int64_t)L * H * nb * (nb + 1) / 2);
            CHECK_EQ(rep.layers_sparse, (i == 3 ? 4 : i == 4 ? 2 : 1) * L);
        }
        for (int p = N; p < N + MORE; p++)
            REQUIRE(accel_decode(f, 1, &s, &ids[p], out + (size_t)p * V) == 0);
        REQUIRE(tf_read_kv(f, s, N, i == 0 ? kref : kv) == 0);
        if (i > 0 && i < 5) {
            CHECK_MSG(memcmp(ref, lg, sizeof(float) * (N + MORE) * V) == 0,
                      "case %d: logits differ from XAttention threshold 1 in one call", i);
            CHECK_MSG(memcmp(kref, kv, tf_kv_bytes(f, N)) == 0, "case %d: KV differs", i);
        }
        if (i == 5) {
            double kl = mean_kl(lg, ref, N + MORE, V);
            CHECK_MSG(kl <= 0.01, "dense vs every-block sparse: mean KL %.5f", kl);
        }
        accel_seq_free(f, s);
    }
    free(ids), free(ref), free(lg), free(kref), free(kv);
    accel_free(f);
    model_free(m);
}

/* Prefills n structured tokens in sparse chunks of `chunk`, then checks the last chunk's index
 * (last layer) against the reference on the card's q and k; decodes one step after. */
static void chunk_index(const char *dir, int n, int chunk, const accel_sparse *sp)
{
    model *m;
    accel_dev *f = open_card(dir, &m);
    if (!f) return;
    const int V = m->cfg.vocab, L = m->cfg.n_layers, H = m->cfg.n_heads, Hk = m->cfg.n_kv_heads;
    const int d = m->cfg.head_dim;
    int32_t *ids = tf_structured_ids(m, n);
    REQUIRE(ids);
    float *lg = malloc(sizeof(float) * n * V);
    accel_seq *s;
    REQUIRE(accel_seq_new(f, n + 1, &s) == 0);
    int lens[64], nl = 0;
    for (int done = 0; done < n && nl < 64; done += chunk) lens[nl++] = chunk;
    accel_sparse_report rep;
    REQUIRE(prefill_chunks(f, s, ids, n, lens, nl, lg, V, sp, &rep) == 0);
    const int nch = (n + chunk - 1) / chunk, nb = (n + 127) / 128;
    CHECK_EQ(rep.layers_sparse, nch * L);
    CHECK_EQ(rep.blocks_causal, (int64_t)L * H * nb * (nb + 1) / 2);
    CHECK(rep.density > 0 && rep.density < 1);
    int32_t next = t_argmax(lg + (size_t)(n - 1) * V, V);
    float *one = malloc(sizeof(float) * V);
    CHECK_EQ(accel_decode(f, 1, &s, &next, one), 0);

    tf_pf_last w;
    REQUIRE(tf_pf_last_read(f, n, &w) == 0);
    /* the cached positions' K in kvf are the tiles' bytes: the last layer's keys of position 0
     * as the card's KV holds them */
    const int q_pos0 = (nch - 1) * chunk;
    cpu_flex_qkv x = {n, H, Hk, d, w.q + (size_t)q_pos0 * H * d, (size_t)H * d, w.k, w.v,
                      (size_t)Hk * d, q_pos0};
    cpu_flex_index *ix;
    REQUIRE((sp->p.mode == SPARSE_MODE_XATTN  ? cpu_xattn_index_build(NULL, &sp->p, &x, 0, &ix, NULL)
             : sp->p.mode == SPARSE_MODE_FLEX ? cpu_flex_index_build(NULL, &sp->p.flex, &x, &ix)
                                              : cpu_trishape_index_build(&sp->p, &x, &ix)) == 0);
    CHECK_MSG(tf_pf_last_same_index(&w, ix),
              "%s %s: the last chunk's index (nnz %u) differs from the CPU reference's (nnz %lld)",
              dir, sparse_mode_name(sp->p.mode), w.nnz, (long long)ix->nnz);
    cpu_flex_index_free(ix);
    tf_pf_last_free(&w);
    free(one);
    accel_seq_free(f, s);
    free(lg);
    free(ids);
    accel_free(f);
    model_free(m);
}

TEST(fpga_prefill_xattn_chunk_index_equals_cpu)
{
    /* 2K tokens in chunks of 3 blocks (the last one partial) */
    accel_sparse sp = xattn_sparse(0.9, 8);
    chunk_index("models/tiny-llama2-mha", 2000, 384, &sp);
    sp = xattn_sparse(0.8, 16);
    chunk_index("models/stories260K", 500, 128, &sp);
}

/* FlexPrefill's index for a chunk after cached positions (its query blocks only, the estimate
 * from its last rows over every key: cpu/flex_index.c) */
TEST(fpga_prefill_flex_chunk_index_equals_cpu)
{
    /* 1,900 tokens in chunks of 3 blocks, the last 364 tokens after 1,536 cached; tau 1 makes
     * every head query-aware (the map over the chunk's rows, on top of the minimum vertical and
     * slash budgets) */
    accel_sparse sp = flex_sparse(0.9f, 1.0f);
    chunk_index("models/tiny-llama2-mha", 1900, 384, &sp);
}

TEST(fpga_prefill_trishape_chunk_index_equals_cpu)
{
    /* the third 1024-token chunk skips blocks [1, 14): start 128, recent 256 */
    accel_sparse sp = tri_sparse(128, 256);
    chunk_index("models/tiny-llama2-mha", 3000, SPARSE_TRI_CHUNK, &sp);
}
