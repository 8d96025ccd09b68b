/* fpga/xrt/emu_api.h — extensions the card emulator (build/libxrt_emu.so) exports beside the XRT C
 * API. They are not part of XRT: host code finds them with dlsym and treats them as absent on a
 * real node (fpga/xrt_load.c). The emulator includes this header to define them.
 *
 * Threads: every function may be called from any thread. */
#ifndef TANDEM_FPGA_EMU_API_H
#define TANDEM_FPGA_EMU_API_H
#include "fpga/xrt/u280.h"
#include "fpga/xrt/xrt_api.h"
#include <stdint.h>

/* What one completed kernel execution cost in the timing model (fpga/emu/emu_timing.c). */
typedef struct fpga_emu_run_stats {
    uint64_t modeled_ns;  /* overhead_ns + max(mem_ns, compute_ns) + stall_ns: what a U280 would
                             take */
    uint64_t mem_ns;      /* the busiest pseudo-channel's time */
    uint64_t compute_ns;  /* cycles the kernel reported, at FPGA_U280_KERNEL_HZ */
    uint64_t stall_ns;    /* serial cycles it reported (dependences nothing overlaps) */
    uint64_t overhead_ns; /* fixed per-run cost */
    uint64_t wall_ns;     /* how long the CPU took to execute the kernel (not modeled) */
    uint64_t bytes_read, bytes_written;
    uint64_t chan_bytes[FPGA_U280_HBM_BANKS]; /* read + written, per pseudo-channel */
    uint32_t chan_cmds[FPGA_U280_HBM_BANKS];  /* memory commands per pseudo-channel */
    uint64_t ext_bytes[FPGA_U280_EXT_BANKS]; /* read + written, per bank past HBM: DDR[0],
                                                DDR[1], HOST[0] (u280.h) */
    uint32_t ext_cmds[FPGA_U280_EXT_BANKS];
    uint64_t ext_ns;      /* the busiest of those banks' time (part of mem_ns: they stream in
                             parallel with HBM) */
    int busiest;          /* pseudo-channel that set mem_ns (32 + i: DDR[i]), -1 when none was
                             touched */
    uint64_t seq;         /* run number on its card (1 = the first xrtRunStart) */
    uint64_t par_jobs;    /* fpga_k_parallel calls the emulator's threads took part in (not
                             modeled: the rest ran in loops on the card's worker) */
} fpga_emu_run_stats;

typedef struct fpga_emu_card_stats {
    int index;
    int gone;                                 /* the device has disappeared (fault) */
    int hung;                                 /* the compute unit is stuck (fault) */
    uint64_t bank_used[FPGA_U280_HBM_BANKS];  /* bytes allocated in each pseudo-channel */
    uint64_t hbm_used, hbm_total;
    uint64_t ext_used[FPGA_U280_EXT_BANKS];   /* bytes allocated in DDR[0], DDR[1], HOST[0] */
    uint64_t ext_total;
    uint64_t host_bytes;                      /* host copies the emulator allocated */
    uint64_t runs_started, runs_completed, runs_failed;
    uint64_t run_modeled_ns;                  /* sum over completed runs */
    uint64_t h2d_bytes, d2h_bytes, h2d_syncs, d2h_syncs;
    uint64_t sync_modeled_ns;                 /* sum over syncs, both directions */
} fpga_emu_card_stats;

/* Stats of the run's last completed execution. 0, or -1 with errno (EINVAL: bad handle, EAGAIN:
 * the run has not completed an execution yet). */
int fpga_emu_run_stats_get(xrtRunHandle run, fpga_emu_run_stats *out);
int fpga_emu_card_stats_get(xrtDeviceHandle dev, fpga_emu_card_stats *out);
/* Pace runs and syncs of this card to the modeled time in real time (on != 0): a run does not
 * complete before start + modeled_ns, a sync does not return before its modeled time. The
 * environment variable TANDEM_EMU_PACE=1 turns it on for every card at creation. */
int fpga_emu_set_pace(xrtDeviceHandle dev, int on);
/* The timing model's price of one BO sync of `bytes` (either direction). */
uint64_t fpga_emu_model_sync_ns(uint64_t bytes);
/* Detail of the calling thread's last failed emulator call ("" if none). */
const char *fpga_emu_last_error(void);

#endif
