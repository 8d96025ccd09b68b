/* daemon/http.h — the HTTP/1.1 listeners (API and admin), on the libuv loop.
 *
 * The loop owns every socket: a uv_tcp_t listens and accepts, each connection is a uv_tcp_t read
 * and written by the loop, and the request framing is daemon/http_parse.c. So every callback —
 * request handlers, stream writes, hang-up notices — runs on the loop thread, the thread that owns
 * the scheduler's state and receives its events: handlers need no locks, and a response is
 * written the moment an event arrives.
 *
 * Why not libmicrohttpd any more (it served until this wave): driven from an external epoll, it
 * stopped accepting for good once it had been at its connection limit and the last connection
 * closed inside the same MHD_run (it re-arms the listening socket only at the start of the next
 * run, and nothing made another run happen); it times out idle connections but not slow ones (a
 * header line every 10 s kept a connection for ever); and the errors it writes itself are HTML,
 * with the status line and headers sent twice for a bad Content-Length. Each of those is the
 * front door of the daemon; owning the framing (a few hundred lines, fuzzed) fixes all of them.
 *
 * What a connection goes through:
 *   accepted   always, while the listener is open (the accept queue never stalls). Over the
 *              per-address limit: the oldest connection of that address still sending its
 *              request is closed to make room, else the newcomer gets 429 JSON. Over the total
 *              limit: the oldest connection still sending its request (a slow client, a
 *              slowloris) is closed, else the newcomer gets 503 JSON with Retry-After.
 *   head       bytes until CR LF CR LF, at most mem_limit bytes (431 / 414 JSON beyond);
 *   body       Content-Length or chunked, at most max_body (413 JSON); Expect: 100-continue is
 *              answered;
 *              the head and the body must arrive within recv_timeout_s of the request's first
 *              byte — a total, not a time between bytes (nginx's client_header_timeout /
 *              client_body_timeout idea): 408 JSON and the connection closes;
 *   handler    on_headers, on_body; the connection keeps being read, so a hang-up is noticed
 *              at once (on_close with completed = 0) while the request computes;
 *   response   whole (Content-Length) or streamed (chunked); a client that stops reading its
 *              stream for timeout_s, or lets more than a few MiB pile up, is closed;
 *   keep-alive the next request on the connection, or close after timeout_s idle.
 * Every error the listener itself writes is one well-formed response with the OpenAI-style JSON
 * error body (proto/errors.h), then a lingering close (the unread rest of the request is drained
 * for a moment so the client reads the error instead of a reset).
 *
 * The self-probe: dmn_http_probe() connects to the listener from the loop and asks for /health,
 * answered by this module itself (never logged or counted). A listener that cannot answer it
 * makes /ready fail, and a stuck one withholds the systemd watchdog (daemon/serve.c), so a daemon
 * that cannot accept is restarted instead of trusted.
 *
 * Ownership: dmn_http_req objects belong to this module; a handler may keep a pointer from
 * on_headers until on_close, never after. Threads: loop thread only. */
#ifndef TANDEM_DMN_HTTP_H
#define TANDEM_DMN_HTTP_H
#include <stddef.h>
#include <uv.h>

typedef struct dmn_http dmn_http;
typedef struct dmn_http_req dmn_http_req;

typedef struct dmn_http_handler {
    /* Headers are in, the body is not read yet. May respond (an early rejection: the body is
     * then skipped and the connection closed); otherwise the body is read. May be NULL. */
    void (*on_headers)(void *ctx, dmn_http_req *r);
    /* The whole body is in. Must respond now or later (dmn_http_respond / dmn_http_stream_*). */
    void (*on_body)(void *ctx, dmn_http_req *r);
    /* The request is over: the response was sent, or the client went away, or the listener is
     * closing. Called once for every request that reached on_headers. After it returns the
     * request pointer is invalid. May be NULL. */
    void (*on_close)(void *ctx, dmn_http_req *r, int completed);
    void *ctx;
    /* CORS (daemon/http_cors.h): the origins whose web pages may read this listener's answers
     * ("" for none), asked for each request. From it the listener adds the CORS headers to every
     * answer to a request whose head it parsed, its own refusals included (413, 408, 400); the
     * handler answers preflights (dmn_http_cors_preflight). May be NULL: no CORS (the admin
     * listener). */
    const char *(*cors_origins)(void *ctx);
} dmn_http_handler;

typedef struct dmn_http_cfg {
    const char *name; /* "api", "admin": for logs */
    const char *host; /* IPv4 or IPv6 literal */
    int port;         /* 0: any free port (see dmn_http_port) */
    size_t max_body;
    size_t mem_limit; /* bytes of one request head (request line + header fields) */
    int max_conns;
    int max_conns_per_ip; /* 0: no limit */
    int timeout_s;        /* idle keep-alive connection / stalled response writes */
    int recv_timeout_s;   /* a request's head and body, in total; 0: timeout_s */
} dmn_http_cfg;

/* Starts listening. Returns NULL with a message in err (address in use, bad host, ...). */
dmn_http *dmn_http_new(uv_loop_t *loop, const dmn_http_cfg *cfg, const dmn_http_handler *h,
                       char *err, size_t errlen);
/* The port actually bound. */
int dmn_http_port(const dmn_http *h);
/* Stops accepting new connections; open connections go on. */
void dmn_http_quiesce(dmn_http *h);
/* Requests between on_headers and on_close. */
int dmn_http_active(const dmn_http *h);
/* Open connections (the self-probe's excluded). */
int dmn_http_conns(const dmn_http *h);
/* Connections a newcomer could still get (max_conns less those holding a request being served
 * or an answer being written; idle or still-sending ones are evicted for a newcomer): 0 or less
 * means a new connection gets 503. The per-address limit is not counted. */
int dmn_http_slots_free(const dmn_http *h);
/* Ends every request (on_close with completed = 0), closes every connection and the listener;
 * memory is released after the loop ran the close callbacks. */
void dmn_http_free(dmn_http *h);

/* Starts a self-probe unless one is in flight: connect, GET /health, expect 200 within
 * timeout_ms. The result is read with dmn_http_probe_failing. */
void dmn_http_probe(dmn_http *h, unsigned timeout_ms);
/* Consecutive self-probes that failed (0: the last one succeeded, or none ran yet), and in
 * *since the loop time (seconds) of the first of them. */
int dmn_http_probe_failing(const dmn_http *h, double *since);

/* Request accessors. Strings are valid until on_close. */
const char *dmn_http_method(const dmn_http_req *r);
const char *dmn_http_path(const dmn_http_req *r); /* without the query string */
const char *dmn_http_header(const dmn_http_req *r, const char *name); /* NULL when absent */
const char *dmn_http_body(const dmn_http_req *r, size_t *len);
/* The handler is done with the body (parsed, or copied for a thread): its memory goes now, not at
 * on_close (a generation may run for minutes; up to max_body bytes a request). After it the body
 * reads as empty. */
void dmn_http_body_release(dmn_http_req *r);
const char *dmn_http_client(const dmn_http_req *r); /* peer address text */
void dmn_http_set_data(dmn_http_req *r, void *data);
void *dmn_http_get_data(const dmn_http_req *r);
int dmn_http_responded(const dmn_http_req *r);

/* Adds a response header (before dmn_http_respond / dmn_http_stream_begin). Copies both.
 * "Connection: close" also closes the connection after the response. */
void dmn_http_add_header(dmn_http_req *r, const char *name, const char *value);
/* A whole response; body is copied. Ignored after the request ended or once responded. */
void dmn_http_respond(dmn_http_req *r, int status, const char *content_type, const char *body,
                      size_t len);
/* A streamed (chunked) response: begin once, write any number of times, end once. */
void dmn_http_stream_begin(dmn_http_req *r, int status, const char *content_type);
void dmn_http_stream_write(dmn_http_req *r, const char *data, size_t len);
void dmn_http_stream_end(dmn_http_req *r);
/* Seconds since the stream last got bytes (for keep-alive comments). */
double dmn_http_stream_idle(const dmn_http_req *r);

#endif
