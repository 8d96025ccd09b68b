/* daemon/http.c — libmicrohttpd under the libuv loop (see http.h for the design). */
#include "daemon/http.h"
#include "daemon/buf.h"
#include "daemon/log.h"
#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Bytes MHD asks the content reader for at most; SSE chunks are far smaller. */
#define STREAM_BLOCK (16 * 1024)

struct dmn_http {
    uv_loop_t *loop;
    dmn_http_cfg cfg;
    char name[16];
    dmn_http_handler h;
    struct MHD_Daemon *mhd;
    uv_poll_t poll;
    uv_timer_t timer;
    int handles_open;
    int port;
    int quiesced;
    int closing;
    dmn_http_req *reqs;
    int n_active;
};

struct dmn_http_req {
    dmn_http *h;
    struct MHD_Connection *conn;
    dmn_http_req *prev, *next;
    char method[16];
    char *path;
    char client[INET6_ADDRSTRLEN + 8];
    dmn_buf body;
    int too_large;
    int in_body;      /* on_body was called */
    int suspended;
    uv_poll_t *watch; /* hang-up watch while suspended (NULL until first needed) */
    int fd;
    char **hdrs;      /* name, value, name, value ... */
    int n_hdrs;
    struct MHD_Response *resp; /* built, not yet queued */
    unsigned status;
    int responded;
    int streaming, stream_end;
    dmn_buf out;
    double last_write;
    int gone;         /* the client hung up, or the request ended */
    int notified;     /* on_close was called */
    int refs;         /* MHD's con_cls + the stream response */
    void *data;
};

static void run_mhd(dmn_http *h);
static void on_timer(uv_timer_t *t);

/* ---------------------------------------------------------------- request objects */

static void watch_closed(uv_handle_t *hd)
{
    free(hd);
}

static void watch_stop(dmn_http_req *r)
{
    if (r->watch && uv_is_active((uv_handle_t *)r->watch)) uv_poll_stop(r->watch);
}

static void unref(dmn_http_req *r)
{
    if (--r->refs > 0) return;
    if (r->watch) {
        uv_poll_stop(r->watch);
        uv_close((uv_handle_t *)r->watch, watch_closed);
    }
    for (int i = 0; i < r->n_hdrs * 2; i++) free(r->hdrs[i]);
    free(r->hdrs);
    if (r->resp) MHD_destroy_response(r->resp);
    dmn_buf_deinit(&r->body);
    dmn_buf_deinit(&r->out);
    free(r->path);
    free(r);
}

static void notify_close(dmn_http_req *r, int completed)
{
    if (r->notified) return;
    r->notified = 1;
    r->gone = 1;
    if (r->h->h.on_close) r->h->h.on_close(r->h->h.ctx, r, completed);
}

static void resume(dmn_http_req *r)
{
    if (!r->suspended) return;
    watch_stop(r);
    r->suspended = 0;
    MHD_resume_connection(r->conn);
    /* In external polling MHD only notices a resumed connection when it runs next: run it on
     * the next loop turn (not here: this may be called from inside an MHD callback). */
    if (r->h->mhd && !r->h->closing) uv_timer_start(&r->h->timer, on_timer, 0, 0);
}

static void on_watch(uv_poll_t *p, int status, int events)
{
    dmn_http_req *r = p->data;
    if (status < 0 || (events & UV_DISCONNECT)) {
        watch_stop(r);
        /* Tell the owner now (it cancels its work), then let MHD see the closed socket. */
        notify_close(r, 0);
        resume(r);
    }
}

static void suspend(dmn_http_req *r)
{
    if (r->suspended) return;
    MHD_suspend_connection(r->conn);
    r->suspended = 1;
    if (!r->watch && r->fd >= 0) {
        r->watch = malloc(sizeof *r->watch);
        if (r->watch && uv_poll_init(r->h->loop, r->watch, r->fd) != 0) {
            free(r->watch);
            r->watch = NULL;
        }
        if (r->watch) r->watch->data = r;
    }
    if (r->watch) uv_poll_start(r->watch, UV_DISCONNECT, on_watch);
}

static void add_headers(dmn_http_req *r, struct MHD_Response *resp)
{
    for (int i = 0; i < r->n_hdrs; i++) MHD_add_response_header(resp, r->hdrs[2 * i], r->hdrs[2 * i + 1]);
}

static enum MHD_Result queue_pending(dmn_http_req *r)
{
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, r->resp);
    MHD_destroy_response(r->resp);
    r->resp = NULL;
    return ret;
}

/* ---------------------------------------------------------------- public request API */

const char *dmn_http_method(const dmn_http_req *r) { return r->method; }
const char *dmn_http_path(const dmn_http_req *r) { return r->path; }
const char *dmn_http_client(const dmn_http_req *r) { return r->client; }
void dmn_http_set_data(dmn_http_req *r, void *data) { r->data = data; }
void *dmn_http_get_data(const dmn_http_req *r) { return r->data; }
int dmn_http_responded(const dmn_http_req *r) { return r->responded; }

const char *dmn_http_header(const dmn_http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *dmn_http_body(const dmn_http_req *r, size_t *len)
{
    *len = r->body.len;
    return r->body.p ? r->body.p : "";
}

void dmn_http_add_header(dmn_http_req *r, const char *name, const char *value)
{
    if (r->responded) return;
    char **p = realloc(r->hdrs, sizeof(char *) * 2 * (size_t)(r->n_hdrs + 1));
    if (!p) return;
    r->hdrs = p;
    p[2 * r->n_hdrs] = strdup(name);
    p[2 * r->n_hdrs + 1] = strdup(value);
    if (!p[2 * r->n_hdrs] || !p[2 * r->n_hdrs + 1]) {
        free(p[2 * r->n_hdrs]);
        free(p[2 * r->n_hdrs + 1]);
        return;
    }
    r->n_hdrs++;
}

void dmn_http_respond(dmn_http_req *r, int status, const char *content_type, const char *body,
                      size_t len)
{
    if (r->responded || r->gone) return;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return; /* out of memory: the connection is closed when MHD gets no response */
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    add_headers(r, resp);
    r->resp = resp;
    r->status = (unsigned)status;
    r->responded = 1;
    resume(r);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    dmn_http_req *r = cls;
    if (r->gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = dmn_buf_pending(&r->out);
    if (n) {
        if (n > max) n = max;
        memcpy(buf, r->out.p + r->out.off, n);
        dmn_buf_consume(&r->out, n);
        return (ssize_t)n;
    }
    if (r->stream_end) return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(r); /* resumed by the next write or the end */
    return 0;
}

static void stream_free(void *cls)
{
    unref(cls);
}

void dmn_http_stream_begin(dmn_http_req *r, int status, const char *content_type)
{
    if (r->responded || r->gone) return;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, r, stream_free);
    if (!resp) return;
    r->refs++;
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    /* Proxies must not buffer an event stream (nginx honours X-Accel-Buffering). */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    add_headers(r, resp);
    r->resp = resp;
    r->status = (unsigned)status;
    r->responded = 1;
    r->streaming = 1;
    r->last_write = uv_now(r->h->loop) / 1e3;
    resume(r);
}

void dmn_http_stream_write(dmn_http_req *r, const char *data, size_t len)
{
    if (!r->streaming || r->gone || r->stream_end || !len) return;
    dmn_buf_add(&r->out, data, len);
    r->last_write = uv_now(r->h->loop) / 1e3;
    resume(r);
}

void dmn_http_stream_end(dmn_http_req *r)
{
    if (!r->streaming || r->stream_end) return;
    r->stream_end = 1;
    resume(r);
}

double dmn_http_stream_idle(const dmn_http_req *r)
{
    return uv_now(r->h->loop) / 1e3 - r->last_write;
}

/* ---------------------------------------------------------------- MHD callbacks */

typedef struct hdr_scan {
    int n_cl, cl_conflict, has_te;
    char cl[32];
} hdr_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    hdr_scan *s = cls;
    if (!key) return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (s->n_cl++ && strcmp(s->cl, value ? value : "") != 0) s->cl_conflict = 1;
        snprintf(s->cl, sizeof s->cl, "%s", value ? value : "");
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        s->has_te = 1;
    }
    return MHD_YES;
}

/* An early error response; the body will not be read, so the connection closes after it. */
static void early_error(dmn_http_req *r, int status, const char *json)
{
    dmn_http_add_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    dmn_http_respond(r, status, "application/json", json, strlen(json));
}

static const char *const body_too_large =
    "{\"error\":{\"message\":\"the request body is larger than this server accepts\","
    "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_too_large\"}}";

static dmn_http_req *req_new(dmn_http *h, struct MHD_Connection *conn, const char *url,
                             const char *method)
{
    dmn_http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->h = h;
    r->conn = conn;
    r->refs = 1;
    r->fd = -1;
    snprintf(r->method, sizeof r->method, "%s", method);
    size_t n = strcspn(url, "?");
    r->path = strndup(url, n);
    if (!r->path) {
        free(r);
        return NULL;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            uv_ip4_name((const struct sockaddr_in *)sa, r->client, sizeof r->client);
        else if (sa->sa_family == AF_INET6)
            uv_ip6_name((const struct sockaddr_in6 *)sa, r->client, sizeof r->client);
    }
    r->next = h->reqs;
    if (h->reqs) h->reqs->prev = r;
    h->reqs = r;
    h->n_active++;
    return r;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    dmn_http *h = cls;
    dmn_http_req *r = *con_cls;
    if (!r) {
        r = req_new(h, conn, url, method);
        if (!r) return MHD_NO;
        *con_cls = r;
        hdr_scan sc = {0};
        MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &sc);
        if (sc.cl_conflict || (sc.n_cl && sc.has_te)) {
            early_error(r, 400, "{\"error\":{\"message\":\"conflicting Content-Length / Transfer-Encoding headers\","
                                "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"invalid_header\"}}");
        } else if (sc.n_cl) {
            char *end;
            unsigned long long cl = strtoull(sc.cl, &end, 10);
            if (*end || cl > h->cfg.max_body) early_error(r, 413, body_too_large);
        }
        if (!r->responded && h->h.on_headers) h->h.on_headers(h->h.ctx, r);
        /* A response queued before the body is read makes MHD close the connection afterwards
         * (it cannot know what is left unread). That is right for a rejected upload; a request
         * without a body (GET /health) gets its answer on the next call instead, and keeps its
         * connection alive. */
        int has_body = sc.has_te || (sc.n_cl && strcmp(sc.cl, "0") != 0);
        if (r->resp && has_body) return queue_pending(r);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->responded) {
            if (r->body.len + *upload_size > h->cfg.max_body) {
                r->too_large = 1;
                dmn_buf_deinit(&r->body);
            } else if (!r->too_large) {
                dmn_buf_add(&r->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->resp) return queue_pending(r);
    if (r->gone || r->responded) return MHD_NO; /* client left, or a response MHD already has */
    if (!r->in_body) {
        r->in_body = 1;
        if (r->too_large) early_error(r, 413, body_too_large);
        else if (r->body.oom) early_error(r, 413, body_too_large);
        else h->h.on_body(h->h.ctx, r);
        if (r->resp) return queue_pending(r);
        if (r->gone) return MHD_NO;
    }
    suspend(r);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    dmn_http *h = cls;
    dmn_http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    watch_stop(r);
    notify_close(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (r->prev) r->prev->next = r->next;
    else h->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    h->n_active--;
    unref(r);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    dmn_http *h = cls;
    char msg[512], q[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    dmn_log(DMN_LOG_DEBUG, "http", "listener=%s msg=%s", h->name, dmn_log_quote(q, sizeof q, msg));
}

/* ---------------------------------------------------------------- driving MHD from the loop */

static void on_timer(uv_timer_t *t)
{
    run_mhd(t->data);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    run_mhd(p->data);
}

static void run_mhd(dmn_http *h)
{
    if (!h->mhd) return;
    MHD_run(h->mhd);
    MHD_UNSIGNED_LONG_LONG to;
    if (MHD_get_timeout(h->mhd, &to) == MHD_YES) {
        /* 0 means MHD has work it could not finish in this run (its edge-triggered sockets
         * will not make the epoll fd readable again): come back on the next loop turn. */
        uv_timer_start(&h->timer, on_timer, to, 0);
    } else {
        uv_timer_stop(&h->timer);
    }
}

dmn_http *dmn_http_new(uv_loop_t *loop, const dmn_http_cfg *cfg, const dmn_http_handler *hd,
                       char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (strchr(cfg->host, ':')) {
        if (uv_ip6_addr(cfg->host, cfg->port, (struct sockaddr_in6 *)&ss) != 0) {
            snprintf(err, errlen, "%s listener: bad IPv6 address '%s'", cfg->name, cfg->host);
            return NULL;
        }
        flags |= MHD_USE_IPv6;
    } else if (uv_ip4_addr(cfg->host, cfg->port, (struct sockaddr_in *)&ss) != 0) {
        snprintf(err, errlen, "%s listener: bad IPv4 address '%s' (use a numeric address)", cfg->name, cfg->host);
        return NULL;
    }
    dmn_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->loop = loop;
    h->cfg = *cfg;
    snprintf(h->name, sizeof h->name, "%s", cfg->name);
    h->cfg.name = h->name;
    h->cfg.host = NULL;
    h->h = *hd;
    h->mhd = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)cfg->max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_conns_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        cfg->mem_limit, MHD_OPTION_END);
    if (!h->mhd) {
        snprintf(err, errlen, "%s listener: cannot listen on %s:%d (address in use or not local?)", cfg->name, cfg->host, cfg->port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    uv_poll_init(loop, &h->poll, di->epoll_fd);
    h->poll.data = h;
    uv_timer_init(loop, &h->timer);
    h->timer.data = h;
    h->handles_open = 2;
    uv_poll_start(&h->poll, UV_READABLE, on_poll);
    run_mhd(h);
    return h;
}

int dmn_http_port(const dmn_http *h)
{
    return h->port;
}

int dmn_http_active(const dmn_http *h)
{
    return h->n_active;
}

void dmn_http_quiesce(dmn_http *h)
{
    if (h->quiesced || !h->mhd) return;
    h->quiesced = 1;
    MHD_socket s = MHD_quiesce_daemon(h->mhd);
    if (s != MHD_INVALID_SOCKET) close(s);
}

static void handle_closed(uv_handle_t *hd)
{
    dmn_http *h = hd->data;
    if (--h->handles_open == 0) free(h);
}

void dmn_http_free(dmn_http *h)
{
    if (!h) return;
    h->closing = 1;
    /* MHD requires every suspended connection to be resumed before it stops. */
    for (dmn_http_req *r = h->reqs; r; r = r->next) {
        notify_close(r, 0);
        resume(r);
    }
    uv_poll_stop(&h->poll);
    uv_timer_stop(&h->timer);
    MHD_stop_daemon(h->mhd); /* runs on_completed for the rest */
    h->mhd = NULL;
    uv_close((uv_handle_t *)&h->poll, handle_closed);
    uv_close((uv_handle_t *)&h->timer, handle_closed);
}
