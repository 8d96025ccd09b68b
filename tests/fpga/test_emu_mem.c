/* The emulated card's memory rules: host and device copies kept apart, bank sizes, bank
 * connectivity, several cards, and the XRT loader's own errors. */
#include "tests/fpga/emu_util.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>

#define MiB (1ULL << 20)

/* An open card with kv_gather and the memory group of its ports. */
typedef struct card {
    fpga_xrt *x;
    xrtDeviceHandle d;
    xrtKernelHandle k;
    uint32_t group; /* kv_gather's ports are connected to HBM[0:31] in the built-in xclbin */
} card;

static int card_open(card *c, unsigned index)
{
    memset(c, 0, sizeof *c);
    c->x = t_emu_load();
    if (!c->x) return -1;
    int rc = fpga_xrt_device_open(c->x, index, &c->d);
    if (!rc) rc = t_emu_kernel(c->x, c->d, "kv_gather", &c->k);
    if (!rc) rc = fpga_xrt_kernel_group(c->x, c->k, 0, &c->group);
    if (rc) t_fail(__FILE__, __LINE__, "card %u: %s", index, fpga_xrt_error());
    return rc;
}

static void card_close(card *c)
{
    if (c->k) CHECK_EQ(fpga_xrt_kernel_close(c->x, c->k), 0);
    if (c->d) CHECK_EQ(fpga_xrt_device_close(c->x, c->d), 0);
    fpga_xrt_free(c->x);
}

TEST(emu_host_write_invisible_until_synced)
{
    card c;
    REQUIRE(card_open(&c, 0) == 0);
    enum { N = 64 << 10 };
    xrtBufferHandle src, dst;
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, N, 0, c.group, &src) == 0);
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, N, 0, c.group, &dst) == 0);
    uint8_t *pat = malloc(N), *got = malloc(N);
    for (int i = 0; i < N; i++) pat[i] = (uint8_t)(i * 7 + 3);
    CHECK_EQ(fpga_xrt_bo_write(c.x, src, pat, N, 0), 0);
    /* Not synced: the kernel reads the device copy, which never got the data. */
    CHECK_EQ(t_emu_gather(c.x, c.k, src, dst, 0, 0, N, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, dst, XCL_BO_SYNC_BO_FROM_DEVICE, N, 0), 0);
    CHECK_EQ(fpga_xrt_bo_read(c.x, dst, got, N, 0), 0);
    int zeros = 1;
    for (int i = 0; i < N; i++) zeros &= got[i] == 0;
    CHECK_MSG(zeros, "the kernel saw host data that was never synced");
    /* Synced: now it does. */
    CHECK_EQ(fpga_xrt_bo_sync(c.x, src, XCL_BO_SYNC_BO_TO_DEVICE, N, 0), 0);
    CHECK_EQ(t_emu_gather(c.x, c.k, src, dst, 0, 0, N, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, dst, XCL_BO_SYNC_BO_FROM_DEVICE, N, 0), 0);
    CHECK_EQ(fpga_xrt_bo_read(c.x, dst, got, N, 0), 0);
    CHECK(memcmp(got, pat, N) == 0);
    /* A partial sync moves exactly that range, from and to the same offset. */
    uint8_t *pat2 = malloc(N);
    unsigned st = 12345; /* not periodic: an offset mistake cannot go unseen */
    for (int i = 0; i < N; i++) pat2[i] = (uint8_t)((st = st * 1103515245u + 12345u) >> 16);
    CHECK_EQ(fpga_xrt_bo_write(c.x, src, pat2, N, 0), 0);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, src, XCL_BO_SYNC_BO_TO_DEVICE, 4096, 8192), 0);
    CHECK_EQ(t_emu_gather(c.x, c.k, src, dst, 0, 0, N, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, dst, XCL_BO_SYNC_BO_FROM_DEVICE, N, 0), 0);
    CHECK_EQ(fpga_xrt_bo_read(c.x, dst, got, N, 0), 0);
    CHECK(memcmp(got, pat, 8192) == 0);
    CHECK(memcmp(got + 8192, pat2 + 8192, 4096) == 0);
    CHECK(memcmp(got + 12288, pat + 12288, N - 12288) == 0);
    free(pat2);
    free(pat);
    free(got);
    CHECK_EQ(fpga_xrt_bo_free(c.x, src), 0);
    CHECK_EQ(fpga_xrt_bo_free(c.x, dst), 0);
    card_close(&c);
}

TEST(emu_kernel_output_invisible_until_synced)
{
    card c;
    REQUIRE(card_open(&c, 0) == 0);
    enum { N = 16 << 10 };
    xrtBufferHandle src, dst;
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, N, 0, c.group, &src) == 0);
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, N, 0, c.group, &dst) == 0);
    uint8_t pat[N], got[N];
    for (int i = 0; i < N; i++) pat[i] = (uint8_t)(255 - i % 251);
    CHECK_EQ(fpga_xrt_bo_write(c.x, src, pat, N, 0), 0);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, src, XCL_BO_SYNC_BO_TO_DEVICE, N, 0), 0);
    /* The host copy of dst holds 0xEE (never synced to the device). */
    void *map;
    REQUIRE(fpga_xrt_bo_map(c.x, dst, &map) == 0);
    memset(map, 0xEE, N);
    CHECK_EQ(t_emu_gather(c.x, c.k, src, dst, 0, 0, N, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_bo_read(c.x, dst, got, N, 0), 0);
    int untouched = 1;
    for (int i = 0; i < N; i++) untouched &= got[i] == 0xEE;
    CHECK_MSG(untouched, "kernel output reached the host copy without a sync");
    /* Only the synced half comes back. */
    CHECK_EQ(fpga_xrt_bo_sync(c.x, dst, XCL_BO_SYNC_BO_FROM_DEVICE, N / 2, 0), 0);
    CHECK_EQ(fpga_xrt_bo_read(c.x, dst, got, N, 0), 0);
    CHECK(memcmp(got, pat, N / 2) == 0);
    CHECK(got[N / 2] == 0xEE && got[N - 1] == 0xEE);
    CHECK(memcmp(map, got, N) == 0); /* map and read see the same host copy */
    /* Bounds of host-side calls. */
    CHECK_EQ(fpga_xrt_bo_read(c.x, dst, got, N, 1), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, dst, XCL_BO_SYNC_BO_FROM_DEVICE, 1, N), ACCEL_ERR_INVALID);
    fpga_xrt_bo_free(c.x, src);
    fpga_xrt_bo_free(c.x, dst);
    card_close(&c);
}

TEST(emu_bo_larger_than_bank_refused)
{
    card c;
    REQUIRE(card_open(&c, 0) == 0);
    xrtBufferHandle b;
    int rc = fpga_xrt_bo_alloc(c.x, c.d, FPGA_U280_HBM_BANK_BYTES + 1, 0, 5, &b);
    CHECK_EQ(rc, ACCEL_ERR_INVALID);
    CHECK_MSG(strstr(fpga_xrt_error(), "256 MiB bank"), "message: %s", fpga_xrt_error());
    CHECK(b == NULL);
    /* A whole bank is fine (and costs no host memory until touched). */
    xrtBufferHandle whole;
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, FPGA_U280_HBM_BANK_BYTES, 0, 5, &whole) == 0);
    uint64_t addr;
    CHECK_EQ(fpga_xrt_bo_address(c.x, whole, &addr), 0);
    CHECK_EQ(addr, 5 * FPGA_U280_HBM_BANK_BYTES);
    /* The range group HBM[0:31] takes a BO spanning channels. */
    xrtBufferHandle big;
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, 512 * MiB, 0, c.group, &big) == 0);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(c.x, c.d, &st) == 0);
    CHECK_EQ(st.bank_used[5], FPGA_U280_HBM_BANK_BYTES);
    CHECK_EQ(st.hbm_used, FPGA_U280_HBM_BANK_BYTES + 512 * MiB);
    CHECK_EQ(st.bank_used[0] + st.bank_used[1], 512 * MiB);
    /* Zero bytes and unknown groups are refused; so are flags the emulator does not model. */
    CHECK_EQ(fpga_xrt_bo_alloc(c.x, c.d, 0, 0, 5, &b), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_bo_alloc(c.x, c.d, 4096, 0, 63, &b), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_bo_alloc(c.x, c.d, 4096, XCL_BO_FLAGS_P2P, 5, &b), ACCEL_ERR_INVALID);
    fpga_xrt_bo_free(c.x, big);
    /* Handles close in any order: the device first, its last BO after. */
    fpga_xrt_kernel_close(c.x, c.k);
    fpga_xrt_device_close(c.x, c.d);
    CHECK_EQ(fpga_xrt_bo_size(c.x, whole, &(size_t){0}), 0);
    CHECK_EQ(fpga_xrt_bo_free(c.x, whole), 0);
    fpga_xrt_free(c.x);
}

TEST(emu_bank_exhaustion_fails_and_recovers)
{
    card c;
    REQUIRE(card_open(&c, 0) == 0);
    xrtBufferHandle b[4], extra;
    for (int i = 0; i < 4; i++) REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, 64 * MiB, 0, 7, &b[i]) == 0);
    CHECK_EQ(fpga_xrt_bo_alloc(c.x, c.d, 4096, 0, 7, &extra), ACCEL_ERR_NOMEM);
    /* Other banks are unaffected. */
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, 4096, 0, 8, &extra) == 0);
    fpga_xrt_bo_free(c.x, extra);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(c.x, c.d, &st) == 0);
    CHECK_EQ(st.bank_used[7], 256 * MiB);
    CHECK_EQ(st.bank_used[8], 0);
    /* Freeing one makes room for exactly that much. */
    CHECK_EQ(fpga_xrt_bo_free(c.x, b[1]), 0);
    CHECK_EQ(fpga_xrt_bo_alloc(c.x, c.d, 64 * MiB + 4096, 0, 7, &extra), ACCEL_ERR_NOMEM);
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, 64 * MiB, 0, 7, &b[1]) == 0);
    uint64_t a0, a1;
    fpga_xrt_bo_address(c.x, b[0], &a0);
    fpga_xrt_bo_address(c.x, b[1], &a1);
    CHECK_EQ(a1, a0 + 64 * MiB); /* first fit: back in the hole */
    for (int i = 0; i < 4; i++) fpga_xrt_bo_free(c.x, b[i]);
    REQUIRE(fpga_xrt_emu_card_stats(c.x, c.d, &st) == 0);
    CHECK_EQ(st.hbm_used, 0);
    card_close(&c);
}

static const char *narrow_xclbin =
    "tandem-emu-xclbin 1\n"
    "# kv_gather with narrow connectivity, for the wrong-bank test\n"
    "uuid 00112233-4455-6677-8899-aabbccddeeff\n"
    "kernel kv_gather\n"
    "arg src global HBM[0:3]\n"
    "arg dst global HBM[31]\n"
    "arg src_off u64\n"
    "arg dst_off u64\n"
    "arg n u64\n";

TEST(emu_wrong_bank_refused)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    xrtDeviceHandle d;
    REQUIRE(fpga_xrt_device_open(x, 0, &d) == 0);
    xuid_t builtin;
    REQUIRE(fpga_xrt_xclbin_uuid(x, d, builtin) == 0);
    const char *path = t_emu_xclbin_file("narrow.xclbin", narrow_xclbin);
    REQUIRE(path);
    REQUIRE(fpga_xrt_load_xclbin_file(x, d, path) == 0);
    xrtKernelHandle k;
    /* The old UUID is no longer loaded. */
    CHECK_EQ(fpga_xrt_kernel_open(x, d, builtin, "kv_gather", 0, &k), ACCEL_ERR_INVALID);
    REQUIRE(t_emu_kernel(x, d, "kv_gather", &k) == 0);
    uint32_t gsrc, gdst;
    REQUIRE(fpga_xrt_kernel_group(x, k, 0, &gsrc) == 0);
    REQUIRE(fpga_xrt_kernel_group(x, k, 1, &gdst) == 0);
    CHECK(gsrc >= 32); /* a range group */
    CHECK_EQ(gdst, 31);
    CHECK_EQ(fpga_xrt_kernel_group(x, k, 2, &gdst), ACCEL_ERR_INVALID); /* a scalar */
    CHECK_EQ(fpga_xrt_kernel_group(x, k, 9, &gdst), ACCEL_ERR_INVALID);

    xrtBufferHandle in_ok, in_bad, out_ok, out_bad;
    REQUIRE(fpga_xrt_bo_alloc(x, d, 8192, 0, 2, &in_ok) == 0);
    REQUIRE(fpga_xrt_bo_alloc(x, d, 8192, 0, 4, &in_bad) == 0);
    REQUIRE(fpga_xrt_bo_alloc(x, d, 8192, 0, 31, &out_ok) == 0);
    REQUIRE(fpga_xrt_bo_alloc(x, d, 8192, 0, 30, &out_bad) == 0);
    xrtRunHandle r;
    REQUIRE(fpga_xrt_run_open(x, k, &r) == 0);
    CHECK_EQ(fpga_xrt_run_set_bo(x, r, 1, out_bad), ACCEL_ERR_INVALID);
    CHECK_MSG(strstr(fpga_xrt_error(), "wrong bank"), "message: %s", fpga_xrt_error());
    CHECK_EQ(fpga_xrt_run_set_bo(x, r, 0, in_bad), ACCEL_ERR_INVALID);
    /* A refused argument stays unset: the run cannot start. */
    CHECK_EQ(fpga_xrt_run_set_u64(x, r, 2, 0), 0);
    CHECK_EQ(fpga_xrt_run_set_u64(x, r, 3, 0), 0);
    CHECK_EQ(fpga_xrt_run_set_u64(x, r, 4, 8192), 0);
    CHECK_EQ(fpga_xrt_run_start(x, r), ACCEL_ERR_INVALID);
    /* A scalar where a BO belongs, and a foreign handle, are refused too. */
    CHECK_EQ(fpga_xrt_run_set_bo(x, r, 0, (xrtBufferHandle)k), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_run_set_bo(x, r, 0, in_ok), 0);
    CHECK_EQ(fpga_xrt_run_set_bo(x, r, 1, out_ok), 0);
    CHECK_EQ(fpga_xrt_run_start(x, r), 0);
    CHECK_EQ(fpga_xrt_run_wait(x, r, 5000, NULL), 0);
    CHECK_EQ(fpga_xrt_run_close(x, r), 0);
    /* While a kernel is open the xclbin cannot be replaced. */
    CHECK(fpga_xrt_load_xclbin_file(x, d, path) != 0);
    fpga_xrt_bo_free(x, in_ok);
    fpga_xrt_bo_free(x, in_bad);
    fpga_xrt_bo_free(x, out_ok);
    fpga_xrt_bo_free(x, out_bad);
    fpga_xrt_kernel_close(x, k);
    fpga_xrt_device_close(x, d);
    fpga_xrt_free(x);
}

TEST(emu_xclbin_descriptions_validated)
{
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    xrtDeviceHandle d;
    REQUIRE(fpga_xrt_device_open(x, 0, &d) == 0);
    static const char *bad[] = {
        "", /* empty */
        "tandem-emu-xclbin 2\nuuid 00112233-4455-6677-8899-aabbccddeeff\n", /* version */
        "tandem-emu-xclbin 1\nkernel kv_gather\n", /* no uuid */
        "tandem-emu-xclbin 1\nuuid 00112233-4455-6677-8899-aabbccddeeff\nkernel no_such\n",
        "tandem-emu-xclbin 1\nuuid 00112233-4455-6677-8899-aabbccddeeff\nkernel kv_gather\n"
        "arg src global HBM[0:32]\n", /* bank 32 does not exist */
        "tandem-emu-xclbin 1\nuuid 00112233-4455-6677-8899-aabbccddeeff\nkernel kv_gather\n"
        "arg src global HBM[0]\narg dst global HBM[1]\narg a u32\narg b u64\narg n u64\n",
        "tandem-emu-xclbin 1\nuuid 00112233-4455-6677-8899-aabbccddeeff\nkernel kv_gather\n"
        "arg src global HBM[0]\narg dst global HBM[1]\narg a u64\narg b u64\n", /* 4 of 5 */
        "tandem-emu-xclbin 1\nuuid 0011223-4455-6677-8899-aabbccddeeff\n", /* short uuid */
        "xclbin2\n", /* the magic of a real (binary) xclbin */
    };
    char name[32];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(name, sizeof name, "bad%zu.xclbin", i);
        const char *p = t_emu_xclbin_file(name, bad[i]);
        int rc = fpga_xrt_load_xclbin_file(x, d, p);
        CHECK_MSG(rc == ACCEL_ERR_INVALID, "description %zu: status %d (%s)", i, rc,
                  fpga_xrt_error());
    }
    CHECK_EQ(fpga_xrt_load_xclbin_file(x, d, "/nonexistent.xclbin"), ACCEL_ERR_INVALID);
    /* The built-in one is still loaded and works. */
    xrtKernelHandle k, none;
    CHECK_EQ(t_emu_kernel(x, d, "kv_gather", &k), 0);
    CHECK_EQ(t_emu_kernel(x, d, "no_such_kernel", &none), ACCEL_ERR_INVALID);
    CHECK(none == NULL);
    fpga_xrt_kernel_close(x, k);
    fpga_xrt_device_close(x, d);
    fpga_xrt_free(x);
}

TEST(emu_several_cards_in_one_process)
{
    setenv("TANDEM_EMU_CARDS", "3", 1);
    fpga_xrt *x = t_emu_load();
    REQUIRE(x);
    card c[3];
    xrtBufferHandle src[3], dst[3];
    enum { N = 8192 };
    for (unsigned i = 0; i < 3; i++) {
        c[i].x = x;
        REQUIRE(fpga_xrt_device_open(x, i, &c[i].d) == 0);
        REQUIRE(t_emu_kernel(x, c[i].d, "kv_gather", &c[i].k) == 0);
        REQUIRE(fpga_xrt_kernel_group(x, c[i].k, 0, &c[i].group) == 0);
        REQUIRE(fpga_xrt_bo_alloc(x, c[i].d, N, 0, 0, &src[i]) == 0);
        REQUIRE(fpga_xrt_bo_alloc(x, c[i].d, N, 0, 1, &dst[i]) == 0);
        uint8_t buf[N];
        memset(buf, 0x10 + (int)i, N);
        CHECK_EQ(fpga_xrt_bo_write(x, src[i], buf, N, 0), 0);
        CHECK_EQ(fpga_xrt_bo_sync(x, src[i], XCL_BO_SYNC_BO_TO_DEVICE, N, 0), 0);
    }
    xrtDeviceHandle none;
    CHECK_EQ(fpga_xrt_device_open(x, 3, &none), ACCEL_ERR_DEVICE);
    /* Same device addresses on every card, separate memories. */
    uint64_t a0, a2;
    fpga_xrt_bo_address(x, src[0], &a0);
    fpga_xrt_bo_address(x, src[2], &a2);
    CHECK_EQ(a0, a2);
    for (unsigned i = 0; i < 3; i++) {
        CHECK_EQ(t_emu_gather(x, c[i].k, src[i], dst[i], 0, 0, N, 5000, NULL), 0);
        uint8_t got[N];
        CHECK_EQ(fpga_xrt_bo_sync(x, dst[i], XCL_BO_SYNC_BO_FROM_DEVICE, N, 0), 0);
        CHECK_EQ(fpga_xrt_bo_read(x, dst[i], got, N, 0), 0);
        CHECK_EQ(got[0], 0x10 + i);
        CHECK_EQ(got[N - 1], 0x10 + i);
    }
    /* A BO of one card is not an argument for another card's kernel. */
    xrtRunHandle r;
    REQUIRE(fpga_xrt_run_open(x, c[0].k, &r) == 0);
    CHECK_EQ(fpga_xrt_run_set_bo(x, r, 0, src[1]), ACCEL_ERR_INVALID);
    fpga_xrt_run_close(x, r);
    /* The fake BDF of card i is 0000:(i+1):00.1, and it is the same card. */
    xrtDeviceHandle by_bdf;
    REQUIRE(fpga_xrt_device_open_bdf(x, "0000:02:00.1", &by_bdf) == 0);
    fpga_emu_card_stats st;
    REQUIRE(fpga_xrt_emu_card_stats(x, by_bdf, &st) == 0);
    CHECK_EQ(st.index, 1);
    CHECK_EQ(st.runs_completed, 1);
    CHECK_EQ(fpga_xrt_device_open_bdf(x, "0000:65:00.1", &none), ACCEL_ERR_DEVICE);
    fpga_xrt_device_close(x, by_bdf);
    for (unsigned i = 0; i < 3; i++) {
        fpga_xrt_bo_free(x, src[i]);
        fpga_xrt_bo_free(x, dst[i]);
        fpga_xrt_kernel_close(x, c[i].k);
        fpga_xrt_device_close(x, c[i].d);
    }
    fpga_xrt_free(x);
}

TEST(emu_stale_handles_are_errors)
{
    card c;
    REQUIRE(card_open(&c, 0) == 0);
    xrtBufferHandle b;
    REQUIRE(fpga_xrt_bo_alloc(c.x, c.d, 4096, 0, 0, &b) == 0);
    CHECK_EQ(fpga_xrt_bo_free(c.x, b), 0);
    CHECK_EQ(fpga_xrt_bo_free(c.x, b), ACCEL_ERR_INVALID);
    uint8_t buf[16];
    CHECK_EQ(fpga_xrt_bo_write(c.x, b, buf, 16, 0), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, (xrtBufferHandle)c.d, XCL_BO_SYNC_BO_TO_DEVICE, 16, 0),
             ACCEL_ERR_INVALID);
    xrtRunHandle r;
    CHECK_EQ(fpga_xrt_run_open(c.x, (xrtKernelHandle)c.d, &r), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_run_wait(c.x, (xrtRunHandle)buf, 10, NULL), ACCEL_ERR_INVALID);
    /* DEV_ONLY BOs have no host copy. */
    CHECK_EQ(fpga_xrt_bo_alloc(c.x, c.d, 4096, XCL_BO_FLAGS_DEV_ONLY, 0, &b), 0);
    void *map;
    CHECK_EQ(fpga_xrt_bo_map(c.x, b, &map), ACCEL_ERR_INVALID);
    CHECK_EQ(fpga_xrt_bo_sync(c.x, b, XCL_BO_SYNC_BO_TO_DEVICE, 16, 0), ACCEL_ERR_INVALID);
    fpga_xrt_bo_free(c.x, b);
    /* A user pointer BO must be page aligned; its host copy is the user's memory. */
    uint8_t *mem = aligned_alloc(4096, 8192);
    CHECK_EQ(fpga_xrt_bo_alloc_userptr(c.x, c.d, mem + 1, 4096, 0, 0, &b), ACCEL_ERR_INVALID);
    REQUIRE(fpga_xrt_bo_alloc_userptr(c.x, c.d, mem, 8192, 0, 0, &b) == 0);
    mem[5] = 42;
    CHECK_EQ(fpga_xrt_bo_read(c.x, b, buf, 16, 0), 0);
    CHECK_EQ(buf[5], 42);
    fpga_xrt_bo_free(c.x, b);
    free(mem);
    card_close(&c);
}

TEST(xrt_load_reports_missing_library)
{
    char err[512];
    fpga_xrt *x = fpga_xrt_new("/nonexistent/libxrt_coreutil.so.2", err, sizeof err);
    CHECK(x == NULL);
    CHECK_MSG(strstr(err, "cannot load /nonexistent/libxrt_coreutil.so.2"), "err: %s", err);
    /* A library that is not XRT: named for the first missing function. */
    x = fpga_xrt_new("libm.so.6", err, sizeof err);
    CHECK(x == NULL);
    CHECK_MSG(strstr(err, "lacks xrtDeviceOpen"), "err: %s", err);
    /* The default name: absent here unless XRT is installed, and then it is not the emulator. */
    x = fpga_xrt_new(NULL, err, sizeof err);
    if (x) {
        CHECK(!fpga_xrt_is_emulator(x));
        fpga_emu_card_stats st;
        CHECK_EQ(fpga_xrt_emu_card_stats(x, NULL, &st), ACCEL_ERR_UNSUPPORTED);
        fpga_xrt_free(x);
    } else {
        CHECK_MSG(strstr(err, "libxrt_coreutil.so.2"), "err: %s", err);
    }
}
