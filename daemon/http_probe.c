/* daemon/http_probe.c — the listener's self-probe (see http.h): a client on the loop that
 * connects to its own listener and asks for /health, answered by http.c itself. */
#include "daemon/http_impl.h"
#include "daemon/log.h"
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

struct probe {
    dmn_http *h;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t creq;
    uv_write_t wreq;
    int handles;
    int done;
    char resp[64];
    size_t n;
};

static const char probe_req[] = "GET /health HTTP/1.1\r\nHost: tandem-self-probe\r\nConnection: close\r\n\r\n";

static void probe_handle_closed(uv_handle_t *hd)
{
    probe *p = hd->data;
    dmn_http *h = p->h;
    if (--p->handles == 0) free(p);
    dmn_http_handle_closed(h);
}

static void probe_finish(probe *p, int ok)
{
    if (p->done) return;
    p->done = 1;
    dmn_http *h = p->h;
    if (h->probe == p) h->probe = NULL;
    h->probe_addr_set = 0;
    if (!h->closing) {
        if (ok) {
            if (h->probe_fails) dmn_log(DMN_LOG_INFO, "http_probe", "listener=%s ok=1 after_failures=%d", h->name, h->probe_fails);
            h->probe_fails = 0;
        } else {
            if (!h->probe_fails++) h->probe_fail_since = dmn_http_now(h);
            dmn_log(DMN_LOG_ERROR, "http_probe", "listener=%s ok=0 failures=%d msg=\"the listener did not answer its self-probe\"",
                    h->name, h->probe_fails);
        }
    }
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, probe_handle_closed);
    uv_close((uv_handle_t *)&p->tcp, probe_handle_closed);
}

static void probe_alloc(uv_handle_t *hd, size_t want, uv_buf_t *buf)
{
    probe *p = hd->data;
    *buf = uv_buf_init(p->h->rbuf, sizeof p->h->rbuf);
}

static void probe_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    probe *p = s->data;
    if (p->done) return;
    if (nread > 0) {
        size_t k = (size_t)nread;
        if (k > sizeof p->resp - 1 - p->n) k = sizeof p->resp - 1 - p->n;
        memcpy(p->resp + p->n, buf->base, k);
        p->n += k;
        p->resp[p->n] = 0;
        if (!strncmp(p->resp, "HTTP/1.1 200 ", p->n < 13 ? p->n : 13) && p->n >= 13) probe_finish(p, 1);
        else if (p->n >= 13) probe_finish(p, 0);
        return;
    }
    if (nread < 0) probe_finish(p, 0);
}

static void probe_written(uv_write_t *w, int status)
{
    probe *p = w->data;
    if (status < 0) probe_finish(p, 0);
}

static void probe_connected(uv_connect_t *cr, int status)
{
    probe *p = cr->data;
    if (p->done) return;
    if (status < 0) {
        probe_finish(p, 0);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)probe_req, sizeof probe_req - 1);
    p->wreq.data = p;
    if (uv_write(&p->wreq, (uv_stream_t *)&p->tcp, &b, 1, probe_written) != 0 ||
        uv_read_start((uv_stream_t *)&p->tcp, probe_alloc, probe_read) != 0)
        probe_finish(p, 0);
}

static void probe_timeout(uv_timer_t *t)
{
    probe_finish(t->data, 0);
}

void dmn_http_probe(dmn_http *h, unsigned timeout_ms)
{
    if (h->probe || h->closing || !h->listening) return;
    probe *p = calloc(1, sizeof *p);
    if (!p) return;
    p->h = h;
    uv_tcp_init(h->loop, &p->tcp);
    uv_timer_init(h->loop, &p->timer);
    p->tcp.data = p->timer.data = p->creq.data = p;
    p->handles = 2;
    h->handles += 2;
    h->probe = p;
    /* to the listener's address, or loopback when it listens on every address */
    struct sockaddr_storage to = h->bound, from;
    memset(&from, 0, sizeof from);
    if (to.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&to;
        if (!memcmp(&a->sin6_addr, &in6addr_any, 16)) a->sin6_addr = in6addr_loopback;
        uv_ip6_addr("::", 0, (struct sockaddr_in6 *)&from);
        ((struct sockaddr_in6 *)&from)->sin6_addr = a->sin6_addr;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&to;
        if (a->sin_addr.s_addr == htonl(INADDR_ANY)) a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        uv_ip4_addr("0.0.0.0", 0, (struct sockaddr_in *)&from);
        ((struct sockaddr_in *)&from)->sin_addr = a->sin_addr;
    }
    /* bind first, so the accepting side knows the probe by its address before it arrives */
    int alen = sizeof h->probe_addr;
    if (uv_tcp_bind(&p->tcp, (struct sockaddr *)&from, 0) != 0 ||
        uv_tcp_getsockname(&p->tcp, (struct sockaddr *)&h->probe_addr, &alen) != 0) {
        probe_finish(p, 0);
        return;
    }
    h->probe_addr_set = 1;
    uv_timer_start(&p->timer, probe_timeout, timeout_ms, 0);
    if (uv_tcp_connect(&p->creq, &p->tcp, (struct sockaddr *)&to, probe_connected) != 0) probe_finish(p, 0);
}

int dmn_http_probe_failing(const dmn_http *h, double *since)
{
    if (since) *since = h->probe_fails ? h->probe_fail_since : 0;
    return h->probe_fails;
}

void dmn_http_probe_abort(dmn_http *h)
{
    if (h->probe) probe_finish(h->probe, 0);
}
