/* XAttention and Tri-shape block lists (cpu/sparse_idx.h) against the official semantics.
 *
 * The official code cannot run on this machine (no PyTorch), so the XAttention check here is a
 * literal transliteration of mit-han-lab/x-attention@e37988770b9d xattn_estimate's torch path and
 * utils.py find_blocks_chunked, written in the official code's own structure and order (pad,
 * concatenate the strided rows, the full reshaped score matrix with its -inf masks, softmax,
 * tile sums, then find_blocks_chunked's sort / shifted cumsum / index mask / causal cut) in
 * float64, sharing nothing with cpu/xattn.c. Blocks may differ only where the official cumsum
 * sits within 1 % of `required` (OpenVINO's own test tolerance). Recorded outputs of the
 * official code itself, run on the H200, are checked at the end of this file.
 *
 * Tri-shape is checked against the OpenVINO rule worked by hand, and the chunked attention over
 * either list against attention with the same mask written out per query. */
#include "tests/test.h"
#include "tests/util.h"
#include "cpu/sparse_idx.h"
#include "cpu/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct qkv {
    int n, H, HK, D;
    float *q, *k, *v;
} qkv;

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

/* uniform in [-1, 1); structured: heavy key columns (tokens 0..3 and every 97th) and a shared
 * direction so that the attention has vertical lines, as real prompts' sinks */
static qkv make_qkv(int n, int H, int HK, int D, uint32_t seed, int structured)
{
    qkv x = {n, H, HK, D, malloc(sizeof(float) * n * H * D), malloc(sizeof(float) * n * HK * D),
             malloc(sizeof(float) * n * HK * D)};
    for (size_t i = 0; i < (size_t)n * H * D; i++) x.q[i] = (float)((lcg(&seed) >> 8) / 16777216.0 * 2 - 1);
    for (size_t i = 0; i < (size_t)n * HK * D; i++) x.k[i] = (float)((lcg(&seed) >> 8) / 16777216.0 * 2 - 1);
    for (size_t i = 0; i < (size_t)n * HK * D; i++) x.v[i] = (float)((lcg(&seed) >> 8) / 16777216.0 * 2 - 1);
    if (structured)
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < H; h++) x.q[((size_t)t * H + h) * D + h % D] += 4.0f;
            if (t < 4 || t % 97 == 0)
                for (int g = 0; g < HK; g++)
                    for (int h = g * (H / HK); h < (g + 1) * (H / HK); h++)
                        x.k[((size_t)t * HK + g) * D + h % D] += 3.0f;
        }
    return x;
}

static void free_qkv(qkv *x)
{
    free(x->q), free(x->k), free(x->v);
}

static cpu_flex_qkv view(const qkv *x, int q_pos0)
{
    return (cpu_flex_qkv){x->n, x->H, x->HK, x->D, x->q + (size_t)q_pos0 * x->H * x->D,
                          (size_t)x->H * x->D, x->k, x->v, (size_t)x->HK * x->D, q_pos0};
}

/* ---- the literal transliteration (float64) ---- */

typedef struct lit {
    int nb;
    double *A;      /* (H, nb, nb) */
    uint8_t *mask;  /* (H, nb, nb) */
    double *cws;    /* (H, nb, nb): the official cumsum each block was tested with (-1: kept as
                       block 0 / the diagonal) */
    double *req;    /* (H, nb) */
} lit;

typedef struct ipair {
    double v;
    int id;
} ipair;

static int cmp_desc_stable(const void *a, const void *b)
{
    const ipair *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->id - y->id;
}

/* quirk: find_blocks_chunked's identity over columns [0, chunk) of the official first chunk,
 * written after block 0's mark (so block 0 is forced in row 0 only) */
static lit literal(const qkv *x, int B, int S, double thr, int quirk)
{
    const int n = x->n, H = x->H, D = x->D, G = H / x->HK;
    const int P = (n + B - 1) / B * B, R = P / S, nb = P / B, rpb = B / S;
    const int kpad = (P - n) / S; /* k_reshaped_num_to_pad: the last kpad reshaped keys -inf */
    lit L = {nb, calloc((size_t)H * nb * nb, 8), calloc((size_t)H * nb * nb, 1),
             malloc((size_t)H * nb * nb * 8), malloc((size_t)H * nb * 8)};
    double *Qr = malloc(sizeof(double) * R * S * D), *Kr = malloc(sizeof(double) * R * S * D);
    double *W = malloc(sizeof(double) * R);
    for (int h = 0; h < H; h++) {
        const int g = h / G;
        /* torch.cat([K[:, :, k::S] for k in range(S)], -1); torch.cat([Q[(S-1-q)::S] ...]) */
        for (int i = 0; i < R; i++)
            for (int t = 0; t < S; t++)
                for (int e = 0; e < D; e++) {
                    int kp = i * S + t, qp = i * S + (S - 1 - t);
                    Kr[((size_t)i * S + t) * D + e] = kp < n ? x->k[((size_t)kp * x->HK + g) * D + e] : 0;
                    Qr[((size_t)i * S + t) * D + e] = qp < n ? x->q[((size_t)qp * H + h) * D + e] : 0;
                }
        double *A = L.A + (size_t)h * nb * nb;
        for (int i = 0; i < R - kpad; i++) { /* padded query rows: -inf, then zeroed */
            double mx = -INFINITY;
            for (int j = 0; j < R; j++) {
                double s = 0;
                for (int e = 0; e < S * D; e++) s += Qr[(size_t)i * S * D + e] * Kr[(size_t)j * S * D + e];
                s = s / sqrt((double)D) / S;
                if (j > i || j >= R - kpad) s = -INFINITY;
                W[j] = s;
                if (s > mx) mx = s;
            }
            double z = 0;
            for (int j = 0; j < R; j++) z += W[j] = exp(W[j] - mx);
            for (int j = 0; j < R; j++) A[(i / rpb) * nb + j / rpb] += W[j] / z;
        }
        /* find_blocks_chunked(A, current_index 0, thr, mode prefill, causal) */
        for (int I = 0; I < nb; I++) {
            const double *a = A + (size_t)I * nb;
            uint8_t *m = L.mask + ((size_t)h * nb + I) * nb;
            double *cws = L.cws + ((size_t)h * nb + I) * nb;
            double total = 0, smask = 0;
            for (int J = 0; J < nb; J++) total += a[J];
            double required = total * thr;
            L.req[(size_t)h * nb + I] = required;
            ipair other[4096], idx[4096];
            for (int J = 0; J < nb; J++) {
                int always = J == I || (J == 0 && (!quirk || I == 0));
                if (always) smask += a[J];
                other[J] = (ipair){always ? 0 : a[J], J};
                idx[J] = (ipair){always ? 100000 * (1 + a[J]) : a[J], J};
            }
            qsort(other, nb, sizeof *other, cmp_desc_stable);
            qsort(idx, nb, sizeof *idx, cmp_desc_stable);
            /* sorted' = [0, smask, sorted[:-2]]; cws = cumsum([0] + sorted'[:-1]) */
            double run = 0;
            for (int p = 0; p < nb; p++) {
                double add = p == 0 ? 0 : p == 1 ? 0 : p == 2 ? smask : other[p - 3].v;
                run += add;
                int id = idx[p].id, always = id == I || (id == 0 && (!quirk || I == 0));
                cws[id] = always ? -1 : run;
                /* index = where(index_mask, index, 0): a block not kept marks block 0 */
                m[run < required || always ? id : 0] = 1;
            }
            for (int J = I + 1; J < nb; J++) m[J] = 0; /* the causal cut */
        }
    }
    free(Qr), free(Kr), free(W);
    return L;
}

static void free_lit(lit *L)
{
    free(L->A), free(L->mask), free(L->cws), free(L->req);
}

/* Our index against the literal: returns the Jaccard of the block sets over all heads and rows;
 * every difference must sit within 1 % of `required`. */
static double compare(const cpu_flex_index *ix, const lit *L, int H, int *edge_only)
{
    const int nb = L->nb;
    long inter = 0, uni = 0;
    *edge_only = 1;
    for (int h = 0; h < H; h++)
        for (int I = ix->q_block0; I < nb; I++) {
            uint8_t ours[4096] = {0};
            const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
            for (int64_t e = rp[I]; e < rp[I + 1]; e++) ours[ix->col[e]] = 1;
            const uint8_t *m = L->mask + ((size_t)h * nb + I) * nb;
            for (int J = 0; J < nb; J++) {
                inter += ours[J] && m[J];
                uni += ours[J] || m[J];
                if (ours[J] != m[J]) {
                    double c = L->cws[((size_t)h * nb + I) * nb + J], r = L->req[(size_t)h * nb + I];
                    if (!(c >= 0 && fabs(c - r) <= 0.01 * r)) *edge_only = 0;
                }
            }
        }
    return uni ? (double)inter / uni : 1;
}

static void check_against_literal(int n, int H, int HK, int D, int B, int S, double thr,
                                  int structured, uint32_t seed, int official)
{
    qkv x = make_qkv(n, H, HK, D, seed, structured);
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_XATTN);
    p.xattention_block_size = B;
    p.xattention_stride = S;
    p.xattention_threshold = thr;
    cpu_flex_qkv v = view(&x, 0);
    cpu_flex_index *ix;
    double *mass;
    REQUIRE(cpu_xattn_index_build(NULL, &p, &v, official, &ix, &mass) == 0);
    lit L = literal(&x, B, S, thr, official > 0);
    REQUIRE(ix->n_blocks == L.nb);
    /* the estimated masses themselves (float32 softmax here, float64 there) */
    double worst = 0;
    for (int h = 0; h < H; h++)
        for (int I = 0; I < L.nb; I++)
            for (int J = 0; J <= I; J++) {
                double a = mass[((size_t)h * L.nb + I) * L.nb + J], b = L.A[((size_t)h * L.nb + I) * L.nb + J];
                if (fabs(a - b) > worst) worst = fabs(a - b);
            }
    CHECK_MSG(worst < 1e-4, "block masses differ by %.3g", worst);
    int edge;
    double jac = compare(ix, &L, H, &edge);
    fprintf(stderr, "  n %d B %d S %d thr %.2f %s%s: jaccard %.5f, density %.3f\n", n, B, S, thr,
            structured ? "structured" : "random", official ? " (official first chunk)" : "", jac,
            cpu_flex_index_density(ix, -1));
    CHECK(jac >= 0.99);
    CHECK_MSG(edge, "a block differs away from the threshold edge");
    /* every list: block 0, the diagonal, nothing above it, ascending */
    for (int h = 0; h < H; h++)
        for (int I = 0; I < L.nb; I++) {
            const int64_t *rp = ix->row_ptr + (size_t)h * (L.nb + 1);
            CHECK(rp[I + 1] > rp[I] && (official || ix->col[rp[I]] == 0) && ix->col[rp[I + 1] - 1] == I);
            for (int64_t e = rp[I] + 1; e < rp[I + 1]; e++) CHECK(ix->col[e] > ix->col[e - 1]);
        }
    free(mass);
    cpu_flex_index_free(ix);
    free_lit(&L);
    free_qkv(&x);
}

TEST(xattn_index_matches_official_semantics)
{
    for (int official = 0; official <= 1; official++) {
        int oc = official ? 2048 : 0; /* sparse_xattn_official_chunk of these lengths */
        check_against_literal(1000, 4, 2, 32, 64, 8, 0.9, 0, 11, oc); /* a partial last block */
        check_against_literal(1000, 4, 2, 32, 64, 8, 0.8, 1, 12, oc);
        check_against_literal(768, 2, 2, 16, 128, 16, 0.9, 1, 13, oc);
        check_against_literal(515, 2, 1, 16, 32, 4, 0.5, 0, 14, oc); /* n not a multiple of S */
        check_against_literal(640, 2, 1, 16, 64, 1, 0.95, 1, 15, oc); /* stride 1: exact mass */
    }
    CHECK_EQ(sparse_xattn_official_chunk(1000), 2048);
    CHECK_EQ(sparse_xattn_official_chunk(16384), 16384);
    CHECK_EQ(sparse_xattn_official_chunk(32768), 8192);
    CHECK_EQ(sparse_xattn_official_chunk(131072), 2048);
}

/* A chunk's rows (queries from q_pos0 on, keys from 0) are the whole prompt's rows: the estimate
 * of a query block sees keys up to its diagonal only. */
TEST(xattn_chunk_rows_equal_whole_prompt_rows)
{
    qkv x = make_qkv(900, 4, 2, 32, 21, 1);
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_XATTN);
    p.xattention_block_size = 64;
    cpu_flex_qkv whole = view(&x, 0), chunk = view(&x, 256);
    cpu_flex_index *a, *b;
    REQUIRE(cpu_xattn_index_build(NULL, &p, &whole, 0, &a, NULL) == 0);
    REQUIRE(cpu_xattn_index_build(NULL, &p, &chunk, 0, &b, NULL) == 0);
    CHECK_EQ(b->q_block0, 4);
    const int nb = a->n_blocks;
    for (int h = 0; h < 4; h++)
        for (int r = 0; r < nb; r++) {
            const int64_t *ra = a->row_ptr + (size_t)h * (nb + 1), *rb = b->row_ptr + (size_t)h * (nb + 1);
            if (r < 4) {
                CHECK_EQ(rb[r + 1] - rb[r], 0);
                continue;
            }
            CHECK_EQ(ra[r + 1] - ra[r], rb[r + 1] - rb[r]);
            if (ra[r + 1] - ra[r] == rb[r + 1] - rb[r])
                CHECK(!memcmp(a->col + ra[r], b->col + rb[r], sizeof(int32_t) * (ra[r + 1] - ra[r])));
        }
    cpu_flex_index_free(a);
    cpu_flex_index_free(b);
    free_qkv(&x);
}

/* The chunk's attention (q_pos0 > 0) over an index: the bits of attention written out per query
 * with the same mask (cpu_attend over the listed keys in order). */
static void masked_attention(const qkv *x, const cpu_flex_index *ix, int q_pos0, float *out)
{
    const int bs = ix->block_size, nb = ix->n_blocks, G = x->H / x->HK;
    float *kk = malloc(sizeof(float) * x->n * x->D), *vv = malloc(sizeof(float) * x->n * x->D);
    float *sc = malloc(sizeof(float) * x->n);
    for (int h = 0; h < x->H; h++)
        for (int t = q_pos0; t < x->n; t++) {
            const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
            int r = t / bs, m = 0;
            for (int64_t e = rp[r]; e < rp[r + 1]; e++)
                for (int j = ix->col[e] * bs; j < (ix->col[e] + 1) * bs && j <= t; j++, m++) {
                    memcpy(kk + (size_t)m * x->D, x->k + ((size_t)j * x->HK + h / G) * x->D, sizeof(float) * x->D);
                    memcpy(vv + (size_t)m * x->D, x->v + ((size_t)j * x->HK + h / G) * x->D, sizeof(float) * x->D);
                }
            cpu_attend(out + ((size_t)(t - q_pos0) * x->H + h) * x->D, x->q + ((size_t)t * x->H + h) * x->D,
                       kk, vv, m, x->D, x->D, (float)pow(x->D, -0.5), sc);
        }
    free(kk), free(vv), free(sc);
}

TEST(trishape_index_is_openvinos_rule_and_attention_follows_it)
{
    const int n = 1300, H = 2, HK = 1, D = 16;
    qkv x = make_qkv(n, H, HK, D, 31, 0);
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_TRISHAPE);
    p.num_retained_start_tokens_in_cache = 128;
    p.num_retained_recent_tokens_in_cache = 256;
    /* a chunk after 768 cached tokens: 6 full blocks > 1 + 2, blocks [1, 4) skipped */
    cpu_flex_qkv v = view(&x, 768);
    cpu_flex_index *ix;
    REQUIRE(cpu_trishape_index_build(&p, &v, &ix) == 0);
    const int nb = ix->n_blocks;
    CHECK_EQ(nb, 11);
    for (int h = 0; h < H; h++)
        for (int r = 0; r < nb; r++) {
            const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
            if (r < 6) {
                CHECK_EQ(rp[r + 1] - rp[r], 0);
                continue;
            }
            int want[16], m = 0;
            for (int c = 0; c <= r; c++)
                if (c == 0 || c >= 4) want[m++] = c;
            CHECK_EQ(rp[r + 1] - rp[r], m);
            for (int e = 0; e < m && e < rp[r + 1] - rp[r]; e++) CHECK_EQ(ix->col[rp[r] + e], want[e]);
        }
    float *a = malloc(sizeof(float) * (n - 768) * H * D), *b = malloc(sizeof(float) * (n - 768) * H * D);
    REQUIRE(cpu_flex_sparse_attention(NULL, &v, ix, 0, 0, a, (size_t)H * D) == 0);
    masked_attention(&x, ix, 768, b);
    CHECK(!memcmp(a, b, sizeof(float) * (n - 768) * H * D));
    cpu_flex_index_free(ix);
    /* the first chunk (nothing cached) and a short cache skip nothing: dense */
    cpu_flex_qkv w = view(&x, 0);
    REQUIRE(cpu_trishape_index_build(&p, &w, &ix) == 0);
    CHECK_NEAR(cpu_flex_index_density(ix, -1), 1.0, 0);
    cpu_flex_index_free(ix);
    cpu_flex_qkv s = view(&x, 384);
    REQUIRE(cpu_trishape_index_build(&p, &s, &ix) == 0);
    CHECK_NEAR(cpu_flex_index_density(ix, -1), 1.0, 0);
    cpu_flex_index_free(ix);
    free(a), free(b);
    free_qkv(&x);
}

/* Every block kept (threshold 1) through the chunked sparse attention is dense attention's bits;
 * and XAttention's chunk attention equals the per-query masked attention. */
TEST(xattn_every_block_is_dense_and_chunk_attention_follows_the_list)
{
    const int n = 700, H = 4, HK = 2, D = 32, q0 = 256;
    qkv x = make_qkv(n, H, HK, D, 41, 1);
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_XATTN);
    p.xattention_block_size = 64;
    p.xattention_threshold = 1.0;
    cpu_flex_qkv v = view(&x, q0);
    cpu_flex_index *ix;
    REQUIRE(cpu_xattn_index_build(NULL, &p, &v, 0, &ix, NULL) == 0);
    CHECK_NEAR(cpu_flex_index_density(ix, -1), 1.0, 0);
    float *a = malloc(sizeof(float) * (n - q0) * H * D), *b = malloc(sizeof(float) * (n - q0) * H * D);
    REQUIRE(cpu_flex_sparse_attention(NULL, &v, ix, 0, 0, a, (size_t)H * D) == 0);
    REQUIRE(cpu_flex_dense_attention(NULL, &v, 0, 0, b, (size_t)H * D) == 0);
    CHECK(!memcmp(a, b, sizeof(float) * (n - q0) * H * D));
    cpu_flex_index_free(ix);
    p.xattention_threshold = 0.8;
    REQUIRE(cpu_xattn_index_build(NULL, &p, &v, 0, &ix, NULL) == 0);
    CHECK(cpu_flex_index_density(ix, -1) < 1.0);
    REQUIRE(cpu_flex_sparse_attention(NULL, &v, ix, 0, 0, a, (size_t)H * D) == 0);
    masked_attention(&x, ix, q0, b);
    CHECK(!memcmp(a, b, sizeof(float) * (n - q0) * H * D));
    cpu_flex_index_free(ix);
    free(a), free(b);
    free_qkv(&x);
}

/* FlexPrefill over a chunk (q_pos0 > 0): the chunk that ends the prompt estimates from the same
 * last block of queries over the same keys as the whole prompt, so (without query-aware heads,
 * tau 0) its rows are the whole prompt's rows. */
TEST(flex_last_chunk_rows_equal_whole_prompt_rows)
{
    const int n = 2200, H = 4, HK = 2, D = 32;
    qkv x = make_qkv(n, H, HK, D, 51, 0);
    sparse_flex_params p;
    sparse_flex_params_default(&p);
    p.tau = 0;
    p.gamma = 0.5f;
    p.min_budget = 128;
    cpu_flex_qkv whole = view(&x, 0), chunk = view(&x, 1024);
    /* (rows 8 .. 17 of 18) */
    cpu_flex_index *a, *b;
    REQUIRE(cpu_flex_index_build(NULL, &p, &whole, &a) == 0);
    REQUIRE(cpu_flex_index_build(NULL, &p, &chunk, &b) == 0);
    const int nb = a->n_blocks;
    CHECK_EQ(b->q_block0, 8);
    CHECK(cpu_flex_index_density(a, -1) < 1.0);
    for (int h = 0; h < H; h++)
        for (int r = 0; r < nb; r++) {
            const int64_t *ra = a->row_ptr + (size_t)h * (nb + 1), *rb = b->row_ptr + (size_t)h * (nb + 1);
            if (r < 8) {
                CHECK_EQ(rb[r + 1] - rb[r], 0);
                continue;
            }
            CHECK_EQ(ra[r + 1] - ra[r], rb[r + 1] - rb[r]);
            if (ra[r + 1] - ra[r] == rb[r + 1] - rb[r])
                CHECK(!memcmp(a->col + ra[r], b->col + rb[r], sizeof(int32_t) * (ra[r + 1] - ra[r])));
        }
    cpu_flex_index_free(a);
    cpu_flex_index_free(b);
    /* a chunk shorter than a block, or not on a block boundary, is refused */
    cpu_flex_qkv bad = view(&x, 2100);
    CHECK_EQ(cpu_flex_index_build(NULL, &p, &bad, &b), CPU_FLEX_ERR_INVALID);
    free_qkv(&x);
}

/* ---- recorded outputs of the official code ----
 * tests/data/sparse/xattn_official.json: mit-han-lab/x-attention@e37988770b9d xattn_estimate
 * (torch path, as on the H200) run by tools/sparse_official_xattn.py on the inputs make_qkv
 * generates (same LCG), float32 and one bfloat16 case (inputs rounded to bf16 here too; the
 * official run then holds its logits, softmax and block sums in bf16). Acceptance: Jaccard >= 0.99
 * per case, and every differing block at the threshold edge — the sum kept before it within 1 %
 * of `required` in our float64 masses (cpu_xattn_index_build's mass), or, for bfloat16, within
 * 1 % plus what bf16 block sums may move (each rounded to 8 bits: 2^-8 relative). */
#include <jansson.h>

/* One pass over the recorded cases; fp8: our sets scored in FP8 (cpu_xattn_index_build_ex, the
 * GPU's opt-in FP8 estimate emulated), the edge judged on the FP8 run's own masses; also the
 * share of the fp32 run's mass each FP8 row keeps (lowest, and the rows below the threshold). */
static void official_cases(int fp8)
{
    json_error_t je;
    json_t *root = json_load_file("tests/data/sparse/xattn_official.json", 0, &je);
    REQUIRE(root);
    json_t *cases = json_object_get(root, "cases");
    REQUIRE(json_array_size(cases) > 0);
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c)
    {
        const int n = (int)json_integer_value(json_object_get(c, "n"));
        const int q_from = (int)json_integer_value(json_object_get(c, "q_from"));
        const int H = (int)json_integer_value(json_object_get(c, "heads"));
        const int HK = (int)json_integer_value(json_object_get(c, "kv_heads"));
        const int D = (int)json_integer_value(json_object_get(c, "head_dim"));
        const int B = (int)json_integer_value(json_object_get(c, "block_size"));
        const int S = (int)json_integer_value(json_object_get(c, "stride"));
        const double thr = json_real_value(json_object_get(c, "threshold"));
        const int bf16 = !strcmp(json_string_value(json_object_get(c, "dtype")), "bfloat16");
        qkv x = make_qkv(n, H, HK, D, (uint32_t)json_integer_value(json_object_get(c, "seed")),
                         (int)json_integer_value(json_object_get(c, "structured")));
        if (bf16) {
            for (size_t i = 0; i < (size_t)n * H * D; i++) x.q[i] = t_bf16_round(x.q[i]);
            for (size_t i = 0; i < (size_t)n * HK * D; i++) x.k[i] = t_bf16_round(x.k[i]);
        }
        sparse_params p;
        sparse_params_default(&p, SPARSE_MODE_XATTN);
        p.xattention_block_size = B;
        p.xattention_stride = S;
        p.xattention_threshold = thr;
        cpu_flex_qkv v = view(&x, q_from);
        cpu_flex_index *ix;
        double *mass;
        const int official = (int)json_integer_value(json_object_get(c, "chunk_size"));
        REQUIRE(cpu_xattn_index_build_ex(NULL, &p, &v, official, fp8, &ix, &mass) == 0);
        const int nb = ix->n_blocks, q0 = ix->q_block0, rows = nb - q0;
        cpu_flex_index *ref = NULL; /* fp8: the fp32 run, for the mass the FP8 sets keep */
        double *rmass = NULL, low = 1;
        long under = 0;
        if (fp8) REQUIRE(cpu_xattn_index_build(NULL, &p, &v, official, &ref, &rmass) == 0);
        json_t *heads = json_object_get(c, "rows");
        REQUIRE((int)json_array_size(heads) == H);
        long inter = 0, uni = 0, off_edge = 0;
        for (int h = 0; h < H; h++) {
            json_t *hr = json_array_get(heads, h);
            REQUIRE((int)json_array_size(hr) == rows);
            for (int I = q0; I < nb; I++) {
                uint8_t ours[8192] = {0}, theirs[8192] = {0};
                const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
                for (int64_t e = rp[I]; e < rp[I + 1]; e++) ours[ix->col[e]] = 1;
                json_t *ids = json_array_get(hr, I - q0), *id;
                size_t k;
                json_array_foreach(ids, k, id)
                {
                    json_int_t j = json_integer_value(id);
                    REQUIRE(j >= 0 && j < nb);
                    theirs[j] = 1;
                }
                /* the edge test: sort our row's masses as the selection does */
                const double *A = mass + ((size_t)h * rows + (I - q0)) * nb;
                double total = 0;
                for (int J = 0; J <= I; J++) total += A[J];
                const double req = total * thr;
                if (fp8) {
                    const double *R = rmass + ((size_t)h * rows + (I - q0)) * nb;
                    double rt = 0, kept = 0;
                    for (int J = 0; J <= I; J++) {
                        rt += R[J];
                        kept += ours[J] ? R[J] : 0;
                    }
                    const double share = rt > 0 ? kept / rt : 1;
                    if (share < low) low = share;
                    under += share < thr;
                }
                for (int J = 0; J < nb; J++) {
                    inter += ours[J] && theirs[J];
                    uni += ours[J] || theirs[J];
                    if (ours[J] == theirs[J]) continue;
                    /* the sum of what the order keeps before J: block 0, the diagonal, then the
                     * larger masses (ties by id) */
                    int qk = q0 == 0 && I > 0 && I * B < official; /* the first-chunk quirk */
                    double before = qk ? A[I] : A[0] + (I > 0 ? A[I] : 0), least = -1;
                    int larger = 0;
                    for (int K = qk ? 0 : 1; K < I; K++)
                        if (K != J && (A[K] > A[J] || (A[K] == A[J] && K < J))) {
                            before += A[K];
                            larger++;
                            if (least < 0 || A[K] < least) least = A[K];
                        }
                    /* the quirk tests a block with the sum one block behind it (0 for the
                     * largest) */
                    if (qk) before = larger ? before - least : 0;
                    double tol = 0.01 * req + (bf16 ? total * (1.0 / 256) : 0);
                    if (!(J <= I && fabs(before - req) <= tol)) off_edge++;
                }
            }
        }
        double jac = uni ? (double)inter / uni : 1;
        fprintf(stderr, "  official n %d from %d B %d S %d thr %.2f %s%s: jaccard %.5f, %ld off the edge",
                n, q_from, B, S, thr, bf16 ? "bf16" : "fp32", fp8 ? ", ours in fp8" : "", jac,
                off_edge);
        if (fp8)
            fprintf(stderr, "; fp32 mass kept: lowest row %.4f, %ld of %d rows below %.2f", low, under,
                    H * rows, thr);
        fprintf(stderr, "\n");
        free(rmass);
        cpu_flex_index_free(ref);
        if (fp8) {
            CHECK_MSG(under == 0, "fp8: %ld rows keep less than the threshold of the fp32 mass", under);
        } else {
            CHECK(jac >= 0.99);
            CHECK_EQ(off_edge, 0);
        }
        free(mass);
        cpu_flex_index_free(ix);
        free_qkv(&x);
    }
    json_decref(root);
}

TEST(xattn_index_matches_recorded_official_outputs)
{
    official_cases(0);
}

/* The FP8 scoring (cpu_xattn_index_build_ex, the GPU's opt-in FP8 estimate) against the recorded
 * official outputs. It does NOT meet the rule (measured, 2026-11-29: Jaccard 0.982 -
 * 1.000 per case, 3 - 13 differing blocks per case decided outside 1 % of `required`: FP8 moves
 * the block masses by more than that), which is why FP8 stays opt-in. What is held: every FP8 row
 * keeps at least the threshold's share of the fp32 run's mass (the method's promise about mass);
 * Jaccard and the differences off the edge are printed. */
TEST(xattn_fp8_index_vs_recorded_official_outputs)
{
    official_cases(1);
}

/* e4m3 rounding against values worked out by hand from the format (bias 7, 3 mantissa bits,
 * subnormals m x 2^-9, 448 the largest, ties to even), and the per-head exponent. The GPU's
 * conversion is held to this function on the device (tests/gpu/test_xattn_gpu.c). */
TEST(xattn_e4m3_round_known_values)
{
    const float in[][2] = {
        {0.f, 0.f},        {1.f, 1.f},          {-1.f, -1.f},        {1.0625f, 1.f}, /* tie: even */
        {1.1875f, 1.25f},  {1.0626f, 1.125f},   {-3.3f, -3.25f},     {240.f, 240.f},
        {241.f, 240.f},    {248.f, 256.f},      {247.9f, 240.f},     {448.f, 448.f},
        {460.f, 448.f},    {464.f, 448.f},      {1e6f, 448.f},       {-1e6f, -448.f},
        {0x1p-6f, 0x1p-6f}, {0x1p-9f, 0x1p-9f}, {0x1p-10f, 0.f},     {0x1.8p-9f, 0x1p-8f},
        {0x1.4p-9f, 0x1p-9f}, {0.0146f, 0x7p-9f}, {0x1.ffp-7f, 0x1p-6f}, {0x1.1p-6f, 0x1p-6f},
        {0x1.3p-6f, 0x1.4p-6f}, {3.f, 3.f},     {0.3f, 0.3125f},     {-0.001f, -0x1p-9f},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        const float r = cpu_e4m3_round(in[i][0]);
        CHECK_MSG(r == in[i][1], "e4m3(%a) = %a, want %a", in[i][0], r, in[i][1]);
    }
    CHECK(isnan(cpu_e4m3_round(NAN)));
    /* every positive finite value from its bits (exponent field E, mantissa M; E 15 M 7 is NaN)
     * is its own rounding, and the midpoint to the next rounds to the one with an even M */
    float vals[127];
    int nv = 0;
    for (int E = 0; E < 16; E++)
        for (int M = 0; M < 8 && !(E == 15 && M == 7); M++)
            if (E || M) vals[nv++] = E ? ldexpf(1.f + M / 8.f, E - 7) : ldexpf((float)M, -9);
    CHECK_EQ(nv, 126);
    for (int i = 0; i < nv; i++) {
        CHECK(cpu_e4m3_round(vals[i]) == vals[i]);
        CHECK(cpu_e4m3_round(-vals[i]) == -vals[i]);
        if (i + 1 < nv) {
            const float mid = (vals[i] + vals[i + 1]) / 2, r = cpu_e4m3_round(mid);
            const int m_lo = (i + 1) % 8; /* vals[i]'s M */
            CHECK_MSG(r == (m_lo % 2 == 0 ? vals[i] : vals[i + 1]), "midpoint %a -> %a", mid, r);
        }
    }
    CHECK_EQ(cpu_xattn_fp8_exp(1.f), 8);
    CHECK_EQ(cpu_xattn_fp8_exp(1.75f), 8);
    CHECK_EQ(cpu_xattn_fp8_exp(1.8f), 7);
    CHECK_EQ(cpu_xattn_fp8_exp(448.f), 0);
    CHECK_EQ(cpu_xattn_fp8_exp(500.f), -1);
    CHECK_EQ(cpu_xattn_fp8_exp(0x1p-20f), 28);
    CHECK_EQ(cpu_xattn_fp8_exp(0.f), 0);
}
