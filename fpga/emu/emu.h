/* fpga/emu/emu.h — the emulator's internal structures (only the emulator sources include this).
 * The design note is at the top of fpga/emu/emu.c. */
#ifndef TANDEM_FPGA_EMU_H
#define TANDEM_FPGA_EMU_H
#include "fpga/xrt/emu_api.h"
#include "fpga/kernels/kernel.h"
#include "fpga/xrt/u280.h"
#include "fpga/xrt/xrt_api.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Only the XRT functions and the fpga_emu_* / fpga_k_* extensions leave the library. */
#pragma GCC visibility push(hidden)

#define EMU_MAX_CARDS    16
#define EMU_MAX_KERNELS  16
#define EMU_MAX_GROUPS   64 /* 32 single banks + ranges an xclbin declares */
#define EMU_NAME_MAX     64
#define EMU_ALIGN        4096 /* BO placement granule: one host page, as the DRM allocator uses */
#define EMU_MAX_FAULTS   8
#define EMU_XCLBIN_MAX   (64 << 10) /* largest description accepted */

enum emu_kind { EMU_DEV = 0x44455631, EMU_BO = 0x424f4f31, EMU_KERNEL = 0x4b524e31,
                EMU_RUN = 0x52554e31 };

/* ---------------------------------------------------------------- xclbin description */

typedef struct emu_group {
    int lo, hi; /* pseudo-channels [lo, hi] */
} emu_group;

typedef struct emu_xarg {
    char name[EMU_NAME_MAX];
    enum fpga_k_arg_kind kind;
    int group; /* GLOBAL: memory group id of its connectivity */
} emu_xarg;

typedef struct emu_xkernel {
    char name[EMU_NAME_MAX];
    int n_args;
    emu_xarg args[FPGA_K_MAX_ARGS];
    const fpga_k_desc *impl; /* the C function that stands in for the compute unit */
} emu_xkernel;

typedef struct emu_xclbin {
    xuid_t uuid;
    int n_kernels;
    emu_xkernel kernels[EMU_MAX_KERNELS];
    int n_groups; /* groups 0..31 are HBM[0]..HBM[31]; 32.. are ranges */
    emu_group groups[EMU_MAX_GROUPS];
} emu_xclbin;

/* Parses a description (text, NUL-terminated, at most EMU_XCLBIN_MAX bytes; format in
 * emu_xclbin.c). 0, or -1 with errno and the reason set by emu_fail(). */
int emu_xclbin_parse(const char *text, emu_xclbin *out);
/* The description every card starts with (the shell comes programmed). */
extern const char emu_xclbin_builtin[];
const fpga_k_desc *emu_registry_find(const char *name);

/* ---------------------------------------------------------------- objects */

typedef struct emu_card emu_card;

typedef struct emu_dev {
    uint32_t magic;
    emu_card *card;
} emu_dev;

typedef struct emu_bo {
    uint32_t magic;
    emu_card *card;
    int refs;        /* user handle (until xrtBOFree) + runs holding it as an argument */
    uint64_t addr;   /* device address: pseudo-channel = addr / bank size */
    uint64_t size;
    uint8_t *host;   /* host copy (NULL for DEV_ONLY) */
    int host_owned;  /* mmap()ed by us (else the user's pointer) */
    uint32_t flags;
    int group;
} emu_bo;

typedef struct emu_kernel {
    uint32_t magic;
    emu_card *card;
    int refs; /* user handle + runs */
    emu_xkernel x; /* copy: the card's xclbin may be replaced while we live */
} emu_kernel;

typedef struct emu_run {
    uint32_t magic;
    emu_kernel *kernel;
    int refs;          /* user handle + the worker while queued or executing */
    enum ert_cmd_state state;
    uint64_t set_mask[(FPGA_K_MAX_ARGS + 63) / 64];
    emu_bo *bo[FPGA_K_MAX_ARGS];      /* GLOBAL args as set (a reference each) */
    fpga_k_arg val[FPGA_K_MAX_ARGS];  /* scalars as set */
    fpga_kargs exec;                  /* snapshot taken at xrtRunStart */
    emu_bo *exec_bo[FPGA_K_MAX_ARGS]; /* references held by the snapshot */
    uint64_t seq;                     /* run number on the card, set at start */
    int fault;                        /* enum emu_fault_kind hitting this run */
    int late_go;                      /* a late run: a wait timed out, it may execute now */
    struct emu_run *next;             /* queue link */
    fpga_emu_run_stats stats;
    int have_stats;
} emu_run;

/* ---------------------------------------------------------------- faults */

enum emu_fault_kind {
    EMU_FAULT_NONE,
    EMU_FAULT_HANG,
    EMU_FAULT_GONE,
    EMU_FAULT_BITFLIP,
    EMU_FAULT_ERROR,
    EMU_FAULT_LATE
};

typedef struct emu_fault {
    int card;
    uint64_t run; /* the n-th xrtRunStart on that card (1-based) */
    enum emu_fault_kind kind;
    int arg;       /* bitflip: which argument's BO (-1: the first global argument) */
    uint64_t byte; /* bitflip: byte offset in that BO */
    int bit;
} emu_fault;

/* Parses TANDEM_EMU_FAULT ("card=1,run=5,kind=hang;card=0,run=2,kind=bitflip,byte=100,bit=3").
 * Returns the number of faults, or -1 with the reason in err. */
int emu_fault_parse(const char *spec, emu_fault *out, int max, char *err, size_t errlen);

/* ---------------------------------------------------------------- the card */

typedef struct emu_extent {
    uint64_t addr, size;
} emu_extent;

struct emu_card {
    int index;
    pthread_mutex_t mu;
    pthread_cond_t done;  /* a run changed state (waiters) */
    pthread_cond_t work;  /* the queue changed, or stop (worker) */
    int users;            /* live user handles of any kind on this card */
    _Atomic int gone;     /* read without the lock by the fast checks of every call */
    int hung, stop, pace;
    emu_xclbin xclbin;
    int kernels_open;
    uint8_t *hbm;         /* FPGA_U280_HBM_BYTES reserved, pages touched on demand */
    emu_extent *ext;      /* allocated extents, sorted by address */
    int n_ext, cap_ext;
    emu_run *head, *tail; /* queued runs, in start order (one compute unit) */
    emu_run *hung_run;
    pthread_t worker;
    emu_fault faults[EMU_MAX_FAULTS];
    int n_faults;
    fpga_emu_card_stats st;
};

/* ---------------------------------------------------------------- shared helpers */

/* Records the reason for the calling thread, sets errno to -err as XRT does (xrt_core::error
 * carries negative codes) and returns -1. */
int emu_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *emu_fail_null(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Handle registry: a pointer is only dereferenced after it was found here with its kind, so a
 * stale or foreign handle is EINVAL, never a crash. */
int emu_handle_add(void *p);
void *emu_handle_get(void *p, uint32_t kind);
void emu_handle_del(void *p);

/* Drops one user handle of the card; the last one tears the card down (worker joined, memory
 * returned). Called without card->mu held. */
void emu_card_release(emu_card *c);
/* The device disappeared (fault): card->mu held. Sticky for the card's index. */
void emu_card_mark_gone(emu_card *c);
/* Card memory (emu_mem.c): place / remove an extent; card->mu held. */
int emu_mem_place(emu_card *c, int group, uint64_t size, uint64_t *addr);
void emu_mem_remove(emu_card *c, uint64_t addr, uint64_t size);
void emu_bo_unref_locked(emu_bo *b); /* card->mu held; frees at 0 */

/* Runs (emu_run.c). */
void *emu_worker_main(void *card);
void emu_run_unref_locked(emu_run *r);
void emu_kernel_unref_locked(emu_kernel *k);

/* Timing model (emu_timing.c). */
typedef struct emu_exec_ctx {
    const emu_card *card;
    const fpga_kargs *args;
    fpga_emu_run_stats *st;
    uint64_t compute_cycles;
    uint64_t stall_cycles;
    int bad_access;
} emu_exec_ctx;
void emu_timing_begin(emu_exec_ctx *ctx);
void emu_timing_end(emu_exec_ctx *ctx);
/* The run executing on this thread handed a fpga_k_parallel job to the pool (emu_par.c): counted
 * in its stats (par_jobs). */
void emu_timing_note_par(void);
uint64_t emu_now_ns(void);
/* Sleeps until the monotonic time `until_ns`, or until card->stop (card->mu held; waits on
 * card->work). */
void emu_pace_until_locked(emu_card *c, uint64_t until_ns);

#pragma GCC visibility pop
#endif
