/* peer/remote_kv.c — the KV chunks a remote device sends to its node (peer/remote.c is the
 * rest of the remote backend; what they share: peer/remote_impl.h).
 *
 * KV chunks are pipelined: an import sends its chunk (one tagged message on the address
 * endpoint, its fixed part — dev, seq, crc, flags — first, started without waiting for UCX to
 * finish it: no frame on the stream; or a KV frame on the stream) and returns without waiting for the node's answer, up to KV_WINDOW chunks or
 * KV_WINDOW_BYTES in flight. Answers come back in order on the stream and are taken when the
 * window is full, at the last layer of a run of positions (so a run whose import returned OK
 * was checked and imported whole on the node), before any other call on the device, and
 * whenever an import finds some already there. A chunk the node refused (its CRC, bounds, the
 * device's own check) marks its sequence: that sequence's next import returns the status, so
 * the scheduler sees the failure on the same sequence a chunk or a few later, or at the run's
 * end at the latest. A connection that fails with chunks in flight fails the device
 * (accel_dev_fail): the scheduler moves the requests, nothing is lost.
 *
 * Over tcp lanes (peer_conn_sender_driven) a tagged send's bytes move only while this thread
 * progresses the worker, so the sends themselves are windowed too: at most KV_SENDS of the
 * window's chunks have their sends in flight (a chunk's buffer is taken once one has room: two buffers take turns), a
 * new one waits for the oldest only when that many are, and every import progresses them all
 * without waiting (its passes push what the link takes). The receiver finds each chunk by its
 * serial's tag, in order. Sends in flight overlap the rendezvous round trips that one at a time cost a
 * chunk each. The window holds bytes back only when the sender outruns the link (sends pile up
 * only then); a prefill slower than the link finds the previous chunk's receiver ready at its
 * next import and pushes it there (what the socket does not take at once waits for the import
 * after: at most KV_SENDS chunks are left for the run's last layer, which waits for every send
 * and answer as before). The prefill thread itself waits less than before: only for a full
 * window or at the run's end, where it waited for every chunk's send.
 * Over the other lanes (shared memory) the node reads a chunk's bytes itself (CMA) when it
 * receives it, one at a time: at most KV_SM_SENDS sends are in flight there, the room waited for
 * before a buffer is taken, so that the buffer the node has just read is the next one written and
 * two buffers take turns (one per chunk in the window before: read a window later, out of the
 * caches; x1.28-1.42 on the quiet node at 8.1 and 16.25 MiB, BENCHMARKS.md wireshm). */
#include "peer/remote_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KV_WINDOW PEER_KV_WINDOW
#define KV_SENDS PEER_KV_TCP_SENDS
#define KV_SM_SENDS PEER_KV_SM_SENDS
#define KV_WINDOW_BYTES PEER_KV_WINDOW_BYTES
/* A chunk's buffer is its flight's only until its send completed (UCX reads it no more; the
 * answer comes later and needs no bytes): then it goes back on a stack of spares, and the next
 * chunk is written into the one that went back last. Those bytes were just read by the send,
 * so they are the warmest in the caches; over tagged lanes the room for a send is waited for
 * before the buffer is taken, so at two sends in flight two buffers take turns (three when the
 * buffer was taken first), not the eight of a ring of flights (wiretcp7's ladder on the quiet
 * node: one send buffer x1.08 with one receive buffer over the default, eight instead of one
 * x0.88 at perftest's depth). */

/* ---------------------------------------------------------------- fault injection (tests) */

/* TANDEM_PEER_FAULT, read when a device opens: "kv_bitflip=N[,M...]" flips a payload bit of
 * those chunks, "kv_truncate=N[,M...]" sends them without their last 64 bytes (a message that
 * long: a chunk cut short on the wire), "kv_stall=PATH" holds chunks back while PATH exists
 * (peer.h); any of them may be given, separated by ';'. Chunks are numbered from 1 per remote
 * device. */
void peer_rdev_faults_read(kv_faults *fl)
{
    memset(fl, 0, sizeof *fl);
    const char *f = getenv("TANDEM_PEER_FAULT");
    while (f && *f) {
        long *v = NULL;
        int *n = NULL;
        if (!strncmp(f, "kv_bitflip=", 11)) v = fl->flip, n = &fl->n_flip, f += 11;
        else if (!strncmp(f, "kv_truncate=", 12)) v = fl->cut, n = &fl->n_cut, f += 12;
        else if (!strncmp(f, "kv_stall=", 9)) {
            f += 9;
            size_t len = strcspn(f, ";");
            if (len < sizeof fl->stall) memcpy(fl->stall, f, len), fl->stall[len] = 0;
            f += len;
            f = *f == ';' ? f + 1 : NULL;
            continue;
        } else break;
        while (*f && *f != ';') {
            char *end;
            long x = strtol(f, &end, 10);
            if (end == f) break;
            if (*n < 4) v[(*n)++] = x;
            f = *end == ',' ? end + 1 : end;
        }
        f = *f == ';' ? f + 1 : NULL;
    }
}
/* kv_stall: while its file exists, the chunk's bytes wait (at most PEER_STALL_MAX_S) */
static void fault_stall(rdev *d, long sent)
{
    if (!d->faults.stall[0] || access(d->faults.stall, F_OK)) return;
    peer_log(1, "peer_fault_injected", "device=%s kind=kv_stall chunk=%ld", d->name, sent);
    double end = peer_now() + PEER_STALL_MAX_S;
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (!access(d->faults.stall, F_OK) && peer_now() < end) nanosleep(&ts, NULL);
}
static int fault_at(const long *v, int n, long sent)
{
    for (int i = 0; i < n; i++)
        if (v[i] == sent) return 1;
    return 0;
}

/* ---------------------------------------------------------------- KV chunks in flight */

/* the spares (remote_impl.h) */
void peer_rdev_kv_buf_back(rdev *d, kv_flight *f)
{
    if (!f->buf) return;
    if (d->fl_kept > KV_KEEP_BYTES || d->n_spare == KV_WINDOW) {
        d->fl_kept -= f->cap;
        d->n_bufs--;
        free(f->buf);
    } else {
        d->spare[d->n_spare] = f->buf;
        d->spare_cap[d->n_spare++] = f->cap;
    }
    f->buf = NULL;
    f->cap = 0;
}

void peer_rdev_kv_park(rdev *d, kv_flight *f)
{
    if (!f->buf) return;
    d->fl_kept -= f->cap;
    d->n_bufs--;
    if (d->n_parked < PEER_KV_WINDOW) d->parked[d->n_parked++] = f->buf;
    f->buf = NULL;
    f->cap = 0;
}

void peer_rdev_kv_unpark(rdev *d)
{
    for (int i = 0; i < d->n_parked; i++) free(d->parked[i]);
    d->n_parked = 0;
}

void peer_rdev_kv_buf_take(rdev *d, kv_flight *f, size_t need)
{
    int k = 0;
    for (int i = 0; i < d->n_spare; i++) { /* the ones that fit kept in their order */
        if (d->spare_cap[i] >= need) {
            d->spare[k] = d->spare[i];
            d->spare_cap[k++] = d->spare_cap[i];
        } else {
            d->fl_kept -= d->spare_cap[i];
            d->n_bufs--;
            free(d->spare[i]);
        }
    }
    d->n_spare = k;
    if (!f->buf && d->n_spare) {
        f->buf = d->spare[--d->n_spare];
        f->cap = d->spare_cap[d->n_spare];
    }
}

static void fl_pop(rdev *d)
{
    kv_flight *f = &d->fl[d->fl_head];
    f->req = NULL;
    peer_rdev_kv_buf_back(d, f);
    d->fl_head = (d->fl_head + 1) % KV_WINDOW;
    d->fl_n--;
    d->fl_bytes -= f->len;
    atomic_fetch_sub(&d->node->calls, 1);
}

/* The oldest chunk in flight: its send done, its answer taken (a refusal marks its sequence).
 * wait 0: only if both are done already (the worker progressed once). 1 when retired, 0 not
 * yet (wait 0), or the transport's failure (the connection is then dead). */
static int fl_retire(rdev *d, int wait)
{
    kv_flight *f = &d->fl[d->fl_head];
    int st = PEER_OK;
    if (f->req) {
        if (wait) {
            st = peer_conn_req_wait(d->c, f->req, peer_rdev_call_timeout());
        } else {
            int r = peer_conn_req_test(d->c, f->req);
            if (r == 0) return 0;
            st = r < 0 ? r : PEER_OK;
        }
        f->req = NULL;
        if (st) peer_rdev_kv_park(d, f); /* given up on: UCX may still read it */
        else peer_rdev_kv_buf_back(d, f);
    }
    peer_header h;
    const uint8_t *p;
    if (!st) {
        if (wait) {
            st = peer_rdev_recv_answer(d, KV_ANSWERS_MAX, &h, &p);
        } else {
            int r = peer_conn_poll(d->c, KV_ANSWERS_MAX, &h, &p);
            if (r == 0) return 0;
            st = r < 0 ? r : PEER_OK;
        }
    }
    peer_words w;
    if (!st && (h.type != PEER_REPLY || peer_words_read(p, h.length, 2, &w))) st = PEER_ERR_PROTO;
    rseq *s = f->s;
    double now = peer_now(), from = f->t_sent > d->t_retired ? f->t_sent : d->t_retired;
    if (!st && wait && now > from) {
        /* the chunks go through the link in order: this one had it from its send or the one
         * before's answer, whichever came later (waited for, so its answer is seen as it comes;
         * a polled one may have come earlier) — the rate the placement's network term weighs,
         * the node's import included */
        double bps = (double)f->len / (now - from);
        pthread_mutex_lock(&d->desc_mu);
        d->link_bps = d->link_bps > 0 ? 0.7 * d->link_bps + 0.3 * bps : bps;
        pthread_mutex_unlock(&d->desc_mu);
    }
    d->t_retired = now;
    if (!st && (int32_t)w.w[0] && s && !s->kv_err) {
        /* a status outside accel's range is the node's bug: the chunk failed all the same */
        int32_t rs = (int32_t)w.w[0];
        s->kv_err = ACCEL_IS_ERR(rs) ? rs : ACCEL_ERR_CORRUPT;
    }
    fl_pop(d);
    if (st) {
        if (s && !s->kv_err) s->kv_err = ACCEL_ERR_DEVICE;
        peer_conn_kill(d->c);
        peer_log(1, "peer_call_failed", "device=%s call=%s reason=\"%s\"", d->name,
                 peer_type_name(peer_conn_has_address(d->c) ? PEER_KV_TAG : PEER_KV), peer_strerror(st));
        return st;
    }
    return 1;
}

/* Over tagged lanes: the ring's sends (and the one being added after them, with_new)
 * progressed without waiting, then the oldest waited for until fewer than `window` are in
 * flight (peer_conn_sends_room). The sends in flight, or the transport's failure. */
static int fl_sends(rdev *d, int with_new, int window)
{
    void **r[KV_WINDOW];
    int n = 0;
    for (int i = 0; i < d->fl_n + with_new && i < KV_WINDOW; i++)
        r[n++] = &d->fl[(d->fl_head + i) % KV_WINDOW].req;
    void *before[KV_WINDOW];
    for (int i = 0; i < n; i++) before[i] = *r[i];
    int st = peer_conn_sends_room(d->c, r, n, window, peer_rdev_call_timeout());
    /* the sends done give their buffers back, oldest first: the last done ends on top; on a
     * failure the one given up on cannot be told from those done in the same call: all of them
     * parked (the connection is dead, the rest are parked by the drain that follows) */
    for (int i = 0; i < n; i++) {
        kv_flight *f = &d->fl[(d->fl_head + i) % KV_WINDOW];
        if (f->req) continue;
        if (st < 0 && before[i]) peer_rdev_kv_park(d, f);
        else peer_rdev_kv_buf_back(d, f);
    }
    return st;
}

/* Every chunk in flight answered; after a failure the rest are let go (UCX gives their buffers
 * back: the connection is dead) and their sequences marked. PEER_OK or the first failure. */
int peer_rdev_kv_drain(rdev *d)
{
    int st = PEER_OK;
    while (d->fl_n && !st) {
        int r = fl_retire(d, 1);
        if (r < 0) st = r;
    }
    while (d->fl_n) {
        kv_flight *f = &d->fl[d->fl_head];
        if (f->req) { /* let go (the connection is dead): UCX may still read its buffer */
            if (peer_conn_req_wait(d->c, f->req, 0)) peer_rdev_kv_park(d, f);
            f->req = NULL;
        }
        if (f->s && !f->s->kv_err) f->s->kv_err = ACCEL_ERR_DEVICE;
        fl_pop(d);
    }
    return st;
}

/* Answers already here are taken without waiting, and the worker progressed, so that sends in
 * flight move on whenever this thread is in an import. PEER_OK or a failure (as fl_retire). */
static int fl_poll(rdev *d)
{
    while (d->fl_n) {
        int r = fl_retire(d, 0);
        if (r <= 0) return r;
    }
    return PEER_OK;
}

/* One layer chunk into the node's sequence, pipelined (see the top). */
int peer_rdev_kv_import(rdev *d, rseq *s, const proto_kv_layer *c, uint32_t crc)
{
    const model *m = d->base.m;
    peer_node *n = d->node;
    if (s->gen != d->gen) return ACCEL_ERR_INVALID;
    if (atomic_load(&n->dead) && !d->reviving) {
        peer_rdev_kv_drain(d);
        return accel_dev_fail(&d->base);
    }
    if (peer_rdev_conn_dead(d) || fl_poll(d) < 0) return peer_rdev_lost(d);
    if (s->kv_err) return s->kv_err; /* a chunk of it was refused: the import has failed */
    /* a run of positions is one KV stream (its header first), cut in the device's blocks */
    proto_kv_header hd = {.n_layers = m->cfg.n_layers, .n_kv_heads = c->n_kv_heads,
                          .head_dim = c->head_dim, .n_tokens = c->n_tokens, .pos0 = c->pos0,
                          .dtype = c->dtype,
                          .block_tokens = d->di.kv_block_tokens > 0 ? d->di.kv_block_tokens
                                                                    : PROTO_KV_V1_BLOCK_TOKENS};
    memcpy(hd.fingerprint, m->fingerprint, 32);
    size_t cb = proto_kv_chunk_bytes(&hd, c);
    if (!cb) return ACCEL_ERR_INVALID;
    /* a tagged chunk starts with the connection's KV token (peer/msg.h); a KV frame goes on the
     * authenticated stream itself */
    int tagged = peer_conn_has_address(d->c);
    size_t fixed = tagged ? PEER_KV_TAG_FIXED : PEER_KV_FIXED;
    size_t need = fixed + PROTO_KV_HEADER_BYTES + cb;
    if (need > PEER_MAX_PAYLOAD) return ACCEL_ERR_INVALID;
    /* room in the window: the oldest answered until it has some */
    while (!peer_kv_window_room(d->fl_n, d->fl_bytes, need))
        if (fl_retire(d, 1) < 0) return peer_rdev_lost(d);
    if (s->kv_err) return s->kv_err;
    /* room for this send in the window of sends (the oldest waited for while it is full) before a
     * buffer is taken, so that the one whose send just completed is the one written — two buffers
     * take turns, not three: over tcp lanes, where the bytes move only while this thread
     * progresses, and over the others, where the node reads them (CMA over shared memory, a
     * rendezvous read over RDMA: measured over sysv,cma only) */
    int driven = tagged && peer_conn_sender_driven(d->c), pending = 0;
    if (tagged && (pending = fl_sends(d, 0, driven ? KV_SENDS : KV_SM_SENDS)) < 0) {
        peer_log(1, "peer_call_failed", "device=%s call=%s reason=\"%s\"", d->name, peer_type_name(PEER_KV_TAG),
                 peer_strerror(pending));
        return peer_rdev_lost(d);
    }
    kv_flight *f = &d->fl[(d->fl_head + d->fl_n) % KV_WINDOW];
    peer_rdev_kv_buf_take(d, f, need);
    if (need > f->cap) { /* grown without a copy: every byte is written below */
        d->fl_kept -= f->cap;
        d->n_bufs -= f->buf != NULL;
        free(f->buf);
        f->buf = peer_bulk_alloc(need, &f->cap);
        d->fl_kept += f->cap;
        if (!f->buf) return ACCEL_ERR_NOMEM;
        if (++d->n_bufs > d->bufs_max) d->bufs_max = d->n_bufs;
    }
    peer_kv k = {(uint32_t)d->index, s->id, crc, c->layer == 0 ? PEER_KV_RUN_START : 0, NULL, 0, 0, 0};
    if (tagged)
        peer_kv_tag_write_fixed(f->buf, d->kv_token, &k);
    else
        peer_kv_write_fixed(f->buf, &k);
    size_t o = fixed;
    if (c->layer == 0) {
        int hw = proto_kv_header_write(&hd, f->buf + o);
        if (hw < 0) {
            peer_rdev_kv_buf_back(d, f);
            return ACCEL_ERR_INVALID;
        }
        o += (size_t)hw;
    }
    long long w = proto_kv_chunk_write(&hd, c, f->buf + o, f->cap - o);
    if (w < 0) {
        peer_rdev_kv_buf_back(d, f);
        return ACCEL_ERR_INVALID;
    }
    o += (size_t)w;
    long sent = ++d->kv_sent;
    if (fault_at(d->faults.flip, d->faults.n_flip, sent) && (size_t)w > PROTO_KV_CHUNK_HEADER_BYTES) {
        f->buf[o - 1 - ((size_t)w - PROTO_KV_CHUNK_HEADER_BYTES) / 2] ^= 0x08; /* mid-payload */
        peer_log(1, "peer_fault_injected", "device=%s kind=kv_bitflip chunk=%ld", d->name, sent);
    }
    if (fault_at(d->faults.cut, d->faults.n_cut, sent) && (size_t)w > PROTO_KV_CHUNK_HEADER_BYTES + 64) {
        o -= 64;
        peer_log(1, "peer_fault_injected", "device=%s kind=kv_truncate chunk=%ld", d->name, sent);
    }
    int st;
    f->req = NULL;
    f->t_sent = peer_now();
    if (tagged) {
        /* one tagged message, its fixed part first, left in flight */
        uint32_t serial = ++d->tag_serial;
        if (driven) { /* over tcp lanes the node may receive the next chunk while this one comes */
            k.flags |= PEER_KV_TAG_AHEAD;
            peer_kv_tag_write_fixed(f->buf, d->kv_token, &k);
        }
        fault_stall(d, sent);
        st = peer_conn_tag_send_start(d->c, d->tag_base + serial, f->buf, o, &f->req);
        if (!st && f->req && pending + 1 > d->sends_max) d->sends_max = pending + 1;
        if (!st && driven && f->req) {
            /* a pass without waiting: what the link can take now moves before the import
             * returns (the sends still in flight move in the next import's passes and the
             * waits of a full window or the run's end) */
            st = fl_sends(d, 1, KV_SENDS + 1);
            if (st > 0) st = PEER_OK;
        }
    } else {
        fault_stall(d, sent);
        st = peer_conn_send(d->c, PEER_KV, f->buf, o, NULL, 0, peer_rdev_call_timeout());
    }
    if (st) {
        peer_log(1, "peer_call_failed", "device=%s call=%s reason=\"%s\"", d->name,
                 peer_type_name(tagged ? PEER_KV_TAG : PEER_KV), peer_strerror(st));
        if (f->req && peer_conn_req_wait(d->c, f->req, 0)) peer_rdev_kv_park(d, f); /* UCX may keep it */
        f->req = NULL;
        peer_rdev_kv_buf_back(d, f);
        return peer_rdev_lost(d);
    }
    if (!f->req) peer_rdev_kv_buf_back(d, f); /* sent already (a KV frame, or a send done at once) */
    /* the node takes the run's blocks with its first layer: counted as held from now on (before
     * the node has them, at worst: remote_live.c) */
    if (c->layer == 0 && c->pos0 + c->n_tokens > s->held)
        peer_rdev_own_note(d, s, c->pos0 + c->n_tokens);
    f->len = o;
    f->s = s;
    d->fl_n++;
    d->fl_bytes += o;
    atomic_fetch_add(&n->calls, 1);
    /* the run's last layer: every chunk of it answered before the import says it is whole */
    if (c->layer == m->cfg.n_layers - 1 && peer_rdev_kv_drain(d)) return peer_rdev_lost(d);
    return s->kv_err;
}

