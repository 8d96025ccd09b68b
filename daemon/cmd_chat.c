/* tandem chat — an interactive conversation through the model's chat template.
 *
 * Each turn renders the whole conversation with add_generation_prompt, tokenizes it without
 * adding special tokens (the template writes them, as apply_chat_template(tokenize=True) does),
 * keeps the KV of the longest prefix shared with the previous turn and prefills only the rest,
 * then streams the reply until an eos token, a stop or the context ends. Lines starting with "/"
 * are commands: /exit, /reset. */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include "devices/devices.h"
#include "model/gen.h"
#include "model/tmpl.h"
#include "proto/cli_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TURNS 1024
#define MAX_LINE (1 << 20)

typedef struct convo {
    char *role[MAX_TURNS], *content[MAX_TURNS];
    int n;
} convo;

static void convo_clear(convo *c, int keep)
{
    for (int i = keep; i < c->n; i++) {
        free(c->role[i]);
        free(c->content[i]);
    }
    c->n = keep < c->n ? keep : c->n;
}

static int convo_add(convo *c, const char *role, const char *content, size_t len)
{
    if (c->n >= MAX_TURNS) return -1;
    c->role[c->n] = strdup(role);
    c->content[c->n] = strndup(content, len);
    if (!c->role[c->n] || !c->content[c->n]) return -1;
    c->n++;
    return 0;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem chat [--model DIR] [--chat-template FILE] [--system TEXT] [--device cpu]\n"
               "         [--gpu-dtype auto|bf16|fp16] [--max-tokens N] [--temperature T] [--top-p P]\n"
               "         [--top-k K] [--min-p P] [--seed S]\n"
               "An interactive chat on stdin/stdout through the model's chat template (or FILE).\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_chat(int argc, char **argv)
{
    const char *dir = NULL, *device = "cpu", *tfile = NULL, *system = NULL, *v;
    long max_tokens = 256;
    int bad = 0;
    enum accel_gpu_half half = ACCEL_GPU_HALF_AUTO;
    model_gen_params gp = {.sampling = model_sampling_default(), .skip_special = 1};
    for (int i = 1; i < argc && !bad; i++) {
        long t;
        if (dmn_help(i, argv)) return usage(stdout);
        if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) dir = v;
        else if ((v = dmn_opt(&i, argc, argv, "--device", &bad))) device = v;
        else if ((v = dmn_opt(&i, argc, argv, "--chat-template", &bad))) tfile = v;
        else if ((v = dmn_opt(&i, argc, argv, "--system", &bad))) system = v;
        else if ((v = dmn_opt(&i, argc, argv, "--max-tokens", &bad))) {
            if (dmn_parse_int("--max-tokens", v, 1, 1 << 24, &max_tokens)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-dtype", &bad))) {
            if (dmn_parse_gpu_dtype(v, &half)) return 2;
        } else if ((t = dmn_sampling_opt(&i, argc, argv, &gp.sampling, &bad))) {
            if (t < 0) return 2;
        } else if (!bad) {
            fprintf(stderr, "tandem chat: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad) return usage(stderr);
    char defdir[4096], err[1024];
    if (!dir) {
        dmn_default_model(defdir, sizeof defdir);
        dir = defdir;
    }
    int rc = 1;
    model *m = NULL;
    model_tok *tok = NULL;
    model_tmpl *tm = NULL;
    accel_dev *d = NULL;
    accel_seq *s = NULL;
    char *src = NULL, *line = NULL;
    int32_t *prev = NULL;
    size_t n_prev = 0;
    float *lg = NULL;
    convo cv = {0};
    if (!(m = model_load(dir, err, sizeof err)) || !(tok = model_tok_load_dir(dir, err, sizeof err))) {
        fprintf(stderr, "tandem chat: %s\n", err);
        goto out;
    }
    const char *tsrc = model_tok_chat_template(tok);
    if (tfile) {
        if (!(src = model_read_file(tfile, 1 << 20, NULL))) {
            perror(tfile);
            goto out;
        }
        tsrc = src;
    }
    if (!tsrc) {
        fprintf(stderr, "tandem chat: %s has no chat_template; give one with --chat-template FILE\n", dir);
        rc = 2;
        goto out;
    }
    if (!(tm = model_tmpl_compile(tsrc, strlen(tsrc), err, sizeof err))) {
        fprintf(stderr, "tandem chat: template: %s\n", err);
        goto out;
    }
    accel_opts o = {.gpu_half = half};
    if (!(d = devices_open(device, m, &o, err, sizeof err))) {
        fprintf(stderr, "tandem chat: %s\n", err);
        goto out;
    }
    int n_ctx = model_context_limit(&m->cfg), vocab = m->cfg.vocab;
    if (accel_seq_new(d, n_ctx, &s) || !(lg = malloc(vocab * sizeof(float))) ||
        !(line = malloc(MAX_LINE))) {
        fprintf(stderr, "tandem chat: cannot reserve a %d-token context on %s\n", n_ctx, device);
        goto out;
    }
    if (system && convo_add(&cv, "system", system, strlen(system))) goto out;
    gp.eos_ids = m->cfg.eos_ids;
    gp.n_eos = m->cfg.n_eos;
    gp.n_ctx = n_ctx;
    gp.max_tokens = (int)max_tokens;
    int tty = isatty(0);
    for (;;) {
        if (tty) fputs("> ", stderr);
        if (!fgets(line, MAX_LINE, stdin)) break;
        size_t len = strcspn(line, "\n");
        line[len] = 0;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            convo_clear(&cv, system ? 1 : 0);
            continue;
        }
        if (!len) continue;
        if (convo_add(&cv, "user", line, len)) {
            fprintf(stderr, "tandem chat: the conversation is full\n");
            break;
        }
        char *ctx = proto_cli_conversation_json((const char *const *)cv.role,
                                                (const char *const *)cv.content, cv.n, 1,
                                                model_tok_bos_token(tok), model_tok_eos_token(tok));
        char *text = NULL;
        size_t tlen = 0;
        if (!ctx) {
            fprintf(stderr, "tandem chat: the input is not valid UTF-8\n");
            convo_clear(&cv, cv.n - 1);
            continue;
        }
        int st = model_tmpl_render_conversation(tm, ctx, strlen(ctx), NULL, &text, &tlen, err, sizeof err);
        free(ctx);
        if (st) {
            fprintf(stderr, "tandem chat: template: %s\n", err);
            convo_clear(&cv, cv.n - 1);
            continue;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        int enc = model_tok_encode(tok, text, tlen, 0, &ids, &n);
        free(text);
        if (enc || n == 0 || (long)n >= n_ctx) {
            fprintf(stderr, "tandem chat: the conversation no longer fits the context (%d)\n", n_ctx);
            free(ids);
            break;
        }
        /* reuse the KV of the prefix this turn shares with the last one (at least one token is
         * prefilled so that there are logits to sample from) */
        size_t keep = 0;
        while (keep < n_prev && keep + 1 < n && prev[keep] == ids[keep]) keep++;
        if (keep > (size_t)accel_seq_len(d, s)) keep = accel_seq_len(d, s);
        accel_seq_truncate(d, s, (int)keep);
        accel_prefill_req r = {.seq = s, .ids = ids + keep, .n = (int)(n - keep), .logits = lg};
        if ((st = accel_prefill(d, &r))) {
            fprintf(stderr, "tandem chat: prefill: %s\n", accel_strerror(st));
            free(ids);
            break;
        }
        model_gen *g = model_gen_new(tok, &gp, vocab, ids, (int)n, 0, err, sizeof err);
        if (!g) {
            fprintf(stderr, "tandem chat: %s\n", err);
            free(ids);
            break;
        }
        char *reply = NULL;
        size_t rlen = 0;
        model_gen_out go;
        for (;;) {
            if (model_gen_step(g, lg, &go)) break;
            if (go.len) {
                fwrite(go.text, 1, go.len, stdout);
                fflush(stdout);
                char *nr = realloc(reply, rlen + go.len + 1);
                if (!nr) break;
                reply = nr;
                memcpy(reply + rlen, go.text, go.len);
                rlen += go.len;
                reply[rlen] = 0;
            }
            if (go.finish != MODEL_FINISH_NONE) break;
            if ((st = accel_decode(d, 1, &s, &go.token, lg))) {
                fprintf(stderr, "\ntandem chat: decode: %s\n", accel_strerror(st));
                break;
            }
        }
        fputc('\n', stdout);
        fflush(stdout);
        model_gen_free(g);
        convo_add(&cv, "assistant", reply ? reply : "", rlen);
        free(reply);
        /* the sequence now holds the prompt plus the reply's tokens except the last sampled one */
        free(prev);
        prev = ids;
        n_prev = n;
        if (st) break;
    }
    rc = 0;
out:
    convo_clear(&cv, 0);
    free(prev);
    free(line);
    free(lg);
    if (s) accel_seq_free(d, s);
    accel_free(d);
    model_tmpl_free(tm);
    free(src);
    model_tok_free(tok);
    model_free(m);
    return rc;
}
