/* scheduler/sched_choice.c — one choice of a request: the token after a logits row.
 *
 * Per token, on the device's worker thread, model/gen.h does the work in the order every caller
 * shares (sample -> record for penalties -> finish rules -> streaming detokenization -> stop
 * matching, held-back text flushed on any other finish); this file turns its output into
 * events: one TOKEN event with the final text delta (and logprobs when asked), and a
 * CHOICE_DONE event when the choice finished. */
#include "scheduler/sched_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const model_gvocab *sched_grammar_vocab(sched *s)
{
    const model_config *mc = &s->m->cfg;
    if (!s->gvocab) s->gvocab = model_gen_vocab_new(s->tok, s->vocab, mc->eos_ids, mc->n_eos);
    return s->gvocab;
}

int sched_choice_init(sched_choice *c, sched *s, const sched_params *p, int index, char *err,
                      size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->index = index;
    const model_config *mc = &s->m->cfg;
    model_gen_params gp = {0};
    gp.sampling = p->sampling;
    gp.stops = p->stop;
    gp.n_stops = p->n_stop;
    gp.max_tokens = p->max_tokens;
    gp.n_ctx = model_context_limit(mc); /* what sched_submit admits prompt + max_tokens to */
    gp.ignore_eos = p->ignore_eos;
    gp.eos_ids = mc->eos_ids;
    gp.n_eos = mc->n_eos;
    gp.skip_special = 1; /* special tokens (<s>, <|eot_id|>) are control, not text */
    gp.continuation = p->continuation;
    if (p->grammar) {
        /* the vocabulary's trie, once per scheduler (sched_submit runs on the loop thread) */
        if (!sched_grammar_vocab(s)) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        gp.grammar = p->grammar;
        gp.gvocab = s->gvocab;
    }
    c->gen = model_gen_new(s->tok, &gp, s->vocab, p->prompt, p->n_prompt, index, err, errlen);
    c->finish = MODEL_FINISH_NONE;
    return c->gen ? 0 : -1;
}

void sched_choice_deinit(sched_choice *c, accel_dev *dev, unsigned which, int all)
{
    accel_seq **seqs[] = {&c->seq, &c->pseq, &c->dseq};
    for (int i = 0; i < 3; i++) {
        if (!(which >> i & 1u)) continue;
        /* a layer-split chunk of the sequence a prefill runs in goes with it */
        if (i < 2 && *seqs[i] && dev) c->pf_split_k = c->pf_layer = 0;
        if (*seqs[i] && dev) accel_seq_free(dev, *seqs[i]);
        if (dev) *seqs[i] = NULL;
    }
    /* the reader is the decode worker's (SCHED_SEQ_IMPORT): on a split placement the prefill
     * worker's final free leaves it to the card, which frees it itself (sched_handover_stop);
     * the loop's last free (no device: every worker is done with the request) takes what is left */
    if ((which & SCHED_SEQ_IMPORT) || (all && !dev)) {
        proto_kv_reader_free(c->kvr);
        c->kvr = NULL;
    }
    if (which & SCHED_SEQ_PREFILL) {
        free(c->pf_buf);
        c->pf_buf = NULL;
        c->pf_ids = NULL;
    }
    if (!all) return;
    free(c->pf_buf);
    c->pf_buf = NULL;
    model_gen_free(c->gen);
    c->gen = NULL;
    free(c->hist);
    c->hist = NULL;
}

int sched_choice_prefill_ids(sched_req *r, sched_choice *c)
{
    free(c->pf_buf);
    c->pf_buf = NULL;
    c->pf_done = 0;
    c->pf_split_k = c->pf_layer = 0;
    if (!r->moved || !c->n_hist) {
        c->pf_ids = r->prompt;
        c->pf_n = r->n_prompt;
        return 0;
    }
    /* After a move: the prompt and every token generated so far (the last one was sampled but
     * never fed), so the prefill's logits predict the next token. */
    c->pf_buf = malloc(sizeof(int32_t) * (size_t)(r->n_prompt + c->n_hist));
    if (!c->pf_buf) return SCHED_ERR_NOMEM;
    memcpy(c->pf_buf, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    memcpy(c->pf_buf + r->n_prompt, c->hist, sizeof(int32_t) * (size_t)c->n_hist);
    c->pf_ids = c->pf_buf;
    c->pf_n = r->n_prompt + c->n_hist;
    return 0;
}

static void post_token(sched *s, sched_req *r, sched_choice *c, const model_gen_out *o, double t)
{
    sched_node *n = sched_node_new(o->len);
    if (!n) return; /* host OOM: this token's text is lost; the request still finishes */
    n->kind = SCHED_NODE_EVENT;
    n->req = r;
    sched_event *ev = &n->ev;
    ev->type = SCHED_EV_TOKEN;
    ev->choice = c->index;
    ev->t = t;
    if (o->len) memcpy(n->data, o->text, o->len);
    ev->text = n->data;
    ev->text_len = o->len;
    ev->token_id = o->token;
    if (r->logprobs) {
        /* Token bytes point into the scheduler's token table, which outlives every event. */
        ev->has_logprobs = 1;
        ev->token.bytes = sched_token_bytes(&s->tokens, o->token, &ev->token.len);
        ev->token.logprob = o->lp.logprob;
        ev->n_top = o->lp.n_top;
        for (int i = 0; i < o->lp.n_top && i < MODEL_MAX_TOP_LOGPROBS; i++) {
            ev->top[i].bytes = sched_token_bytes(&s->tokens, o->lp.top_ids[i], &ev->top[i].len);
            ev->top[i].logprob = o->lp.top_logprobs[i];
        }
    }
    sched_post(s, n);
}

static void post_choice_done(sched *s, sched_req *r, sched_choice *c, double t)
{
    sched_node *n = sched_node_new(0);
    if (!n) return;
    n->kind = SCHED_NODE_EVENT;
    n->req = r;
    n->ev.type = SCHED_EV_CHOICE_DONE;
    n->ev.choice = c->index;
    n->ev.finish = c->finish;
    n->ev.t = t;
    n->ev.text = n->data;
    sched_post(s, n);
}

/* A row without one finite logit is a device's garbage (the sampler would answer -1 after
 * advancing its state): refuse it before sampling, so that the request can move unchanged. */
static int any_finite(const float *x, int n)
{
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) return 1;
    return 0;
}

static int choice_next(sched *s, sched_req *r, sched_choice *c, float *logits, int32_t token,
                       double t);

int sched_choice_step(sched *s, sched_req *r, sched_choice *c, float *logits, double t)
{
    if (!any_finite(logits, s->vocab)) return ACCEL_ERR_DEVICE;
    return choice_next(s, r, c, logits, -1, t);
}

int sched_choice_step_token(sched *s, sched_req *r, sched_choice *c, int32_t token, double t)
{
    if (token < 0) return ACCEL_ERR_DEVICE;
    return choice_next(s, r, c, NULL, token, t);
}

/* logits NULL: the token given (a plain-greedy choice's, picked on the device) */
static int choice_next(sched *s, sched_req *r, sched_choice *c, float *logits, int32_t token,
                       double t)
{
    model_gen_out o;
    if (c->n_hist == c->cap_hist) {
        int cap = c->cap_hist ? 2 * c->cap_hist : 64;
        if (cap > r->max_tokens) cap = r->max_tokens;
        int32_t *h = realloc(c->hist, sizeof(int32_t) * (size_t)(cap > c->n_hist ? cap : c->n_hist + 1));
        if (!h) return SCHED_ERR_NOMEM;
        c->hist = h;
        c->cap_hist = cap > c->n_hist ? cap : c->n_hist + 1;
    }
    int rc = logits ? model_gen_step(c->gen, logits, &o) : model_gen_step_token(c->gen, token, &o);
    if (rc == -3) return ACCEL_ERR_DEVICE;  /* not reached: a token in range for a plain choice */
    if (rc == -2) return SCHED_ERR_INVALID; /* the grammar cannot go on (model_gen_error) */
    if (rc < 0) return SCHED_ERR_NOMEM;
    if (o.token < 0) return ACCEL_ERR_DEVICE; /* not reached: a finite logit was there */
    c->hist[c->n_hist++] = o.token;
    c->generated++;
    atomic_fetch_add(&r->generated, 1);
    if (r->t_first_token == 0) r->t_first_token = t;
    post_token(s, r, c, &o, t);
    if (o.finish != MODEL_FINISH_NONE) {
        c->finish = o.finish;
        r->n_done++;
        post_choice_done(s, r, c, t);
    } else {
        c->last = o.token;
    }
    return 0;
}

uint64_t sched_choice_kv_kind(const sched_req *r, const sched_choice *c)
{
    return c->approx ? sparse_params_key(&r->sparse.p) : 0;
}
