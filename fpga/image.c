/* fpga/image.c — builds the weight image (see image.h).
 *
 * Per quantized matrix (fused QKV, O, fused gate/up, down, lm_head), with its calibration
 * inputs X when calibration is on:
 *   1. smoothing (SmoothQuant, Xiao et al. 2023): s_j = max|X_j|^a / max|W_.j|^(1-a); the
 *      weights become W diag(s) and the activations X diag(1/s). With smooth=search, a is
 *      chosen per matrix from {none, 0.1 .. 0.9} by the squared output error of the kernel's
 *      own arithmetic (fpga_qmat_sim_error) on up to 256 calibration tokens;
 *   2. the matrix is quantized (fpga_quant_matrix: clipping search weighted by E[x^2], GPTQ
 *      with H = sum (x/s)(x/s)^T) and packed into the 32 channel slices;
 *   3. 1/s goes where the kernel applies it: folded into the RMSNorm weight in front of QKV,
 *      gate/up and lm_head, or stored as the O / down activation multiplier (misc block).
 * Without calibration every matrix gets plain (unweighted) clipping search and no smoothing. */
#include "fpga/image.h"
#include "model/ckpt/numerics.h"
#include "fpga/kernels/dec_math.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_TOKENS 256 /* calibration tokens the smoothing search scores (enough to rank a) */

double fpga_image_calib_cost(const model_config *c)
{
    const double h = c->hidden, qd = (double)c->n_heads * c->head_dim;
    const double kvd = (double)c->n_kv_heads * c->head_dim, f = c->intermediate;
    const double search = EVAL_TOKENS * 10.0; /* the smoothing search's tokens x strengths */
    /* rows x K x (K + search) for QKV, O, gate and up, down, then the LM head */
    double layer = (qd + 2 * kvd) * h * (h + search) + h * qd * (qd + search) +
                   2 * f * h * (h + search) + h * f * (f + search);
    return c->n_layers * layer + (double)c->vocab * h * (h + search);
}

int fpga_image_desc(const model *m, const fpga_quant_opts *q, fpga_dec_desc *d, char *err,
                    size_t errlen)
{
    return fpga_image_desc_cfg(&m->cfg, q, d, err, errlen);
}

int fpga_image_desc_cfg(const model_config *c, const fpga_quant_opts *q, fpga_dec_desc *d,
                        char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (c->sliding_window > 0) {
        snprintf(err, errlen, "fpga: sliding-window attention is not supported by the decode "
                              "kernel");
        return -1;
    }
    *d = (fpga_dec_desc){
        .magic = FPGA_DEC_MAGIC, .version = FPGA_DEC_VERSION, .hidden = (uint32_t)c->hidden,
        .n_layers = (uint32_t)c->n_layers, .n_heads = (uint32_t)c->n_heads,
        .n_kv_heads = (uint32_t)c->n_kv_heads, .head_dim = (uint32_t)c->head_dim,
        .inter = (uint32_t)c->intermediate, .vocab = (uint32_t)c->vocab,
        .wbits = (uint32_t)q->wbits, .wgroup = (uint32_t)q->wgroup,
        .head_bits = (uint32_t)q->head_bits, .head_group = (uint32_t)q->head_group,
        .agroup = (uint32_t)q->agroup, .rms_eps = c->rms_eps,
        .attn_scale = (float)pow(c->head_dim, -0.5)};
    /* heads x parts = 32 streams per layer where the head count allows (BANKS.md) */
    d->kv_parts = c->n_kv_heads >= FPGA_DEC_CH ? 1 : FPGA_DEC_CH / (uint32_t)c->n_kv_heads;
    d->flags = (c->attn_bias ? FPGA_DEC_F_BIAS : 0) | (q->qint8 ? FPGA_DEC_F_QINT8 : 0);
    if (fpga_dec_desc_check(d) != 0) {
        snprintf(err, errlen, "fpga: the decode kernel cannot run this shape (hidden %d, %d "
                              "layers, %d/%d heads of %d, intermediate %d, vocab %d; bounds in "
                              "fpga/kernels/dec_layout.h) with %s", c->hidden, c->n_layers,
                 c->n_heads, c->n_kv_heads, c->head_dim, c->intermediate, c->vocab,
                 "these quantization groups");
        return -1;
    }
    return 0;
}

typedef struct builder {
    const model *m;
    const fpga_quant_opts *q;
    const fpga_dec_desc *d;
    fpga_dec_layout lo;
    uint8_t *out;
    fpga_image_report *rep;
    char *err;
    size_t errlen;
} builder;

static uint8_t *chan(builder *b, uint32_t c)
{
    return b->out + (uint64_t)c * b->lo.image_bytes;
}

static float *misc(builder *b, uint32_t l)
{
    return (float *)(chan(b, l % FPGA_DEC_CH) + fpga_dec_misc_off(&b->lo, l));
}

/* The float rows of fused matrix `mat` of layer l into w (rows x K). */
static void load_rows(builder *b, int l, int mat, float *w)
{
    const model *m = b->m;
    const model_tensor *parts[3] = {0};
    if (mat == FPGA_DEC_QKV) {
        parts[0] = &m->layers[l].wq;
        parts[1] = &m->layers[l].wk;
        parts[2] = &m->layers[l].wv;
    } else if (mat == FPGA_DEC_O) parts[0] = &m->layers[l].wo;
    else if (mat == FPGA_DEC_GU) {
        parts[0] = &m->layers[l].w_gate;
        parts[1] = &m->layers[l].w_up;
    } else if (mat == FPGA_DEC_D) parts[0] = &m->layers[l].w_down;
    else parts[0] = &m->lm_head;
    size_t at = 0;
    for (int i = 0; i < 3 && parts[i]; i++) {
        const model_tensor *t = parts[i];
        for (int64_t r = 0; r < t->shape[0]; r++, at++)
            model_row_f32(t, r, w + at * t->shape[1]);
    }
}

static void pack(builder *b, int l, int mat, const fpga_qmat *qm)
{
    const fpga_dec_mat *dm = &b->lo.m[mat];
    uint64_t off = mat == FPGA_DEC_LM ? b->lo.lm_off
                                      : b->lo.w_base + (uint64_t)l * b->lo.layer_stride + b->lo.off[mat];
    for (uint32_t r = 0; r < dm->rows; r++) {
        uint32_t c = r / dm->rpc, i = r % dm->rpc;
        uint8_t *base = chan(b, c) + off;
        uint32_t rows_c = fpga_dec_rows_in(dm, c);
        fpga_qmat_pack_row(qm, (int)r, base + (uint64_t)i * dm->row_bytes,
                           base + fpga_dec_scale_off(dm, rows_c) + (uint64_t)i * dm->srow_bytes);
    }
}

/* Where 1/s of matrix `mat` goes: a norm weight (folded) or an activation multiplier. */
static void place_mul(builder *b, int l, int mat, const float *mul)
{
    const model *m = b->m;
    const uint32_t H = b->d->hidden;
    if (mat == FPGA_DEC_QKV || mat == FPGA_DEC_GU || mat == FPGA_DEC_LM) {
        const model_tensor *nw = mat == FPGA_DEC_QKV ? &m->layers[l].attn_norm
                                 : mat == FPGA_DEC_GU ? &m->layers[l].ffn_norm : &m->norm;
        float *dst = misc(b, (uint32_t)l) + (mat == FPGA_DEC_GU ? b->lo.mi_ffn_norm : b->lo.mi_attn_norm);
        for (uint32_t i = 0; i < H; i++) dst[i] = model_tensor_get(nw, i, 0) * (mul ? mul[i] : 1.0f);
    } else {
        uint32_t n = mat == FPGA_DEC_O ? b->d->n_heads * b->d->head_dim : b->d->inter;
        float *dst = misc(b, (uint32_t)l) + (mat == FPGA_DEC_O ? b->lo.mi_sm_o : b->lo.mi_sm_d);
        for (uint32_t i = 0; i < n; i++) dst[i] = mul ? mul[i] : 1.0f;
    }
}

static int bits_of(builder *b, int mat, int *group)
{
    if (mat == FPGA_DEC_LM) {
        *group = (int)b->d->head_group;
        return (int)b->d->head_bits;
    }
    *group = (int)b->d->wgroup;
    return (int)b->d->wbits;
}

/* Quantizes matrix `mat` of layer l given its calibration inputs x (T x K; NULL: none). */
static int quantize_one(builder *b, int l, int mat, const float *x, int T)
{
    const fpga_dec_mat *dm = &b->lo.m[mat];
    const int rows = (int)dm->rows, K = (int)dm->k;
    int group, bits = bits_of(b, mat, &group);
    const fpga_quant_opts *q = b->q;
    float *w = malloc(sizeof(float) * (size_t)rows * K), *ws = malloc(sizeof(float) * (size_t)rows * K);
    float *s = malloc(sizeof(float) * K), *mul = malloc(sizeof(float) * K);
    float *ax = malloc(sizeof(float) * K), *aw = malloc(sizeof(float) * K);
    int ne = x ? (T < EVAL_TOKENS ? T : EVAL_TOKENS) : 0;
    float *yref = ne ? malloc(sizeof(float) * (size_t)ne * rows) : NULL;
    double *h = NULL;
    fpga_qmat qm = {0};
    int rc = -1, have_mul = 0;
    if (!w || !ws || !s || !mul || !ax || !aw || (ne && !yref) ||
        fpga_qmat_init(&qm, rows, K, bits, group))
        goto out;
    load_rows(b, l, mat, w);
    float best_alpha = -1;
    if (x && q->smooth_mode) {
        for (int j = 0; j < K; j++) ax[j] = aw[j] = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < K; j++) ax[j] = fmaxf(ax[j], fabsf(x[(size_t)t * K + j]));
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < K; j++) aw[j] = fmaxf(aw[j], fabsf(w[(size_t)r * K + j]));
        /* the float reference on the scored tokens (evenly spaced over the calibration set) */
        for (int t = 0; t < ne; t++) {
            const float *xt = x + (size_t)(t * (T / ne)) * K;
            for (int r = 0; r < rows; r++) {
                double acc = 0;
                for (int j = 0; j < K; j++) acc += (double)xt[j] * w[(size_t)r * K + j];
                yref[(size_t)t * rows + r] = (float)acc;
            }
        }
        float *xe = malloc(sizeof(float) * (size_t)ne * K);
        if (!xe) goto out;
        for (int t = 0; t < ne; t++) memcpy(xe + (size_t)t * K, x + (size_t)(t * (T / ne)) * K, sizeof(float) * K);
        double best = INFINITY;
        int n_alpha = q->smooth_mode == 1 ? 1 : 10;
        for (int ai = 0; ai < n_alpha; ai++) {
            /* ai 0 of the search is "no smoothing"; then 0.1 .. 0.9 */
            float a = q->smooth_mode == 1 ? q->alpha : ai == 0 ? -1.0f : 0.1f * ai;
            for (int j = 0; j < K; j++) {
                float sj = 1.0f;
                if (a >= 0 && ax[j] > 0 && aw[j] > 0)
                    sj = powf(ax[j], a) / powf(aw[j], 1.0f - a);
                s[j] = fminf(fmaxf(sj, 1e-4f), 1e4f);
                mul[j] = 1.0f / s[j];
            }
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < K; j++) ws[(size_t)r * K + j] = w[(size_t)r * K + j] * s[j];
            if (fpga_quant_matrix(ws, NULL, q->clip, 0, &qm)) {
                free(xe);
                goto out;
            }
            double e = fpga_qmat_sim_error(&qm, xe, mul, ne, (int)b->d->agroup, yref);
            if (ai == 0 && b->rep) b->rep->err_before[mat] += e;
            if (e < best) {
                best = e;
                best_alpha = a;
            }
        }
        free(xe);
        if (b->rep) b->rep->err_after[mat] += best;
        for (int j = 0; j < K; j++) {
            float sj = 1.0f;
            if (best_alpha >= 0 && ax[j] > 0 && aw[j] > 0)
                sj = powf(ax[j], best_alpha) / powf(aw[j], 1.0f - best_alpha);
            s[j] = fminf(fmaxf(sj, 1e-4f), 1e4f);
            mul[j] = 1.0f / s[j];
        }
        have_mul = best_alpha >= 0;
    }
    if (b->rep) b->rep->alpha[l][mat] = best_alpha;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < K; j++)
            ws[(size_t)r * K + j] = w[(size_t)r * K + j] * (have_mul ? s[j] : 1.0f);
    if (x && (q->clip || q->gptq)) {
        /* H = sum over the calibration tokens of (x/s)(x/s)^T */
        h = calloc((size_t)K * K, sizeof(double));
        double *xr = malloc(sizeof(double) * K);
        if (!h || !xr) {
            free(xr);
            goto out;
        }
        for (int t = 0; t < T; t++) {
            for (int j = 0; j < K; j++) xr[j] = (double)x[(size_t)t * K + j] * (have_mul ? mul[j] : 1.0f);
            for (int i = 0; i < K; i++) {
                double xi = xr[i];
                if (xi == 0) continue;
                double *hi = h + (size_t)i * K;
                for (int j = 0; j <= i; j++) hi[j] += xi * xr[j];
            }
        }
        for (int i = 0; i < K; i++)
            for (int j = i + 1; j < K; j++) h[(size_t)i * K + j] = h[(size_t)j * K + i];
        free(xr);
    }
    if (fpga_quant_matrix(ws, h, q->clip, h ? q->gptq : 0, &qm)) goto out;
    pack(b, l, mat, &qm);
    place_mul(b, l, mat, have_mul ? mul : NULL);
    rc = 0;
out:
    if (rc) snprintf(b->err, b->errlen, "fpga: out of memory quantizing layer %d", l);
    fpga_qmat_free(&qm);
    free(w);
    free(ws);
    free(s);
    free(mul);
    free(ax);
    free(aw);
    free(yref);
    free(h);
    return rc;
}

static int calib_cb(void *ctx, int layer, int mat, const float *x, int T, int K)
{
    (void)K;
    return quantize_one(ctx, layer, mat, x, T);
}

int fpga_image_build(const model *m, const fpga_quant_opts *q, const fpga_calib_ref *ref,
                     const fpga_dec_desc *d, uint8_t *out, fpga_image_report *rep, char *err,
                     size_t errlen)
{
    builder b = {.m = m, .q = q, .d = d, .out = out, .rep = rep, .err = err, .errlen = errlen};
    fpga_dec_layout_of(d, &b.lo);
    const model_config *c = &m->cfg;
    if (rep) memset(rep, 0, sizeof *rep);
    memcpy(out, d, sizeof *d);
    /* biases (not touched by smoothing: they add to the output) */
    if (d->flags & FPGA_DEC_F_BIAS)
        for (int l = 0; l < c->n_layers; l++) {
            float *dst = misc(&b, (uint32_t)l) + b.lo.mi_bias;
            const model_tensor *bt[3] = {&m->layers[l].bq, &m->layers[l].bk, &m->layers[l].bv};
            for (int i = 0, at = 0; i < 3; i++)
                for (int64_t j = 0; j < bt[i]->shape[0]; j++, at++)
                    dst[at] = bt[i]->data ? model_tensor_get(bt[i], j, 0) : 0.0f;
        }
    if (q->calib_seqs > 0 && q->calib_len > 1) {
        if (!ref || !ref->ids || !ref->run) {
            snprintf(err, errlen, "fpga: calibration asked for (%dx%d) but no float reference "
                     "was handed in (TANDEM_FPGA_QUANT=calib=0 builds without it)",
                     q->calib_seqs, q->calib_len);
            return -1;
        }
        size_t n = (size_t)q->calib_seqs * q->calib_len;
        int32_t *ids = malloc(sizeof(int32_t) * n);
        if (!ids) {
            snprintf(err, errlen, "fpga: out of memory");
            return -1;
        }
        if (ref->ids(m, q->calib_seqs, q->calib_len, q->seed, ids, err, errlen)) {
            free(ids);
            return -1;
        }
        if (rep) rep->calib_tokens = (int)n;
        int rc = ref->run(m, ids, q->calib_seqs, q->calib_len, calib_cb, &b);
        free(ids);
        if (rc && !*err) snprintf(err, errlen, "fpga: calibration ran out of memory");
        return rc ? -1 : 0;
    }
    for (int l = 0; l < c->n_layers; l++)
        for (int mat = FPGA_DEC_QKV; mat <= FPGA_DEC_D; mat++)
            if (quantize_one(&b, l, mat, NULL, 0)) return -1;
    return quantize_one(&b, c->n_layers, FPGA_DEC_LM, NULL, 0);
}
