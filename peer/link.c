/* peer/link.c — see link.h.
 *
 * Waiting: a wait progresses the worker, and when nothing moved arms the worker's event file
 * descriptor (UCP_FEATURE_WAKEUP) and polls it for at most 10 ms, so that an idle link costs no
 * CPU and a transport without wake-up events (some shared-memory ones) still makes progress
 * every 10 ms. With polling on (peer_link_set_poll_us) a wait within the window after the
 * worker's last activity (each worker's `active` stamp: progress that did something, a frame
 * or a tagged chunk that arrived) returns after the progress without sleeping, and the caller's
 * loop comes back at once: the worker is busy-polled until the window has passed quietly. */
#include "peer/link.h"
#include "proto/buf.h"
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

struct peer_conn {
    ucp_worker_h worker;
    int owns_worker;
    int efd;
    double *active;     /* the worker's last activity (polling): own_active or the listener's */
    double own_active;
    ucp_ep_h ep;
    ucp_ep_h aep;         /* the second endpoint, by worker address (peer_conn_open_address) */
    ucp_address_t *laddr; /* this worker's address, handed out by peer_conn_local_address */
    size_t laddr_len;
    char transport[80];   /* what UCX chose for aep's lanes, or "tcp stream" */
    _Atomic int adead;    /* aep reported an error */
    _Atomic int dead;
    proto_buf rx;
    size_t frame; /* bytes of the frame handed out by the last receive (consumed at the next) */
    void *user;
    char addr[64];
    peer_conn *next; /* a listener's list of accepted, not yet handed out connections */
};

struct peer_listener {
    ucp_worker_h worker;
    int efd;
    double active; /* the worker's last activity (polling), shared by its connections */
    ucp_listener_h listener;
    int port;
    peer_conn *pending;
};

double peer_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void *peer_bulk_alloc(size_t n, size_t *cap)
{
    const size_t huge = (size_t)2 << 20;
    *cap = 0;
    if (n < huge / 2 || n > SIZE_MAX - huge) {
        void *p = malloc(n ? n : 1);
        if (p) *cap = n;
        return p;
    }
    size_t c = (n + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, c)) return NULL;
    (void)madvise(p, c, MADV_HUGEPAGE); /* a hint: without THP the pages are ordinary */
    *cap = c;
    return p;
}

/* ---------------------------------------------------------------- polling */

static _Atomic int g_poll_us;

void peer_link_set_poll_us(int us)
{
    atomic_store(&g_poll_us, us < 0 ? 0 : us > PEER_POLL_US_MAX ? PEER_POLL_US_MAX : us);
}

int peer_link_poll_us(void)
{
    return atomic_load_explicit(&g_poll_us, memory_order_relaxed);
}

double peer_link_poll_s(void)
{
    return atomic_load_explicit(&g_poll_us, memory_order_relaxed) * 1e-6;
}

void peer_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Something happened on the worker whose stamp this is (polling only: no clock read else). */
static inline void mark_active(double *active)
{
    if (active && atomic_load_explicit(&g_poll_us, memory_order_relaxed)) *active = peer_now();
}

/* ---------------------------------------------------------------- one UCX context per process */

static ucp_context_h g_ctx;
static ucs_status_t g_ctx_status = UCS_ERR_NO_ELEM;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A daemon restarted on its kv_listen port must get the port back while its old connections
 * are in TIME_WAIT (SO_REUSEADDR); UCX's default refuses ("Device is busy"), and UCX 1.13 reads
 * this one from the environment only (ucp_config_modify accepts the key but the connection
 * manager never sees it). Set before main, while the process has one thread (setenv is not
 * safe beside a getenv); the user's own UCX_TCP_CM_REUSEADDR wins. */
__attribute__((constructor)) static void reuseaddr_default(void)
{
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
}

static void ctx_init(void)
{
    ucp_config_t *cfg;
    g_ctx_status = ucp_config_read(NULL, NULL, &cfg);
    if (g_ctx_status != UCS_OK) return;
    ucp_params_t p = {0};
    p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    p.features = UCP_FEATURE_STREAM | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    p.mt_workers_shared = 1; /* one worker per thread, several threads: the context is shared */
    g_ctx_status = ucp_init(&p, cfg, &g_ctx);
    ucp_config_release(cfg);
}

/* mode: UCS_THREAD_MODE_SINGLE (one thread ever), or SERIALIZED (a listener's, whose thread
 * of the moment may change: the node's receiving threads take turns, one at a time) */
static int worker_new(ucp_worker_h *w, int *efd, ucs_thread_mode_t mode, char *err, size_t errlen)
{
    pthread_once(&g_once, ctx_init);
    if (g_ctx_status != UCS_OK) {
        snprintf(err, errlen, "UCX: %s", ucs_status_string(g_ctx_status));
        return PEER_ERR_IO;
    }
    ucp_worker_params_t wp = {0};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = mode;
    ucs_status_t st = ucp_worker_create(g_ctx, &wp, w);
    if (st == UCS_OK && ucp_worker_get_efd(*w, efd) != UCS_OK) *efd = -1;
    if (st != UCS_OK) {
        snprintf(err, errlen, "UCX worker: %s", ucs_status_string(st));
        return PEER_ERR_IO;
    }
    return PEER_OK;
}

/* Progresses w; when nothing moved, sleeps on its event fd up to ms milliseconds — unless
 * polling is on and w was active within the window (*active): then it returns at once, and the
 * caller, which loops until what it waits for is there, progresses w again. */
static void worker_wait(ucp_worker_h w, int efd, int ms, double *active)
{
    if (ucp_worker_progress(w)) {
        mark_active(active);
        return;
    }
    if (ms <= 0) return;
    int poll_us = atomic_load_explicit(&g_poll_us, memory_order_relaxed);
    if (poll_us && active && peer_now() - *active < poll_us * 1e-6) {
        peer_cpu_relax();
        return;
    }
    if (efd < 0) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
        return;
    }
    ucs_status_t st = ucp_worker_arm(w);
    if (st == UCS_ERR_BUSY) return;
    struct pollfd pfd = {efd, POLLIN, 0};
    poll(&pfd, 1, ms);
}

static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *err,
                      size_t errlen)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1]) {
        snprintf(err, errlen, "bad address '%s' (HOST:PORT)", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535) {
        snprintf(err, errlen, "bad port in '%s'", addr);
        return -1;
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (ss->ss_family == AF_INET) ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    return 0;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    (void)status;
    peer_conn *c = arg;
    atomic_store(&c->dead, 1);
}

/* The address endpoint failed: while it is being made, only that attempt fails (the stream
 * carries on); once in use, the connection is dead. */
static void on_aep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    (void)status;
    peer_conn *c = arg;
    atomic_store(&c->adead, 1);
    if (c->transport[0]) atomic_store(&c->dead, 1);
}

static peer_conn *conn_alloc(ucp_worker_h w, int efd, double *active)
{
    peer_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->worker = w;
    c->efd = efd;
    c->active = active ? active : &c->own_active;
    proto_buf_init(&c->rx);
    return c;
}

int peer_conn_connect(const char *addr, peer_conn **out, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    *out = NULL;
    if (parse_addr(addr, &ss, &sl, err, errlen)) return PEER_ERR_IO;
    ucp_worker_h w;
    int efd;
    int st = worker_new(&w, &efd, UCS_THREAD_MODE_SINGLE, err, errlen);
    if (st) return st;
    peer_conn *c = conn_alloc(w, efd, NULL);
    if (!c) {
        ucp_worker_destroy(w);
        return PEER_ERR_NOMEM;
    }
    c->owns_worker = 1;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    ucp_ep_params_t ep = {0};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&ss;
    ep.sockaddr.addrlen = sl;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = c;
    ucs_status_t us = ucp_ep_create(w, &ep, &c->ep);
    if (us != UCS_OK) {
        snprintf(err, errlen, "connect %s: %s", addr, ucs_status_string(us));
        c->ep = NULL;
        peer_conn_free(c);
        return PEER_ERR_IO;
    }
    *out = c;
    return PEER_OK;
}

void peer_conn_kill(peer_conn *c)
{
    atomic_store(&c->dead, 1);
}

int peer_conn_dead(const peer_conn *c)
{
    return atomic_load(&c->dead);
}

const char *peer_conn_addr(const peer_conn *c)
{
    return c->addr;
}

void peer_conn_set_user(peer_conn *c, void *user)
{
    c->user = user;
}

void *peer_conn_user(const peer_conn *c)
{
    return c->user;
}

/* Closes one endpoint of c: a graceful close flushes, 2 s bound it for a peer that no longer
 * answers; still in progress then, the worker's destruction takes it with the endpoint. */
static void ep_close(peer_conn *c, ucp_ep_h ep, int force)
{
    ucp_request_param_t p = {0};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    /* force (-1: never, an endpoint without peer-failure handling may not be forced closed) */
    p.flags = force >= 0 && (force || atomic_load(&c->dead)) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        double end = peer_now() + 2;
        while (ucp_request_check_status(r) == UCS_INPROGRESS && peer_now() < end)
            worker_wait(c->worker, c->efd, 5, c->active);
        if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
    }
}

void peer_conn_free(peer_conn *c)
{
    if (!c) return;
    /* a dead connection's address endpoint is not flushed (its peer would never answer): the
     * worker's destruction below takes it */
    if (c->aep && !atomic_load(&c->dead)) ep_close(c, c->aep, -1);
    if (c->ep) ep_close(c, c->ep, 0);
    if (c->laddr) ucp_worker_release_address(c->worker, c->laddr);
    if (c->owns_worker) ucp_worker_destroy(c->worker);
    proto_buf_deinit(&c->rx);
    free(c);
}

/* Waits for a request of c's worker; frees it. PEER_OK or an error (c is then dead). */
static int wait_req(peer_conn *c, ucs_status_ptr_t r, double end)
{
    if (r == NULL) return PEER_OK;
    if (UCS_PTR_IS_ERR(r)) {
        atomic_store(&c->dead, 1);
        return PEER_ERR_IO;
    }
    ucs_status_t st;
    int gone = 0; /* the connection failed under the wait (not the time ran out) */
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        double now = peer_now();
        if (atomic_load(&c->dead)) gone = 1;
        if (now >= end || gone) break;
        int ms = (int)((end - now) * 1000) + 1;
        worker_wait(c->worker, c->efd, ms < 10 ? ms : 10, c->active);
    }
    if (st == UCS_INPROGRESS) {
        /* a timed-out or dead connection: UCX must give the buffer back before we return */
        atomic_store(&c->dead, 1);
        ucp_request_cancel(c->worker, r);
        double stop = peer_now() + 2;
        while (ucp_request_check_status(r) == UCS_INPROGRESS && peer_now() < stop)
            ucp_worker_progress(c->worker);
        ucp_request_free(r); /* marks it for release when UCX is done with it */
        return gone ? PEER_ERR_IO : PEER_ERR_TIMEOUT;
    }
    ucp_request_free(r);
    if (st != UCS_OK) {
        atomic_store(&c->dead, 1);
        return PEER_ERR_IO;
    }
    return PEER_OK;
}

#define PEER_SMALL_FRAME 256

static void send_done(void *req, ucs_status_t status, void *user)
{
    (void)req;
    (void)status;
    (void)user;
}

int peer_conn_send(peer_conn *c, int type, const void *a, size_t na, const void *b, size_t nb,
                   double timeout_s)
{
    if (atomic_load(&c->dead)) return PEER_ERR_IO;
    if (na + nb > PEER_MAX_PAYLOAD) return PEER_ERR_PROTO;
    /* a small frame (announcements, answers, heartbeats) goes as one send, header and payload
     * copied together: one transport message instead of up to three */
    uint8_t hdr[PEER_HEADER_BYTES + PEER_SMALL_FRAME];
    peer_header_write(hdr, type, (uint32_t)(na + nb));
    size_t nh = PEER_HEADER_BYTES;
    if (na + nb <= PEER_SMALL_FRAME) {
        if (na) memcpy(hdr + nh, a, na);
        if (nb) memcpy(hdr + nh + na, b, nb);
        nh += na + nb;
        na = nb = 0;
    }
    double end = peer_now() + timeout_s;
    const void *parts[3] = {hdr, a, b};
    size_t lens[3] = {nh, na, nb};
    ucs_status_ptr_t reqs[3] = {NULL, NULL, NULL};
    ucp_request_param_t p = {0};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.send = send_done;
    int st = PEER_OK;
    for (int i = 0; i < 3; i++) {
        if (!lens[i]) continue;
        reqs[i] = ucp_stream_send_nbx(c->ep, parts[i], lens[i], &p);
        if (UCS_PTR_IS_ERR(reqs[i])) {
            reqs[i] = NULL;
            atomic_store(&c->dead, 1);
            st = PEER_ERR_IO;
            break;
        }
    }
    for (int i = 0; i < 3; i++) {
        int s = wait_req(c, reqs[i], end);
        if (!st) st = s;
    }
    return st;
}

int peer_conn_send_raw(peer_conn *c, const void *p, size_t n, double timeout_s)
{
    if (atomic_load(&c->dead)) return PEER_ERR_IO;
    ucp_request_param_t rp = {0};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    rp.cb.send = send_done;
    return wait_req(c, ucp_stream_send_nbx(c->ep, p, n, &rp), peer_now() + timeout_s);
}

/* Moves whatever the stream holds into c->rx (bounded by its max). */
static int pull(peer_conn *c)
{
    for (;;) {
        size_t len = 0;
        ucs_status_ptr_t d = ucp_stream_recv_data_nb(c->ep, &len);
        if (d == NULL) return PEER_OK;
        if (UCS_PTR_IS_ERR(d)) {
            atomic_store(&c->dead, 1);
            return PEER_ERR_IO;
        }
        int st = proto_buf_add(&c->rx, d, len);
        ucp_stream_data_release(c->ep, d);
        if (st) {
            atomic_store(&c->dead, 1);
            return PEER_ERR_PROTO; /* more than one frame's bound is waiting: not our protocol */
        }
    }
}

int peer_conn_poll(peer_conn *c, uint32_t max_payload, peer_header *h, const uint8_t **payload)
{
    if (c->frame) {
        proto_buf_consume(&c->rx, c->frame);
        c->frame = 0;
        if (c->rx.off) { /* keep the next frame's first bytes at the front */
            size_t left = proto_buf_pending(&c->rx);
            memmove(c->rx.p, c->rx.p + c->rx.off, left);
            c->rx.len = left;
            c->rx.off = 0;
        }
    }
    /* the buffer may hold one whole frame and the start of the next: one bound for both */
    c->rx.max = 2 * ((size_t)max_payload + PEER_HEADER_BYTES);
    int st = atomic_load(&c->dead) ? PEER_ERR_IO : pull(c);
    size_t have = proto_buf_pending(&c->rx);
    if (have >= PEER_HEADER_BYTES) {
        const uint8_t *p = (const uint8_t *)c->rx.p + c->rx.off;
        if (peer_header_read(p, max_payload, h) != PEER_OK) {
            atomic_store(&c->dead, 1);
            return PEER_ERR_PROTO;
        }
        if (have >= PEER_HEADER_BYTES + (size_t)h->length) {
            *payload = p + PEER_HEADER_BYTES;
            c->frame = PEER_HEADER_BYTES + h->length;
            mark_active(c->active);
            return 1;
        }
    }
    return st ? st : 0;
}

int peer_conn_recv(peer_conn *c, uint32_t max_payload, peer_header *h, const uint8_t **payload,
                   double timeout_s)
{
    double end = peer_now() + timeout_s;
    for (;;) {
        int st = peer_conn_poll(c, max_payload, h, payload);
        if (st == 1) return PEER_OK;
        if (st < 0) return st;
        double now = peer_now();
        if (now >= end) return PEER_ERR_TIMEOUT;
        int ms = (int)((end - now) * 1000) + 1;
        worker_wait(c->worker, c->efd, ms < 10 ? ms : 10, c->active);
    }
}

/* ---------------------------------------------------------------- the address endpoint */

int peer_conn_local_address(peer_conn *c, const void **addr, size_t *len)
{
    if (!c->laddr && ucp_worker_get_address(c->worker, &c->laddr, &c->laddr_len) != UCS_OK) {
        c->laddr = NULL;
        return PEER_ERR_IO;
    }
    *addr = c->laddr;
    *len = c->laddr_len;
    return PEER_OK;
}

/* The transports of ep's lanes as UCX prints them ("lane[0]: 2:posix/memory.0 md[2] ...
 * rma_bw#0 am am_bw#0"): their names, once each, into out ("posix,cma,sysv"). */
static void ep_transports(ucp_ep_h ep, char *out, size_t cap)
{
    char *text = NULL;
    size_t tl = 0;
    out[0] = 0;
    FILE *f = open_memstream(&text, &tl);
    if (!f) return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    size_t o = 0;
    for (char *line = text ? strstr(text, "lane[") : NULL; line; line = strstr(line + 1, "lane[")) {
        char *colon = strchr(line, ':');
        if (!colon) break;
        char *name = strchr(colon + 1, ':'); /* "  2:posix/memory.0": after the resource index */
        char *slash = name ? strchr(name, '/') : NULL;
        char *eol = strchr(line, '\n');
        if (!slash || (eol && slash > eol) || slash - name - 1 > 16) continue;
        char tl_name[20];
        int nl = (int)(slash - name - 1);
        memcpy(tl_name, name + 1, (size_t)nl);
        tl_name[nl] = 0;
        char pat[24];
        snprintf(pat, sizeof pat, ",%s,", tl_name);
        char have[96];
        snprintf(have, sizeof have, ",%s,", out);
        if (strstr(have, pat) || o + (size_t)nl + 2 >= cap) continue;
        o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "," : "", tl_name);
    }
    free(text);
}

int peer_conn_open_address(peer_conn *c, const void *addr, size_t len, char *err, size_t errlen)
{
    if (c->aep) return PEER_OK;
    if (!len) {
        snprintf(err, errlen, "empty worker address");
        return PEER_ERR_PROTO;
    }
    /* UCX keeps no pointer to the address after ucp_ep_create; our copy is aligned for it */
    void *copy = malloc(len);
    if (!copy) return PEER_ERR_NOMEM;
    memcpy(copy, addr, len);
    ucp_ep_params_t ep = {0};
    /* UCP_ERR_HANDLING_MODE_NONE: UCX 1.13 leaves every shared-memory transport out of an
     * endpoint that asks for peer-failure handling (its log: tag(tcp/lo) with PEER, tag(sysv/memory
     * cma/memory) without). A peer gone is noticed by the stream endpoint (PEER mode), the
     * heartbeat and the call timeouts instead, and every wait on this endpoint gives up with them. */
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = copy;
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = on_aep_error;
    ep.err_handler.arg = c;
    atomic_store(&c->adead, 0);
    ucs_status_t us = ucp_ep_create(c->worker, &ep, &c->aep);
    free(copy);
    if (us != UCS_OK) {
        c->aep = NULL;
        snprintf(err, errlen, "endpoint by worker address: %s", ucs_status_string(us));
        return PEER_ERR_IO;
    }
    /* a flush makes the endpoint reach the other worker now, not on the first KV chunk; its
     * failure fails this endpoint only (not c: the stream goes on carrying everything) */
    ucp_request_param_t p = {0};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(c->aep, &p);
    us = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_OK;
    if (UCS_PTR_IS_PTR(r)) {
        double end = peer_now() + 5.0;
        while ((us = ucp_request_check_status(r)) == UCS_INPROGRESS && peer_now() < end &&
               !atomic_load(&c->adead))
            worker_wait(c->worker, c->efd, 10, c->active);
        ucp_request_free(r);
    }
    if (us != UCS_OK || atomic_load(&c->adead)) {
        snprintf(err, errlen, "endpoint by worker address: %s",
                 us == UCS_INPROGRESS ? "no answer in 5 s" : ucs_status_string(us == UCS_OK ? UCS_ERR_ENDPOINT_TIMEOUT : us));
        ep_close(c, c->aep, -1);
        c->aep = NULL;
        return PEER_ERR_IO;
    }
    ep_transports(c->aep, c->transport, sizeof c->transport);
    if (!c->transport[0]) snprintf(c->transport, sizeof c->transport, "ucx");
    return PEER_OK;
}

int peer_conn_has_address(const peer_conn *c)
{
    return c->aep != NULL;
}

const char *peer_conn_transport(const peer_conn *c)
{
    return c->aep ? c->transport : "tcp stream";
}

int peer_conn_tag_send(peer_conn *c, uint64_t tag, const void *p, size_t n, double timeout_s)
{
    if (atomic_load(&c->dead) || !c->aep) return PEER_ERR_IO;
    ucp_request_param_t rp = {0};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    rp.cb.send = send_done;
    return wait_req(c, ucp_tag_send_nbx(c->aep, p, n, tag, &rp), peer_now() + timeout_s);
}

int peer_conn_tag_send_start(peer_conn *c, uint64_t tag, const void *p, size_t n, void **req)
{
    *req = NULL;
    if (atomic_load(&c->dead) || !c->aep) return PEER_ERR_IO;
    ucp_request_param_t rp = {0};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    rp.cb.send = send_done;
    ucs_status_ptr_t r = ucp_tag_send_nbx(c->aep, p, n, tag, &rp);
    if (UCS_PTR_IS_ERR(r)) {
        atomic_store(&c->dead, 1);
        return PEER_ERR_IO;
    }
    *req = r;
    return PEER_OK;
}

int peer_conn_sender_driven(const peer_conn *c)
{
    if (!c->aep) return 1;
    char lanes[96];
    snprintf(lanes, sizeof lanes, ",%s,", c->transport);
    return strstr(lanes, ",tcp,") != NULL;
}

int peer_conn_req_wait(peer_conn *c, void *req, double timeout_s)
{
    return wait_req(c, req, peer_now() + timeout_s);
}

int peer_conn_req_test(peer_conn *c, void *req)
{
    if (!req) return 1;
    if (ucp_worker_progress(c->worker)) mark_active(c->active);
    ucs_status_t st = ucp_request_check_status(req);
    if (st == UCS_INPROGRESS) return 0;
    ucp_request_free(req);
    if (st != UCS_OK) {
        atomic_store(&c->dead, 1);
        return PEER_ERR_IO;
    }
    return 1;
}

int peer_conn_sends_room(peer_conn *c, void **const *reqs, int n, int window, double timeout_s)
{
    /* one progress for the pass (each is a poll of the TCP interface: not one per send) */
    if (ucp_worker_progress(c->worker)) mark_active(c->active);
    for (;;) {
        int pending = 0, oldest = -1;
        for (int i = 0; i < n; i++) {
            if (!*reqs[i]) continue;
            ucs_status_t st = ucp_request_check_status(*reqs[i]);
            if (st == UCS_INPROGRESS) {
                if (!pending++) oldest = i;
                continue;
            }
            ucp_request_free(*reqs[i]);
            *reqs[i] = NULL;
            if (st != UCS_OK) {
                atomic_store(&c->dead, 1);
                return PEER_ERR_IO;
            }
        }
        if (pending < window) return pending;
        /* the window is full: the oldest waited for (its wait moves the younger ones too) */
        int st = wait_req(c, *reqs[oldest], peer_now() + timeout_s);
        *reqs[oldest] = NULL;
        if (st) return st;
    }
}

int peer_conn_tag_recv_start(peer_conn *c, uint64_t tag, void *buf, size_t n, void **req)
{
    *req = NULL;
    if (atomic_load(&c->dead)) return PEER_ERR_IO;
    ucp_request_param_t rp = {0};
    /* always a request, its status and length read from it (ucp_tag_recv_request_test): UCX
     * 1.13 leaves recv_info unfilled when a message already waiting completes the receive at
     * once; several receives of one connection may be in flight */
    rp.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    /* the whole tag must match: another connection's messages, or stale ones, never land here */
    ucs_status_ptr_t r = ucp_tag_recv_nbx(c->worker, buf, n, tag, UINT64_MAX, &rp);
    if (UCS_PTR_IS_ERR(r) || r == NULL) {
        atomic_store(&c->dead, 1);
        return PEER_ERR_IO;
    }
    *req = r;
    return PEER_OK;
}

int peer_conn_tag_probe(peer_conn *c, uint64_t tag, size_t *n)
{
    if (atomic_load(&c->dead)) return PEER_ERR_IO;
    ucp_tag_recv_info_t info = {0};
    /* remove 0: only looked at; the whole tag must match, as a posted receive's */
    if (!ucp_tag_probe_nb(c->worker, tag, UINT64_MAX, 0, &info)) return 0;
    *n = info.length;
    return 1;
}

int peer_conn_tag_recv_probed(peer_conn *c, uint64_t tag, void *buf, size_t n, void **req)
{
    *req = NULL;
    if (atomic_load(&c->dead)) return PEER_ERR_IO;
    ucp_tag_recv_info_t info = {0};
    ucp_tag_message_h msg = ucp_tag_probe_nb(c->worker, tag, UINT64_MAX, 1, &info);
    if (!msg) return PEER_ERR_PROTO; /* the caller probed it: this thread's worker, nobody took it */
    ucp_request_param_t rp = {0};
    rp.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL; /* as peer_conn_tag_recv_start */
    /* a buffer of exactly the probed length: a message that is not that long fails the test */
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(c->worker, buf, info.length == n ? n : 0, msg, &rp);
    if (UCS_PTR_IS_ERR(r) || r == NULL) {
        atomic_store(&c->dead, 1);
        return PEER_ERR_IO;
    }
    *req = r;
    return PEER_OK;
}

int peer_conn_tag_discard(peer_conn *c, uint64_t tag)
{
    ucp_tag_recv_info_t info = {0};
    ucp_tag_message_h msg = ucp_tag_probe_nb(c->worker, tag, UINT64_MAX, 1, &info);
    if (!msg) return 0;
    /* received into no bytes: UCX ends it as truncated, and over rendezvous tells the sender
     * it is done without moving the data */
    static char none;
    ucp_request_param_t rp = {0};
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(c->worker, &none, 0, msg, &rp);
    if (r && !UCS_PTR_IS_ERR(r)) {
        double stop = peer_now() + 0.5;
        while (ucp_request_check_status(r) == UCS_INPROGRESS && peer_now() < stop) ucp_worker_progress(c->worker);
        ucp_request_free(r); /* released when UCX is done with it */
    }
    return 1;
}

/* The oldest arrived, unreceived message whose tag matches `tag` under `mask` (UCX's probe
 * returns the first match in arrival order): 1 with its tag and length, 0 when none. */
static int worker_tag_oldest(ucp_worker_h w, uint64_t tag, uint64_t mask, uint64_t *sender_tag, size_t *n)
{
    ucp_tag_recv_info_t info = {0};
    if (!ucp_tag_probe_nb(w, tag, mask, 0, &info)) return 0;
    *sender_tag = info.sender_tag;
    *n = info.length;
    return 1;
}

/* The oldest such message let go, as peer_conn_tag_discard does, but without waiting for UCX to
 * be done with it (a flood of strays must not hold the node's loop: the request is released
 * when UCX finishes it). 1 when there was one, 0 when none. */
static int worker_tag_drop(ucp_worker_h w, uint64_t tag, uint64_t mask)
{
    ucp_tag_recv_info_t info = {0};
    ucp_tag_message_h msg = ucp_tag_probe_nb(w, tag, mask, 1, &info);
    if (!msg) return 0;
    static char none;
    ucp_request_param_t rp = {0};
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(w, &none, 0, msg, &rp);
    if (r && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
    return 1;
}

int peer_conn_tag_oldest(peer_conn *c, uint64_t tag, uint64_t mask, uint64_t *sender_tag, size_t *n)
{
    return worker_tag_oldest(c->worker, tag, mask, sender_tag, n);
}

int peer_conn_tag_drop(peer_conn *c, uint64_t tag, uint64_t mask)
{
    return worker_tag_drop(c->worker, tag, mask);
}

int peer_listener_tag_oldest(peer_listener *l, uint64_t *sender_tag, size_t *n)
{
    return worker_tag_oldest(l->worker, 0, 0, sender_tag, n);
}

int peer_listener_tag_drop(peer_listener *l, uint64_t tag)
{
    return worker_tag_drop(l->worker, tag, UINT64_MAX);
}

int peer_conn_tag_recv_test(peer_conn *c, void *req, size_t n)
{
    ucp_tag_recv_info_t info = {0};
    ucs_status_t st = ucp_tag_recv_request_test(req, &info);
    if (st == UCS_INPROGRESS) return atomic_load(&c->dead) ? PEER_ERR_IO : 0;
    mark_active(c->active);
    ucp_request_free(req);
    if (st != UCS_OK || info.length != n) { /* more or less than expected */
        atomic_store(&c->dead, 1);
        return PEER_ERR_PROTO;
    }
    return 1;
}

int peer_conn_req_cancel(peer_conn *c, void *req)
{
    if (!req) return 1;
    atomic_store(&c->dead, 1);
    ucp_request_cancel(c->worker, req);
    double stop = peer_now() + 2;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && peer_now() < stop)
        ucp_worker_progress(c->worker);
    int done = ucp_request_check_status(req) != UCS_INPROGRESS;
    ucp_request_free(req); /* marks it for release when UCX is done with it */
    return done;
}

int peer_conn_req_abandon(peer_conn *c, void *req)
{
    if (!req) return 1;
    atomic_store(&c->dead, 1);
    ucp_request_cancel(c->worker, req);
    if (ucp_request_check_status(req) == UCS_INPROGRESS) return 0;
    ucp_request_free(req);
    return 1;
}

int peer_req_done(void *req)
{
    if (ucp_request_check_status(req) == UCS_INPROGRESS) return 0;
    ucp_request_free(req);
    return 1;
}

void peer_req_release(void *req)
{
    ucp_request_free(req); /* released when UCX is done with it (the worker's destruction) */
}

int peer_conn_tag_recv(peer_conn *c, uint64_t tag, void *buf, size_t n, double timeout_s)
{
    void *r;
    int st = peer_conn_tag_recv_start(c, tag, buf, n, &r);
    double end = peer_now() + timeout_s;
    while (!st && (st = peer_conn_tag_recv_test(c, r, n)) == 0) {
        double now = peer_now();
        if (now >= end) {
            peer_conn_req_cancel(c, r);
            return PEER_ERR_TIMEOUT;
        }
        int ms = (int)((end - now) * 1000) + 1;
        worker_wait(c->worker, c->efd, ms < 10 ? ms : 10, c->active);
    }
    if (st < 0 && st != PEER_ERR_PROTO && r) peer_conn_req_cancel(c, r);
    return st == 1 ? PEER_OK : st;
}

/* ---------------------------------------------------------------- listener */

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
    peer_listener *l = arg;
    peer_conn *c = conn_alloc(l->worker, l->efd, &l->active);
    if (!c) {
        ucp_listener_reject(l->listener, req);
        return;
    }
    ucp_conn_request_attr_t at = {0};
    at.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(req, &at) == UCS_OK) {
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (at.client_address.ss_family == AF_INET) {
            struct sockaddr_in *s = (struct sockaddr_in *)&at.client_address;
            inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
            port = ntohs(s->sin_port);
        } else if (at.client_address.ss_family == AF_INET6) {
            struct sockaddr_in6 *s = (struct sockaddr_in6 *)&at.client_address;
            inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
            port = ntohs(s->sin6_port);
        }
        snprintf(c->addr, sizeof c->addr, "%s:%d", host, port);
    }
    ucp_ep_params_t ep = {0};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = req;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = c;
    if (ucp_ep_create(l->worker, &ep, &c->ep) != UCS_OK) {
        c->ep = NULL;
        peer_conn_free(c);
        return;
    }
    c->next = l->pending;
    l->pending = c;
}

int peer_listener_new(const char *addr, peer_listener **out, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    *out = NULL;
    if (parse_addr(addr, &ss, &sl, err, errlen)) return PEER_ERR_IO;
    peer_listener *l = calloc(1, sizeof *l);
    if (!l) return PEER_ERR_NOMEM;
    int st = worker_new(&l->worker, &l->efd, UCS_THREAD_MODE_SERIALIZED, err, errlen);
    if (st) {
        free(l);
        return st;
    }
    ucp_listener_params_t lp = {0};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr *)&ss;
    lp.sockaddr.addrlen = sl;
    lp.conn_handler.cb = on_conn_request;
    lp.conn_handler.arg = l;
    ucs_status_t us = ucp_listener_create(l->worker, &lp, &l->listener);
    if (us != UCS_OK) {
        snprintf(err, errlen, "listen on %s: %s", addr, ucs_status_string(us));
        ucp_worker_destroy(l->worker);
        free(l);
        return PEER_ERR_IO;
    }
    ucp_listener_attr_t la = {0};
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (ucp_listener_query(l->listener, &la) == UCS_OK) {
        if (la.sockaddr.ss_family == AF_INET) l->port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
        else if (la.sockaddr.ss_family == AF_INET6) l->port = ntohs(((struct sockaddr_in6 *)&la.sockaddr)->sin6_port);
    }
    *out = l;
    return PEER_OK;
}

int peer_listener_port(const peer_listener *l)
{
    return l->port;
}

void peer_listener_progress(peer_listener *l, double timeout_s)
{
    int ms = (int)(timeout_s * 1000);
    worker_wait(l->worker, l->efd, ms, &l->active);
    if (ucp_worker_progress(l->worker)) {
        mark_active(&l->active);
        while (ucp_worker_progress(l->worker)) {
        }
    }
}

peer_conn *peer_listener_accept(peer_listener *l)
{
    peer_conn *c = l->pending;
    if (c) {
        l->pending = c->next;
        c->next = NULL;
    }
    return c;
}

void peer_listener_signal(peer_listener *l)
{
    ucp_worker_signal(l->worker);
}

void peer_listener_free(peer_listener *l)
{
    if (!l) return;
    peer_conn *c;
    while ((c = peer_listener_accept(l))) peer_conn_free(c);
    ucp_listener_destroy(l->listener);
    ucp_worker_destroy(l->worker);
    free(l);
}
