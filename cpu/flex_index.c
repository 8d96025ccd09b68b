/* cpu/flex_index.c — FlexPrefill's get_active_blocks, step by step as the official code does it
 * (flex_prefill_attention.py L1661-1779 at a24b27b; the notes number the steps 1-9).
 *
 * Per query head h (kv head g = h / G, or h % n_kv_heads with gqa_interleave):
 *  1. Â = softmax_j(last_q_i · k_j), last_q = the last bs query ROWS / sqrt(d) (the last bs rows,
 *     not the last block, when n % bs != 0). Only the bottom-right bs x bs corner is masked
 *     (col > row there); for these rows that is exactly causality.
 *  2. vertical[j] = mean_i Â[i, j]; slash[t] = (1/bs) sum_i Â[i, t + i - (bs - 1)], so t = n - 1
 *     is the main diagonal and t = n - 1 - o the diagonal o tokens below it (the official
 *     sum_all_diagonal_matrix: pad left by bs - 1 and sum the strided diagonals).
 *  3. score_cover_topk: sort descending, cumsum, count(cumsum <= gamma) + 1 tokens, then
 *     QUIRK (kept): `// 128 + 1` with a hard-coded 128, not block_size, so bs < 128 budgets
 *     are counted in units of 128 tokens. Clamp to [min_budget, max_budget] blocks in that order
 *     (so min > max gives max), max_budget = min(ceil(max_budget / bs), nb).
 *  4. Block sum-pooling of both distributions from index 0 (QUIRK kept: for n % bs != 0 the slash
 *     blocks are aligned at t = 0, not at the diagonal, so the last slash block holds fewer
 *     diagonals).
 *  5. avg_k = per key block mean (the last block over its true length); p = softmax_b(mean_i
 *     last_q_i · avg_k[b]) with NO causal mask; D = sqrt(0.5 KL(p||m) + 0.5 KL(v||m)), natural
 *     log, v = pooled vertical. query_aware = D < tau. QUIRK (kept): an exact 0 in p or v makes
 *     0 * log(0) = NaN, so D is NaN and the head is NOT query-aware (the comparison is false) —
 *     this happens for peaked heads whose fp32 softmax underflows. Query-aware heads get both
 *     budgets reset to min_budget, unclamped (QUIRK kept: above max_budget if min > max).
 *  6. vertical_blk[0] = +inf (sink column), slash_blk[nb - 1] = +inf (main diagonal band).
 *  7. top-k with k = min(max over heads of the budget, nb), one k for all heads, then entries at
 *     positions >= the head's own budget are OVERWRITTEN WITH 0 (kept): slash 0 is the diagonal
 *     offset, vertical 0 the sink column, both already selected, so only the literal arrays
 *     differ, never the set. Slash indices become offsets (nb - 1) - index.
 *  8. transform_veritcal_slash_idx: for every row r, vertical v -> id r * nb + v, set to 0 when
 *     v > r; slash offset s -> id (r + s) * nb + r, set to 0 when >= nb^2; the union is
 *     torch.unique = sorted distinct ids. We mark ids in an nb^2 byte map, which yields exactly
 *     the sorted distinct set.
 *  9. Query-aware heads add the block-pooled map: avg_q = per block mean of q with the zero-padded
 *     last block rescaled by bs / (bs - pad) (as written: x * bs / (bs - pad)); scores
 *     (avg_q / sqrt(d)) · avg_k, strict upper triangle -inf, row softmax, flattened (total mass
 *     nb); score_cover_idx: sort descending, keep ids while cumsum <= gamma * nb, the others
 *     become 0 (= block (0, 0), already present).
 * Finally the set is emitted as CSR rows. Blocks above the diagonal are dropped: the official
 * kernel would compute them fully masked (they add exactly nothing), and only the query-aware
 * map with gamma ~ 1 can produce them (its masked entries are 0 and a cumsum that never passes
 * gamma * nb keeps them).
 *
 * Ties (the official code runs torch.sort / torch.topk on the GPU, whose order among equal
 * values is unspecified): we order by value descending, then index ascending. Sets can differ
 * from the official ones only where equal values straddle a budget or the coverage cut.
 * Precision: sums over tokens run in double in index order; comparisons against gamma use the
 * float32 value of gamma as torch compares a float32 tensor with a Python scalar. The official
 * code holds q, k, the logits and the pooled means in bf16; we hold float32, so near-boundary
 * decisions can differ from it (the GPU device script measures the Jaccard similarity).
 *
 * A chunk after cached tokens (x->q_pos0 > 0, a multiple of bs, chunk-aware sparse prefill; the
 * official code asserts q_len == k_len, so this is our generalization): the same steps with the
 * chunk's last bs query rows over every key 0 .. n - 1 — exactly the whole prompt's estimate when
 * the chunk ends the prompt — and rows only for the chunk's query blocks (earlier rows empty);
 * the query-aware map (9) covers the chunk's rows, its mass (one per row) cut at gamma x rows.
 *
 * Memory: per thread bs x n logits, 3 n-long vectors, an nb^2 byte map; per query-aware head an
 * nb^2 (score, id) array; per kv head nb x d key-block means. */
#include "cpu/flex.h"
#include "cpu/flex_impl.h"
#include "cpu/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct head_sel {
    float *vblk, *sblk; /* (nb) pooled vertical / slash */
    int32_t n_v, n_s;
    float js;
    uint8_t qa;
    int32_t *ids; /* the head's CSR columns (row-major), set in phase 3 */
    int64_t *rows; /* (nb + 1) relative offsets */
    int64_t n_ids;
} head_sel;

typedef struct scratch {
    float *logits;       /* (bs, n) */
    double *acc;         /* (n) */
    float *sorted;       /* (n) */
    uint8_t *mark;       /* (nb * nb) */
    cpu_flex_pair *qa;   /* (nb * nb), query-aware heads only */
    cpu_flex_pair *top;  /* (nb) */
    int32_t *sel;        /* (2 nb) top-k indices */
    float *avg_q;        /* (nb, d) */
    float *row;          /* (nb) */
} scratch;

typedef struct build {
    const sparse_flex_params *p;
    const cpu_flex_qkv *x;
    int bs, nb, n, d, min_b, max_b;
    int q0; /* the chunk's first query block (0: the whole prompt) */
    float *avg_k; /* (n_kv_heads, nb, d) */
    head_sel *hs;
    scratch *sc;
    int k_v, k_s; /* phase 2: one top-k size for all heads */
    int failed;
} build;

static const float *qrow(const cpu_flex_qkv *x, int t, int h)
{
    return x->q + (size_t)(t - x->q_pos0) * x->q_stride + (size_t)h * x->head_dim;
}
static const float *krow(const cpu_flex_qkv *x, int t, int g)
{
    return x->k + (size_t)t * x->kv_stride + (size_t)g * x->head_dim;
}

/* ---------------------------------------------------------------- phase 0: key-block means */

static void avg_k_range(void *vctx, int begin, int end, int thread)
{
    build *b = vctx;
    const int d = b->d, bs = b->bs;
    double acc[CPU_FLEX_MAX_HEAD_DIM];
    for (int gb = begin; gb < end; gb++) {
        int g = gb / b->nb, blk = gb % b->nb;
        int t0 = blk * bs, t1 = t0 + bs < b->n ? t0 + bs : b->n;
        for (int e = 0; e < d; e++) acc[e] = 0;
        for (int t = t0; t < t1; t++) {
            const float *kr = krow(b->x, t, g);
            for (int e = 0; e < d; e++) acc[e] += kr[e];
        }
        float *o = b->avg_k + ((size_t)g * b->nb + blk) * d;
        for (int e = 0; e < d; e++) o[e] = (float)(acc[e] / (t1 - t0));
    }
}

/* ---------------------------------------------------------------- phase 1: per-head estimate */

/* score_cover_topk(x, gamma): tokens needed, count(cumsum of x sorted descending <= gamma) + 1.
 * Sorts x in place. */
static int64_t cover_count(float *x, int n, float gamma)
{
    qsort(x, (size_t)n, sizeof(float), cpu_flex_cmp_float_desc);
    double cum = 0;
    int64_t cnt = 0;
    for (int i = 0; i < n; i++) {
        cum += x[i];
        if (cum > (double)gamma) break;
        cnt++;
    }
    return cnt + 1;
}

/* torch_bhn_sumpool: zero-pad to whole blocks, sum each block (from index 0). */
static void pool_blocks(const float *x, int n, int bs, float *out)
{
    for (int blk = 0; blk * bs < n; blk++) {
        double sum = 0;
        for (int j = blk * bs; j < (blk + 1) * bs && j < n; j++) sum += x[j];
        out[blk] = (float)sum;
    }
}

static int32_t clamp_budget(int64_t blocks, int min_b, int max_b)
{
    if (blocks < min_b) blocks = min_b;
    if (blocks > max_b) blocks = max_b; /* after the min, as the official code orders them */
    return (int32_t)blocks;
}

static void estimate_head(build *b, int h, scratch *s)
{
    const cpu_flex_qkv *x = b->x;
    const int n = b->n, bs = b->bs, d = b->d, nb = b->nb;
    const int g = cpu_flex_kv_head(h, x->n_heads, x->n_kv_heads, b->p->gqa_interleave);
    const float rs = (float)sqrt((double)d);
    head_sel *hs = &b->hs[h];
    float lq[CPU_FLEX_MAX_HEAD_DIM];
    double mq[CPU_FLEX_MAX_HEAD_DIM];
    for (int e = 0; e < d; e++) mq[e] = 0;

    /* 1. last-rows attention estimate, corner-masked, softmax per row */
    for (int i = 0; i < bs; i++) {
        const int t = n - bs + i;
        const float *qr = qrow(x, t, h);
        for (int e = 0; e < d; e++) {
            lq[e] = qr[e] / rs;
            mq[e] += lq[e];
        }
        float *row = s->logits + (size_t)i * n;
        for (int j = 0; j < n; j++)
            row[j] = j > t ? -INFINITY : cpu_dot(lq, krow(x, j, g), d);
        cpu_softmax(row, n);
    }

    /* 2. vertical = column means, slash = diagonal sums / bs (token level, into tok); each is
     * pooled (4) before its budget (3) sorts tok in place */
    float *tok = s->sorted;
    const float gamma = b->p->gamma;
    for (int j = 0; j < n; j++) s->acc[j] = 0;
    for (int i = 0; i < bs; i++) {
        const float *row = s->logits + (size_t)i * n;
        for (int j = 0; j < n; j++) s->acc[j] += row[j];
    }
    for (int j = 0; j < n; j++) tok[j] = (float)(s->acc[j] / bs);
    pool_blocks(tok, n, bs, hs->vblk);
    hs->n_v = clamp_budget(cover_count(tok, n, gamma) / 128 + 1, b->min_b, b->max_b); /* QUIRK */

    for (int t = 0; t < n; t++) s->acc[t] = 0;
    for (int i = 0; i < bs; i++) {
        const float *row = s->logits + (size_t)i * n;
        const int shift = i - (bs - 1); /* key j = t + shift */
        for (int t = shift < 0 ? -shift : 0; t < n; t++) s->acc[t] += row[t + shift];
    }
    for (int t = 0; t < n; t++) tok[t] = (float)(s->acc[t] / bs);
    pool_blocks(tok, n, bs, hs->sblk);
    hs->n_s = clamp_budget(cover_count(tok, n, gamma) / 128 + 1, b->min_b, b->max_b);

    /* 5. pattern decision: softmax(mean last_q · avg_k) vs pooled vertical */
    float mqf[CPU_FLEX_MAX_HEAD_DIM];
    for (int e = 0; e < d; e++) mqf[e] = (float)(mq[e] / bs);
    const float *ak = b->avg_k + (size_t)g * nb * d;
    for (int blk = 0; blk < nb; blk++) s->row[blk] = cpu_dot(mqf, ak + (size_t)blk * d, d);
    cpu_softmax(s->row, nb);
    hs->js = cpu_flex_js_distance(s->row, hs->vblk, nb);
    hs->qa = hs->js < b->p->tau; /* NaN: false */
    if (hs->qa) hs->n_v = hs->n_s = b->min_b;
}

static void estimate_range(void *vctx, int begin, int end, int thread)
{
    build *b = vctx;
    for (int h = begin; h < end; h++) estimate_head(b, h, &b->sc[thread]);
}

/* ---------------------------------------------------------------- phase 3: selection */

/* The first k indices of v in (value descending, index ascending) order, into sel. */
static void top_k(const float *v, int nb, int k, cpu_flex_pair *tmp, int32_t *sel)
{
    for (int i = 0; i < nb; i++) tmp[i] = (cpu_flex_pair){v[i], i};
    qsort(tmp, (size_t)nb, sizeof *tmp, cpu_flex_cmp_pair_desc);
    for (int i = 0; i < k; i++) sel[i] = tmp[i].id;
}

/* Step 9: the query-aware block map of head h, marked into s->mark. */
static void query_aware_map(build *b, int h, scratch *s)
{
    const cpu_flex_qkv *x = b->x;
    const int n = b->n, bs = b->bs, d = b->d, nb = b->nb;
    const int g = cpu_flex_kv_head(h, x->n_heads, x->n_kv_heads, b->p->gqa_interleave);
    const int pad = nb * bs - n;
    const float rs = (float)sqrt((double)d);
    double acc[CPU_FLEX_MAX_HEAD_DIM];
    const int q0 = b->q0;
    for (int r = q0; r < nb; r++) {
        for (int e = 0; e < d; e++) acc[e] = 0;
        for (int t = r * bs; t < (r + 1) * bs && t < n; t++) {
            const float *qr = qrow(x, t, h);
            for (int e = 0; e < d; e++) acc[e] += qr[e];
        }
        float *aq = s->avg_q + (size_t)r * d;
        for (int e = 0; e < d; e++) aq[e] = (float)(acc[e] / bs); /* mean over the padded block */
    }
    float *last = s->avg_q + (size_t)(nb - 1) * d;
    for (int e = 0; e < d; e++) last[e] = last[e] * (float)bs / (float)(bs - pad);
    for (size_t i = (size_t)q0 * d; i < (size_t)nb * d; i++) s->avg_q[i] = s->avg_q[i] / rs;

    const float *ak = b->avg_k + (size_t)g * nb * d;
    for (int r = q0; r < nb; r++) {
        const float *aq = s->avg_q + (size_t)r * d;
        for (int c = 0; c < nb; c++)
            s->row[c] = c > r ? -INFINITY : cpu_dot(aq, ak + (size_t)c * d, d);
        cpu_softmax(s->row, nb);
        for (int c = 0; c < nb; c++)
            s->qa[(size_t)(r - q0) * nb + c] = (cpu_flex_pair){s->row[c], (int32_t)(r * nb + c)};
    }
    size_t m = (size_t)(nb - q0) * nb;
    qsort(s->qa, m, sizeof *s->qa, cpu_flex_cmp_pair_desc);
    /* Python float, compared as float32; a chunk's map holds its rows only */
    const float cut = (float)((double)b->p->gamma * (nb - q0));
    double cum = 0;
    int keep = 1;
    for (size_t i = 0; i < m; i++) {
        cum += s->qa[i].v;
        if (keep && cum > (double)cut) keep = 0; /* cumsum is monotone: the rest -> 0 too */
        s->mark[keep ? (size_t)s->qa[i].id : (size_t)q0 * nb] = 1; /* 0 of the first row */
        if (!keep) break;
    }
}

static void select_head(build *b, int h, scratch *s)
{
    const int nb = b->nb;
    head_sel *hs = &b->hs[h];
    const size_t nb2 = (size_t)nb * nb;
    memset(s->mark, 0, nb2);

    /* 6. always keep the sink column and the diagonal band */
    hs->vblk[0] = INFINITY;
    hs->sblk[nb - 1] = INFINITY;
    /* 7. one k for all heads; entries past this head's budget overwritten with 0 */
    int32_t *vsel = s->sel, *ssel = s->sel + nb;
    top_k(hs->sblk, nb, b->k_s, s->top, ssel);
    for (int e = 0; e < b->k_s; e++) ssel[e] = e >= hs->n_s ? 0 : (nb - 1) - ssel[e];
    top_k(hs->vblk, nb, b->k_v, s->top, vsel);
    for (int e = 0; e < b->k_v; e++)
        if (e >= hs->n_v) vsel[e] = 0;
    /* 8. flattened ids, as transform_veritcal_slash_idx builds them */
    for (int e = 0; e < b->k_v; e++)
        for (int r = 0; r < nb; r++) {
            int64_t id = (int64_t)r * nb + vsel[e];
            if (r < vsel[e]) id = 0;
            s->mark[id] = 1;
        }
    for (int e = 0; e < b->k_s; e++)
        for (int r = 0; r < nb; r++) {
            int64_t id = (int64_t)r * nb + r + (int64_t)ssel[e] * nb;
            if (id >= (int64_t)nb2) id = 0;
            s->mark[id] = 1;
        }
    /* 9. */
    if (hs->qa) query_aware_map(b, h, s);

    /* the sorted distinct ids as CSR rows, causal blocks only */
    int64_t cnt = 0;
    for (size_t id = (size_t)b->q0 * nb; id < nb2; id++)
        if (s->mark[id] && id % nb <= id / nb) cnt++;
    hs->ids = malloc((size_t)(cnt ? cnt : 1) * sizeof *hs->ids);
    hs->rows = malloc((size_t)(nb + 1) * sizeof *hs->rows);
    if (!hs->ids || !hs->rows) {
        b->failed = 1;
        return;
    }
    int64_t k = 0;
    for (int r = 0; r < nb; r++) {
        hs->rows[r] = k;
        const uint8_t *mr = s->mark + (size_t)r * nb;
        for (int c = 0; r >= b->q0 && c <= r; c++)
            if (mr[c]) hs->ids[k++] = c;
    }
    hs->rows[nb] = k;
    hs->n_ids = k;
}

static void select_range(void *vctx, int begin, int end, int thread)
{
    build *b = vctx;
    for (int h = begin; h < end && !b->failed; h++) select_head(b, h, &b->sc[thread]);
}

/* ---------------------------------------------------------------- driver */

static void run(cpu_pool *pool, int n, cpu_pool_fn fn, void *ctx)
{
    if (pool) cpu_pool_for(pool, n, 1, fn, ctx);
    else fn(ctx, 0, n, 0);
}

static void scratch_free(scratch *s)
{
    free(s->logits);
    free(s->acc);
    free(s->sorted);
    free(s->mark);
    free(s->qa);
    free(s->top);
    free(s->sel);
    free(s->avg_q);
    free(s->row);
}

int cpu_flex_index_build(cpu_pool *pool, const sparse_flex_params *p, const cpu_flex_qkv *x,
                         cpu_flex_index **out)
{
    char err[128];
    *out = NULL;
    if (sparse_flex_params_check(p, err, sizeof err) || cpu_flex_qkv_check(x, err, sizeof err))
        return CPU_FLEX_ERR_INVALID;
    const int bs = p->block_size, n = x->n_tokens, H = x->n_heads;
    const int nb = (n + bs - 1) / bs;
    /* two blocks in all, and the chunk's last bs query rows: a chunk of at least one block */
    if (n < 2 * bs || nb > CPU_FLEX_MAX_BLOCKS || x->q_pos0 % bs || n - x->q_pos0 < bs)
        return CPU_FLEX_ERR_INVALID;
    build b = {.p = p, .x = x, .bs = bs, .nb = nb, .n = n, .d = x->head_dim, .q0 = x->q_pos0 / bs};
    b.min_b = sparse_flex_budget_blocks(p->min_budget > 0 ? p->min_budget : 1, bs);
    int64_t maxb = sparse_flex_budget_blocks(p->max_budget > 0 ? p->max_budget : 2147483647, bs);
    b.max_b = (int)(maxb < nb ? maxb : nb);

    const int threads = pool ? cpu_pool_threads(pool) : 1;
    int rc = CPU_FLEX_ERR_NOMEM;
    cpu_flex_index *ix = NULL;
    b.sc = calloc((size_t)threads, sizeof *b.sc);
    b.hs = calloc((size_t)H, sizeof *b.hs);
    b.avg_k = malloc((size_t)x->n_kv_heads * nb * b.d * sizeof(float));
    if (!b.sc || !b.hs || !b.avg_k) goto done;
    for (int h = 0; h < H; h++) {
        b.hs[h].vblk = malloc((size_t)nb * sizeof(float));
        b.hs[h].sblk = malloc((size_t)nb * sizeof(float));
        if (!b.hs[h].vblk || !b.hs[h].sblk) goto done;
    }
    for (int t = 0; t < threads; t++) {
        scratch *s = &b.sc[t];
        s->logits = malloc((size_t)bs * n * sizeof(float));
        s->acc = malloc((size_t)n * sizeof(double));
        s->sorted = malloc((size_t)n * sizeof(float));
        s->mark = malloc((size_t)nb * nb);
        s->top = malloc((size_t)nb * sizeof *s->top);
        s->sel = malloc((size_t)2 * nb * sizeof *s->sel);
        s->row = malloc((size_t)nb * sizeof(float));
        if (!s->logits || !s->acc || !s->sorted || !s->mark || !s->top || !s->sel || !s->row)
            goto done;
    }

    run(pool, x->n_kv_heads * nb, avg_k_range, &b);
    run(pool, H, estimate_range, &b);

    int any_qa = 0;
    b.k_v = b.k_s = 0;
    for (int h = 0; h < H; h++) {
        if (b.hs[h].n_v > b.k_v) b.k_v = b.hs[h].n_v;
        if (b.hs[h].n_s > b.k_s) b.k_s = b.hs[h].n_s;
        any_qa |= b.hs[h].qa;
    }
    if (b.k_v > nb) b.k_v = nb;
    if (b.k_s > nb) b.k_s = nb;
    for (int t = 0; any_qa && t < threads; t++) {
        b.sc[t].qa = malloc((size_t)nb * nb * sizeof *b.sc[t].qa);
        b.sc[t].avg_q = malloc((size_t)nb * b.d * sizeof(float));
        if (!b.sc[t].qa || !b.sc[t].avg_q) goto done;
    }
    run(pool, H, select_range, &b);
    if (b.failed) goto done;

    ix = cpu_flex_index_alloc(H, n, bs);
    if (!ix) goto done;
    ix->q_block0 = b.q0;
    int64_t nnz = 0;
    for (int h = 0; h < H; h++) nnz += b.hs[h].n_ids;
    ix->col = malloc((size_t)(nnz ? nnz : 1) * sizeof *ix->col);
    if (!ix->col) goto done;
    int64_t k = 0;
    for (int h = 0; h < H; h++) {
        head_sel *hs = &b.hs[h];
        for (int r = 0; r <= nb; r++) ix->row_ptr[(size_t)h * (nb + 1) + r] = k + hs->rows[r];
        memcpy(ix->col + k, hs->ids, (size_t)hs->n_ids * sizeof *ix->col);
        k += hs->n_ids;
        ix->query_aware[h] = hs->qa;
        ix->js[h] = hs->js;
        ix->n_vertical[h] = hs->n_v;
        ix->n_slash[h] = hs->n_s;
    }
    ix->nnz = nnz;
    *out = ix;
    ix = NULL;
    rc = 0;
done:
    cpu_flex_index_free(ix);
    for (int h = 0; b.hs && h < H; h++) {
        free(b.hs[h].vblk);
        free(b.hs[h].sblk);
        free(b.hs[h].ids);
        free(b.hs[h].rows);
    }
    for (int t = 0; b.sc && t < threads; t++) scratch_free(&b.sc[t]);
    free(b.sc);
    free(b.hs);
    free(b.avg_k);
    return rc;
}
