/* tests/peer/test_peer_tag.c — tagged KV chunks that lie (peer protocol version 3 on: a chunk's
 * metadata travels in its own tagged message, no announcement on the stream), sent by an
 * authenticated peer that writes its messages by hand: a chunk whose wire header says more bytes
 * than its message holds, or fewer, is refused on its own sequence (its REPLY, in order) while
 * the chunks beside it are taken; a message with nothing after its fixed part closes the
 * connection with a log line; one longer than the bound is refused before any of its bytes
 * are received or a buffer is taken for it; and the node goes on serving others throughout.
 * Stray tagged messages (issue 26) — a closed connection's, made-up tags, serials outside a
 * connection's window — are let go and the node's queue ends empty (peer/server_stray.c). A chunk
 * under a connection's tag without its KV token (version 4) is refused before it is used. */
#include "tests/test.h"
#include "devices/devices.h"
#include "peer/auth.h"
#include "peer/link.h"
#include "peer/peer.h"
#include "scheduler/accel_impl.h"
#include "tests/peer/peer_util.h"
#include "tests/util.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TEST(peer_tagged_chunk_lies_refused_on_its_sequence)
{
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, 0, &pf)) return;
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, 8, &kv, &first) == 0);
    raw r;
    REQUIRE(raw_open(t.addr, &r) == 0);
    size_t cap = 1 << 20;
    uint8_t *b = malloc(cap);
    REQUIRE(b);
    uint32_t sa, sb, sc;
    REQUIRE(raw_words(&r, PEER_SEQ_NEW, 0, 16, &sa) == 0);
    REQUIRE(raw_words(&r, PEER_SEQ_NEW, 0, 16, &sb) == 0);
    REQUIRE(raw_words(&r, PEER_SEQ_NEW, 0, 16, &sc) == 0);

    /* A's first chunk 64 bytes short of what its header says, B's with 64 bytes more, then C's
     * whole run as it should be: A and B refused, each on its own REPLY, C taken, in order */
    size_t n = raw_chunk_bytes(t.m, &r, 0, &kv, 0, b, cap);
    REQUIRE(n > 128 && n + 64 <= cap);
    peer_kv ka = {0, sa, kv.crc[0], PEER_KV_RUN_START, NULL, 0, 0, 0};
    peer_kv kb = {0, sb, kv.crc[0], PEER_KV_RUN_START, NULL, 0, 0, 0};
    CHECK_EQ(raw_tag(&r, &ka, b, n - 64), PEER_OK);
    memset(b + n, 0, 64);
    CHECK_EQ(raw_tag(&r, &kb, b, n + 64), PEER_OK);
    for (int l = 0; l < kv.n; l++) {
        size_t cn = raw_chunk_bytes(t.m, &r, 0, &kv, l, b, cap);
        REQUIRE(cn);
        peer_kv kc = {0, sc, kv.crc[l], l == 0 ? PEER_KV_RUN_START : 0, NULL, 0, 0, 0};
        CHECK_EQ(raw_tag(&r, &kc, b, cn), PEER_OK);
    }
    CHECK_EQ(raw_reply(&r, 5), ACCEL_ERR_CORRUPT); /* A: cut short */
    CHECK_EQ(raw_reply(&r, 5), ACCEL_ERR_CORRUPT); /* B: more than its header says */
    for (int l = 0; l < kv.n; l++) {
        int rs = raw_reply(&r, 5);
        CHECK_MSG(rs == 0, "C's layer %d: %d", l, rs);
    }
    /* C's KV is whole: it decodes (a request on the stream after the chunks' answers) */
    uint8_t dq[16];
    uint32_t seqs[1] = {sc};
    int32_t tok[1] = {first};
    size_t dn = peer_decode_write(dq, 0, 1, seqs, tok);
    peer_header h;
    const uint8_t *p;
    int32_t dst = -1;
    const uint8_t *lg;
    CHECK_EQ(peer_conn_send(r.c, PEER_DECODE, dq, dn, NULL, 0, 5), PEER_OK);
    CHECK_EQ(peer_conn_recv(r.c, PEER_MAX_PAYLOAD, &h, &p, 5), PEER_OK);
    CHECK(h.type == PEER_LOGITS && peer_logits_read(p, h.length, 1, t.m->cfg.vocab, &dst, &lg) == PEER_OK && dst == 0);

    /* nothing after the fixed part: the connection is closed (a log line), the node stays up */
    peer_kv ke = {0, sc, 0, 0, NULL, 0, 0, 0};
    CHECK_EQ(raw_tag(&r, &ke, b, 0), PEER_OK);
    int st = peer_conn_recv(r.c, 4096, &h, &p, 3);
    CHECK_MSG(st == PEER_ERR_IO, "an empty chunk: %s instead of the connection closed", peer_strerror(st));
    peer_conn_free(r.c);

    /* past the bound: refused on its length alone, before a byte of it is received (the
     * rendezvous moves no bytes until the receive; the buffer is never touched here) */
    raw r2;
    REQUIRE(raw_open(t.addr, &r2) == 0);
    size_t big = PEER_KV_TAG_MAX + 1;
    uint8_t *huge = calloc(1, big);
    REQUIRE(huge);
    peer_kv kh = {0, 0, 0, PEER_KV_RUN_START, NULL, 0, 0, 0};
    peer_kv_tag_write_fixed(huge, r2.token, &kh);
    void *req = NULL;
    double t0 = peer_now();
    CHECK_EQ(peer_conn_tag_send_start(r2.c, r2.base + 1, huge, big, &req), PEER_OK);
    st = peer_conn_recv(r2.c, 4096, &h, &p, 5); /* the node closes the connection */
    CHECK_MSG(st == PEER_ERR_IO, "an oversized chunk: %s instead of the connection closed (%.1f s)",
              peer_strerror(st), peer_now() - t0);
    if (req) peer_conn_req_wait(r2.c, req, 1);
    peer_conn_free(r2.c);
    free(huge);

    /* and a node that behaves still gets in and decodes */
    peer_node *node;
    accel_dev *rd;
    if (two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0) {
        int32_t out[2];
        CHECK_EQ(import_decode(rd, &kv, first, 2, out), 0);
        accel_free(rd);
        peer_node_free(node);
    }
    free(b);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    accel_free(pf);
    two_stop(&t);
}

/* ---------------------------------------------------------------- the KV token */

static _Atomic int g_imports; /* node B's device's KV imports (any sequence) */
static struct accel_dev_i g_count_i;
static int (*g_import_crc)(accel_dev *, accel_seq *, const proto_kv_layer *, uint32_t);
static int (*g_import)(accel_dev *, accel_seq *, const proto_kv_layer *);

static int count_import_crc(accel_dev *d, accel_seq *s, const proto_kv_layer *c, uint32_t crc)
{
    atomic_fetch_add(&g_imports, 1);
    return g_import_crc(d, s, c, crc);
}

static int count_import(accel_dev *d, accel_seq *s, const proto_kv_layer *c)
{
    atomic_fetch_add(&g_imports, 1);
    return g_import(d, s, c);
}

static _Atomic int g_forged_lines;

static void count_forged(int warn, const char *event, const char *msg)
{
    if (warn && !strcmp(event, "peer_kv_refused") && strstr(msg, "token"))
        atomic_fetch_add(&g_forged_lines, 1);
}

/* A tagged chunk is taken only with its connection's KV token (peer/auth.h, peer/msg.h): the
 * listener's worker takes tagged messages from any endpoint that reaches it (one that never sent a
 * HELLO included: the audit's reproducer injected KV into another peer's sequence knowing only
 * its tag base), so the tag says which connection's serial a message takes, not who sent it.
 * Here another peer sends a well-formed chunk of its own prompt under the victim's next tag, for
 * the victim's sequence, with its own token (a made-up one fares the same): it is refused before
 * any of it is used (no import on node B's device, a log line), and the connection whose serial
 * it took is closed (as for any tagged chunk that breaks the protocol; its sender's device
 * reconnects) with its sequence, which never held the other prompt's KV. The same chunk with the
 * victim's token is taken. */
TEST(peer_tagged_chunk_without_its_token_refused)
{
    atomic_store(&g_forged_lines, 0);
    peer_set_log(count_forged); /* before any thread that logs starts (peer.h) */
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, 0, &pf)) return;
    g_count_i = *t.lent->i;
    g_import_crc = g_count_i.kv_import_crc;
    g_import = g_count_i.kv_import;
    if (g_import_crc) g_count_i.kv_import_crc = count_import_crc;
    if (g_import) g_count_i.kv_import = count_import;
    t.lent->i = &g_count_i;
    int32_t ids[] = {1, 22, 33, 44, 55, 66, 77, 88}; /* the other peer's prompt */
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, 8, &kv, &first) == 0);
    size_t cap = 1 << 20;
    uint8_t *b = malloc(cap);
    REQUIRE(b);
    raw v, a;
    REQUIRE(raw_open(t.addr, &v) == 0);
    REQUIRE(raw_open(t.addr, &a) == 0);
    uint32_t sq;
    REQUIRE(raw_words(&v, PEER_SEQ_NEW, 0, 16, &sq) == 0);
    accel_info li;
    accel_get_info(t.lent, &li);
    CHECK_EQ(li.n_seqs, 1);

    size_t n = raw_chunk_bytes(t.m, &v, 0, &kv, 0, b, cap);
    REQUIRE(n);
    peer_kv k = {0, sq, kv.crc[0], PEER_KV_RUN_START, NULL, 0, 0, 0};
    raw forger = a; /* a's connection and token, v's tags */
    forger.base = v.base;
    forger.serial = v.serial;
    CHECK_EQ(raw_tag(&forger, &k, b, n), PEER_OK);
    int st = raw_reply(&v, 5);
    CHECK_MSG(st == PEER_ERR_IO,
              "a chunk under v's tag with another's token: %d instead of v's connection closed",
              st);
    CHECK_EQ(atomic_load(&g_imports), 0); /* nothing of it reached a sequence */
    CHECK_EQ(atomic_load(&g_forged_lines), 1);
    for (int i = 0; i < 100 && (accel_get_info(t.lent, &li), li.n_seqs); i++) nap_ms(10);
    CHECK_EQ(li.n_seqs, 0); /* v's sequence went with its connection */
    peer_conn_free(v.c);

    /* the other peer's own connection is untouched, and the same chunk with its token is taken */
    uint32_t sa;
    REQUIRE(raw_words(&a, PEER_SEQ_NEW, 0, 16, &sa) == 0);
    k.seq = sa;
    CHECK_EQ(raw_tag(&a, &k, b, n), PEER_OK);
    CHECK_EQ(raw_reply(&a, 5), 0);
    CHECK(atomic_load(&g_imports) > 0);
    peer_conn_free(a.c);
    free(b);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    accel_free(pf);
    two_stop(&t);
    peer_set_log(NULL);
}

/* ---------------------------------------------------------------- strays (issue 26) */

static _Atomic int g_stray_lines;

static void count_strays(int warn, const char *event, const char *msg)
{
    (void)msg;
    if (warn && !strcmp(event, "peer_stray_tag")) atomic_fetch_add(&g_stray_lines, 1);
}

/* Until the node's last pass found no tagged message queued on its worker: 1, or 0 after 3 s. */
static int queue_empties(peer_server *s)
{
    double end = peer_now() + 3;
    while (peer_now() < end) {
        if (!peer_server_tags_queued(s)) return 1;
        nap_ms(10);
    }
    return 0;
}

/* One tagged message of n bytes (its fixed part a chunk's: the node never gets that far). */
static int raw_tag_at(raw *r, uint64_t tag, size_t n)
{
    uint8_t *m = calloc(1, n);
    if (!m) return PEER_ERR_NOMEM;
    peer_kv k = {0, 0, 0, PEER_KV_RUN_START, NULL, 0, 0, 0};
    peer_kv_tag_write_fixed(m, r->token, &k);
    void *req = NULL;
    int st = peer_conn_tag_send_start(r->c, tag, m, n, &req);
    /* eager ones complete at once; a rendezvous one when the node lets it go (or closes) */
    if (!st && req) peer_conn_req_wait(r->c, req, 3);
    free(m);
    return st;
}

/* Messages no connection of the node will receive — a closed connection's late chunks, tags
 * of no connection at all, serials outside a live connection's window — are let go, and the
 * node's queue ends empty; the one outside its window closes its connection with a log line;
 * a good peer beside them keeps working. Eager (small) and rendezvous (256 KiB) messages. */
static void strays_let_go(int rx_threads)
{
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, rx_threads, &pf)) return;
    atomic_store(&g_stray_lines, 0);
    peer_set_log(count_strays);
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, 8, &kv, &first) == 0);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);

    /* (1) a closed connection's chunks arriving after its close (sent here by another
     * connection in its tag range: to the node the same messages; UCX does not say who sent) */
    raw gone, late;
    REQUIRE(raw_open(t.addr, &gone) == 0);
    uint64_t gone_base = gone.base;
    peer_conn_free(gone.c);
    REQUIRE(raw_open(t.addr, &late) == 0);
    CHECK(late.base != gone_base && (late.base & 0xffffffffull) == 0);
    nap_ms(200); /* the node has seen gone's close */
    long s0 = peer_server_strays(t.srv);
    CHECK_EQ(raw_tag_at(&late, gone_base + 1, 64), PEER_OK);
    CHECK_EQ(raw_tag_at(&late, gone_base + 2, 256 << 10), PEER_OK);
    /* made-up tags: of no connection at all */
    CHECK_EQ(raw_tag_at(&late, 0x1234, 64), PEER_OK);
    CHECK_EQ(raw_tag_at(&late, 0x5a5a000000000007ull, 256 << 10), PEER_OK);
    /* an eager send is done once sent: the node may not have seen it yet */
    for (double end = peer_now() + 3; peer_server_strays(t.srv) - s0 < 4 && peer_now() < end;) nap_ms(10);
    CHECK_MSG(queue_empties(t.srv), "the node's queue still holds a tagged message of no connection");
    CHECK_MSG(peer_server_strays(t.srv) - s0 == 4, "%ld strays let go, 4 sent", peer_server_strays(t.srv) - s0);
    /* the sender is not known from those: its connection stays */
    uint32_t sq;
    CHECK_EQ(raw_words(&late, PEER_SEQ_NEW, 0, 16, &sq), 0);

    /* (2) serials outside its own window: its connection closed, the messages let go */
    int lines = atomic_load(&g_stray_lines);
    CHECK_EQ(raw_tag_at(&late, late.base + 1 + PEER_KV_WINDOW + 7, 256 << 10), PEER_OK);
    peer_header h;
    const uint8_t *p;
    int st = peer_conn_recv(late.c, 4096, &h, &p, 3);
    CHECK_MSG(st == PEER_ERR_IO, "a serial past the window: %s instead of the connection closed", peer_strerror(st));
    CHECK(atomic_load(&g_stray_lines) > lines);
    CHECK_MSG(queue_empties(t.srv), "the node's queue still holds the stray");
    peer_conn_free(late.c);

    raw dup;
    REQUIRE(raw_open(t.addr, &dup) == 0);
    lines = atomic_load(&g_stray_lines);
    CHECK_EQ(raw_tag_at(&dup, dup.base + 0, 64), PEER_OK); /* behind the window (serial 0: never one) */
    st = peer_conn_recv(dup.c, 4096, &h, &p, 3);
    CHECK_MSG(st == PEER_ERR_IO, "a serial behind the window: %s instead of the connection closed", peer_strerror(st));
    CHECK(atomic_load(&g_stray_lines) > lines);
    CHECK_MSG(queue_empties(t.srv), "the node's queue still holds the stray");
    peer_conn_free(dup.c);

    /* (3) in another live connection's range, past its window: UCX does not say who sent it,
     * so the owner's connection is the one closed (its sender re-places its requests); guessing
     * a range takes 2^32 tries, each let go. The sender's connection stays. */
    raw x, y;
    REQUIRE(raw_open(t.addr, &x) == 0);
    REQUIRE(raw_open(t.addr, &y) == 0);
    CHECK_EQ(raw_tag_at(&x, y.base + 1 + PEER_KV_WINDOW + 3, 64), PEER_OK);
    st = peer_conn_recv(y.c, 4096, &h, &p, 3);
    CHECK_MSG(st == PEER_ERR_IO, "a stray in its range: %s instead of the connection closed", peer_strerror(st));
    CHECK_MSG(queue_empties(t.srv), "the node's queue still holds the stray");
    CHECK_EQ(raw_words(&x, PEER_SEQ_NEW, 0, 16, &sq), 0);
    peer_conn_free(x.c);
    peer_conn_free(y.c);

    /* the good peer beside them still imports and decodes */
    int32_t out[2];
    CHECK_EQ(import_decode(rd, &kv, first, 2, out), 0);
    CHECK_MSG(queue_empties(t.srv), "the node's queue holds a message after the good peer's chunks");
    accel_free(rd);
    peer_node_free(node);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    accel_free(pf);
    two_stop(&t);
    peer_set_log(NULL); /* once node B's threads are gone: they log its connections' closes */
}

TEST(peer_stray_tags_let_go)
{
    strays_let_go(1);
}

/* The same with two receiving threads taking turns at the node's loop (the sweep among what
 * the token's holder does). */
TEST(peer_stray_tags_let_go_two_receivers)
{
    strays_let_go(2);
}
