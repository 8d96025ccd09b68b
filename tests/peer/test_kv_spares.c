/* The remote backend's chunk buffers between chunks (peer/remote_kv.c, peer_rdev_kv_buf_take and
 * _back): a buffer whose send completed goes on a stack of spares, the next chunk takes the one on
 * top. After the chunk size grows, spares too small for it are freed when a chunk is taken, all of
 * them, not only the one on top: left below, they stayed counted in fl_kept (the review's finding),
 * which could pass KV_KEEP_BYTES, and then every buffer coming back was freed instead of kept warm.
 * A buffer whose send was given up on is parked instead, never reused nor freed until the
 * connection is (peer_rdev_kv_park, _unpark).
 * The capacities here are bookkeeping (the bytes behind them are a few, never touched). */
#include "tests/test.h"
#include "peer/remote_impl.h"
#include <stdlib.h>

#define MIB ((size_t)1 << 20)

/* a buffer as the import allocates it: counted in fl_kept and n_bufs, held by f */
static void give(rdev *d, kv_flight *f, size_t cap)
{
    f->buf = malloc(16);
    f->cap = cap;
    d->fl_kept += cap;
    d->n_bufs++;
}

TEST(peer_kv_spares_smaller_dropped_when_taken)
{
    rdev *d = calloc(1, sizeof *d);
    REQUIRE(d);
    kv_flight f[PEER_KV_WINDOW] = {{0}};
    /* seven chunks of 9 MiB in flight, their sends done: seven spares (the window's worth of an
     * older chunk size, as a drain at a run's end leaves them) */
    for (int i = 0; i < 7; i++) {
        give(d, &f[i], 9 * MIB);
        peer_rdev_kv_buf_back(d, &f[i]);
        CHECK(f[i].buf == NULL);
    }
    CHECK_EQ(d->n_spare, 7);
    CHECK_EQ(d->n_bufs, 7);
    CHECK(d->fl_kept == 63 * MIB);
    /* the chunks grow to 18 MiB: none fits, every one is freed, not only the top */
    peer_rdev_kv_buf_take(d, &f[0], 18 * MIB);
    CHECK(f[0].buf == NULL);
    CHECK_EQ(d->n_spare, 0);
    CHECK_EQ(d->n_bufs, 0);
    CHECK(d->fl_kept == 0);
    /* the import allocates; two take turns (two sends in flight over tcp lanes) and, back, both
     * stay as spares: 36 MiB kept, under the bound (with the six stale ones the old pop left,
     * 54 + 36 MiB passed it and each buffer back was freed) */
    give(d, &f[0], 18 * MIB);
    peer_rdev_kv_buf_take(d, &f[1], 18 * MIB);
    CHECK(f[1].buf == NULL);
    give(d, &f[1], 18 * MIB);
    uint8_t *a = f[0].buf, *b = f[1].buf;
    peer_rdev_kv_buf_back(d, &f[0]);
    peer_rdev_kv_buf_back(d, &f[1]);
    CHECK_EQ(d->n_spare, 2);
    CHECK(d->fl_kept == 36 * MIB && d->fl_kept <= KV_KEEP_BYTES);
    /* the next chunk takes the one back last */
    peer_rdev_kv_buf_take(d, &f[2], 18 * MIB);
    CHECK(f[2].buf == b);
    CHECK_EQ(d->n_spare, 1);
    CHECK(d->spare[0] == a);
    peer_rdev_kv_buf_back(d, &f[2]);
    /* a smaller chunk fits the ones kept: nothing freed, the top taken */
    peer_rdev_kv_buf_take(d, &f[3], 1 * MIB);
    CHECK(f[3].buf == b && f[3].cap == 18 * MIB);
    CHECK_EQ(d->n_spare, 1);
    CHECK_EQ(d->n_bufs, 2);
    peer_rdev_kv_buf_back(d, &f[3]);
    /* stale smaller ones below a top that fits go too: [9, 9, 18, 18 (top)] -> the top taken,
     * the other 18 kept, both 9 freed */
    peer_rdev_kv_buf_take(d, &f[4], 18 * MIB);
    peer_rdev_kv_buf_take(d, &f[5], 18 * MIB);
    CHECK(f[4].buf && f[5].buf && d->n_spare == 0);
    for (int i = 6; i < 8; i++) {
        give(d, &f[i], 9 * MIB);
        peer_rdev_kv_buf_back(d, &f[i]);
    }
    uint8_t *top = f[4].buf;
    peer_rdev_kv_buf_back(d, &f[5]);
    peer_rdev_kv_buf_back(d, &f[4]);
    CHECK_EQ(d->n_spare, 4);
    peer_rdev_kv_buf_take(d, &f[0], 18 * MIB);
    CHECK(f[0].buf == top);
    CHECK_EQ(d->n_spare, 1);
    CHECK(d->spare_cap[0] == 18 * MIB);
    CHECK_EQ(d->n_bufs, 2);
    CHECK(d->fl_kept == 36 * MIB);
    peer_rdev_kv_buf_back(d, &f[0]);
    /* past the bound a buffer back is freed, not kept */
    d->fl_kept += KV_KEEP_BYTES;
    give(d, &f[1], 18 * MIB);
    peer_rdev_kv_buf_back(d, &f[1]);
    CHECK(f[1].buf == NULL);
    CHECK_EQ(d->n_spare, 2);
    CHECK_EQ(d->n_bufs, 2);
    d->fl_kept -= KV_KEEP_BYTES;
    while (d->n_spare) free(d->spare[--d->n_spare]);
    free(d);
}

/* A chunk whose send was given up on (a failed or timed-out wait: UCX 1.13 cannot cancel a send
 * and may still read its buffer until the connection is freed): its buffer is parked, out of the
 * spares and the counts, so the next chunk never takes it, and freed only by _unpark (after the
 * connection). Under ASan a parked buffer never freed is a leak, one freed twice a failure. */
TEST(peer_kv_buffers_given_up_on_parked_until_unparked)
{
    rdev *d = calloc(1, sizeof *d);
    REQUIRE(d);
    kv_flight f[3] = {{0}};
    for (int i = 0; i < 3; i++) give(d, &f[i], 2 * MIB);
    uint8_t *lost = f[0].buf;
    peer_rdev_kv_park(d, &f[0]);
    CHECK(f[0].buf == NULL && f[0].cap == 0);
    CHECK_EQ(d->n_parked, 1);
    CHECK_EQ(d->n_bufs, 2);
    CHECK(d->fl_kept == 4 * MIB);
    peer_rdev_kv_buf_back(d, &f[1]); /* a send done: a spare, as ever */
    CHECK_EQ(d->n_spare, 1);
    /* the next chunk takes the spare, never the parked one */
    peer_rdev_kv_buf_take(d, &f[0], 2 * MIB);
    CHECK(f[0].buf != NULL && f[0].buf != lost);
    CHECK_EQ(d->n_spare, 0);
    peer_rdev_kv_park(d, &f[2]);
    CHECK_EQ(d->n_parked, 2);
    peer_rdev_kv_park(d, &f[2]); /* nothing held: nothing parked */
    CHECK_EQ(d->n_parked, 2);
    peer_rdev_kv_unpark(d);
    CHECK_EQ(d->n_parked, 0);
    peer_rdev_kv_unpark(d); /* twice: nothing freed twice */
    free(f[0].buf);
    free(d);
}
