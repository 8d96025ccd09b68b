/* daemon/api.c — the OpenAI-compatible listener: routes, auth, request -> scheduler ->
 * response or Server-Sent Events.
 *
 * One dmn_api_req per HTTP request, created at on_headers, freed at on_close. Scheduler events
 * for it arrive on the loop thread (dmn_api_on_event) and are turned into bytes at once: a streamed
 * response's headers go out when the request is placed on a device (so that x-tandem-devices can
 * say where), then one SSE chunk per token; a whole response is built at DONE. Every error before
 * the first byte is a status from proto's table; an error after it is an SSE error event.
 *
 * A client that goes away (on_close before DONE) cancels its scheduler request: the device
 * worker frees its KV at its next check. */
#include "daemon/api_int.h"
#include "daemon/api_extra.h"
#include "daemon/http_cors.h"
#include "daemon/log.h"
#include "model/gen/gen.h"
#include "proto/buf.h"
#include "proto/errors.h"
#include "proto/openai_resp.h"
#include "proto/openai_tools.h"
#include "proto/sse.h"
#include "proto/status.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <limits.h>

/* CPU time of the calling thread: the daemon's own work per request, free of the waits that
 * wall-clock time picks up when the loop is preempted by device workers on a busy machine. */
double dmn_api_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* ---------------------------------------------------------------- responses */

void dmn_api_count_status(dmn_api_req *a, int status)
{
    a->status = status;
    dmn_metrics_count_status(&a->d->metrics, status);
}

void dmn_api_respond_json(dmn_api_req *a, int status, char *json)
{
    dmn_api_count_status(a, status);
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
        dmn_http_respond(a->http, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    dmn_http_respond(a->http, status, "application/json", json, strlen(json));
    free(json);
}

/* The methods a route answers (Allow on a 405, Access-Control-Allow-Methods on a preflight);
 * NULL for no route. */
static const char *route_methods(enum api_route r)
{
    if (r == ROUTE_NONE) return NULL;
    return r == ROUTE_COMPLETIONS || r == ROUTE_CHAT || r == ROUTE_EXTRA ? "POST" : "GET, HEAD";
}

void dmn_api_respond_error(dmn_api_req *a, enum proto_err e, const char *msg, const char *param)
{
    const proto_err_row *row = proto_err_info(e);
    snprintf(a->err_code, sizeof a->err_code, "%s", row->code);
    if (e == PROTO_ERR_QUEUE_FULL || e == PROTO_ERR_DRAINING || e == PROTO_ERR_NOT_READY) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", a->d->cfg.retry_after);
        dmn_http_add_header(a->http, "Retry-After", ra);
    }
    /* a draining daemon sends its clients elsewhere: this connection is not reused */
    if (e == PROTO_ERR_DRAINING) dmn_http_add_header(a->http, "Connection", "close");
    if (e == PROTO_ERR_UNAUTHORIZED) dmn_http_add_header(a->http, "WWW-Authenticate", "Bearer");
    if (e == PROTO_ERR_METHOD) dmn_http_add_header(a->http, "Allow", route_methods(a->route));
    dmn_api_respond_json(a, row->http_status, proto_err_json(e, msg, param && *param ? param : NULL));
}

void dmn_api_stream_bytes(dmn_api_req *a, const char *s, size_t n)
{
    dmn_http_stream_write(a->http, s, n);
}

void dmn_api_stream_event(dmn_api_req *a, char *json)
{
    if (!json) return;
    size_t n = strlen(json);
    char *buf = malloc(proto_sse_data_size(n));
    if (buf) {
        size_t k = proto_sse_data(buf, json, n);
        dmn_api_stream_bytes(a, buf, k);
        free(buf);
    }
    free(json);
}

void dmn_api_stream_finish(dmn_api_req *a)
{
    dmn_api_stream_bytes(a, PROTO_SSE_DONE, sizeof PROTO_SSE_DONE - 1);
    dmn_http_stream_end(a->http);
    if (a->keepalive_on) uv_timer_stop(&a->keepalive);
}

/* ---------------------------------------------------------------- request objects */

static void api_free_mem(dmn_api_req *a)
{
    if (a->choices) {
        for (int i = 0; i < a->n; i++) {
            proto_buf_deinit(&a->choices[i].text);
            free(a->choices[i].lps);
            dmn_choice_tools_deinit(&a->choices[i].tools);
        }
        free(a->choices);
    }
    proto_tools_free(a->tools);
    for (int i = 0; a->parts && i < a->n_parts; i++) free(a->parts[i].echo);
    free(a->parts);
    free(a);
}

static void keepalive_closed(uv_handle_t *h)
{
    api_free_mem(h->data);
}

static void api_free(dmn_api_req *a)
{
    dmn_serve *d = a->d;
    if (a->prev) a->prev->next = a->next;
    else if (d->reqs == a) d->reqs = a->next;
    if (a->next) a->next->prev = a->prev;
    d->n_reqs--;
    if (a->keepalive_on) {
        uv_timer_stop(&a->keepalive);
        uv_close((uv_handle_t *)&a->keepalive, keepalive_closed);
    } else {
        api_free_mem(a);
    }
}

/* Refusals come in floods: under overload (429 queue full, 503 draining / not ready: 10x
 * overload wrote 606 MB of request lines in 100 s), and from anyone who can reach the port
 * (401 without the key, 403, 404, 405, 413, a CORS preflight's 204: a client without a key wrote
 * a line a request). The first refusal of each second is logged whole; the rest are counted and
 * the count logged with the next one (loop thread only). A request that started work is always
 * logged. */
static struct {
    double window;
    unsigned suppressed;
    int last_status;
} refused_log;

static int refusal_suppressed(int status)
{
    if (status != 429 && status != 503 && status != 401 && status != 403 && status != 404 &&
        status != 405 && status != 413 && status != 204)
        return 0;
    double now = sched_now();
    if (now - refused_log.window < 1.0) {
        refused_log.suppressed++;
        refused_log.last_status = status;
        return 1;
    }
    if (refused_log.suppressed)
        dmn_log(DMN_LOG_WARN, "requests_refused", "suppressed=%u last_status=%d window_s=%.1f msg=\"refusals not logged one by one\"",
                refused_log.suppressed, refused_log.last_status, now - refused_log.window);
    refused_log.window = now;
    refused_log.suppressed = 0;
    return 0;
}

static void log_request(dmn_api_req *a, int completed)
{
    if (!a->t_started && refusal_suppressed(a->status)) return;
    char client[80], path[160];
    dmn_log_quote(client, sizeof client, dmn_http_client(a->http));
    dmn_log_quote(path, sizeof path, dmn_http_path(a->http));
    double now = sched_now();
    double e2e = (a->t_done ? a->t_done : now) - a->t_arrival;
    /* The daemon's own share of the latency: body -> parse, template, tokenize, submit; and the
     * engine's last token -> the response handed to the HTTP layer (which writes it on the next
     * loop turn). The completion notice itself is no measure of the write: it comes when the
     * last bytes were handed to the kernel. */
    double own_in = a->t_submitted > 0 ? a->t_submitted - a->t_body : -1;
    double own_out = a->t_done > 0 && a->t_answered > 0 ? a->t_answered - a->t_done : -1;
    double own = own_in >= 0 && own_out >= 0 ? own_in + own_out : -1;
    double queue = a->t_started ? a->t_started - a->t_arrival : -1;
    double ttft = a->t_first ? a->t_first - a->t_arrival : -1;
    dmn_log(DMN_LOG_INFO, "request",
            "id=%s method=%s path=%s client=%s status=%d completed=%d stream=%d n=%d "
            "prompt_tokens=%d completion_tokens=%d max_tokens=%d finish=%s prefill=%s decode=%s "
            "moves=%d moved_from=%s queue_ms=%.3f ttft_ms=%.3f e2e_ms=%.3f daemon_us=%.0f in_us=%.0f out_us=%.0f cpu_us=%.0f error=%s",
            a->id, dmn_http_method(a->http), path, client, a->status, completed, a->stream, a->n,
            a->prompt_tokens, a->completion_tokens, a->max_tokens, a->finish ? a->finish : "-",
            a->prefill_dev[0] ? a->prefill_dev : "-", a->decode_dev[0] ? a->decode_dev : "-",
            a->moves, a->moved_from[0] ? a->moved_from : "-", queue * 1e3, ttft * 1e3, e2e * 1e3, own * 1e6, own_in * 1e6, own_out * 1e6,
            a->cpu_own * 1e6, a->err_code[0] ? a->err_code : "-");
}

/* ---------------------------------------------------------------- routes */

static enum api_route route_of(const char *path)
{
    /* OpenAI clients use a base URL ending in /v1; a trailing slash is tolerated. */
    static const struct {
        const char *path;
        enum api_route r;
    } routes[] = {
        {"/v1/completions", ROUTE_COMPLETIONS}, {"/v1/chat/completions", ROUTE_CHAT},
        {"/v1/models", ROUTE_MODELS},           {"/health", ROUTE_HEALTH},
        {"/ready", ROUTE_READY},
    };
    size_t n = strlen(path);
    if (!strncmp(path, "/v1/models/", 11) && path[11] && path[11] != '/') return ROUTE_MODEL;
    if (dmn_extra_route(path) >= 0) return ROUTE_EXTRA;
    if (n > 1 && path[n - 1] == '/') n--;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strlen(routes[i].path) == n && !strncmp(routes[i].path, path, n)) return routes[i].r;
    return ROUTE_NONE;
}

static void on_headers(void *ctx, dmn_http_req *r)
{
    dmn_serve *d = ctx;
    dmn_api_req *a = calloc(1, sizeof *a);
    if (!a) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
        dmn_http_respond(r, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    a->d = d;
    a->http = r;
    a->t_arrival = sched_now();
    a->next = d->reqs;
    if (d->reqs) d->reqs->prev = a;
    d->reqs = a;
    d->n_reqs++;
    dmn_http_set_data(r, a);
    snprintf(a->id, sizeof a->id, "-");
    a->route = route_of(dmn_http_path(r));
    const char *method = dmn_http_method(r);
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int is_post = !strcmp(method, "POST");

    /* CORS (daemon/http_cors.h), opt-in: a browser's preflight is answered before the key is
     * asked for (it carries none; the request it announces still needs it). An unknown path is
     * not preflighted: it gets a 401 or a 404, and the browser stops there. Every other answer
     * carries the CORS headers the listener added (cors_origins below). */
    if (dmn_http_cors_preflight(r, d->cfg.cors_origins, route_methods(a->route))) {
        dmn_api_count_status(a, 204);
        return;
    }

    /* Probes answer without a key (load balancers and systemd tooling have none). */
    if (a->route == ROUTE_HEALTH || a->route == ROUTE_READY) {
        if (!is_get) {
            dmn_api_respond_error(a, PROTO_ERR_METHOD, "use GET", NULL);
        } else if (a->route == ROUTE_HEALTH) {
            dmn_api_respond_json(a, 200, proto_health_json("ok", NULL));
        } else {
            const char *why = NULL;
            int ok = dmn_serve_ready(d, 1, &why); /* this request's connection is a slot */
            dmn_api_respond_json(a, ok ? 200 : 503, proto_health_json(ok ? "ready" : "unavailable", why));
        }
        return;
    }
    /* Everything else needs a key first: an unauthenticated client learns nothing about routes. */
    if (!dmn_auth_check_bearer(d->auth, dmn_http_header(r, "Authorization"))) {
        dmn_api_respond_error(a, PROTO_ERR_UNAUTHORIZED, "a valid API key is required (Authorization: Bearer <key>)", NULL);
        return;
    }
    if (a->route == ROUTE_NONE) {
        char msg[200];
        snprintf(msg, sizeof msg, "no route %.100s %.60s", dmn_http_path(r), method);
        dmn_api_respond_error(a, PROTO_ERR_NOT_FOUND, msg, NULL);
        return;
    }
    if (a->route == ROUTE_MODEL) {
        int st = 404;
        if (!is_get) dmn_api_respond_error(a, PROTO_ERR_METHOD, "use GET", NULL);
        else if (!d->m) dmn_api_respond_error(a, PROTO_ERR_NOT_READY, "the model is still loading", NULL);
        else {
            char *json = dmn_model_get(d, dmn_http_path(r) + 11, &st);
            dmn_api_respond_json(a, st, json);
        }
        return;
    }
    if (a->route == ROUTE_MODELS) {
        if (!is_get) {
            dmn_api_respond_error(a, PROTO_ERR_METHOD, "use GET", NULL);
        } else if (!d->m) {
            dmn_api_respond_error(a, PROTO_ERR_NOT_READY, "the model is still loading", NULL);
        } else {
            dmn_api_respond_json(
                a, 200, proto_models_json(d->served_name, dmn_start_time(d), d->m->cfg.max_pos));
        }
        return;
    }
    if (!is_post) {
        dmn_api_respond_error(a, PROTO_ERR_METHOD, "use POST", NULL);
        return;
    }
    if (d->state == DMN_STATE_DRAINING) {
        dmn_api_respond_error(a, PROTO_ERR_DRAINING, "the server is draining; retry on another instance", NULL);
        return;
    }
    const char *why = NULL;
    if (!dmn_serve_can_admit(d, &why)) {
        dmn_api_respond_error(a, PROTO_ERR_NOT_READY, why ? why : "not ready", NULL);
        return;
    }
    /* the body comes next (on_body) */
}

/* The sampler's message names the parameter first ("top_k must ..."): use it as param. */
static void param_of(const char *msg, char *param, size_t n)
{
    size_t k = strcspn(msg, " :");
    if (k >= n) k = 0;
    memcpy(param, msg, k);
    param[k] = 0;
}

/* Bodies up to this size are parsed, templated and tokenized on the loop thread (tens of
 * microseconds); larger ones on a libuv thread-pool thread, so that a multi-megabyte prompt does
 * not hold up every other connection's bytes. The pool round trip costs about as much as
 * preparing a small body, hence the split. A small body that asks for structured output (a
 * grammar, a JSON schema, constrained tools) is parsed on the loop and the rest prepared on the
 * pool: compiling a grammar costs what its text asks for, not its length — 300 bytes of nested
 * repetition counts expand to the compiler's bound of elements in seconds (a cached one
 * returns at once, but that is known only by compiling). */
#define INLINE_PREP_BYTES (16 * 1024)

/* A completion request being prepared: the part that only reads immutable state (the model,
 * tokenizer, template, limits) and so may run on any thread. */
typedef struct api_prep {
    uv_work_t work;
    dmn_api_req *a;
    dmn_serve *d;
    enum proto_endpoint ep;
    const char *body;
    size_t len;
    char *body_copy; /* the pool's own copy: the connection may go away meanwhile */
    int parsed;      /* q holds the parsed body (prep_parse ran) */
    int extra;       /* a route beside the API (dmn_extra_route) when >= 0: its answer below */
    char *extra_json;
    int extra_status;
    /* results */
    enum proto_err e;
    char msg[512], param[64];
    proto_req q;
    int32_t *ids;
    int n_ids, max_tokens;
    int no_tokens;      /* max_tokens 0 asked: max_tokens is 1, its token dropped */
    int32_t **more_ids; /* the batch form's other prompts (q.more), tokenized */
    int *n_more_ids;
    model_grammar *grammar; /* structured output (NULL: free text) */
} api_prep;

/* The body parsed into p->q (p->parsed set); p->e says whether it is a request to go on with. */
static void prep_parse(api_prep *p)
{
    dmn_serve *d = p->d;
    p->parsed = 1;
    p->e = proto_req_parse(p->ep, p->body, p->len, &d->limits, model_tok_bos_token(d->tok),
                           model_tok_eos_token(d->tok), &p->q, p->msg, sizeof p->msg, p->param,
                           sizeof p->param);
    if (p->e != PROTO_ERR_NONE) return;
    if (p->q.model && strcmp(p->q.model, d->served_name) != 0) {
        p->e = PROTO_ERR_MODEL_NOT_FOUND;
        snprintf(p->msg, sizeof p->msg, "the model '%.100s' does not exist; this server serves '%s'", p->q.model, d->served_name);
        snprintf(p->param, sizeof p->param, "model");
    }
}

/* A parsed request's structured output needs a grammar compiled (see INLINE_PREP_BYTES). */
static int prep_structured(const api_prep *p)
{
    return p->q.grammar_kind != PROTO_GRAMMAR_NONE || proto_tools_constrained(p->q.tools);
}

/* The rest, once parsed: the prompt's ids, max_tokens, the grammar. */
static void prep_rest(api_prep *p)
{
    dmn_serve *d = p->d;
    const char *pparam = p->ep == PROTO_EP_CHAT ? "messages" : "prompt";
    if (dmn_prompt_ids(d, &p->q, &p->ids, &p->n_ids, p->msg, sizeof p->msg, &p->e) < 0) {
        snprintf(p->param, sizeof p->param, "%s", p->e == PROTO_ERR_INTERNAL ? "" : pparam);
        return;
    }
    int longest = p->n_ids;
    if (p->q.n_more) {
        p->more_ids = calloc((size_t)p->q.n_more, sizeof *p->more_ids);
        p->n_more_ids = calloc((size_t)p->q.n_more, sizeof *p->n_more_ids);
        if (!p->more_ids || !p->n_more_ids) {
            p->e = PROTO_ERR_INTERNAL;
            snprintf(p->msg, sizeof p->msg, "out of memory");
            return;
        }
        for (int i = 0; i < p->q.n_more; i++) {
            proto_req one = p->q; /* a view of the request with prompt i + 1 in the first place */
            one.prompt = p->q.more[i].text;
            one.prompt_len = p->q.more[i].len;
            one.prompt_ids = p->q.more[i].ids;
            one.n_prompt_ids = p->q.more[i].n_ids;
            if (dmn_prompt_ids(d, &one, &p->more_ids[i], &p->n_more_ids[i], p->msg, sizeof p->msg, &p->e) < 0) {
                snprintf(p->param, sizeof p->param, "%s", p->e == PROTO_ERR_INTERNAL ? "" : pparam);
                return;
            }
            if (p->n_more_ids[i] > longest) longest = p->n_more_ids[i];
        }
    }
    int max_pos = d->m->cfg.max_pos;
    int max_tokens = p->q.max_tokens;
    if (max_tokens < 0) {
        /* Chat: what the context leaves, up to default_max_tokens — every sequence reserves KV
         * for prompt + max_tokens up front, so "the whole context" by default would make every
         * request reserve the longest possible generation. */
        max_tokens = p->ep == PROTO_EP_COMPLETIONS ? COMPLETIONS_DEFAULT_MAX_TOKENS : max_pos - longest;
        if (p->ep == PROTO_EP_CHAT && max_tokens > d->cfg.default_max_tokens) max_tokens = d->cfg.default_max_tokens;
    }
    /* max_tokens 0 (completions): the scheduler runs one step (a request is at least a token)
     * whose token nobody sees (daemon/api_events.c drops it); the prompt's logprobs come from
     * the prefill */
    p->no_tokens = max_tokens == 0;
    if (p->no_tokens) max_tokens = 1;
    if (max_tokens < 1 || (long long)longest + max_tokens > max_pos) {
        p->e = PROTO_ERR_CONTEXT_LENGTH;
        if (p->no_tokens) /* the one step it runs needs a position: not "1 in the completion" */
            snprintf(
                p->msg, sizeof p->msg,
                "This model's maximum context length is %d tokens. However, your prompt "
                "resulted in %d tokens, and max_tokens 0 needs one position after it (the "
                "prompt is scored by one decode step). Please reduce the length of the prompt.",
                max_pos, longest);
        else
            proto_context_msg(p->msg, sizeof p->msg, p->ep, max_pos, longest,
                              max_tokens < 1 ? 1 : max_tokens);
        snprintf(p->param, sizeof p->param, "%s", pparam);
        return;
    }
    p->max_tokens = max_tokens;
    dmn_grammar_compile(&p->q, (enum proto_tool_family)d->tool_family, &p->grammar, &p->e, p->msg, sizeof p->msg, p->param, sizeof p->param);
}

static void prep_free(api_prep *p)
{
    for (int i = 0; p->more_ids && i < p->q.n_more; i++) free(p->more_ids[i]);
    free(p->more_ids);
    free(p->n_more_ids);
    free(p->ids);
    model_grammar_unref(p->grammar);
    proto_req_deinit(&p->q);
    free(p->body_copy);
    free(p->extra_json);
    free(p);
}

/* Loop thread: the prepared request goes to the scheduler. */
static void prep_submit(api_prep *pp)
{
    dmn_api_req *a = pp->a;
    dmn_serve *d = pp->d;
    proto_req *q = &pp->q;
    if (pp->e != PROTO_ERR_NONE) {
        dmn_api_respond_error(a, pp->e, pp->msg, pp->param);
        return;
    }
    if (d->state != DMN_STATE_READY || !d->sched) {
        /* a drain began while it was being prepared */
        dmn_api_respond_error(a, d->state == DMN_STATE_DRAINING ? PROTO_ERR_DRAINING : PROTO_ERR_NOT_READY,
                      "the server stopped taking requests", NULL);
        return;
    }
    /* a completion continues its prompt's text: the grammar sees the first token's space when the
     * prompt keeps it (the first prompt decides this check; each choice's matcher decides for
     * its own prompt, model/gen/gen.c) */
    int keep_space = pp->grammar && pp->ep == PROTO_EP_COMPLETIONS &&
                     model_gen_keeps_first_space(d->tok, 1, pp->ids, pp->n_ids) == 1;
    if (pp->grammar &&
        dmn_grammar_check(d->sched, pp->grammar, keep_space, pp->msg, sizeof pp->msg) < 0) {
        dmn_api_respond_error(a, PROTO_ERR_INVALID_VALUE, pp->msg, q->grammar_kind == PROTO_GRAMMAR_GBNF ? "grammar" : "response_format");
        return;
    }
    /* Sparse decode, decided here once (sparse/tls.h: the request over the configuration's
     * decode_sparse over the defaults); a 400 names the key */
    sparse_tls_req trq = {.given = q->decode_sparse, .token_budget = (int)q->decode_sparse_token_budget,
                          .block_budget = (int)q->decode_sparse_block_budget,
                          .stagger = q->decode_sparse_stagger};
    sparse_tls_params tls_p;
    int tls_on = 0;
    const char *tls_key = NULL;
    if (sparse_tls_resolve(&trq, d->cfg.decode_sparse, d->m->cfg.head_dim, &tls_p, &tls_on, pp->msg,
                           sizeof pp->msg, &tls_key)) {
        dmn_api_respond_error(a, PROTO_ERR_INVALID_VALUE, pp->msg, tls_key);
        return;
    }
    if (pp->grammar) dmn_grammar_prepare(d->loop, d->sched, pp->grammar);
    model_logit_bias *lb = NULL;
    if (q->n_logit_bias) {
        lb = calloc((size_t)q->n_logit_bias, sizeof *lb);
        for (int i = 0; lb && i < q->n_logit_bias; i++) {
            lb[i].id = q->logit_bias[i].id;
            lb[i].bias = q->logit_bias[i].bias;
        }
    }
    sched_params p = {0};
    p.prompt = pp->ids;
    p.n_prompt = pp->n_ids;
    p.max_tokens = pp->max_tokens;
    p.n = q->n;
    p.sampling = model_sampling_default();
    p.sampling.temperature = (float)q->temperature;
    p.sampling.top_p = (float)q->top_p;
    p.sampling.top_k = q->top_k;
    p.sampling.min_p = (float)q->min_p;
    p.sampling.repetition_penalty = (float)q->repetition_penalty;
    p.sampling.frequency_penalty = (float)q->frequency_penalty;
    p.sampling.presence_penalty = (float)q->presence_penalty;
    p.sampling.seed = q->seed;
    p.sampling.has_seed = q->has_seed;
    p.sampling.logit_bias = lb;
    p.sampling.n_logit_bias = lb ? q->n_logit_bias : 0;
    p.sampling.logprobs = q->logprobs;
    p.sampling.top_logprobs = q->top_logprobs;
    p.stop = (const char *const *)q->stop;
    p.n_stop = q->n_stop;
    p.deadline = d->cfg.request_timeout > 0 ? a->t_arrival + d->cfg.request_timeout : 0;
    p.no_prefix_cache = !q->cache_prompt;
    p.continuation = pp->ep == PROTO_EP_COMPLETIONS; /* " named" after "...a big dog" */
    /* Sparse prefill, resolved here once: the request's method (else the configured one), the
     * configuration's parameters over the method's defaults, the request's members over those.
     * sched_submit checks the result (a 400 naming the key). */
    accel_sparse sp;
    dmn_config_sparse(&d->cfg, q->sparse_mode, &sp.p);
    if (!isnan(q->sparse_gamma)) sp.p.flex.gamma = (float)q->sparse_gamma;
    if (!isnan(q->sparse_tau)) sp.p.flex.tau = (float)q->sparse_tau;
    if (q->sparse_min_budget != LLONG_MIN) sp.p.flex.min_budget = (int)q->sparse_min_budget;
    if (q->sparse_max_budget != LLONG_MIN) sp.p.flex.max_budget = (int)q->sparse_max_budget;
    if (q->sparse_dense_below != LLONG_MIN) sp.p.flex.dense_below = (int)q->sparse_dense_below;
    if (!isnan(q->sparse_xattn_threshold)) sp.p.xattention_threshold = q->sparse_xattn_threshold;
    if (q->sparse_xattn_block != LLONG_MIN) sp.p.xattention_block_size = (int)q->sparse_xattn_block;
    if (q->sparse_xattn_stride != LLONG_MIN) sp.p.xattention_stride = (int)q->sparse_xattn_stride;
    if (q->sparse_start != LLONG_MIN) sp.p.num_retained_start_tokens_in_cache = (int)q->sparse_start;
    if (q->sparse_recent != LLONG_MIN) sp.p.num_retained_recent_tokens_in_cache = (int)q->sparse_recent;
    if (q->sparse_last_dense != LLONG_MIN) sp.p.num_last_dense_tokens_in_prefill = (int)q->sparse_last_dense;
    if (q->sparse == 1 || (q->sparse < 0 && d->cfg.sparse_prefill)) p.sparse = &sp;
    p.decode_sparse_set = 1;
    p.decode_sparse = tls_on ? &tls_p : NULL;
    p.grammar = pp->grammar;
    /* echo with logprobs: the prompt's tokens carry their logprobs too (on DONE) */
    p.prompt_logprobs = q->echo && q->logprobs;
    p.prompt_top_logprobs = q->top_logprobs;

    a->stream = q->stream;
    a->include_usage = q->include_usage;
    if (q->tools && q->tools->choice != PROTO_TOOL_CHOICE_NONE) {
        a->tools = q->tools;
        q->tools = NULL;
        a->tool_family = d->tool_family;
    }
    a->n_per = q->n;
    a->n_parts = 1 + q->n_more;
    a->n = a->n_per * a->n_parts;
    a->logprobs = q->logprobs;
    a->prompt_tokens = pp->n_ids;
    for (int k = 0; k < q->n_more; k++) a->prompt_tokens += pp->n_more_ids[k];
    a->no_tokens = pp->no_tokens;
    a->max_tokens = pp->no_tokens ? 0 : pp->max_tokens;
    a->choices = calloc((size_t)a->n, sizeof *a->choices);
    a->parts = calloc((size_t)a->n_parts, sizeof *a->parts);
    for (int k = 0; a->parts && k < a->n_parts; k++) {
        api_part *pt = &a->parts[k];
        pt->a = a;
        pt->first = k * a->n_per;
        /* logprobs' text_offset: does the text drop the first token's leading space (a reply
         * of its own, or a continuation of a prompt without text: "" or [1]) */
        if (a->logprobs && model_tok_strips_first_space(d->tok))
            pt->strip_first =
                pp->ep != PROTO_EP_COMPLETIONS ||
                model_gen_keeps_first_space(d->tok, 1, k ? pp->more_ids[k - 1] : pp->ids,
                                            k ? pp->n_more_ids[k - 1] : pp->n_ids) == 0;
        if (!q->echo || !a->choices) continue;
        /* the prompt as text: as given, or its ids decoded */
        const char *text = k ? q->more[k - 1].text : q->prompt;
        size_t len = k ? q->more[k - 1].len : q->prompt_len;
        if (text) pt->echo = strndup(text, len), pt->echo_len = len;
        else model_tok_decode(d->tok, k ? pp->more_ids[k - 1] : pp->ids, (size_t)(k ? pp->n_more_ids[k - 1] : pp->n_ids), 0,
                              &pt->echo, &pt->echo_len);
        for (int i = 0; i < a->n_per && !a->stream && pt->echo; i++)
            proto_buf_add(&a->choices[pt->first + i].text, pt->echo, pt->echo_len);
    }
    dmn_request_id(a->id, sizeof a->id, pp->ep == PROTO_EP_CHAT ? "chatcmpl-" : "cmpl-");
    a->created = (long long)time(NULL);
    a->meta.ep = pp->ep;
    a->meta.id = a->id;
    a->meta.created = a->created;
    a->meta.model = d->served_name;
    char err[512] = "", msg[256], param[64];
    int st = a->choices && a->parts && (lb || !q->n_logit_bias) ? SCHED_OK : SCHED_ERR_NOMEM;
    for (int k = 0; k < a->n_parts && st == SCHED_OK; k++) {
        p.prompt = k ? pp->more_ids[k - 1] : pp->ids;
        p.n_prompt = k ? pp->n_more_ids[k - 1] : pp->n_ids;
        st = sched_submit(d->sched, &p, dmn_api_on_event, &a->parts[k], &a->parts[k].sreq, err, sizeof err);
        if (st != SCHED_OK) dmn_api_cancel_parts(a); /* all prompts or none */
    }
    free(lb);
    a->t_submitted = sched_now();
    switch (st) {
    case SCHED_OK: break; /* events follow */
    case SCHED_ERR_QUEUE_FULL:
        d->metrics.rejected_queue_full++;
        dmn_api_respond_error(a, PROTO_ERR_QUEUE_FULL, "too many requests are waiting; retry after the Retry-After interval", NULL);
        break;
    case SCHED_ERR_INVALID:
        param_of(err, param, sizeof param);
        dmn_api_respond_error(a, PROTO_ERR_INVALID_VALUE, err, param);
        break;
    case SCHED_ERR_TOO_LARGE:
        if (a->n_per > d->cfg.max_running) {
            snprintf(msg, sizeof msg, "'n' is %d; this server runs at most %d sequences per device (max_running)", a->n_per, d->cfg.max_running);
            dmn_api_respond_error(a, PROTO_ERR_INVALID_VALUE, msg, "n");
        } else {
            dmn_api_respond_error(a, PROTO_ERR_CONTEXT_LENGTH, err, "max_tokens");
        }
        break;
    case SCHED_ERR_NO_DEVICE:
    case SCHED_ERR_STOPPED: dmn_api_respond_error(a, PROTO_ERR_NOT_READY, err, NULL); break;
    default: /* SCHED_ERR_NOMEM: the table of the one error space (scheduler/sched.h) */
        dmn_api_respond_error(a, sched_status_api_err(st), err[0] ? err : sched_strerror(st), NULL);
        break;
    }
}

static void prep_work(uv_work_t *w)
{
    api_prep *p = w->data;
    if (p->extra >= 0) {
        p->extra_status = 500;
        p->extra_json = dmn_extra_post(p->d, p->extra, p->body, p->len, &p->extra_status);
        return;
    }
    if (!p->parsed) prep_parse(p);
    if (p->e == PROTO_ERR_NONE) prep_rest(p);
}

static void prep_done(uv_work_t *w, int status)
{
    api_prep *p = w->data;
    dmn_api_req *a = p->a;
    a->prep_busy = 0;
    if (a->closed) {
        api_free(a); /* the client left while its request was being prepared */
    } else if (p->extra >= 0) {
        dmn_api_respond_json(a, p->extra_status, p->extra_json);
        p->extra_json = NULL; /* the response's now */
    } else {
        prep_submit(p);
    }
    prep_free(p);
}

static void on_body(void *ctx, dmn_http_req *r)
{
    dmn_serve *d = ctx;
    dmn_api_req *a = dmn_http_get_data(r);
    if (!a || dmn_http_responded(r)) return;
    a->t_body = sched_now();
    double c0 = dmn_api_thread_cpu();
    size_t len;
    const char *body = dmn_http_body(r, &len);
    if (a->route == ROUTE_EXTRA && len <= INLINE_PREP_BYTES) {
        int st = 500;
        char *json = dmn_extra_post(d, dmn_extra_route(dmn_http_path(r)), body, len, &st);
        dmn_http_body_release(r);
        dmn_api_respond_json(a, st, json);
        return;
    }
    api_prep *p = calloc(1, sizeof *p);
    if (!p) {
        dmn_api_respond_error(a, PROTO_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    p->a = a;
    p->d = d;
    p->extra = a->route == ROUTE_EXTRA ? dmn_extra_route(dmn_http_path(r)) : -1;
    p->ep = a->route == ROUTE_CHAT ? PROTO_EP_CHAT : PROTO_EP_COMPLETIONS;
    p->body = body;
    p->len = len;
    if (p->extra < 0 && p->len <= INLINE_PREP_BYTES) {
        prep_parse(p);
        p->body = NULL; /* parsed: what follows needs only p->q */
        dmn_http_body_release(r);
        if (p->e == PROTO_ERR_NONE && prep_structured(p)) {
            p->work.data = p;
            a->prep_busy = 1;
            a->cpu_own += dmn_api_thread_cpu() - c0;
            uv_queue_work(d->loop, &p->work, prep_work, prep_done);
            return;
        }
        if (p->e == PROTO_ERR_NONE) prep_rest(p);
        prep_submit(p);
        prep_free(p);
        a->cpu_own += dmn_api_thread_cpu() - c0;
        return;
    }
    p->body_copy = malloc(p->len ? p->len : 1);
    if (!p->body_copy) {
        free(p);
        dmn_api_respond_error(a, PROTO_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    memcpy(p->body_copy, p->body, p->len);
    p->body = p->body_copy;
    dmn_http_body_release(r); /* the pool's copy is the one read now */
    p->work.data = p;
    a->prep_busy = 1;
    uv_queue_work(d->loop, &p->work, prep_work, prep_done);
}

/* ---------------------------------------------------------------- parts */

int dmn_api_live(const dmn_api_req *a)
{
    for (int k = 0; a->parts && k < a->n_parts; k++)
        if (a->parts[k].sreq) return 1;
    return 0;
}

void dmn_api_cancel_parts(dmn_api_req *a)
{
    for (int k = 0; a->parts && k < a->n_parts; k++)
        if (a->parts[k].sreq) {
            sched_cancel(a->d->sched, a->parts[k].sreq);
            a->parts[k].sreq = NULL;
        }
}

/* ---------------------------------------------------------------- end of a request */

static void on_close(void *ctx, dmn_http_req *r, int completed)
{
    dmn_serve *d = ctx;
    dmn_api_req *a = dmn_http_get_data(r);
    if (!a) return;
    if (dmn_api_live(a)) {
        /* The client went away first: cancel (frees its queue slot or device KV). */
        dmn_api_cancel_parts(a);
        d->metrics.success[DMN_FINISH_ABORT]++;
        if (!a->err_code[0]) snprintf(a->err_code, sizeof a->err_code, "client_closed");
    }
    if (a->route == ROUTE_COMPLETIONS || a->route == ROUTE_CHAT || a->status >= 400) log_request(a, completed);
    dmn_http_set_data(r, NULL);
    a->http = NULL;
    if (a->prep_busy) {
        a->closed = 1; /* prep_done frees it */
        return;
    }
    api_free(a);
}

void dmn_api_cancel_all(dmn_serve *d, const char *why)
{
    for (dmn_api_req *a = d->reqs; a; a = a->next) {
        if (!dmn_api_live(a) || !a->http) continue;
        dmn_api_cancel_parts(a);
        char q[160];
        dmn_log(DMN_LOG_WARN, "request_cancelled", "id=%s reason=%s", a->id,
                dmn_log_quote(q, sizeof q, why));
        const proto_err_row *row = proto_err_info(PROTO_ERR_DRAINING);
        snprintf(a->err_code, sizeof a->err_code, "%s", row->code);
        if (a->stream && dmn_http_responded(a->http)) {
            dmn_api_stream_event(a, proto_err_json(PROTO_ERR_DRAINING, why, NULL));
            dmn_api_stream_finish(a);
        } else {
            dmn_api_respond_error(a, PROTO_ERR_DRAINING, why, NULL);
        }
    }
}

static const char *cors_origins(void *ctx)
{
    return ((dmn_serve *)ctx)->cfg.cors_origins;
}

const dmn_http_handler dmn_api_handler = {on_headers, on_body, on_close, NULL, cors_origins};

int dmn_api_list(dmn_serve *d, proto_status_req *out, int max)
{
    int k = 0;
    double now = sched_now();
    for (dmn_api_req *a = d->reqs; a && k < max; a = a->next) {
        if ((a->route != ROUTE_COMPLETIONS && a->route != ROUTE_CHAT) || !a->http) continue;
        proto_status_req *o = &out[k++];
        memset(o, 0, sizeof *o);
        o->id = a->id;
        o->endpoint = dmn_http_path(a->http);
        o->client = dmn_http_client(a->http);
        o->stream = a->stream;
        o->n = a->n;
        o->n_prompt = a->prompt_tokens;
        o->max_tokens = a->max_tokens;
        o->generated = a->completion_tokens;
        o->age_seconds = now - a->t_arrival;
        if (dmn_api_live(a)) {
            /* the batch form: the first prompt still running speaks for the request */
            int k = 0;
            while (!a->parts[k].sreq) k++;
            sched_req_info info;
            sched_req_get_info(a->parts[k].sreq, &info);
            o->state = info.state == SCHED_REQ_WAITING ? "waiting" : "running";
            o->prefill_dev = info.prefill_dev;
            o->decode_dev = info.decode_dev;
            o->generated = info.generated;
        } else {
            o->state = a->done ? "sending" : "parsing";
            o->prefill_dev = a->prefill_dev[0] ? a->prefill_dev : NULL;
            o->decode_dev = a->decode_dev[0] ? a->decode_dev : NULL;
        }
    }
    return k;
}
