/* tandem chat — an interactive conversation through the model's chat template.
 *
 * Each turn renders the whole conversation with add_generation_prompt, tokenizes it without
 * adding special tokens (the template writes them, as apply_chat_template(tokenize=True) does),
 * and sends it as one request through the scheduler `tandem serve` runs (daemon/cli_sched.h;
 * prefill and decode on --device, as a chat completion pinned there), streaming the reply until
 * an eos token, a stop or the context ends. Lines starting with "/" are commands: /exit, /reset.
 *
 * Each turn prefills the whole conversation again, as the daemon does for every request: the
 * backends' prefill and decode compute the same numbers (tests/accel: conf_prefill_decode_*; the
 * card's prefill kernel matches its decode kernel exactly, e2e fpga_eval_prefill_equals_decode),
 * so the replies are those of keeping the previous turn's KV, at the cost of a longer prefill. */
#include "daemon/cli.h"
#include "daemon/cli_sched.h"
#include "daemon/cmd.h"
#include "devices/devices.h"
#include "model/gen/gen.h"
#include "model/tmpl/tmpl.h"
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

/* One turn's reply, as its events arrive. */
typedef struct chat_turn {
    char *reply;
    size_t len;
    int failed;
    char msg[512];
} chat_turn;

static void on_event(void *ctx, const sched_event *ev)
{
    chat_turn *t = ctx;
    if (ev->type == SCHED_EV_ERROR) {
        t->failed = 1;
        snprintf(t->msg, sizeof t->msg, "%s",
                 ev->message ? ev->message : sched_strerror(ev->status));
    }
    if (ev->type != SCHED_EV_TOKEN || !ev->text_len) return;
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    char *nr = realloc(t->reply, t->len + ev->text_len + 1);
    if (!nr) return; /* the reply kept in the conversation loses this piece */
    t->reply = nr;
    memcpy(t->reply + t->len, ev->text, ev->text_len);
    t->len += ev->text_len;
    t->reply[t->len] = 0;
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
    model_sampling sampling = model_sampling_default();
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
        } else if ((t = dmn_sampling_opt(&i, argc, argv, &sampling, &bad))) {
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
    dmn_cli_sched *cs = NULL;
    char *src = NULL, *line = NULL;
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
    accel_info di;
    accel_get_info(d, &di);
    if (!(cs = dmn_cli_sched_new(&d, 1, tok, di.kind == ACCEL_KIND_FPGA, err, sizeof err)) ||
        !(line = malloc(MAX_LINE))) {
        fprintf(stderr, "tandem chat: %s\n", cs ? "out of memory" : err);
        goto out;
    }
    int n_ctx = model_context_limit(&m->cfg);
    if (system && convo_add(&cv, "system", system, strlen(system))) goto out;
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
        /* the scheduler admits prompt + max_tokens within the context; the reply stops there
         * anyway ("length", as a larger max_tokens does when the context fills) */
        int room = n_ctx - (int)n;
        sched_params sp = {.prompt = ids, .n_prompt = (int)n, .n = 1, .sampling = sampling,
                           .max_tokens = max_tokens < room ? (int)max_tokens : room,
                           .prefill_on = 1u, .decode_on = 1u};
        chat_turn turn = {0};
        st = dmn_cli_sched_run(cs, &sp, on_event, &turn, err, sizeof err);
        free(ids);
        if (st || turn.failed) fprintf(stderr, "\ntandem chat: %s\n", st ? err : turn.msg);
        fputc('\n', stdout);
        fflush(stdout);
        convo_add(&cv, "assistant", turn.reply ? turn.reply : "", turn.len);
        free(turn.reply);
        if (st || turn.failed) break;
    }
    rc = 0;
out:
    convo_clear(&cv, 0);
    free(line);
    dmn_cli_sched_free(cs); /* before the device it runs on */
    accel_free(d);
    model_tmpl_free(tm);
    free(src);
    model_tok_free(tok);
    model_free(m);
    return rc;
}
