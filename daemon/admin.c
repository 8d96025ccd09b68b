/* daemon/admin.c — the admin listener (default 127.0.0.1:8090, separate from the API):
 *
 *   GET  /metrics        Prometheus text (daemon/metrics.h)
 *   GET  /admin/status   JSON: state, devices, queues, every in-flight request
 *   POST /admin/drain    stop taking API requests (503, /ready 503); in-flight ones finish, and
 *                        a node lending devices takes no new sequence for its peers (those it
 *                        holds, "lent", go on)
 *   POST /admin/resume   undo an admin drain
 *   GET  /health, /ready the same probes as on the API listener
 *
 * When admin keys are configured (required when the listener is not on loopback), every route
 * but /health and /ready needs one as a Bearer token. */
#include "daemon/serve.h"
#include "daemon/log.h"
#include "peer/peer.h"
#include "proto/buf.h"
#include "proto/errors.h"
#include "proto/status.h"
#include <stdlib.h>
#include <string.h>

/* /admin/status lists at most this many requests (the queue is bounded anyway). */
#define STATUS_MAX_REQS 4096

static void reply(dmn_http_req *r, int status, const char *type, char *body)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
        dmn_http_respond(r, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    dmn_http_respond(r, status, type, body, strlen(body));
    free(body);
}

static void reply_error(dmn_http_req *r, enum proto_err e, const char *msg)
{
    const proto_err_row *row = proto_err_info(e);
    if (e == PROTO_ERR_UNAUTHORIZED) dmn_http_add_header(r, "WWW-Authenticate", "Bearer");
    reply(r, row->http_status, "application/json", proto_err_json(e, msg, NULL));
}

/* The one place the scheduler's KV-store stats become what /metrics and /admin/status print. */
static void kv_store_of(const sched_dev_stats *s, proto_kv_store *o)
{
    *o = (proto_kv_store){.paged = (s->info.caps & ACCEL_CAP_PAGED) != 0,
                          .block_tokens = s->info.kv_block_tokens,
                          .blocks_total = s->info.kv_blocks_total,
                          .blocks_used = s->info.kv_blocks_used,
                          .blocks_cached = s->info.kv_blocks_cached,
                          .holders = s->pc_holders,
                          .host_entries = s->pc_host_entries,
                          .host_bytes = s->pc_host_bytes,
                          .evictions = s->pc_evictions,
                          .host_saves = s->pc_host_saves,
                          .host_dropped = s->pc_host_dropped,
                          .queries = s->pc_queries,
                          .hits = s->pc_hits,
                          .host_hits = s->pc_host_hits,
                          .preemptions = s->preemptions,
                          .forks = s->forks,
                          .prefill_tokens = s->prefill_tokens,
                          .host_budget = s->pc_host_budget,
                          .dev_next_blocks = s->pc_dev_next_blocks,
                          .host_next_blocks = s->pc_host_next_blocks,
                          .dev_next_idle_s = s->pc_dev_next_idle_s,
                          .host_next_idle_s = s->pc_host_next_idle_s};
}

static void metrics(dmn_serve *d, dmn_http_req *r)
{
    sched_stats st;
    memset(&st, 0, sizeof st);
    if (d->sched) sched_get_stats(d->sched, &st);
    dmn_metrics_dev devs[SCHED_MAX_DEVICES];
    for (int i = 0; i < st.n_devices; i++) {
        const sched_dev_stats *s = &st.dev[i];
        dmn_metrics_dev *o = &devs[i];
        *o = (dmn_metrics_dev){.name = s->info.name,
                               .kind = accel_kind_name(s->info.kind),
                               .health = accel_health_name(s->info.health),
                               .busy_seconds = s->busy_seconds,
                               .mem_total = s->info.mem_total,
                               .mem_used = s->info.mem_total - s->info.mem_free,
                               .running = s->running,
                               .steps = s->steps,
                               .tokens = s->tokens,
                               .decodes = s->decodes,
                               .prefills = s->prefills,
                               .failovers = s->failovers,
                               .kv_bytes_in = s->kv_bytes,
                               .prefill_chunks = s->prefill_chunks,
                               .prefill_split_calls = s->prefill_split_calls,
                               .prefill_over_calls = s->prefill_over_calls,
                               .prefill_over_seconds = s->prefill_over_seconds,
                               .kv_corrupt = s->kv_corrupt};
        kv_store_of(s, &o->kv);
    }
    proto_buf b;
    proto_buf_init(&b);
    dmn_metrics_render(&b, &d->metrics, st.n_running, st.n_waiting, devs, st.n_devices,
                       dmn_serve_ready(d, 0, NULL), d->state == DMN_STATE_DRAINING);
    dmn_metrics_render_dispatch(&b, st.placements_split, st.placements_fallback,
                                st.placements_local, st.moves, st.moves_failed);
    dmn_metrics_render_lent(&b, dmn_serve_lent_seqs(d));
    /* The exposition format's content type (Prometheus text format 0.0.4). */
    reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", proto_buf_take(&b));
}

/* "prefill,decode,kv_export,kv_import": the capabilities a device reports. */
static void caps_text(unsigned caps, char *out, size_t n)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{ACCEL_CAP_PREFILL, "prefill"}, {ACCEL_CAP_DECODE, "decode"},
                 {ACCEL_CAP_KV_EXPORT, "kv_export"}, {ACCEL_CAP_KV_IMPORT, "kv_import"}};
    size_t o = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (caps & names[i].bit) o += (size_t)snprintf(out + o, o < n ? n - o : 0, "%s%s", o ? "," : "", names[i].name);
}

static void status(dmn_serve *d, dmn_http_req *r)
{
    sched_stats st;
    memset(&st, 0, sizeof st);
    if (d->sched) sched_get_stats(d->sched, &st);
    proto_status_dev devs[SCHED_MAX_DEVICES];
    char caps[SCHED_MAX_DEVICES][48];
    double now = sched_now();
    for (int i = 0; i < st.n_devices; i++) {
        const sched_dev_stats *s = &st.dev[i];
        proto_status_dev *o = &devs[i];
        *o = (proto_status_dev){.name = s->info.name,
                                .kind = accel_kind_name(s->info.kind),
                                .desc = s->info.desc,
                                .health = accel_health_name(s->info.health),
                                .warm = s->warm,
                                .mem_total = s->info.mem_total,
                                .mem_free = s->info.mem_free,
                                .kv_bytes_per_token = s->info.kv_bytes_per_token,
                                .max_batch = s->info.max_batch,
                                .running = s->running,
                                .in_step = s->in_step,
                                .steps = s->steps,
                                .tokens = s->tokens,
                                .busy_seconds = s->busy_seconds,
                                .idle_seconds = now - s->last_progress,
                                .caps = caps[i],
                                .decodes = s->decodes,
                                .prefills = s->prefills,
                                .failovers = s->failovers,
                                .kv_bytes_in = s->kv_bytes};
        kv_store_of(s, &o->kv);
        caps_text(s->info.caps, caps[i], sizeof caps[i]);
    }
    int cap = d->n_reqs < STATUS_MAX_REQS ? d->n_reqs : STATUS_MAX_REQS;
    proto_status_req *reqs = calloc((size_t)(cap ? cap : 1), sizeof *reqs);
    int n = reqs ? dmn_api_list(d, reqs, cap) : 0;
    proto_status ps = {dmn_state_name(d->state), DMN_VERSION, d->served_name, d->cfg.model,
                       now - d->t_start, st.n_waiting, st.n_running, d->cfg.max_waiting,
                       d->cfg.max_running, d->api ? dmn_http_active(d->api) : 0, devs,
                       st.n_devices, reqs, n, st.placements_split, st.placements_fallback,
                       st.placements_local, st.moves, NULL, 0, 0};
    /* the nodes are the loading thread's until the scheduler exists (after_load, on this loop) */
    int n_peers = d->sched ? d->n_nodes : 0;
    proto_status_peer peers[DMN_MAX_PEERS];
    for (int i = 0; i < n_peers; i++) {
        int state = peer_node_state(d->nodes[i]);
        const char *name = peer_node_name(d->nodes[i]);
        peers[i] = (proto_status_peer){peer_node_addr(d->nodes[i]), name[0] ? name : NULL,
                                       state == PEER_NODE_UP ? "up" : state == PEER_NODE_DOWN ? "down" : "joining",
                                       __builtin_popcount(d->node_opened[i])};
    }
    ps.peers = peers;
    ps.n_peers = n_peers;
    ps.lent_seqs = dmn_serve_lent_seqs(d);
    reply(r, 200, "application/json", proto_status_json(&ps));
    free(reqs);
}

static void on_headers(void *ctx, dmn_http_req *r)
{
    dmn_serve *d = ctx;
    const char *path = dmn_http_path(r), *method = dmn_http_method(r);
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(path, "/health") || !strcmp(path, "/ready")) {
        if (!get) {
            dmn_http_add_header(r, "Allow", "GET, HEAD");
            reply_error(r, PROTO_ERR_METHOD, "use GET");
        } else if (path[1] == 'h') {
            reply(r, 200, "application/json", proto_health_json("ok", NULL));
        } else {
            const char *why = NULL;
            int ok = dmn_serve_ready(d, 0, &why);
            reply(r, ok ? 200 : 503, "application/json", proto_health_json(ok ? "ready" : "unavailable", why));
        }
        return;
    }
    /* admin_metrics_open: a load-aware router (the GIE/llm-d endpoint picker) scrapes /metrics
     * without credentials; the routes that change or reveal more keep the key */
    int open_metrics = d->cfg.admin_metrics_open && !strcmp(path, "/metrics");
    if (!open_metrics && dmn_auth_count(d->admin_auth) &&
        !dmn_auth_check_bearer(d->admin_auth, dmn_http_header(r, "Authorization"))) {
        reply_error(r, PROTO_ERR_UNAUTHORIZED, "a valid admin key is required (Authorization: Bearer <key>)");
        return;
    }
    struct {
        const char *path;
        int post;
    } routes[] = {{"/metrics", 0}, {"/admin/status", 0}, {"/admin/drain", 1}, {"/admin/resume", 1}};
    int found = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(path, routes[i].path)) found = i;
    if (found < 0) {
        reply_error(r, PROTO_ERR_NOT_FOUND, "no such admin route");
        return;
    }
    if (routes[found].post ? !post : !get) {
        dmn_http_add_header(r, "Allow", routes[found].post ? "POST" : "GET, HEAD");
        reply_error(r, PROTO_ERR_METHOD, routes[found].post ? "use POST" : "use GET");
        return;
    }
    switch (found) {
    case 0: metrics(d, r); break;
    case 1: status(d, r); break;
    case 2: {
        dmn_log(DMN_LOG_INFO, "admin_drain", "client=%s", dmn_http_client(r));
        dmn_serve_drain(d, 0);
        sched_stats st;
        memset(&st, 0, sizeof st);
        if (d->sched) sched_get_stats(d->sched, &st);
        /* lent: the sequences this node decodes for its peers, which the drain waits for too */
        reply(r, 202, "application/json",
              proto_drain_json(1, st.n_running, st.n_waiting, dmn_serve_lent_seqs(d)));
        break;
    }
    case 3:
        if (dmn_serve_resume(d) < 0) {
            reply_error(r, PROTO_ERR_NOT_READY, "only an admin drain can be resumed, and only once loaded");
        } else {
            dmn_log(DMN_LOG_INFO, "admin_resume", "client=%s", dmn_http_client(r));
            reply(r, 200, "application/json", proto_drain_json(0, 0, 0, dmn_serve_lent_seqs(d)));
        }
        break;
    }
}

static void on_body(void *ctx, dmn_http_req *r)
{
    /* Every admin route answers from its headers; a body never gets here unanswered. */
    reply_error(r, PROTO_ERR_NOT_FOUND, "no such admin route");
}

const dmn_http_handler dmn_admin_handler = {on_headers, on_body, NULL, NULL, NULL}; /* no CORS */
