/* tandem generate — complete a prompt (text or ids) on a device and stream the text.
 *
 * The request goes through the scheduler `tandem serve` runs (daemon/cli_sched.h), pinned to
 * the devices the flags name. A decode device that cannot prefill, and an FPGA card (as the
 * daemon places them unless fpga_prefill is set), gets the prompt's KV from a prefill device
 * (--prefill-device, default cpu): the prompt is prefilled there with its KV shipped layer by
 * layer in the wire format into the decode device, the first token comes from the prefill's
 * logits and every later one from the decode device — the path a request takes in the daemon.
 * --prefill-device naming the decode device itself prefills there (a card with FAST-Prefill's
 * kernel: fpga/kernels/prefill.c). */
#include "daemon/cli.h"
#include "daemon/cli_sched.h"
#include "daemon/cmd.h"
#include "devices/devices.h"
#include "model/gen/gen.h"
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

/* What the events of the one request leave behind. */
typedef struct gen_run {
    int json;
    int32_t *ids; /* generated, max_tokens of them at most */
    int n_ids, cap;
    char *text; /* --json: the text, gathered */
    size_t text_len, text_cap;
    char devs[2 * ACCEL_NAME_MAX + 32]; /* "prefill=A; decode=B" */
    enum model_finish finish;
    int failed, printed, nomem;
    char msg[512];
} gen_run;

static void on_event(void *ctx, const sched_event *ev)
{
    gen_run *g = ctx;
    switch (ev->type) {
    case SCHED_EV_PLACED:
        snprintf(g->devs, sizeof g->devs, "prefill=%s; decode=%s", ev->prefill_dev, ev->decode_dev);
        break;
    case SCHED_EV_TOKEN:
        if (g->n_ids < g->cap) g->ids[g->n_ids++] = ev->token_id;
        if (!ev->text_len) break;
        if (g->json) {
            if (g->text_len + ev->text_len + 1 > g->text_cap) {
                size_t cap = (g->text_len + ev->text_len + 1) * 2;
                char *nt = realloc(g->text, cap);
                if (!nt) {
                    g->nomem = 1;
                    break;
                }
                g->text = nt;
                g->text_cap = cap;
            }
            memcpy(g->text + g->text_len, ev->text, ev->text_len);
            g->text_len += ev->text_len;
        } else {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
            g->printed = 1;
        }
        break;
    case SCHED_EV_CHOICE_DONE:
        g->finish = ev->finish;
        break;
    case SCHED_EV_DONE:
        break;
    case SCHED_EV_ERROR:
        g->failed = 1;
        snprintf(g->msg, sizeof g->msg, "%s",
                 ev->message ? ev->message : sched_strerror(ev->status));
        break;
    }
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
    dmn_cli_sched *cs = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
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
    /* devs[0] prefills, the last one decodes (the same device without --prefill-device) */
    accel_dev *devs[2] = {p ? p : d, d};
    int n_devs = p ? 2 : 1;
    if (!(cs = dmn_cli_sched_new(devs, n_devs, tok, pi.kind == ACCEL_KIND_FPGA, err, sizeof err))) {
        fprintf(stderr, "tandem generate: %s\n", err);
        goto out;
    }
    /* the scheduler admits prompt + max_tokens within the context; generation stops there
     * anyway ("length", the same finish a larger max_tokens gets when the context fills) */
    int room = n_ctx - (int)n_ids;
    gen_run run = {.json = json, .cap = (int)(max_tokens < room ? max_tokens : room)};
    if (!(run.ids = malloc(sizeof(int32_t) * (size_t)run.cap))) {
        fprintf(stderr, "tandem generate: out of memory\n");
        goto out;
    }
    sched_params sp = {.prompt = ids, .n_prompt = (int)n_ids, .max_tokens = run.cap, .n = 1,
                       .sampling = gp.sampling, .stop = stops, .n_stop = n_stops,
                       .ignore_eos = gp.ignore_eos, .continuation = 1, .prefill_on = 1u,
                       .decode_on = 1u << (n_devs - 1)};
    int st = dmn_cli_sched_run(cs, &sp, on_event, &run, err, sizeof err);
    if (st || run.failed || run.nomem) {
        fprintf(stderr, "%standem generate: %s\n", run.printed ? "\n" : "",
                st ? err : run.failed ? run.msg : "out of memory");
        rc = st == SCHED_ERR_INVALID ? 2 : 1;
        free(run.ids);
        free(run.text);
        goto out;
    }
    if (json) {
        char *js = proto_cli_generate_json(run.ids, run.n_ids, run.text, run.text_len,
                                           model_finish_name(run.finish), (int)n_ids, run.devs);
        if (js) printf("%s\n", js);
        else fprintf(stderr, "tandem generate: out of memory\n");
        free(js);
        rc = js ? 0 : 1;
    } else {
        printf("\n");
        fprintf(stderr, "[%d prompt + %d generated tokens, finish %s, %s]\n", (int)n_ids,
                run.n_ids, model_finish_name(run.finish), run.devs);
        rc = 0;
    }
    free(run.ids);
    free(run.text);
out:
    dmn_cli_sched_free(cs); /* before the devices it runs on */
    accel_free(p);
    accel_free(d);
    model_tok_free(tok);
    model_free(m);
    free(ids);
    return rc;
}
