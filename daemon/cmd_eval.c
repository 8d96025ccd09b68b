/* tandem eval — teacher-forced quality of a device against the transformers references.
 *
 * Each golden case is fed as ids + greedy_ids (the reference's own continuation); at every
 * position p we compare the device's next-token distribution with
 *   - the reference's argmax (golden top_ids[p][0] inside the prompt, greedy_ids after it):
 *     top1_agreement;
 *   - this build's CPU backend on the same positions: KL(cpu || device) in nats, mean over
 *     positions (the CPU is exact float32, so this isolates the device's own numerics).
 * Modes:
 *   prefill   one prefill of the whole sequence on the device (all logits);
 *   decode    every position through accel_decode, from an empty sequence (the device's decode
 *             path alone: for a decode-only card this is its full quality);
 *   kv        the prompt is prefilled on --kv-from (default cpu) with its KV exported as
 *             --kv int8|int4, imported into the device, and the continuation decoded there:
 *             positions are the continuation only (the path a request takes in production).
 * --free-run also decodes greedily from the prompt and reports, per case, the first step where
 * the ids leave the reference's greedy ids (-1: never).
 * Output: one JSON line {"positions","top1_agreement","mean_kl","max_kl",...}. */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include "devices/devices.h"
#include "model/ckpt/golden.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_PREFILL, MODE_DECODE, MODE_KV };

typedef struct stats {
    long positions, agree;
    double kl_sum, kl_max;
} stats;

/* log-softmax in double of a float row */
static void log_softmax(const float *x, int n, double *out)
{
    double mx = x[0], s = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) s += exp(x[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < n; i++) out[i] = x[i] - lse;
}

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void score(stats *st, const float *dev, const float *cpu, int vocab, int32_t ref_next,
                  double *la, double *lb)
{
    log_softmax(cpu, vocab, la);
    log_softmax(dev, vocab, lb);
    double kl = 0;
    for (int i = 0; i < vocab; i++) kl += exp(la[i]) * (la[i] - lb[i]);
    if (kl < 0) kl = 0; /* rounding below zero */
    st->kl_sum += kl;
    if (kl > st->kl_max) st->kl_max = kl;
    st->agree += argmax(dev, vocab) == ref_next;
    st->positions++;
}

/* Logits of all positions of seq on device d via one chunked prefill. */
static int prefill_all(accel_dev *d, const int32_t *seq, int n, float *out)
{
    int vocab = accel_model(d)->cfg.vocab;
    accel_seq *s;
    int st = accel_seq_new(d, n, &s);
    for (int done = 0; !st && done < n;) {
        int k = n - done < 256 ? n - done : 256;
        accel_prefill_req r = {.seq = s, .ids = seq + done, .n = k,
                               .logits = out + (size_t)done * vocab, .all_logits = 1};
        st = accel_prefill(d, &r);
        done += k;
    }
    if (!st) accel_seq_free(d, s);
    else if (s) accel_seq_free(d, s);
    return st;
}

typedef struct import_ctx {
    accel_dev *dst;
    accel_seq *seq;
} import_ctx;

static int import_layer(void *vctx, const proto_kv_layer *chunk)
{
    import_ctx *c = vctx;
    return accel_kv_import(c->dst, c->seq, chunk);
}

static int run_case(accel_dev *d, accel_dev *cpu, accel_dev *kvsrc, int mode, enum proto_kv_dtype kvt,
                    const model_golden *g, stats *st, int free_run, int *divergence)
{
    int vocab = accel_model(d)->cfg.vocab;
    int n = g->n_ids + g->n_greedy - 1; /* the last greedy id has no next token to score */
    int rc = ACCEL_ERR_NOMEM;
    int32_t *seq = malloc((n + 1) * sizeof *seq);
    float *ref = malloc((size_t)n * vocab * sizeof(float));
    float *dev = malloc((size_t)n * vocab * sizeof(float));
    double *la = malloc(vocab * sizeof(double)), *lb = malloc(vocab * sizeof(double));
    accel_seq *s = NULL, *src = NULL;
    if (!seq || !ref || !dev || !la || !lb) goto out;
    memcpy(seq, g->ids, g->n_ids * sizeof *seq);
    memcpy(seq + g->n_ids, g->greedy_ids, (g->n_greedy - 1) * sizeof *seq);
    if ((rc = prefill_all(cpu, seq, n, ref))) goto out;
    int first_scored = 0;
    if (mode == MODE_PREFILL) {
        if ((rc = prefill_all(d, seq, n, dev))) goto out;
    } else {
        if ((rc = accel_seq_new(d, n + 1, &s))) goto out;
        int start = 0;
        if (mode == MODE_KV) {
            /* prompt on the source device, its KV shipped through the wire chunks */
            if ((rc = accel_seq_new(kvsrc, g->n_ids, &src))) goto out;
            import_ctx ic = {d, s};
            accel_kv_sink sink = {import_layer, &ic};
            accel_prefill_req r = {.seq = src, .ids = seq, .n = g->n_ids,
                                   .logits = dev + (size_t)(g->n_ids - 1) * vocab, .kv = &sink};
            (void)kvt;
            if ((rc = accel_prefill(kvsrc, &r))) goto out;
            start = g->n_ids;
            first_scored = g->n_ids; /* the prompt's logits came from the source device */
        }
        for (int p = start; p < n; p++)
            if ((rc = accel_decode(d, 1, &s, &seq[p], dev + (size_t)p * vocab))) goto out;
    }
    for (int p = first_scored; p < n; p++) {
        int32_t ref_next = p < g->n_ids ? g->top_ids[(size_t)p * g->topk] : g->greedy_ids[p - g->n_ids + 1];
        if (p == g->n_ids - 1) ref_next = g->greedy_ids[0];
        score(st, dev + (size_t)p * vocab, ref + (size_t)p * vocab, vocab, ref_next, la, lb);
    }
    if (free_run) {
        /* greedy from the prompt on the device's own path */
        accel_seq_free(d, s);
        s = NULL;
        *divergence = -1;
        if ((rc = accel_seq_new(d, g->n_ids + g->n_greedy, &s))) goto out;
        float *lg = dev;
        if (mode == MODE_PREFILL) {
            accel_prefill_req r = {.seq = s, .ids = seq, .n = g->n_ids, .logits = lg};
            if ((rc = accel_prefill(d, &r))) goto out;
        } else if (mode == MODE_KV) {
            accel_seq_free(kvsrc, src);
            src = NULL;
            if ((rc = accel_seq_new(kvsrc, g->n_ids, &src))) goto out;
            import_ctx ic = {d, s};
            accel_kv_sink sink = {import_layer, &ic};
            accel_prefill_req r = {.seq = src, .ids = seq, .n = g->n_ids, .logits = lg, .kv = &sink};
            if ((rc = accel_prefill(kvsrc, &r))) goto out;
        } else {
            for (int p = 0; p < g->n_ids; p++)
                if ((rc = accel_decode(d, 1, &s, &seq[p], lg))) goto out;
        }
        for (int k = 0; k < g->n_greedy; k++) {
            int32_t next = argmax(lg, vocab);
            if (next != g->greedy_ids[k] && *divergence < 0) *divergence = k;
            if (k + 1 < g->n_greedy && (rc = accel_decode(d, 1, &s, &next, lg))) goto out;
        }
    }
    rc = 0;
out:
    if (s) accel_seq_free(d, s);
    if (src) accel_seq_free(kvsrc, src);
    free(seq);
    free(ref);
    free(dev);
    free(la);
    free(lb);
    return rc;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem eval --model DIR --golden DIR [--device D] [--mode prefill|decode|kv]\n"
               "         [--kv-from DEVICE] [--kv int8|int4] [--weight-bits 8|4] [--lib FILE]\n"
               "         [--gpu-dtype auto|bf16|fp16] [--free-run] [--verbose]\n"
               "Teacher-forced top-1 agreement and KL of a device's logits against golden references.\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_eval(int argc, char **argv)
{
    const char *dir = NULL, *device = "cpu", *golden = NULL, *mode_s = NULL, *kvfrom = "cpu", *v;
    const char *kv_s = "int8", *lib = NULL;
    int bad = 0, free_run = 0, verbose = 0;
    long wbits = 8;
    enum accel_gpu_half half = ACCEL_GPU_HALF_AUTO;
    for (int i = 1; i < argc && !bad; i++) {
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) dir = v;
        else if ((v = dmn_opt(&i, argc, argv, "--device", &bad))) device = v;
        else if ((v = dmn_opt(&i, argc, argv, "--golden", &bad))) golden = v;
        else if ((v = dmn_opt(&i, argc, argv, "--mode", &bad))) mode_s = v;
        else if ((v = dmn_opt(&i, argc, argv, "--kv-from", &bad))) kvfrom = v;
        else if ((v = dmn_opt(&i, argc, argv, "--kv", &bad))) kv_s = v;
        else if ((v = dmn_opt(&i, argc, argv, "--lib", &bad))) lib = v;
        else if ((v = dmn_opt(&i, argc, argv, "--weight-bits", &bad))) {
            if (dmn_parse_int("--weight-bits", v, 4, 8, &wbits) || (wbits != 4 && wbits != 8))
                return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-dtype", &bad))) {
            if (dmn_parse_gpu_dtype(v, &half)) return 2;
        } else if (dmn_flag(i, argv, "--free-run")) free_run = 1;
        else if (dmn_flag(i, argv, "--verbose")) verbose = 1;
        else if (!bad) {
            fprintf(stderr, "tandem eval: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !dir || !golden) return usage(stderr);
    enum proto_kv_dtype kvt = !strcmp(kv_s, "int4") ? PROTO_KV_INT4 : PROTO_KV_INT8;
    if (strcmp(kv_s, "int4") && strcmp(kv_s, "int8")) {
        fprintf(stderr, "tandem eval: --kv must be int8 or int4\n");
        return 2;
    }
    char err[1024];
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "tandem eval: %s\n", err);
        return 1;
    }
    accel_opts o = {.kv_dtype = kvt, .weight_bits = (int)wbits, .lib_path = lib, .gpu_half = half};
    accel_opts ocpu = {.kv_dtype = kvt, .gpu_half = half}; /* --kv-from may name a GPU */
    accel_dev *d = devices_open(device, m, &o, err, sizeof err);
    accel_dev *cpu = d ? devices_open("cpu", m, &ocpu, err, sizeof err) : NULL;
    accel_dev *src = NULL;
    if (!d || !cpu) {
        fprintf(stderr, "tandem eval: %s\n", err);
        accel_free(d);
        model_free(m);
        return 1;
    }
    accel_info info;
    accel_get_info(d, &info);
    int mode = !mode_s ? ((info.caps & ACCEL_CAP_PREFILL) ? MODE_PREFILL : MODE_DECODE)
               : !strcmp(mode_s, "prefill") ? MODE_PREFILL
               : !strcmp(mode_s, "decode")  ? MODE_DECODE
               : !strcmp(mode_s, "kv")      ? MODE_KV
                                            : -1;
    int rc = 1;
    char **paths = NULL;
    int n = -1;
    if (mode < 0) {
        fprintf(stderr, "tandem eval: --mode must be prefill, decode or kv\n");
        rc = 2;
        goto out;
    }
    if (mode == MODE_KV) {
        src = !strcmp(kvfrom, "cpu") ? cpu : devices_open(kvfrom, m, &ocpu, err, sizeof err);
        if (!src) {
            fprintf(stderr, "tandem eval: %s\n", err);
            goto out;
        }
    }
    n = model_golden_list(golden, &paths);
    if (n <= 0) {
        fprintf(stderr, "tandem eval: no golden cases in %s\n", golden);
        goto out;
    }
    stats st = {0};
    char divs[1024] = "";
    size_t dl = 0;
    for (int i = 0; i < n; i++) {
        model_golden *g = model_golden_load(paths[i], m->cfg.vocab, err, sizeof err);
        if (!g) {
            fprintf(stderr, "tandem eval: %s\n", err);
            goto out;
        }
        int div = -1;
        stats before = st;
        int s = g->n_greedy >= 1 ? run_case(d, cpu, src, mode, kvt, g, &st, free_run, &div) : 0;
        if (s) {
            fprintf(stderr, "tandem eval: %s: %s\n", g->name, accel_strerror(s));
            model_golden_free(g);
            goto out;
        }
        if (verbose)
            fprintf(stderr, "%-10s positions %4ld  top1 %.4f  mean_kl %.3g%s\n", g->name,
                    st.positions - before.positions,
                    (double)(st.agree - before.agree) / (st.positions - before.positions),
                    (st.kl_sum - before.kl_sum) / (st.positions - before.positions),
                    free_run ? "" : "");
        if (free_run && dl < sizeof divs - 64)
            dl += snprintf(divs + dl, sizeof divs - dl, "%s\"%s\":%d", dl ? "," : "", g->name, div);
        model_golden_free(g);
    }
    printf("{\"device\":\"%s\",\"mode\":\"%s\",\"positions\":%ld,\"top1_agreement\":%.4f,"
           "\"mean_kl\":%.6f,\"max_kl\":%.6f", info.name,
           mode == MODE_PREFILL ? "prefill" : mode == MODE_DECODE ? "decode" : "kv", st.positions,
           st.positions ? (double)st.agree / st.positions : 0, st.positions ? st.kl_sum / st.positions : 0,
           st.kl_max);
    if (mode == MODE_KV) printf(",\"kv\":\"%s\",\"kv_from\":\"%s\"", kv_s, kvfrom);
    /* the CUDA plugin's build names its 16-bit type at the end of its description */
    if (strstr(info.desc, ", fp16") || strstr(info.desc, ", bf16"))
        printf(",\"gpu_dtype\":\"%s\"", strstr(info.desc, ", fp16") ? "fp16" : "bf16");
    if (free_run) printf(",\"free_run_first_divergence\":{%s}", divs);
    printf("}\n");
    rc = 0;
out:
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    if (src && src != cpu) accel_free(src);
    accel_free(cpu);
    accel_free(d);
    model_free(m);
    return rc;
}
