/* daemon/http.c — HTTP/1.1 listeners on the libuv loop (see http.h for the design). */
#include "daemon/http.h"
#include "daemon/http_cors.h"
#include "daemon/http_impl.h"
#include "daemon/http_parse.h"
#include "daemon/log.h"
#include "proto/buf.h"
#include "proto/errors.h"
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* How long a connection closed after an error keeps draining what the client still sends, so the
 * client reads our answer instead of a reset (nginx's lingering_close does the same, 5 s). */
#define LINGER_MS 2000
/* Bytes queued for a client that does not read them: past this the client is treated as gone.
 * An SSE token event is ~200 bytes; 4 MiB is minutes of tokens. */
#define MAX_PENDING_OUT (4u << 20)

typedef struct conn conn;

enum conn_state {
    CS_IDLE,    /* keep-alive: waiting for the next request's first byte (timeout_s) */
    CS_HEAD,    /* receiving a request head (recv deadline) */
    CS_BODY,    /* receiving a body (recv deadline) */
    CS_HANDLER, /* the request is with the handler / its response is being written */
    CS_LINGER,  /* answered, write side shut: draining input until EOF or LINGER_MS */
};


struct dmn_http_req {
    dmn_http *h;
    conn *c;
    char *headbuf; /* the request head, parsed in place (head's strings point into it) */
    dmn_http_head head;
    char *path;
    char client[INET6_ADDRSTRLEN + 8];
    proto_buf body;
    dmn_http_chunked ck;
    unsigned long long cl_left;
    int has_body, in_body, is_head;
    char **hdrs; /* response headers: name, value, name, value ... */
    int n_hdrs;
    int close_after;
    int responded, streaming, chunked_out, stream_end;
    int gone, notified;
    double last_write;
    void *data;
};

struct conn {
    dmn_http *h;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    conn *prev, *next;
    int counted, lingering, is_probe;
    enum conn_state st;
    struct sockaddr_storage peer;
    char client[INET6_ADDRSTRLEN + 8];
    proto_buf in;          /* received, not yet parsed (in.off: consumed) */
    double since;        /* loop seconds: the request's first byte (HEAD/BODY) or idle start */
    dmn_http_req *req;
    int keep_alive;
    int reading, closing, handles;
    int doomed; /* to be closed on the next loop turn (see conn_doom) */
    unsigned long long body_total;
    /* bytes handed to uv_write, and those of them sent as of the last timer check: a response
     * the client reads, however slowly, is progress (CS_HANDLER in on_timer) */
    unsigned long long out_queued, out_seen;
};

typedef struct wreq {
    uv_write_t w;
    conn *c;
    int final; /* the response's last bytes */
    size_t len;
    char data[];
} wreq;

static void conn_close(conn *c);
static void process(conn *c);
static void arm(conn *c);
static void on_alloc(uv_handle_t *hd, size_t want, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status; /* the linger timer or the client's EOF closes the connection */
}

static double now_s(const dmn_http *h)
{
    return dmn_http_now(h);
}

/* ---------------------------------------------------------------- refusal log */

static void log_refused(dmn_http *h, const char *client, const char *why)
{
    double now = now_s(h);
    if (now - h->refused_window < 1.0) {
        h->refused_n++;
        h->refused_last = why;
        return;
    }
    char q[160], cq[80];
    if (h->refused_n)
        dmn_log(DMN_LOG_WARN, "http_refused", "listener=%s suppressed=%u last=%s", h->name, h->refused_n,
                dmn_log_quote(q, sizeof q, h->refused_last ? h->refused_last : "-"));
    dmn_log(DMN_LOG_WARN, "http_refused", "listener=%s client=%s reason=%s", h->name,
            dmn_log_quote(cq, sizeof cq, client), dmn_log_quote(q, sizeof q, why));
    h->refused_window = now;
    h->refused_n = 0;
}

/* ---------------------------------------------------------------- writing */

static void date_header(char *out, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static void on_written(uv_write_t *w, int status);
static void on_timer(uv_timer_t *t);

/* Closes c on the next loop turn. The functions a handler calls (respond, stream_write, ...)
 * use this instead of conn_close: closing at once would call the handler's on_close, which frees
 * the handler's request, from inside the handler's own call. The request ignores whatever the
 * handler does with it until then. */
static void conn_doom(conn *c)
{
    if (c->closing || c->doomed) return;
    c->doomed = 1;
    if (c->req) c->req->gone = 1;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    uv_timer_start(&c->timer, on_timer, 0, 0);
}

/* Queues a + b as one write. final: these are the response's last bytes. */
static void conn_write(conn *c, const char *a, size_t na, const char *b, size_t nb, int final)
{
    if (c->closing || c->doomed) return;
    wreq *wr = malloc(sizeof *wr + na + nb);
    if (!wr) {
        conn_doom(c);
        return;
    }
    wr->c = c;
    wr->final = final;
    wr->len = na + nb;
    if (na) memcpy(wr->data, a, na);
    if (nb) memcpy(wr->data + na, b, nb);
    uv_buf_t buf = uv_buf_init(wr->data, (unsigned)wr->len);
    size_t len = wr->len;
    if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0) {
        free(wr);
        conn_doom(c);
        return;
    }
    c->out_queued += len;
}

/* The head of a response: status line, Date, the framing, the handler's headers. clen < 0: the
 * body is streamed (chunked on HTTP/1.1, close-delimited on HTTP/1.0). */
/* conn_hdr: 1 "Connection: close"; 2 "Connection: keep-alive" (an HTTP/1.0 client that asked
 * for it: without the answer it waits for the server to close); 0 none (HTTP/1.1 keeps it). */
static void build_head(proto_buf *b, int status, const char *ctype, long long clen, int chunked,
                       char **hdrs, int n_hdrs, int conn_hdr, int extra_no_cache)
{
    char date[64];
    date_header(date, sizeof date);
    proto_buf_printf(b, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, dmn_http_reason(status), date);
    if (ctype) proto_buf_printf(b, "Content-Type: %s\r\n", ctype);
    /* a 204 has no body and must not say Content-Length (RFC 9110 §8.6): a CORS preflight's */
    if (clen >= 0 && status != 204)
        proto_buf_printf(b, "Content-Length: %lld\r\n", clen);
    else if (chunked) proto_buf_str(b, "Transfer-Encoding: chunked\r\n");
    if (extra_no_cache) /* proxies must not buffer an event stream (nginx honours X-Accel-Buffering) */
        proto_buf_str(b, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
    int has_conn = 0;
    for (int i = 0; i < n_hdrs; i++) {
        if (!strcasecmp(hdrs[2 * i], "Connection")) has_conn = 1;
        proto_buf_printf(b, "%s: %s\r\n", hdrs[2 * i], hdrs[2 * i + 1]);
    }
    if (conn_hdr && !has_conn)
        proto_buf_str(b, conn_hdr == 1 ? "Connection: close\r\n" : "Connection: keep-alive\r\n");
    proto_buf_str(b, "\r\n");
}

static enum proto_err err_of_status(int status)
{
    switch (status) {
    case 408: return PROTO_ERR_RECV_TIMEOUT;
    case 413: return PROTO_ERR_TOO_LARGE;
    case 414: return PROTO_ERR_URI_TOO_LONG;
    case 429: return PROTO_ERR_CONNS_PER_IP;
    case 431: return PROTO_ERR_HEADERS_TOO_LARGE;
    case 501: return PROTO_ERR_NOT_IMPLEMENTED;
    case 503: return PROTO_ERR_CONNS_FULL;
    case 505: return PROTO_ERR_HTTP_VERSION;
    }
    return PROTO_ERR_BAD_REQUEST;
}

/* An error written by the listener itself (no handler saw the request, or it cannot go on):
 * one JSON response, then the connection closes. r: the request it answers, whose CORS headers
 * it carries (NULL when no head was parsed). */
static void conn_error_to(conn *c, int status, const char *why, const dmn_http_req *r)
{
    if (c->closing || c->st == CS_LINGER) return;
    char *json = proto_err_json(err_of_status(status), why, NULL);
    proto_buf b;
    proto_buf_init(&b);
    /* Retry-After, and the request's CORS headers (daemon/http_cors.h: a page reads this 413 or
     * 408 instead of a network failure); there are at most 5 of those */
    char *hdr[2 * 8];
    int n = 0;
    if (status == 503 || status == 429) {
        hdr[0] = "Retry-After";
        hdr[1] = "1";
        n = 1;
    }
    for (int i = 0; r && i < r->n_hdrs && n < 8; i++)
        if (dmn_http_cors_header(r->hdrs[2 * i])) {
            hdr[2 * n] = r->hdrs[2 * i];
            hdr[2 * n + 1] = r->hdrs[2 * i + 1];
            n++;
        }
    build_head(&b, status, "application/json", json ? (long long)strlen(json) : 0, 0, hdr, n, 1, 0);
    c->keep_alive = 0;
    c->st = CS_HANDLER;
    conn_write(c, b.p, b.len, json, json ? strlen(json) : 0, 1);
    proto_buf_deinit(&b);
    free(json);
    log_refused(c->h, c->client, why);
}

static void conn_error(conn *c, int status, const char *why)
{
    conn_error_to(c, status, why, c->req);
}

/* ---------------------------------------------------------------- requests */

static void notify_close(dmn_http_req *r, int completed)
{
    if (r->notified) return;
    r->notified = 1;
    r->gone = 1;
    dmn_http *h = r->h;
    if (!r->c || !r->c->is_probe) {
        h->n_active--;
        if (h->h.on_close) h->h.on_close(h->h.ctx, r, completed);
    }
}

static void req_free(dmn_http_req *r)
{
    for (int i = 0; i < r->n_hdrs * 2; i++) free(r->hdrs[i]);
    free(r->hdrs);
    proto_buf_deinit(&r->body);
    free(r->path);
    free(r->headbuf);
    free(r);
}

/* The response's last bytes are written: the request is over; the connection carries the next
 * one, or closes. */
static void response_done(conn *c)
{
    dmn_http_req *r = c->req;
    c->req = NULL;
    if (r) {
        notify_close(r, 1);
        req_free(r);
    }
    if (c->closing) return;
    if (!c->keep_alive || c->h->closing) {
        /* lingering close: FIN now, drain what the client still sends, then close */
        c->st = CS_LINGER;
        if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
            conn_close(c);
            return;
        }
        arm(c);
        if (!c->reading && uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
        return;
    }
    c->st = CS_IDLE;
    c->since = now_s(c->h);
    if (!c->reading && uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
    process(c);
}

static void on_written(uv_write_t *w, int status)
{
    wreq *wr = (wreq *)w;
    conn *c = wr->c;
    int final = wr->final;
    free(wr);
    if (c->closing) return;
    if (status < 0) {
        conn_close(c); /* the client went away mid-response */
        return;
    }
    if (c->req) c->req->last_write = now_s(c->h);
    if (final) response_done(c);
}

/* ---------------------------------------------------------------- timers */

static void arm(conn *c)
{
    dmn_http *h = c->h;
    if (c->doomed) return;
    double left;
    switch (c->st) {
    case CS_IDLE: left = h->cfg.timeout_s - (now_s(h) - c->since); break;
    case CS_HEAD:
    case CS_BODY: left = h->cfg.recv_timeout_s - (now_s(h) - c->since); break;
    case CS_LINGER: left = LINGER_MS / 1e3; break;
    default:
        /* with the handler: a response that makes no progress (the client reads nothing)
         * is checked every timeout_s */
        left = h->cfg.timeout_s;
        break;
    }
    if (left < 0) left = 0;
    uv_timer_start(&c->timer, on_timer, (uint64_t)(left * 1e3) + 1, 0);
}

static void on_timer(uv_timer_t *t)
{
    conn *c = t->data;
    dmn_http *h = c->h;
    if (c->closing) return;
    if (c->doomed) {
        conn_close(c);
        return;
    }
    switch (c->st) {
    case CS_IDLE:
        if (now_s(h) - c->since >= h->cfg.timeout_s) conn_close(c);
        else arm(c);
        break;
    case CS_HEAD:
    case CS_BODY:
        if (now_s(h) - c->since >= h->cfg.recv_timeout_s) {
            if (c->req) {
                notify_close(c->req, 0);
            }
            conn_error(c, 408, c->st == CS_BODY ? "the request body did not arrive in time"
                                                : "the request head did not arrive in time");
        } else {
            arm(c);
        }
        break;
    case CS_HANDLER: {
        /* a response the client reads from (sent bytes grew since the last check) is not
         * stalled, even when one write of it has not completed (a large one-shot body) */
        unsigned long long sent = c->out_queued - c->tcp.write_queue_size;
        if (c->req && sent > c->out_seen) c->req->last_write = now_s(h);
        c->out_seen = sent;
        if (c->req && c->req->responded && c->tcp.write_queue_size > 0 &&
            now_s(h) - c->req->last_write >= h->cfg.timeout_s) {
            conn_close(c); /* the client stopped reading its response */
            return;
        }
        arm(c);
        break;
    }
    case CS_LINGER:
        conn_close(c);
        break;
    }
}

/* ---------------------------------------------------------------- reading and framing */

static void on_alloc(uv_handle_t *hd, size_t want, uv_buf_t *buf)
{
    conn *c = hd->data;
    *buf = uv_buf_init(c->h->rbuf, sizeof c->h->rbuf);
}

static void emit_body(void *ctx, const char *data, size_t len)
{
    proto_buf_add(&((dmn_http_req *)ctx)->body, data, len);
}

static void call_body(conn *c)
{
    dmn_http_req *r = c->req;
    c->st = CS_HANDLER;
    arm(c);
    r->in_body = 1;
    if (r->body.oom) {
        dmn_http_respond(r, 500, "application/json",
                         "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}",
                         99);
        return;
    }
    c->h->h.on_body(c->h->h.ctx, r);
}

/* A whole head is in c->in[off, off+len): parse it and hand the request over. */
static void start_request(conn *c, const char *p, size_t len)
{
    dmn_http *h = c->h;
    dmn_http_req *r = calloc(1, sizeof *r);
    char *hb = malloc(len + 1);
    if (!r || !hb) {
        free(r);
        free(hb);
        conn_close(c);
        return;
    }
    memcpy(hb, p, len);
    hb[len] = 0;
    const char *why;
    int st = dmn_http_parse_head(hb, len, h->cfg.max_body, &r->head, &why);
    r->headbuf = hb;
    r->h = h;
    r->c = c;
    /* a refused head's fields up to the refusal are whole: its Origin gets its CORS headers */
    if (h->h.cors_origins && !c->is_probe) dmn_http_cors_add(r, h->h.cors_origins(h->h.ctx));
    if (st) {
        conn_error_to(c, st, why, r);
        req_free(r);
        return;
    }
    r->path = strndup(r->head.target, strcspn(r->head.target, "?"));
    if (!r->path) {
        req_free(r);
        conn_close(c);
        return;
    }
    snprintf(r->client, sizeof r->client, "%s", c->client);
    r->is_head = !strcmp(r->head.method, "HEAD");
    r->has_body = r->head.chunked || r->head.content_length > 0;
    r->cl_left = r->head.content_length > 0 ? (unsigned long long)r->head.content_length : 0;
    c->keep_alive = r->head.keep_alive;
    c->req = r;
    c->body_total = 0;
    c->st = CS_HANDLER; /* until the body is wanted */
    if (c->is_probe) {
        static const char ok[] = "{\"status\":\"ok\"}";
        dmn_http_add_header(r, "Connection", "close");
        dmn_http_respond(r, 200, "application/json", ok, sizeof ok - 1);
        return;
    }
    h->n_active++;
    if (h->h.on_headers) h->h.on_headers(h->h.ctx, r);
    if (c->closing || c->req != r) return;
    if (r->responded) {
        /* answered from the head: a body is not read (the connection closes after the answer,
         * set when the response was built) */
        return;
    }
    if (r->has_body) {
        c->st = CS_BODY; /* the recv deadline still runs from the head's first byte */
        arm(c);
        if (r->head.expect_continue && r->head.minor == 1) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            conn_write(c, cont, sizeof cont - 1, NULL, 0, 0);
        }
        return;
    }
    call_body(c);
}

/* Parses what has arrived, as far as the connection's state allows. */
static void process(conn *c)
{
    dmn_http *h = c->h;
    while (!c->closing && !c->doomed) {
        const char *p = c->in.p ? c->in.p + c->in.off : NULL;
        size_t n = proto_buf_pending(&c->in);
        if (c->st == CS_IDLE || c->st == CS_HEAD) {
            if (c->st == CS_IDLE) {
                /* skip the CR LFs a client may send between requests */
                size_t k = 0;
                while (k + 1 < n && p[k] == '\r' && p[k + 1] == '\n') k += 2;
                if (k) proto_buf_consume(&c->in, k);
                p = c->in.p ? c->in.p + c->in.off : NULL;
                n = proto_buf_pending(&c->in);
                if (!n) {
                    arm(c);
                    return;
                }
                c->st = CS_HEAD;
                c->since = now_s(h);
                arm(c);
            }
            long e = dmn_http_head_end(p, n);
            if (e < 0) {
                conn_error(c, 400, "a bare LF ends a line of the request head (CR LF expected)");
                return;
            }
            if (e == 0 || (size_t)e > h->cfg.mem_limit) {
                if (n > h->cfg.mem_limit || (size_t)e > h->cfg.mem_limit) {
                    int in_line = memchr(p, '\n', n < h->cfg.mem_limit ? n : h->cfg.mem_limit) == NULL;
                    conn_error(c, in_line ? 414 : 431,
                               in_line ? "the request line is longer than this server accepts"
                                       : "the request head is larger than this server accepts");
                }
                return;
            }
            start_request(c, p, (size_t)e);
            if (!c->closing && c->st != CS_LINGER) proto_buf_consume(&c->in, (size_t)e);
            continue;
        }
        if (c->st == CS_BODY) {
            dmn_http_req *r = c->req;
            if (!n) return;
            size_t used = 0;
            int done;
            if (r->head.chunked) {
                const char *why;
                done = dmn_http_chunked_feed(&r->ck, p, n, &used, &c->body_total, h->cfg.max_body,
                                             emit_body, r, &why);
                if (done > 1) {
                    proto_buf_consume(&c->in, used);
                    notify_close(r, 0);
                    conn_error(c, done, why);
                    return;
                }
            } else {
                used = n < r->cl_left ? n : (size_t)r->cl_left;
                proto_buf_add(&r->body, p, used);
                r->cl_left -= used;
                done = r->cl_left == 0;
            }
            proto_buf_consume(&c->in, used);
            if (!done) return;
            call_body(c);
            continue;
        }
        return; /* CS_HANDLER: pipelined bytes wait; CS_LINGER: discarded on read */
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    dmn_http *h = c->h;
    if (c->closing || c->doomed || nread == 0) return;
    if (nread < 0) {
        /* EOF or a reset: a request with the handler ends now (it is cancelled) */
        conn_close(c);
        return;
    }
    if (c->st == CS_LINGER) return;
    if (c->in.off) {
        /* what is left of the last read goes to the front: a long keep-alive connection must
         * not creep through memory */
        size_t n = proto_buf_pending(&c->in);
        memmove(c->in.p, c->in.p + c->in.off, n);
        c->in.len = n;
        c->in.off = 0;
    }
    proto_buf_add(&c->in, buf->base, (size_t)nread);
    if (c->in.oom) {
        conn_close(c);
        return;
    }
    if (c->st == CS_HANDLER) {
        /* pipelined bytes of the next request: keep at most one head's worth, then stop reading
         * (a hang-up is then noticed when the response is written) */
        if (proto_buf_pending(&c->in) > h->cfg.mem_limit + READ_CHUNK) {
            uv_read_stop(s);
            c->reading = 0;
        }
        return;
    }
    process(c);
}

/* ---------------------------------------------------------------- connections */

static void conn_handle_closed(uv_handle_t *hd)
{
    conn *c = hd->data;
    dmn_http *h = c->h;
    if (--c->handles == 0) {
        proto_buf_deinit(&c->in);
        free(c);
    }
    dmn_http_handle_closed(h);
}

static void conn_close(conn *c)
{
    if (c->closing) return;
    dmn_http *h = c->h;
    c->closing = 1;
    if (c->req) {
        notify_close(c->req, 0);
        req_free(c->req);
        c->req = NULL;
    }
    if (c->prev) c->prev->next = c->next;
    else if (h->conns == c) h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->counted) h->n_conns--;
    if (c->lingering) h->n_lingering--;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
    return 0;
}

static int same_endpoint(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (!same_host(a, b)) return 0;
    if (a->ss_family == AF_INET) return ((const struct sockaddr_in *)a)->sin_port == ((const struct sockaddr_in *)b)->sin_port;
    return ((const struct sockaddr_in6 *)a)->sin6_port == ((const struct sockaddr_in6 *)b)->sin6_port;
}

/* The connection to give up for a newcomer: the one that has been sending its request (or sat
 * idle between requests) the longest, of one address (peer) or of all (NULL). A connection whose
 * request is with the handler is never chosen: it is doing real work. */
static conn *oldest_receiving(dmn_http *h, const struct sockaddr_storage *peer)
{
    conn *best = NULL;
    for (conn *c = h->conns; c; c = c->next) {
        if (!c->counted || c->closing) continue;
        if (c->st != CS_IDLE && c->st != CS_HEAD && c->st != CS_BODY) continue;
        if (peer && !same_host(&c->peer, peer)) continue;
        if (!best || c->since < best->since) best = c;
    }
    return best;
}

static int count_host(dmn_http *h, const struct sockaddr_storage *peer)
{
    int n = 0;
    for (conn *c = h->conns; c; c = c->next)
        if (c->counted && !c->closing && same_host(&c->peer, peer)) n++;
    return n;
}

static void evict(conn *victim, const char *why)
{
    log_refused(victim->h, victim->client, why);
    if (victim->st == CS_IDLE) {
        conn_close(victim); /* between requests: nothing to answer */
        return;
    }
    if (victim->req) notify_close(victim->req, 0);
    conn_error(victim, 408, why);
}

static void on_connection(uv_stream_t *srv, int status)
{
    dmn_http *h = srv->data;
    if (status < 0 || h->closing) {
        if (status < 0) log_refused(h, "-", uv_strerror(status)); /* EMFILE and the like */
        return;
    }
    conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->h = h;
    uv_tcp_init(h->loop, &c->tcp);
    uv_timer_init(h->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles = 2;
    h->handles += 2;
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    int alen = sizeof c->peer;
    uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer, &alen);
    if (c->peer.ss_family == AF_INET) uv_ip4_name((struct sockaddr_in *)&c->peer, c->client, sizeof c->client);
    else if (c->peer.ss_family == AF_INET6) uv_ip6_name((struct sockaddr_in6 *)&c->peer, c->client, sizeof c->client);
    uv_tcp_nodelay(&c->tcp, 1);
    c->st = CS_HEAD; /* a new connection owes its first request within the recv deadline */
    c->since = now_s(h);
    c->keep_alive = 1;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
    if (h->probe_addr_set && same_endpoint(&c->peer, &h->probe_addr)) {
        c->is_probe = 1; /* not counted, not limited; answered in start_request */
        arm(c);
        return;
    }
    /* the limits: make room by closing the slowest sender, else refuse the newcomer */
    if (h->cfg.max_conns_per_ip > 0 && count_host(h, &c->peer) >= h->cfg.max_conns_per_ip) {
        conn *v = oldest_receiving(h, &c->peer);
        if (v) {
            evict(v, "closed for a newer connection of the same address (per-address connection limit)");
        } else {
            c->lingering = 1;
            h->n_lingering++;
            conn_error(c, 429, "too many connections from this address");
            return;
        }
    }
    if (h->n_conns >= h->cfg.max_conns) {
        conn *v = oldest_receiving(h, NULL);
        if (v) {
            evict(v, "closed for a newer connection (connection limit reached)");
        } else {
            if (h->n_lingering >= h->cfg.max_conns) {
                conn_close(c);
                return;
            }
            c->lingering = 1;
            h->n_lingering++;
            conn_error(c, 503, "the server holds as many connections as it accepts; retry shortly");
            return;
        }
    }
    c->counted = 1;
    h->n_conns++;
    arm(c);
}

/* ---------------------------------------------------------------- public request API */

const char *dmn_http_method(const dmn_http_req *r) { return r->head.method; }
const char *dmn_http_path(const dmn_http_req *r) { return r->path; }
const char *dmn_http_client(const dmn_http_req *r) { return r->client; }
void dmn_http_set_data(dmn_http_req *r, void *data) { r->data = data; }
void *dmn_http_get_data(const dmn_http_req *r) { return r->data; }
int dmn_http_responded(const dmn_http_req *r) { return r->responded; }

const char *dmn_http_header(const dmn_http_req *r, const char *name)
{
    return dmn_http_head_get(&r->head, name);
}

const char *dmn_http_body(const dmn_http_req *r, size_t *len)
{
    *len = r->body.len;
    return r->body.p ? r->body.p : "";
}

void dmn_http_body_release(dmn_http_req *r)
{
    if (!r->in_body) return; /* still arriving (the handler answered from the head) */
    proto_buf_deinit(&r->body);
    proto_buf_init(&r->body);
}

void dmn_http_add_header(dmn_http_req *r, const char *name, const char *value)
{
    if (r->responded) return;
    /* a header must not smuggle a line break into the response */
    if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n")) return;
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
    if (!strcasecmp(name, "Connection") && strcasestr(value, "close")) r->close_after = 1;
    r->n_hdrs++;
}

/* Whether the connection closes after this response: asked for by either side, HTTP/1.0 without
 * keep-alive, a body left unread (answered from the head), or the listener closing. */
static int closes_after(dmn_http_req *r)
{
    conn *c = r->c;
    if (r->close_after || !c->keep_alive || c->h->closing || (r->has_body && !r->in_body)) c->keep_alive = 0;
    return !c->keep_alive;
}

void dmn_http_respond(dmn_http_req *r, int status, const char *content_type, const char *body,
                      size_t len)
{
    if (r->responded || r->gone || !r->c || r->c->closing) return;
    conn *c = r->c;
    r->responded = 1;
    int close = closes_after(r);
    proto_buf b;
    proto_buf_init(&b);
    build_head(&b, status, content_type, (long long)len, 0, r->hdrs, r->n_hdrs,
               close                ? 1
               : r->head.minor == 0 ? 2
                                    : 0,
               0);
    if (b.oom) {
        proto_buf_deinit(&b);
        conn_doom(c);
        return;
    }
    r->last_write = now_s(c->h);
    conn_write(c, b.p, b.len, body, r->is_head ? 0 : len, 1);
    proto_buf_deinit(&b);
}

void dmn_http_stream_begin(dmn_http_req *r, int status, const char *content_type)
{
    if (r->responded || r->gone || !r->c || r->c->closing) return;
    conn *c = r->c;
    r->responded = 1;
    r->streaming = 1;
    r->chunked_out = r->head.minor == 1;
    if (!r->chunked_out) r->close_after = 1; /* HTTP/1.0: the body ends with the connection */
    int close = closes_after(r);
    proto_buf b;
    proto_buf_init(&b);
    build_head(&b, status, content_type, -1, r->chunked_out, r->hdrs, r->n_hdrs, close, 1);
    r->last_write = now_s(c->h);
    conn_write(c, b.p, b.len, NULL, 0, 0);
    proto_buf_deinit(&b);
}

void dmn_http_stream_write(dmn_http_req *r, const char *data, size_t len)
{
    if (!r->streaming || r->gone || r->stream_end || !len || r->is_head || r->c->closing) return;
    conn *c = r->c;
    if (c->tcp.write_queue_size > MAX_PENDING_OUT) {
        /* the client does not read what it asked for: it is gone as far as we are concerned */
        conn_doom(c);
        return;
    }
    r->last_write = now_s(c->h);
    if (r->chunked_out) {
        char pre[24];
        int k = snprintf(pre, sizeof pre, "%zx\r\n", len);
        proto_buf b;
        proto_buf_init(&b);
        proto_buf_add(&b, pre, (size_t)k);
        proto_buf_add(&b, data, len);
        proto_buf_add(&b, "\r\n", 2);
        if (b.oom) conn_doom(c);
        else conn_write(c, b.p, b.len, NULL, 0, 0);
        proto_buf_deinit(&b);
    } else {
        conn_write(c, data, len, NULL, 0, 0);
    }
}

void dmn_http_stream_end(dmn_http_req *r)
{
    if (!r->streaming || r->stream_end || r->gone || r->c->closing) return;
    r->stream_end = 1;
    /* the last chunk; HTTP/1.0 has none, and an empty write still completes in order */
    if (r->chunked_out && !r->is_head) conn_write(r->c, "0\r\n\r\n", 5, NULL, 0, 1);
    else conn_write(r->c, "", 0, NULL, 0, 1);
}

double dmn_http_stream_idle(const dmn_http_req *r)
{
    return now_s(r->h) - r->last_write;
}

/* ---------------------------------------------------------------- the listener */

static void listener_closed(uv_handle_t *hd)
{
    dmn_http_handle_closed(hd->data);
}

void dmn_http_handle_closed(dmn_http *h)
{
    if (--h->handles == 0 && h->closing) free(h);
}

double dmn_http_now(const dmn_http *h)
{
    return (double)uv_now(h->loop) / 1e3;
}

dmn_http *dmn_http_new(uv_loop_t *loop, const dmn_http_cfg *cfg, const dmn_http_handler *hd,
                       char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(cfg->host, ':')) {
        if (uv_ip6_addr(cfg->host, cfg->port, (struct sockaddr_in6 *)&ss) != 0) {
            snprintf(err, errlen, "%s listener: bad IPv6 address '%s'", cfg->name, cfg->host);
            return NULL;
        }
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
    if (h->cfg.recv_timeout_s <= 0) h->cfg.recv_timeout_s = h->cfg.timeout_s;
    if (h->cfg.max_conns <= 0) h->cfg.max_conns = 1;
    h->h = *hd;
    uv_tcp_init(loop, &h->listener);
    h->listener.data = h;
    h->handles = 1;
    h->listening = 1;
    /* the backlog: what arrives in a burst between two turns of the loop; SOMAXCONN caps it */
    int rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&h->listener, 1024, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "%s listener: cannot listen on %s:%d: %s", cfg->name, cfg->host, cfg->port, uv_strerror(rc));
        h->closing = 1;
        h->listening = 0;
        uv_close((uv_handle_t *)&h->listener, listener_closed);
        return NULL;
    }
    int alen = sizeof h->bound;
    uv_tcp_getsockname(&h->listener, (struct sockaddr *)&h->bound, &alen);
    h->port = ntohs(h->bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&h->bound)->sin6_port
                                                   : ((struct sockaddr_in *)&h->bound)->sin_port);
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

int dmn_http_conns(const dmn_http *h)
{
    return h->n_conns;
}

int dmn_http_slots_free(const dmn_http *h)
{
    /* what on_connection can give a newcomer: a slot not taken, or one taken by a connection
     * that is idle or still sending (evicted for it); one serving or lingering is not given up */
    int held = 0;
    for (const conn *c = h->conns; c; c = c->next)
        if (c->counted && !c->closing && c->st != CS_IDLE && c->st != CS_HEAD && c->st != CS_BODY)
            held++;
    return h->cfg.max_conns - held;
}

void dmn_http_quiesce(dmn_http *h)
{
    if (!h->listening) return;
    h->listening = 0;
    uv_close((uv_handle_t *)&h->listener, listener_closed);
}

void dmn_http_free(dmn_http *h)
{
    if (!h) return;
    dmn_http_quiesce(h);
    h->closing = 1;
    while (h->conns) conn_close(h->conns);
    dmn_http_probe_abort(h);
    if (h->handles == 0) free(h);
}
