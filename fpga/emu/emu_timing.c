/* fpga/emu/emu_timing.c — the timing model and the accounting calls kernels make.
 *
 * A kernel reports each memory command (fpga_k_read / fpga_k_write: a pointer into one of its
 * buffer arguments and a byte count) and its non-overlapped compute (fpga_k_cycles). The command
 * is mapped to device addresses and split over the pseudo-channels it touches; the kernel may
 * also report serial cycles (fpga_k_stall: a dependence, such as a matrix-vector product that
 * cannot start before the previous one's result exists, whose latency nothing overlaps). Then
 *
 *   channel time  = bytes / (14.375 GB/s x 0.90) + commands x 64 cycles / 225 MHz
 *   DDR4 bank time = bytes / (19.2 GB/s x 0.80) + commands x 64 cycles / 225 MHz
 *   host bank time = bytes / 11 GB/s (PCIe) + commands x 64 cycles / 225 MHz
 *   memory time   = the busiest channel's or DDR4 bank's time (the 32 channels and the 2 DDR4
 *                   banks stream in parallel: a kernel's DDR4 traffic overlaps its HBM traffic)
 *   compute time  = cycles / 225 MHz
 *   stall time    = serial cycles / 225 MHz
 *   modeled time  = 50 us + max(memory time, compute time) + stall time
 *                   (dataflow overlaps memory and compute, not the dependences)
 *   a BO sync     = 5 us + bytes / 11 GB/s
 *
 * with the constants and their sources in fpga/xrt/u280.h. What it leaves out: HBM bank conflicts
 * and refresh beyond the utilisation factor, the HBM switch's cross-channel penalty (a port
 * reading a channel outside its own pays nothing extra here), clock-domain crossings, and PCIe
 * contention between concurrent syncs. Reads and writes share a channel's bandwidth.
 *
 * The current run's context is thread-local: only the card's worker thread executes kernels. */
#include "fpga/emu/emu.h"
#include <errno.h>
#include <time.h>

static _Thread_local emu_exec_ctx *t_ctx;

uint64_t emu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t fpga_emu_model_sync_ns(uint64_t bytes)
{
    return (uint64_t)(FPGA_U280_SYNC_OVERHEAD_NS + (double)bytes / FPGA_U280_PCIE_BPS * 1e9);
}

void emu_timing_note_par(void)
{
    if (t_ctx) t_ctx->st->par_jobs++;
}

void emu_timing_begin(emu_exec_ctx *ctx)
{
    fpga_emu_run_stats *st = ctx->st;
    *st = (fpga_emu_run_stats){.busiest = -1};
    ctx->compute_cycles = 0;
    ctx->stall_cycles = 0;
    ctx->bad_access = 0;
    t_ctx = ctx;
}

void emu_timing_end(emu_exec_ctx *ctx)
{
    t_ctx = NULL;
    fpga_emu_run_stats *st = ctx->st;
    const double bps = FPGA_U280_HBM_PC_BPS * FPGA_U280_HBM_UTIL;
    const double cmd_ns = FPGA_U280_CMD_CYCLES / FPGA_U280_KERNEL_HZ * 1e9;
    double worst = 0;
    for (int ch = 0; ch < FPGA_U280_HBM_BANKS; ch++) {
        if (!st->chan_bytes[ch] && !st->chan_cmds[ch]) continue;
        double t = (double)st->chan_bytes[ch] / bps * 1e9 + st->chan_cmds[ch] * cmd_ns;
        if (t > worst) {
            worst = t;
            st->busiest = ch;
        }
    }
    double ddr = 0;
    for (int i = 0; i < FPGA_U280_EXT_BANKS; i++) {
        if (!st->ext_bytes[i] && !st->ext_cmds[i]) continue;
        double t = (double)st->ext_bytes[i] / fpga_u280_ext_bps(i) * 1e9 + st->ext_cmds[i] * cmd_ns;
        if (t > ddr) ddr = t;
        if (t > worst) {
            worst = t;
            st->busiest = FPGA_U280_HBM_BANKS + i;
        }
    }
    st->ext_ns = (uint64_t)ddr;
    st->mem_ns = (uint64_t)worst;
    st->compute_ns = (uint64_t)((double)ctx->compute_cycles / FPGA_U280_KERNEL_HZ * 1e9);
    st->stall_ns = (uint64_t)((double)ctx->stall_cycles / FPGA_U280_KERNEL_HZ * 1e9);
    st->overhead_ns = (uint64_t)FPGA_U280_RUN_OVERHEAD_NS;
    st->modeled_ns = st->overhead_ns +
                     (st->mem_ns > st->compute_ns ? st->mem_ns : st->compute_ns) + st->stall_ns;
}

/* Charges one command of n bytes at p; p must lie in one of the run's buffers. */
static void charge(const void *p, uint64_t n, int write)
{
    emu_exec_ctx *ctx = t_ctx;
    if (!ctx || n == 0) return;
    const uint8_t *q = p;
    const fpga_kargs *a = ctx->args;
    for (int i = 0; i < a->n; i++) {
        const uint8_t *base = a->a[i].ptr;
        if (!base || q < base || q > base + a->a[i].size || n > a->a[i].size - (uint64_t)(q - base))
            continue;
        uint64_t addr = a->a[i].addr + (uint64_t)(q - base);
        fpga_emu_run_stats *st = ctx->st;
        if (write) st->bytes_written += n;
        else st->bytes_read += n;
        while (n) {
            int ch = fpga_u280_chan_of(addr);
            uint64_t end = fpga_u280_chan_lo(ch + 1);
            uint64_t k = end - addr < n ? end - addr : n;
            if (ch < FPGA_U280_HBM_BANKS) {
                st->chan_bytes[ch] += k;
                st->chan_cmds[ch]++;
            } else {
                st->ext_bytes[ch - FPGA_U280_HBM_BANKS] += k;
                st->ext_cmds[ch - FPGA_U280_HBM_BANKS]++;
            }
            addr += k;
            n -= k;
        }
        return;
    }
    /* A kernel bug: it touches memory that is not one of its buffers. The run ends in ERROR. */
    ctx->bad_access = 1;
}

void fpga_k_read(const void *p, uint64_t n)
{
    charge(p, n, 0);
}

void fpga_k_write(const void *p, uint64_t n)
{
    charge(p, n, 1);
}

void fpga_k_cycles(uint64_t c)
{
    if (t_ctx) t_ctx->compute_cycles += c;
}

void fpga_k_stall(uint64_t c)
{
    if (t_ctx) t_ctx->stall_cycles += c;
}

void emu_pace_until_locked(emu_card *c, uint64_t until_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ns / 1000000000ULL),
                          .tv_nsec = (long)(until_ns % 1000000000ULL)};
    while (!c->stop && emu_now_ns() < until_ns)
        if (pthread_cond_timedwait(&c->work, &c->mu, &ts) == ETIMEDOUT) break;
}
