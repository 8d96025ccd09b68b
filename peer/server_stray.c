/* peer/server_stray.c — tagged messages the node will never receive (issue 26).
 *
 * KV chunks come as UCX tagged messages on the worker every connection of the node shares; UCX
 * keeps each one that arrives before its receive (eager bytes buffered, a rendezvous request
 * held) until someone receives it. Tags nobody will receive would stay for ever: a closed
 * connection's chunks still on their way, or an authenticated peer's messages outside its
 * window (or made-up tags, from any UCX client of the listener). So that one peer cannot fill
 * the node's memory, each connection owns a tag range — its base's high 32 bits, the serial in
 * the low 32 — and
 *  - a connection whose next serial has not come looks at its oldest queued message: one
 *    outside its window of PEER_KV_WINDOW serials (behind it, a duplicate, or far ahead) is a
 *    protocol violation: logged (peer_stray_tag, the peer named), let go, and the connection
 *    closed (the sender's fault path places its requests again); one inside the window but
 *    ahead of a serial that has not come is allowed the sender's call timeout;
 *  - a closing connection's queued messages are let go at once;
 *  - every pass, the oldest queued message of the worker is looked at: one of no live
 *    connection is let go (up to SWEEP_MAX a pass; a log line at most once a second), until
 *    the oldest is a live connection's (received in turn, or closed by the check above) or
 *    none is left.
 * Cost: one probe per connection whose next chunk is not in yet (a lookup in UCX's queue), and
 * one unmasked probe (the head of the queue) per pass; nothing on a chunk that is there. */
#include "peer/server_impl.h"
#include <stdio.h>
#include <string.h>

/* Strays let go per pass: a flood is worked off over passes, other connections served between. */
#define SWEEP_MAX 256

int peer_server_stray_base(peer_server *s, uint64_t *base)
{
    for (int tries = 0; tries < 16; tries++) {
        uint8_t nonce[PEER_NONCE];
        if (peer_nonce(nonce)) return -1;
        uint64_t b;
        memcpy(&b, nonce, sizeof b);
        b &= TAG_CONN_MASK;
        int taken = b == 0;
        for (sconn *o = s->conns; o && !taken; o = o->next)
            taken = o->addr_given && o->tag_base == b;
        for (int i = 0; i < STRAY_CLOSED_KEPT && !taken; i++) taken = s->closed[i].base == b;
        if (!taken) {
            *base = b;
            return 0;
        }
    }
    return -1; /* 16 clashes in a 2^32 space: the random source is broken */
}

int peer_server_stray_check(peer_server *s, sconn *sc)
{
    uint64_t tag;
    size_t n;
    if (!sc->addr_given || !peer_conn_tag_oldest(sc->c, sc->tag_base, TAG_CONN_MASK, &tag, &n)) {
        sc->gap_since = 0;
        return PEER_OK;
    }
    uint32_t serial = (uint32_t)tag;
    uint32_t ahead = serial - sc->tag_serial - 1; /* 0: the next one; wraps for those behind */
    const char *why = NULL;
    if (ahead >= PEER_KV_WINDOW) why = "a tagged message outside its window of serials";
    else if (!sc->gap_since) sc->gap_since = peer_now();
    else if (peer_now() - sc->gap_since > PEER_CALL_TIMEOUT_S)
        why = "a tagged message ahead of one that never came";
    if (!why) return PEER_OK;
    peer_log(1, "peer_stray_tag", "peer=%s serial=%u expected=%u bytes=%zu reason=\"%s\"", sc->name,
             serial, sc->tag_serial + 1, n, why);
    peer_conn_tag_drop(sc->c, tag, UINT64_MAX);
    atomic_fetch_add(&s->strays, 1);
    return PEER_ERR_PROTO;
}

void peer_server_stray_closing(peer_server *s, sconn *sc)
{
    if (!sc->addr_given) return;
    /* what is queued now: bounded by what may be queued at all (the sweep takes the rest) */
    for (int i = 0; i < SWEEP_MAX && peer_conn_tag_drop(sc->c, sc->tag_base, TAG_CONN_MASK); i++) {}
    struct closed_tags *ct = &s->closed[s->closed_next];
    s->closed_next = (s->closed_next + 1) % STRAY_CLOSED_KEPT;
    ct->base = sc->tag_base;
    snprintf(ct->name, sizeof ct->name, "%s", sc->name[0] ? sc->name : "?");
}

/* Whose range tag is in: a live connection (1), else 0 with the closed one's name or "?". */
static int tag_owner(peer_server *s, uint64_t tag, const char **name)
{
    uint64_t b = tag & TAG_CONN_MASK;
    for (sconn *sc = s->conns; sc; sc = sc->next)
        if (sc->addr_given && sc->tag_base == b) return 1;
    *name = "?";
    for (int i = 0; i < STRAY_CLOSED_KEPT; i++)
        if (s->closed[i].base == b && b) *name = s->closed[i].name;
    return 0;
}

void peer_server_stray_sweep(peer_server *s)
{
    int dropped = 0;
    uint64_t tag;
    size_t n;
    for (;;) {
        if (!peer_listener_tag_oldest(s->l, &tag, &n)) {
            atomic_store_explicit(&s->tags_queued, 0, memory_order_relaxed);
            break;
        }
        const char *who;
        if (tag_owner(s, tag, &who) || dropped == SWEEP_MAX) {
            atomic_store_explicit(&s->tags_queued, 1, memory_order_relaxed);
            break;
        }
        if (!s->stray_msgs++) {
            s->stray_tag = tag;
            snprintf(s->stray_name, sizeof s->stray_name, "%s", who);
        }
        s->stray_bytes += n;
        dropped++;
        peer_listener_tag_drop(s->l, tag);
    }
    if (dropped) atomic_fetch_add(&s->strays, dropped);
    if (!s->stray_msgs) return;
    double now = peer_now();
    if (now - s->stray_logged < STRAY_LOG_S) return;
    peer_log(1, "peer_stray_tag",
             "peer=%s tag=0x%016llx messages=%ld bytes=%zu reason=\"tagged messages of no live "
             "connection (sent after it closed, or made up): let go\"",
             s->stray_name, (unsigned long long)s->stray_tag, s->stray_msgs, s->stray_bytes);
    s->stray_logged = now;
    s->stray_msgs = 0;
    s->stray_bytes = 0;
}

long peer_server_strays(const peer_server *s)
{
    return atomic_load(&((peer_server *)s)->strays);
}

int peer_server_tags_queued(const peer_server *s)
{
    return atomic_load(&((peer_server *)s)->tags_queued);
}
