/* cpu/flex_attn.c — block-sparse causal attention over a FlexPrefill index, the dense path, and
 * flex_prefill_attention's choice between them (see cpu/flex.h).
 *
 * Arithmetic: for a query at position t of block r, the keys are those of the row's listed
 * blocks in ascending order, each block's keys in ascending order, keys after t dropped (the
 * diagonal block is masked inside, as the official kernel's `off_m >= c + off_n`). Scores are
 * cpu_dot * scale, then cpu_softmax, then the value sum in that same key order — exactly
 * cpu_attend's steps, so a full block list reproduces cpu_attend's bits. (The official Triton
 * kernel uses an online base-2 softmax and bf16 P; results agree within bf16 tolerance, which
 * the GPU script measures, not bit for bit.)
 *
 * Work is split over (head, query block) pairs; each thread owns an n_tokens-float score buffer. */
#include "cpu/flex.h"
#include "cpu/flex_impl.h"
#include "cpu/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_ctx {
    const cpu_flex_qkv *x;
    const cpu_flex_index *ix; /* NULL: dense */
    int interleave;
    float scale;
    float *out;
    size_t out_stride;
    float *scores; /* (threads, n_tokens) */
} attn_ctx;

static float default_scale(int hd)
{
    return (float)pow(hd, -0.5); /* as cpu/backend.c computes it */
}

static void sparse_range(void *vctx, int begin, int end, int thread)
{
    attn_ctx *a = vctx;
    const cpu_flex_qkv *x = a->x;
    const cpu_flex_index *ix = a->ix;
    const int nb = ix->n_blocks, bs = ix->block_size, n = x->n_tokens, hd = x->head_dim;
    float *scores = a->scores + (size_t)thread * n;
    float acc[CPU_FLEX_MAX_HEAD_DIM];
    for (int pr = begin; pr < end; pr++) {
        const int h = pr / nb, r = pr % nb;
        if (r < ix->q_block0) continue; /* cached before the chunk */
        const int g = cpu_flex_kv_head(h, x->n_heads, x->n_kv_heads, a->interleave);
        const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
        const int32_t *cols = ix->col + rp[r];
        const int64_t nc = rp[r + 1] - rp[r];
        const float *kb = x->k + (size_t)g * hd, *vb = x->v + (size_t)g * hd;
        for (int t = r * bs; t < (r + 1) * bs && t < n; t++) {
            const float *q = x->q + (size_t)(t - x->q_pos0) * x->q_stride + (size_t)h * hd;
            int m = 0;
            for (int64_t e = 0; e < nc; e++)
                for (int j = cols[e] * bs; j < (cols[e] + 1) * bs && j <= t; j++)
                    scores[m++] = cpu_dot(q, kb + (size_t)j * x->kv_stride, hd) * a->scale;
            cpu_softmax(scores, m);
            memset(acc, 0, sizeof(float) * hd);
            m = 0;
            for (int64_t e = 0; e < nc; e++)
                for (int j = cols[e] * bs; j < (cols[e] + 1) * bs && j <= t; j++) {
                    const float *vj = vb + (size_t)j * x->kv_stride;
                    const float s = scores[m++];
                    for (int i = 0; i < hd; i++) acc[i] += s * vj[i];
                }
            memcpy(a->out + (size_t)(t - x->q_pos0) * a->out_stride + (size_t)h * hd, acc,
                   sizeof(float) * hd);
        }
    }
}

static void dense_range(void *vctx, int begin, int end, int thread)
{
    attn_ctx *a = vctx;
    const cpu_flex_qkv *x = a->x;
    const int hd = x->head_dim, H = x->n_heads;
    float *scores = a->scores + (size_t)thread * x->n_tokens;
    for (int i = begin; i < end; i++) {
        const int tr = i / H, h = i % H, t = x->q_pos0 + tr; /* query row, position */
        const int g = cpu_flex_kv_head(h, H, x->n_kv_heads, a->interleave);
        cpu_attend(a->out + (size_t)tr * a->out_stride + (size_t)h * hd,
                   x->q + (size_t)tr * x->q_stride + (size_t)h * hd, x->k + (size_t)g * hd,
                   x->v + (size_t)g * hd, t + 1, (int)x->kv_stride, hd, a->scale, scores);
    }
}

static int run_attn(cpu_pool *pool, attn_ctx *a, int n_items, cpu_pool_fn fn)
{
    const int threads = pool ? cpu_pool_threads(pool) : 1;
    a->scores = malloc((size_t)threads * a->x->n_tokens * sizeof(float));
    if (!a->scores) return CPU_FLEX_ERR_NOMEM;
    if (pool) cpu_pool_for(pool, n_items, 1, fn, a);
    else fn(a, 0, n_items, 0);
    free(a->scores);
    return 0;
}

int cpu_flex_sparse_attention(cpu_pool *pool, const cpu_flex_qkv *x, const cpu_flex_index *ix,
                              int gqa_interleave, float scale, float *out, size_t out_stride)
{
    if (cpu_flex_qkv_check(x, NULL, 0) || !ix || !out || ix->n_heads != x->n_heads ||
        ix->n_tokens != x->n_tokens || out_stride < (size_t)x->n_heads * x->head_dim ||
        ix->q_block0 * ix->block_size != x->q_pos0 ||
        (int64_t)ix->n_blocks * ix->n_heads > INT32_MAX)
        return CPU_FLEX_ERR_INVALID;
    attn_ctx a = {x, ix, gqa_interleave, scale > 0 ? scale : default_scale(x->head_dim), out,
                  out_stride, NULL};
    return run_attn(pool, &a, ix->n_heads * ix->n_blocks, sparse_range);
}

int cpu_flex_dense_attention(cpu_pool *pool, const cpu_flex_qkv *x, int gqa_interleave,
                             float scale, float *out, size_t out_stride)
{
    if (cpu_flex_qkv_check(x, NULL, 0) || !out || out_stride < (size_t)x->n_heads * x->head_dim ||
        (int64_t)x->n_tokens * x->n_heads > INT32_MAX)
        return CPU_FLEX_ERR_INVALID;
    attn_ctx a = {x, NULL, gqa_interleave, scale > 0 ? scale : default_scale(x->head_dim), out,
                  out_stride, NULL};
    return run_attn(pool, &a, (x->n_tokens - x->q_pos0) * x->n_heads, dense_range);
}

int cpu_flex_attention(cpu_pool *pool, const sparse_flex_params *p, const cpu_flex_qkv *x,
                       float *out, size_t out_stride, cpu_flex_report *rep,
                       cpu_flex_index **ix_out)
{
    if (ix_out) *ix_out = NULL;
    if (sparse_flex_params_check(p, NULL, 0) || cpu_flex_qkv_check(x, NULL, 0))
        return CPU_FLEX_ERR_INVALID;
    const int n = x->n_tokens, bs = p->block_size, nb = (n + bs - 1) / bs;
    const int64_t q0 = x->q_pos0 / bs;
    cpu_flex_report r = {.n_heads = x->n_heads, .n_blocks = nb};
    r.blocks_causal = (int64_t)x->n_heads * ((int64_t)nb * (nb + 1) - q0 * (q0 + 1)) / 2;
    int rc;
    /* The official rule, plus: a prompt shorter than two blocks never goes sparse (the
     * estimate needs a full last block; only a dense_below override can ask for that); a
     * chunk (q_pos0 > 0) needs a whole block of queries and a block-aligned start. */
    if (n <= sparse_flex_dense_threshold(p) || n < 2 * bs ||
        (x->q_pos0 && (x->q_pos0 % bs || n - x->q_pos0 < bs))) {
        rc = cpu_flex_dense_attention(pool, x, p->gqa_interleave, 0, out, out_stride);
        r.dense = 1;
        r.blocks_computed = r.blocks_causal;
        r.density = 1;
        r.official_ratio = 1; /* what return_computational_ratio reports for the dense path */
    } else {
        cpu_flex_index *ix;
        rc = cpu_flex_index_build(pool, p, x, &ix);
        if (rc) return rc;
        rc = cpu_flex_sparse_attention(pool, x, ix, p->gqa_interleave, 0, out, out_stride);
        r.blocks_computed = ix->nnz;
        r.density = cpu_flex_index_density(ix, -1);
        r.official_ratio = (double)ix->nnz / ((double)(nb - q0) * nb * x->n_heads);
        for (int h = 0; h < x->n_heads; h++) r.n_query_aware += ix->query_aware[h];
        if (ix_out && !rc) *ix_out = ix;
        else cpu_flex_index_free(ix);
    }
    if (rep) *rep = r;
    return rc;
}
