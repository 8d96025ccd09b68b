#include "tests/ref_forward.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double W(const model_tensor *t, int64_t r, int64_t c)
{
    return model_tensor_get(t, r, c);
}

static void inv_freq(const model_config *c, int seq_len, double *inv)
{
    int d = c->head_dim;
    double base = c->rope_theta;
    if (c->rope.type == MODEL_ROPE_DYNAMIC) {
        int mp = c->rope.original_max_pos ? c->rope.original_max_pos : c->max_pos;
        double sl = seq_len > mp ? seq_len : mp, f = c->rope.factor;
        base *= pow(f * sl / mp - (f - 1), (double)d / (d - 2));
    }
    for (int i = 0; i < d / 2; i++) {
        inv[i] = 1.0 / pow(base, 2.0 * i / d);
        if (c->rope.type == MODEL_ROPE_LINEAR) inv[i] /= c->rope.factor;
        if (c->rope.type == MODEL_ROPE_LLAMA3) {
            double old = c->rope.original_max_pos, lo = c->rope.low_freq_factor,
                   hi = c->rope.high_freq_factor, wl = 2 * M_PI / inv[i];
            if (wl > old / lo)
                inv[i] /= c->rope.factor;
            else if (wl >= old / hi) {
                double s = (old / wl - lo) / (hi - lo);
                inv[i] = (1 - s) * inv[i] / c->rope.factor + s * inv[i];
            }
        }
    }
}

static void rmsnorm(double *o, const double *x, const model_tensor *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = x[i] * r * W(w, i, 0);
}

static void linear(double *o, const double *x, const model_tensor *w, const model_tensor *b)
{
    for (int64_t r = 0; r < w->shape[0]; r++) {
        double s = b && b->data ? W(b, r, 0) : 0;
        for (int64_t c = 0; c < w->shape[1]; c++) s += W(w, r, c) * x[c];
        o[r] = s;
    }
}

static void rope(double *v, int hd, int pos, const double *inv)
{
    for (int i = 0; i < hd / 2; i++) {
        double a = pos * inv[i], x1 = v[i], x2 = v[i + hd / 2];
        v[i] = x1 * cos(a) - x2 * sin(a);
        v[i + hd / 2] = x2 * cos(a) + x1 * sin(a);
    }
}

double *ref_forward(const model *m, const int32_t *ids, int n)
{
    const model_config *c = &m->cfg;
    int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, I = c->intermediate;
    double *x = calloc((size_t)n * H, sizeof(double)), *h = malloc(sizeof(double) * H * 4);
    double *q = malloc(sizeof(double) * n * nh * hd), *k = malloc(sizeof(double) * n * nkv * hd);
    double *v = malloc(sizeof(double) * n * nkv * hd), *att = malloc(sizeof(double) * nh * hd);
    double *g = malloc(sizeof(double) * I), *u = malloc(sizeof(double) * I);
    double *sc = malloc(sizeof(double) * n), *inv = malloc(sizeof(double) * hd);
    double *logits = malloc(sizeof(double) * (size_t)n * c->vocab);
    inv_freq(c, n, inv);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = W(&m->embed, ids[t], i);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        for (int t = 0; t < n; t++) {
            rmsnorm(h, x + (size_t)t * H, &L->attn_norm, H, c->rms_eps);
            linear(q + (size_t)t * nh * hd, h, &L->wq, &L->bq);
            linear(k + (size_t)t * nkv * hd, h, &L->wk, &L->bk);
            linear(v + (size_t)t * nkv * hd, h, &L->wv, &L->bv);
            for (int j = 0; j < nh; j++) rope(q + ((size_t)t * nh + j) * hd, hd, t, inv);
            for (int j = 0; j < nkv; j++) rope(k + ((size_t)t * nkv + j) * hd, hd, t, inv);
        }
        for (int t = 0; t < n; t++) {
            for (int j = 0; j < nh; j++) {
                int kh = j / (nh / nkv), first = 0;
                if (c->sliding_window && t + 1 > c->sliding_window) first = t + 1 - c->sliding_window;
                double mx = -INFINITY, sum = 0;
                for (int s = first; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += q[((size_t)t * nh + j) * hd + i] * k[((size_t)s * nkv + kh) * hd + i];
                    sc[s] = d / sqrt(hd);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int s = first; s <= t; s++) sum += (sc[s] = exp(sc[s] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int s = first; s <= t; s++) a += sc[s] / sum * v[((size_t)s * nkv + kh) * hd + i];
                    att[j * hd + i] = a;
                }
            }
            linear(h, att, &L->wo, NULL);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += h[i];
        }
        for (int t = 0; t < n; t++) {
            rmsnorm(h, x + (size_t)t * H, &L->ffn_norm, H, c->rms_eps);
            linear(g, h, &L->w_gate, NULL);
            linear(u, h, &L->w_up, NULL);
            for (int i = 0; i < I; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            linear(h + H, g, &L->w_down, NULL);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += h[H + i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm(h, x + (size_t)t * H, &m->norm, H, c->rms_eps);
        linear(logits + (size_t)t * c->vocab, h, &m->lm_head, NULL);
    }
    free(x); free(h); free(q); free(k); free(v); free(att); free(g); free(u); free(sc); free(inv);
    return logits;
}
