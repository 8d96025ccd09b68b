/* Runs on the emulated card: states, the timing model's arithmetic, timeouts, pacing, and every
 * injected fault surfacing as an error while the process (and the other cards) stay healthy. */
#include "proto/crc32c.h"
#include "tests/fpga/emu_util.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB (1ULL << 20)

typedef struct card {
    fpga_xrt *x;
    xrtDeviceHandle d;
    xrtKernelHandle k;
    xrtBufferHandle src, dst;
    size_t n;
} card;

/* Opens card `index` with kv_gather, a source BO of n bytes in bank sb filled with a pattern
 * (synced) and a destination BO of n bytes in bank db. */
static int card_open(card *c, fpga_xrt *x, unsigned index, size_t n, uint32_t sb, uint32_t db)
{
    memset(c, 0, sizeof *c);
    c->x = x;
    c->n = n;
    int rc = fpga_xrt_device_open(x, index, &c->d);
    if (!rc) rc = t_emu_kernel(x, c->d, "kv_gather", &c->k);
    if (!rc) rc = fpga_xrt_bo_alloc(x, c->d, n, 0, sb, &c->src);
    if (!rc) rc = fpga_xrt_bo_alloc(x, c->d, n, 0, db, &c->dst);
    if (!rc) {
        void *m;
        rc = fpga_xrt_bo_map(x, c->src, &m);
        for (size_t i = 0; !rc && i < n; i++) ((uint8_t *)m)[i] = (uint8_t)(i * 13 + index);
        if (!rc) rc = fpga_xrt_bo_sync(x, c->src, XCL_BO_SYNC_BO_TO_DEVICE, n, 0);
    }
    if (rc) t_fail(__FILE__, __LINE__, "card %u: %s", index, fpga_xrt_error());
    return rc;
}

static void card_close(card *c)
{
    if (c->src) fpga_xrt_bo_free(c->x, c->src);
    if (c->dst) fpga_xrt_bo_free(c->x, c->dst);
    if (c->k) fpga_xrt_kernel_close(c->x, c->k);
    if (c->d) fpga_xrt_device_close(c->x, c->d);
}

/* Starts a kv_gather of the whole buffer; returns the run (caller closes it). */
static xrtRunHandle start_gather(card *c)
{
    xrtRunHandle r = NULL;
    if (fpga_xrt_run_open(c->x, c->k, &r) || fpga_xrt_run_set_bo(c->x, r, 0, c->src) ||
        fpga_xrt_run_set_bo(c->x, r, 1, c->dst) || fpga_xrt_run_set_u64(c->x, r, 2, 0) ||
        fpga_xrt_run_set_u64(c->x, r, 3, 0) || fpga_xrt_run_set_u64(c->x, r, 4, c->n) ||
        fpga_xrt_run_start(c->x, r)) {
        t_fail(__FILE__, __LINE__, "start: %s", fpga_xrt_error());
        if (r) fpga_xrt_run_close(c->x, r);
        return NULL;
    }
    return r;
}

/* 1 when dst's device copy holds the source pattern (reads it back through a sync). */
static int dst_matches(card *c, unsigned index)
{
    uint8_t *got = malloc(c->n);
    int ok = fpga_xrt_bo_sync(c->x, c->dst, XCL_BO_SYNC_BO_FROM_DEVICE, c->n, 0) == 0 &&
             fpga_xrt_bo_read(c->x, c->dst, got, c->n, 0) == 0;
    for (size_t i = 0; ok && i < c->n; i++) ok = got[i] == (uint8_t)(i * 13 + index);
    free(got);
    return ok;
}

TEST(emu_run_states_and_modeled_time)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c;
    REQUIRE(card_open(&c, x, 0, 1 * MiB, 3, 9) == 0);
    xrtRunHandle r;
    REQUIRE(fpga_xrt_run_open(x, c.k, &r) == 0);
    CHECK_EQ(fpga_xrt_run_state(x, r), ERT_CMD_STATE_NEW);
    fpga_emu_run_stats st;
    CHECK_EQ(fpga_xrt_emu_run_stats(x, r, &st), ACCEL_ERR_DEVICE); /* EAGAIN: nothing ran */
    CHECK_EQ(fpga_xrt_run_start(x, r), ACCEL_ERR_INVALID);         /* arguments not set */
    fpga_xrt_run_close(x, r);

    REQUIRE((r = start_gather(&c)) != NULL);
    enum ert_cmd_state s;
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, &s), 0);
    CHECK_EQ(s, ERT_CMD_STATE_COMPLETED);
    CHECK_EQ(fpga_xrt_run_state(x, r), ERT_CMD_STATE_COMPLETED);
    CHECK(dst_matches(&c, 0));
    REQUIRE(fpga_xrt_emu_run_stats(x, r, &st) == 0);
    /* One read command of 1 MiB on channel 3, one write command on channel 9. */
    CHECK_EQ(st.bytes_read, 1 * MiB);
    CHECK_EQ(st.bytes_written, 1 * MiB);
    CHECK_EQ(st.chan_bytes[3], 1 * MiB);
    CHECK_EQ(st.chan_bytes[9], 1 * MiB);
    CHECK_EQ(st.chan_cmds[3], 1);
    CHECK_EQ(st.chan_cmds[9], 1);
    CHECK_EQ(st.chan_bytes[0] + st.chan_bytes[4], 0);
    CHECK_EQ(st.seq, 1);
    /* The model's arithmetic, from fpga/xrt/u280.h: 1 MiB at 14.375 GB/s x 0.9, plus one command. */
    double mem = 1048576.0 / (14.375e9 * 0.90) * 1e9 + 64 / 225e6 * 1e9;
    CHECK_NEAR(st.mem_ns, mem, 2);
    CHECK_EQ(st.overhead_ns, 50000);
    CHECK_NEAR(st.modeled_ns, 50000 + mem, 2);
    CHECK(st.busiest == 3 || st.busiest == 9);
    /* The same run handle runs again; its stats are the new run's. */
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    REQUIRE(fpga_xrt_emu_run_stats(x, r, &st) == 0);
    CHECK_EQ(st.seq, 2);
    fpga_xrt_run_close(x, r);
    fpga_emu_card_stats cs;
    REQUIRE(fpga_xrt_emu_card_stats(x, c.d, &cs) == 0);
    CHECK_EQ(cs.runs_started, 2);
    CHECK_EQ(cs.runs_completed, 2);
    CHECK_EQ(cs.h2d_syncs, 1);
    CHECK_EQ(cs.h2d_bytes, 1 * MiB);
    CHECK_EQ(cs.sync_modeled_ns, fpga_xrt_emu_model_sync_ns(x, 1 * MiB) +
                                     fpga_xrt_emu_model_sync_ns(x, 1 * MiB)); /* + the d2h */
    CHECK_NEAR(fpga_xrt_emu_model_sync_ns(x, 11000000), 5000 + 1e6, 1); /* 11 MB at 11 GB/s */
    card_close(&c);
    fpga_xrt_free(x);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

TEST(emu_run_timeout_surfaces_then_completes)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c;
    /* 64 MiB: modeled at 50 us + 5.4 ms; paced, it cannot complete within 1 ms of its start,
     * even when this thread is descheduled for a few ms between start and wait (a loaded CI
     * machine: 16 MiB / 1.4 ms was seen to flake). */
    REQUIRE(card_open(&c, x, 0, 64 * MiB, 0, 1) == 0);
    CHECK_EQ(fpga_xrt_emu_set_pace(x, c.d, 1), 0);
    xrtRunHandle r = start_gather(&c);
    REQUIRE(r);
    enum ert_cmd_state s;
    CHECK_EQ(fpga_xrt_run_wait(x, r, 1, &s), ACCEL_ERR_TIMEOUT);
    CHECK_EQ(s, ERT_CMD_STATE_TIMEOUT);
    CHECK_MSG(strstr(fpga_xrt_error(), "in flight"), "message: %s", fpga_xrt_error());
    /* A second start while in flight is refused. */
    CHECK(fpga_xrt_run_start(x, r) != 0);
    /* The timeout did not hurt the run: it completes. */
    CHECK_EQ(fpga_xrt_run_wait(x, r, 10000, &s), 0);
    CHECK_EQ(s, ERT_CMD_STATE_COMPLETED);
    CHECK(dst_matches(&c, 0));
    fpga_xrt_run_close(x, r);
    /* Pacing also holds a sync to its modeled time (a lower bound, never a measurement). */
    double t0 = now_s();
    CHECK_EQ(fpga_xrt_bo_sync(x, c.src, XCL_BO_SYNC_BO_TO_DEVICE, 64 * MiB, 0), 0);
    CHECK(now_s() - t0 >= fpga_xrt_emu_model_sync_ns(x, 64 * MiB) / 1e9);
    card_close(&c);
    fpga_xrt_free(x);
}

TEST(emu_fault_hang_times_out_and_card_recovers_on_reopen)
{
    setenv("TANDEM_EMU_FAULT", "card=0,run=2,kind=hang", 1);
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c, other;
    REQUIRE(card_open(&c, x, 0, 64 << 10, 0, 1) == 0);
    REQUIRE(card_open(&other, x, 1, 64 << 10, 0, 1) == 0);
    xrtRunHandle r1 = start_gather(&c);
    REQUIRE(r1);
    CHECK_EQ(fpga_xrt_run_wait(x, r1, 5000, NULL), 0);
    xrtRunHandle r2 = start_gather(&c), r3 = start_gather(&c);
    REQUIRE(r2 && r3);
    CHECK_EQ(fpga_xrt_run_wait(x, r2, 50, NULL), ACCEL_ERR_TIMEOUT);
    CHECK_EQ(fpga_xrt_run_state(x, r2), ERT_CMD_STATE_RUNNING);
    /* The stuck compute unit holds the queue. */
    CHECK_EQ(fpga_xrt_run_wait(x, r3, 20, NULL), ACCEL_ERR_TIMEOUT);
    CHECK_EQ(fpga_xrt_run_state(x, r3), ERT_CMD_STATE_QUEUED);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(x, c.d, &st) == 0);
    CHECK(st.hung);
    /* The other card is unaffected. */
    xrtRunHandle o = start_gather(&other);
    REQUIRE(o);
    CHECK_EQ(fpga_xrt_run_wait(x, o, 5000, NULL), 0);
    CHECK(dst_matches(&other, 1));
    fpga_xrt_run_close(x, o);
    /* Closing everything with runs stuck in flight frees the card (no crash, no hang) ... */
    fpga_xrt_run_close(x, r1);
    fpga_xrt_run_close(x, r2);
    fpga_xrt_run_close(x, r3);
    card_close(&c);
    /* ... and reopening it gives a reset card (without the fault this time: a card reads the
     * spec when it is created). */
    unsetenv("TANDEM_EMU_FAULT");
    REQUIRE(card_open(&c, x, 0, 64 << 10, 0, 1) == 0);
    REQUIRE(fpga_xrt_emu_card_stats(x, c.d, &st) == 0);
    CHECK(!st.hung);
    CHECK_EQ(st.runs_started, 0);
    xrtRunHandle r = start_gather(&c);
    REQUIRE(r);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    CHECK(dst_matches(&c, 0));
    fpga_xrt_run_close(x, r);
    card_close(&c);
    card_close(&other);
    fpga_xrt_free(x);
}

TEST(emu_fault_gone_fails_every_call_other_cards_fine)
{
    setenv("TANDEM_EMU_FAULT", "card=1,run=2,kind=gone", 1);
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card ok, bad;
    REQUIRE(card_open(&ok, x, 0, 64 << 10, 2, 3) == 0);
    REQUIRE(card_open(&bad, x, 1, 64 << 10, 2, 3) == 0);
    xrtRunHandle r = start_gather(&bad);
    REQUIRE(r);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_run_start(x, r), 0); /* run 2: the card falls off the bus */
    enum ert_cmd_state s;
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, &s), ACCEL_ERR_DEVICE);
    CHECK_EQ(s, ERT_CMD_STATE_ABORT);
    /* Every later call on that card fails with ENODEV -> ACCEL_ERR_DEVICE. */
    xrtBufferHandle b;
    CHECK_EQ(fpga_xrt_bo_alloc(x, bad.d, 4096, 0, 0, &b), ACCEL_ERR_DEVICE);
    CHECK_MSG(strstr(fpga_xrt_error(), "No such device"), "message: %s", fpga_xrt_error());
    CHECK_EQ(fpga_xrt_bo_sync(x, bad.src, XCL_BO_SYNC_BO_TO_DEVICE, 4096, 0), ACCEL_ERR_DEVICE);
    CHECK_EQ(fpga_xrt_run_start(x, r), ACCEL_ERR_DEVICE);
    xrtRunHandle r2;
    CHECK_EQ(fpga_xrt_run_open(x, bad.k, &r2), ACCEL_ERR_DEVICE);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(x, bad.d, &st) == 0);
    CHECK(st.gone);
    /* Releasing its handles still works; the index stays gone. */
    CHECK_EQ(fpga_xrt_run_close(x, r), 0);
    card_close(&bad);
    xrtDeviceHandle d;
    CHECK_EQ(fpga_xrt_device_open(x, 1, &d), ACCEL_ERR_DEVICE);
    /* Card 0 works throughout. */
    xrtRunHandle o = start_gather(&ok);
    REQUIRE(o);
    CHECK_EQ(fpga_xrt_run_wait(x, o, 5000, NULL), 0);
    CHECK(dst_matches(&ok, 0));
    fpga_xrt_run_close(x, o);
    card_close(&ok);
    fpga_xrt_free(x);
}

TEST(emu_fault_bitflip_detected_by_checksum)
{
    setenv("TANDEM_EMU_FAULT", "card=0,run=1,kind=bitflip,byte=100,bit=3", 1);
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c;
    enum { N = 4096 };
    REQUIRE(card_open(&c, x, 0, N, 4, 5) == 0);
    uint8_t want[N], got[N];
    CHECK_EQ(fpga_xrt_bo_read(x, c.src, want, N, 0), 0);
    uint32_t crc = proto_crc32c(0, want, N);
    xrtRunHandle r = start_gather(&c);
    REQUIRE(r);
    /* The run itself completes: a flipped bit is silent corruption ... */
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_bo_sync(x, c.dst, XCL_BO_SYNC_BO_FROM_DEVICE, N, 0), 0);
    CHECK_EQ(fpga_xrt_bo_read(x, c.dst, got, N, 0), 0);
    /* ... that the checksum of what the kernel read back catches, at exactly that bit. */
    CHECK(proto_crc32c(0, got, N) != crc);
    int diffs = 0;
    for (int i = 0; i < N; i++) diffs += got[i] != want[i];
    CHECK_EQ(diffs, 1);
    CHECK_EQ(got[100] ^ want[100], 1 << 3);
    /* The next run sees the same flipped device memory; a fresh sync repairs it. */
    CHECK_EQ(fpga_xrt_bo_sync(x, c.src, XCL_BO_SYNC_BO_TO_DEVICE, N, 0), 0);
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    CHECK(dst_matches(&c, 0));
    fpga_xrt_run_close(x, r);
    card_close(&c);
    fpga_xrt_free(x);
}

TEST(emu_fault_error_and_bad_kernel_args_end_in_error)
{
    setenv("TANDEM_EMU_FAULT", "card=0,run=1,kind=error", 1);
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c;
    REQUIRE(card_open(&c, x, 0, 8192, 0, 1) == 0);
    xrtRunHandle r = start_gather(&c);
    REQUIRE(r);
    enum ert_cmd_state s;
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, &s), ACCEL_ERR_DEVICE);
    CHECK_EQ(s, ERT_CMD_STATE_ERROR);
    CHECK_MSG(strstr(fpga_xrt_error(), "ERROR"), "message: %s", fpga_xrt_error());
    /* The next run is fine. */
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    /* A range past the buffer: the kernel refuses it (ERROR), the emulator does not crash. */
    CHECK_EQ(fpga_xrt_run_set_u64(x, r, 4, 8193), 0);
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, &s), ACCEL_ERR_DEVICE);
    CHECK_EQ(s, ERT_CMD_STATE_ERROR);
    CHECK_EQ(fpga_xrt_run_set_u64(x, r, 2, UINT64_MAX), 0); /* an offset that would wrap */
    CHECK_EQ(fpga_xrt_run_set_u64(x, r, 4, 2), 0);
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), ACCEL_ERR_DEVICE);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(x, c.d, &st) == 0);
    CHECK_EQ(st.runs_failed, 3);
    CHECK_EQ(st.runs_completed, 1);
    fpga_xrt_run_close(x, r);
    card_close(&c);
    fpga_xrt_free(x);
}

/* A late run (a slow card): nothing executes it until a wait with a limit gives up on it; that
 * wait says TIMEOUT and the run has landed when it returns, so a test knows both. */
TEST(emu_fault_late_times_out_and_lands)
{
    setenv("TANDEM_EMU_FAULT", "card=0,run=1,kind=late", 1);
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c;
    REQUIRE(card_open(&c, x, 0, 8192, 0, 1) == 0);
    xrtRunHandle r = start_gather(&c);
    REQUIRE(r);
    CHECK(fpga_xrt_run_state(x, r) == ERT_CMD_STATE_QUEUED ||
          fpga_xrt_run_state(x, r) == ERT_CMD_STATE_RUNNING);
    enum ert_cmd_state s;
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, &s), ACCEL_ERR_TIMEOUT);
    CHECK_EQ(s, ERT_CMD_STATE_TIMEOUT);
    CHECK_EQ(fpga_xrt_run_state(x, r), ERT_CMD_STATE_COMPLETED);
    CHECK(dst_matches(&c, 0));
    /* the next run is on time */
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    fpga_xrt_run_close(x, r);
    card_close(&c);
    fpga_xrt_free(x);
    unsetenv("TANDEM_EMU_FAULT");
}

TEST(emu_fault_spec_errors_refuse_the_card)
{
    setenv("TANDEM_EMU_FAULT", "card=0,kind=hang", 1); /* no run= */
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    xrtDeviceHandle d;
    CHECK_EQ(fpga_xrt_device_open(x, 0, &d), ACCEL_ERR_INVALID);
    CHECK_MSG(strstr(fpga_xrt_error(), "TANDEM_EMU_FAULT"), "message: %s", fpga_xrt_error());
    setenv("TANDEM_EMU_FAULT", "card=0,run=1,kind=melt", 1);
    CHECK_EQ(fpga_xrt_device_open(x, 0, &d), ACCEL_ERR_INVALID);
    setenv("TANDEM_EMU_FAULT", "card=0,run=1,kind=bitflip,bit=8", 1);
    CHECK_EQ(fpga_xrt_device_open(x, 0, &d), ACCEL_ERR_INVALID);
    unsetenv("TANDEM_EMU_FAULT");
    REQUIRE(fpga_xrt_device_open(x, 0, &d) == 0);
    fpga_xrt_device_close(x, d);
    fpga_xrt_free(x);
}

TEST(emu_close_everything_with_runs_queued)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c;
    REQUIRE(card_open(&c, x, 0, 4 * MiB, 6, 7) == 0);
    CHECK_EQ(fpga_xrt_emu_set_pace(x, c.d, 1), 0);
    xrtRunHandle r[8];
    for (int i = 0; i < 8; i++) REQUIRE((r[i] = start_gather(&c)) != NULL);
    /* Close in an awkward order: runs first (queued ones live on in the worker), then the
     * BOs they use, then the device; the card goes away when the last handle does. */
    for (int i = 0; i < 8; i++) CHECK_EQ(fpga_xrt_run_close(x, r[i]), 0);
    card_close(&c);
    /* A new card at that index starts empty. */
    xrtDeviceHandle d;
    REQUIRE(fpga_xrt_device_open(x, 0, &d) == 0);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(x, d, &st) == 0);
    CHECK_EQ(st.hbm_used, 0);
    CHECK_EQ(st.runs_started, 0);
    fpga_xrt_device_close(x, d);
    fpga_xrt_free(x);
}
