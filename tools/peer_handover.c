/* tools/peer_handover.c — what a remote hand-over adds, run (BENCHMARKS.md reports it).
 *
 *   build/peer_handover --model DIR --peer HOST:PORT --key KEY [--device fpga-emu:0]
 *                       [--tokens 4096,32768] [--reps 3] [--transport auto|stream|address]
 *                       [--poll-us N]
 *
 * After a split prefill the scheduler hands a sequence over to its decode device: one
 * accel_kv_import per layer (the KV in the wire format, int8 with fp16 scales per token and
 * head), then decode steps. This tool does exactly those calls for a prompt of T tokens, twice:
 * on a device of this process (`--device`, opened here: the local hand-over) and on device 0 of
 * the daemon at --peer (the same kind of device, lent over UCX through the remote backend: the
 * remote hand-over), and prints per T the median over --reps of
 *   import   all layers' KV imported (for the remote device: framed, sent, CRC-checked and
 *            imported on the other node, each layer answered)
 *   step     the first decode step after it (logits back: vocab float32)
 * and the difference, which is what a remote decode device adds to the time between the
 * prefill's end and the first remotely decoded token. The KV is synthetic (random int8, scales
 * of a realistic size): the import and the step do not depend on its values, and a CPU prefill
 * of 32K tokens of a model with a real KV shape takes hours on a small machine. The prefill
 * itself is not here; neither is its overlap with the shipping (layer i ships while i+1 runs). */
#include "devices/devices.h"
#include "model/ckpt/model.h"
#include "peer/peer.h"
#include "scheduler/accel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One hand-over of T tokens onto d: the import time and the first step's time. */
static int handover(accel_dev *d, const model *m, proto_kv_layer *c, float *logits, double *t_import,
                    double *t_step)
{
    accel_seq *s;
    int T = c->n_tokens;
    int st = accel_seq_new(d, T + 2, &s);
    if (st) return st;
    double t0 = now();
    for (int l = 0; l < m->cfg.n_layers && !st; l++) {
        c->layer = l;
        st = accel_kv_import(d, s, c);
    }
    double t1 = now();
    int32_t id = 1;
    if (!st) st = accel_decode(d, 1, &s, &id, logits);
    double t2 = now();
    accel_seq_free(d, s);
    *t_import = t1 - t0;
    *t_step = t2 - t1;
    return st;
}

/* Synthetic KV for T tokens: one layer's chunk, its layer number set per import. */
static int make_kv(const model_config *mc, int T, proto_kv_layer *c, uint8_t **kv, uint16_t **sc, double *bytes)
{
    size_t nv = proto_kv_value_bytes(PROTO_KV_INT8, T, mc->n_kv_heads, mc->head_dim);
    size_t ns = proto_kv_scale_count(PROTO_KV_INT8, T, mc->n_kv_heads, mc->head_dim);
    *kv = malloc(2 * nv);
    *sc = malloc(2 * ns * sizeof **sc);
    if (!*kv || !*sc) return -1;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < 2 * nv; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: values in -127..127 */
        (*kv)[i] = (uint8_t)(int8_t)((int)(x % 255) - 127);
    }
    for (size_t i = 0; i < 2 * ns; i++) (*sc)[i] = 0x2000; /* fp16 2^-7: |x| <= 1, as a normed K/V */
    *c = (proto_kv_layer){0, 0, T, mc->n_kv_heads, mc->head_dim, PROTO_KV_INT8, *kv, *kv + nv, *sc, *sc + ns};
    *bytes = (double)mc->n_layers * (2.0 * nv + 2.0 * ns * 2);
    return 0;
}

#define MAX_T 8
#define MAX_REPS 50

/* reps hand-overs of each T onto d: the medians. */
static int measure(accel_dev *d, const model *m, const long *Ts, int nT, int reps, double *imp, double *step)
{
    float *logits = malloc(sizeof(float) * (size_t)m->cfg.vocab);
    for (int t = 0; t < nT; t++) {
        proto_kv_layer c;
        uint8_t *kv;
        uint16_t *sc;
        double bytes, ti[MAX_REPS], ts[MAX_REPS];
        if (make_kv(&m->cfg, (int)Ts[t], &c, &kv, &sc, &bytes)) return ACCEL_ERR_NOMEM;
        for (int r = 0; r < reps; r++) {
            int st = handover(d, m, &c, logits, &ti[r], &ts[r]);
            if (st) {
                fprintf(stderr, "peer_handover: %ld tokens: %s\n", Ts[t], accel_strerror(st));
                return st;
            }
        }
        free(kv);
        free(sc);
        qsort(ti, (size_t)reps, sizeof(double), cmp_d);
        qsort(ts, (size_t)reps, sizeof(double), cmp_d);
        imp[t] = ti[reps / 2];
        step[t] = ts[reps / 2];
    }
    free(logits);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *peer = NULL, *key = NULL, *dev_name = "fpga-emu:0", *tokens = "4096,32768";
    const char *transport = "auto";
    int reps = 3, poll_us = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--peer")) peer = v;
        else if (!strcmp(a, "--key")) key = v;
        else if (!strcmp(a, "--device")) dev_name = v;
        else if (!strcmp(a, "--tokens")) tokens = v;
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--transport")) transport = v;
        else if (!strcmp(a, "--poll-us")) poll_us = atoi(v);
        else dir = NULL, i = argc;
    }
    if (!dir || !peer || !key || reps < 1 || reps > MAX_REPS || peer_transport_parse(transport) < 0 ||
        poll_us < 0 || poll_us > 100000) {
        fprintf(stderr, "usage: peer_handover --model DIR --peer HOST:PORT --key KEY [--device D] "
                        "[--tokens N,...] [--reps N] [--transport auto|stream|address] [--poll-us 0..100000]\n");
        return 2;
    }
    char err[512];
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "peer_handover: %s\n", err);
        return 1;
    }
    const model_config *mc = &m->cfg;
    long Ts[MAX_T];
    int nT = 0;
    for (const char *p = tokens; *p && nT < MAX_T;) {
        char *end;
        long T = strtol(p, &end, 10);
        if (end == p || T < 1 || T > model_context_limit(mc) - 2) {
            fprintf(stderr, "peer_handover: tokens: 1 .. context - 2 each\n");
            return 2;
        }
        Ts[nT++] = T;
        p = *end == ',' ? end + 1 : end;
    }
    /* the local device first, then freed: at 32K the CPU's KV is 8 GiB, one copy at a time */
    accel_opts o = {.threads = 2};
    accel_dev *local = devices_open(dev_name, m, &o, err, sizeof err);
    if (!local || accel_warmup(local)) {
        fprintf(stderr, "peer_handover: %s: %s\n", dev_name, local ? "warm-up failed" : err);
        return 1;
    }
    accel_info li, ri;
    accel_get_info(local, &li);
    double l_imp[MAX_T], l_step[MAX_T], r_imp[MAX_T], r_step[MAX_T];
    if (measure(local, m, Ts, nT, reps, l_imp, l_step)) return 1;
    accel_free(local);
    peer_node *node;
    peer_set_poll_us(poll_us); /* this side's waits (config peer_poll_us) */
    if (peer_node_connect(peer, "bench", key, m, 30, &node, err, sizeof err)) {
        fprintf(stderr, "peer_handover: %s\n", err);
        return 1;
    }
    peer_node_set_transport(node, peer_transport_parse(transport));
    accel_dev *remote = devices_open_remote(node, 0, m, &o, err, sizeof err);
    if (!remote || accel_warmup(remote)) {
        fprintf(stderr, "peer_handover: remote device: %s\n", remote ? "warm-up failed" : err);
        return 1;
    }
    accel_get_info(remote, &ri);
    if (measure(remote, m, Ts, nT, reps, r_imp, r_step)) return 1;
    printf("# peer_handover: %d layers, %d KV heads x %d, vocab %d; local %s, remote %s [%s]\n", mc->n_layers,
           mc->n_kv_heads, mc->head_dim, mc->vocab, li.name, ri.name, ri.desc);
    for (int t = 0; t < nT; t++) {
        double bytes = (double)mc->n_layers *
                       (2.0 * proto_kv_value_bytes(PROTO_KV_INT8, (int)Ts[t], mc->n_kv_heads, mc->head_dim) +
                        4.0 * proto_kv_scale_count(PROTO_KV_INT8, (int)Ts[t], mc->n_kv_heads, mc->head_dim));
        printf("tokens %ld: KV %.1f MiB | local import %.1f ms, step %.1f ms | remote import %.1f ms "
               "(%.0f MiB/s), step %.1f ms | remote adds %.1f ms (median of %d)\n",
               Ts[t], bytes / (1 << 20), l_imp[t] * 1e3, l_step[t] * 1e3, r_imp[t] * 1e3,
               bytes / (1 << 20) / r_imp[t], r_step[t] * 1e3,
               (r_imp[t] + r_step[t] - l_imp[t] - l_step[t]) * 1e3, reps);
    }
    accel_free(remote);
    peer_node_free(node);
    model_free(m);
    return 0;
}
