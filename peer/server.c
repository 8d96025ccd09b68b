/* peer/server.c — the node that offers devices (peer.h).
 *
 * One thread owns the listener and every accepted connection: it progresses UCX, takes whole
 * frames off each connection and answers each in turn. A device call (a sequence made, freed or
 * cut, a warm-up, a decode step) is checked here and run on that device's call thread
 * (peer/server_call.c), its answer sent here when it is done, while this thread serves everyone
 * else; the connection's next frames wait for it (held, as behind its chunks). A connection is
 *   HELLO_WAIT -> AUTH_WAIT -> READY
 * and anything else than the message its state expects closes it with a log line, as does a
 * handshake not done within HANDSHAKE_S. Each connection holds the sequences it created (at most
 * MAX_SEQS); they are freed when it closes, whatever way (once its call and chunks running on
 * the other threads are done: it is kept meanwhile, server.closing).
 *
 * KV chunks that come as tagged messages are received by this thread: on each pass it looks
 * for each connection's next serial among the messages that have arrived (peer_conn_tag_probe:
 * the chunk carries its own dev, seq, crc and flags, peer/msg.h; there is no announcement on the
 * stream), bounds its length, and receives it into a kv_rx slot, the receive looked at on each
 * pass (a sender that stalls or dies mid-chunk holds up no other peer's heartbeat, call or KV);
 * up to RX_AHEAD chunks of a connection at a time once its chunks say they come over tcp lanes
 * (PEER_KV_TAG_AHEAD: the next chunk's receive starts while this one's bytes come, so that its
 * bytes follow this one's on the socket instead of waiting for this thread to see it done), and
 * several connections' at once, as long as a kv_rx slot is free (PEER_KV_RX_SLOTS; a chunk that
 * finds none waits its turn), and checked and imported by another (peer/kv_rx.h: one lane a
 * lent device, each in the order its chunks came in), so that the next chunks' copies overlap
 * this one's check and import, and a chunk for a device busy with a long step holds up no other
 * device's; this thread takes their results (each connection's in its order) and sends the
 * REPLYs. With two receiving threads (below) the one that received a chunk computes its
 * payload's CRC-32C while the other goes on (rx_crc), and the check takes it. A connection's frames wait for its own chunks to be applied (frame_waits), and
 * a chunk's lane holds its device while it imports it (peer_server_dev_hold, in turn with the
 * device's call thread, which may be running another connection's call: first come, first
 * served). */
#include "peer/server_impl.h"
#include "proto/crc32c.h"
#include "proto/kv_wire.h"
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>

#define HANDSHAKE_S 5.0
/* A tagged KV chunk whose receive started must be in within this: the sender's own call
 * timeout (PEER_CALL_TIMEOUT_S), after which its connection is closed. Its receive is left
 * pending meanwhile (sconn.rx): only that connection waits for it, every other is served. */
#define TAG_TIMEOUT_S PEER_CALL_TIMEOUT_S

static peer_log_fn g_log;

void peer_set_log(peer_log_fn fn)
{
    g_log = fn;
}

void peer_set_poll_us(int us)
{
    peer_link_set_poll_us(us);
}

void peer_log(int warn, const char *event, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_log) g_log(warn, event, msg);
    else fprintf(stderr, "tandem: %s event=%s %s\n", warn ? "warn" : "info", event, msg);
}

/* ---------------------------------------------------------------- connections */

/* A closing connection's receive UCX did not give back (matched to a chunk still coming): its
 * slot takes a fresh buffer, and this one is kept, with the request, until UCX is done with it
 * (rx_lost_poll). */
static void rx_lost_keep(peer_server *s, sconn *sc, void *req, int slot)
{
    size_t cap;
    uint8_t *buf = peer_kv_rx_put_back_lost(s->rx, slot, &cap);
    if (s->n_lost == s->cap_lost) {
        int n = s->cap_lost ? 2 * s->cap_lost : 8;
        struct rx_lost *l = realloc(s->lost, sizeof *l * (size_t)n);
        if (!l) { /* no memory to remember it: the buffer is let go unfreed, never freed early */
            peer_req_release(req);
            peer_log(1, "peer_rx_abandoned", "peer=%s bytes=%zu reason=\"out of memory: leaked\"",
                     sc->name, cap);
            return;
        }
        s->lost = l;
        s->cap_lost = n;
    }
    s->lost[s->n_lost++] = (struct rx_lost){req, buf, cap};
    atomic_fetch_add(&s->lost_bytes, cap);
    peer_log(1, "peer_rx_abandoned",
             "peer=%s bytes=%zu reason=\"a chunk still coming as its connection closed: "
             "freed once UCX lets its receive go\"",
             sc->name, cap);
}

/* Every pass: the buffers of abandoned receives UCX is done with, freed. */
static void rx_lost_poll(peer_server *s)
{
    for (int i = 0; i < s->n_lost;) {
        if (!peer_req_done(s->lost[i].req)) {
            i++;
            continue;
        }
        free(s->lost[i].buf);
        atomic_fetch_sub(&s->lost_bytes, s->lost[i].cap);
        s->lost[i] = s->lost[--s->n_lost];
    }
}

size_t peer_server_rx_lost_bytes(const peer_server *s)
{
    return atomic_load(&((peer_server *)s)->lost_bytes);
}

/* What a closed connection held, let go once neither its call nor its chunks are running: its
 * sequences (freed on their devices' threads), its UCX connection, itself. */
static void sconn_free(peer_server *s, sconn *sc)
{
    peer_server_calls_release(s, sc->seqs, sc->n_seqs);
    free(sc->seqs);
    peer_conn_free(sc->c);
    OPENSSL_cleanse(sc->kv_token, sizeof sc->kv_token);
    free(sc);
}

/* Every pass: the closed connections whose call and chunks are done, let go. */
static void closing_sweep(peer_server *s)
{
    for (sconn **pp = &s->closing; *pp;) {
        sconn *sc = *pp;
        if (sc->call || sc->kv_pending) {
            pp = &sc->next;
            continue;
        }
        *pp = sc->next;
        sconn_free(s, sc);
    }
}

/* Closes sc (out of the loop's list already): its receives taken back, its unreceived messages
 * let go; the rest once its call and chunks on the other threads are done (closing_sweep): the
 * loop waits for neither. */
static void sconn_close(peer_server *s, sconn *sc, const char *why)
{
    if (sc->tag_wait) s->n_waiting--;
    for (; sc->rx_n; sc->rx_n--) { /* its chunks' receives taken back before the buffers are reused */
        int i = (sc->rx_head + sc->rx_n - 1) % RX_AHEAD;
        if (peer_conn_req_abandon(sc->c, sc->rx[i].req))
            peer_kv_rx_put_back(s->rx, sc->rx[i].slot);
        else
            rx_lost_keep(s, sc, sc->rx[i].req, sc->rx[i].slot); /* never waited for here */
        sc->rx[i].req = NULL;
    }
    peer_server_stray_closing(s, sc); /* its unreceived messages, gaps and strays too */
    int live = 0;
    for (int i = 0; i < sc->n_seqs; i++) live += sc->seqs[i].s != NULL;
    live += sc->call && sc->call->kind == CALL_SEQ_NEW; /* one being made: freed with the rest */
    if (why) /* a peer that closes when done is news; one that vanishes is a warning */
        peer_log(live || sc->state != S_READY, "peer_closed", "peer=%s addr=%s seqs_freed=%d reason=\"%s\"",
                 sc->name[0] ? sc->name : "?", peer_conn_addr(sc->c), live, why);
    sc->closing = 1;
    sc->next = s->closing;
    s->closing = sc;
    closing_sweep(s);
}

/* ---------------------------------------------------------------- answers */

int peer_server_reply(sconn *sc, int32_t status, uint32_t value)
{
    peer_words w = {{(uint32_t)status, value, 0, 0}};
    uint8_t b[8];
    peer_words_write(b, &w, 2);
    return peer_conn_send(sc->c, PEER_REPLY, b, sizeof b, NULL, 0, SEND_TIMEOUT_S);
}

/* The REPLYs held back: sent in one go. */
static int flush_held(sconn *sc)
{
    if (!sc->n_held) return PEER_OK;
    int st = peer_conn_send_raw(sc->c, sc->held, (size_t)sc->n_held * KV_REPLY_BYTES, SEND_TIMEOUT_S);
    sc->n_held = 0;
    return st;
}

/* A KV chunk's REPLY. The client does not wait for it (KV is pipelined: peer/msg.h), so it is
 * held back and sent with the next ones: when half the window's chunks of the connection's
 * chunk size are held (sc->hold, peer_kv_reply_hold: the client, whose window is full, gets
 * room for half of it while this thread goes on with the other half; 1 for 16.25 MiB chunks,
 * of which the window holds 3; over tcp lanes both of the two it holds from 32 MiB on, so that
 * the sender's next two requests leave together, ahead of their bytes), when no more frames are waiting on the connection (server_main:
 * a client that waits has sent all it will), and before any other answer (answers stay in
 * order). One send and one wake-up of the client per few chunks instead of one per chunk. */
static int kv_reply(sconn *sc, int32_t status)
{
    uint8_t *p = sc->held + (size_t)sc->n_held * KV_REPLY_BYTES;
    peer_words w = {{(uint32_t)status, 0, 0, 0}};
    peer_header_write(p, PEER_REPLY, 8);
    peer_words_write(p + PEER_HEADER_BYTES, &w, 2);
    /* hold is 1..PEER_KV_WINDOW / 2 (peer_kv_reply_hold); held[] bounds it all the same */
    if (++sc->n_held >= sc->hold || sc->n_held == PEER_KV_WINDOW / 2) return flush_held(sc);
    return PEER_OK;
}

/* A chunk message's size as the sender's window counted it: with the stream header always
 * (peer/remote_kv.c), which only a run's first chunk carries. */
static size_t kv_counted(size_t n, uint32_t flags)
{
    return n + (flags & PEER_KV_RUN_START ? 0 : PROTO_KV_HEADER_BYTES);
}

static void refuse(sconn *sc, const char *reason)
{
    peer_conn_send(sc->c, PEER_REFUSE, reason, strlen(reason), NULL, 0, 1.0);
}

/* The reader hands each checked chunk to the device with the producer's CRC. */
static int import_chunk(void *ctx, const proto_kv_header *h, const proto_kv_layer *chunk,
                        const proto_kv_chunk_info *info)
{
    (void)h;
    (void)info;
    kvctx *kc = ctx;
    return accel_kv_import_crc(kc->dev, kc->seq, chunk, kc->crc);
}

/* A KV chunk (from a KV frame or a tagged message) into its sequence: its REPLY's status. On
 * its device's kv_rx lane (kv_rx_apply), holding the device's turn: it reads sc's sequences while
 * sc's frames wait for its chunks (kv_pending), and drives the device while its call thread
 * does not. Lanes of other devices may run sc's other chunks at once: each writes only its own
 * sequence's entry (a sequence is found only on its own device, so only on that device's lane). */
static int kv_apply(peer_server *s, sconn *sc, peer_kv k)
{
    sseq *q = seq_get(sc, k.seq, k.dev);
    if (!q) return ACCEL_ERR_INVALID;
    if (k.flags & PEER_KV_RUN_START) {
        /* a run of positions is one KV stream: its header, then layers 0 .. L-1 */
        const model *m = s->cfg.m;
        proto_kv_reader_free(q->r);
        q->r = NULL;
        q->run_st = 0;
        if (!q->kc && !(q->kc = calloc(1, sizeof *q->kc))) return ACCEL_ERR_NOMEM;
        q->kc->dev = s->devs[q->dev];
        q->kc->seq = q->s;
        proto_kv_expect e = {.fingerprint = m->fingerprint, .n_layers = m->cfg.n_layers,
                             .n_kv_heads = m->cfg.n_kv_heads, .head_dim = m->cfg.head_dim,
                             .max_tokens = q->capacity - accel_seq_len(q->kc->dev, q->s),
                             .max_pos = model_context_limit(&m->cfg),
                             .block_tokens = s->block_tokens[q->dev]};
        q->r = proto_kv_reader_new(&e, import_chunk, q->kc);
        if (!q->r) return ACCEL_ERR_NOMEM;
    }
    if (!q->r) return ACCEL_ERR_INVALID;
    q->kc->crc = k.producer_crc;
    const int was_failed = peer_server_dev_failed(s, q->dev);
    if (k.crc_off) proto_kv_reader_crc_hint(q->r, k.bytes + k.crc_off, k.n_bytes - k.crc_off, k.crc);
    int st = proto_kv_reader_feed(q->r, k.bytes, k.n_bytes);
    /* the run failed at an earlier chunk (said then): the rest of it gets the same status */
    if (st == PROTO_KV_ERR_STATE && q->run_st) return q->run_st;
    if (!st && !proto_kv_reader_at_boundary(q->r)) {
        /* a message carries whole chunks: this one was cut short (the reader would take the
         * next message's bytes as its rest) */
        peer_log(1, "peer_kv_corrupt", "peer=%s seq=%u status=\"%s\" detail=\"a chunk cut short: "
                 "the message ended inside it\"", sc->name, k.seq, proto_kv_wire_strerror(PROTO_KV_ERR_TRUNCATED));
        proto_kv_reader_free(q->r);
        q->r = NULL; /* the rest of the run is refused */
        return ACCEL_ERR_CORRUPT;
    }
    if (PROTO_KV_IS_ERR(st)) {
        peer_log(1, "peer_kv_corrupt", "peer=%s seq=%u status=\"%s\" detail=\"%s\"", sc->name,
                 k.seq, proto_kv_wire_strerror(st), proto_kv_reader_error(q->r));
        st = st == PROTO_KV_ERR_NOMEM ? ACCEL_ERR_NOMEM : ACCEL_ERR_CORRUPT;
    } else if (st == ACCEL_ERR_CORRUPT) {
        peer_log(1, "peer_kv_corrupt", "peer=%s seq=%u status=\"device check\"", sc->name, k.seq);
    } else {
        peer_server_device_fault(s, sc, q->dev, "kv_import", st, was_failed);
    }
    if (st && !q->run_st) q->run_st = st;
    return st;
}

/* A chunk's kv_rx lane: its device's (peer/kv_rx.h), so that an import waiting behind one
 * device's long call holds up no other device's; a device out of range (refused unread, on no
 * device) lane 0's. */
static int rx_lane_of(const peer_server *s, const peer_kv *k)
{
    return k->dev < (uint32_t)s->cfg.n_devs ? (int)k->dev : 0;
}

/* The device held meanwhile, in turn with its call thread (peer_server_dev_hold: first come,
 * first served): at most the call running when the chunk came runs before it. */
static int kv_rx_apply(void *ctx, void *owner, const peer_kv *k)
{
    peer_server *s = ctx;
    if (k->dev >= (uint32_t)s->cfg.n_devs) return kv_apply(s, owner, *k); /* refused unread */
    peer_server_dev_hold(s, (int)k->dev);
    int st = kv_apply(s, owner, *k);
    peer_server_dev_let(s, (int)k->dev);
    return st;
}

static void kv_rx_wake(void *ctx)
{
    peer_listener_signal(((peer_server *)ctx)->l);
}

/* The chunks this pass handed off, pushed here (the holder, which still has the token, before it
 * waits for them): their CRCs are left to the reader on the kv_rx thread. */
static void handoff_flush(peer_server *s)
{
    for (int i = 0; i < s->n_handoff; i++)
        peer_kv_rx_push(s->rx, s->handoff[i].slot, s->handoff[i].lane, s->handoff[i].sc,
                        &s->handoff[i].k);
    s->n_handoff = 0;
}

/* The results of chunks applied so far: their REPLYs, held as kv_reply holds them (a closed
 * connection's let go). A connection whose send fails is found dead by server_main. */
static void kv_collect(peer_server *s)
{
    void *owner;
    int st;
    while (peer_kv_rx_done(s->rx, &owner, &st)) {
        sconn *sc = owner;
        sc->kv_pending--;
        if (!sc->closing) kv_reply(sc, st);
    }
}

/* Every pushed chunk applied and its result taken (the node stopping). */
static void kv_sync(peer_server *s)
{
    handoff_flush(s); /* this pass's reserved chunks are pushed by no one else */
    if (!peer_kv_rx_pending(s->rx)) return;
    peer_kv_rx_sync(s->rx);
    kv_collect(s);
}

/* A KV frame on the stream: copied into a kv_rx slot and applied on the kv_rx thread, as a
 * tagged chunk is (its device's call thread may be driving it); FRAME_HELD while no slot is free.
 */
static int on_kv(peer_server *s, sconn *sc, const uint8_t *p, size_t n)
{
    peer_kv k;
    if (peer_kv_read(p, n, &k)) return PEER_ERR_PROTO;
    kv_collect(s); /* the results so far first: peer_kv_rx_take's rule */
    int lane = rx_lane_of(s, &k);
    if (!peer_kv_rx_lane_room(s->rx, lane, 0)) return FRAME_HELD; /* its device's lane is full */
    uint8_t *buf;
    int slot = peer_kv_rx_take(s->rx, n, 0, &buf);
    if (slot == PEER_KV_RX_BUSY) return FRAME_HELD;
    if (slot < 0) return kv_reply(sc, ACCEL_ERR_NOMEM);
    memcpy(buf, p, n);
    peer_kv_read(buf, n, &k);                                 /* the same, its bytes in the slot */
    sc->hold = peer_kv_reply_hold(kv_counted(n, k.flags), 0); /* on the stream: no requests */
    sc->kv_pending++;
    sc->rx_lane = lane;
    peer_kv_rx_push(s->rx, slot, lane, sc, &k);
    return PEER_OK;
}

/* ADDR_REQ: this worker's address and the connection's tag base (after the handshake only:
 * handle() never gets here before). */
static int on_addr_req(peer_server *s, sconn *sc, size_t n)
{
    if (n) return PEER_ERR_PROTO;
    const void *a;
    size_t len;
    uint64_t base;
    if (peer_conn_local_address(sc->c, &a, &len) || len < 1 || len > PEER_ADDR_MAX ||
        peer_server_stray_base(s, &base))
        return peer_server_reply(sc, ACCEL_ERR_UNSUPPORTED, 0);
    uint8_t fixed[PEER_ADDR_FIXED];
    sc->tag_base = base;
    sc->tag_serial = 0;
    sc->addr_given = 1;
    peer_addr_write(fixed, sc->tag_base, "", 0);
    peer_wr32(fixed + 8, (uint32_t)len);
    return peer_conn_send(sc->c, PEER_ADDR, fixed, sizeof fixed, a, len, SEND_TIMEOUT_S);
}

/* Where a chunk's payload starts (after the chunk header, and after the stream header in a run's
 * first chunk); and where its CRC is cut in two, the second half offered to the kv_rx thread
 * (peer_kv_rx_reserve_split: over TCP at 1 MiB the CRC took ~60 us on the quiet node, the
 * chunk a sender waits for at a run's end among them): 0 for payloads under
 * peer_server_crc_split_min (below it the kv_rx thread's wake-up costs more than half the CRC). */
size_t peer_server_crc_split_min = (size_t)64 << 10;
static size_t payload_off(const peer_kv *k)
{
    return ((k->flags & PEER_KV_RUN_START) ? PROTO_KV_HEADER_BYTES : 0) + PROTO_KV_CHUNK_HEADER_BYTES;
}

static size_t crc_split_at(const peer_kv *k)
{
    size_t off = payload_off(k);
    if (k->n_bytes <= off || k->n_bytes - off < peer_server_crc_split_min) return 0;
    return off + ((k->n_bytes - off) / 2 & ~(size_t)63);
}

/* The payload's CRC of a tagged chunk just received, on the thread that received it (with two
 * receiving threads, after it handed the loop on): over shared memory the copy in was that
 * thread's own (UCX's rendezvous reads the sender's memory into the slot), so the bytes are in
 * its core's cache, and the CRC reads them from there. On the kv_rx thread the same bytes come
 * from that core's cache into another's while the loop copies the next chunk in: on the quiet
 * node that slowed the copy of a 1 MiB chunk from ~110 to ~145 us (BENCHMARKS.md, "Peers over
 * UCX"); with one receiving thread the CRC stays there all the same, beside the next copy rather
 * than after it (on a small machine the serial sum is the slower one). The reader compares the
 * wire's payload CRC with this one (proto_kv_reader_crc_hint) and checks everything else as
 * always. The payload starts after the chunk header, and after the stream header in a run's
 * first chunk (the KV wire format, version 2: what this version's peers send); bytes laid out
 * otherwise get no hint that matches, and the reader computes it itself. The CRC of a large
 * payload is computed in two halves, the second by the kv_rx thread where it has nothing else to
 * do (it waits for this chunk), and joined (proto_crc32c_combine). */
static void rx_crc(peer_kv_rx *rx, int slot, peer_kv *k, size_t mid)
{
    size_t off = payload_off(k);
    k->crc_off = 0;
    if (k->n_bytes <= off) return;
    if (!mid) {
        k->crc = proto_crc32c(0, k->bytes + off, k->n_bytes - off);
    } else { /* the first half here; the second too unless the kv_rx thread took it */
        k->crc = proto_crc32c(0, k->bytes + off, mid - off);
        if (peer_kv_rx_split_back(rx, slot)) k->crc = proto_crc32c(k->crc, k->bytes + mid, k->n_bytes - mid);
    }
    k->crc_off = off;
}

/* sc's oldest tagged chunk being received: 1 received and handed to the kv_rx thread, 0 still
 * coming, or a status that closes its connection (the receives are then still sc's:
 * sconn_close takes them back and frees their slots). The chunks behind it wait for it: they
 * are handed on in their serials' order. */
static int rx_finish(peer_server *s, sconn *sc)
{
    struct sconn_rx *x = &sc->rx[sc->rx_head];
    int st = peer_conn_tag_recv_test(sc->c, x->req, x->k.n_bytes);
    if (st == 1) {
        x->req = NULL;
        /* the connection's token first (rx_probe bounded the length past it): its tag says which
         * connection's serial it took, not that its sender is that connection's peer (any UCX
         * endpoint that reaches the listener may send tagged messages) */
        int forged = !peer_mac_equal(x->k.bytes, sc->kv_token);
        if (forged)
            peer_log(1, "peer_kv_refused",
                     "peer=%s serial=%u bytes=%zu reason=\"a tagged chunk without its "
                     "connection's token: not sent by its peer\"",
                     sc->name, sc->tag_serial - (uint32_t)(sc->rx_n - 1), x->k.n_bytes);
        peer_kv k; /* its fixed part: dev, seq, crc, flags (the chunk itself: the reader's) */
        if (forged || peer_kv_tag_read(x->k.bytes, x->k.n_bytes, &k)) {
            peer_kv_rx_put_back(s->rx, x->slot);
            sc->rx_head = (sc->rx_head + 1) % RX_AHEAD;
            sc->rx_n--;
            return PEER_ERR_PROTO;
        }
        /* its REPLY held as the sender's window counts it (here, on the loop's side, before the
         * chunk goes to the kv_rx thread) */
        sc->hold = peer_kv_reply_hold(kv_counted(x->k.n_bytes, k.flags), (k.flags & PEER_KV_TAG_AHEAD) != 0);
        x->k = k;
        sc->ahead = (k.flags & PEER_KV_TAG_AHEAD) != 0;
        sc->kv_pending++; /* pushed here or by this pass's holder (handoff) */
        int lane = sc->rx_lane = rx_lane_of(s, &k);
        if (s->n_th > 1 && s->n_handoff < PEER_KV_RX_SLOTS && !sc->ahead) { /* its CRC after the token goes on */
            size_t mid = crc_split_at(&x->k);
            if (mid)
                peer_kv_rx_reserve_split(s->rx, x->slot, lane, x->k.bytes + mid,
                                         x->k.n_bytes - mid);
            else
                peer_kv_rx_reserve(s->rx, x->slot, lane);
            s->handoff[s->n_handoff++] = (struct handoff){x->slot, lane, sc, x->k, mid};
            atomic_fetch_add_explicit(&s->handed, 1, memory_order_relaxed);
        } else { /* one thread (or tcp lanes): the CRC on the lane's thread, beside the next copy */
            peer_kv_rx_push(s->rx, x->slot, lane, sc, &x->k);
        }
        sc->rx_head = (sc->rx_head + 1) % RX_AHEAD;
        sc->rx_n--;
        return 1;
    }
    if (st == PEER_ERR_PROTO) { /* completed, wrongly: UCX let it go (its slot is free again) */
        peer_kv_rx_put_back(s->rx, x->slot);
        x->req = NULL;
        sc->rx_head = (sc->rx_head + 1) % RX_AHEAD;
        sc->rx_n--;
    }
    if (st < 0) return st;
    return peer_now() > x->deadline ? PEER_ERR_TIMEOUT : 0;
}

/* Starts receiving sc's next chunk (serial sc->tag_serial + 1, found by rx_probe: `length`
 * bytes, bounded) into a free kv_rx slot; it is left pending (server_main looks at it).
 * PEER_KV_RX_BUSY when no slot is free (nothing started), PEER_OK, or a status that closes sc. */
static int rx_start(peer_server *s, sconn *sc, size_t length)
{
    kv_collect(s); /* the results so far first: peer_kv_rx_take's rule */
    uint8_t *buf;
    int slot = peer_kv_rx_take(s->rx, length, 0, &buf);
    if (slot < 0) return slot;
    void *req;
    int st = peer_conn_tag_recv_probed(sc->c, sc->tag_base + sc->tag_serial + 1, buf, length, &req);
    if (st) {
        peer_kv_rx_put_back(s->rx, slot);
        return st;
    }
    sc->tag_serial++;
    struct sconn_rx *x = &sc->rx[(sc->rx_head + sc->rx_n) % RX_AHEAD];
    x->slot = slot;
    x->req = req;
    memset(&x->k, 0, sizeof x->k);
    x->k.bytes = buf;
    x->k.n_bytes = length;
    x->deadline = peer_now() + TAG_TIMEOUT_S;
    int first = !sc->rx_n++, r = first ? rx_finish(s, sc) : 0; /* a later one waits for the oldest */
    if (sc->rx_n > atomic_load_explicit(&s->rx_ahead_max, memory_order_relaxed))
        atomic_store_explicit(&s->rx_ahead_max, sc->rx_n, memory_order_relaxed);
    return r < 0 ? r : PEER_OK;
}

/* Whether sc's next chunk may be received now: fewer than its sender's window unanswered (an
 * honest sender never has more in flight, so this holds back only one that ignores its window:
 * with lanes its results may wait for an older chunk of its own on a busy device, and the node
 * keeps no more of them than a window), and room on the lane its chunks go to
 * (peer_kv_rx_lane_room: a lane waiting behind its device's long call does not take every slot;
 * before its first chunk it goes nowhere yet). */
static int kv_more(peer_server *s, const sconn *sc)
{
    if (sc->kv_pending + sc->rx_n >= PEER_KV_WINDOW) return 0;
    return sc->rx_lane < 0 || peer_kv_rx_lane_room(s->rx, sc->rx_lane, sc->rx_n);
}

/* sc's next chunks, as they arrive: the next serial's message looked for (nothing of it is read
 * but its length, bounded before a buffer is taken for it) and its receive started into a kv_rx
 * slot while other connections' chunks come too; up to RX_AHEAD at once once its chunks come
 * over tcp lanes, one at a time before. With every slot in use, or others waiting before it, it
 * waits its turn (sconn.tag_wait) — the thread goes on serving everyone, and the connection's
 * next frames wait for its chunk. PEER_OK, or a status that closes sc. */
static int rx_probe(peer_server *s, sconn *sc)
{
    while (sc->addr_given && !sc->tag_wait && s->n_handoff < PEER_KV_RX_SLOTS &&
           sc->rx_n < (sc->ahead ? RX_AHEAD : 1) && kv_more(s, sc)) {
        size_t length;
        int r = peer_conn_tag_probe(sc->c, sc->tag_base + sc->tag_serial + 1, &length);
        if (r < 0) return r;
        if (r == 0) return peer_server_stray_check(s, sc); /* not in: anything else of its queued? */
        sc->gap_since = 0;
        if (length <= PEER_KV_TAG_FIXED || length > PEER_KV_TAG_MAX) {
            peer_log(1, "peer_kv_refused", "peer=%s serial=%u bytes=%zu reason=\"a tagged chunk's length out of bounds\"",
                     sc->name, sc->tag_serial + 1, length);
            peer_conn_tag_discard(sc->c, sc->tag_base + ++sc->tag_serial); /* none of its bytes taken */
            return PEER_ERR_PROTO;
        }
        if (!s->n_waiting) {
            r = rx_start(s, sc, length);
            if (r != PEER_KV_RX_BUSY) {
                if (r) return r;
                continue;
            }
        }
        sc->tag_wait = ++s->wait_seq;
        sc->tag_len = length;
        s->n_waiting++;
    }
    return PEER_OK;
}

/* Chunks that waited for a slot, oldest first, while slots are free. A failure closes its
 * connection (server_main finds it dead). */
static void rx_next(peer_server *s)
{
    while (s->n_waiting) {
        sconn *first = NULL;
        for (sconn *sc = s->conns; sc; sc = sc->next)
            if (sc->tag_wait && (!first || sc->tag_wait < first->tag_wait)) first = sc;
        if (!first) return;
        int r = rx_start(s, first, first->tag_len);
        if (r == PEER_KV_RX_BUSY) return;
        first->tag_wait = 0;
        s->n_waiting--;
        if (r < 0) peer_conn_kill(first->c);
    }
}

/* A frame of a READY connection, whose chunks before it are applied (server_pass holds it until
 * they are). */
static int on_ready(peer_server *s, sconn *sc, const peer_header *h, const uint8_t *p)
{
    if (h->type != PEER_KV) { /* its answer after the chunks' */
        int st = flush_held(sc);
        if (st) return st;
    }
    switch (h->type) {
    case PEER_PING:
        return h->length ? PEER_ERR_PROTO : peer_server_send_info(s, sc, PEER_INFO);
    case PEER_SEQ_NEW:
    case PEER_SEQ_FREE:
    case PEER_TRUNCATE:
    case PEER_WARMUP:
    case PEER_DECODE:
    case PEER_DECODE_ARGMAX:
        return peer_server_on_call(s, sc, h->type, p, h->length);
    case PEER_KV: return on_kv(s, sc, p, h->length);
    case PEER_ADDR_REQ:
        return on_addr_req(s, sc, h->length);
    }
    return PEER_ERR_PROTO;
}

/* A frame of sc's waits (held, sconn.deferred) while its chunks are coming or not yet applied, or
 * its device call is queued or running: its answer goes after theirs, and its sequences are
 * theirs meanwhile. */
static int frame_waits(const sconn *sc)
{
    return sc->rx_n || sc->tag_wait || sc->kv_pending || sc->call;
}

/* One frame. PEER_OK, FRAME_HELD (not taken: held, tried again), or a status that closes the
 * connection. */
static int handle(peer_server *s, sconn *sc, const peer_header *h, const uint8_t *p)
{
    if (sc->state == S_HELLO_WAIT) {
        peer_hello hello;
        if (h->type != PEER_HELLO || peer_hello_read(p, h->length, 0, &hello)) return PEER_ERR_PROTO;
        memcpy(sc->nonce_c, hello.nonce, PEER_NONCE);
        snprintf(sc->name, sizeof sc->name, "%s", hello.name);
        peer_hello ch = {0};
        if (peer_nonce(ch.nonce)) return PEER_ERR_IO;
        memcpy(sc->nonce_s, ch.nonce, PEER_NONCE);
        peer_mac((const uint8_t *)s->key, s->key_len, 's', sc->nonce_c, sc->nonce_s, ch.mac);
        snprintf(ch.name, sizeof ch.name, "%s", s->name);
        uint8_t buf[PEER_MAX_PREAUTH];
        size_t n = peer_hello_write(buf, &ch, 1);
        sc->state = S_AUTH_WAIT;
        return peer_conn_send(sc->c, PEER_CHALLENGE, buf, n, NULL, 0, SEND_TIMEOUT_S);
    }
    if (sc->state == S_AUTH_WAIT) {
        if (h->type != PEER_AUTH || h->length != PEER_MAC) return PEER_ERR_PROTO;
        uint8_t want[PEER_MAC];
        peer_mac((const uint8_t *)s->key, s->key_len, 'c', sc->nonce_s, sc->nonce_c, want);
        if (!peer_mac_equal(p, want)) {
            refuse(sc, "authentication failed: not the same peer_key");
            return PEER_ERR_AUTH;
        }
        sc->state = S_READY;
        peer_mac((const uint8_t *)s->key, s->key_len, 'k', sc->nonce_c, sc->nonce_s, sc->kv_token);
        peer_log(0, "peer_connected", "peer=%s addr=%s", sc->name, peer_conn_addr(sc->c));
        return peer_server_send_info(s, sc, PEER_WELCOME);
    }
    return on_ready(s, sc, h, p);
}

/* ---------------------------------------------------------------- the receiving threads
 *
 * Over shared memory the node's loop copies each KV chunk in itself (UCX's rendezvous reads the
 * sender's memory in the receiving thread's progress); with one thread the kv_rx thread checks
 * its CRC beside the next copy, reading the bytes out of this core's cache. With rx_threads > 1
 * the loop passes between threads that take turns: the one that received a chunk hands the loop
 * on at the end of that pass (the token) and does the chunk's CRC (rx_crc, from its own cache)
 * and push while the next one copies the next chunk in on its core;
 * then it waits for its turn again, spinning for at most TOK_SPIN_S first (a stream of chunks
 * gives it back within a chunk's copy; a quiet link lets it sleep). The chunks keep their order
 * (their kv_rx places are reserved as they arrive, peer_kv_rx_reserve); everything else the
 * loop does is as with one thread, done by whichever holds the token.
 * Chunks over tcp lanes (PEER_KV_TAG_AHEAD: the copy is the kernel's socket read) stay with the
 * thread that received them, as with one: TCP x1.07 on the quiet node (BENCHMARKS.md, wiretcp7). */
#define TOK_SPIN_S 0.001

static void tok_take(peer_server *s, int spin)
{
    if (spin) {
        double end = peer_now() + TOK_SPIN_S;
        for (unsigned i = 0; !atomic_load_explicit(&s->tok_free, memory_order_relaxed) && !atomic_load(&s->stop); i++) {
            if ((i & 31) == 31 && peer_now() >= end) break;
            peer_cpu_relax();
        }
    }
    pthread_mutex_lock(&s->tok_mu);
    while (!s->tok_free) pthread_cond_wait(&s->tok_cv, &s->tok_mu);
    s->tok_free = 0;
    pthread_mutex_unlock(&s->tok_mu);
}

static void tok_give(peer_server *s)
{
    pthread_mutex_lock(&s->tok_mu);
    s->tok_free = 1;
    pthread_cond_signal(&s->tok_cv);
    pthread_mutex_unlock(&s->tok_mu);
}

static void server_pass(peer_server *s);

int peer_rx_threads(int n)
{
    if (n >= 1) return n > PEER_RX_THREADS_MAX ? PEER_RX_THREADS_MAX : n;
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return cores >= 8 ? 2 : 1;
}

static void *server_main(void *arg)
{
    peer_server *s = arg;
    int multi = s->n_th > 1;
    if (multi) tok_take(s, 0);
    while (!atomic_load(&s->stop)) {
        server_pass(s);
        if (s->n_handoff) { /* the loop goes on elsewhere while this thread checks what it got */
            struct handoff h[PEER_KV_RX_SLOTS];
            int n = s->n_handoff;
            memcpy(h, s->handoff, sizeof h[0] * (size_t)n);
            s->n_handoff = 0;
            tok_give(s);
            for (int i = 0; i < n; i++) {
                rx_crc(s->rx, h[i].slot, &h[i].k, h[i].mid);
                peer_kv_rx_push(s->rx, h[i].slot, h[i].lane, h[i].sc, &h[i].k);
            }
            tok_take(s, 1);
        }
    }
    if (multi) tok_give(s); /* the next one sees the stop */
    return NULL;
}

/* One pass of the node's loop: the worker progressed (waiting up to 50 ms for something to
 * happen), every connection served. */
static void server_pass(peer_server *s)
{
    {
        peer_listener_progress(s->l, 0.05);
        rx_lost_poll(s);
        kv_collect(s); /* chunks applied since: their REPLYs held, sent below */
        peer_server_calls_collect(s); /* device calls done since: answered */
        closing_sweep(s);
        rx_next(s);    /* chunks that waited their turn, while slots are free */
        peer_conn *c;
        while ((c = peer_listener_accept(s->l))) {
            sconn *sc = calloc(1, sizeof *sc);
            if (!sc) {
                peer_conn_free(c);
                continue;
            }
            sc->c = c;
            sc->rx_lane = -1;
            sc->t0 = peer_now();
            sc->next = s->conns;
            s->conns = sc;
        }
        double now = peer_now();
        for (sconn **pp = &s->conns; *pp;) {
            sconn *sc = *pp;
            int st = 0, got;
            peer_header h;
            const uint8_t *p;
            uint32_t max = sc->state == S_READY ? PEER_MAX_PAYLOAD : PEER_MAX_PREAUTH;
            got = 0;
            while (!st && sc->rx_n && s->n_handoff < PEER_KV_RX_SLOTS) { /* its chunks first, in order */
                int r = rx_finish(s, sc);
                if (r < 0) st = r;
                if (r != 1) break;
            }
            if (!st && sc->deferred && !frame_waits(sc)) { /* the frame that waited for them */
                st = handle(s, sc, &sc->dh, sc->dp);
                if (st == FRAME_HELD)
                    st = 0;
                else
                    sc->deferred = 0;
            }
            if (!st && !sc->deferred && !sc->call && sc->state == S_READY)
                st = rx_probe(s, sc); /* its next chunks */
            /* a bounded number of frames per pass, so that one busy peer cannot starve the rest;
             * a frame read while its chunks are coming waits until they are in (with a chunk
             * handed off the pass ends: the next thread takes the frames after it) */
            for (int k = 0; !st && !sc->deferred && !s->n_handoff && k < 64 &&
                            (got = peer_conn_poll(sc->c, max, &h, &p)) == 1;
                 k++) {
                if (frame_waits(sc) || (st = handle(s, sc, &h, p)) == FRAME_HELD) {
                    st = 0;
                    sc->deferred = 1;
                    sc->dh = h;
                    sc->dp = p;
                    break;
                }
                if (st) break;
                max = sc->state == S_READY ? PEER_MAX_PAYLOAD : PEER_MAX_PREAUTH;
            }
            if (!st && got < 0) st = got;
            /* nothing more waiting: the held REPLYs go (not while a chunk is coming: the frames
             * behind it are not read yet, and its REPLY joins them) */
            if (!st && !sc->rx_n && !sc->deferred && !sc->tag_wait && !s->n_handoff) st = flush_held(sc);
            const char *why = NULL;
            if (st == PEER_ERR_PROTO) why = "bad message (malformed, oversized, unknown version or out of turn)";
            else if (st == PEER_ERR_AUTH) why = "authentication failed: not the same peer_key";
            else if (st == PEER_ERR_IO || (!st && peer_conn_dead(sc->c)))
                why = sc->state == S_READY ? "connection closed" : "connection closed during the handshake";
            else if (st) why = peer_strerror(st);
            else if (sc->state != S_READY && now - sc->t0 > HANDSHAKE_S) why = "handshake timed out";
            if (why) {
                *pp = sc->next;
                if (st == PEER_ERR_AUTH || st == PEER_ERR_PROTO)
                    peer_log(1, "peer_refused", "addr=%s peer=%s reason=\"%s\"", peer_conn_addr(sc->c),
                             sc->name[0] ? sc->name : "?", why);
                sconn_close(s, sc, st == PEER_ERR_AUTH || st == PEER_ERR_PROTO ? NULL : why);
                continue;
            }
            pp = &sc->next;
        }
        peer_server_stray_sweep(s); /* messages of no live connection */
    }
}

int peer_server_start(const peer_server_cfg *cfg, peer_server **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!peer_name_valid(cfg->name)) {
        snprintf(err, errlen, "node_name '%s': 1 to %d of A-Z a-z 0-9 . _ -", cfg->name, PEER_NAME_MAX);
        return PEER_ERR_PROTO;
    }
    if (cfg->n_devs < 0 || cfg->n_devs > PEER_MAX_DEVS) {
        snprintf(err, errlen, "peer_devices: at most %d", PEER_MAX_DEVS);
        return PEER_ERR_PROTO;
    }
    size_t kl = strlen(cfg->key);
    if (kl < PEER_KEY_MIN || kl > PEER_KEY_MAX) {
        snprintf(err, errlen, "the peer key must be %d to %d characters", PEER_KEY_MIN, PEER_KEY_MAX);
        return PEER_ERR_AUTH;
    }
    peer_server *s = calloc(1, sizeof *s);
    if (!s) return PEER_ERR_NOMEM;
    s->cfg = *cfg;
    snprintf(s->name, sizeof s->name, "%s", cfg->name);
    memcpy(s->key, cfg->key, kl + 1);
    s->key_len = kl;
    int st = PEER_OK;
    for (int i = 0; i < cfg->n_devs; i++) {
        s->devs[i] = cfg->devs[i];
        accel_info ai;
        accel_get_info(s->devs[i], &ai);
        s->block_tokens[i] = ai.kv_block_tokens > 0 && ai.kv_block_tokens <= PROTO_KV_MAX_BLOCK_TOKENS
                                 ? ai.kv_block_tokens : 0;
        if (!st && !peer_dev_name_valid(ai.name, err, errlen)) /* carried whole, never cut */
            st = PEER_ERR_PROTO;
    }
    s->cfg.devs = s->devs;
    if (!st) st = peer_listener_new(cfg->listen, &s->l, err, errlen);
    if (st) {
        OPENSSL_cleanse(s->key, sizeof s->key);
        free(s);
        return st;
    }
    s->n_th = peer_rx_threads(cfg->rx_threads);
    pthread_mutex_init(&s->tok_mu, NULL);
    pthread_cond_init(&s->tok_cv, NULL);
    s->tok_free = 1;
    int started = 0, calls = peer_server_calls_start(s);
    if (!calls &&
        !peer_kv_rx_new(cfg->n_devs > 1 ? cfg->n_devs : 1, kv_rx_apply, s, kv_rx_wake, s, &s->rx)) {
        for (; started < s->n_th; started++)
            if (pthread_create(started ? &s->th_more[started - 1] : &s->th, NULL, server_main, s)) break;
    }
    if (started < s->n_th) {
        snprintf(err, errlen, "cannot start the peer threads");
        atomic_store(&s->stop, 1);
        for (int i = 0; i < started; i++) pthread_join(i ? s->th_more[i - 1] : s->th, NULL);
        if (!calls) {
            peer_server_calls_stop(s);
            peer_server_calls_free(s);
        }
        peer_kv_rx_free(s->rx);
        peer_listener_free(s->l);
        pthread_mutex_destroy(&s->tok_mu);
        pthread_cond_destroy(&s->tok_cv);
        OPENSSL_cleanse(s->key, sizeof s->key);
        free(s);
        return PEER_ERR_NOMEM;
    }
    *out = s;
    return PEER_OK;
}

long peer_server_handoffs(const peer_server *s)
{
    return atomic_load(&((peer_server *)s)->handed);
}

int peer_server_rx_ahead_max(const peer_server *s)
{
    return atomic_load(&((peer_server *)s)->rx_ahead_max);
}


int peer_server_port(const peer_server *s)
{
    return peer_listener_port(s->l);
}

void peer_server_stop(peer_server *s)
{
    if (!s) return;
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    for (int i = 1; i < s->n_th; i++) pthread_join(s->th_more[i - 1], NULL);
    while (s->conns) { /* this thread's now */
        sconn *sc = s->conns;
        s->conns = sc->next;
        peer_conn_kill(sc->c); /* stopping: no flush owed to anyone */
        sconn_close(s, sc, NULL);
    }
    /* the chunks and calls still running finish (their results let go), then what their
     * connections held is freed here */
    kv_sync(s);
    peer_server_calls_stop(s);
    peer_server_calls_collect(s);
    closing_sweep(s);
    peer_server_calls_free(s);
    peer_kv_rx_free(s->rx); /* idle */
    pthread_mutex_destroy(&s->tok_mu);
    pthread_cond_destroy(&s->tok_cv);
    rx_lost_poll(s);
    for (int i = 0; i < s->n_lost; i++) peer_req_release(s->lost[i].req);
    peer_listener_free(s->l); /* the worker gone: UCX writes into none of them now */
    for (int i = 0; i < s->n_lost; i++) free(s->lost[i].buf);
    free(s->lost);
    OPENSSL_cleanse(s->key, sizeof s->key);
    free(s);
}
