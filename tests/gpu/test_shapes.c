/* The CUDA device on checkpoint shapes the goldens do not cover, written by tools/mkmodel:
 * head_dim 128 with GQA and llama3 rope (the Llama-3-8B head: Hopper's wgmma attention kernel),
 * Qwen2 biases in fp16, linear and dynamic rope in float32, the tiny-gqa preset (two shards). Each
 * against the CPU backend (itself checked against a float64 forward in tests/model), and decode
 * against prefill. Also the engine's comparison settings (gpu/tuning.h: mma.sync attention, no CUDA
 * graphs, no own GEMV, the 8-warp and wgmma attention kernels, no programmatic dependent launch)
 * on the head_dim-128 model, since those paths must stay correct too, and the lab plugin's
 * one-kernel decode step (gpu/bench/decode_step.cu) where it is built.
 *
 * Bounds: these are random-weight models with logits of std ~0.3, like tiny-llama2-mha, whose
 * bf16-emulated error is 0.023 (tests/gpu/test_model.c): max |logit diff| 0.05, mean KL 1e-4. */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/gpu/gpu_util.h"
#include "devices/devices.h"

static void shape_case_opts(const char *args, const char *name, const accel_opts *o,
                            int decode_check)
{
    model *m;
    accel_dev *d;
    char why[600];
    const char *tune = o && o->gpu_tune ? o->gpu_tune : NULL;
    int r = tg_open_mkmodel(args, name, o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_opts co = {.threads = 2};
    char err[512];
    accel_dev *cpu = devices_open("cpu", m, &co, err, sizeof err);
    REQUIRE(cpu);
    int V = m->cfg.vocab, n = 300, k = 200;
    int32_t *ids = tg_ids(n, V, 9);
    float *c = t_prefill_all(cpu, ids, n), *g = t_prefill_all(d, ids, n);
    REQUIRE(c && g);
    double kl, top1, mx;
    tg_compare(c, g, n, V, &kl, &top1, &mx);
    fprintf(stderr, "  %s%s%s: gpu vs cpu max |diff| %.4g, mean KL %.3g\n", name, tune ? " " : "",
            tune ? tune : "", mx, kl);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "%s: gpu vs cpu: max |diff| %.4g, KL %.3g", name, mx, kl);
    /* prefill k, then decode the rest one by one, against the GPU's own full prefill (not for
     * dynamic NTK past the trained length, where each decode step has its own rope base) */
    if (!decode_check) k = n - 1;
    accel_seq *s;
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    float *lg = malloc(sizeof(float) * (size_t)(n - k) * V);
    accel_prefill_req q = {.seq = s, .ids = ids, .n = k};
    REQUIRE(accel_prefill(d, &q) == 0);
    for (int p = k; p < n; p++) REQUIRE(accel_decode(d, 1, &s, &ids[p], lg + (size_t)(p - k) * V) == 0);
    tg_compare(g + (size_t)k * V, lg, n - k, V, &kl, &top1, &mx);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "%s: decode vs prefill: max |diff| %.4g, KL %.3g", name, mx, kl);
    accel_seq_free(d, s);
    free(lg), free(c), free(g), free(ids);
    accel_free(cpu);
    accel_free(d);
    model_free(m);
}

/* tune: the engine's settings (gpu/tuning.h; NULL: the defaults) */
static void shape_case(const char *args, const char *name, const char *tune, int decode_check)
{
    accel_opts o = {.gpu_tune = tune};
    shape_case_opts(args, name, &o, decode_check);
}

#define HD128 "--hidden 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 768 " \
              "--vocab 2000 --max-pos 4096"

TEST(gpu_shape_hd128_gqa_llama3)
{
    shape_case(HD128, "hd128", NULL, 1);
}

TEST(gpu_shape_hd128_mma8_attention)
{
    shape_case(HD128, "hd128", "attn=mma8", 1);
}

TEST(gpu_shape_hd128_wgmma_attention)
{
    shape_case(HD128, "hd128", "attn=wgmma", 1);
}

TEST(gpu_shape_hd128_no_graphs)
{
    shape_case(HD128, "hd128", "graphs=0", 1);
}

TEST(gpu_shape_hd128_no_gemv)
{
    shape_case(HD128, "hd128", "gemv=0", 1);
}

TEST(gpu_shape_hd128_unfused_decode)
{
    shape_case(HD128, "hd128", "fused=0", 1);
}

TEST(gpu_shape_hd128_no_pdl_decode)
{
    shape_case(HD128, "hd128", "pdl=0", 1);
}

/* the lab plugin's one-kernel decode step (gpu/bench/decode_step.cu) against prefill and the CPU */
TEST(gpu_shape_hd128_step_decode)
{
    char lab[512];
    if (tg_lab_plugin(lab, sizeof lab)) SKIP("no lab plugin (%s: make gpu-lab)", lab);
    accel_opts o = {.lib_path = lab};
    shape_case_opts(HD128, "hd128", &o, 1);
}

TEST(gpu_shape_qwen2_bias_f16)
{
    shape_case("--bias --untie --dtype f16 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 "
               "--intermediate 512 --vocab 1500", "qwen2", NULL, 1);
}

TEST(gpu_shape_rope_linear_f32)
{
    shape_case("--dtype f32 --rope linear --rope-factor 4 --max-pos 1024", "linear", NULL, 1);
}

TEST(gpu_shape_rope_dynamic_f32)
{
    shape_case("--dtype f32 --rope dynamic --rope-factor 2 --max-pos 256", "dynamic", NULL, 0);
}

TEST(gpu_shape_tiny_gqa_sharded)
{
    shape_case("--preset tiny-gqa", "tinygqa", NULL, 1);
}

/* Batched decode on the head_dim-128 model (the Llama-3 head): cuBLAS projections and the batch's
 * metadata (one attention range split per token, each over its own sequence) at T = 3 against the
 * GEMV / fused path at T = 1 (the one-kernel decode attention both times). Three sequences of very
 * different lengths (7, 2100 and 300 tokens: one, seventeen and three KV blocks of 128) decoded
 * together for three steps equal each decoded alone, within the shape bounds above. */
static void batched_case(const char *tune)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.gpu_tune = tune};
    int r = tg_open_mkmodel(HD128, "hd128b", &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    const int V = m->cfg.vocab, lens[3] = {7, 2100, 300}, steps = 3, rows = 3 * steps;
    float *all_b = malloc(sizeof(float) * rows * V), *all_s = malloc(sizeof(float) * rows * V);
    REQUIRE(tg_batched_vs_single(d, V, 3, lens, steps, 40, 0, all_b, all_s) == 0);
    double kl, top1, mx;
    tg_compare(all_s, all_b, rows, V, &kl, &top1, &mx);
    fprintf(stderr, "  batched vs single decode%s%s: max |diff| %.4g, mean KL %.3g\n",
            tune ? " " : "", tune ? tune : "", mx, kl);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "batched vs single decode: max |diff| %.4g, KL %.3g", mx, kl);
    free(all_b), free(all_s);
    accel_free(d);
    model_free(m);
}

TEST(gpu_shape_hd128_batched_decode)
{
    batched_case(NULL);
}

TEST(gpu_shape_hd128_batched_decode_no_pdl)
{
    batched_case("pdl=0");
}

/* The decode chain's results do not depend on programmatic dependent launch: the same three
 * sequences' batched (T = 3: the small-T projections and the attention launched with PDL; the
 * RMSNorm and rope kernels without) and single decode logits with pdl=0 and the default, bit for
 * bit (PDL only moves when a kernel's blocks start, never what they compute). */
static int batched_logits(const char *tune, int *V, float **b, float **s, char *why, size_t n)
{
    model *m;
    accel_dev *d;
    accel_opts o = {.gpu_tune = tune};
    const int lens[3] = {7, 2100, 300}, steps = 3;
    int r = tg_open_mkmodel(HD128, "hd128p", &o, &m, &d, why, n);
    if (r) return r;
    *V = m->cfg.vocab;
    *b = malloc(sizeof(float) * 3 * steps * *V), *s = malloc(sizeof(float) * 3 * steps * *V);
    r = *b && *s ? tg_batched_vs_single(d, *V, 3, lens, steps, 40, 0, *b, *s) : -1;
    accel_free(d);
    model_free(m);
    return r;
}

TEST(gpu_shape_hd128_batched_decode_pdl_bits)
{
    char why[600];
    int V0 = 0, V1 = 0;
    float *b0 = NULL, *s0 = NULL, *b1 = NULL, *s1 = NULL;
    const int r = batched_logits("pdl=0", &V0, &b0, &s0, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    REQUIRE(batched_logits(NULL, &V1, &b1, &s1, why, sizeof why) == 0 && V1 == V0);
    const size_t bytes = sizeof(float) * 3 * 3 * V0;
    CHECK_MSG(memcmp(b0, b1, bytes) == 0, "batched decode: pdl=0 and pdl=1 logits differ");
    CHECK_MSG(memcmp(s0, s1, bytes) == 0, "single decode: pdl=0 and pdl=1 logits differ");
    free(b0), free(s0), free(b1), free(s1);
}

/* gemm_tune=force: every decode batch's projections on cuBLASLt's fastest heuristic candidate
 * timed at open, even where cuBLAS's default is faster (gpu/gemm_tune.cu); gemm_small=0, else
 * the 3 rows would take the small-T kernel (gpu/gemm_small.cuh) */
TEST(gpu_shape_hd128_batched_decode_gemm_tuned)
{
    batched_case("gemm_tune=force,gemm_small=0");
}

/* the 3 rows' projections on cuBLAS (gemm_small=0): the default runs the small-T kernel */
TEST(gpu_shape_hd128_batched_decode_cublas)
{
    batched_case("gemm_small=0");
}

/* A large batch (160 sequences of 1 to 6 KV blocks, 5 to 700 tokens, two steps, the logits into
 * page-locked memory as the scheduler's): every row is one attention range there (160 tokens x 2
 * KV heads fill two waves of blocks on the H200), so the attention takes its rows form
 * (k_decode_rows), and the lm_head runs in column chunks after the graph, each copied to the host
 * while the next computes (2,000 columns: chunks of 512, 512, 512 and 464); with logits_chunks=1 and
 * decode_rows=0 the split form's one-range shortcut and the lm_head in the graph. Each against
 * the same sequences decoded alone, within the bounds above. */
static void big_batch_case(const char *tune)
{
    model *m;
    accel_dev *d;
    char why[600];
    accel_opts o = {.gpu_tune = tune};
    int r = tg_open_mkmodel(HD128, "hd128bb", &o, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    enum { N = 160, STEPS = 2 };
    int lens[N];
    for (int i = 0; i < N; i++) lens[i] = 5 + (i * 379) % 696;
    const int V = m->cfg.vocab, rows = N * STEPS;
    float *all_b = malloc(sizeof(float) * rows * V), *all_s = malloc(sizeof(float) * rows * V);
    REQUIRE(all_b && all_s);
    REQUIRE(tg_batched_vs_single(d, V, N, lens, STEPS, 90, 1, all_b, all_s) == 0);
    double kl, top1, mx;
    tg_compare(all_s, all_b, rows, V, &kl, &top1, &mx);
    fprintf(stderr, "  batch of %d vs single decode%s%s: max |diff| %.4g, mean KL %.3g\n", N,
            tune ? " " : "", tune ? tune : "", mx, kl);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "batch of %d vs single decode: max |diff| %.4g, KL %.3g", N,
              mx, kl);
    free(all_b), free(all_s);
    accel_free(d);
    model_free(m);
}

TEST(gpu_shape_hd128_big_batch_decode)
{
    big_batch_case(NULL);
}

TEST(gpu_shape_hd128_big_batch_decode_unchunked)
{
    big_batch_case("logits_chunks=1,decode_rows=0");
}

TEST(gpu_shape_hd128_big_batch_decode_gemm_tuned)
{
    big_batch_case("gemm_tune=force");
}

TEST(gpu_shape_hd128_big_batch_decode_gemm_untuned)
{
    big_batch_case("gemm_tune=0");
}

/* The lab plugin's one-kernel decode step (gpu/bench/decode_step.cu) against the serving
 * plugin's five-kernel chain (both bf16 builds) on a model with the Llama-3 GQA group (4 query heads per KV head) and
 * enough rows that every block streams several chunks per projection (QKV 11-12 rows in chunks of
 * 8, down 7-8 rows in chunks of 5): 2100 tokens prefilled, then 6 decode steps each way, within
 * the shape bounds above (both are bf16 weights with float32 sums, in different orders). */
#define STEPM "--hidden 1024 --layers 2 --heads 8 --kv-heads 2 --head-dim 128 --intermediate 2816 " \
              "--vocab 2000 --max-pos 4096"

static int decode_run(accel_dev *d, const int32_t *ids, int n, int steps, int V, float *out)
{
    accel_seq *s;
    if (accel_seq_new(d, n + steps, &s)) return -1;
    accel_prefill_req q = {.seq = s, .ids = ids, .n = n};
    int rc = accel_prefill(d, &q);
    for (int i = 0; !rc && i < steps; i++)
        rc = accel_decode(d, 1, &s, &ids[n + i], out + (size_t)i * V);
    accel_seq_free(d, s);
    return rc;
}

TEST(gpu_decode_step_matches_chain)
{
    model *m, *m2;
    accel_dev *d, *dc;
    char why[600], dir[512], lab[512];
    if (tg_lab_plugin(lab, sizeof lab)) SKIP("no lab plugin (%s: make gpu-lab)", lab);
    accel_opts lo = {.lib_path = lab}, co = {.gpu_half = ACCEL_GPU_HALF_BF16};
    int r = tg_open_mkmodel(STEPM, "stepm", &lo, &m, &d, why, sizeof why);
    if (r > 0) SKIP("%s", why);
    REQUIRE(r == 0);
    accel_info info;
    accel_get_info(d, &info);
    if (!strstr(info.desc, "one-kernel decode")) SKIP("no decode step kernel on %s", info.desc);
    snprintf(dir, sizeof dir, "%s/stepm", t_tmpdir());
    REQUIRE(tg_open(dir, &co, &m2, &dc, why, sizeof why) == 0);
    accel_get_info(dc, &info);
    CHECK(!strstr(info.desc, "one-kernel decode"));
    const int V = m->cfg.vocab, n = 2100, steps = 6;
    int32_t *ids = tg_ids(n + steps, V, 77);
    float *a = malloc(sizeof(float) * steps * V), *b = malloc(sizeof(float) * steps * V);
    REQUIRE(a && b);
    REQUIRE(decode_run(d, ids, n, steps, V, a) == 0);
    REQUIRE(decode_run(dc, ids, n, steps, V, b) == 0);
    double kl, top1, mx;
    tg_compare(b, a, steps, V, &kl, &top1, &mx);
    fprintf(stderr, "  decode step vs chain: max |diff| %.4g, mean KL %.3g, top-1 %.3f\n", mx, kl, top1);
    CHECK_MSG(mx <= 0.05 && kl <= 1e-4, "step vs chain: max |diff| %.4g, KL %.3g", mx, kl);
    /* deterministic: the same step again gives the same bits */
    REQUIRE(decode_run(d, ids, n, steps, V, b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * steps * V) == 0);
    free(a), free(b), free(ids);
    accel_free(dc);
    accel_free(d);
    model_free(m2);
    model_free(m);
}
