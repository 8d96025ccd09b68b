/* cpu/calib.c — calibration ids and activations from the reference (see calib.h). */
#include "cpu/calib.h"
#include "cpu/backend.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "model/sample/sample.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cpu_calib_ids(const model *m, int n_seqs, int len, uint64_t seed, int32_t *ids, char *err,
                   size_t errlen)
{
    const int vocab = m->cfg.vocab;
    accel_opts o = {.threads = 1, .decode_sparse = ""}; /* the dense reference, whatever the environment says */
    accel_dev *cpu = cpu_accel_open(0, m, &o, err, errlen);
    if (!cpu) return -1;
    float *lg = malloc(sizeof(float) * vocab);
    model_sampling p = model_sampling_default();
    p.seed = seed;
    p.has_seed = 1;
    int rc = lg ? 0 : -1;
    for (int s = 0; s < n_seqs && !rc; s++) {
        int32_t *row = ids + (size_t)s * len;
        model_sampler *sm = model_sampler_new(&p, vocab, NULL, 0, s, err, errlen);
        accel_seq *seq = NULL;
        if (!sm || accel_seq_new(cpu, len, &seq)) {
            if (sm) snprintf(err, errlen, "calibration: cannot reserve a CPU sequence");
            model_sampler_free(sm);
            rc = -1;
            break;
        }
        row[0] = m->cfg.bos_id >= 0 ? m->cfg.bos_id : 0;
        accel_prefill_req r = {.seq = seq, .ids = row, .n = 1, .logits = lg};
        int st = accel_prefill(cpu, &r);
        for (int t = 1; t < len && !st; t++) {
            int32_t id = model_sampler_sample(sm, lg, NULL);
            if (id < 0) {
                st = ACCEL_ERR_DEVICE;
                break;
            }
            row[t] = id;
            if (t + 1 < len) st = accel_decode(cpu, 1, &seq, &row[t], lg);
        }
        if (st) {
            snprintf(err, errlen, "calibration: CPU sampling failed: %s", accel_strerror(st));
            rc = -1;
        }
        accel_seq_free(cpu, seq);
        model_sampler_free(sm);
    }
    free(lg);
    accel_free(cpu);
    return rc;
}

typedef struct calib_att {
    const model_config *c;
    const float *q, *k, *v;
    float *out, *scores;
    int len;
} calib_att;

/* (token, head) pairs: causal attention inside each sequence of `len` tokens. */
static void att_range(void *vctx, int begin, int end, int thread)
{
    calib_att *a = vctx;
    const model_config *c = a->c;
    int hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    int group = c->n_heads / c->n_kv_heads;
    float *scores = a->scores + (size_t)thread * a->len;
    for (int i = begin; i < end; i++) {
        int t = i / c->n_heads, h = i % c->n_heads;
        int s0 = t / a->len * a->len, pos = t - s0;
        size_t kv = (size_t)s0 * kvd + (size_t)(h / group) * hd;
        cpu_attend(a->out + (size_t)t * qd + (size_t)h * hd, a->q + (size_t)t * qd + (size_t)h * hd,
                   a->k + kv, a->v + kv, pos + 1, kvd, hd, (float)pow(hd, -0.5), scores);
    }
}

static int calib_run(const model *m, const int32_t *ids, int n_seqs, int len, cpu_calib_fn fn,
                     cpu_calib_qk_fn qk_fn, void *ctx)
{
    const model_config *c = &m->cfg;
    const int T = n_seqs * len, H = c->hidden, hd = c->head_dim, half = hd / 2;
    const int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, I = c->intermediate;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_pool *pool = cpu_pool_new(cores > 1 ? (int)cores : 1);
    int threads = pool ? cpu_pool_threads(pool) : 1;
    float *x = malloc(sizeof(float) * (size_t)T * H), *xb = malloc(sizeof(float) * (size_t)T * H);
    float *q = malloc(sizeof(float) * (size_t)T * qd), *att = malloc(sizeof(float) * (size_t)T * qd);
    float *k = malloc(sizeof(float) * (size_t)T * kvd), *v = malloc(sizeof(float) * (size_t)T * kvd);
    float *g = malloc(sizeof(float) * (size_t)T * I), *u = malloc(sizeof(float) * (size_t)T * I);
    float *cs = malloc(sizeof(float) * (size_t)len * half), *sn = malloc(sizeof(float) * (size_t)len * half);
    float *inv = malloc(sizeof(float) * half), *scores = malloc(sizeof(float) * len * threads);
    int rc = -1;
    if (!pool || !x || !xb || !q || !att || !k || !v || !g || !u || !cs || !sn || !inv || !scores)
        goto out;
    model_rope_inv_freq(c, len, inv);
    for (int p = 0; p < len; p++) model_rope_angles(inv, half, p, cs + (size_t)p * half, sn + (size_t)p * half);
    for (int t = 0; t < T; t++) model_row_f32(&m->embed, ids[t], x + (size_t)t * H);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        for (int t = 0; t < T; t++)
            cpu_rmsnorm(xb + (size_t)t * H, x + (size_t)t * H, &L->attn_norm, H, c->rms_eps);
        if (fn && (rc = fn(ctx, l, CPU_CALIB_QKV, xb, T, H))) goto out;
        cpu_matmul(pool, q, xb, T, &L->wq, &L->bq);
        cpu_matmul(pool, k, xb, T, &L->wk, &L->bk);
        cpu_matmul(pool, v, xb, T, &L->wv, &L->bv);
        for (int t = 0; t < T; t++) {
            const float *ct = cs + (size_t)(t % len) * half, *st = sn + (size_t)(t % len) * half;
            cpu_rope(q + (size_t)t * qd, c->n_heads, hd, ct, st);
            cpu_rope(k + (size_t)t * kvd, c->n_kv_heads, hd, ct, st);
        }
        if (qk_fn && (rc = qk_fn(ctx, l, q, k, T))) goto out;
        calib_att a = {c, q, k, v, att, scores, len};
        cpu_pool_for(pool, T * c->n_heads, 64, att_range, &a);
        if (fn && (rc = fn(ctx, l, CPU_CALIB_O, att, T, qd))) goto out;
        float *o = xb;
        cpu_matmul(pool, o, att, T, &L->wo, NULL);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += o[i];
        for (int t = 0; t < T; t++)
            cpu_rmsnorm(xb + (size_t)t * H, x + (size_t)t * H, &L->ffn_norm, H, c->rms_eps);
        if (fn && (rc = fn(ctx, l, CPU_CALIB_GU, xb, T, H))) goto out;
        cpu_matmul(pool, g, xb, T, &L->w_gate, NULL);
        cpu_matmul(pool, u, xb, T, &L->w_up, NULL);
        cpu_swiglu(g, u, T * I);
        if (fn && (rc = fn(ctx, l, CPU_CALIB_D, g, T, I))) goto out;
        cpu_matmul(pool, xb, g, T, &L->w_down, NULL);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += xb[i];
    }
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(xb + (size_t)t * H, x + (size_t)t * H, &m->norm, H, c->rms_eps);
    rc = fn ? fn(ctx, c->n_layers, CPU_CALIB_LM, xb, T, H) : 0;
out:
    cpu_pool_free(pool);
    free(x);
    free(xb);
    free(q);
    free(att);
    free(k);
    free(v);
    free(g);
    free(u);
    free(cs);
    free(sn);
    free(inv);
    free(scores);
    return rc;
}

int cpu_calib_run(const model *m, const int32_t *ids, int n_seqs, int len, cpu_calib_fn fn,
                  void *ctx)
{
    return calib_run(m, ids, n_seqs, len, fn, NULL, ctx);
}

int cpu_calib_run_qk(const model *m, const int32_t *ids, int n_seqs, int len, cpu_calib_qk_fn fn,
                     void *ctx)
{
    return calib_run(m, ids, n_seqs, len, NULL, fn, ctx);
}
