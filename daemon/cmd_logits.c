/* tandem logits — prefill an id list and write float32 little-endian logits, one row of
 * vocab_size values per position (or only the last with --last). */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem logits --model DIR (--ids LIST | --ids-file FILE) --out FILE [--last]\n"
               "         [--device cpu] [--threads N] [--gpu-dtype auto|bf16|fp16]\n"
               "Writes float32 little-endian logits, vocab values per position (--last: the last only).\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_logits(int argc, char **argv)
{
    const char *dir = NULL, *ids_s = NULL, *ids_file = NULL, *out = NULL, *device = "cpu", *v;
    int last = 0, bad = 0;
    accel_opts opts = {0};
    for (int i = 1; i < argc && !bad; i++) {
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) dir = v;
        else if ((v = dmn_opt(&i, argc, argv, "--ids", &bad))) ids_s = v;
        else if ((v = dmn_opt(&i, argc, argv, "--ids-file", &bad))) ids_file = v;
        else if ((v = dmn_opt(&i, argc, argv, "--out", &bad))) out = v;
        else if ((v = dmn_opt(&i, argc, argv, "--device", &bad))) device = v;
        else if ((v = dmn_opt(&i, argc, argv, "--threads", &bad))) {
            long t;
            if (dmn_parse_int("--threads", v, 1, 1024, &t)) return 2;
            opts.threads = (int)t;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-dtype", &bad))) {
            if (dmn_parse_gpu_dtype(v, &opts.gpu_half)) return 2;
        } else if (dmn_flag(i, argv, "--last")) last = 1;
        else if (!bad) {
            fprintf(stderr, "tandem logits: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !dir || !out || !!ids_s == !!ids_file) return usage(stderr);
    char *text = NULL;
    if (ids_file) {
        text = model_read_file(ids_file, 256u << 20, NULL);
        if (!text) {
            perror(ids_file);
            return 1;
        }
        ids_s = text;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    if (dmn_parse_ids(ids_s, &ids, &n, err, sizeof err) || n == 0) {
        fprintf(stderr, "tandem logits: %s\n", n == 0 && !err[0] ? "no ids" : err);
        free(text);
        free(ids);
        return 2;
    }
    free(text);
    model *m;
    accel_dev *d;
    if (dmn_open_model(dir, device, &opts, &m, &d)) {
        free(ids);
        return 1;
    }
    int rc = 1, vocab = m->cfg.vocab;
    float *lg = NULL;
    accel_seq *s = NULL;
    FILE *fp = NULL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab) {
            fprintf(stderr, "tandem logits: id %d at %zu is outside the vocabulary (%d)\n", ids[i],
                    i, vocab);
            rc = 2;
            goto out;
        }
    if (n > (size_t)model_context_limit(&m->cfg)) {
        fprintf(stderr, "tandem logits: %zu ids exceed the context length %d\n", n,
                model_context_limit(&m->cfg));
        rc = 2;
        goto out;
    }
    int st = accel_seq_new(d, (int)n, &s);
    if (st) {
        fprintf(stderr, "tandem logits: %s\n", accel_strerror(st));
        goto out;
    }
    fp = fopen(out, "wb");
    if (!fp) {
        perror(out);
        goto out;
    }
    /* prefill in chunks so that all-position logits of long inputs need bounded memory */
    const int chunk = 256;
    lg = malloc((size_t)chunk * vocab * sizeof(float));
    if (!lg) goto out;
    for (size_t done = 0; done < n;) {
        int k = n - done < (size_t)chunk ? (int)(n - done) : chunk;
        int final = done + k == n;
        accel_prefill_req r = {.seq = s, .ids = ids + done, .n = k,
                               .logits = (!last || final) ? lg : NULL, .all_logits = !last};
        st = accel_prefill(d, &r);
        if (st) {
            fprintf(stderr, "tandem logits: prefill: %s\n", accel_strerror(st));
            goto out;
        }
        size_t rows = last ? (final ? 1 : 0) : (size_t)k;
        /* float32 little-endian: this is the host's layout on every target we build for */
        if (rows && fwrite(lg, sizeof(float) * vocab, rows, fp) != rows) {
            perror(out);
            goto out;
        }
        done += k;
    }
    rc = 0;
out:
    if (fp && fclose(fp) && rc == 0) {
        perror(out);
        rc = 1;
    }
    free(lg);
    accel_seq_free(d, s);
    accel_free(d);
    model_free(m);
    free(ids);
    return rc;
}
