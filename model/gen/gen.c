/* model/gen/gen.c — see gen.h. */
#include "model/gen/gen.h"
#include "model/gen/stop.h"
#include "proto/buf.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A continuation's stream is first fed the prompt's last CONT_WINDOW ids: what a decoder keeps
 * between tokens (Metaspace's and Strip's start-of-text state, an unfinished UTF-8 character, a
 * cleanup pass's held tail) never reaches further back, so the text equals the whole prompt's
 * continuation; only a byte-fallback run still open at the prompt's end and longer than the window
 * could decide its validity differently. Bounded so n choices of a long prompt cost nothing. */
#define CONT_WINDOW 64

struct model_gen {
    model_sampler *sampler;
    model_tok_stream *stream; /* NULL without a tokenizer */
    model_stop *stop;         /* NULL without stop strings */
    model_gmatch *gm;         /* NULL without a grammar */
    int32_t *eos;
    int n_eos, ignore_eos, max_tokens, n_ctx, n_past, generated, want_lp, vocab;
    char err[200];
    proto_buf text; /* the step's text */
};

int model_gen_keeps_first_space(const model_tok *tok, int skip_special, const int32_t *prompt,
                                int n_prompt)
{
    if (!tok || n_prompt <= 0) return 0;
    int32_t probe = model_tok_space_probe(tok);
    if (probe < 0 || !model_tok_strips_first_space(tok)) return 0;
    int from = n_prompt > CONT_WINDOW ? n_prompt - CONT_WINDOW : 0;
    model_tok_stream *q = model_tok_stream_new(tok, skip_special);
    if (!q || model_tok_stream_skip(q, prompt + from, (size_t)(n_prompt - from))) {
        model_tok_stream_free(q);
        return -1;
    }
    size_t a = 0, b = 0;
    const char *x = model_tok_stream_push(q, probe, &a);
    int first = x && a ? x[0] : -1;
    const char *y = first < 0 && x ? model_tok_stream_flush(q, &b) : NULL;
    if (first < 0 && y && b) first = y[0];
    model_tok_stream_free(q);
    return x ? first == ' ' : -1;
}

static int append(model_gen *g, const char *s, size_t n)
{
    return proto_buf_add(&g->text, s, n);
}

model_gen *model_gen_new(const model_tok *tok, const model_gen_params *p, int vocab,
                         const int32_t *prompt, int n_prompt, int choice, char *err, size_t errlen)
{
    model_gen *g = calloc(1, sizeof *g);
    if (!g) goto oom;
    g->sampler = model_sampler_new(&p->sampling, vocab, prompt, n_prompt, choice, err, errlen);
    if (!g->sampler) goto fail;
    if (p->n_stops > 0) {
        g->stop = model_stop_new(p->stops, p->n_stops, err, errlen);
        if (!g->stop) goto fail;
    }
    if (p->grammar && p->gvocab && !(g->gm = model_gmatch_new(p->grammar, p->gvocab))) goto oom;
    if (tok && !(g->stream = model_tok_stream_new(tok, p->skip_special))) goto oom;
    if (g->stream && p->continuation && n_prompt > 0) {
        int from = n_prompt > CONT_WINDOW ? n_prompt - CONT_WINDOW : 0;
        if (model_tok_stream_skip(g->stream, prompt + from, (size_t)(n_prompt - from))) goto oom;
        int keeps = g->gm ? model_gen_keeps_first_space(tok, p->skip_special, prompt, n_prompt) : 0;
        if (keeps < 0) goto oom;
        if (keeps) model_gmatch_keep_first_space(g->gm);
    }
    if (p->n_eos > 0) {
        if (!(g->eos = malloc(p->n_eos * sizeof *g->eos))) goto oom;
        memcpy(g->eos, p->eos_ids, p->n_eos * sizeof *g->eos);
    }
    g->n_eos = p->n_eos;
    g->vocab = vocab;
    g->ignore_eos = p->ignore_eos;
    g->max_tokens = p->max_tokens;
    g->n_ctx = p->n_ctx;
    g->n_past = n_prompt;
    g->want_lp = p->sampling.logprobs || p->sampling.top_logprobs;
    if (proto_buf_reserve(&g->text, 256)) goto oom;
    return g;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    model_gen_free(g);
    return NULL;
}

static int step_rest(model_gen *g, model_gen_out *out);

int model_gen_step(model_gen *g, float *logits, model_gen_out *out)
{
    memset(out, 0, sizeof *out);
    if (g->gm && model_gmatch_apply(g->gm, logits, g->vocab) <= 0) {
        if (!model_gmatch_error(g->gm)[0]) snprintf(g->err, sizeof g->err, "grammar: no token of the vocabulary can continue the text");
        else snprintf(g->err, sizeof g->err, "%s", model_gmatch_error(g->gm));
        return -2;
    }
    out->token = model_sampler_sample(g->sampler, logits, g->want_lp ? &out->lp : NULL);
    if (g->gm && model_gmatch_accept(g->gm, out->token)) {
        snprintf(g->err, sizeof g->err, "grammar: the sampled token was refused (%s)", model_gmatch_error(g->gm));
        return -2;
    }
    return step_rest(g, out);
}

int model_gen_plain_greedy(const model_gen *g)
{
    return !g->gm && !g->want_lp && model_sampler_plain_greedy(g->sampler);
}

int model_gen_step_token(model_gen *g, int32_t token, model_gen_out *out)
{
    memset(out, 0, sizeof *out);
    if (!model_gen_plain_greedy(g) || token < 0 || token >= g->vocab) return -3;
    out->token = token;
    return step_rest(g, out);
}

/* Everything after the token is chosen: the penalties' record, the text, the finish. */
static int step_rest(model_gen *g, model_gen_out *out)
{
    if (model_sampler_accept(g->sampler, out->token)) return -1;
    g->generated++;
    g->n_past++;
    int is_eos = !g->ignore_eos && model_finish_is_eos(out->token, g->eos, g->n_eos);
    int hit = 0;
    g->text.len = 0;
    g->text.p[0] = 0;
    if (g->stream && !is_eos) {
        size_t n;
        const char *t = model_tok_stream_push(g->stream, out->token, &n);
        if (!t) return -1;
        if (g->stop) {
            size_t m;
            const char *s = model_stop_push(g->stop, t, n, &m, &hit);
            if (!s || append(g, s, m)) return -1;
        } else if (append(g, t, n)) {
            return -1;
        }
    }
    out->finish = model_finish_step(out->token, g->ignore_eos ? NULL : g->eos,
                                    g->ignore_eos ? 0 : g->n_eos, hit, g->generated, g->max_tokens,
                                    g->n_past, g->n_ctx);
    /* A grammar that can take nothing more ends the choice here: "stop", before any length. */
    if (g->gm && out->finish != MODEL_FINISH_STOP && model_gmatch_done(g->gm)) out->finish = MODEL_FINISH_STOP;
    out->stop_string = hit;
    /* A finish for any other reason than a stop string releases what was held back. */
    if (out->finish != MODEL_FINISH_NONE && !hit && g->stream) {
        size_t n;
        const char *t = model_tok_stream_flush(g->stream, &n);
        if (!t) return -1;
        if (g->stop) {
            size_t m;
            int hit2 = 0;
            const char *s = model_stop_push(g->stop, t, n, &m, &hit2);
            if (!s || append(g, s, m)) return -1;
            if (!hit2) {
                s = model_stop_flush(g->stop, &m);
                if (!s || append(g, s, m)) return -1;
            } else {
                out->finish = MODEL_FINISH_STOP;
                out->stop_string = 1;
            }
        } else if (append(g, t, n)) {
            return -1;
        }
    }
    out->text = g->text.p;
    out->len = g->text.len;
    return 0;
}

int model_gen_has_grammar(const model_gen *g)
{
    return g->gm != NULL;
}

void model_gen_prefetch(model_gen *g)
{
    const uint64_t *mask;
    if (g->gm) model_gmatch_mask(g->gm, &mask, NULL);
}

int model_gen_generated(const model_gen *g)
{
    return g->generated;
}

const char *model_gen_error(const model_gen *g)
{
    return g->err;
}

void model_gen_free(model_gen *g)
{
    if (!g) return;
    model_gmatch_free(g->gm);
    model_sampler_free(g->sampler);
    model_tok_stream_free(g->stream);
    model_stop_free(g->stop);
    free(g->eos);
    proto_buf_deinit(&g->text);
    free(g);
}
