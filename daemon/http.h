/* daemon/http.h — an HTTP/1.1 listener (libmicrohttpd) driven by the libuv loop.
 *
 * MHD runs without threads of its own ("external polling" with MHD_USE_EPOLL): its epoll fd is
 * watched by a uv_poll_t, a uv_timer_t follows MHD_get_timeout(), and MHD_run() is called from
 * those two callbacks. So every MHD callback — request handlers, content readers, completion
 * notices — runs on the loop thread, the same thread that owns the scheduler's state and receives
 * its events: handlers need no locks, and a response can be written the moment an event arrives.
 * (The alternative, MHD's own thread pool handing requests to the loop through a queue, needs a
 * second queue back for every streamed byte and locks around each connection's state.)
 *
 * A request whose answer is not ready is suspended (MHD_suspend_connection) and resumed when the
 * handler responds or has stream bytes; a suspended connection costs no polling. MHD does not
 * watch a suspended socket, so to notice a client that hangs up while its request computes, the
 * socket is watched for EPOLLRDHUP by a second uv_poll_t during suspension; a hang-up ends the
 * request at once (on_close), which lets the owner cancel its work within the same loop turn.
 * (A client that half-closes its sending side while waiting for the answer counts as gone; HTTP
 * clients do not do that.)
 *
 * Bounds enforced here, before the handler sees a request: body size (Content-Length checked
 * before reading, chunked bodies while reading: 413), conflicting Content-Length headers or
 * Content-Length together with Transfer-Encoding (400, connection closed: libmicrohttpd 0.9.75
 * accepts both and that is how requests are smuggled past proxies), header memory
 * (MHD_OPTION_CONNECTION_MEMORY_LIMIT), connections in total and per client address, idle
 * timeouts.
 *
 * Ownership: dmn_http_req objects belong to this module; a handler may keep a pointer from
 * on_body until on_close, never after. Threads: loop thread only. */
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
     * closing. Called once for every request that reached on_body, and for those that got an
     * early response. After it returns the request pointer is invalid. May be NULL. */
    void (*on_close)(void *ctx, dmn_http_req *r, int completed);
    void *ctx;
} dmn_http_handler;

typedef struct dmn_http_cfg {
    const char *name; /* "api", "admin": for logs */
    const char *host; /* IPv4 or IPv6 literal */
    int port;         /* 0: any free port (see dmn_http_port) */
    size_t max_body;
    size_t mem_limit; /* per-connection memory (headers + buffers) */
    int max_conns;
    int max_conns_per_ip; /* 0: no limit */
    int timeout_s;        /* idle connection timeout */
} dmn_http_cfg;

/* Starts listening. Returns NULL with a message in err (address in use, bad host, ...). */
dmn_http *dmn_http_new(uv_loop_t *loop, const dmn_http_cfg *cfg, const dmn_http_handler *h,
                       char *err, size_t errlen);
/* The port actually bound. */
int dmn_http_port(const dmn_http *h);
/* Stops accepting new connections (drain); open connections go on. */
void dmn_http_quiesce(dmn_http *h);
/* Open connections / requests between headers and on_close. */
int dmn_http_active(const dmn_http *h);
/* Ends every request (on_close with completed = 0), stops MHD, closes the loop handles; memory
 * is released after the loop ran the close callbacks. */
void dmn_http_free(dmn_http *h);

/* Request accessors. Strings are valid until on_close. */
const char *dmn_http_method(const dmn_http_req *r);
const char *dmn_http_path(const dmn_http_req *r); /* without the query string */
const char *dmn_http_header(const dmn_http_req *r, const char *name); /* NULL when absent */
const char *dmn_http_body(const dmn_http_req *r, size_t *len);
const char *dmn_http_client(const dmn_http_req *r); /* peer address text */
void dmn_http_set_data(dmn_http_req *r, void *data);
void *dmn_http_get_data(const dmn_http_req *r);
int dmn_http_responded(const dmn_http_req *r);

/* Adds a response header (before dmn_http_respond / dmn_http_stream_begin). Copies both. */
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
