/* fpga/emu/emu_mem.c — HBM placement and buffer objects of the emulated card.
 *
 * Placement: a sorted array of allocated extents over the card's 8 GiB address space; a BO
 * goes first-fit into the address range of its memory group (one pseudo-channel, or a range of
 * them), 4 KiB aligned. Per-channel usage is kept in the card's stats. */
#include "fpga/emu/emu.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t round_up(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

/* Adds (sign = +1) or removes (-1) an extent's bytes to the per-channel usage. */
static void account(emu_card *c, uint64_t addr, uint64_t size, int sign)
{
    while (size) {
        int ch = fpga_u280_chan_of(addr);
        uint64_t end = fpga_u280_chan_lo(ch + 1);
        uint64_t n = end - addr < size ? end - addr : size;
        uint64_t *used = ch < FPGA_U280_HBM_BANKS ? &c->st.bank_used[ch]
                                                  : &c->st.ext_used[ch - FPGA_U280_HBM_BANKS];
        if (sign > 0) *used += n;
        else *used -= n;
        addr += n;
        size -= n;
    }
}

int emu_mem_place(emu_card *c, int group, uint64_t size, uint64_t *addr)
{
    const emu_group *g = &c->xclbin.groups[group];
    uint64_t lo = fpga_u280_chan_lo(g->lo);
    uint64_t hi = fpga_u280_chan_lo(g->hi + 1);
    uint64_t need = round_up(size, EMU_ALIGN);
    if (need > hi - lo) {
        if (g->lo >= FPGA_U280_HBM_BANKS)
            return emu_fail(E2BIG, "cannot allocate %llu bytes on a %llu GiB bank (%s)",
                            (unsigned long long)size,
                            (unsigned long long)(FPGA_U280_EXT_BANK_BYTES >> 30),
                            g->lo - FPGA_U280_HBM_BANKS == FPGA_U280_EXT_HOST ? "HOST[0]"
                            : g->lo == FPGA_U280_HBM_BANKS ? "DDR[0]" : "DDR[1]");
        if (g->lo == g->hi)
            return emu_fail(E2BIG, "cannot allocate %llu bytes on a %llu MiB bank (HBM[%d])",
                            (unsigned long long)size,
                            (unsigned long long)(FPGA_U280_HBM_BANK_BYTES >> 20), g->lo);
        return emu_fail(E2BIG, "cannot allocate %llu bytes in group HBM[%d:%d] of %llu MiB",
                        (unsigned long long)size, g->lo, g->hi,
                        (unsigned long long)((hi - lo) >> 20));
    }
    /* First gap in [lo, hi) that holds `need`. */
    uint64_t at = lo;
    int pos = 0;
    for (; pos < c->n_ext; pos++) {
        const emu_extent *e = &c->ext[pos];
        if (e->addr + e->size <= at) continue;
        if (e->addr >= hi) break;
        if (e->addr >= at + need) break;
        at = e->addr + e->size;
    }
    if (at + need > hi) {
        uint64_t used = 0;
        for (int ch = g->lo; ch <= g->hi; ch++)
            used += ch < FPGA_U280_HBM_BANKS ? c->st.bank_used[ch]
                                             : c->st.ext_used[ch - FPGA_U280_HBM_BANKS];
        if (g->lo >= FPGA_U280_HBM_BANKS)
            return emu_fail(ENOMEM, "bank %d past HBM has no free %llu bytes (%llu of %llu MiB used)",
                            g->lo - FPGA_U280_HBM_BANKS, (unsigned long long)need,
                            (unsigned long long)(used >> 20), (unsigned long long)((hi - lo) >> 20));
        return emu_fail(ENOMEM, "HBM[%d:%d] has no free %llu bytes (%llu of %llu MiB used)",
                        g->lo, g->hi, (unsigned long long)need, (unsigned long long)(used >> 20),
                        (unsigned long long)((hi - lo) >> 20));
    }
    if (c->n_ext == c->cap_ext) {
        int ncap = c->cap_ext ? c->cap_ext * 2 : 64;
        emu_extent *n = realloc(c->ext, (size_t)ncap * sizeof *n);
        if (!n) return emu_fail(ENOMEM, "out of host memory");
        c->ext = n;
        c->cap_ext = ncap;
    }
    memmove(&c->ext[pos + 1], &c->ext[pos], (size_t)(c->n_ext - pos) * sizeof *c->ext);
    c->ext[pos] = (emu_extent){at, need};
    c->n_ext++;
    account(c, at, need, +1);
    if (at < FPGA_U280_HBM_BYTES) c->st.hbm_used += need;
    *addr = at;
    return 0;
}

void emu_mem_remove(emu_card *c, uint64_t addr, uint64_t size)
{
    for (int i = 0; i < c->n_ext; i++) {
        if (c->ext[i].addr != addr) continue;
        uint64_t need = c->ext[i].size;
        memmove(&c->ext[i], &c->ext[i + 1], (size_t)(c->n_ext - i - 1) * sizeof *c->ext);
        c->n_ext--;
        account(c, addr, need, -1);
        if (addr < FPGA_U280_HBM_BYTES) c->st.hbm_used -= need;
        /* Give the pages back; a later BO here reads zeros, not this one's data. */
        madvise(c->hbm + addr, need, MADV_DONTNEED);
        (void)size;
        return;
    }
}

void emu_bo_unref_locked(emu_bo *b)
{
    if (--b->refs > 0) return;
    emu_card *c = b->card;
    emu_mem_remove(c, b->addr, b->size);
    if (b->host_owned) {
        munmap(b->host, round_up(b->size, EMU_ALIGN));
        c->st.host_bytes -= round_up(b->size, EMU_ALIGN);
    }
    b->magic = 0;
    free(b);
}

/* ---------------------------------------------------------------- allocation */

static xrtBufferHandle bo_alloc(xrtDeviceHandle dh, void *userptr, size_t size,
                                xrtBufferFlags flags, xrtMemoryGroup grp)
{
    emu_dev *d = emu_handle_get(dh, EMU_DEV);
    if (!d) return emu_fail_null(EINVAL, "not a device handle");
    emu_card *c = d->card;
    if (c->gone) return emu_fail_null(ENODEV, "card %d has disappeared from the bus", c->index);
    if (size == 0) return emu_fail_null(EINVAL, "a BO of 0 bytes");
    /* The bank is `grp`: XRT's xrtBOAlloc overwrites the flags' bank bits (xcl_bo_flags.bank,
     * bits 0..15) with it, so only the BO flags in bits 24..31 matter here. */
    uint32_t bo_flags = (uint32_t)flags & 0xff000000u;
    /* HOST_ONLY (a BO in host memory the kernels reach, HOST[0]): its one copy is the bank's */
    const uint32_t known = XCL_BO_FLAGS_CACHEABLE | XCL_BO_FLAGS_DEV_ONLY | XCL_BO_FLAGS_HOST_ONLY;
    if (bo_flags & ~known)
        return emu_fail_null(EINVAL, "BO flags 0x%08x are not emulated (only CACHEABLE, DEV_ONLY)",
                             bo_flags);
    if (userptr && (bo_flags & XCL_BO_FLAGS_DEV_ONLY))
        return emu_fail_null(EINVAL, "a user pointer BO cannot be DEV_ONLY");
    if (userptr && ((uintptr_t)userptr % EMU_ALIGN))
        return emu_fail_null(EINVAL, "user pointer %p is not 4 KiB aligned", userptr);

    emu_bo *b = calloc(1, sizeof *b);
    if (!b) return emu_fail_null(ENOMEM, "out of host memory");
    b->size = size;
    b->flags = bo_flags;
    b->group = (int)grp;
    if (userptr) {
        b->host = userptr;
    } else if (!(bo_flags & (XCL_BO_FLAGS_DEV_ONLY | XCL_BO_FLAGS_HOST_ONLY))) {
        /* Lazy: pages cost host memory once written. */
        void *h = mmap(NULL, round_up(size, EMU_ALIGN), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (h == MAP_FAILED) {
            free(b);
            return emu_fail_null(ENOMEM, "cannot map %zu bytes of host memory", size);
        }
        b->host = h;
        b->host_owned = 1;
    }

    pthread_mutex_lock(&c->mu);
    int rc;
    if ((int)grp < 0 || (int)grp >= c->xclbin.n_groups)
        rc = emu_fail(EINVAL, "memory group %u is not in the loaded xclbin (%d groups)", grp,
                      c->xclbin.n_groups);
    else
        rc = emu_mem_place(c, (int)grp, size, &b->addr);
    if (rc == 0) {
        b->magic = EMU_BO;
        b->card = c;
        b->refs = 1;
        c->users++;
        if (b->host_owned) c->st.host_bytes += round_up(size, EMU_ALIGN);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) {
        if (b->host_owned) munmap(b->host, round_up(size, EMU_ALIGN));
        free(b);
        return NULL;
    }
    if (emu_handle_add(b) != 0) {
        int e = errno;
        pthread_mutex_lock(&c->mu);
        emu_bo_unref_locked(b);
        pthread_mutex_unlock(&c->mu);
        emu_card_release(c);
        errno = e;
        return NULL;
    }
    return b;
}

xrtBufferHandle xrtBOAlloc(xrtDeviceHandle dhdl, size_t size, xrtBufferFlags flags,
                           xrtMemoryGroup grp)
{
    return bo_alloc(dhdl, NULL, size, flags, grp);
}

xrtBufferHandle xrtBOAllocUserPtr(xrtDeviceHandle dhdl, void *userptr, size_t size,
                                  xrtBufferFlags flags, xrtMemoryGroup grp)
{
    if (!userptr) return emu_fail_null(EINVAL, "no user pointer");
    return bo_alloc(dhdl, userptr, size, flags, grp);
}

int xrtBOFree(xrtBufferHandle h)
{
    emu_bo *b = emu_handle_get(h, EMU_BO);
    if (!b) return emu_fail(EINVAL, "not a BO handle");
    emu_handle_del(b);
    emu_card *c = b->card;
    pthread_mutex_lock(&c->mu);
    emu_bo_unref_locked(b); /* runs that still hold it keep it until they let go */
    pthread_mutex_unlock(&c->mu);
    emu_card_release(c);
    return 0;
}

/* The BO behind a handle, or NULL with errno; gone cards fail. */
static emu_bo *bo_get(xrtBufferHandle h)
{
    emu_bo *b = emu_handle_get(h, EMU_BO);
    if (!b) return emu_fail_null(EINVAL, "not a BO handle");
    if (b->card->gone)
        return emu_fail_null(ENODEV, "card %d has disappeared from the bus", b->card->index);
    return b;
}

size_t xrtBOSize(xrtBufferHandle h)
{
    emu_bo *b = bo_get(h);
    return b ? b->size : 0;
}

uint64_t xrtBOAddress(xrtBufferHandle h)
{
    emu_bo *b = bo_get(h);
    return b ? b->addr : (uint64_t)-1;
}

void *xrtBOMap(xrtBufferHandle h)
{
    emu_bo *b = bo_get(h);
    if (!b) return NULL;
    if (!b->host) return emu_fail_null(EINVAL, "a DEV_ONLY BO has no host copy to map");
    return b->host;
}

static int host_range(emu_bo *b, size_t n, size_t off, const char *what)
{
    if (!b->host) return emu_fail(EINVAL, "%s: a DEV_ONLY BO has no host copy", what);
    if (off > b->size || n > b->size - off)
        return emu_fail(EINVAL, "%s: %zu bytes at %zu outside a BO of %llu bytes", what, n, off,
                        (unsigned long long)b->size);
    return 0;
}

int xrtBOWrite(xrtBufferHandle h, const void *src, size_t size, size_t seek)
{
    emu_bo *b = bo_get(h);
    if (!b || host_range(b, size, seek, "xrtBOWrite") != 0) return -1;
    if (size && !src) return emu_fail(EINVAL, "xrtBOWrite: no source");
    if (size) memcpy(b->host + seek, src, size);
    return 0;
}

int xrtBORead(xrtBufferHandle h, void *dst, size_t size, size_t skip)
{
    emu_bo *b = bo_get(h);
    if (!b || host_range(b, size, skip, "xrtBORead") != 0) return -1;
    if (size && !dst) return emu_fail(EINVAL, "xrtBORead: no destination");
    if (size) memcpy(dst, b->host + skip, size);
    return 0;
}

int xrtBOSync(xrtBufferHandle h, enum xclBOSyncDirection dir, size_t size, size_t offset)
{
    emu_bo *b = bo_get(h);
    if (!b || host_range(b, size, offset, "xrtBOSync") != 0) return -1;
    if (dir != XCL_BO_SYNC_BO_TO_DEVICE && dir != XCL_BO_SYNC_BO_FROM_DEVICE)
        return emu_fail(EINVAL, "xrtBOSync: direction %d is for AIE parts", (int)dir);
    emu_card *c = b->card;
    uint64_t t0 = emu_now_ns();
    uint8_t *dev = c->hbm + b->addr + offset;
    if (dir == XCL_BO_SYNC_BO_TO_DEVICE) memcpy(dev, b->host + offset, size);
    else memcpy(b->host + offset, dev, size);
    uint64_t model = fpga_emu_model_sync_ns(size);
    pthread_mutex_lock(&c->mu);
    if (dir == XCL_BO_SYNC_BO_TO_DEVICE) {
        c->st.h2d_bytes += size;
        c->st.h2d_syncs++;
    } else {
        c->st.d2h_bytes += size;
        c->st.d2h_syncs++;
    }
    c->st.sync_modeled_ns += model;
    if (c->pace) emu_pace_until_locked(c, t0 + model);
    pthread_mutex_unlock(&c->mu);
    return 0;
}
