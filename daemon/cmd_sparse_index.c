/* tandem sparse-index — a sparse method's block selection on raw float32 Q and K, written as
 * JSON, for comparison with an official implementation (tools/sparse_official_xattn.py records
 * the official XAttention's; tests/e2e/sparse_index.sh compares). Parameters as flags named
 * after the API keys (sparse/sparse.h). */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include "devices/sparse_index.h"
#include "proto/cli_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f)
{
    fprintf(f,
            "usage: tandem sparse-index --mode flexprefill|xattention|trishape --q FILE --k FILE\n"
            "         --heads H --kv-heads HK --head-dim D --tokens N [--q-from P] [--device cpu|cuda]\n"
            "         [--threads N] --out FILE [--official-chunking]\n"
            "         [--xattention-threshold X] [--xattention-stride S] [--xattention-block-size B]\n"
            "         [--num-retained-start-tokens-in-cache T] [--num-retained-recent-tokens-in-cache T]\n"
            "         [--gamma G] [--tau T] [--min-budget T] [--max-budget T]\n"
            "Reads float32 little-endian q (N - P rows of H x D: positions P .. N-1) and k (N rows of\n"
            "HK x D) and writes {\"block_size\":B,\"q_block0\":P/B,\"heads\":[[[kept key blocks of\n"
            "query block P/B], ...], ...]}. --official-chunking: XAttention as the official torch\n"
            "path selects in its first internal chunk (x-attention@e37988770b9d).\n");
    return f == stdout ? 0 : 2;
}

/* The whole file, exactly `bytes` long, or NULL with a message. */
static float *read_exact(const char *path, size_t bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    float *buf = malloc(bytes ? bytes : 1);
    size_t got = buf ? fread(buf, 1, bytes, f) : 0;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!buf || got != bytes || extra) {
        fprintf(stderr, "tandem sparse-index: %s must hold exactly %zu bytes\n", path, bytes);
        free(buf);
        return NULL;
    }
    return buf;
}

int dmn_cmd_sparse_index(int argc, char **argv)
{
    const char *mode = NULL, *qf = NULL, *kf = NULL, *out = NULL, *device = "cpu", *v;
    long H = 0, HK = 0, D = 0, N = 0, P = 0, threads = 0, x;
    double f;
    int bad = 0, official = 0;
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_FLEX);
    sparse_params set; /* what the flags gave, applied over the mode's defaults below */
    int given[16] = {0};
    memset(&set, 0, sizeof set);
    for (int i = 1; i < argc && !bad; i++) {
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--mode", &bad))) mode = v;
        else if ((v = dmn_opt(&i, argc, argv, "--q", &bad))) qf = v;
        else if ((v = dmn_opt(&i, argc, argv, "--k", &bad))) kf = v;
        else if ((v = dmn_opt(&i, argc, argv, "--out", &bad))) out = v;
        else if ((v = dmn_opt(&i, argc, argv, "--device", &bad))) device = v;
        else if ((v = dmn_opt(&i, argc, argv, "--heads", &bad))) bad = dmn_parse_int("--heads", v, 1, 256, &H);
        else if ((v = dmn_opt(&i, argc, argv, "--kv-heads", &bad))) bad = dmn_parse_int("--kv-heads", v, 1, 256, &HK);
        else if ((v = dmn_opt(&i, argc, argv, "--head-dim", &bad))) bad = dmn_parse_int("--head-dim", v, 1, 1024, &D);
        else if ((v = dmn_opt(&i, argc, argv, "--tokens", &bad))) bad = dmn_parse_int("--tokens", v, 1, 1 << 20, &N);
        else if ((v = dmn_opt(&i, argc, argv, "--q-from", &bad))) bad = dmn_parse_int("--q-from", v, 0, 1 << 20, &P);
        else if ((v = dmn_opt(&i, argc, argv, "--threads", &bad))) bad = dmn_parse_int("--threads", v, 1, 1024, &threads);
        else if ((v = dmn_opt(&i, argc, argv, "--xattention-threshold", &bad))) {
            bad = dmn_parse_float("--xattention-threshold", v, 1e-9, 1, &f);
            set.xattention_threshold = f, given[0] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--xattention-stride", &bad))) {
            bad = dmn_parse_int("--xattention-stride", v, 1, 128, &x);
            set.xattention_stride = (int)x, given[1] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--xattention-block-size", &bad))) {
            bad = dmn_parse_int("--xattention-block-size", v, 16, 128, &x);
            set.xattention_block_size = (int)x, given[2] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--num-retained-start-tokens-in-cache", &bad))) {
            bad = dmn_parse_int("--num-retained-start-tokens-in-cache", v, 0, 1 << 20, &x);
            set.num_retained_start_tokens_in_cache = (int)x, given[3] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--num-retained-recent-tokens-in-cache", &bad))) {
            bad = dmn_parse_int("--num-retained-recent-tokens-in-cache", v, 0, 1 << 20, &x);
            set.num_retained_recent_tokens_in_cache = (int)x, given[4] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--gamma", &bad))) {
            bad = dmn_parse_float("--gamma", v, 1e-9, 1, &f);
            set.flex.gamma = (float)f, given[5] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--tau", &bad))) {
            bad = dmn_parse_float("--tau", v, 0, 1, &f);
            set.flex.tau = (float)f, given[6] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--min-budget", &bad))) {
            bad = dmn_parse_int("--min-budget", v, 0, 1 << 24, &x);
            set.flex.min_budget = (int)x, given[7] = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--max-budget", &bad))) {
            bad = dmn_parse_int("--max-budget", v, 0, 1 << 24, &x);
            set.flex.max_budget = (int)x, given[8] = 1;
        } else if (dmn_flag(i, argv, "--official-chunking")) official = 1;
        else if (!bad) {
            fprintf(stderr, "tandem sparse-index: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !mode || !qf || !kf || !out || !H || !HK || !D || !N) return usage(stderr);
    int m = sparse_mode_parse(mode);
    if (m < 0) {
        fprintf(stderr, "tandem sparse-index: --mode must be flexprefill, xattention or trishape\n");
        return 2;
    }
    if (P >= N || H % HK) {
        fprintf(stderr, "tandem sparse-index: need --q-from < --tokens and heads a multiple of kv-heads\n");
        return 2;
    }
    sparse_params_default(&p, m);
    if (given[0]) p.xattention_threshold = set.xattention_threshold;
    if (given[1]) p.xattention_stride = set.xattention_stride;
    if (given[2]) p.xattention_block_size = set.xattention_block_size;
    if (given[3]) p.num_retained_start_tokens_in_cache = set.num_retained_start_tokens_in_cache;
    if (given[4]) p.num_retained_recent_tokens_in_cache = set.num_retained_recent_tokens_in_cache;
    if (given[5]) p.flex.gamma = set.flex.gamma;
    if (given[6]) p.flex.tau = set.flex.tau;
    if (given[7]) p.flex.min_budget = set.flex.min_budget;
    if (given[8]) p.flex.max_budget = set.flex.max_budget;
    /* sizes bounded above: at most 1M tokens x 256 heads x 1024 floats would be 1 TiB, so also
     * cap the files at 16 GiB each before reading */
    size_t qbytes = (size_t)(N - P) * H * D * sizeof(float), kbytes = (size_t)N * HK * D * sizeof(float);
    if (qbytes > (16ull << 30) || kbytes > (16ull << 30)) {
        fprintf(stderr, "tandem sparse-index: inputs above 16 GiB\n");
        return 2;
    }
    float *q = read_exact(qf, qbytes), *k = q ? read_exact(kf, kbytes) : NULL;
    if (!q || !k) {
        free(q);
        return 1;
    }
    devices_sparse_blocks b;
    char err[256];
    int rc = devices_sparse_index(device, &p, official, q, k, (int)N, (int)P, (int)H, (int)HK,
                                  (int)D, (int)threads, &b, err, sizeof err);
    free(q);
    free(k);
    if (rc) {
        fprintf(stderr, "tandem sparse-index: %s\n", err);
        return 1;
    }
    char *json = proto_cli_sparse_blocks_json(b.block_size, b.q_block0, b.n_heads, b.n_blocks,
                                              b.row_ptr, b.col);
    devices_sparse_blocks_free(&b);
    FILE *o = json ? fopen(out, "w") : NULL;
    int ok = o && fputs(json, o) >= 0 && fputc('\n', o) != EOF;
    if (o && fclose(o)) ok = 0;
    if (!ok) fprintf(stderr, "tandem sparse-index: cannot write %s\n", out);
    free(json);
    return ok ? 0 : 1;
}
