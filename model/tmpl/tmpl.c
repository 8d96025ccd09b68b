/* model/tmpl/tmpl.c — the public face of the chat-template interpreter: compile, render, limits and
 * error reporting. See model/tmpl/tmpl.h for the contract and model/tmpl/tmpl_int.h for the
 * design. */
#include "model/tmpl/tmpl_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Default bounds. A real prompt is at most a few MB of text (128k tokens ~ 0.5 MB) and real
 * templates spend ~100 steps per message, so these only stop runaway templates or inputs:
 * 64 MiB of output, 256 MiB of live values, 50M steps (about a second at ~20 ns/step), and 512
 * levels of nesting (jinja2 under CPython hits RecursionError a little past ~300 macro levels;
 * 512 levels of plain recursion stay inside a 1 MiB C stack; what a level costs varies, so the
 * stack itself is bounded too: TMPL_STACK_MAX, tmpl_int.h). */
#define DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)256 << 20)
#define DEFAULT_MAX_STEPS 50000000ull
#define DEFAULT_MAX_DEPTH 512

void model_tmpl_default_opts(model_tmpl_opts *o)
{
    memset(o, 0, sizeof *o);
    o->limits.max_output = DEFAULT_MAX_OUTPUT;
    o->limits.max_memory = DEFAULT_MAX_MEMORY;
    o->limits.max_steps = DEFAULT_MAX_STEPS;
    o->limits.max_depth = DEFAULT_MAX_DEPTH;
}

model_tmpl *model_tmpl_compile(const char *source, size_t len, char *err, size_t errlen)
{
    if (errlen) err[0] = 0;
    if (!proto_utf8_valid(source, len)) {
        snprintf(err, errlen, "TemplateSyntaxError: the template is not valid UTF-8");
        return NULL;
    }
    tmpl_toks toks;
    if (model_tmpl_lex(source, len, &toks, err, errlen)) return NULL;
    model_tmpl *t = calloc(1, sizeof *t);
    if (!t) {
        model_tmpl_toks_free(&toks);
        snprintf(err, errlen, "TemplateSyntaxError: out of memory");
        return NULL;
    }
    int rc = model_tmpl_parse(t, &toks, err, errlen);
    model_tmpl_toks_free(&toks);
    if (rc) {
        model_tmpl_free(t);
        return NULL;
    }
    return t;
}

void model_tmpl_free(model_tmpl *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->nallocs; i++) free(t->allocs[i]);
    free(t->allocs);
    free(t->names);
    free(t->name_len);
    free(t->name_vals);
    free(t->name_idx);
    free(t);
}

int model_tmpl_fail(tmpl_rt *r, const char *kind, const char *fmt, ...)
{
    if (r->ek != TMPL_EK_NONE) return -1; /* the first error is the one to report */
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!strcmp(kind, "TemplateError")) { /* raise_exception(): the message is the error */
        r->ek = TMPL_EK_RAISED;
        snprintf(r->err, sizeof r->err, "%s", msg);
    } else {
        r->ek = !strcmp(kind, "ContextError") ? TMPL_EK_CONTEXT : TMPL_EK_RUNTIME;
        snprintf(r->err, sizeof r->err, "%s: %s (line %d)", kind, msg, r->line);
    }
    return -1;
}

int model_tmpl_fail_again(tmpl_rt *r, const char *text)
{
    if (r->ek != TMPL_EK_NONE) return -1;
    r->ek = TMPL_EK_RUNTIME;
    snprintf(r->err, sizeof r->err, "%s", text);
    return -1;
}

int model_tmpl_fail_limit(tmpl_rt *r, const char *what)
{
    if (r->ek != TMPL_EK_NONE) return -1;
    r->ek = TMPL_EK_LIMIT;
    snprintf(r->err, sizeof r->err, "LimitError: the template exceeded its %s limit (line %d)", what, r->line);
    return -1;
}

static int render(const model_tmpl *t, const char *ctx, size_t ctx_len, bool conversation, const model_tmpl_opts *opts,
                  char **out, size_t *out_len, char *err, size_t errlen)
{
    model_tmpl_opts defaults;
    if (!opts) {
        model_tmpl_default_opts(&defaults);
        opts = &defaults;
    }
    *out = NULL;
    if (out_len) *out_len = 0;
    if (errlen) err[0] = 0;
    tmpl_rt *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "MemoryError: out of memory");
        return MODEL_TMPL_ERR_RUNTIME;
    }
    r->t = t;
    r->stack0 = (uintptr_t)__builtin_frame_address(0);
    r->lim = opts->limits;
    r->now = opts->now ? opts->now : time(NULL);
    r->live.next = r->live.prev = &r->live;
    proto_buf buf = {.max = r->lim.max_output};
    r->out = &buf;
    tmpl_scope *root = model_tmpl_scope_new(r, NULL);
    int rc = root ? model_tmpl_ctx_load(r, ctx, ctx_len, root, conversation) : -1;
    if (!rc) rc = model_tmpl_exec_body(r, root, t->body, t->nbody) < 0 ? -1 : 0;
    if (root) {
        /* drop the variables first: macros defined here point back at this scope */
        model_tmpl_scope_clear(r, root);
        tmpl_decref_obj(r, &root->h);
    }
    size_t swept = model_tmpl_sweep(r);
    if (opts->stats) {
        opts->stats->steps = r->steps;
        opts->stats->peak_memory = r->peak;
        opts->stats->swept = swept;
    }
    int status = MODEL_TMPL_OK;
    if (rc) {
        snprintf(err, errlen, "%s", r->ek ? r->err : "TemplateRuntimeError: render failed");
        status = r->ek == TMPL_EK_RAISED ? MODEL_TMPL_ERR_RAISED
                 : r->ek == TMPL_EK_LIMIT ? MODEL_TMPL_ERR_LIMIT
                 : r->ek == TMPL_EK_CONTEXT ? MODEL_TMPL_ERR_CONTEXT
                                             : MODEL_TMPL_ERR_RUNTIME;
        proto_buf_deinit(&buf);
    } else {
        if (!buf.p && proto_buf_add(&buf, "", 0)) {
            snprintf(err, errlen, "MemoryError: out of memory");
            status = MODEL_TMPL_ERR_RUNTIME;
        } else {
            *out = buf.p;
            if (out_len) *out_len = buf.len;
        }
    }
    free(r);
    return status;
}

int model_tmpl_render_ex(const model_tmpl *t, const char *ctx, size_t ctx_len, const model_tmpl_opts *opts,
                         char **out, size_t *out_len, char *err, size_t errlen)
{
    return render(t, ctx, ctx_len, false, opts, out, out_len, err, errlen);
}

int model_tmpl_render_conversation(const model_tmpl *t, const char *input, size_t len, const model_tmpl_opts *opts,
                                   char **out, size_t *out_len, char *err, size_t errlen)
{
    return render(t, input, len, true, opts, out, out_len, err, errlen);
}

int model_tmpl_render(const model_tmpl *t, const char *context_json, char **out, char *err, size_t errlen)
{
    return model_tmpl_render_ex(t, context_json, strlen(context_json), NULL, out, NULL, err, errlen) ? -1 : 0;
}
