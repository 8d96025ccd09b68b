/* daemon/api_events.c — a request's scheduler events turned into bytes at once (daemon/api.c
 * says the plan): a streamed response's headers when the request is placed, one SSE chunk per
 * token, the whole response at DONE. Loop thread only. */
#include "daemon/api_int.h"
#include "daemon/log.h"
#include "proto/sse.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_keepalive(uv_timer_t *t)
{
    dmn_api_req *a = t->data;
    if (dmn_http_stream_idle(a->http) >= a->d->cfg.sse_keepalive * 0.999) {
        static const char ka[] = ": keep-alive\n\n";
        dmn_api_stream_bytes(a, ka, sizeof ka - 1);
    }
}

static void on_placed(dmn_api_req *a, const sched_event *ev)
{
    snprintf(a->prefill_dev, sizeof a->prefill_dev, "%s", ev->prefill_dev);
    snprintf(a->decode_dev, sizeof a->decode_dev, "%s", ev->decode_dev);
    snprintf(a->devices, sizeof a->devices, "prefill=%s; decode=%s", ev->prefill_dev, ev->decode_dev);
    if (ev->moves > 0) {
        /* A failover: the request continues on other devices; the client sees no error. The
         * header of a whole response names the devices that finished it and the one that
         * failed; a stream's headers are out already, so it gets an SSE comment (clients
         * ignore comments). */
        a->moves = ev->moves;
        snprintf(a->moved_from, sizeof a->moved_from, "%s", ev->failed_dev ? ev->failed_dev : "?");
        size_t n = strlen(a->devices);
        snprintf(a->devices + n, sizeof a->devices - n, "; moved_from=%s", a->moved_from);
        dmn_log(DMN_LOG_WARN, "request_moved", "id=%s moves=%d from=%s status=\"%s\" prefill=%s decode=%s",
                a->id, ev->moves, a->moved_from, sched_strerror(ev->failed_status), ev->prefill_dev, ev->decode_dev);
        if (a->stream && dmn_http_responded(a->http)) {
            char c[sizeof a->devices + 32];
            int k = snprintf(c, sizeof c, ": x-tandem-devices: %s\n\n", a->devices);
            if (k > 0 && (size_t)k < sizeof c) dmn_api_stream_bytes(a, c, (size_t)k);
        }
        return;
    }
    if (!a->t_started) a->t_started = ev->t;
    if (!a->stream || a->keepalive_on) return; /* the batch form: the first part's placement opens it */
    /* Headers go out now, before the prefill: the client sees where it runs and, during a long
     * prefill, keep-alive comments. Errors after this point are SSE error events. */
    dmn_http_add_header(a->http, "x-tandem-devices", a->devices);
    dmn_http_add_header(a->http, "x-request-id", a->id);
    dmn_api_count_status(a, 200);
    dmn_http_stream_begin(a->http, 200, "text/event-stream");
    uint64_t ms = (uint64_t)(a->d->cfg.sse_keepalive * 1000);
    if (ms < 1) ms = 1;
    uv_timer_init(a->d->loop, &a->keepalive);
    a->keepalive.data = a;
    a->keepalive_on = 1;
    uv_timer_start(&a->keepalive, on_keepalive, ms, ms);
}

static void lp_of(const sched_event *ev, proto_lp_token *t, size_t offset)
{
    memset(t, 0, sizeof *t);
    t->bytes = ev->token.bytes;
    t->len = ev->token.len;
    t->logprob = ev->token.logprob;
    t->text_offset = offset;
    t->n_top = ev->n_top;
    for (int i = 0; i < ev->n_top && i < PROTO_MAX_TOP_LOGPROBS; i++) {
        t->top[i].bytes = ev->top[i].bytes;
        t->top[i].len = ev->top[i].len;
        t->top[i].logprob = ev->top[i].logprob;
    }
}

/* A chat stream's first chunk of a choice says only who speaks, as OpenAI and vLLM send it:
 * delta {"role": "assistant", "content": ""} (and logprobs {"content": []} when asked); the
 * text starts in the next. Clients' stream helpers count on it: openai-node's accumulator
 * appended the first chunk's logprobs twice when that chunk also carried tokens. */
static void stream_start(dmn_api_req *a, api_choice *c, int index)
{
    if (c->started || a->meta.ep != PROTO_EP_CHAT) return;
    proto_choice_out out = {.index = index, .logprobs = a->logprobs};
    dmn_api_stream_event(a, proto_chunk_json(&a->meta, &out, 1, a->include_usage));
    c->started = 1;
}

/* Keeps a token's logprobs on the choice: the whole answer's (not streamed), or a stream's held
 * tokens' until their text goes out (host memory short: that token's are lost, not the rest). */
static void lp_keep(api_choice *c, const proto_lp_token *lp)
{
    if (c->n_lps == c->cap_lps) {
        int cap = c->cap_lps ? c->cap_lps * 2 : 16;
        proto_lp_token *p = realloc(c->lps, sizeof *p * (size_t)cap);
        if (p) {
            c->lps = p;
            c->cap_lps = cap;
        }
    }
    if (c->n_lps < c->cap_lps) c->lps[c->n_lps++] = *lp;
}

static void on_token(dmn_api_req *a, const api_part *pt, const sched_event *ev)
{
    if (ev->choice < 0 || ev->choice >= a->n) return;
    api_choice *c = &a->choices[ev->choice];
    if (a->no_tokens) {
        /* max_tokens 0: the token goes nowhere; a stream's echo still goes out */
        if (a->stream && pt->echo && !c->started) {
            proto_choice_out e = {.index = ev->choice, .text = pt->echo, .text_len = pt->echo_len};
            dmn_api_stream_event(a, proto_chunk_json(&a->meta, &e, 0, a->include_usage));
            c->started = 1;
        }
        return;
    }
    dmn_metrics *m = &a->d->metrics;
    if (c->t_last > 0) dmn_hist_observe(&m->itl, ev->t - c->t_last);
    c->t_last = ev->t;
    if (!a->t_first) a->t_first = ev->t;
    a->completion_tokens++;
    proto_lp_token lp;
    if (ev->has_logprobs) {
        lp_of(ev, &lp, c->lp_offset);
        /* where the next token's text starts: this one's bytes, less what the text leaves out —
         * a special token's (no text), the first token's leading space when the text drops it */
        size_t n = ev->token.len;
        if (model_tok_is_special(a->d->tok, ev->token_id))
            n = 0;
        else if (!c->lp_started && pt->strip_first && n && ev->token.bytes[0] == ' ')
            n--;
        c->lp_offset += n;
        c->lp_started = 1;
    }
    if (a->stream) {
        const char *text = ev->text;
        size_t len = ev->text_len;
        if (a->tools && c->tools.mode != DMN_TOOLS_TEXT) {
            /* the text may become tool calls: kept whole for the parse at the end; what is
             * content whatever comes next goes out now, the rest is held */
            proto_buf_add(&c->text, ev->text, ev->text_len);
            size_t k = dmn_tools_content(a->tools, (enum proto_tool_family)a->tool_family,
                                         &c->tools, c->text.p, c->text.len);
            if (k <= c->tools.sent) {
                /* held: its logprobs go out with the text that follows (or at the end) */
                if (ev->has_logprobs) lp_keep(c, &lp);
                return;
            }
            text = c->text.p + c->tools.sent;
            len = k - c->tools.sent;
            c->tools.sent = k;
        }
        if (pt->echo && !c->started) {
            proto_choice_out e = {.index = ev->choice, .text = pt->echo, .text_len = pt->echo_len};
            dmn_api_stream_event(a, proto_chunk_json(&a->meta, &e, 0, a->include_usage));
            c->started = 1;
        }
        if (!len && !ev->has_logprobs) return; /* held back by the detokenizer/stops */
        proto_choice_out out = {.index = ev->choice,
                                .text = text,
                                .text_len = len,
                                .logprobs = ev->has_logprobs,
                                .lps = &lp,
                                .n_lps = ev->has_logprobs};
        if (c->n_lps && ev->has_logprobs) { /* the held tokens' first, then this one's */
            lp_keep(c, &lp);
            out.lps = c->lps;
            out.n_lps = c->n_lps;
        }
        stream_start(a, c, ev->choice);
        dmn_api_stream_event(a, proto_chunk_json(&a->meta, &out, !c->started, a->include_usage));
        c->n_lps = 0;
        c->started = 1;
        /* plain text from here on: nothing more is kept */
        if (c->tools.mode == DMN_TOOLS_TEXT) c->text.len = 0;
    } else {
        proto_buf_add(&c->text, ev->text, ev->text_len);
        if (ev->has_logprobs) lp_keep(c, &lp);
    }
}

/* The last chunk of a stream says where the request ended (the x-tandem-devices header went out
 * before a failover could move it): "tandem": {"devices": "prefill=...; decode=...[; moved_from=
 * ...]", "moves": N}, a field OpenAI clients ignore. json: a chunk object from proto/ (malloc'ed);
 * returns it with the field, or as it was when memory is short. */
static char *with_devices(const dmn_api_req *a, char *json)
{
    size_t n = json ? strlen(json) : 0;
    if (!n || json[n - 1] != '}') return json;
    char esc[2 * sizeof a->devices], tail[sizeof esc + 64];
    size_t k = 0;
    for (const char *p = a->devices; *p && k + 3 < sizeof esc; p++) {
        if ((unsigned char)*p < 0x20) continue;
        if (*p == '"' || *p == '\\') esc[k++] = '\\';
        esc[k++] = *p;
    }
    esc[k] = 0;
    int t = snprintf(tail, sizeof tail, ",\"tandem\":{\"devices\":\"%s\",\"moves\":%d}}", esc,
                     a->moves);
    char *out = t > 0 ? realloc(json, n + (size_t)t) : NULL;
    if (!out) return json;
    memcpy(out + n - 1, tail, (size_t)t + 1);
    return out;
}

static void on_choice_done(dmn_api_req *a, const sched_event *ev)
{
    if (ev->choice < 0 || ev->choice >= a->n) return;
    api_choice *c = &a->choices[ev->choice];
    c->finish = a->no_tokens ? "length" : model_finish_name(ev->finish);
    a->finish = c->finish;
    if (a->stream && a->tools && c->tools.mode != DMN_TOOLS_TEXT) {
        /* what was held back: calls, or after all the content it is */
        c->finish = dmn_tools_finish(a->tools, (enum proto_tool_family)a->tool_family, &c->tools, c->text.p, c->text.len, c->finish);
        int calls = c->tools.mode == DMN_TOOLS_CALLS;
        size_t end = calls ? c->tools.content_len : c->tools.cut ? c->tools.sent : c->text.len;
        size_t len = end > c->tools.sent ? end - c->tools.sent : 0; /* content not sent yet */
        proto_choice_out out = {.index = ev->choice,
                                .text = c->text.p + c->tools.sent,
                                .text_len = len,
                                .calls = c->tools.calls,
                                .n_calls = c->tools.n_calls,
                                .function_call = a->tools->legacy,
                                .logprobs = c->n_lps > 0, /* the held tokens': as a whole answer */
                                .lps = c->lps,
                                .n_lps = c->n_lps};
        if (len || calls || c->n_lps) {
            stream_start(a, c, ev->choice);
            dmn_api_stream_event(a, proto_chunk_json(&a->meta, &out, !c->started, a->include_usage));
            c->started = 1;
        }
        c->n_lps = 0;
        a->finish = c->finish;
    }
    if (a->stream) {
        proto_choice_out out = {.index = ev->choice, .finish_reason = c->finish};
        stream_start(a, c, ev->choice);
        char *json = proto_chunk_json(&a->meta, &out, !c->started, a->include_usage);
        int last = !a->include_usage; /* without a usage chunk, the last choice's finish is last */
        for (int i = 0; i < a->n && last; i++) last = a->choices[i].finish != NULL;
        dmn_api_stream_event(a, last ? with_devices(a, json) : json);
        c->started = 1;
    }
}

static void on_done(dmn_api_req *a, const sched_event *ev)
{
    double c0 = dmn_api_thread_cpu();
    dmn_metrics *m = &a->d->metrics;
    a->done = 1;
    a->t_done = ev->t_done;
    a->t_first = ev->t_first_token;
    a->completion_tokens = a->no_tokens ? 0 : ev->completion_tokens;
    dmn_hist_observe(&m->e2e, ev->t_done - ev->t_arrival);
    dmn_hist_observe(&m->queue, ev->t_started - ev->t_arrival);
    if (ev->t_first_token > 0) {
        dmn_hist_observe(&m->ttft, ev->t_first_token - ev->t_arrival);
        dmn_hist_observe(&m->prefill, ev->t_first_token - ev->t_started);
        dmn_hist_observe(&m->decode, ev->t_done - ev->t_first_token);
    }
    dmn_hist_observe(&m->prompt_len, ev->prompt_tokens);
    dmn_hist_observe(&m->gen_len, ev->completion_tokens);
    m->prompt_tokens += (uint64_t)ev->prompt_tokens * (uint64_t)a->n_per;
    m->generation_tokens += (uint64_t)ev->completion_tokens;
    int any_stop = 0;
    for (int i = 0; i < a->n; i++) {
        api_choice *c = &a->choices[i];
        if (!a->stream && a->tools)
            c->finish = dmn_tools_finish(a->tools, (enum proto_tool_family)a->tool_family, &c->tools, c->text.p, c->text.len, c->finish);
        any_stop |= c->finish && (!strcmp(c->finish, "stop") || !strcmp(c->finish, "tool_calls"));
    }
    m->success[any_stop ? DMN_FINISH_STOP : DMN_FINISH_LENGTH]++;
    proto_usage u = {.prompt_tokens = ev->prompt_tokens,
                     .completion_tokens = a->completion_tokens,
                     .cached_tokens = ev->cached_tokens,
                     .has_prefill_density = ev->prefill_density >= 0,
                     .prefill_density = ev->prefill_density,
                     .has_decode_kv_read = ev->decode_kv_read >= 0,
                     .decode_kv_read = ev->decode_kv_read};
    if (a->stream) {
        if (a->include_usage)
            dmn_api_stream_event(a, with_devices(a, proto_usage_chunk_json(&a->meta, &u)));
        dmn_api_stream_finish(a);
        a->t_answered = sched_now();
        a->cpu_own += dmn_api_thread_cpu() - c0;
        return;
    }
    proto_choice_out *out = calloc((size_t)a->n, sizeof *out);
    if (!out) {
        dmn_api_respond_error(a, PROTO_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    for (int i = 0; i < a->n; i++) {
        api_choice *c = &a->choices[i];
        int calls = c->tools.mode == DMN_TOOLS_CALLS;
        size_t len = calls ? c->tools.content_len : c->tools.cut ? 0 : c->text.len;
        out[i] = (proto_choice_out){.index = i,
                                    .text = c->text.p,
                                    .text_len = len,
                                    .finish_reason = c->finish,
                                    .logprobs = a->logprobs,
                                    .lps = c->lps,
                                    .n_lps = c->n_lps,
                                    .calls = c->tools.calls,
                                    .n_calls = c->tools.n_calls,
                                    .no_content = c->tools.cut,
                                    .function_call = a->tools && a->tools->legacy};
    }
    dmn_http_add_header(a->http, "x-tandem-devices", a->devices);
    dmn_http_add_header(a->http, "x-request-id", a->id);
    dmn_api_respond_json(a, 200, proto_resp_json(&a->meta, out, a->n, &u));
    a->t_answered = sched_now();
    free(out);
    a->cpu_own += dmn_api_thread_cpu() - c0;
}

static void on_error(dmn_api_req *a, const sched_event *ev)
{
    a->done = 1;
    a->t_done = ev->t;
    a->d->metrics.success[DMN_FINISH_ABORT]++;
    /* ev->status is an accel or a scheduler status (disjoint ranges: scheduler/sched.h), whose
     * API error the scheduler's one table gives: e.g. SCHED_ERR_TIMEOUT 504, SCHED_ERR_NO_DEVICE
     * 503, a device's fault 500 device_error */
    enum proto_err e = sched_status_api_err(ev->status);
    if (e == PROTO_ERR_NONE) e = PROTO_ERR_INTERNAL; /* an ERROR event always carries a status */
    snprintf(a->err_code, sizeof a->err_code, "%s", proto_err_info(e)->code);
    char qm[600]; /* the message may hold a client's text (a name, a grammar): quoted, escaped */
    dmn_log(DMN_LOG_WARN, "request_failed", "id=%s status=%d error=\"%s\" msg=%s", a->id,
            ev->status, sched_strerror(ev->status),
            dmn_log_quote(qm, sizeof qm, ev->message ? ev->message : ""));
    if (a->stream && dmn_http_responded(a->http)) {
        dmn_api_stream_event(a, proto_err_json(e, ev->message, NULL));
        dmn_api_stream_finish(a);
        return;
    }
    if (a->devices[0]) dmn_http_add_header(a->http, "x-tandem-devices", a->devices);
    dmn_api_respond_error(a, e, ev->message ? ev->message : "the request failed", NULL);
}

/* echo with logprobs: the prompt's tokens (the first with null logprobs) go before each of the
 * part's choices' generated ones, whose text offsets move past the echoed prompt. The entries'
 * bytes point into the scheduler's token table, which outlives the request. */
static void with_prompt_lps(dmn_api_req *a, const api_part *pt, const sched_prompt_lp *plp, int n)
{
    for (int j = 0; j < a->n_per; j++) {
        api_choice *c = &a->choices[pt->first + j];
        proto_lp_token *l = calloc((size_t)(n + c->n_lps) + 1, sizeof *l);
        if (!l) continue; /* host OOM: the generated tokens' logprobs stay */
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            proto_lp_token *t = &l[i];
            t->bytes = plp[i].token.bytes;
            t->len = plp[i].token.len;
            /* where the token's text starts in the echoed prompt: a token whose bytes are not
             * there (a special token like "<s>", shown but not text) takes no room, and the
             * first word's leading space that the decoder strips is none */
            t->text_offset = off;
            const char *e = pt->echo ? pt->echo + off : "";
            size_t left = pt->echo_len - off;
            if (t->len <= left && !memcmp(e, t->bytes, t->len)) off += t->len;
            else if (t->len > 1 && t->bytes[0] == ' ' && t->len - 1 <= left && !memcmp(e, t->bytes + 1, t->len - 1))
                off += t->len - 1;
            t->no_logprob = i == 0;
            t->logprob = plp[i].token.logprob;
            t->n_top = plp[i].n_top < PROTO_MAX_TOP_LOGPROBS ? plp[i].n_top : PROTO_MAX_TOP_LOGPROBS;
            for (int k = 0; k < t->n_top; k++) {
                t->top[k].bytes = plp[i].top[k].bytes;
                t->top[k].len = plp[i].top[k].len;
                t->top[k].logprob = plp[i].top[k].logprob;
            }
        }
        for (int i = 0; i < c->n_lps; i++) {
            l[n + i] = c->lps[i];
            l[n + i].text_offset += pt->echo_len;
        }
        free(c->lps);
        c->lps = l;
        c->n_lps += n;
        c->cap_lps = c->n_lps + 1;
    }
}

/* The DONE of the whole request from its parts': tokens summed (usage counts every prompt once),
 * the earliest start and first token, the last end. */
static void merge_done(const dmn_api_req *a, sched_event *m)
{
    *m = a->parts[0].fin;
    double density = 0;
    int dense = 0;
    for (int k = 1; k < a->n_parts; k++) {
        const sched_event *f = &a->parts[k].fin;
        m->prompt_tokens += f->prompt_tokens;
        m->completion_tokens += f->completion_tokens;
        m->cached_tokens += f->cached_tokens;
        if (f->t_arrival < m->t_arrival) m->t_arrival = f->t_arrival;
        if (f->t_started < m->t_started) m->t_started = f->t_started;
        if (f->t_first_token > 0 && (m->t_first_token <= 0 || f->t_first_token < m->t_first_token))
            m->t_first_token = f->t_first_token;
        if (f->t_done > m->t_done) m->t_done = f->t_done;
    }
    for (int k = 0; k < a->n_parts; k++)
        if (a->parts[k].fin.prefill_density >= 0) density += a->parts[k].fin.prefill_density, dense++;
    m->prefill_density = dense ? density / dense : -1;
    /* sparse decode: the mean of the prompts' fractions (each is a ratio of keys already) */
    double kv = 0;
    int nkv = 0;
    for (int k = 0; k < a->n_parts; k++)
        if (a->parts[k].fin.decode_kv_read >= 0) kv += a->parts[k].fin.decode_kv_read, nkv++;
    m->decode_kv_read = nkv ? kv / nkv : -1;
}

void dmn_api_on_event(void *ctx, const sched_event *ev)
{
    api_part *pt = ctx;
    dmn_api_req *a = pt->a;
    sched_event e;
    switch (ev->type) {
    case SCHED_EV_PLACED: on_placed(a, ev); break;
    case SCHED_EV_TOKEN:
    case SCHED_EV_CHOICE_DONE:
        if (ev->choice < 0 || ev->choice >= a->n_per) return;
        e = *ev;
        e.choice = pt->first + ev->choice; /* prompt-major, as OpenAI orders a batch's choices */
        if (ev->type == SCHED_EV_TOKEN) on_token(a, pt, &e);
        else on_choice_done(a, &e);
        break;
    case SCHED_EV_DONE:
        if (ev->prompt_lps && !a->stream) with_prompt_lps(a, pt, ev->prompt_lps, ev->prompt_tokens);
        pt->sreq = NULL;
        pt->done = 1;
        pt->fin = *ev;
        pt->fin.message = NULL;
        if (++a->parts_done < a->n_parts) return;
        merge_done(a, &e);
        on_done(a, &e);
        break;
    case SCHED_EV_ERROR:
        pt->sreq = NULL;
        dmn_api_cancel_parts(a); /* one prompt failed: the request did */
        on_error(a, ev);
        break;
    }
}

