/* precision_emulation — the CUDA backend's precision plan emulated in float64 on the CPU, against
 * the float64 forward, over the golden prompts + greedy continuations: where the tolerances of
 * tests/gpu/ come from (tests/gpu/README.md has its output). Not part of the build:
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -I. gpu/bench/precision_emulation.c build/libtandem.a \
 *      $(pkg-config --libs jansson libcrypto icu-uc libpcre2-8) -lm -pthread -o /tmp/precemu
 *   /tmp/precemu models/stories260K tests/data/golden/stories260K
 *
 * Each variant rounds chosen intermediates to bf16 (or fp16: H16F, the plugin's fp16 build)
 * exactly where the GPU does:
 *   W   weights (bf16 on the device whatever the checkpoint's dtype)
 *   A   GEMM inputs: normalized activations, attention output, SwiGLU output
 *   QKV Q and the K/V cache (bf16), P the attention probabilities before P·V
 *   GU  the gate/up GEMM outputs
 *   KV8 the prompt's K/V through the int8 export rule (proto/kv.h), as `tandem eval --mode kv`
 * and reports, like tandem eval, top-1 agreement with the float64 argmax and mean KL(f64 || variant)
 * over every position (prefill view) or the continuation only (kv view), plus the largest logit
 * difference over the prompt positions. */
#include "model/ckpt/golden.h"
#include "model/ckpt/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RW = 1, RA = 2, RQKV = 4, RP = 8, RGU = 16, KV8 = 32, F16KV = 64, H16F = 128 };
static int F, NP; /* variant flags; prompt length (KV8 applies below it) */

static double hf(double x) { return model_f16_to_f32(model_f32_to_f16((float)x)); }
/* the plugin's 16-bit type: bf16, or fp16 with H16F (libtandem_cuda_f16.so, gpu/h16.cuh) */
static double bf(double x)
{
    return F & H16F ? hf(x) : model_bf16_to_f32(model_f32_to_bf16((float)x));
}
static double W(const model_tensor *t, int64_t r, int64_t c)
{
    double v = model_tensor_get(t, r, c);
    return F & RW ? bf(v) : v;
}
static double ra(double v) { return F & RA ? bf(v) : v; }
static double rkv(double v) { return F & F16KV ? hf(v) : F & RQKV ? bf(v) : v; }

static void rmsnorm(double *o, const double *x, const model_tensor *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = ra(x[i] * r * model_tensor_get(w, i, 0));
}

static void linear(double *o, const double *x, const model_tensor *w)
{
    for (int64_t r = 0; r < w->shape[0]; r++) {
        double s = 0;
        for (int64_t c = 0; c < w->shape[1]; c++) s += W(w, r, c) * x[c];
        o[r] = s;
    }
}

/* the export rule of proto/kv.h, applied to one head's vector */
static void q8(double *v, int hd)
{
    double a = 0;
    for (int i = 0; i < hd; i++) a = fabs(v[i]) > a ? fabs(v[i]) : a;
    float s = model_f16_to_f32(model_f32_to_f16((float)a / 127.f));
    for (int i = 0; i < hd; i++) v[i] = s == 0 ? 0 : fmax(-127, fmin(127, rint(v[i] / s))) * s;
}

static double *forward(const model *m, const int32_t *ids, int n)
{
    const model_config *c = &m->cfg;
    int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, I = c->intermediate;
    double *x = calloc((size_t)n * H, 8), *h = malloc(8 * H * 2), *q = malloc(8 * (size_t)n * nh * hd);
    double *k = malloc(8 * (size_t)n * nkv * hd), *v = malloc(8 * (size_t)n * nkv * hd);
    double *att = malloc(8 * nh * hd), *g = malloc(8 * I), *u = malloc(8 * I), *sc = malloc(8 * n);
    double *lg = malloc(8 * (size_t)n * c->vocab);
    float inv[512];
    model_rope_inv_freq(c, n, inv);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = W(&m->embed, ids[t], i);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        for (int t = 0; t < n; t++) {
            rmsnorm(h, x + (size_t)t * H, &L->attn_norm, H, c->rms_eps);
            linear(q + (size_t)t * nh * hd, h, &L->wq);
            linear(k + (size_t)t * nkv * hd, h, &L->wk);
            linear(v + (size_t)t * nkv * hd, h, &L->wv);
            for (int j = 0; j < nh + nkv; j++) {
                double *r = j < nh ? q + ((size_t)t * nh + j) * hd : k + ((size_t)t * nkv + j - nh) * hd;
                for (int i = 0; i < hd / 2; i++) {
                    float a = (float)t * inv[i];
                    double cs = cosf(a), sn = sinf(a), x1 = r[i], x2 = r[i + hd / 2];
                    r[i] = x1 * cs - x2 * sn;
                    r[i + hd / 2] = x2 * cs + x1 * sn;
                }
            }
            if (F & RQKV)
                for (int i = 0; i < nh * hd; i++) q[(size_t)t * nh * hd + i] = bf(q[(size_t)t * nh * hd + i]);
            if ((F & KV8) && t < NP)
                for (int j = 0; j < nkv; j++) {
                    q8(k + ((size_t)t * nkv + j) * hd, hd);
                    q8(v + ((size_t)t * nkv + j) * hd, hd);
                }
            for (int i = 0; i < nkv * hd; i++) {
                k[(size_t)t * nkv * hd + i] = rkv(k[(size_t)t * nkv * hd + i]);
                v[(size_t)t * nkv * hd + i] = rkv(v[(size_t)t * nkv * hd + i]);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int j = 0; j < nh; j++) {
                int kh = j / (nh / nkv);
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += q[((size_t)t * nh + j) * hd + i] * k[((size_t)s * nkv + kh) * hd + i];
                    sc[s] = d / sqrt(hd);
                    mx = sc[s] > mx ? sc[s] : mx;
                }
                for (int s = 0; s <= t; s++) {
                    sc[s] = exp(sc[s] - mx);
                    sum += sc[s];
                    if (F & RP) sc[s] = bf(sc[s]);
                }
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++) a += sc[s] * v[((size_t)s * nkv + kh) * hd + i];
                    att[j * hd + i] = ra(a / sum);
                }
            }
            linear(h, att, &L->wo);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += h[i];
        }
        for (int t = 0; t < n; t++) {
            rmsnorm(h, x + (size_t)t * H, &L->ffn_norm, H, c->rms_eps);
            linear(g, h, &L->w_gate);
            linear(u, h, &L->w_up);
            for (int i = 0; i < I; i++) {
                if (F & RGU) g[i] = bf(g[i]), u[i] = bf(u[i]);
                g[i] = ra(g[i] / (1 + exp(-g[i])) * u[i]);
            }
            linear(h + H, g, &L->w_down);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += h[H + i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm(h, x + (size_t)t * H, &m->norm, H, c->rms_eps);
        linear(lg + (size_t)t * c->vocab, h, &m->lm_head);
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(g), free(u), free(sc);
    return lg;
}

static void run(const model *m, char **paths, int nc, const char *name, int flags, int kv_view)
{
    int V = m->cfg.vocab;
    double kl = 0, agree = 0, mx = 0;
    long np = 0;
    char err[512];
    for (int ci = 0; ci < nc; ci++) {
        model_golden *g = model_golden_load(paths[ci], V, err, sizeof err);
        if (!g) continue;
        int n = g->n_ids + g->n_greedy - 1;
        int32_t *ids = malloc(sizeof(int32_t) * (n + 1));
        memcpy(ids, g->ids, sizeof(int32_t) * g->n_ids);
        memcpy(ids + g->n_ids, g->greedy_ids, sizeof(int32_t) * (g->n_greedy - 1));
        F = 0, NP = 0;
        double *a = forward(m, ids, n);
        F = flags, NP = g->n_ids;
        double *b = forward(m, ids, n);
        for (int p = kv_view ? g->n_ids : 0; p < n; p++) {
            double *x = a + (size_t)p * V, *y = b + (size_t)p * V, ma = -1e300, mb = -1e300, sa = 0, sb = 0, k = 0;
            int ia = 0, ib = 0;
            for (int i = 0; i < V; i++) {
                if (x[i] > ma) ma = x[i], ia = i;
                if (y[i] > mb) mb = y[i], ib = i;
                if (p < g->n_ids && fabs(x[i] - y[i]) > mx) mx = fabs(x[i] - y[i]);
            }
            for (int i = 0; i < V; i++) sa += exp(x[i] - ma), sb += exp(y[i] - mb);
            for (int i = 0; i < V; i++) {
                double pa = x[i] - ma - log(sa), pb = y[i] - mb - log(sb);
                k += exp(pa) * (pa - pb);
            }
            kl += k;
            agree += ia == ib;
            np++;
        }
        free(a), free(b), free(ids);
        model_golden_free(g);
    }
    printf("%-34s %-7s positions %4ld  top1 %.4f  mean KL %.3g  max |logit diff| (prompt) %.4g\n",
           name, kv_view ? "kv" : "prefill", np, agree / np, kl / np, mx);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: precision_emulation MODEL_DIR GOLDEN_DIR\n");
        return 2;
    }
    char err[512];
    model *m = model_load(argv[1], err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char **paths;
    int nc = model_golden_list(argv[2], &paths);
    const int gpu = RW | RA | RQKV | RP | RGU;
    run(m, paths, nc, "bf16 weights only", RW, 0);
    run(m, paths, nc, "the GPU's bf16 plan", gpu, 0);
    run(m, paths, nc, "int8 KV of the prompt only", KV8, 1);
    run(m, paths, nc, "the GPU's bf16 plan + int8 prompt KV", gpu | KV8, 1);
    run(m, paths, nc, "same with an fp16 KV cache", gpu | KV8 | F16KV, 1);
    run(m, paths, nc, "fp16 weights only", RW | H16F, 0);
    run(m, paths, nc, "the GPU's fp16 plan", gpu | H16F, 0);
    run(m, paths, nc, "the GPU's fp16 plan + int8 prompt KV", gpu | H16F | KV8, 1);
    return 0;
}
