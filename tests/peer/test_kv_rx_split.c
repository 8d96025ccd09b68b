/* peer_kv_rx_reserve_split (peer/kv_rx.h): a chunk's CRC cut in two, the second part offered to
 * the kv_rx thread while the receiving thread computes the first. Whichever thread ends up
 * computing the offered part, the apply sees the CRC of the whole payload; a wrong first part
 * gives a wrong whole (the part is joined, not substituted); chunks keep their order and each
 * result is its own. */
#include "tests/test.h"
#include "peer/kv_rx.h"
#include "proto/crc32c.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct split_log {
    int n, order[64];
    int crc_ok[64];
} split_log;

/* the receiver's hint checked against the payload's CRC computed here in one pass */
static int split_apply(void *ctx, void *owner, const peer_kv *k)
{
    split_log *l = ctx;
    int ok = k->crc_off && k->crc_off < k->n_bytes &&
             k->crc == proto_crc32c(0, k->bytes + k->crc_off, k->n_bytes - k->crc_off);
    if (l->n < 64) {
        l->order[l->n] = (int)k->seq;
        l->crc_ok[l->n++] = ok;
    }
    return (int)(intptr_t)owner;
}

/* One chunk as peer/server.c hands it on: reserved with its second half offered, the first half
 * computed here (after `wait_us`, time for the kv_rx thread to take the offer), the second too
 * when the offer comes back, then pushed. `lie` spoils the first half's CRC. 1 when the kv_rx
 * thread computed the second half. */
static int one_chunk(peer_kv_rx *rx, int i, size_t n, int wait_us, int lie)
{
    uint8_t *b;
    int slot = peer_kv_rx_take(rx, n, 1, &b);
    if (slot < 0) return -1;
    for (size_t j = 0; j < n; j++) b[j] = (uint8_t)(i * 131 + j * 7 + (j >> 9));
    size_t off = 40 + (size_t)i % 7, mid = off + ((n - off) / 2 & ~(size_t)63);
    peer_kv_rx_reserve_split(rx, slot, 0, b + mid, n - mid);
    if (wait_us) usleep((useconds_t)wait_us);
    peer_kv k = {0, (uint32_t)i, 0, 0, b, n, off, 0};
    k.crc = proto_crc32c(0, b + off, mid - off) ^ (lie ? 1u : 0u);
    int theirs = !peer_kv_rx_split_back(rx, slot);
    if (!theirs) k.crc = proto_crc32c(k.crc, b + mid, n - mid);
    peer_kv_rx_push(rx, slot, 0, (void *)(intptr_t)(1000 + i), &k);
    return theirs;
}

TEST(peer_kv_rx_split_crc_joins_exactly)
{
    split_log l = {0};
    peer_kv_rx *rx;
    REQUIRE(peer_kv_rx_new(1, split_apply, &l, NULL, NULL, &rx) == PEER_OK);
    int by_rx = 0, by_us = 0, status[64], got = 0;
    for (int i = 0; i < 40; i++) {
        void *o;
        int st;
        while (peer_kv_rx_done(rx, &o, &st)) status[got++] = st;
        /* one chunk at a time (each the oldest: the kv_rx thread may take its offer), waiting
         * 0 or 20 ms before the first half; sizes from 64 KiB to ~1.3 MiB */
        size_t n = ((size_t)64 << 10) + (size_t)i * 31013;
        int r = one_chunk(rx, i, n, i % 2 ? 20000 : 0, i == 17 || i == 18);
        REQUIRE(r >= 0);
        by_rx += r;
        by_us += !r;
        peer_kv_rx_sync(rx);
    }
    /* several reserved at once: only the oldest's offer is the kv_rx thread's to take; the
     * others come back to the receiver */
    uint8_t *b[3];
    int slot[3];
    size_t n = (size_t)200 << 10;
    for (int i = 0; i < 3; i++) {
        slot[i] = peer_kv_rx_take(rx, n, 0, &b[i]);
        REQUIRE(slot[i] >= 0);
        memset(b[i], 0x40 + i, n);
        peer_kv_rx_reserve_split(rx, slot[i], 0, b[i] + n / 2, n - n / 2);
    }
    usleep(20000);
    for (int i = 2; i >= 0; i--) { /* pushed last to first: applied first to last all the same */
        int back = peer_kv_rx_split_back(rx, slot[i]);
        if (i > 0) CHECK(back); /* never offered to the kv_rx thread while not the oldest */
        peer_kv k = {0, (uint32_t)(40 + i), 0, 0, b[i], n, 8, proto_crc32c(0, b[i] + 8, n / 2 - 8)};
        if (back) k.crc = proto_crc32c(k.crc, b[i] + n / 2, n - n / 2);
        peer_kv_rx_push(rx, slot[i], 0, (void *)(intptr_t)(1000 + 40 + i), &k);
    }
    peer_kv_rx_sync(rx);
    void *o;
    int st;
    while (peer_kv_rx_done(rx, &o, &st)) status[got++] = st;
    REQUIRE(l.n == 43 && got == 43);
    for (int i = 0; i < 43; i++) {
        CHECK_EQ(l.order[i], i);
        CHECK_EQ(status[i], 1000 + i);
        CHECK_MSG(l.crc_ok[i] == !(i == 17 || i == 18), "chunk %d: CRC %s", i, l.crc_ok[i] ? "right" : "wrong");
    }
    /* the kv_rx thread's way was taken too: it had 20 ms to take the offers of 20 chunks (the
     * receiver's way: the chunks reserved behind another, above) */
    CHECK_MSG(by_rx > 0, "the kv_rx thread computed no offered part (%d by the receiver)", by_us);
    peer_kv_rx_free(rx);
}

typedef struct lifo_log {
    int n, order[64], bytes_ok[64];
} lifo_log;

/* the chunk's bytes are its own (every byte its seq's), whichever slot it was received into */
static int lifo_apply(void *ctx, void *owner, const peer_kv *k)
{
    lifo_log *l = ctx;
    int ok = k->n_bytes > 0;
    for (size_t j = 0; j < k->n_bytes; j++) ok &= k->bytes[j] == (uint8_t)(0x11 * (k->seq + 1));
    if (l->n < 64) {
        l->order[l->n] = (int)k->seq;
        l->bytes_ok[l->n++] = ok;
    }
    return (int)(intptr_t)owner;
}

static void lifo_push(peer_kv_rx *rx, int slot, uint8_t *b, size_t n, int seq)
{
    memset(b, 0x11 * (seq + 1), n);
    peer_kv k = {0, (uint32_t)seq, 0, 0, b, n, 0, 0};
    peer_kv_rx_push(rx, slot, 0, (void *)(intptr_t)(500 + seq), &k);
}

/* A take gets the free slot freed last (its buffer the warmest), not the lowest free index;
 * the apply order stays the push order and every result and byte its own chunk's. */
TEST(peer_kv_rx_take_reuses_slot_freed_last)
{
    REQUIRE(PEER_KV_RX_SLOTS >= 4);
    lifo_log l = {0};
    peer_kv_rx *rx;
    REQUIRE(peer_kv_rx_new(1, lifo_apply, &l, NULL, NULL, &rx) == PEER_OK);
    size_t n = 4096;
    uint8_t *b[4], *again;
    int s[4], seq = 0;
    for (int i = 0; i < 3; i++) {
        s[i] = peer_kv_rx_take(rx, n, 0, &b[i]);
        REQUIRE(s[i] >= 0);
        CHECK_EQ(s[i], i); /* never freed: lowest index first */
    }
    /* pushed (so applied, so freed) in the order 0, 2, 1: slot 1 is freed last */
    lifo_push(rx, s[0], b[0], n, seq++);
    lifo_push(rx, s[2], b[2], n, seq++);
    lifo_push(rx, s[1], b[1], n, seq++);
    peer_kv_rx_sync(rx);
    int t = peer_kv_rx_take(rx, n, 0, &again);
    CHECK_EQ(t, s[1]); /* the lowest free index would be 0 */
    CHECK(again == b[1]);
    int u = peer_kv_rx_take(rx, n, 0, &again);
    CHECK_EQ(u, s[2]);
    CHECK(again == b[2]);
    /* a put-back slot is freed last too */
    peer_kv_rx_put_back(rx, t);
    int v = peer_kv_rx_take(rx, n, 0, &again);
    CHECK_EQ(v, t);
    int w = peer_kv_rx_take(rx, n, 0, &again);
    CHECK_EQ(w, s[0]);
    s[3] = peer_kv_rx_take(rx, n, 0, &b[3]);
    CHECK_EQ(s[3], 3); /* the one never used, once every used one is taken */
    /* pushed in an order unlike the slots': applied in push order all the same */
    lifo_push(rx, s[3], b[3], n, seq++);
    lifo_push(rx, v, b[1], n, seq++);
    lifo_push(rx, w, b[0], n, seq++);
    lifo_push(rx, u, b[2], n, seq++);
    peer_kv_rx_sync(rx);
    CHECK_EQ(peer_kv_rx_take(rx, n, 0, &again), u);
    peer_kv_rx_put_back(rx, u);
    /* one chunk at a time (the daemon's pipeline at its shallowest): always the same slot */
    int first = -1, same = 1;
    for (int i = 0; i < 20; i++) {
        uint8_t *x;
        int sl = peer_kv_rx_take(rx, n, 1, &x);
        REQUIRE(sl >= 0);
        if (first < 0) first = sl;
        same &= sl == first;
        lifo_push(rx, sl, x, n, seq++);
        peer_kv_rx_sync(rx);
    }
    CHECK(same);
    CHECK_EQ(first, u);
    void *o;
    int st, got = 0;
    while (peer_kv_rx_done(rx, &o, &st)) {
        CHECK_EQ(st, 500 + got);
        got++;
    }
    REQUIRE(l.n == seq && got == seq);
    for (int i = 0; i < seq; i++) {
        CHECK_EQ(l.order[i], i);
        CHECK_MSG(l.bytes_ok[i], "chunk %d: bytes not its own", i);
    }
    peer_kv_rx_free(rx);
}
