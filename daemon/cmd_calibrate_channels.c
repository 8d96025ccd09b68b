/* tandem calibrate-channels — AsyncTLS's offline channel calibration: writes the model's
 * tandem-channels.bin sidecar (model/ckpt/tls_channels.h) from the CPU reference run over
 * self-generated calibration text (devices/tls_calib.h). */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include "devices/tls_calib.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem calibrate-channels --model DIR [--out FILE] [--channels 32]\n"
               "         [--seqs 8] [--len 256] [--seed 1] [--ids-file FILE]\n"
               "Picks the channels AsyncTLS sparse decode labels per (layer, KV head): mean |q*k| over\n"
               "SEQS x LEN tokens the model samples itself (max over each GQA group), the CHANNELS\n"
               "largest kept. Writes DIR/" MODEL_CHANNELS_FILE " unless --out names another file.\n"
               "--ids-file: token ids (comma or space separated) to calibrate on instead, cut into\n"
               "sequences of LEN (SEQS becomes how many whole ones it holds).\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_calibrate_channels(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *ids_file = NULL, *v;
    int bad = 0;
    long x;
    devices_tls_calib_opts o;
    devices_tls_calib_opts_default(&o);
    for (int i = 1; i < argc && !bad; i++) {
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) dir = v;
        else if ((v = dmn_opt(&i, argc, argv, "--out", &bad))) out = v;
        else if ((v = dmn_opt(&i, argc, argv, "--ids-file", &bad))) ids_file = v;
        else if ((v = dmn_opt(&i, argc, argv, "--channels", &bad))) {
            if (dmn_parse_int("--channels", v, 2, 1024, &x)) return 2;
            if (x % 2) {
                fprintf(stderr, "tandem calibrate-channels: --channels must be even\n");
                return 2;
            }
            o.channels = (int)x;
        } else if ((v = dmn_opt(&i, argc, argv, "--seqs", &bad))) {
            if (dmn_parse_int("--seqs", v, 1, 4096, &x)) return 2;
            o.n_seqs = (int)x;
        } else if ((v = dmn_opt(&i, argc, argv, "--len", &bad))) {
            if (dmn_parse_int("--len", v, 2, 65536, &x)) return 2;
            o.len = (int)x;
        } else if ((v = dmn_opt(&i, argc, argv, "--seed", &bad))) {
            if (dmn_parse_int("--seed", v, 0, 2147483647, &x)) return 2;
            o.seed = (uint64_t)x;
        } else if (!bad) {
            fprintf(stderr, "tandem calibrate-channels: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !dir) return usage(stderr);
    char err[512], path[4200];
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "tandem calibrate-channels: %s\n", err);
        return 1;
    }
    int32_t *ids = NULL;
    if (ids_file) {
        char *text = model_read_file(ids_file, 256u << 20, NULL);
        size_t n = 0;
        if (!text) {
            perror(ids_file);
            model_free(m);
            return 1;
        }
        int bad_ids = dmn_parse_ids(text, &ids, &n, err, sizeof err);
        free(text);
        if (bad_ids || n < (size_t)o.len) {
            fprintf(stderr, "tandem calibrate-channels: %s: %s\n", ids_file,
                    bad_ids ? err : "fewer ids than --len");
            free(ids);
            model_free(m);
            return 2;
        }
        o.n_seqs = (int)(n / o.len < 4096 ? n / o.len : 4096);
        o.ids = ids;
    }
    if (out) snprintf(path, sizeof path, "%s", out);
    else model_channels_path(dir, path, sizeof path);
    model_channels ch;
    int rc = 1;
    if (devices_tls_calibrate(m, &o, &ch, err, sizeof err)) {
        fprintf(stderr, "tandem calibrate-channels: %s\n", err);
    } else {
        if (model_channels_save(path, &ch, err, sizeof err))
            fprintf(stderr, "tandem calibrate-channels: %s\n", err);
        else {
            printf("wrote %s: %d layers x %d KV heads, %d of %d channels, from %u tokens\n", path,
                   ch.n_layers, ch.n_kv_heads, ch.r, ch.head_dim, ch.calib_tokens);
            rc = 0;
        }
        model_channels_free(&ch);
    }
    free(ids);
    model_free(m);
    return rc;
}
