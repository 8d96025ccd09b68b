/* tandem generate — complete a prompt (text or ids) on a device and stream the text.
 *
 * A decode device that cannot prefill, and an FPGA card (as the daemon places them unless
 * fpga_prefill is set), gets the prompt's KV from a prefill device (--prefill-device, default
 * cpu): the prompt is prefilled there with its KV exported layer by layer and imported into the
 * decode device, the first token comes from the prefill's logits and every later one from the
 * decode device — the path a request takes in the daemon. --prefill-device naming the decode
 * device itself prefills there (a card with FAST-Prefill's kernel: fpga/kernels/prefill.c). */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include "devices/devices.h"
#include "model/gen.h"
#include "proto/cli_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 16

static int usage(FILE *f)
{
    fprintf(f,
            "usage: tandem generate [--model DIR] (--prompt TEXT | --ids LIST) [--max-tokens N]\n"
            "         [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
            "         [--stop STR]... [--device D] [--prefill-device D] [--kv int8|int4]\n"
            "         [--gpu-dtype auto|bf16|fp16] [--ignore-eos] [--json]\n"
            "--device cpu | cuda[:N] | fpga-emu[:N] | fpga[:N] (default cpu); --model defaults to the\n"
            "bundled stories260K.\n");
    return f == stdout ? 0 : 2;
}

typedef struct ship {
    accel_dev *dst;
    accel_seq *seq;
} ship;

static int ship_layer(void *ctx, const proto_kv_layer *chunk)
{
    ship *s = ctx;
    return accel_kv_import(s->dst, s->seq, chunk);
}

int dmn_cmd_generate(int argc, char **argv)
{
    const char *dir = NULL, *prompt = NULL, *ids_s = NULL, *device = "cpu", *pdev = NULL, *v;
    const char *stops[MAX_STOPS];
    int n_stops = 0, bad = 0, json = 0;
    long max_tokens = 64;
    model_gen_params gp = {.sampling = model_sampling_default(), .skip_special = 1};
    accel_opts opts = {0};
    for (int i = 1; i < argc && !bad; i++) {
        long t;
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) dir = v;
        else if ((v = dmn_opt(&i, argc, argv, "--prompt", &bad))) prompt = v;
        else if ((v = dmn_opt(&i, argc, argv, "--ids", &bad))) ids_s = v;
        else if ((v = dmn_opt(&i, argc, argv, "--device", &bad))) device = v;
        else if ((v = dmn_opt(&i, argc, argv, "--prefill-device", &bad))) pdev = v;
        else if ((v = dmn_opt(&i, argc, argv, "--max-tokens", &bad))) {
            if (dmn_parse_int("--max-tokens", v, 1, 1 << 24, &max_tokens)) return 2;
        } else if ((t = dmn_sampling_opt(&i, argc, argv, &gp.sampling, &bad))) {
            if (t < 0) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--stop", &bad))) {
            if (n_stops == MAX_STOPS) {
                fprintf(stderr, "tandem generate: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            stops[n_stops++] = v;
        } else if ((v = dmn_opt(&i, argc, argv, "--kv", &bad))) {
            if (strcmp(v, "int8") && strcmp(v, "int4")) {
                fprintf(stderr, "tandem generate: --kv must be int8 or int4\n");
                return 2;
            }
            opts.kv_dtype = !strcmp(v, "int4") ? PROTO_KV_INT4 : PROTO_KV_INT8;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-dtype", &bad))) {
            if (dmn_parse_gpu_dtype(v, &opts.gpu_half)) return 2;
        } else if (dmn_flag(i, argv, "--ignore-eos")) gp.ignore_eos = 1;
        else if (dmn_flag(i, argv, "--json")) json = 1;
        else if (!bad) {
            fprintf(stderr, "tandem generate: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !!prompt == !!ids_s) return usage(stderr);
    char defdir[4096];
    if (!dir) {
        dmn_default_model(defdir, sizeof defdir);
        dir = defdir;
    }
    char err[1024];
    int rc = 1;
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "tandem generate: %s\n", err);
        return 1;
    }
    model_tok *tok = model_tok_load_dir(dir, err, sizeof err);
    accel_dev *d = NULL, *p = NULL;
    accel_seq *s = NULL, *ps = NULL;
    model_gen *g = NULL;
    int32_t *ids = NULL, *out_ids = NULL;
    char *text = NULL;
    size_t n_ids = 0, text_len = 0, text_cap = 0;
    float *lg = NULL;
    if (!tok && prompt) {
        fprintf(stderr, "tandem generate: --prompt needs the model's tokenizer: %s\n", err);
        goto out;
    }
    if (prompt) {
        if (model_tok_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids)) {
            fprintf(stderr, "tandem generate: cannot tokenize the prompt\n");
            goto out;
        }
    } else if (dmn_parse_ids(ids_s, &ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "tandem generate: %s\n", err);
        rc = 2;
        goto out;
    }
    int n_ctx = model_context_limit(&m->cfg), vocab = m->cfg.vocab;
    if (n_ids == 0 || (long)n_ids >= n_ctx) {
        fprintf(stderr, "tandem generate: the prompt has %zu tokens; the context holds %d\n", n_ids,
                n_ctx);
        rc = 2;
        goto out;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= vocab) {
            fprintf(stderr, "tandem generate: id %d is outside the vocabulary (%d)\n", ids[i], vocab);
            rc = 2;
            goto out;
        }
    d = devices_open(device, m, &opts, err, sizeof err);
    if (!d) {
        fprintf(stderr, "tandem generate: %s\n", err);
        goto out;
    }
    accel_info di, pi;
    accel_get_info(d, &di);
    if (!pdev && (!(di.caps & ACCEL_CAP_PREFILL) || di.kind == ACCEL_KIND_FPGA)) pdev = "cpu";
    if (pdev && strcmp(pdev, device) != 0) {
        p = devices_open(pdev, m, &opts, err, sizeof err);
        if (!p) {
            fprintf(stderr, "tandem generate: %s\n", err);
            goto out;
        }
    }
    accel_get_info(p ? p : d, &pi);
    int cap = (long)n_ids + max_tokens < n_ctx ? (int)(n_ids + max_tokens) : n_ctx;
    int st = accel_seq_new(d, cap, &s);
    lg = malloc(vocab * sizeof(float));
    if (st || !lg) {
        fprintf(stderr, "tandem generate: %s: %s\n", di.name, accel_strerror(st ? st : ACCEL_ERR_NOMEM));
        goto out;
    }
    if (p) {
        ship sh = {d, s};
        accel_kv_sink sink = {ship_layer, &sh};
        if (!(st = accel_seq_new(p, (int)n_ids, &ps))) {
            accel_prefill_req r = {.seq = ps, .ids = ids, .n = (int)n_ids, .logits = lg, .kv = &sink};
            st = accel_prefill(p, &r);
        }
    } else {
        accel_prefill_req r = {.seq = s, .ids = ids, .n = (int)n_ids, .logits = lg};
        st = accel_prefill(d, &r);
    }
    if (st) {
        fprintf(stderr, "tandem generate: prefill on %s: %s\n", pi.name, accel_strerror(st));
        goto out;
    }
    if (ps) {
        accel_seq_free(p, ps);
        ps = NULL;
    }
    gp.stops = stops;
    gp.n_stops = n_stops;
    gp.max_tokens = (int)max_tokens;
    gp.n_ctx = n_ctx;
    gp.eos_ids = m->cfg.eos_ids;
    gp.n_eos = m->cfg.n_eos;
    g = model_gen_new(tok, &gp, vocab, ids, (int)n_ids, 0, err, sizeof err);
    out_ids = malloc((max_tokens + 1) * sizeof *out_ids);
    if (!g || !out_ids) {
        fprintf(stderr, "tandem generate: %s\n", g ? "out of memory" : err);
        rc = 2;
        goto out;
    }
    model_gen_out o;
    int n_out = 0;
    for (;;) {
        if (model_gen_step(g, lg, &o)) {
            fprintf(stderr, "tandem generate: out of memory\n");
            goto out;
        }
        out_ids[n_out++] = o.token;
        if (o.len) {
            if (json) {
                if (text_len + o.len + 1 > text_cap) {
                    text_cap = (text_len + o.len + 1) * 2;
                    char *nt = realloc(text, text_cap);
                    if (!nt) goto out;
                    text = nt;
                }
                memcpy(text + text_len, o.text, o.len);
                text_len += o.len;
            } else {
                fwrite(o.text, 1, o.len, stdout);
                fflush(stdout);
            }
        }
        if (o.finish != MODEL_FINISH_NONE) break;
        if ((st = accel_decode(d, 1, &s, &o.token, lg))) {
            fprintf(stderr, "\ntandem generate: decode on %s: %s\n", di.name, accel_strerror(st));
            goto out;
        }
    }
    char devs[128];
    snprintf(devs, sizeof devs, "prefill=%s; decode=%s", pi.name, di.name);
    if (json) {
        char *js = proto_cli_generate_json(out_ids, n_out, text, text_len,
                                           model_finish_name(o.finish), (int)n_ids, devs);
        if (!js) goto out;
        printf("%s\n", js);
        free(js);
    } else {
        printf("\n");
        fprintf(stderr, "[%d prompt + %d generated tokens, finish %s, %s]\n", (int)n_ids, n_out,
                model_finish_name(o.finish), devs);
    }
    rc = 0;
out:
    model_gen_free(g);
    if (ps) accel_seq_free(p, ps);
    if (s) accel_seq_free(d, s);
    accel_free(p);
    accel_free(d);
    model_tok_free(tok);
    model_free(m);
    free(ids);
    free(out_ids);
    free(text);
    free(lg);
    return rc;
}
