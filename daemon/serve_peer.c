/* daemon/serve_peer.c — the daemon's side of peer/peer.h: lends peer_devices to the nodes that
 * connect to kv_listen, and opens the devices of the nodes in `peers` as devices of its own
 * (after its local ones: the scheduler places on local cards first). Runs while loading (a
 * thread-pool thread) and at release, like the rest of the engine.
 *
 * A peer that does not answer within peer_wait at start-up is not dropped: it is kept as a
 * pending node (peer_node_pending), tried in the background with backoff, and once it answers
 * the loop's tick (dmn_peer_tick) opens its devices on the thread pool (each is a connection and
 * a handshake) and adds them to the running scheduler (sched_add_device). */
#include "daemon/log.h"
#include "daemon/serve.h"
#include "devices/devices.h"
#include "peer/auth.h"
#include "peer/peer.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <openssl/crypto.h>

static void log_hook(int warn, const char *event, const char *msg)
{
    dmn_log(warn ? DMN_LOG_WARN : DMN_LOG_INFO, event, "%s", msg);
}

int dmn_peer_load_key(dmn_serve *d, char *err, size_t errlen)
{
    dmn_config *c = &d->cfg;
    if (!c->kv_listen[0] && !c->peers[0]) return 0;
    if (peer_key_load(c->peer_key, c->peer_key_file, d->peer_key, sizeof d->peer_key, err, errlen))
        return -1;
    /* the host name stands for an unset node_name; like node_name it is refused, not cut, when
     * it is too long (two hosts with one long prefix would otherwise share one name) */
    const char *name = c->node_name, *what = "node_name";
    char h[256] = "";
    if (!name[0]) {
        gethostname(h, sizeof h - 1);
        char *dot = strchr(h, '.');
        if (dot) *dot = 0;
        name = h;
        what = "node_name (unset: the host name)";
    }
    if (dmn_config_check_node_name(name, what, c->kv_listen[0] ? c->peer_devices : "", err, errlen))
        return -1;
    /* the check above bounds it (PEER_NAME_MAX < sizeof d->node_name); a copy of its length,
     * not a snprintf the compiler cannot see bounded (-Wformat-truncation under TSan) */
    size_t n = strnlen(name, sizeof d->node_name - 1);
    memcpy(d->node_name, name, n);
    d->node_name[n] = 0;
    if (peer_transport_parse(c->peer_transport) < 0) {
        snprintf(err, errlen, "peer_transport '%s': auto, stream or address", c->peer_transport);
        return -1;
    }
    return 0;
}

/* Opens the lent devices and starts listening; connects to the peers and appends their devices
 * to d->devs. A message in d->load_err stops start-up (a broken configuration); a peer that is
 * down or refuses us is skipped with a warning, as an absent local device is. */
void dmn_peer_open(dmn_serve *d, const accel_opts *opts)
{
    dmn_config *c = &d->cfg;
    char err[512], list[1024];
    peer_set_log(log_hook);
    peer_set_poll_us(c->peer_poll_us); /* before any worker waits */
    d->peer_opts = *opts;
    if (c->kv_listen[0]) {
        snprintf(list, sizeof list, "%s", c->peer_devices);
        char *save = NULL;
        for (char *name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
            if (d->n_peer_devs == PEER_MAX_DEVS) {
                snprintf(d->load_err, sizeof d->load_err, "peer_devices: at most %d", PEER_MAX_DEVS);
                return;
            }
            accel_dev *dev = devices_open(name, d->m, opts, err, sizeof err);
            if (!dev) {
                snprintf(d->load_err, sizeof d->load_err, "peer device %s: %s", name, err);
                return;
            }
            d->peer_devs[d->n_peer_devs++] = dev;
            /* dmn_config_check_node_name reckoned with the names the backends give; the name
             * this one gave is what a peer will see (as NODE/device) */
            accel_info ai;
            accel_get_info(dev, &ai);
            if (strlen(ai.name) > PEER_DEV_NAME_MAX) {
                snprintf(d->load_err, sizeof d->load_err,
                         "peer device %s: its name '%s' is %zu characters: a lent device's name "
                         "may have at most %d",
                         name, ai.name, strlen(ai.name), PEER_DEV_NAME_MAX);
                return;
            }
            int st = accel_warmup(dev);
            if (st) {
                snprintf(d->load_err, sizeof d->load_err, "peer device %s: warm-up: %s", name, accel_strerror(st));
                return;
            }
        }
        peer_server_cfg sc = {c->kv_listen, d->node_name, d->peer_key, d->m, d->peer_devs, d->n_peer_devs, c->peer_rx_threads};
        if (peer_server_start(&sc, &d->peer_srv, err, sizeof err)) {
            snprintf(d->load_err, sizeof d->load_err, "kv_listen %s: %s", c->kv_listen, err);
            return;
        }
        dmn_log(DMN_LOG_INFO, "listening", "listener=peers addr=%s port=%d node=%s devices=%d", c->kv_listen,
                peer_server_port(d->peer_srv), d->node_name, d->n_peer_devs);
    }
    if (!c->peers[0]) return;
    snprintf(list, sizeof list, "%s", c->peers);
    char *save = NULL;
    for (char *addr = strtok_r(list, ", ", &save); addr; addr = strtok_r(NULL, ", ", &save)) {
        if (d->n_nodes == DMN_MAX_PEERS) {
            snprintf(d->load_err, sizeof d->load_err, "peers: at most %d", DMN_MAX_PEERS);
            return;
        }
        peer_node *n;
        int st = peer_node_connect(addr, d->node_name, d->peer_key, d->m, c->peer_wait, &n, err, sizeof err);
        if (st == PEER_ERR_IO || st == PEER_ERR_TIMEOUT) {
            /* down (nobody listens there yet): tried in the background, joins when it answers */
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            if (peer_node_pending(addr, d->node_name, d->peer_key, d->m, &n, err, sizeof err)) {
                dmn_log(DMN_LOG_WARN, "peer_skipped", "addr=%s reason=\"%s\"", addr, err);
                continue;
            }
            dmn_log(DMN_LOG_WARN, "peer_down", "addr=%s reason=\"%s\" msg=\"tried again in the background: "
                    "its devices are added when it answers\"", addr, why);
            peer_node_set_transport(n, peer_transport_parse(c->peer_transport));
            d->nodes[d->n_nodes++] = n;
            continue;
        }
        if (st) { /* a wrong key, another model: a configuration to fix, not a node to wait for */
            dmn_log(DMN_LOG_WARN, "peer_skipped", "addr=%s reason=\"%s\"", addr, err);
            continue;
        }
        int k = d->n_nodes;
        d->nodes[d->n_nodes++] = n;
        peer_node_set_transport(n, peer_transport_parse(c->peer_transport));
        for (int i = 0; i < peer_node_n_devs(n); i++) {
            if (d->n_devs == SCHED_MAX_DEVICES) {
                snprintf(d->load_err, sizeof d->load_err, "devices (local and remote): at most %d", SCHED_MAX_DEVICES);
                return;
            }
            accel_dev *dev = devices_open_remote(n, i, d->m, opts, err, sizeof err);
            if (!dev) {
                dmn_log(DMN_LOG_WARN, "peer_device_skipped", "peer=%s index=%d reason=\"%s\"",
                        peer_node_name(n), i, err);
                continue;
            }
            d->devs[d->n_devs++] = dev;
            d->node_opened[k] |= 1u << i;
        }
    }
}

/* ---------------------------------------------------------------- a peer that joins later */

/* Thread pool: opens the devices of node d->peer_work_node that the scheduler lacks. */
static void open_late(uv_work_t *w)
{
    dmn_serve *d = w->data;
    int k = d->peer_work_node;
    peer_node *n = d->nodes[k];
    char err[512];
    for (int i = 0; i < peer_node_n_devs(n) && i < 32; i++) {
        d->peer_new[i] = NULL;
        if (d->node_opened[k] & (1u << i)) continue;
        d->peer_new[i] = devices_open_remote(n, i, d->m, &d->peer_opts, err, sizeof err);
        if (!d->peer_new[i])
            dmn_log(DMN_LOG_WARN, "peer_device_skipped", "peer=%s index=%d reason=\"%s\"",
                    peer_node_name(n), i, err);
    }
}

/* Loop: the devices open_late opened join the scheduler (or are closed: stopping, no room). */
static void open_late_done(uv_work_t *w, int status)
{
    (void)status;
    dmn_serve *d = w->data;
    int k = d->peer_work_node;
    peer_node *n = d->nodes[k];
    int missing = 0;
    for (int i = 0; i < peer_node_n_devs(n) && i < 32; i++) {
        if (d->node_opened[k] & (1u << i)) continue;
        accel_dev *dev = d->peer_new[i];
        d->peer_new[i] = NULL;
        if (!dev) {
            missing = 1;
            continue;
        }
        char err[256] = "the daemon is stopping";
        int at = -1;
        if (d->sched && !d->exiting && d->closing_at <= 0 && d->n_devs < SCHED_MAX_DEVICES)
            at = sched_add_device(d->sched, dev, err, sizeof err);
        else if (d->n_devs >= SCHED_MAX_DEVICES)
            snprintf(err, sizeof err, "devices (local and remote): at most %d", SCHED_MAX_DEVICES);
        accel_info ai;
        accel_get_info(dev, &ai);
        if (at < 0) {
            dmn_log(DMN_LOG_WARN, "peer_device_skipped", "peer=%s device=%s reason=\"%s\"",
                    peer_node_name(n), ai.name, err);
            accel_free(dev);
            missing = 1;
            continue;
        }
        d->devs[d->n_devs++] = dev;
        d->node_opened[k] |= 1u << i;
        dmn_log(DMN_LOG_INFO, "peer_device_added", "peer=%s device=%s kind=%s decode=%d desc=\"%s\"",
                peer_node_name(n), ai.name, accel_kind_name(ai.kind), !!(ai.caps & ACCEL_CAP_DECODE), ai.desc);
    }
    if (missing) { /* a node that went down again, or a device it cannot lend: not every tick */
        double r = d->node_retry_s[k];
        d->node_retry_s[k] = r = r < 2 ? 2 : r * 2 > 60 ? 60 : r * 2;
        d->node_retry_at[k] = sched_now() + r;
    }
    d->peer_work_busy = 0;
}

void dmn_peer_tick(dmn_serve *d)
{
    if (d->peer_work_busy || !d->sched || d->exiting || d->closing_at > 0) return;
    double now = sched_now();
    for (int k = 0; k < d->n_nodes; k++) {
        peer_node *n = d->nodes[k];
        int nd = peer_node_n_devs(n); /* 0 while it never answered */
        unsigned all = nd >= 32 ? ~0u : (1u << nd) - 1;
        if (peer_node_state(n) != PEER_NODE_UP || (d->node_opened[k] & all) == all || now < d->node_retry_at[k])
            continue;
        d->peer_work_busy = 1;
        d->peer_work_node = k;
        d->peer_work.data = d;
        if (uv_queue_work(d->loop, &d->peer_work, open_late, open_late_done)) d->peer_work_busy = 0;
        return;
    }
}

/* After the scheduler and every device of d->devs are gone (remote ones included). */
void dmn_peer_close(dmn_serve *d)
{
    for (int i = 0; i < d->n_nodes; i++) peer_node_free(d->nodes[i]);
    d->n_nodes = 0;
    peer_server_stop(d->peer_srv);
    d->peer_srv = NULL;
    for (int i = 0; i < d->n_peer_devs; i++) accel_free(d->peer_devs[i]);
    d->n_peer_devs = 0;
    OPENSSL_cleanse(d->peer_key, sizeof d->peer_key);
}
