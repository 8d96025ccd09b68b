/* fpga/quant.c — settings and per-matrix quantization for the weight image (see quant.h).
 *
 * Round-to-nearest with a clipping search: for each row (int8) or group (int4), scales
 * s = r * amax / QMAX for r on a grid from 1 down to 0.5 are tried and the one with the least
 * sum_i d_i (w_i - s q_i)^2 kept, d_i = E[x_i^2] (the Hessian's diagonal) when calibration
 * inputs exist, else 1: the activation-aware error of AWQ / GPTQ's grid search. int4 values
 * clamp to [-8, 7] (the negative end gets the extra level), int8 to [-127, 127].
 *
 * GPTQ: columns are quantized in order; each column's rounding error, divided by the
 * corresponding diagonal entry of the upper Cholesky factor U of H^-1, is pushed onto the
 * columns not yet quantized through that row of U (Frantar et al., "GPTQ", 2022, Algorithm 1,
 * one column per step). H gets 1 % of its mean diagonal added (their dampening). int4 group
 * scales are chosen when a group starts, from the weights as updated so far. */
#include "fpga/quant.h"
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_math.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pow2_clamp(int v, int lo, int hi)
{
    int p = lo;
    while (p * 2 <= v && p * 2 <= hi) p *= 2;
    return p;
}

void fpga_quant_opts_default(fpga_quant_opts *q, int weight_bits, int hidden)
{
    memset(q, 0, sizeof *q);
    q->hidden = hidden;
    q->wbits = weight_bits == 4 ? 4 : 8;
    q->wgroup = q->wbits == 4 ? pow2_clamp(hidden / 2, 32, 128) : 0;
    q->head_bits = 8;
    q->head_group = 0;
    q->agroup = pow2_clamp(hidden / 8, 8, 128);
    q->qint8 = 0;
    /* Searched smoothing and act-order GPTQ lower W8A8's error; at 4 bits both fight the
     * per-group scales (act-order needs static groups), so W4 uses neither (fpga/QUANT.md). */
    q->smooth_mode = q->wbits == 8 ? 2 : 0;
    q->alpha = 0.5f;
    q->clip = 1;
    q->gptq = q->wbits == 8 ? 2 : 1;
    q->calib_seqs = 8;
    q->calib_len = 128;
    q->seed = 0x7a4d2c1b;
}

static int parse_long(const char *v, long lo, long hi, long *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < lo || n > hi) return -1;
    *out = n;
    return 0;
}

int fpga_quant_opts_parse(fpga_quant_opts *q, const char *spec, char *err, size_t errlen)
{
    char buf[512];
    if (!spec) return 0;
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, errlen, "quantization spec longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    char *save;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            snprintf(err, errlen, "quantization spec: '%s' is not key=value", kv);
            return -1;
        }
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        long n = 0;
        int bad = 0;
        if (!strcmp(k, "wbits")) {
            bad = parse_long(v, 4, 8, &n) || (n != 4 && n != 8);
            if (!bad) fpga_quant_opts_default(q, (int)n, q->hidden);
        } else if (!strcmp(k, "head")) {
            bad = parse_long(v, 4, 8, &n) || (n != 4 && n != 8);
            q->head_bits = (int)n;
        } else if (!strcmp(k, "wgroup") || !strcmp(k, "hgroup")) {
            bad = parse_long(v, 0, 4096, &n) || (n && (n < FPGA_DEC_MIN_GROUP || (n & 1)));
            *(!strcmp(k, "wgroup") ? &q->wgroup : &q->head_group) = (int)n;
        } else if (!strcmp(k, "agroup")) {
            bad = parse_long(v, 0, 1 << 16, &n) || (n && (n < FPGA_DEC_MIN_GROUP || (n & 1)));
            q->agroup = (int)n;
        } else if (!strcmp(k, "qint8") || !strcmp(k, "clip") || !strcmp(k, "gptq")) {
            bad = parse_long(v, 0, !strcmp(k, "gptq") ? 2 : 1, &n);
            *(!strcmp(k, "qint8") ? &q->qint8 : !strcmp(k, "clip") ? &q->clip : &q->gptq) = (int)n;
        } else if (!strcmp(k, "smooth")) {
            if (!strcmp(v, "off")) q->smooth_mode = 0;
            else if (!strcmp(v, "search")) q->smooth_mode = 2;
            else {
                char *end;
                double a = strtod(v, &end);
                bad = !*v || *end || !(a >= 0 && a <= 1);
                q->smooth_mode = 1;
                q->alpha = (float)a;
            }
        } else if (!strcmp(k, "calib")) {
            int s = 0, t = 0;
            char x;
            if (!strcmp(v, "0")) q->calib_seqs = q->calib_len = 0;
            else if (sscanf(v, "%d%c%d", &s, &x, &t) == 3 && x == 'x' && s >= 1 && s <= 64 &&
                     t >= 2 && t <= 4096) {
                q->calib_seqs = s;
                q->calib_len = t;
            } else bad = 1;
        } else if (!strcmp(k, "seed")) {
            char *end;
            unsigned long long s = strtoull(v, &end, 10);
            bad = !*v || *end;
            q->seed = s;
        } else {
            snprintf(err, errlen, "quantization spec: unknown key '%s' (wbits, wgroup, head, "
                                  "hgroup, agroup, qint8, smooth, clip, gptq, calib, seed)", k);
            return -1;
        }
        if (bad) {
            snprintf(err, errlen, "quantization spec: bad value '%s' for %s", v, k);
            return -1;
        }
    }
    if (q->head_bits == 4 && !q->head_group) q->head_group = pow2_clamp(q->hidden / 2, 32, 128);
    int g[2] = {q->wgroup, q->head_group}, b[2] = {q->wbits, q->head_bits};
    for (int i = 0; i < 2; i++) {
        if (b[i] == 4 && !g[i]) {
            snprintf(err, errlen, "quantization spec: int4 weights need a group (wgroup, hgroup)");
            return -1;
        }
        /* activation and weight groups must nest (dec_layout.h) */
        if (q->agroup && g[i] && q->agroup % g[i] && g[i] % q->agroup) {
            snprintf(err, errlen, "quantization spec: agroup %d and weight group %d must divide "
                                  "one another", q->agroup, g[i]);
            return -1;
        }
    }
    return 0;
}

void fpga_quant_opts_str(const fpga_quant_opts *q, char *out, size_t n)
{
    char sm[16];
    if (q->smooth_mode == 0) snprintf(sm, sizeof sm, "off");
    else if (q->smooth_mode == 2) snprintf(sm, sizeof sm, "search");
    else snprintf(sm, sizeof sm, "%.3f", q->alpha);
    snprintf(out, n,
             "wbits=%d,wgroup=%d,head=%d,hgroup=%d,agroup=%d,qint8=%d,smooth=%s,clip=%d,gptq=%d,"
             "calib=%dx%d,seed=%llu",
             q->wbits, q->wgroup, q->head_bits, q->head_group, q->agroup, q->qint8, sm, q->clip, q->gptq,
             q->calib_seqs, q->calib_len, (unsigned long long)q->seed);
}

/* ---------------------------------------------------------------- matrices */

int fpga_qmat_init(fpga_qmat *m, int rows, int k, int bits, int group)
{
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->k = k;
    m->bits = bits;
    m->grouped = group != 0;
    m->group = group ? group : k;
    m->ngroups = group ? (k + group - 1) / group : 1;
    m->q = malloc((size_t)rows * k);
    m->scale = malloc(sizeof(float) * (size_t)rows * m->ngroups);
    if (!m->q || !m->scale) {
        fpga_qmat_free(m);
        return -1;
    }
    return 0;
}

void fpga_qmat_free(fpga_qmat *m)
{
    free(m->q);
    free(m->scale);
    m->q = NULL;
    m->scale = NULL;
}

static int qlo(int bits) { return bits == 4 ? -8 : -127; }
static int qhi(int bits) { return bits == 4 ? 7 : 127; }

static float round_scale(int fp16, float s)
{
    /* group scales are stored as fp16: quantize with exactly the value the kernel will see */
    return fp16 ? fpga_km_f16_to_f32(fpga_km_f32_to_f16(s)) : s;
}

static int qval(double w, float s, int bits)
{
    if (s == 0.0f) return 0;
    double r = rint(w / s);
    if (r < qlo(bits)) r = qlo(bits);
    if (r > qhi(bits)) r = qhi(bits);
    return (int)r;
}

/* The scale for values w[0..n) (stride 1) with error weights d (may be NULL). */
static float choose_scale(const double *w, const double *d, int n, int bits, int fp16, int clip)
{
    double amax = 0;
    for (int i = 0; i < n; i++) amax = fabs(w[i]) > amax ? fabs(w[i]) : amax;
    if (amax == 0) return 0.0f;
    float best = round_scale(fp16, (float)(amax / qhi(bits)));
    if (!clip) return best;
    double best_err = INFINITY;
    for (int step = 0; step <= 20; step++) {
        float s = round_scale(fp16, (float)(amax * (1.0 - 0.025 * step) / qhi(bits)));
        if (s == 0.0f) continue;
        double err = 0;
        for (int i = 0; i < n; i++) {
            double e = w[i] - (double)s * qval(w[i], s, bits);
            err += (d ? d[i] : 1.0) * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best = s;
        }
    }
    return best;
}

/* In-place Cholesky of an n x n SPD matrix (lower triangle: a = L L^T). 0, or -1 if not SPD. */
static int cholesky(double *a, int n)
{
    for (int j = 0; j < n; j++) {
        double s = a[(size_t)j * n + j];
        for (int k = 0; k < j; k++) s -= a[(size_t)j * n + k] * a[(size_t)j * n + k];
        if (!(s > 0)) return -1;
        double ljj = sqrt(s);
        a[(size_t)j * n + j] = ljj;
        for (int i = j + 1; i < n; i++) {
            double t = a[(size_t)i * n + j];
            for (int k = 0; k < j; k++) t -= a[(size_t)i * n + k] * a[(size_t)j * n + k];
            a[(size_t)i * n + j] = t / ljj;
        }
        for (int i = 0; i < j; i++) a[(size_t)i * n + j] = 0;
    }
    return 0;
}

/* U (upper, row-major) with H^-1 = U^T U, for a damped copy of h. */
static int hinv_upper(const double *h, int n, double *u)
{
    double *a = malloc(sizeof(double) * (size_t)n * n), *inv = malloc(sizeof(double) * (size_t)n * n);
    if (!a || !inv) {
        free(a);
        free(inv);
        return -1;
    }
    double mean = 0;
    for (int i = 0; i < n; i++) mean += h[(size_t)i * n + i];
    mean /= n;
    int rc = -1;
    for (double damp = 0.01; damp < 10 && rc; damp *= 10) {
        memcpy(a, h, sizeof(double) * (size_t)n * n);
        for (int i = 0; i < n; i++) {
            if (a[(size_t)i * n + i] <= 0) a[(size_t)i * n + i] = 1; /* a dead input */
            a[(size_t)i * n + i] += damp * (mean > 0 ? mean : 1);
        }
        if (cholesky(a, n)) continue;
        /* inv = (L L^T)^-1: solve L Y = I, then L^T X = Y, one column at a time */
        for (int c = 0; c < n; c++) {
            for (int i = 0; i < n; i++) {
                double s = i == c ? 1.0 : 0.0;
                for (int k = 0; k < i; k++) s -= a[(size_t)i * n + k] * inv[(size_t)k * n + c];
                inv[(size_t)i * n + c] = s / a[(size_t)i * n + i];
            }
            for (int i = n - 1; i >= 0; i--) {
                double s = inv[(size_t)i * n + c];
                for (int k = i + 1; k < n; k++) s -= a[(size_t)k * n + i] * inv[(size_t)k * n + c];
                inv[(size_t)i * n + c] = s / a[(size_t)i * n + i];
            }
        }
        for (int i = 0; i < n; i++) /* symmetrize against rounding */
            for (int j = 0; j < i; j++) {
                double v = 0.5 * (inv[(size_t)i * n + j] + inv[(size_t)j * n + i]);
                inv[(size_t)i * n + j] = inv[(size_t)j * n + i] = v;
            }
        if (cholesky(inv, n)) continue;
        for (int i = 0; i < n; i++) /* U = L^T */
            for (int j = 0; j < n; j++) u[(size_t)i * n + j] = j >= i ? inv[(size_t)j * n + i] : 0;
        rc = 0;
    }
    free(a);
    free(inv);
    return rc;
}

/* diag(h) descending, ties by index (GPTQ's act-order: the columns that matter most are
 * quantized first, while the most columns are left to absorb their error) */
static const double *g_sort_d;
static int by_diag(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_sort_d[i] != g_sort_d[j]) return g_sort_d[i] > g_sort_d[j] ? -1 : 1;
    return i - j;
}

int fpga_quant_matrix(const float *w, const double *h, int clip, int gptq, fpga_qmat *m)
{
    const int rows = m->rows, k = m->k, bits = m->bits, g = m->group;
    const int act_order = gptq == 2 && h;
    double *wr = malloc(sizeof(double) * k), *wp = malloc(sizeof(double) * k), *d = NULL;
    double *u = NULL, *hp = NULL;
    int *perm = malloc(sizeof(int) * k);
    if (!wr || !wp || !perm) goto oom;
    for (int i = 0; i < k; i++) perm[i] = i;
    if (h) {
        d = malloc(sizeof(double) * k);
        if (!d) goto oom;
        for (int i = 0; i < k; i++) d[i] = h[(size_t)i * k + i];
    }
    if (act_order) {
        g_sort_d = d;
        qsort(perm, (size_t)k, sizeof *perm, by_diag);
    }
    if (gptq && h) {
        u = malloc(sizeof(double) * (size_t)k * k);
        hp = malloc(sizeof(double) * (size_t)k * k);
        if (!u || !hp) goto oom;
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) hp[(size_t)a * k + b] = h[(size_t)perm[a] * k + perm[b]];
        if (hinv_upper(hp, k, u)) {
            free(u);
            u = NULL; /* no usable Hessian: plain rounding */
        }
    }
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < k; i++) wr[i] = w[(size_t)r * k + i];
        float *sc = m->scale + (size_t)r * m->ngroups;
        int8_t *q = m->q + (size_t)r * k;
        if (act_order) /* static groups: every scale from the weights as given */
            for (int i = 0; i < k; i += g)
                sc[i / g] = choose_scale(wr + i, d + i, k - i < g ? k - i : g, bits, m->grouped, clip);
        for (int i = 0; i < k; i++) wp[i] = wr[perm[i]];
        for (int a = 0; a < k; a++) {
            int i = perm[a];
            if (!act_order && i % g == 0) {
                int n = k - i < g ? k - i : g;
                sc[i / g] = choose_scale(wp + a, d ? d + i : NULL, n, bits, m->grouped, clip);
            }
            float s = sc[i / g];
            q[i] = (int8_t)qval(wp[a], s, bits);
            if (u) {
                double e = (wp[a] - (double)s * q[i]) / u[(size_t)a * k + a];
                const double *ua = u + (size_t)a * k;
                for (int b = a + 1; b < k; b++) wp[b] -= e * ua[b];
            }
        }
    }
    free(wr);
    free(wp);
    free(perm);
    free(d);
    free(u);
    free(hp);
    return 0;
oom:
    free(wr);
    free(wp);
    free(perm);
    free(d);
    free(u);
    free(hp);
    return -1;
}

void fpga_qmat_pack_row(const fpga_qmat *m, int r, uint8_t *vals, uint8_t *sc)
{
    const int8_t *q = m->q + (size_t)r * m->k;
    const float *s = m->scale + (size_t)r * m->ngroups;
    if (m->bits == 8) memcpy(vals, q, (size_t)m->k);
    else
        for (int i = 0; i < m->k; i += 2)
            vals[i / 2] = (uint8_t)((q[i] & 0xf) | (q[i + 1] & 0xf) << 4);
    if (!m->grouped) {
        memcpy(sc, s, 4);
        return;
    }
    for (int j = 0; j < m->ngroups; j++) {
        uint16_t h = fpga_km_f32_to_f16(s[j]);
        memcpy(sc + 2 * j, &h, 2);
    }
}

double fpga_qmat_sim_error(const fpga_qmat *m, const float *x, const float *mul, int n, int agroup,
                           const float *y_ref)
{
    size_t rb = m->bits == 4 ? (size_t)m->k / 2 : (size_t)m->k;
    size_t sb = m->grouped ? 2 * (size_t)m->ngroups : 4;
    uint32_t wg = m->grouped ? (uint32_t)m->group : 0;
    uint8_t *packed = malloc((size_t)m->rows * (rb + sb));
    int8_t *xq = malloc((size_t)m->k);
    float *xs = malloc(sizeof(float) * ((size_t)m->k / FPGA_DEC_MIN_GROUP + 2));
    double err = -1;
    if (!packed || !xq || !xs) goto out;
    for (int r = 0; r < m->rows; r++)
        fpga_qmat_pack_row(m, r, packed + (size_t)r * (rb + sb), packed + (size_t)r * (rb + sb) + rb);
    err = 0;
    for (int t = 0; t < n; t++) {
        fpga_km_act_quant(x + (size_t)t * m->k, mul, (uint32_t)m->k, (uint32_t)agroup, xq, xs);
        for (int r = 0; r < m->rows; r++) {
            const uint8_t *row = packed + (size_t)r * (rb + sb);
            float y = fpga_km_row_dot(row, row + rb, (uint32_t)m->bits, wg,
                                      (uint32_t)m->k, xq, xs, (uint32_t)agroup);
            double e = (double)y - y_ref[(size_t)t * m->rows + r];
            err += e * e;
        }
    }
out:
    free(packed);
    free(xq);
    free(xs);
    return err;
}
