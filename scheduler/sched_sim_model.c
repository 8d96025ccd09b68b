/* scheduler/sched_sim_model.c — model shapes and the pricing formulas of sched_sim_model.h (the
 * hardware profiles are the caller's catalogue: devices/sim_hw.c holds tandem's). */
#include "scheduler/sched_sim_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Model shapes (the models' config.json). */
static const sched_sim_shape shapes[] = {
    /* meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters, MHA */
    {"llama2-7b", 6.738e9, 32, 32, 32, 128, 4096, 32000},
    /* meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters, GQA 32/8 */
    {"llama3-8b", 8.030e9, 32, 32, 8, 128, 8192, 128256},
    /* meta-llama/Llama-3.1-8B: the same weights' shape, 128K context (long prompts) */
    {"llama3.1-8b", 8.030e9, 32, 32, 8, 128, 131072, 128256},
};

#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

const sched_sim_shape *sched_sim_shape_at(int i)
{
    return i >= 0 && i < NSHAPES ? &shapes[i] : NULL;
}

const sched_sim_shape *sched_sim_shape_find(const char *name)
{
    for (int i = 0; i < NSHAPES; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

const sched_sim_hw *sched_sim_hw_find(const sched_sim_catalog *c, const char *name)
{
    for (int i = 0; c && i < c->n; i++)
        if (!strcmp(c->hw[i].name, name)) return &c->hw[i];
    return NULL;
}

/* Bytes of weights a device streams per decode step. A card's 4-bit weights carry 5 % of
 * group scales and zero points (GLITCHES Sec. IV: "about 4~6% of the weights"); 8-bit ones one
 * scale per row (negligible). */
static double weight_bytes(const sched_sim_shape *s, int bits)
{
    double b = s->params * bits / 8.0;
    return bits < 8 ? b * 1.05 : b;
}

/* KV bytes of one position: fp16 K and V on a GPU; int8 plus one fp16 scale per head
 * (proto/kv.h) on a card. */
static uint64_t kv_bytes(const sched_sim_shape *s, int bits)
{
    uint64_t per_head = bits >= 16 ? 2ull * s->head_dim : (uint64_t)s->head_dim + 2;
    return 2ull * s->n_layers * s->n_kv_heads * per_head;
}

double sched_sim_prefill_flops(const sched_sim_shape *s, double n, double pos0)
{
    double attn = 4.0 * s->n_layers * (double)s->n_heads * s->head_dim * n * (pos0 + n / 2);
    return 2.0 * s->params * n + attn;
}

void sched_sim_dev_calibrate_prefill(sched_sim_dev_model *d, const sched_sim_shape *s,
                                     double tokens, double seconds)
{
    double t = seconds - d->fixed_s;
    d->prefill_flops = tokens > 0 && t > 0 ? sched_sim_prefill_flops(s, tokens, 0) / t : 0;
}

void sched_sim_dev_calibrate_decode(sched_sim_dev_model *d, const sched_sim_shape *s,
                                    double ctx, double seconds)
{
    double t = seconds - d->fixed_s;
    double bytes = weight_bytes(s, d->hw->weight_bits) + ctx * (double)kv_bytes(s, d->hw->kv_bits);
    d->decode_bps = t > 0 ? bytes / t : 0;
}

int sched_sim_dev_init(sched_sim_dev_model *d, const sched_sim_hw *hw, const sched_sim_shape *s,
                       int max_running, int index, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    const sched_sim_shape *cal = sched_sim_shape_find(hw->cal_shape);
    if (!cal) {
        snprintf(err, errlen, "%s: unknown calibration shape %s", hw->name, hw->cal_shape);
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s:%d", hw->name, index);
    d->hw = hw;
    d->kind = hw->kind;
    d->caps = hw->caps;
    d->max_batch = hw->max_batch;
    d->max_running = max_running > 0 ? max_running : hw->kind == ACCEL_KIND_FPGA ? hw->max_batch : 256;
    d->fixed_s = hw->fixed_s;
    d->seq_s = hw->seq_s;
    d->split_s = hw->split_s > 0 ? hw->split_s : hw->fixed_s;
    d->params = s->params;
    d->shape = *s;
    d->weight_bytes = weight_bytes(s, hw->weight_bits);
    d->kv_bytes_per_token = kv_bytes(s, hw->kv_bits);
    d->n_layers = s->n_layers;
    d->attn_dim = s->n_heads * s->head_dim;
    d->link_bps = hw->link_bps;
    d->link_s = hw->link_s;
    d->power_w = hw->power_w;
    d->decode_ops = hw->decode_ops;
    /* 10 % of the memory for activations and workspace. */
    double kv = hw->mem_bytes * 0.9 - d->weight_bytes;
    if (kv <= 0) {
        snprintf(err, errlen, "%s: %s's %.1f GB of weights do not fit %.1f GB", d->name, s->name,
                 d->weight_bytes / 1e9, hw->mem_bytes / 1e9);
        return -1;
    }
    d->mem_kv = (uint64_t)kv;
    sched_sim_dev_calibrate_prefill(d, cal, hw->cal_prefill_tokens, hw->cal_prefill_s);
    if (!d->prefill_flops) d->caps &= ~(unsigned)ACCEL_CAP_PREFILL;
    sched_sim_dev_calibrate_decode(d, cal, hw->cal_decode_ctx, hw->cal_decode_s);
    if (!d->decode_bps) {
        snprintf(err, errlen, "%s: unusable decode calibration", d->name);
        return -1;
    }
    return 0;
}

/* A prefill call's compute time (FLOPs) and memory time (one pass over the weights and the
 * cached KV at the decode calibration's bandwidth). */
static double prefill_compute_s(const sched_sim_dev_model *d, int n, int pos0)
{
    double attn = 4.0 * d->n_layers * (double)d->attn_dim * n * (pos0 + n / 2.0);
    double flops = 2.0 * d->params * n + attn;
    return d->prefill_flops > 0 ? flops / d->prefill_flops : 1e9;
}

static double prefill_memory_s(const sched_sim_dev_model *d, int pos0)
{
    double bytes = d->weight_bytes + (double)pos0 * (double)d->kv_bytes_per_token;
    return d->decode_bps > 0 ? bytes / d->decode_bps : 0;
}

double sched_sim_prefill_s(const sched_sim_dev_model *d, int n, int pos0)
{
    if (n <= 0) return 0;
    double c = prefill_compute_s(d, n, pos0), m = prefill_memory_s(d, pos0);
    return d->fixed_s + (c > m ? c : m);
}

double sched_sim_sparse_density(const sched_sim_sparse *sp, int n)
{
    if (!sp || n <= 0) return 1;
    if (sp->chunk <= 0) {
        double d = n >= sp->ref_n ? sp->density_ref : sp->density_ref * sp->ref_n / n;
        return d < 1 ? d : 1;
    }
    /* Tri-shape: sparse chunks, then a dense tail */
    int tail = sp->tail < n ? sp->tail : n, ns = n - tail;
    double keys = 0;
    for (int pos = 0; pos < ns; pos += sp->chunk) {
        double len = ns - pos < sp->chunk ? ns - pos : sp->chunk;
        double before = pos < sp->start ? pos : sp->start;
        double recent = pos - sp->start > 0 ? pos - sp->start : 0;
        if (recent > sp->recent) recent = sp->recent;
        keys += len * (before + recent) + len * (len + 1) / 2;
    }
    for (int p = ns; p < n; p++) keys += p + 1.0;
    return keys / ((double)n * (n + 1) / 2);
}

double sched_sim_sparse_factor(const sched_sim_sparse *sp, const sched_sim_shape *s, int n)
{
    if (!sp || !s || n <= 0 || !(sp->ref_n > 0)) return 1;
    double r = sp->attn_per_density * sched_sim_sparse_density(sp, n) + sp->index_share * sp->ref_n / n;
    if (!(r < 1)) return 1;
    double attn = 4.0 * s->n_layers * (double)s->n_heads * s->head_dim * n * (n / 2.0);
    double lin = 2.0 * s->params * n;
    return (lin + r * attn) / (lin + attn);
}

int sched_sim_prefill_sparse(const sched_sim_dev_model *d, int n_prompt)
{
    return d->sparse && sched_sim_sparse_factor(d->sparse, &d->shape, n_prompt) < 1;
}

double sched_sim_prefill_chunk_s(const sched_sim_dev_model *d, int n, int pos0, int n_prompt)
{
    if (!d->sparse || n <= 0) return sched_sim_prefill_s(d, n, pos0);
    const double f = sched_sim_sparse_factor(d->sparse, &d->shape, n_prompt);
    double c = prefill_compute_s(d, n, pos0) * f;
    double m = prefill_memory_s(d, pos0);
    double index = f < 1 && pos0 > 0 ? d->sparse->call_key_s * pos0 : 0;
    return d->fixed_s + (c > m ? c : m) + index;
}

double sched_sim_prefill_split_s(const sched_sim_dev_model *d, int n, int pos0, int n_prompt, int layers)
{
    const double w = sched_sim_prefill_chunk_s(d, n, pos0, n_prompt);
    if (layers <= 0 || layers >= d->n_layers || n <= 0) return w;
    double s = sched_sim_prefill_sparse(d, n_prompt) && d->sparse->split_s > 0 ? d->sparse->split_s : d->split_s;
    if (!(s >= 0)) s = 0;
    if (s > w) s = w;
    return s + (w - s) * layers / d->n_layers;
}

/* The measured curve's step time at `batch` (positions curve_ctx each). */
static double curve_step_s(const sched_sim_hw *h, int batch)
{
    const int n = h->n_curve;
    double b = batch;
    if (n == 1 || b <= h->curve_b[0]) return h->curve_b[0] / h->curve_tps[0];
    int i = 1;
    while (i < n - 1 && b > h->curve_b[i]) i++;
    double t0 = h->curve_b[i - 1] / h->curve_tps[i - 1], t1 = h->curve_b[i] / h->curve_tps[i];
    return t0 + (t1 - t0) * (b - h->curve_b[i - 1]) / (h->curve_b[i] - h->curve_b[i - 1]);
}

double sched_sim_kv_bps(const sched_sim_dev_model *d)
{
    return d->hw && d->hw->n_curve > 0 && d->hw->curve_kv_bps > 0 ? d->hw->curve_kv_bps : d->decode_bps;
}

double sched_sim_decode_s(const sched_sim_dev_model *d, int batch, long long sum_ctx)
{
    if (batch <= 0) return 0;
    if (d->hw && d->hw->n_curve > 0) {
        /* the measured curve, plus (or less) the KV bytes beyond batch x curve_ctx positions */
        double t = curve_step_s(d->hw, batch);
        double extra = ((double)sum_ctx - batch * d->hw->curve_ctx) * (double)d->kv_bytes_per_token;
        double kv = extra / sched_sim_kv_bps(d);
        return t + kv > t / 2 ? t + kv : t / 2;
    }
    double mem = (d->weight_bytes + (double)sum_ctx * (double)d->kv_bytes_per_token) / d->decode_bps;
    /* a large batch turns compute-bound: 2 ops per weight per sequence at the device's rate */
    double rate = d->decode_ops > 0 ? d->decode_ops : d->prefill_flops;
    double comp = rate > 0 ? 2.0 * d->params * batch / rate : 0;
    return d->fixed_s + (mem > comp ? mem : comp) + (batch - 1) * d->seq_s;
}

void sched_sim_dev_curve(const sched_sim_dev_model *d, accel_decode_curve *out)
{
    memset(out, 0, sizeof *out);
    int mb = d->max_batch > 0 ? d->max_batch : 1;
    for (int b = 1; out->n < ACCEL_CURVE_MAX; b *= 2) {
        int x = b < mb ? b : mb;
        out->batch[out->n] = x;
        out->step_s[out->n++] = sched_sim_decode_s(d, x, (long long)x * SCHED_SIM_CURVE_CTX);
        if (x == mb) break;
    }
    out->ctx = SCHED_SIM_CURVE_CTX;
    double bps = sched_sim_kv_bps(d);
    out->s_per_pos = bps > 0 ? (double)d->kv_bytes_per_token / bps : 0;
}

double sched_sim_hop_s(const sched_sim_dev_model *d, double bytes)
{
    return d->link_bps > 0 ? d->link_s + bytes / d->link_bps : 0;
}

double sched_sim_net_wire_s(const sched_sim_model *m, double bytes)
{
    return m->net_bps > 0 ? bytes / m->net_bps : 0;
}

double sched_sim_remote_trip_s(const sched_sim_model *m, int b)
{
    return 2 * m->net_s + sched_sim_net_wire_s(m, b * (16.0 + m->row_back_bytes));
}

double sched_sim_ship_s(const sched_sim_dev_model *from, const sched_sim_dev_model *to,
                        double bytes)
{
    return sched_sim_hop_s(from, bytes) + sched_sim_hop_s(to, bytes);
}

int sched_sim_model_build(sched_sim_model *m, const sched_sim_catalog *c, const char *node,
                          const char *shape, int gpu_max_running, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    const sched_sim_shape *s = sched_sim_shape_find(shape);
    if (!s) {
        snprintf(err, errlen, "unknown model shape '%s' (llama2-7b, llama3-8b, llama3.1-8b)", shape);
        return -1;
    }
    m->shape = *s;
    char buf[256];
    if (strlen(node) >= sizeof buf) {
        snprintf(err, errlen, "node spec too long");
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", node);
    int per_kind[8] = {0};
    m->net_bps = SCHED_SIM_NET_BPS;
    m->net_s = SCHED_SIM_NET_S;
    m->row_back_bytes = 4.0 * s->vocab;
    char *rest = buf;
    for (int node_i = 0; rest; node_i++) {
        char *nd = rest, *slash = strchr(rest, '/');
        rest = slash ? slash + 1 : NULL;
        if (slash) *slash = 0;
        if (node_i == SCHED_SIM_MAX_NODES) {
            snprintf(err, errlen, "a simulation holds at most %d nodes", SCHED_SIM_MAX_NODES);
            return -1;
        }
        m->n_nodes = node_i + 1;
        int first = m->n_devs;
        char *save = NULL;
        for (char *t = strtok_r(nd, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
            long count = 1;
            char *x = strchr(t, 'x');
            if (x && x > t && strspn(t, "0123456789") == (size_t)(x - t)) {
                count = strtol(t, NULL, 10);
                t = x + 1;
            }
            const sched_sim_hw *hw = sched_sim_hw_find(c, t);
            if (!hw) {
                snprintf(err, errlen, "unknown device profile '%s' (see tandem simulate --list)", t);
                return -1;
            }
            if (count < 1 || m->n_devs + count > SCHED_BOOK_MAX_DEVICES) {
                snprintf(err, errlen, "a node holds 1 to %d devices", SCHED_BOOK_MAX_DEVICES);
                return -1;
            }
            for (long i = 0; i < count; i++) {
                int mr = hw->kind == ACCEL_KIND_FPGA ? 0 : gpu_max_running;
                sched_sim_dev_model *d = &m->dev[m->n_devs];
                if (sched_sim_dev_init(d, hw, s, mr, per_kind[hw->kind]++, err, errlen)) return -1;
                d->node = node_i;
                if (node_i > 0) {
                    /* a peer's device: decodes with imported KV, after the local cards
                     * (peer/remote.c reports exactly these capabilities) */
                    d->caps = (d->caps & (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT)) | ACCEL_CAP_REMOTE;
                    char nm[sizeof d->name];
                    snprintf(nm, sizeof nm, "n%d/%s", node_i, d->name);
                    memcpy(d->name, nm, sizeof nm);
                }
                m->n_devs++;
            }
        }
        if (m->n_devs == first) {
            snprintf(err, errlen, "node %d of the spec is empty", node_i);
            return -1;
        }
    }
    if (!m->n_devs) {
        snprintf(err, errlen, "empty node spec");
        return -1;
    }
    return 0;
}
