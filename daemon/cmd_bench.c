/* tandem bench — device throughput on a model: prefill tokens/s for a prompt of P tokens and
 * decode tokens/s at batch 1 (and at --batch B), greedy, after warm-up. Times are wall-clock
 * (CLOCK_MONOTONIC) around complete device calls, which synchronize. */
#include "daemon/cli.h"
#include "daemon/cmd.h"
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

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Decode `steps` tokens greedily for `batch` sequences that start from a 1-token prompt;
 * returns tokens/s over all sequences, or a negative status. */
static double decode_run(accel_dev *d, const model *m, int batch, int steps, int ctx_tokens,
                         int *status)
{
    int vocab = m->cfg.vocab;
    accel_seq **seqs = calloc(batch, sizeof *seqs);
    int32_t *ids = malloc(batch * sizeof *ids);
    float *lg = malloc((size_t)batch * vocab * sizeof(float));
    int32_t *ctx = malloc((ctx_tokens > 0 ? ctx_tokens : 1) * sizeof *ctx);
    double rate = 0;
    *status = ACCEL_ERR_NOMEM;
    if (!seqs || !ids || !lg || !ctx) goto out;
    int bos = m->cfg.bos_id >= 0 ? m->cfg.bos_id : 1;
    for (int i = 0; i < ctx_tokens; i++) ctx[i] = i == 0 ? bos : (int32_t)((i * 7919) % vocab);
    for (int b = 0; b < batch; b++) {
        if ((*status = accel_seq_new(d, ctx_tokens + steps + 1, &seqs[b]))) goto out;
        accel_prefill_req r = {.seq = seqs[b], .ids = ctx, .n = ctx_tokens, .logits = lg};
        if ((*status = accel_prefill(d, &r))) goto out;
        ids[b] = argmax(lg, vocab);
    }
    double t0 = now();
    for (int s = 0; s < steps; s++) {
        if ((*status = accel_decode(d, batch, seqs, ids, lg))) goto out;
        for (int b = 0; b < batch; b++) ids[b] = argmax(lg + (size_t)b * vocab, vocab);
    }
    rate = (double)steps * batch / (now() - t0);
    *status = 0;
out:
    for (int b = 0; seqs && b < batch; b++) accel_seq_free(d, seqs[b]);
    free(seqs);
    free(ids);
    free(lg);
    free(ctx);
    return rate;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem bench --model DIR [--device cpu] [--tokens N] [--context C] [--prompt P]\n"
               "         [--batch B] [--threads T] [--gpu-dtype auto|bf16|fp16] [--repeat R] [--json]\n"
               "Decode tokens/s at batch 1 (and at --batch B) after a --context C token prefix, and\n"
               "prefill tokens/s for a --prompt P token prompt, on one device, greedy, after warm-up.\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_bench(int argc, char **argv)
{
    const char *dir = NULL, *device = "cpu", *v;
    long steps = 256, prompt = 0, batch = 0, ctx = 1, reps = 3;
    int bad = 0, json = 0;
    accel_opts opts = {0};
    for (int i = 1; i < argc && !bad; i++) {
        long t;
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) dir = v;
        else if ((v = dmn_opt(&i, argc, argv, "--device", &bad))) device = v;
        else if ((v = dmn_opt(&i, argc, argv, "--tokens", &bad))) {
            if (dmn_parse_int("--tokens", v, 1, 1 << 20, &steps)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--prompt", &bad))) {
            if (dmn_parse_int("--prompt", v, 0, 1 << 20, &prompt)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--context", &bad))) {
            if (dmn_parse_int("--context", v, 1, 1 << 20, &ctx)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--batch", &bad))) {
            if (dmn_parse_int("--batch", v, 0, 4096, &batch)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--repeat", &bad))) {
            if (dmn_parse_int("--repeat", v, 1, 100, &reps)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--threads", &bad))) {
            if (dmn_parse_int("--threads", v, 1, 1024, &t)) return 2;
            opts.threads = (int)t;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-dtype", &bad))) {
            if (dmn_parse_gpu_dtype(v, &opts.gpu_half)) return 2;
        } else if (dmn_flag(i, argv, "--json")) json = 1;
        else if (!bad) {
            fprintf(stderr, "tandem bench: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !dir) return usage(stderr);
    model *m;
    accel_dev *d;
    if (dmn_open_model(dir, device, &opts, &m, &d)) return 1;
    int st = accel_warmup(d);
    if (st) {
        fprintf(stderr, "tandem bench: warm-up: %s\n", accel_strerror(st));
        return 1;
    }
    if (ctx + steps + 1 > model_context_limit(&m->cfg)) steps = model_context_limit(&m->cfg) - ctx - 1;
    accel_info info;
    accel_get_info(d, &info);
    /* best of `reps` runs: the machine's other load only ever slows a run down */
    double dec = 0, pre = 0, bat = 0;
    for (int r = 0; r < reps; r++) {
        double x = decode_run(d, m, 1, (int)steps, (int)ctx, &st);
        if (st) goto fail;
        if (x > dec) dec = x;
    }
    if (prompt > 0) {
        if (prompt > model_context_limit(&m->cfg)) prompt = model_context_limit(&m->cfg);
        int32_t *ids = malloc(prompt * sizeof *ids);
        float *lg = malloc(m->cfg.vocab * sizeof(float));
        for (long i = 0; i < prompt; i++) ids[i] = (int32_t)((i * 7919 + 1) % m->cfg.vocab);
        for (int r = 0; r < reps; r++) {
            accel_seq *s;
            if ((st = accel_seq_new(d, (int)prompt, &s))) break;
            accel_prefill_req q = {.seq = s, .ids = ids, .n = (int)prompt, .logits = lg};
            double t0 = now();
            st = accel_prefill(d, &q);
            double x = prompt / (now() - t0);
            accel_seq_free(d, s);
            if (st) break;
            if (x > pre) pre = x;
        }
        free(ids);
        free(lg);
        if (st) goto fail;
    }
    if (batch > 0) {
        for (int r = 0; r < reps; r++) {
            double x = decode_run(d, m, (int)batch, (int)steps, (int)ctx, &st);
            if (st) goto fail;
            if (x > bat) bat = x;
        }
    }
    if (json) {
        printf("{\"device\":\"%s\",\"model\":\"%s\",\"decode_tokens\":%ld,\"context\":%ld,"
               "\"decode_tok_s\":%.1f,\"decode_ms_per_token\":%.4f", info.name, dir, steps, ctx, dec,
               1000.0 / dec);
        if (prompt) printf(",\"prefill_tokens\":%ld,\"prefill_tok_s\":%.1f", prompt, pre);
        if (batch) printf(",\"batch\":%ld,\"batch_decode_tok_s\":%.1f", batch, bat);
        printf("}\n");
    } else {
        printf("device %s (%s), model %s\n", info.name, info.desc, dir);
        printf("decode  batch 1: %10.1f tokens/s  (%.4f ms/token, %ld tokens after %ld of context, "
               "best of %ld)\n", dec, 1000.0 / dec, steps, ctx, reps);
        if (prompt) printf("prefill %6ld tok: %10.1f tokens/s\n", prompt, pre);
        if (batch) printf("decode  batch %ld: %8.1f tokens/s\n", batch, bat);
    }
    accel_free(d);
    model_free(m);
    return 0;
fail:
    fprintf(stderr, "tandem bench: %s\n", accel_strerror(st));
    accel_free(d);
    model_free(m);
    return 1;
}
