/* peer/remote.c — the node that holds the client connection: a peer's devices as accel devices
 * of its own (peer.h), and the heartbeat that notices a peer gone.
 *
 * Connections: one per remote device (its scheduler worker is the only thread that calls it,
 * accel.h's rule, so a call is a plain request and answer on it) and one for the heartbeat
 * thread. Each is authenticated on its own. A call waits in slices of 50 ms and gives up at its
 * timeout (PEER_CALL_TIMEOUT_S, 8 s) or when the heartbeat marks the node dead. A peer that hangs
 * is marked dead by the heartbeat after PEER_DEAD_S (3 s) only while none of our calls to it is
 * in flight: a node busy with a long call answers pings late, so the heartbeat's timeouts are
 * tolerated while calls are in flight (heartbeat_main) and the call's own timeout decides, up to
 * 8 s. A connection that closes is noticed at once.
 *
 * KV chunks are sent pipelined: peer/remote_kv.c.
 *
 * What goes over the wire per decode step: n (sequence, token) pairs out, n * vocab float32
 * logits back (a 128K vocabulary: 512 KiB a sequence a step; 2 KiB for the bundled model). The
 * logits come back whole so that sampling, logprobs and stop strings run where they run for a
 * local device, and a request means the same on any node; sampling on the peer would cut this
 * to a few bytes (BENCHMARKS.md measures what it costs).
 *
 * A node found dead is tried again by its heartbeat thread, PEER_RECONNECT_MIN_S after it was
 * lost, then at doubling intervals up to PEER_RECONNECT_MAX_S. When it authenticates again and
 * serves the same model with the same devices, every device of it gets a fresh connection (under
 * the device's own lock, which every call holds: the device's worker waits at most for that) and
 * is revived (accel_dev_revive): the scheduler places on it again. Sequences of the old
 * incarnation died with the old connections (the node freed them when they closed); their
 * handles are recognised by their generation and only freed here.
 *
 * One device's call that fails in its transport while the node stays up (a step that ran past
 * the call timeout, a malformed answer) loses that device's connection only (peer_rdev_lost):
 * it is closed at once, so that the node frees its sequences and no late answer is read by the
 * next call, and the heartbeat thread, at its next answered ping, connects that device again
 * and revives it the same way. */
#include "peer/auth.h"
#include "peer/link.h"
#include "peer/peer.h"
#include "proto/kv_wire.h"
#include "scheduler/accel_impl.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <openssl/crypto.h>

#include "peer/remote_impl.h"

/* PEER_CALL_TIMEOUT_S, or TANDEM_PEER_CALL_TIMEOUT_S (1..3600 s: benchmarks of slow devices,
 * e.g. a CPU importing 32K tokens' KV on a loaded machine). */
static double g_call_timeout = PEER_CALL_TIMEOUT_S;
static pthread_once_t g_timeout_once = PTHREAD_ONCE_INIT;
static void timeout_read(void)
{
    const char *v = getenv("TANDEM_PEER_CALL_TIMEOUT_S");
    double t = v ? strtod(v, NULL) : 0;
    if (t >= 1 && t <= 3600) g_call_timeout = t;
}
double peer_rdev_call_timeout(void)
{
    pthread_once(&g_timeout_once, timeout_read);
    return g_call_timeout;
}

/* ---------------------------------------------------------------- handshake */

static int expect(peer_conn *c, int type, uint32_t max, const uint8_t **p, peer_header *h,
                  double timeout_s, char *err, size_t errlen)
{
    int st = peer_conn_recv(c, max, h, p, timeout_s);
    if (st) {
        snprintf(err, errlen, "%s", peer_strerror(st));
        return st;
    }
    if (h->type == PEER_REFUSE) {
        char why[PEER_REASON_MAX + 1] = "?";
        peer_reason_read(*p, h->length, why);
        snprintf(err, errlen, "refused: %s", why);
        return PEER_ERR_REFUSED;
    }
    if (h->type != type) {
        snprintf(err, errlen, "expected %s, got %s", peer_type_name(type), peer_type_name(h->type));
        return PEER_ERR_PROTO;
    }
    return PEER_OK;
}

/* Authenticates c both ways and reads the node's info; token (NULL: not wanted): c's KV token. */
static int handshake(peer_conn *c, const char *my_name, const char *key, char *peer_name,
                     peer_info *info, uint8_t *token, char *err, size_t errlen)
{
    peer_hello hello = {0}, ch;
    if (peer_nonce(hello.nonce)) {
        snprintf(err, errlen, "no random bytes");
        return PEER_ERR_IO;
    }
    snprintf(hello.name, sizeof hello.name, "%s", my_name);
    uint8_t buf[PEER_MAX_PREAUTH];
    size_t n = peer_hello_write(buf, &hello, 0);
    int st = peer_conn_send(c, PEER_HELLO, buf, n, NULL, 0, 5.0);
    if (st) {
        snprintf(err, errlen, "%s", peer_strerror(st));
        return st;
    }
    peer_header h;
    const uint8_t *p;
    if ((st = expect(c, PEER_CHALLENGE, PEER_MAX_PREAUTH, &p, &h, 5.0, err, errlen))) return st;
    if (peer_hello_read(p, h.length, 1, &ch)) {
        snprintf(err, errlen, "malformed challenge");
        return PEER_ERR_PROTO;
    }
    uint8_t want[PEER_MAC];
    size_t kl = strlen(key);
    peer_mac((const uint8_t *)key, kl, 's', hello.nonce, ch.nonce, want);
    if (!peer_mac_equal(ch.mac, want)) {
        /* an AUTH that proves nothing (zeros never pass peer_mac_equal), so that the node logs
         * the refusal too, without handing a node that lacks the key a proof over its nonce */
        uint8_t zero[PEER_MAC] = {0};
        peer_conn_send(c, PEER_AUTH, zero, sizeof zero, NULL, 0, 1.0);
        peer_conn_recv(c, PEER_MAX_PREAUTH, &h, &p, 1.0); /* its REFUSE, or the close */
        snprintf(err, errlen, "the node does not hold our peer_key");
        return PEER_ERR_AUTH;
    }
    uint8_t mac[PEER_MAC];
    peer_mac((const uint8_t *)key, kl, 'c', ch.nonce, hello.nonce, mac);
    if ((st = peer_conn_send(c, PEER_AUTH, mac, sizeof mac, NULL, 0, 5.0))) {
        snprintf(err, errlen, "%s", peer_strerror(st));
        return st;
    }
    if ((st = expect(c, PEER_WELCOME, (uint32_t)peer_info_bytes(PEER_MAX_DEVS), &p, &h, 5.0, err, errlen))) {
        /* a connection closed right after AUTH: the server refused our proof */
        if (st == PEER_ERR_IO) snprintf(err, errlen, "refused after authentication (a different peer_key?)");
        return st == PEER_ERR_IO ? PEER_ERR_AUTH : st;
    }
    if (peer_info_read(p, h.length, info)) {
        snprintf(err, errlen, "malformed device list");
        return PEER_ERR_PROTO;
    }
    snprintf(peer_name, PEER_NAME_MAX + 1, "%s", ch.name);
    if (token) peer_mac((const uint8_t *)key, kl, 'k', hello.nonce, ch.nonce, token);
    return PEER_OK;
}

/* A connection to n, authenticated (handshake), into *out. */
static int connect_auth(peer_node *n, peer_conn **out, peer_info *info, uint8_t *token, char *err,
                        size_t errlen)
{
    peer_conn *c;
    int st = peer_conn_connect(n->addr, &c, err, errlen);
    if (st) return st;
    char name[PEER_NAME_MAX + 1];
    st = handshake(c, n->my_name, n->key, name, info, token, err, errlen);
    if (!st && n->name[0] && strcmp(name, n->name)) {
        snprintf(err, errlen, "the node at %s is now '%s', was '%s'", n->addr, name, n->name);
        st = PEER_ERR_PROTO;
    }
    /* written once (the first answer): a node's name is read from other threads after that */
    if (!st && !n->name[0]) snprintf(n->name, sizeof n->name, "%s", name);
    if (st) {
        peer_conn_free(c);
        return st;
    }
    *out = c;
    return PEER_OK;
}

/* ---------------------------------------------------------------- heartbeat */

static void node_mark_dead(peer_node *n, const char *why)
{
    if (atomic_exchange(&n->dead, 1)) return;
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < PEER_MAX_DEVS; i++)
        if (n->devs[i]) accel_dev_fail(n->devs[i]);
    pthread_mutex_unlock(&n->mu);
    peer_log(1, "peer_lost", "peer=%s addr=%s reason=\"%s\"", n->name, n->addr, why);
}

static int node_revive(peer_node *n);
static void devs_reconnect(peer_node *n);

/* Does the node serve m (the handshake's device list)? */
static int model_matches(const model *m, const peer_info *in)
{
    const model_config *c = &m->cfg;
    return !memcmp(in->fingerprint, m->fingerprint, 32) && in->vocab == c->vocab &&
           in->n_layers == c->n_layers && in->n_kv_heads == c->n_kv_heads && in->head_dim == c->head_dim;
}

/* Sleeps s seconds in slices, so that a stop is seen within 0.1 s. */
static void nap(peer_node *n, double s)
{
    double end = peer_now() + s;
    while (!atomic_load(&n->stop) && peer_now() < end) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
}

/* A node that never answered yet (peer_node_pending): tried with backoff until it answers,
 * authenticated, with our model; then its device list is known and the heartbeat goes on as
 * for any node. A refusal (another key, another model) is logged once per reason and tried
 * again all the same: the other node's configuration may be fixed and it restarted. 0 when it
 * joined, -1 when stopped first. */
static int join(peer_node *n)
{
    double backoff = PEER_RECONNECT_MIN_S;
    int last_st = PEER_OK;
    for (;;) {
        nap(n, backoff);
        if (atomic_load(&n->stop)) return -1;
        char err[256];
        peer_conn *hb;
        peer_info in;
        int st = connect_auth(n, &hb, &in, NULL, err, sizeof err);
        if (!st && !model_matches(n->m, &in)) {
            snprintf(err, sizeof err, "the node serves another model (fingerprint or shape differ)");
            peer_conn_free(hb);
            st = PEER_ERR_MODEL;
        }
        if (!st) {
            n->info = in;
            n->hb = hb;
            pthread_mutex_lock(&n->mu);
            n->live = in;
            pthread_mutex_unlock(&n->mu);
            atomic_store(&n->dead, 0);
            atomic_store(&n->joined, 1); /* after info and name: readers check it first */
            peer_log(0, "peer_joined", "peer=%s addr=%s devices=%d", n->name, n->addr, in.n_devs);
            return 0;
        }
        if (st != PEER_ERR_IO && st != PEER_ERR_TIMEOUT && st != last_st)
            peer_log(1, "peer_join_failed", "addr=%s reason=\"%s\" retry=\"every %.0f s at most\"",
                     n->addr, err, PEER_RECONNECT_MAX_S);
        last_st = st;
        backoff = backoff * 2 < PEER_RECONNECT_MAX_S ? backoff * 2 : PEER_RECONNECT_MAX_S;
    }
}

static void *heartbeat_main(void *arg)
{
    peer_node *n = arg;
    if (!atomic_load(&n->joined) && join(n)) return NULL;
    double last_ok = peer_now(), backoff = PEER_RECONNECT_MIN_S, next_try = 0;
    /* answers still to come of pings whose wait timed out (tolerated below): the node answers
     * every PING with one INFO, in order, so the next ones read are theirs, skipped. Read as the
     * next ping's answer, a late one kept the heartbeat one answer behind for good: each ping took
     * the one before's answer, already waiting (its round trip ~0: link_s collapsed), and a node
     * that hung was noticed a period late. */
    int owed = 0;
    while (!atomic_load(&n->stop)) {
        nap(n, atomic_load(&n->dead) ? 0.1 : PEER_HEARTBEAT_S);
        if (atomic_load(&n->stop)) break;
        if (atomic_load(&n->dead)) { /* gone: tried again with backoff */
            if (peer_now() < next_try) continue;
            if (node_revive(n) == PEER_OK) {
                owed = 0; /* a fresh connection */
                last_ok = peer_now();
                backoff = PEER_RECONNECT_MIN_S;
            } else {
                backoff = backoff * 2 < PEER_RECONNECT_MAX_S ? backoff * 2 : PEER_RECONNECT_MAX_S;
                next_try = peer_now() + backoff;
            }
            continue;
        }
        peer_header h;
        const uint8_t *p;
        uint64_t own[PEER_MAX_DEVS]; /* our devices' own bytes before the ping (remote_live.c) */
        peer_node_own_sample(n, own);
        double t_ping = peer_now(), end = t_ping + PEER_DEAD_S;
        int st = peer_conn_send(n->hb, PEER_PING, NULL, 0, NULL, 0, PEER_DEAD_S);
        for (int late = 1; !st && late;) {
            double left = end - peer_now();
            st = peer_conn_recv(n->hb, (uint32_t)peer_info_bytes(PEER_MAX_DEVS), &h, &p,
                                left > 0 ? left : 0);
            if (!st && h.type != PEER_INFO) st = PEER_ERR_PROTO;
            late = !st && owed > 0;
            owed -= late;
        }
        if (st == PEER_ERR_TIMEOUT) owed++; /* this ping's answer may yet come */
        double rtt = peer_now() - t_ping;
        peer_info in;
        if (!st && (h.type != PEER_INFO || peer_info_read(p, h.length, &in) || in.n_devs != n->info.n_devs))
            st = PEER_ERR_PROTO;
        if (!st) {
            last_ok = peer_now();
            pthread_mutex_lock(&n->mu);
            n->live = in;
            peer_node_live_apply(n, &in, own); /* each device's health and room */
            pthread_mutex_unlock(&n->mu);
            /* the fastest answer: one waiting behind a long call says nothing of the link */
            double m = atomic_load(&n->min_rtt);
            if (rtt > 0 && (m <= 0 || rtt < m)) atomic_store(&n->min_rtt, rtt);
            devs_reconnect(n);
            continue;
        }
        /* a node runs its devices' calls on their own threads (peer/server_call.c), so a ping
         * is answered while another peer's long step runs; this connection's own call can still
         * hold its frames (answers stay in order per connection). A node that is busy with a
         * call is not dead: that call's own timeout (PEER_CALL_TIMEOUT_S) or a closed
         * connection says so. */
        if (st == PEER_ERR_TIMEOUT && !peer_conn_dead(n->hb) && atomic_load(&n->calls) > 0) continue;
        if (st == PEER_ERR_PROTO || peer_conn_dead(n->hb) || peer_now() - last_ok >= PEER_DEAD_S) {
            node_mark_dead(n, st == PEER_ERR_PROTO ? "bad heartbeat answer" : peer_strerror(st));
            backoff = PEER_RECONNECT_MIN_S;
            next_try = peer_now() + backoff;
        }
    }
    return NULL;
}

int peer_node_connect(const char *addr, const char *my_name, const char *key, const model *m,
                      double wait_s, peer_node **out, char *err, size_t errlen)
{
    *out = NULL;
    peer_node *n = calloc(1, sizeof *n);
    if (!n) return PEER_ERR_NOMEM;
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    snprintf(n->my_name, sizeof n->my_name, "%s", my_name);
    snprintf(n->key, sizeof n->key, "%s", key);
    n->m = m;
    pthread_mutex_init(&n->mu, NULL);
    double end = peer_now() + wait_s;
    int st;
    for (;;) {
        st = connect_auth(n, &n->hb, &n->info, NULL, err, errlen);
        if (st != PEER_ERR_IO && st != PEER_ERR_TIMEOUT) break;
        if (peer_now() >= end) break;
        struct timespec ts = {0, 200000000}; /* a node that is still starting: again in 0.2 s */
        nanosleep(&ts, NULL);
    }
    if (!st && !model_matches(m, &n->info)) {
        snprintf(err, errlen, "the node serves another model (fingerprint or shape differ)");
        st = PEER_ERR_MODEL;
    }
    if (!st) n->live = n->info; /* before the heartbeat thread writes it */
    if (!st) atomic_store(&n->joined, 1);
    if (!st && pthread_create(&n->th, NULL, heartbeat_main, n) == 0) n->th_started = 1;
    else if (!st) st = PEER_ERR_NOMEM;
    if (st) {
        char e2[256];
        snprintf(e2, sizeof e2, "peer %s: %s", addr, err);
        snprintf(err, errlen, "%s", e2);
        peer_node_free(n);
        return st;
    }
    *out = n;
    peer_log(0, "peer_connected", "peer=%s addr=%s devices=%d", n->name, addr, n->info.n_devs);
    return PEER_OK;
}

int peer_node_pending(const char *addr, const char *my_name, const char *key, const model *m,
                      peer_node **out, char *err, size_t errlen)
{
    *out = NULL;
    peer_node *n = calloc(1, sizeof *n);
    if (!n) return PEER_ERR_NOMEM;
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    snprintf(n->my_name, sizeof n->my_name, "%s", my_name);
    snprintf(n->key, sizeof n->key, "%s", key);
    n->m = m;
    atomic_store(&n->dead, 1);
    pthread_mutex_init(&n->mu, NULL);
    if (pthread_create(&n->th, NULL, heartbeat_main, n)) {
        snprintf(err, errlen, "peer %s: cannot start its thread", addr);
        peer_node_free(n);
        return PEER_ERR_NOMEM;
    }
    n->th_started = 1;
    *out = n;
    return PEER_OK;
}

int peer_node_state(const peer_node *n)
{
    peer_node *m = (peer_node *)n;
    if (!atomic_load(&m->joined)) return PEER_NODE_JOINING;
    return atomic_load(&m->dead) ? PEER_NODE_DOWN : PEER_NODE_UP;
}

const char *peer_node_addr(const peer_node *n)
{
    return n->addr;
}

const char *peer_node_name(const peer_node *n)
{
    return atomic_load(&((peer_node *)n)->joined) ? n->name : "";
}

int peer_node_n_devs(const peer_node *n)
{
    return atomic_load(&((peer_node *)n)->joined) ? n->info.n_devs : 0;
}

void peer_node_free(peer_node *n)
{
    if (!n) return;
    atomic_store(&n->stop, 1);
    if (n->th_started) pthread_join(n->th, NULL);
    if (n->hb && atomic_load(&n->dead)) peer_conn_kill(n->hb);
    peer_conn_free(n->hb);
    pthread_mutex_destroy(&n->mu);
    OPENSSL_cleanse(n->key, sizeof n->key);
    free(n);
}

/* ---------------------------------------------------------------- calls */

/* Waits for the next frame on d's connection, in slices of 50 ms, giving up when the node is
 * marked dead (unless d is being revived) or after the call timeout. */
int peer_rdev_recv_answer(rdev *d, uint32_t max, peer_header *h, const uint8_t **p)
{
    peer_node *n = d->node;
    double end = peer_now() + peer_rdev_call_timeout();
    for (;;) {
        int st = peer_conn_recv(d->c, max, h, p, 0.05);
        if (st != PEER_ERR_TIMEOUT || (atomic_load(&n->dead) && !d->reviving) || peer_now() >= end) return st;
    }
}

/* Sends a request and waits for its answer of `type`: PEER_OK with the payload, or a failure
 * that loses the device's connection (the caller returns peer_rdev_lost's status). KV chunks in
 * flight are answered first (the answers come in order). */
static int call(rdev *d, int type, const void *a, size_t na, const void *b, size_t nb, int answer,
                uint32_t max, peer_header *h, const uint8_t **p)
{
    peer_node *n = d->node;
    if ((atomic_load(&n->dead) && !d->reviving) || peer_rdev_conn_dead(d)) {
        peer_rdev_kv_drain(d);
        return PEER_ERR_IO;
    }
    int st = peer_rdev_kv_drain(d);
    if (st) return st;
    atomic_fetch_add(&n->calls, 1);
    st = peer_conn_send(d->c, type, a, na, b, nb, peer_rdev_call_timeout());
    if (!st) st = peer_rdev_recv_answer(d, max, h, p);
    atomic_fetch_sub(&n->calls, 1);
    if (!st && h->type != answer) st = PEER_ERR_PROTO;
    if (st)
        peer_log(1, "peer_call_failed", "device=%s call=%s reason=\"%s\"", d->name, peer_type_name(type),
                 peer_strerror(st));
    return st;
}

int peer_rdev_lost(rdev *d)
{
    if (d->c) {
        peer_conn_kill(d->c); /* closed at once: nothing more is read from it */
        peer_rdev_kv_drain(d);
        peer_conn_free(d->c);
        d->c = NULL;
        peer_rdev_kv_unpark(d); /* its worker is gone: UCX reads none of them now */
    }
    if (!atomic_exchange(&d->lost, 1))
        peer_log(1, "peer_device_lost",
                 "device=%s reason=\"a call's connection failed\" retry=\"by the heartbeat\"",
                 d->name);
    return accel_dev_fail(&d->base);
}

/* A REPLY's status as an accel status: a value outside accel's range is the peer's bug. */
static int reply_status(rdev *d, const peer_header *h, const uint8_t *p, uint32_t *value)
{
    peer_words w;
    if (peer_words_read(p, h->length, 2, &w)) return peer_rdev_lost(d);
    int32_t st = (int32_t)w.w[0];
    if (value) *value = w.w[1];
    if (st == 0 || ACCEL_IS_ERR(st)) return st;
    return accel_dev_fail(&d->base);
}

static int words_call(rdev *d, int type, uint32_t a, uint32_t b, uint32_t c, int n_words, uint32_t *value)
{
    peer_words w = {{a, b, c, 0}};
    uint8_t buf[16];
    size_t len = peer_words_write(buf, &w, n_words);
    peer_header h;
    const uint8_t *p;
    if (call(d, type, buf, len, NULL, 0, PEER_REPLY, 8, &h, &p)) return peer_rdev_lost(d);
    return reply_status(d, &h, p, value);
}

/* ---------------------------------------------------------------- the backend */

static void r_describe(accel_dev *ad, accel_info *out)
{
    rdev *d = (rdev *)ad;
    snprintf(out->name, sizeof out->name, "%s", d->name);
    pthread_mutex_lock(&d->desc_mu);
    snprintf(out->desc, sizeof out->desc, "%.22s on %.20s (%.15s, UCX %.24s)", d->di.name, d->node->name,
             d->node->addr, d->transport);
    out->link_bps = d->link_bps;
    pthread_mutex_unlock(&d->desc_mu);
    out->link_s = atomic_load(&d->node->min_rtt) / 2;
    out->mem_outside = atomic_load(&d->outside); /* what the node's other clients hold */
    out->kind = (enum accel_kind)d->di.kind;
    _Static_assert(PEER_CAP_DECODE_ARGMAX == ACCEL_CAP_DECODE_ARGMAX, "one caps bit");
    out->caps = (d->di.caps & (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT | ACCEL_CAP_DECODE_ARGMAX)) | ACCEL_CAP_REMOTE;
    out->max_batch = d->di.max_batch;
    /* the node's device as it described itself: the blocks its KV is cut in, and its decode
     * curve (bounded by peer_info_read), so that placement weighs it like a local device */
    out->kv_block_tokens = d->di.kv_block_tokens;
    _Static_assert(PEER_CURVE_MAX == ACCEL_CURVE_MAX, "peer_curve mirrors accel_decode_curve");
    out->decode_curve.n = d->di.curve.n;
    for (int k = 0; k < d->di.curve.n; k++) {
        out->decode_curve.batch[k] = d->di.curve.batch[k];
        out->decode_curve.step_s[k] = d->di.curve.step_s[k];
    }
    out->decode_curve.ctx = d->di.curve.ctx;
    out->decode_curve.s_per_pos = d->di.curve.s_per_pos;
}

static int r_seq_new(accel_dev *ad, int capacity, accel_seq **out)
{
    rdev *d = (rdev *)ad;
    rseq *s = calloc(1, sizeof *s);
    if (!s) return ACCEL_ERR_NOMEM;
    pthread_mutex_lock(&d->mu);
    s->gen = d->gen;
    s->cap = capacity;
    int st = words_call(d, PEER_SEQ_NEW, (uint32_t)d->index, (uint32_t)capacity, 0, 2, &s->id);
    if (!st) peer_rdev_own_note(d, s, 0); /* what the node reserved for it, if anything */
    pthread_mutex_unlock(&d->mu);
    if (st) {
        free(s);
        return st;
    }
    *out = &s->base;
    return ACCEL_OK;
}

static void r_seq_free(accel_dev *ad, accel_seq *as)
{
    rdev *d = (rdev *)ad;
    rseq *s = (rseq *)as;
    /* a dead peer freed its side when the connection went, and so did a node since revived */
    pthread_mutex_lock(&d->mu);
    peer_rdev_kv_drain(d); /* no chunk in flight may point at s */
    if (s->gen == d->gen && !atomic_load(&d->node->dead) && !peer_rdev_conn_dead(d))
        words_call(d, PEER_SEQ_FREE, (uint32_t)d->index, s->id, 0, 2, NULL);
    peer_rdev_own_gone(d, s); /* freed, or its connection is going: the node frees it then */
    pthread_mutex_unlock(&d->mu);
    free(s);
}

static int r_prefill(accel_dev *ad, const accel_prefill_req *r)
{
    (void)ad;
    (void)r;
    return ACCEL_ERR_UNSUPPORTED; /* a remote device decodes (caps say so) */
}

/* A decode step ran on the node: each sequence holds one position more there (its length, which
 * the wrapper advances after this call returns, is the new token's position). */
static void own_grown(rdev *d, int n, accel_seq *const *seqs)
{
    for (int i = 0; i < n; i++) {
        rseq *s = (rseq *)seqs[i];
        if (s->base.len + 1 > s->held) peer_rdev_own_note(d, s, s->base.len + 1);
    }
}

static int r_decode_locked(rdev *d, int n, accel_seq *const *seqs, const int32_t *ids, float *logits)
{
    if (n > PEER_MAX_BATCH) return ACCEL_ERR_INVALID;
    uint32_t sid[PEER_MAX_BATCH];
    for (int i = 0; i < n; i++) {
        if (((rseq *)seqs[i])->gen != d->gen) return ACCEL_ERR_INVALID; /* of a dead incarnation */
        sid[i] = ((rseq *)seqs[i])->id;
    }
    uint8_t req[8 + 8 * PEER_MAX_BATCH];
    size_t len = peer_decode_write(req, (uint32_t)d->index, n, sid, ids);
    int vocab = d->base.m->cfg.vocab;
    peer_header h;
    const uint8_t *p, *l;
    int32_t status;
    uint32_t max = PEER_LOGITS_FIXED + 4u * (uint32_t)n * (uint32_t)vocab;
    if (call(d, PEER_DECODE, req, len, NULL, 0, PEER_LOGITS, max, &h, &p) ||
        peer_logits_read(p, h.length, n, vocab, &status, &l))
        return peer_rdev_lost(d);
    if (status != 0) return ACCEL_IS_ERR(status) ? status : accel_dev_fail(&d->base);
    memcpy(logits, l, sizeof(float) * (size_t)n * (size_t)vocab);
    own_grown(d, n, seqs);
    return ACCEL_OK;
}

static int r_decode(accel_dev *ad, int n, accel_seq *const *seqs, const int32_t *ids, float *logits)
{
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->mu);
    int st = r_decode_locked(d, n, seqs, ids, logits);
    pthread_mutex_unlock(&d->mu);
    return st;
}

/* DECODE_ARGMAX (a node that offers it): the greedy tokens picked on the node, only the wanted
 * rows' logits over the network (written to their rows; the others are left as they were). */
static int r_decode_argmax_locked(rdev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                                  float *logits, const unsigned char *want, int32_t *argmax)
{
    if (!(d->di.caps & PEER_CAP_DECODE_ARGMAX)) return ACCEL_ERR_UNSUPPORTED; /* before anything */
    if (n > PEER_MAX_BATCH) return ACCEL_ERR_INVALID;
    uint32_t sid[PEER_MAX_BATCH];
    int n_want = 0;
    for (int i = 0; i < n; i++) {
        if (((rseq *)seqs[i])->gen != d->gen) return ACCEL_ERR_INVALID; /* of a dead incarnation */
        sid[i] = ((rseq *)seqs[i])->id;
        n_want += !want || want[i];
    }
    uint8_t req[8 + 9 * PEER_MAX_BATCH];
    size_t len = peer_decode_argmax_write(req, (uint32_t)d->index, n, sid, ids, want);
    int vocab = d->base.m->cfg.vocab;
    peer_header h;
    const uint8_t *p, *l;
    int32_t status;
    uint32_t max = PEER_TOKENS_FIXED + 4u * (uint32_t)n + 4u * (uint32_t)n_want * (uint32_t)vocab;
    if (call(d, PEER_DECODE_ARGMAX, req, len, NULL, 0, PEER_TOKENS, max, &h, &p) ||
        peer_tokens_read(p, h.length, n, vocab, n_want, &status, argmax, &l))
        return peer_rdev_lost(d);
    if (status != 0) return ACCEL_IS_ERR(status) ? status : accel_dev_fail(&d->base);
    own_grown(d, n, seqs);
    for (int i = 0, j = 0; i < n; i++)
        if (!want || want[i]) {
            memcpy(logits + (size_t)i * vocab, l + sizeof(float) * (size_t)j * vocab, sizeof(float) * (size_t)vocab);
            j++;
        }
    return ACCEL_OK;
}

static int r_decode_argmax(accel_dev *ad, int n, accel_seq *const *seqs, const int32_t *ids,
                           float *logits, const unsigned char *want, int32_t *argmax)
{
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->mu);
    int st = r_decode_argmax_locked(d, n, seqs, ids, logits, want, argmax);
    pthread_mutex_unlock(&d->mu);
    return st;
}

static int r_kv_import_crc(accel_dev *ad, accel_seq *as, const proto_kv_layer *c, uint32_t crc)
{
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->mu);
    int st = peer_rdev_kv_import(d, (rseq *)as, c, crc);
    pthread_mutex_unlock(&d->mu);
    return st;
}

static int r_kv_import(accel_dev *ad, accel_seq *s, const proto_kv_layer *c)
{
    return r_kv_import_crc(ad, s, c, proto_kv_payload_crc(c));
}

static int r_warmup(accel_dev *ad)
{
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->mu);
    int st = words_call(d, PEER_WARMUP, (uint32_t)d->index, 0, 0, 1, NULL);
    pthread_mutex_unlock(&d->mu);
    return st;
}

static int r_seq_truncate(accel_dev *ad, accel_seq *as, int len)
{
    rdev *d = (rdev *)ad;
    rseq *s = (rseq *)as;
    pthread_mutex_lock(&d->mu);
    int st = s->gen != d->gen ? ACCEL_ERR_INVALID
                              : words_call(d, PEER_TRUNCATE, (uint32_t)d->index, s->id, (uint32_t)len, 3, NULL);
    if (!st && len < s->held) peer_rdev_own_note(d, s, len); /* the node let the rest go */
    pthread_mutex_unlock(&d->mu);
    return st;
}

static void r_free(accel_dev *ad)
{
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->node->mu);
    d->node->devs[d->index] = NULL;
    pthread_mutex_unlock(&d->node->mu);
    if (d->c && atomic_load(&d->node->dead)) peer_conn_kill(d->c);
    peer_rdev_kv_drain(d);
    peer_conn_free(d->c);
    peer_rdev_kv_unpark(d); /* its worker is gone: UCX reads none of them now */
    pthread_mutex_destroy(&d->mu);
    pthread_mutex_destroy(&d->desc_mu);
    for (int i = 0; i < PEER_KV_WINDOW; i++) free(d->fl[i].buf);
    for (int i = 0; i < d->n_spare; i++) free(d->spare[i]);
    OPENSSL_cleanse(d->kv_token, sizeof d->kv_token);
    free(d);
}

static const struct accel_dev_i remote_i = {
    .free = r_free,
    .describe = r_describe,
    .seq_new = r_seq_new,
    .seq_free = r_seq_free,
    .prefill = r_prefill,
    .decode = r_decode,
    .kv_import = r_kv_import,
    .warmup = r_warmup,
    .seq_truncate = r_seq_truncate,
    .kv_import_crc = r_kv_import_crc,
    .decode_argmax = r_decode_argmax,
};

/* After the handshake: the node's worker address, and a second endpoint by it for the KV
 * (peer/link.h). PEER_OK with one; a failure leaves d->c as it was, carrying everything. */
static int open_address(rdev *d, char *err, size_t errlen)
{
    peer_header h;
    const uint8_t *p, *a;
    uint64_t base;
    size_t len;
    int st = call(d, PEER_ADDR_REQ, NULL, 0, NULL, 0, PEER_ADDR, PEER_ADDR_FIXED + PEER_ADDR_MAX, &h, &p);
    if (st) {
        snprintf(err, errlen, "no worker address: %s", peer_strerror(st));
        return st;
    }
    if (peer_addr_read(p, h.length, &base, &a, &len)) {
        snprintf(err, errlen, "malformed worker address");
        return PEER_ERR_PROTO;
    }
    st = peer_conn_open_address(d->c, a, len, err, errlen);
    if (st) return st;
    d->tag_base = base;
    d->tag_serial = 0;
    return PEER_OK;
}

/* Is the node that answered at n's address the one we knew: the same model, the same devices,
 * each as it was described when it was opened? What a device said of itself then is what its
 * remote device goes on with (rdev.di: the KV cut in its block size, DECODE_ARGMAX sent where its
 * caps offered it, its KV bytes a token) and what the scheduler keeps from it (accel_info at its
 * start: the block size, caps, batch): a device that comes back as another is not revived (a
 * node restarted with another configuration: restart this one too). The decode curve, health and
 * free memory may change. */
static int same_node(const peer_node *n, const peer_info *in)
{
    if (memcmp(in->fingerprint, n->info.fingerprint, 32) || in->vocab != n->info.vocab ||
        in->n_layers != n->info.n_layers || in->n_kv_heads != n->info.n_kv_heads ||
        in->head_dim != n->info.head_dim || in->n_devs != n->info.n_devs)
        return 0;
    for (int i = 0; i < in->n_devs; i++) {
        const peer_dev_info *a = &in->devs[i], *b = &n->info.devs[i];
        if (strcmp(a->name, b->name) || a->kind != b->kind || a->caps != b->caps ||
            a->kv_block_tokens != b->kv_block_tokens ||
            a->kv_bytes_per_token != b->kv_bytes_per_token || a->max_batch != b->max_batch)
            return 0;
    }
    return 1;
}

/* A fresh connection for d (its lock held, or d not yet seen by anyone): authenticated, with an
 * address endpoint as the node's peer_transport asks, to the node d was opened on (same_node: a
 * device connected again after a lost call checks it too). d->c is then the new connection; the
 * old one, if any, is the caller's. */
static int rdev_connect(rdev *d, char *err, size_t errlen)
{
    peer_node *n = d->node;
    peer_info in;
    peer_conn *c;
    uint8_t token[PEER_MAC];
    int st = connect_auth(n, &c, &in, token, err, errlen);
    if (st) return st;
    if (!same_node(n, &in)) {
        snprintf(err, errlen, "it serves another model or other devices now");
        peer_conn_free(c);
        OPENSSL_cleanse(token, sizeof token);
        return PEER_ERR_MODEL;
    }
    d->c = c;
    memcpy(d->kv_token, token, sizeof token);
    OPENSSL_cleanse(token, sizeof token);
    d->tag_serial = 0;
    if (n->transport != PEER_TRANSPORT_STREAM) {
        char why[256];
        if ((st = open_address(d, why, sizeof why))) {
            if (n->transport == PEER_TRANSPORT_ADDRESS || peer_conn_dead(c)) {
                snprintf(err, errlen, "%s%s", n->transport == PEER_TRANSPORT_ADDRESS ? "peer_transport address: " : "", why);
                peer_conn_free(c);
                d->c = NULL;
                return st;
            }
            peer_log(1, "peer_transport_fallback", "device=%s reason=\"%s\" kv=\"tcp stream\"", d->name, why);
        }
    }
    pthread_mutex_lock(&d->desc_mu);
    snprintf(d->transport, sizeof d->transport, "%s", peer_conn_transport(c));
    pthread_mutex_unlock(&d->desc_mu);
    peer_log(0, "peer_device_opened", "device=%s kv_transport=\"%s\"", d->name, d->transport);
    return PEER_OK;
}

/* A fresh connection for d in place of the one it had (lost: NULL, or dead), which is freed:
 * the sequences made on it are stale (gen). PEER_OK; a failure leaves d's connection as it was.
 * The heartbeat thread, d's lock held. */
static int rdev_reconnect(rdev *d, char *err, size_t errlen)
{
    if (d->fl_n) { /* chunks of the dead connection: let go, their sequences failed */
        peer_conn_kill(d->c);
        peer_rdev_kv_drain(d);
    }
    peer_conn *old = d->c;
    d->reviving = 1;
    int st = rdev_connect(d, err, errlen);
    d->reviving = 0;
    if (st) {
        d->c = old;
        return st;
    }
    if (old) {
        peer_conn_kill(old);
        peer_conn_free(old);
    }
    peer_rdev_kv_unpark(d); /* the sends given up on were the old connection's */
    d->gen++;
    atomic_store(&d->own_bytes, 0); /* the node freed the old connection's sequences */
    atomic_store(&d->lost, 0);
    return PEER_OK;
}

/* The heartbeat thread, n answering: each device a call lost (peer_rdev_lost) gets a fresh
 * connection and is revived, as node_revive does for every device of a node that was lost (the
 * node is up: nothing else would ever bring the device back). One whose connection fails is
 * tried again after PEER_RECONNECT_MIN_S, doubling up to PEER_RECONNECT_MAX_S. */
static void devs_reconnect(peer_node *n)
{
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < n->info.n_devs; i++) {
        rdev *d = (rdev *)n->devs[i];
        if (!d || !atomic_load(&d->lost) || peer_now() < d->lost_retry) continue;
        char err[256];
        pthread_mutex_lock(&d->mu); /* the device's worker is out of any call within 50 ms */
        int st = rdev_reconnect(d, err, sizeof err);
        /* under its lock: no call fails it in between; not a device its node reports FAILED */
        int up = !st && n->live.devs[i].health != ACCEL_HEALTH_FAILED;
        if (up) accel_dev_revive(&d->base);
        pthread_mutex_unlock(&d->mu);
        if (!st) peer_rdev_live_apply(d, &n->live.devs[i], 0); /* its room with nothing of ours */
        if (st) {
            d->lost_backoff = d->lost_backoff > 0 ? d->lost_backoff * 2 : PEER_RECONNECT_MIN_S;
            if (d->lost_backoff > PEER_RECONNECT_MAX_S) d->lost_backoff = PEER_RECONNECT_MAX_S;
            d->lost_retry = peer_now() + d->lost_backoff;
            peer_log(1, "peer_reconnect_failed", "device=%s reason=\"%s\" retry_s=%.1f", d->name,
                     err, d->lost_backoff);
        } else {
            d->lost_backoff = 0;
            d->lost_retry = 0;
            peer_log(!up, "peer_device_reconnected", "device=%s%s", d->name,
                     up ? "" : " health=failed reason=\"its node reports it\"");
        }
    }
    pthread_mutex_unlock(&n->mu);
}

/* The heartbeat thread, n dead: connects again; when the node is back as it was, a fresh
 * connection for each of its devices, then they are revived. PEER_OK or why not (tried again). */
static int node_revive(peer_node *n)
{
    char err[256];
    peer_conn *hb;
    peer_info in;
    int st = connect_auth(n, &hb, &in, NULL, err, sizeof err);
    if (st) {
        if (st != PEER_ERR_IO && st != PEER_ERR_TIMEOUT)
            peer_log(1, "peer_reconnect_failed", "peer=%s addr=%s reason=\"%s\"", n->name, n->addr, err);
        return st;
    }
    if (!same_node(n, &in)) {
        peer_log(1, "peer_reconnect_failed", "peer=%s addr=%s reason=\"it serves another model or other devices now\"",
                 n->name, n->addr);
        peer_conn_free(hb);
        return PEER_ERR_MODEL;
    }
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < n->info.n_devs && !st; i++) {
        rdev *d = (rdev *)n->devs[i];
        if (!d) continue;
        pthread_mutex_lock(&d->mu); /* the device's worker is out of any call within 50 ms */
        st = rdev_reconnect(d, err, sizeof err);
        pthread_mutex_unlock(&d->mu);
    }
    if (!st) {
        peer_conn_kill(n->hb);
        peer_conn_free(n->hb);
        n->hb = hb;
        n->live = in;
        atomic_store(&n->dead, 0);
        /* back, except a device its node reports FAILED (sticky there: it stays failed here) */
        for (int i = 0; i < n->info.n_devs; i++)
            if (n->devs[i] && in.devs[i].health != ACCEL_HEALTH_FAILED)
                accel_dev_revive(n->devs[i]);
        peer_node_live_apply(n, &in, NULL);
    }
    pthread_mutex_unlock(&n->mu);
    if (st) {
        peer_log(1, "peer_reconnect_failed", "peer=%s addr=%s reason=\"%s\"", n->name, n->addr, err);
        peer_conn_free(hb);
        return st;
    }
    peer_log(0, "peer_reconnected", "peer=%s addr=%s devices=%d", n->name, n->addr, in.n_devs);
    return PEER_OK;
}

int peer_transport_parse(const char *s)
{
    if (!s || !*s || !strcmp(s, "auto")) return PEER_TRANSPORT_AUTO;
    if (!strcmp(s, "stream")) return PEER_TRANSPORT_STREAM;
    if (!strcmp(s, "address")) return PEER_TRANSPORT_ADDRESS;
    return -1;
}

void peer_node_set_transport(peer_node *n, int transport)
{
    n->transport = transport;
}

accel_dev *peer_remote_open(peer_node *n, int i, const model *m, const accel_opts *o, char *err,
                            size_t errlen)
{
    if (i < 0 || i >= n->info.n_devs) {
        snprintf(err, errlen, "peer %s has no device %d", n->name, i);
        return NULL;
    }
    rdev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->node = n;
    d->index = i;
    d->di = n->info.devs[i];
    /* both names were bounded when they were read (peer_hello_read, peer_info_read): the two
     * with '/' always fit */
    _Static_assert(PEER_NAME_MAX + 1 + PEER_DEV_NAME_MAX <= ACCEL_NAME_MAX, "NODE/device fits");
    _Static_assert(sizeof d->name == ACCEL_NAME_MAX + 1, "a device's name");
    size_t nl = strlen(n->name);
    memcpy(d->name, n->name, nl);
    d->name[nl] = '/';
    memcpy(d->name + nl + 1, d->di.name, strlen(d->di.name) + 1);
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->desc_mu, NULL);
    peer_rdev_faults_read(&d->faults);
    if (rdev_connect(d, err, errlen)) {
        pthread_mutex_destroy(&d->mu);
        pthread_mutex_destroy(&d->desc_mu);
        free(d);
        return NULL;
    }
    d->base.i = &remote_i;
    d->base.m = m;
    if (o) d->base.opts = accel_opts_kept(o);
    d->base.kv_bytes_per_token = d->di.kv_bytes_per_token;
    d->base.mem_total = o && o->mem_limit && o->mem_limit < d->di.mem_total ? o->mem_limit : d->di.mem_total;
    pthread_mutex_lock(&n->mu);
    n->devs[i] = &d->base;
    peer_rdev_live_apply(d, &n->live.devs[i], 0); /* what other peers hold; its node's health */
    pthread_mutex_unlock(&n->mu);
    if (atomic_load(&n->dead)) accel_dev_fail(&d->base);
    return &d->base;
}

int peer_remote_kv_sends_max(accel_dev *ad)
{
    if (!ad || ad->i != &remote_i) return -1;
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->mu);
    int n = d->sends_max;
    pthread_mutex_unlock(&d->mu);
    return n;
}

int peer_remote_kv_bufs_max(accel_dev *ad)
{
    if (!ad || ad->i != &remote_i) return -1;
    rdev *d = (rdev *)ad;
    pthread_mutex_lock(&d->mu);
    int n = d->bufs_max;
    pthread_mutex_unlock(&d->mu);
    return n;
}
