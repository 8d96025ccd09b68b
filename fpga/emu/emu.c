/* fpga/emu/emu.c — an Alveo U280 emulated on the CPU, behind the XRT C API (build/libxrt_emu.so).
 *
 * Design note
 * -----------
 * What it is for: tandem's FPGA backend talks to cards only through the XRT C functions of
 * fpga/xrt/xrt_api.h, loaded with dlopen. This library exports the same functions, so the backend
 * runs unchanged on machines without a card, and the rules a real card imposes are enforced
 * (more strictly where the hardware would fail silently), so that host bugs show up here.
 *
 * Cards: TANDEM_EMU_CARDS (default 2, at most EMU_MAX_CARDS) cards per process, opened by index
 * (xrtDeviceOpen) or by the fake BDF "0000:%02x:00.1" with bus = index + 1. A card is created at
 * its first open and torn down when its last user handle (device, BO, kernel or run) is closed;
 * a later open gets a fresh card (a reset), except that a card that "disappeared" (fault) stays
 * gone for the life of the process.
 *
 * Memory plan: each card reserves its 8 GiB of HBM as one MAP_NORESERVE anonymous mapping, so
 * pages cost host memory only once touched (a sync or a kernel writes them); a freed BO's pages
 * are handed back with MADV_DONTNEED (and read as zeros when reused). Device address = offset
 * in that mapping; pseudo-channel = address / 256 MiB. BOs are placed first-fit, 4 KiB aligned,
 * in the address range of their memory group: groups 0..31 are the single pseudo-channels
 * HBM[0]..HBM[31] (a BO larger than 256 MiB does not fit one, as on hardware); an xclbin may add
 * range groups such as HBM[0:3], whose BOs may span those channels. Each BO also has a host
 * copy (its own mapping, or the user's pointer for xrtBOAllocUserPtr; none for DEV_ONLY).
 * xrtBOWrite/Read/Map touch only the host copy, kernels only the device copy, xrtBOSync copies
 * between them: what the host did not sync is not seen, in either direction.
 *
 * The xclbin: real xclbins are binary AXLF images; the emulator reads its own short text
 * description (format in emu_xclbin.c) naming the UUID, the kernels, each argument's kind and
 * the banks each global argument is connected to. Every card starts with a built-in one (the
 * shell "comes programmed" with tandem's kernels); xrtDeviceLoadXclbinFile replaces it.
 *
 * Threads: one worker thread per card is its single compute unit: xrtRunStart queues the run
 * (FIFO), the worker executes the kernel's C function (fpga/kernels/) on a snapshot of the
 * arguments and moves the run NEW -> QUEUED -> RUNNING -> COMPLETED/ERROR/ABORT, waking waiters
 * on card->done. A per-card mutex guards the card's state, queue, extents, refcounts and stats;
 * a process-wide mutex guards the card table and the handle registry. Data copies (syncs,
 * kernels) run without locks: the host must not sync a range a running kernel writes, as on
 * hardware. Lock order: global -> card.
 *
 * Lifetimes: every object counts references (user handle + runs that use a BO or kernel + the
 * worker while a run is queued), so closing handles in any order, even with runs in flight or a
 * hung compute unit, frees everything when the card's last user handle goes.
 *
 * Timing model (emu_timing.c, constants in fpga/xrt/u280.h): a run costs a fixed overhead plus the
 * larger of its busiest pseudo-channel's time (bytes at 14.375 GB/s x 0.90, plus a fixed cost
 * per memory command) and the compute cycles it reported at 225 MHz; a sync costs a fixed
 * overhead plus bytes at 11 GB/s. Reported per run (fpga_emu_run_stats) and per card; with
 * pacing on, runs and syncs also take that long in real time.
 *
 * Faults (emu_fault.c): TANDEM_EMU_FAULT injects, at the n-th run of a card, a hang (the run
 * never completes and the compute unit stays stuck: waits time out), a disappearing device
 * (that run aborts, every later call on the card fails with ENODEV), a bit flip in a BO's device
 * copy, or a run that ends in ERROR. The process stays healthy; other cards are unaffected.
 *
 * Errors follow XRT: NULL / -1 / ERT_CMD_STATE_ABORT with errno set to a NEGATIVE code, as
 * xrt_core::error carries; fpga_emu_last_error() gives the reason (TANDEM_EMU_VERBOSE=1 also
 * prints it to stderr).
 */
#include "fpga/emu/emu.h"
#include <stdatomic.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static emu_card *g_cards[EMU_MAX_CARDS];
/* A card that disappeared stays gone. Atomic: the worker sets it with card->mu held, and the
 * lock order (global -> card) forbids taking g_mu there. */
static _Atomic int g_gone[EMU_MAX_CARDS];

/* ---------------------------------------------------------------- errors */

static _Thread_local char t_err[512];

const char *fpga_emu_last_error(void)
{
    return t_err;
}

static void record(int err, const char *fmt, va_list ap)
{
    vsnprintf(t_err, sizeof t_err, fmt, ap);
    const char *v = getenv("TANDEM_EMU_VERBOSE");
    if (v && *v == '1') fprintf(stderr, "xrt-emu: %s (%s)\n", t_err, strerror(err));
    errno = -err;
}

int emu_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(err, fmt, ap);
    va_end(ap);
    return -1;
}

void *emu_fail_null(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(err, fmt, ap);
    va_end(ap);
    return NULL;
}

/* ---------------------------------------------------------------- handle registry */

/* Open-addressing set of live handle pointers; tombstones are (void *)1. */
static void **g_set;
static size_t g_set_cap, g_set_used; /* used counts live + tombstones */
#define TOMB ((void *)1)

static size_t slot_of(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL; /* Fibonacci hashing */
    return (size_t)(h >> 20) & (cap - 1);
}

static int set_grow(void)
{
    size_t ncap = g_set_cap ? g_set_cap * 2 : 256;
    void **n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    size_t used = 0;
    for (size_t i = 0; i < g_set_cap; i++) {
        void *p = g_set[i];
        if (!p || p == TOMB) continue;
        size_t s = slot_of(p, ncap);
        while (n[s]) s = (s + 1) & (ncap - 1);
        n[s] = p;
        used++;
    }
    free(g_set);
    g_set = n;
    g_set_cap = ncap;
    g_set_used = used;
    return 0;
}

int emu_handle_add(void *p)
{
    pthread_mutex_lock(&g_mu);
    if ((g_set_used + 1) * 2 > g_set_cap && set_grow() != 0) {
        pthread_mutex_unlock(&g_mu);
        return emu_fail(ENOMEM, "out of host memory for handles");
    }
    size_t s = slot_of(p, g_set_cap);
    while (g_set[s] && g_set[s] != TOMB) s = (s + 1) & (g_set_cap - 1);
    if (!g_set[s]) g_set_used++;
    g_set[s] = p;
    pthread_mutex_unlock(&g_mu);
    return 0;
}

static size_t set_find(const void *p)
{
    if (!g_set_cap) return (size_t)-1;
    size_t s = slot_of(p, g_set_cap);
    while (g_set[s]) {
        if (g_set[s] == p) return s;
        s = (s + 1) & (g_set_cap - 1);
    }
    return (size_t)-1;
}

void *emu_handle_get(void *p, uint32_t kind)
{
    if (!p) return NULL;
    pthread_mutex_lock(&g_mu);
    int ok = set_find(p) != (size_t)-1 && *(uint32_t *)p == kind;
    pthread_mutex_unlock(&g_mu);
    return ok ? p : NULL;
}

void emu_handle_del(void *p)
{
    pthread_mutex_lock(&g_mu);
    size_t s = set_find(p);
    if (s != (size_t)-1) g_set[s] = TOMB;
    pthread_mutex_unlock(&g_mu);
}

/* The table outlives every handle; it goes when the library is unloaded (dlclose, exit). */
__attribute__((destructor)) static void set_free(void)
{
    free(g_set);
    g_set = NULL;
    g_set_cap = g_set_used = 0;
}

/* ---------------------------------------------------------------- cards */

static int env_int(const char *name, int def, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < lo || n > hi) return def;
    return (int)n;
}

static emu_card *card_new(int index)
{
    emu_card *c = calloc(1, sizeof *c);
    if (!c) return emu_fail_null(ENOMEM, "out of host memory");
    c->index = index;
    c->st.index = index;
    c->st.hbm_total = FPGA_U280_HBM_BYTES;
    c->st.ext_total = FPGA_U280_EXT_BANKS * FPGA_U280_EXT_BANK_BYTES;
    c->pace = env_int("TANDEM_EMU_PACE", 0, 0, 1);
    const char *spec = getenv("TANDEM_EMU_FAULT");
    if (spec && *spec) {
        emu_fault all[EMU_MAX_FAULTS];
        char err[160];
        int n = emu_fault_parse(spec, all, EMU_MAX_FAULTS, err, sizeof err);
        if (n < 0) {
            free(c);
            return emu_fail_null(EINVAL, "TANDEM_EMU_FAULT: %s", err);
        }
        for (int i = 0; i < n; i++)
            if (all[i].card == index) c->faults[c->n_faults++] = all[i];
    }
    if (emu_xclbin_parse(emu_xclbin_builtin, &c->xclbin) != 0) {
        free(c);
        return NULL; /* a bug in the built-in text; emu_fail() has the reason */
    }
    c->hbm = mmap(NULL, FPGA_U280_MEM_BYTES, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (c->hbm == MAP_FAILED) {
        free(c);
        return emu_fail_null(ENOMEM, "cannot reserve 56 GiB of address space for HBM, DDR4 and host memory");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->done, &ca);
    pthread_cond_init(&c->work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->mu, NULL);
    if (pthread_create(&c->worker, NULL, emu_worker_main, c) != 0) {
        munmap(c->hbm, FPGA_U280_MEM_BYTES);
        pthread_cond_destroy(&c->done);
        pthread_cond_destroy(&c->work);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return emu_fail_null(EAGAIN, "cannot start the card's worker thread");
    }
    return c;
}

static void card_free(emu_card *c)
{
    munmap(c->hbm, FPGA_U280_MEM_BYTES);
    free(c->ext);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void emu_card_release(emu_card *c)
{
    pthread_mutex_lock(&c->mu);
    int last = --c->users == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last) return;
    /* Re-check under both locks: an xrtDeviceOpen may have picked the card up meanwhile. */
    pthread_mutex_lock(&g_mu);
    pthread_mutex_lock(&c->mu);
    int teardown = c->users == 0 && g_cards[c->index] == c;
    if (teardown) {
        g_cards[c->index] = NULL;
        c->stop = 1;
        pthread_cond_broadcast(&c->work);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&g_mu);
    if (!teardown) return;
    /* The worker aborts what is queued or hung and drops its references; with no user handle
     * left, that frees every run, kernel and BO of the card. */
    pthread_join(c->worker, NULL);
    card_free(c);
}

void emu_card_mark_gone(emu_card *c)
{
    c->gone = 1;
    c->st.gone = 1;
    g_gone[c->index] = 1;
}

static xrtDeviceHandle dev_open(int index)
{
    int n = env_int("TANDEM_EMU_CARDS", 2, 1, EMU_MAX_CARDS);
    if (index < 0 || index >= n)
        return emu_fail_null(ENODEV, "no card %d (TANDEM_EMU_CARDS=%d)", index, n);
    emu_dev *d = calloc(1, sizeof *d);
    if (!d) return emu_fail_null(ENOMEM, "out of host memory");
    pthread_mutex_lock(&g_mu);
    if (g_gone[index]) {
        pthread_mutex_unlock(&g_mu);
        free(d);
        return emu_fail_null(ENODEV, "card %d has disappeared from the bus", index);
    }
    emu_card *c = g_cards[index];
    if (!c) {
        c = card_new(index);
        if (!c) {
            pthread_mutex_unlock(&g_mu);
            free(d);
            return NULL;
        }
        g_cards[index] = c;
    }
    pthread_mutex_lock(&c->mu);
    c->users++;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&g_mu);
    d->magic = EMU_DEV;
    d->card = c;
    if (emu_handle_add(d) != 0) {
        emu_card_release(c);
        free(d);
        return NULL;
    }
    return d;
}

xrtDeviceHandle xrtDeviceOpen(unsigned int index)
{
    if (index >= EMU_MAX_CARDS) return emu_fail_null(ENODEV, "no card %u", index);
    return dev_open((int)index);
}

xrtDeviceHandle xrtDeviceOpenByBDF(const char *bdf)
{
    unsigned dom, bus, slot, fn;
    char tail;
    if (!bdf || sscanf(bdf, "%x:%x:%x.%x%c", &dom, &bus, &slot, &fn, &tail) != 4 || dom != 0 ||
        slot != 0 || fn != 1 || bus < 1 || bus > EMU_MAX_CARDS)
        return emu_fail_null(ENODEV, "no emulated card at BDF '%s' (cards are 0000:NN:00.1, "
                                     "NN = index + 1)", bdf ? bdf : "(null)");
    return dev_open((int)bus - 1);
}

/* The card behind a device handle, or NULL (errno set). Gone cards fail here. */
static emu_card *dev_card(xrtDeviceHandle h, int allow_gone)
{
    emu_dev *d = emu_handle_get(h, EMU_DEV);
    if (!d) return emu_fail_null(EINVAL, "not a device handle");
    if (!allow_gone && d->card->gone)
        return emu_fail_null(ENODEV, "card %d has disappeared from the bus", d->card->index);
    return d->card;
}

int xrtDeviceClose(xrtDeviceHandle h)
{
    emu_dev *d = emu_handle_get(h, EMU_DEV);
    if (!d) return emu_fail(EINVAL, "not a device handle");
    emu_handle_del(d);
    emu_card *c = d->card;
    free(d);
    emu_card_release(c);
    return 0;
}

static int load_text(xrtDeviceHandle h, const char *text)
{
    emu_card *c = dev_card(h, 0);
    if (!c) return -1;
    emu_xclbin *x = malloc(sizeof *x);
    if (!x) return emu_fail(ENOMEM, "out of host memory");
    if (emu_xclbin_parse(text, x) != 0) {
        free(x);
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    int busy = c->kernels_open;
    if (!busy) c->xclbin = *x;
    pthread_mutex_unlock(&c->mu);
    free(x);
    if (busy) return emu_fail(EBUSY, "card %d has %d kernel(s) open", c->index, busy);
    return 0;
}

int xrtDeviceLoadXclbin(xrtDeviceHandle h, const struct axlf *xclbin)
{
    /* A real AXLF image starts with "xclbin2\0"; ours is text, NUL-terminated within the bound. */
    const char *p = (const char *)xclbin;
    if (!p) return emu_fail(EINVAL, "no xclbin");
    if (memcmp(p, "xclbin2", 7) == 0)
        return emu_fail(EINVAL, "a binary AXLF xclbin: the emulator reads tandem-emu-xclbin "
                                "descriptions (see fpga/emu/emu_xclbin.c)");
    if (!memchr(p, 0, EMU_XCLBIN_MAX))
        return emu_fail(E2BIG, "xclbin description longer than %d bytes", EMU_XCLBIN_MAX);
    return load_text(h, p);
}

int xrtDeviceLoadXclbinFile(xrtDeviceHandle h, const char *path)
{
    if (!path) return emu_fail(EINVAL, "no xclbin path");
    FILE *f = fopen(path, "rb");
    if (!f) return emu_fail(errno ? errno : ENOENT, "cannot open %s", path);
    char *buf = malloc(EMU_XCLBIN_MAX + 1);
    if (!buf) {
        fclose(f);
        return emu_fail(ENOMEM, "out of host memory");
    }
    size_t n = fread(buf, 1, EMU_XCLBIN_MAX + 1, f);
    fclose(f);
    int rc;
    if (n >= 8 && memcmp(buf, "xclbin2", 7) == 0)
        rc = emu_fail(EINVAL, "%s is a binary AXLF xclbin: the emulator reads tandem-emu-xclbin "
                              "descriptions", path);
    else if (n > EMU_XCLBIN_MAX)
        rc = emu_fail(E2BIG, "%s is longer than %d bytes", path, EMU_XCLBIN_MAX);
    else if (memchr(buf, 0, n))
        rc = emu_fail(EINVAL, "%s contains a NUL byte", path);
    else {
        buf[n] = 0;
        rc = load_text(h, buf);
    }
    free(buf);
    return rc;
}

int xrtDeviceGetXclbinUUID(xrtDeviceHandle h, xuid_t out)
{
    emu_card *c = dev_card(h, 0);
    if (!c) return -1;
    pthread_mutex_lock(&c->mu);
    memcpy(out, c->xclbin.uuid, sizeof(xuid_t));
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* ---------------------------------------------------------------- extensions */

int fpga_emu_card_stats_get(xrtDeviceHandle h, fpga_emu_card_stats *out)
{
    emu_card *c = dev_card(h, 1);
    if (!c) return -1;
    if (!out) return emu_fail(EINVAL, "no output");
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->hung = c->hung;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int fpga_emu_set_pace(xrtDeviceHandle h, int on)
{
    emu_card *c = dev_card(h, 1);
    if (!c) return -1;
    pthread_mutex_lock(&c->mu);
    c->pace = on != 0;
    pthread_mutex_unlock(&c->mu);
    return 0;
}
