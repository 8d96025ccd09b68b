/* daemon/api.c — the OpenAI-compatible listener: routes, auth, request -> scheduler ->
 * response or Server-Sent Events.
 *
 * One dmn_api_req per HTTP request, created at on_headers, freed at on_close. Scheduler events
 * for it arrive on the loop thread (api_on_event) and are turned into bytes at once: a streamed
 * response's headers go out when the request is placed on a device (so that x-tandem-devices can
 * say where), then one SSE chunk per token; a whole response is built at DONE. Every error before
 * the first byte is a status from proto's table; an error after it is an SSE error event.
 *
 * A client that goes away (on_close before DONE) cancels its scheduler request: the device
 * worker frees its KV at its next check. */
#include "daemon/serve.h"
#include "daemon/api_struct.h"
#include "daemon/api_extra.h"
#include "daemon/log.h"
#include "proto/buf.h"
#include "proto/errors.h"
#include "proto/openai_resp.h"
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
static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* OpenAI's default max_tokens for /v1/completions (its API reference); chat defaults to what
 * the context leaves, capped by the default_max_tokens key. */
#define COMPLETIONS_DEFAULT_MAX_TOKENS 16

typedef struct api_choice {
    proto_buf text;
    proto_lp_token *lps;
    int n_lps, cap_lps;
    size_t text_offset;
    const char *finish;
    int started; /* stream: the role delta went out */
    double t_last;
    dmn_choice_tools tools; /* chat tool calls found in (or held back from) the text */
} api_choice;

enum api_route { ROUTE_NONE, ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_READY, ROUTE_MODEL,
                 ROUTE_EXTRA /* daemon/api_extra.h */ };

struct dmn_api_req {
    dmn_serve *d;
    dmn_http_req *http;
    dmn_api_req *prev, *next;
    enum api_route route;
    char id[48];
    long long created;
    proto_resp_meta meta;
    sched_req *sreq;
    int stream, include_usage, n, logprobs, prompt_tokens, max_tokens, completion_tokens;
    api_choice *choices;
    char devices[160];
    char prefill_dev[32], decode_dev[32], moved_from[32];
    int moves;          /* failovers: placed again after a device failed it */
    uv_timer_t keepalive;
    int keepalive_on;
    int status;
    const char *finish; /* for the log: the last choice's */
    double t_arrival, t_started, t_first, t_done;
    double t_body, t_submitted; /* on_body entered / sched_submit returned (the daemon's own time) */
    double t_answered;          /* the last bytes were handed to the HTTP layer */
    double cpu_own;             /* loop-thread CPU seconds spent on it in on_body and on_done */
    int done;           /* DONE or ERROR seen */
    int prep_busy;      /* being prepared on a thread-pool thread (api_prep) */
    int closed;         /* on_close ran while prep_busy: freed when the preparation returns */
    char err_code[40];
    proto_tools *tools;  /* chat tools unless tool_choice is none (moved from the request) */
    char *echo;          /* completions with echo: the prompt's text (each choice starts with it) */
    size_t echo_len;
    int tool_family;     /* enum proto_tool_family of the chat template */
};

static void api_on_event(void *ctx, const sched_event *ev);

/* ---------------------------------------------------------------- responses */

static void count_status(dmn_api_req *a, int status)
{
    a->status = status;
    dmn_metrics_count_status(&a->d->metrics, status);
}

static void respond_json(dmn_api_req *a, int status, char *json)
{
    count_status(a, status);
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
        dmn_http_respond(a->http, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    dmn_http_respond(a->http, status, "application/json", json, strlen(json));
    free(json);
}

static void respond_error(dmn_api_req *a, enum proto_err e, const char *msg, const char *param)
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
    if (e == PROTO_ERR_METHOD) {
        const char *allow = a->route == ROUTE_COMPLETIONS || a->route == ROUTE_CHAT || a->route == ROUTE_EXTRA ? "POST" : "GET, HEAD";
        dmn_http_add_header(a->http, "Allow", allow);
    }
    respond_json(a, row->http_status, proto_err_json(e, msg, param && *param ? param : NULL));
}

static void stream_bytes(dmn_api_req *a, const char *s, size_t n)
{
    dmn_http_stream_write(a->http, s, n);
}

static void stream_event(dmn_api_req *a, char *json)
{
    if (!json) return;
    size_t n = strlen(json);
    char *buf = malloc(proto_sse_data_size(n));
    if (buf) {
        size_t k = proto_sse_data(buf, json, n);
        stream_bytes(a, buf, k);
        free(buf);
    }
    free(json);
}

static void stream_finish(dmn_api_req *a)
{
    stream_bytes(a, PROTO_SSE_DONE, sizeof PROTO_SSE_DONE - 1);
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
    free(a->echo);
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

/* Refusals under overload (429 queue full, 503 draining / not ready) come in floods: 10x
 * overload wrote 606 MB of request lines in 100 s. The first refusal of each second is logged
 * whole; the rest are counted and the count logged with the next one (loop thread only). */
static struct {
    double window;
    unsigned suppressed;
    int last_status;
} refused_log;

static int refusal_suppressed(int status)
{
    if (status != 429 && status != 503) return 0;
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

    /* Probes answer without a key (load balancers and systemd tooling have none). */
    if (a->route == ROUTE_HEALTH || a->route == ROUTE_READY) {
        if (!is_get) {
            respond_error(a, PROTO_ERR_METHOD, "use GET", NULL);
        } else if (a->route == ROUTE_HEALTH) {
            respond_json(a, 200, proto_health_json("ok", NULL));
        } else {
            const char *why = NULL;
            int ok = dmn_serve_ready(d, &why);
            respond_json(a, ok ? 200 : 503, proto_health_json(ok ? "ready" : "unavailable", why));
        }
        return;
    }
    /* Everything else needs a key first: an unauthenticated client learns nothing about routes. */
    if (!dmn_auth_check_bearer(d->auth, dmn_http_header(r, "Authorization"))) {
        respond_error(a, PROTO_ERR_UNAUTHORIZED, "a valid API key is required (Authorization: Bearer <key>)", NULL);
        return;
    }
    if (a->route == ROUTE_NONE) {
        char msg[200];
        snprintf(msg, sizeof msg, "no route %.100s %.60s", dmn_http_path(r), method);
        respond_error(a, PROTO_ERR_NOT_FOUND, msg, NULL);
        return;
    }
    if (a->route == ROUTE_MODEL) {
        int st = 404;
        if (!is_get) respond_error(a, PROTO_ERR_METHOD, "use GET", NULL);
        else if (!d->m) respond_error(a, PROTO_ERR_NOT_READY, "the model is still loading", NULL);
        else {
            char *json = dmn_model_get(d, dmn_http_path(r) + 11, &st);
            respond_json(a, st, json);
        }
        return;
    }
    if (a->route == ROUTE_MODELS) {
        if (!is_get) {
            respond_error(a, PROTO_ERR_METHOD, "use GET", NULL);
        } else if (!d->m) {
            respond_error(a, PROTO_ERR_NOT_READY, "the model is still loading", NULL);
        } else {
            respond_json(a, 200, proto_models_json(d->served_name, (long long)time(NULL), d->m->cfg.max_pos));
        }
        return;
    }
    if (!is_post) {
        respond_error(a, PROTO_ERR_METHOD, "use POST", NULL);
        return;
    }
    if (d->state == DMN_STATE_DRAINING) {
        respond_error(a, PROTO_ERR_DRAINING, "the server is draining; retry on another instance", NULL);
        return;
    }
    const char *why = NULL;
    if (!dmn_serve_ready(d, &why)) {
        respond_error(a, PROTO_ERR_NOT_READY, why ? why : "not ready", NULL);
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
 * preparing a small body, hence the split. */
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
    /* results */
    enum proto_err e;
    char msg[512], param[64];
    proto_req q;
    int32_t *ids;
    int n_ids, max_tokens;
    model_grammar *grammar; /* structured output (NULL: free text) */
} api_prep;

static void prep_run(api_prep *p)
{
    dmn_serve *d = p->d;
    p->e = proto_req_parse(p->ep, p->body, p->len, &d->limits, model_tok_bos_token(d->tok),
                           model_tok_eos_token(d->tok), &p->q, p->msg, sizeof p->msg, p->param,
                           sizeof p->param);
    if (p->e != PROTO_ERR_NONE) return;
    if (p->q.model && strcmp(p->q.model, d->served_name) != 0) {
        p->e = PROTO_ERR_MODEL_NOT_FOUND;
        snprintf(p->msg, sizeof p->msg, "the model '%.100s' does not exist; this server serves '%s'", p->q.model, d->served_name);
        snprintf(p->param, sizeof p->param, "model");
        return;
    }
    const char *pparam = p->ep == PROTO_EP_CHAT ? "messages" : "prompt";
    if (dmn_prompt_ids(d, &p->q, &p->ids, &p->n_ids, p->msg, sizeof p->msg, &p->e) < 0) {
        snprintf(p->param, sizeof p->param, "%s", p->e == PROTO_ERR_INTERNAL ? "" : pparam);
        return;
    }
    int max_pos = d->m->cfg.max_pos;
    int max_tokens = p->q.max_tokens;
    if (max_tokens < 0) {
        /* Chat: what the context leaves, up to default_max_tokens — every sequence reserves KV
         * for prompt + max_tokens up front, so "the whole context" by default would make every
         * request reserve the longest possible generation. */
        max_tokens = p->ep == PROTO_EP_COMPLETIONS ? COMPLETIONS_DEFAULT_MAX_TOKENS : max_pos - p->n_ids;
        if (p->ep == PROTO_EP_CHAT && max_tokens > d->cfg.default_max_tokens) max_tokens = d->cfg.default_max_tokens;
    }
    if (max_tokens < 1 || (long long)p->n_ids + max_tokens > max_pos) {
        p->e = PROTO_ERR_CONTEXT_LENGTH;
        snprintf(p->msg, sizeof p->msg,
                 "this model's maximum context length is %d tokens; the prompt has %d tokens and %d more were requested",
                 max_pos, p->n_ids, max_tokens < 1 ? 1 : max_tokens);
        snprintf(p->param, sizeof p->param, "%s", pparam);
        return;
    }
    p->max_tokens = max_tokens;
    dmn_grammar_compile(&p->q, (enum proto_tool_family)d->tool_family, &p->grammar, &p->e, p->msg, sizeof p->msg, p->param, sizeof p->param);
}

static void prep_free(api_prep *p)
{
    free(p->ids);
    model_grammar_unref(p->grammar);
    proto_req_deinit(&p->q);
    free(p->body_copy);
    free(p);
}

/* Loop thread: the prepared request goes to the scheduler. */
static void prep_submit(api_prep *pp)
{
    dmn_api_req *a = pp->a;
    dmn_serve *d = pp->d;
    proto_req *q = &pp->q;
    if (pp->e != PROTO_ERR_NONE) {
        respond_error(a, pp->e, pp->msg, pp->param);
        return;
    }
    if (d->state != DMN_STATE_READY || !d->sched) {
        /* a drain began while it was being prepared */
        respond_error(a, d->state == DMN_STATE_DRAINING ? PROTO_ERR_DRAINING : PROTO_ERR_NOT_READY,
                      "the server stopped taking requests", NULL);
        return;
    }
    if (pp->grammar && dmn_grammar_check(d->sched, pp->grammar, pp->msg, sizeof pp->msg) < 0) {
        respond_error(a, PROTO_ERR_INVALID_VALUE, pp->msg, q->grammar_kind == PROTO_GRAMMAR_GBNF ? "grammar" : "response_format");
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
    p.grammar = pp->grammar;

    a->stream = q->stream;
    a->include_usage = q->include_usage;
    if (q->tools && q->tools->choice != PROTO_TOOL_CHOICE_NONE) {
        a->tools = q->tools;
        q->tools = NULL;
        a->tool_family = d->tool_family;
    }
    a->n = q->n;
    a->logprobs = q->logprobs;
    a->prompt_tokens = pp->n_ids;
    a->max_tokens = pp->max_tokens;
    a->choices = calloc((size_t)q->n, sizeof *a->choices);
    if (q->echo && a->choices) {
        /* the prompt as text: as given, or its ids decoded */
        if (q->prompt) a->echo = strndup(q->prompt, q->prompt_len), a->echo_len = q->prompt_len;
        else model_tok_decode(d->tok, pp->ids, (size_t)pp->n_ids, 0, &a->echo, &a->echo_len);
        for (int i = 0; i < q->n && !a->stream && a->echo; i++) proto_buf_add(&a->choices[i].text, a->echo, a->echo_len);
    }
    dmn_request_id(a->id, sizeof a->id, pp->ep == PROTO_EP_CHAT ? "chatcmpl-" : "cmpl-");
    a->created = (long long)time(NULL);
    a->meta.ep = pp->ep;
    a->meta.id = a->id;
    a->meta.created = a->created;
    a->meta.model = d->served_name;
    char err[512] = "", msg[256], param[64];
    int st = a->choices && (lb || !q->n_logit_bias)
                 ? sched_submit(d->sched, &p, api_on_event, a, &a->sreq, err, sizeof err)
                 : SCHED_ERR_NOMEM;
    free(lb);
    a->t_submitted = sched_now();
    switch (st) {
    case SCHED_OK: break; /* events follow */
    case SCHED_ERR_QUEUE_FULL:
        d->metrics.rejected_queue_full++;
        respond_error(a, PROTO_ERR_QUEUE_FULL, "too many requests are waiting; retry after the Retry-After interval", NULL);
        break;
    case SCHED_ERR_INVALID:
        param_of(err, param, sizeof param);
        respond_error(a, PROTO_ERR_INVALID_VALUE, err, param);
        break;
    case SCHED_ERR_TOO_LARGE:
        if (a->n > d->cfg.max_running) {
            snprintf(msg, sizeof msg, "'n' is %d; this server runs at most %d sequences per device (max_running)", a->n, d->cfg.max_running);
            respond_error(a, PROTO_ERR_INVALID_VALUE, msg, "n");
        } else {
            respond_error(a, PROTO_ERR_CONTEXT_LENGTH, err, "max_tokens");
        }
        break;
    case SCHED_ERR_NO_DEVICE:
    case SCHED_ERR_STOPPED: respond_error(a, PROTO_ERR_NOT_READY, err, NULL); break;
    default: /* SCHED_ERR_NOMEM: the table of the one error space (scheduler/sched.h) */
        respond_error(a, sched_status_api_err(st), err[0] ? err : sched_strerror(st), NULL);
        break;
    }
}

static void prep_work(uv_work_t *w)
{
    prep_run(w->data);
}

static void prep_done(uv_work_t *w, int status)
{
    api_prep *p = w->data;
    dmn_api_req *a = p->a;
    a->prep_busy = 0;
    if (a->closed) {
        api_free(a); /* the client left while its request was being prepared */
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
    double c0 = thread_cpu();
    if (a->route == ROUTE_EXTRA) {
        size_t len;
        const char *body = dmn_http_body(r, &len);
        int st = 500;
        char *json = dmn_extra_post(d, dmn_extra_route(dmn_http_path(r)), body, len, &st);
        respond_json(a, st, json);
        return;
    }
    api_prep *p = calloc(1, sizeof *p);
    if (!p) {
        respond_error(a, PROTO_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    p->a = a;
    p->d = d;
    p->ep = a->route == ROUTE_CHAT ? PROTO_EP_CHAT : PROTO_EP_COMPLETIONS;
    p->body = dmn_http_body(r, &p->len);
    if (p->len <= INLINE_PREP_BYTES) {
        prep_run(p);
        prep_submit(p);
        prep_free(p);
        a->cpu_own += thread_cpu() - c0;
        return;
    }
    p->body_copy = malloc(p->len ? p->len : 1);
    if (!p->body_copy) {
        free(p);
        respond_error(a, PROTO_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    memcpy(p->body_copy, p->body, p->len);
    p->body = p->body_copy;
    p->work.data = p;
    a->prep_busy = 1;
    uv_queue_work(d->loop, &p->work, prep_work, prep_done);
}

/* ---------------------------------------------------------------- scheduler events */

static void on_keepalive(uv_timer_t *t)
{
    dmn_api_req *a = t->data;
    if (dmn_http_stream_idle(a->http) >= a->d->cfg.sse_keepalive * 0.999) {
        static const char ka[] = ": keep-alive\n\n";
        stream_bytes(a, ka, sizeof ka - 1);
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
            char c[224];
            int k = snprintf(c, sizeof c, ": x-tandem-devices: %s\n\n", a->devices);
            if (k > 0 && (size_t)k < sizeof c) stream_bytes(a, c, (size_t)k);
        }
        return;
    }
    a->t_started = ev->t;
    if (!a->stream) return;
    /* Headers go out now, before the prefill: the client sees where it runs and, during a long
     * prefill, keep-alive comments. Errors after this point are SSE error events. */
    dmn_http_add_header(a->http, "x-tandem-devices", a->devices);
    dmn_http_add_header(a->http, "x-request-id", a->id);
    count_status(a, 200);
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

static void on_token(dmn_api_req *a, const sched_event *ev)
{
    if (ev->choice < 0 || ev->choice >= a->n) return;
    api_choice *c = &a->choices[ev->choice];
    dmn_metrics *m = &a->d->metrics;
    if (c->t_last > 0) dmn_hist_observe(&m->itl, ev->t - c->t_last);
    c->t_last = ev->t;
    if (!a->t_first) a->t_first = ev->t;
    a->completion_tokens++;
    proto_lp_token lp;
    if (ev->has_logprobs) lp_of(ev, &lp, c->text_offset);
    if (a->stream) {
        const char *text = ev->text;
        size_t len = ev->text_len;
        if (a->tools && c->tools.mode != DMN_TOOLS_TEXT) {
            /* the text may become tool calls: held until it cannot (then it goes out whole) */
            proto_buf_add(&c->text, ev->text, ev->text_len);
            if (dmn_tools_hold(a->tools, (enum proto_tool_family)a->tool_family, &c->tools, c->text.p, c->text.len)) {
                c->text_offset += ev->text_len;
                return;
            }
            text = c->text.p;
            len = c->text.len;
        }
        if (a->echo && !c->started) {
            proto_choice_out e = {ev->choice, a->echo, a->echo_len, NULL, 0, NULL, 0, NULL, 0, 0};
            stream_event(a, proto_chunk_json(&a->meta, &e, 0, a->include_usage));
            c->started = 1;
        }
        if (!len && !ev->has_logprobs) return; /* held back by the detokenizer/stops */
        proto_choice_out out = {ev->choice, text, len, NULL, ev->has_logprobs, &lp, ev->has_logprobs, NULL, 0, 0};
        stream_event(a, proto_chunk_json(&a->meta, &out, !c->started, a->include_usage));
        c->started = 1;
        c->text.len = 0;
    } else {
        proto_buf_add(&c->text, ev->text, ev->text_len);
        if (ev->has_logprobs) {
            if (c->n_lps == c->cap_lps) {
                int cap = c->cap_lps ? c->cap_lps * 2 : 16;
                proto_lp_token *p = realloc(c->lps, sizeof *p * (size_t)cap);
                if (p) {
                    c->lps = p;
                    c->cap_lps = cap;
                }
            }
            if (c->n_lps < c->cap_lps) c->lps[c->n_lps++] = lp;
        }
    }
    c->text_offset += ev->text_len;
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
    c->finish = model_finish_name(ev->finish);
    a->finish = c->finish;
    if (a->stream && a->tools && c->tools.mode != DMN_TOOLS_TEXT) {
        /* what was held back: calls, or after all the content it is */
        c->finish = dmn_tools_finish(a->tools, (enum proto_tool_family)a->tool_family, &c->tools, c->text.p, c->text.len, c->finish);
        int calls = c->tools.mode == DMN_TOOLS_CALLS;
        size_t len = calls ? c->tools.content_len : c->text.len;
        proto_choice_out out = {ev->choice, c->text.p, len, NULL, 0, NULL, 0, c->tools.calls, c->tools.n_calls, 0};
        if (len || calls) {
            stream_event(a, proto_chunk_json(&a->meta, &out, !c->started, a->include_usage));
            c->started = 1;
        }
        a->finish = c->finish;
    }
    if (a->stream) {
        proto_choice_out out = {ev->choice, NULL, 0, c->finish, 0, NULL, 0, NULL, 0, 0};
        char *json = proto_chunk_json(&a->meta, &out, !c->started, a->include_usage);
        int last = !a->include_usage; /* without a usage chunk, the last choice's finish is last */
        for (int i = 0; i < a->n && last; i++) last = a->choices[i].finish != NULL;
        stream_event(a, last ? with_devices(a, json) : json);
        c->started = 1;
    }
}

static void on_done(dmn_api_req *a, const sched_event *ev)
{
    double c0 = thread_cpu();
    dmn_metrics *m = &a->d->metrics;
    a->sreq = NULL;
    a->done = 1;
    a->t_done = ev->t_done;
    a->t_first = ev->t_first_token;
    a->completion_tokens = ev->completion_tokens;
    dmn_hist_observe(&m->e2e, ev->t_done - ev->t_arrival);
    dmn_hist_observe(&m->queue, ev->t_started - ev->t_arrival);
    if (ev->t_first_token > 0) {
        dmn_hist_observe(&m->ttft, ev->t_first_token - ev->t_arrival);
        dmn_hist_observe(&m->prefill, ev->t_first_token - ev->t_started);
        dmn_hist_observe(&m->decode, ev->t_done - ev->t_first_token);
    }
    dmn_hist_observe(&m->prompt_len, ev->prompt_tokens);
    dmn_hist_observe(&m->gen_len, ev->completion_tokens);
    m->prompt_tokens += (uint64_t)ev->prompt_tokens * (uint64_t)a->n;
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
                     .completion_tokens = ev->completion_tokens,
                     .cached_tokens = ev->cached_tokens,
                     .has_prefill_density = ev->prefill_density >= 0,
                     .prefill_density = ev->prefill_density};
    if (a->stream) {
        if (a->include_usage)
            stream_event(a, with_devices(a, proto_usage_chunk_json(&a->meta, &u)));
        stream_finish(a);
        a->t_answered = sched_now();
        a->cpu_own += thread_cpu() - c0;
        return;
    }
    proto_choice_out *out = calloc((size_t)a->n, sizeof *out);
    if (!out) {
        respond_error(a, PROTO_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    for (int i = 0; i < a->n; i++) {
        api_choice *c = &a->choices[i];
        int calls = c->tools.mode == DMN_TOOLS_CALLS;
        out[i] = (proto_choice_out){i, c->text.p, calls ? c->tools.content_len : c->text.len, c->finish, a->logprobs,
                                    c->lps, c->n_lps, c->tools.calls, c->tools.n_calls, 0};
    }
    dmn_http_add_header(a->http, "x-tandem-devices", a->devices);
    dmn_http_add_header(a->http, "x-request-id", a->id);
    respond_json(a, 200, proto_resp_json(&a->meta, out, a->n, &u));
    a->t_answered = sched_now();
    free(out);
    a->cpu_own += thread_cpu() - c0;
}

static void on_error(dmn_api_req *a, const sched_event *ev)
{
    a->sreq = NULL;
    a->done = 1;
    a->t_done = ev->t;
    a->d->metrics.success[DMN_FINISH_ABORT]++;
    /* ev->status is an accel or a scheduler status (disjoint ranges: scheduler/sched.h), whose
     * API error the scheduler's one table gives: e.g. SCHED_ERR_TIMEOUT 504, SCHED_ERR_NO_DEVICE
     * 503, a device's fault 500 device_error */
    enum proto_err e = sched_status_api_err(ev->status);
    if (e == PROTO_ERR_NONE) e = PROTO_ERR_INTERNAL; /* an ERROR event always carries a status */
    snprintf(a->err_code, sizeof a->err_code, "%s", proto_err_info(e)->code);
    dmn_log(DMN_LOG_WARN, "request_failed", "id=%s status=%d error=\"%s\" msg=\"%s\"", a->id, ev->status,
            sched_strerror(ev->status), ev->message ? ev->message : "");
    if (a->stream && dmn_http_responded(a->http)) {
        stream_event(a, proto_err_json(e, ev->message, NULL));
        stream_finish(a);
        return;
    }
    if (a->devices[0]) dmn_http_add_header(a->http, "x-tandem-devices", a->devices);
    respond_error(a, e, ev->message ? ev->message : "the request failed", NULL);
}

static void api_on_event(void *ctx, const sched_event *ev)
{
    dmn_api_req *a = ctx;
    switch (ev->type) {
    case SCHED_EV_PLACED: on_placed(a, ev); break;
    case SCHED_EV_TOKEN: on_token(a, ev); break;
    case SCHED_EV_CHOICE_DONE: on_choice_done(a, ev); break;
    case SCHED_EV_DONE: on_done(a, ev); break;
    case SCHED_EV_ERROR: on_error(a, ev); break;
    }
}

/* ---------------------------------------------------------------- end of a request */

static void on_close(void *ctx, dmn_http_req *r, int completed)
{
    dmn_serve *d = ctx;
    dmn_api_req *a = dmn_http_get_data(r);
    if (!a) return;
    if (a->sreq) {
        /* The client went away first: cancel (frees its queue slot or device KV). */
        sched_cancel(d->sched, a->sreq);
        a->sreq = NULL;
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
        if (!a->sreq || !a->http) continue;
        sched_cancel(d->sched, a->sreq);
        a->sreq = NULL;
        dmn_log(DMN_LOG_WARN, "request_cancelled", "id=%s reason=%s", a->id, why);
        const proto_err_row *row = proto_err_info(PROTO_ERR_DRAINING);
        snprintf(a->err_code, sizeof a->err_code, "%s", row->code);
        if (a->stream && dmn_http_responded(a->http)) {
            stream_event(a, proto_err_json(PROTO_ERR_DRAINING, why, NULL));
            stream_finish(a);
        } else {
            respond_error(a, PROTO_ERR_DRAINING, why, NULL);
        }
    }
}

const dmn_http_handler dmn_api_handler = {on_headers, on_body, on_close, NULL};

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
        if (a->sreq) {
            sched_req_info info;
            sched_req_get_info(a->sreq, &info);
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
