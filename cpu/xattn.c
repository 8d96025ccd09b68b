/* cpu/xattn.c — XAttention's antidiagonal block estimate and threshold selection, and
 * Tri-shape's block list (see cpu/sparse_idx.h for what each reproduces, line by line).
 *
 * Work is split over (head, query block) pairs: each pair computes its B/S strided query rows'
 * softmax over the strided keys up to the diagonal (one n/S-float row buffer per thread, never
 * an n x n tensor), sums them into that row's block masses, and selects its blocks into its own
 * slot of a causal-shaped buffer; the CSR lists are assembled afterwards in index order, so the
 * result does not depend on the thread count. */
#include "cpu/sparse_idx.h"
#include "cpu/flex_impl.h"
#include "cpu/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct xctx {
    const sparse_params *p;
    const cpu_flex_qkv *x;
    int B, S, nb, q0, rows, rpb; /* block, stride, key blocks, first query block, rows, B / S */
    float scale;                 /* 1 / sqrt(D) / S (norm 1) */
    double *A;                   /* (H, rows, nb) */
    int32_t *sel;                /* per pair, its kept blocks, at slot(I) of its head */
    int32_t *cnt;                /* (H, rows) */
    int64_t per_head;            /* causal blocks of rows q0 .. nb - 1 */
    float *buf;                  /* (threads, nrs) */
    int nrs;                     /* reshaped rows: ceil(n / S) */
    int quirk_blocks;            /* rows below it select as the official first chunk does */
} xctx;

static int64_t slot(const xctx *c, int I)
{
    return ((int64_t)I * (I + 1) - (int64_t)c->q0 * (c->q0 + 1)) / 2;
}

typedef struct dpair {
    double v;
    int32_t id;
} dpair;

static int cmp_dpair_desc(const void *a, const void *b)
{
    const dpair *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Q_r[i] . K_r[j] = sum_t Q[iS + S-1-t] . K[jS + t], positions past n being zeros. */
static double strided_dot(const cpu_flex_qkv *x, int S, int h, int g, int i, int j)
{
    const int n = x->n_tokens, D = x->head_dim;
    double s = 0;
    for (int t = 0; t < S; t++) {
        int qp = i * S + S - 1 - t, kp = j * S + t;
        if (qp >= n || kp >= n) continue;
        const float *q = x->q + (size_t)(qp - x->q_pos0) * x->q_stride + (size_t)h * D;
        const float *k = x->k + (size_t)kp * x->kv_stride + (size_t)g * D;
        s += cpu_dot(q, k, D);
    }
    return s;
}

static void select_row(const xctx *c, const double *A, int I, int32_t *out, int32_t *n_out,
                       dpair *tmp)
{
    int n = 0;
    if (c->p->xattention_threshold >= 1.0) { /* every causal block */
        for (int J = 0; J <= I; J++) out[n++] = J;
        *n_out = n;
        return;
    }
    double total = 0;
    for (int J = 0; J <= I; J++) total += A[J];
    const double required = total * c->p->xattention_threshold;
    /* block 0 and the diagonal first (one block when I is 0) */
    const int quirk = I > 0 && I < c->quirk_blocks;
    int m = 0, k = 0;
    for (int J = quirk ? 0 : 1; J < I; J++) tmp[m++] = (dpair){A[J], J};
    qsort(tmp, (size_t)m, sizeof *tmp, cmp_dpair_desc);
    if (!quirk) {
        /* other block p (1-based) is kept while the sum before it is below required */
        double run = I > 0 ? A[0] + A[I] : A[0];
        while (k < m && run < required) run += tmp[k++].v;
        out[n++] = 0;
    } else {
        /* the official first chunk: only the diagonal forced; the cumsum tested with other
         * block p is 0 for p = 1, else A[I] + the p - 2 larger others */
        double run = A[I];
        for (int p = 1; p <= m; p++) {
            if (p >= 3) run += tmp[p - 3].v;
            if (!((p == 1 ? 0.0 : run) < required)) break;
            k = p;
        }
        /* where(index_mask, index, 0): every block not kept marks block 0, so block 0 ends up
         * kept whenever it was not selected */
        int has0 = 0;
        for (int e = 0; e < k; e++) has0 |= tmp[e].id == 0;
        if (!has0 && k < m) out[n++] = 0;
    }
    /* kept: [0,] tmp[0 .. k), I — ascending */
    int32_t *mid = out + n;
    for (int e = 0; e < k; e++) mid[e] = tmp[e].id;
    /* insertion into ascending order (k is at most I - 1; ids are distinct) */
    for (int a = 1; a < k; a++) {
        int32_t v = mid[a];
        int b = a - 1;
        while (b >= 0 && mid[b] > v) {
            mid[b + 1] = mid[b];
            b--;
        }
        mid[b + 1] = v;
    }
    /* with the quirk block 0 may be among tmp: the insertion sort put it first */
    n += k;
    if (I > 0) out[n++] = I;
    *n_out = n;
}

static void xattn_range(void *vctx, int begin, int end, int thread)
{
    xctx *c = vctx;
    const cpu_flex_qkv *x = c->x;
    const int H = x->n_heads, S = c->S, n = x->n_tokens;
    float *row = c->buf + (size_t)thread * c->nrs;
    dpair *tmp = malloc(sizeof *tmp * (size_t)c->nb);
    if (!tmp) return; /* cnt stays -1: the builder reports out of memory */
    for (int it = begin; it < end; it++) {
        const int h = it / c->rows, I = c->q0 + it % c->rows;
        const int g = cpu_flex_kv_head(h, H, x->n_kv_heads, 0);
        double *A = c->A + ((size_t)h * c->rows + (I - c->q0)) * c->nb;
        for (int i = I * c->rpb; i < (I + 1) * c->rpb; i++) {
            if ((int64_t)i * S >= n) break; /* a reshaped query of padding only */
            float mx = -INFINITY;
            for (int j = 0; j <= i; j++) {
                row[j] = (float)strided_dot(x, S, h, g, i, j) * c->scale;
                if (row[j] > mx) mx = row[j];
            }
            double sum = 0;
            for (int j = 0; j <= i; j++) {
                row[j] = expf(row[j] - mx);
                sum += row[j];
            }
            const float inv = (float)(1.0 / sum);
            for (int j = 0; j <= i; j++) A[j / c->rpb] += (double)(row[j] * inv);
        }
        int32_t *out = c->sel + (size_t)h * c->per_head + slot(c, I);
        select_row(c, A, I, out, &c->cnt[(size_t)h * c->rows + (I - c->q0)], tmp);
    }
    free(tmp);
}

float cpu_e4m3_round(float x)
{
    if (x != x) return x;
    const float a = fabsf(x);
    /* the quantum of a's binade: 2^(e - 3), e >= -6 (below 2^-6 the subnormals' 2^-9) */
    const int e = a < 0x1p-6f ? -6 : ilogbf(a);
    float r = rintf(ldexpf(a, 3 - e)); /* exact scaling; rintf: to nearest, ties to even */
    r = ldexpf(r, e - 3);
    return copysignf(r > 448.f ? 448.f : r, x);
}

int cpu_xattn_fp8_exp(float amax)
{
    if (!(amax > 0.f) || isinf(amax)) return 0;
    int e = 8 - ilogbf(amax); /* amax * 2^e in [256, 512) */
    if (ldexpf(amax, e) > 448.f) e--;
    return e;
}

/* rows x cols values of head h (head stride hs floats, row stride rs) rounded as the FP8
 * estimate rounds them, into dst (rows x heads x d, compact) */
static void fp8_heads(const float *src, size_t rs, int rows, int heads, int d, float *dst)
{
    for (int h = 0; h < heads; h++) {
        float amax = 0.f;
        for (int t = 0; t < rows; t++)
            for (int e = 0; e < d; e++) {
                const float a = fabsf(src[(size_t)t * rs + (size_t)h * d + e]);
                if (a > amax) amax = a;
            }
        const int sh = cpu_xattn_fp8_exp(amax);
        for (int t = 0; t < rows; t++)
            for (int e = 0; e < d; e++) {
                const float v = src[(size_t)t * rs + (size_t)h * d + e];
                dst[((size_t)t * heads + h) * d + e] = ldexpf(cpu_e4m3_round(ldexpf(v, sh)), -sh);
            }
    }
}

int cpu_xattn_index_build_ex(cpu_pool *pool, const sparse_params *p, const cpu_flex_qkv *x,
                             int official_chunk, int fp8, cpu_flex_index **out, double **mass)
{
    if (!fp8) return cpu_xattn_index_build(pool, p, x, official_chunk, out, mass);
    *out = NULL;
    if (mass) *mass = NULL;
    if (!x || cpu_flex_qkv_check(x, NULL, 0)) return CPU_FLEX_ERR_INVALID;
    const int n = x->n_tokens, rows = n - x->q_pos0, H = x->n_heads, Hk = x->n_kv_heads,
              D = x->head_dim;
    float *qf = malloc(sizeof *qf * (size_t)rows * H * D);
    float *kf = malloc(sizeof *kf * (size_t)n * Hk * D);
    int rc = CPU_FLEX_ERR_NOMEM;
    if (qf && kf) {
        fp8_heads(x->q, x->q_stride, rows, H, D, qf);
        fp8_heads(x->k, x->kv_stride, n, Hk, D, kf);
        cpu_flex_qkv y = *x;
        y.q = qf;
        y.q_stride = (size_t)H * D;
        y.k = y.v = kf;
        y.kv_stride = (size_t)Hk * D;
        rc = cpu_xattn_index_build(pool, p, &y, official_chunk, out, mass);
    }
    free(qf);
    free(kf);
    return rc;
}

int cpu_xattn_index_build(cpu_pool *pool, const sparse_params *p, const cpu_flex_qkv *x,
                          int official_chunk, cpu_flex_index **out, double **mass)
{
    *out = NULL;
    if (mass) *mass = NULL;
    if (!p || p->mode != SPARSE_MODE_XATTN || sparse_params_check(p, NULL, 0, NULL) ||
        cpu_flex_qkv_check(x, NULL, 0))
        return CPU_FLEX_ERR_INVALID;
    xctx c = {.p = p, .x = x, .B = p->xattention_block_size, .S = p->xattention_stride};
    const int n = x->n_tokens, H = x->n_heads;
    c.nb = (n + c.B - 1) / c.B;
    if (x->q_pos0 % c.B || c.nb > CPU_FLEX_MAX_BLOCKS) return CPU_FLEX_ERR_INVALID;
    c.q0 = x->q_pos0 / c.B;
    c.rows = c.nb - c.q0;
    c.rpb = c.B / c.S;
    c.nrs = (n + c.S - 1) / c.S;
    c.scale = (float)(1.0 / sqrt((double)x->head_dim) / c.S);
    c.per_head = slot(&c, c.nb);
    c.quirk_blocks = x->q_pos0 == 0 && official_chunk > 0 ? (official_chunk + c.B - 1) / c.B : 0;
    const int threads = pool ? cpu_pool_threads(pool) : 1;
    c.A = calloc((size_t)H * c.rows * c.nb, sizeof *c.A);
    c.sel = malloc(sizeof *c.sel * (size_t)(c.per_head * H));
    c.cnt = malloc(sizeof *c.cnt * (size_t)H * c.rows);
    c.buf = malloc(sizeof *c.buf * (size_t)threads * c.nrs);
    cpu_flex_index *ix = cpu_flex_index_alloc(H, n, c.B);
    int rc = CPU_FLEX_ERR_NOMEM;
    if (!c.A || !c.sel || !c.cnt || !c.buf || !ix) goto done;
    for (size_t i = 0; i < (size_t)H * c.rows; i++) c.cnt[i] = -1;
    if (pool) cpu_pool_for(pool, H * c.rows, 1, xattn_range, &c);
    else xattn_range(&c, 0, H * c.rows, 0);
    int64_t nnz = 0;
    for (size_t i = 0; i < (size_t)H * c.rows; i++) {
        if (c.cnt[i] < 0) goto done;
        nnz += c.cnt[i];
    }
    ix->q_block0 = c.q0;
    ix->col = malloc(sizeof *ix->col * (size_t)(nnz > 0 ? nnz : 1));
    if (!ix->col) goto done;
    int64_t k = 0;
    for (int h = 0; h < H; h++) {
        int64_t *rp = ix->row_ptr + (size_t)h * (c.nb + 1);
        for (int r = 0; r < c.nb; r++) {
            rp[r] = k;
            if (r < c.q0) continue;
            const int32_t *src = c.sel + (size_t)h * c.per_head + slot(&c, r);
            int32_t m = c.cnt[(size_t)h * c.rows + (r - c.q0)];
            memcpy(ix->col + k, src, sizeof *src * (size_t)m);
            k += m;
        }
        rp[c.nb] = k;
        ix->js[h] = NAN;
    }
    ix->nnz = k;
    *out = ix;
    ix = NULL;
    if (mass) {
        *mass = c.A;
        c.A = NULL;
    }
    rc = 0;
done:
    cpu_flex_index_free(ix);
    free(c.A);
    free(c.sel);
    free(c.cnt);
    free(c.buf);
    return rc;
}

int cpu_trishape_index_build(const sparse_params *p, const cpu_flex_qkv *x, cpu_flex_index **out)
{
    *out = NULL;
    if (!p || p->mode != SPARSE_MODE_TRISHAPE || sparse_params_check(p, NULL, 0, NULL) ||
        cpu_flex_qkv_check(x, NULL, 0) || x->q_pos0 % SPARSE_TRI_BLOCK)
        return CPU_FLEX_ERR_INVALID;
    const int B = SPARSE_TRI_BLOCK, n = x->n_tokens, H = x->n_heads;
    const int nb = (n + B - 1) / B, q0 = x->q_pos0 / B;
    if (nb > CPU_FLEX_MAX_BLOCKS) return CPU_FLEX_ERR_INVALID;
    int lo, hi;
    sparse_tri_skip(p, x->q_pos0, &lo, &hi);
    lo /= B;
    hi /= B;
    int64_t per = ((int64_t)nb * (nb + 1) - (int64_t)q0 * (q0 + 1)) / 2 -
                  (int64_t)(nb - q0) * (hi - lo);
    cpu_flex_index *ix = cpu_flex_index_alloc(H, n, B);
    if (!ix || !(ix->col = malloc(sizeof *ix->col * (size_t)(per * H > 0 ? per * H : 1)))) {
        cpu_flex_index_free(ix);
        return CPU_FLEX_ERR_NOMEM;
    }
    ix->q_block0 = q0;
    int64_t k = 0;
    for (int h = 0; h < H; h++) {
        int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
        for (int r = 0; r < nb; r++) {
            rp[r] = k;
            for (int cb = 0; r >= q0 && cb <= r; cb++)
                if (cb < lo || cb >= hi) ix->col[k++] = cb;
        }
        rp[nb] = k;
        ix->js[h] = NAN;
    }
    ix->nnz = k;
    *out = ix;
    return 0;
}
