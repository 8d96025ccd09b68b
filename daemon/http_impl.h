/* daemon/http_impl.h — what the listener's files share (http.c: connections and framing;
 * http_probe.c: the self-probe). Not for anyone else: daemon/http.h is the interface. */
#ifndef TANDEM_DMN_HTTP_IMPL_H
#define TANDEM_DMN_HTTP_IMPL_H
#include "daemon/http.h"
#include <netinet/in.h>
#include <sys/socket.h>

/* One read's worth; the loop reads one socket at a time, so one buffer per listener serves all. */
#define READ_CHUNK (64 * 1024)

typedef struct conn conn;
typedef struct probe probe;

struct dmn_http {
    uv_loop_t *loop;
    dmn_http_cfg cfg;
    char name[16];
    dmn_http_handler h;
    uv_tcp_t listener;
    int listening;
    int handles; /* open uv handles: the listener, 2 per connection, 2 per probe */
    int closing;
    int port;
    struct sockaddr_storage bound;
    conn *conns;
    int n_conns;     /* connections counted against the limits */
    int n_lingering; /* refused connections draining before close */
    int n_active;
    probe *probe;
    int probe_fails;
    double probe_fail_since;
    struct sockaddr_storage probe_addr; /* the probe's own end, to recognise it when accepted */
    int probe_addr_set;
    /* refusals are logged at most once a second, with a count (a flood must not fill the disk) */
    double refused_window;
    unsigned refused_n;
    const char *refused_last;
    char rbuf[READ_CHUNK];
};

/* The loop's clock in seconds. */
double dmn_http_now(const dmn_http *h);
/* One of the listener's uv handles closed: frees the listener when it was the last one and the
 * listener is being freed. */
void dmn_http_handle_closed(dmn_http *h);
/* Ends a self-probe in flight (the listener is closing); no result is recorded. */
void dmn_http_probe_abort(dmn_http *h);

#endif
