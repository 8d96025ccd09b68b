/* fpga/kernels/kernel.h — what a kernel in fpga/kernels/ sees, on the emulator and under HLS.
 *
 * A kernel is two functions:
 *  - the top function, in the style an HLS flow synthesizes: stdint types, every buffer a
 *    pointer argument (an m_axi port), scalars by value, `#pragma HLS` lines (gcc ignores them),
 *    no dynamic allocation, no library calls beyond <stdint.h>/<string.h>-level arithmetic;
 *  - an adapter `int fpga_k_<name>(const fpga_kargs *)` that the emulator calls with the run's
 *    arguments. The adapter checks that every range the scalars describe lies inside its buffer
 *    (the hardware would read whatever is there; the emulator must not crash) and returns 0, or
 *    -1 to end the run in ERT_CMD_STATE_ERROR.
 * Each kernel exports a descriptor (fpga_k_desc) that the emulator's registry lists; an xclbin
 * description naming the kernel must declare the same argument kinds in the same order.
 *
 * Memory accounting for the timing model: the top function reports each memory command it
 * issues, once, before the data moves — fpga_k_read(p, n) / fpga_k_write(p, n) for a burst of n
 * bytes at p (a pointer into one of its buffer arguments), fpga_k_cycles(c) for compute that
 * the dataflow overlaps with memory (the model takes the larger of the two), and
 * fpga_k_stall(c) for serial latency nothing overlaps (a dependence between phases). Under HLS
 * (__SYNTHESIS__) they compile to nothing. One call is one command: merge small reads into
 * large ones, as the hardware should (GLITCHES' prefetch).
 *
 * Threads: the emulator runs a card's kernels one at a time on that card's worker thread; a
 * kernel may hand independent iterations (the hardware's parallel datapaths, e.g. the decode
 * step's KV heads, a matrix product's channel engines: dec_mat.h) to fpga_k_parallel, which the
 * emulator spreads over more threads. */
#ifndef TANDEM_FPGA_KERNEL_H
#define TANDEM_FPGA_KERNEL_H
#include <stddef.h>
#include <stdint.h>

/* gcc compiles the kernels too: the `#pragma HLS` lines are for the HLS flow only. */
#ifndef __SYNTHESIS__
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#endif

#define FPGA_K_MAX_ARGS 48

/* The 32 HBM pseudo-channel ports every kernel takes (fpga/BANKS.md), as an X-macro:
 * FPGA_K_PORTS(FPGA_K_PORT_PARAM) declares them, FPGA_K_PORTS(FPGA_K_PORT_PRAGMA) gives each its
 * own AXI bundle, FPGA_K_PORTS(FPGA_K_PORT_NAME) lists them, FPGA_K_PORTS(FPGA_K_PORT_KIND) gives
 * their argument kinds for a descriptor. */
#define FPGA_K_PORTS(X)                                                                            \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) \
    X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)
#define FPGA_K_STR(x) #x
#define FPGA_K_PORT_PARAM(n) uint8_t *hbm##n,
#define FPGA_K_PORT_NAME(n) hbm##n,
#define FPGA_K_PORT_KIND(n) FPGA_K_ARG_GLOBAL,
#define FPGA_K_PORT_PRAGMA(n)                                                                      \
    _Pragma(FPGA_K_STR(HLS INTERFACE m_axi port = hbm##n offset = slave bundle = gmem##n))

enum fpga_k_arg_kind {
    FPGA_K_ARG_GLOBAL = 1, /* a buffer in HBM (passed to xrtRunSetArg as an xrtBufferHandle) */
    FPGA_K_ARG_U32,        /* "uint": passed as uint32_t */
    FPGA_K_ARG_I32,        /* "int": passed as int32_t */
    FPGA_K_ARG_U64,        /* 8-byte scalar: passed as uint64_t */
    FPGA_K_ARG_F32,        /* "float": passed as double (C varargs), stored as float */
};

typedef struct fpga_k_arg {
    void *ptr;      /* GLOBAL: the BO's device copy (what the kernel's m_axi port sees) */
    uint64_t size;  /* GLOBAL: its size in bytes */
    uint64_t addr;  /* GLOBAL: its device address (xrtBOAddress) */
    uint64_t u;     /* U32/U64/I32 (as its 32-bit pattern): the value */
    float f;        /* F32 */
} fpga_k_arg;

typedef struct fpga_kargs {
    int n;
    fpga_k_arg a[FPGA_K_MAX_ARGS];
} fpga_kargs;

typedef int (*fpga_k_fn)(const fpga_kargs *args);

typedef struct fpga_k_desc {
    const char *name;
    int n_args;
    enum fpga_k_arg_kind kinds[FPGA_K_MAX_ARGS];
    fpga_k_fn run;
} fpga_k_desc;

/* 1 when [off, off + n) lies inside a buffer of `size` bytes (no overflow). */
static inline int fpga_k_range_ok(uint64_t off, uint64_t n, uint64_t size)
{
    return off <= size && n <= size - off;
}

/* fpga_k_parallel(n, fn, ctx, work): fn(ctx, i) for every i in [0, n), in any order and at once
 * — iterations that write only their own outputs and make no accounting call (fpga_k_read and
 * the others: the caller makes them). `work`: the bytes the iterations read in all; below what
 * pays for a hand-off they run here in a loop. Not under HLS (no function pointers there): a
 * kernel keeps its plain loop under __SYNTHESIS__. */
typedef void (*fpga_k_iter_fn)(void *ctx, uint32_t i);

#ifdef __SYNTHESIS__
/* Nothing to account for on the card; the arguments are still used (and have no side effects),
 * so that what is computed only for the accounting draws no unused-variable warning there. */
#define fpga_k_read(p, n)  ((void)(p), (void)(n))
#define fpga_k_write(p, n) ((void)(p), (void)(n))
#define fpga_k_cycles(c)   ((void)(c))
#define fpga_k_stall(c)    ((void)(c))
#else
/* Implemented by the emulator (fpga/emu/emu_timing.c). */
void fpga_k_read(const void *p, uint64_t n);
void fpga_k_write(const void *p, uint64_t n);
void fpga_k_cycles(uint64_t c);
void fpga_k_stall(uint64_t c);
/* Implemented by the emulator (fpga/emu/emu_par.c). */
void fpga_k_parallel(uint32_t n, fpga_k_iter_fn fn, void *ctx, uint64_t work);
#endif

/* The kernels (one descriptor per file in fpga/kernels/). */
extern const fpga_k_desc fpga_k_kv_gather_desc;
extern const fpga_k_desc fpga_k_decode_desc;
extern const fpga_k_desc fpga_k_decode_batch_desc;
extern const fpga_k_desc fpga_k_kv_scatter_desc;
extern const fpga_k_desc fpga_k_kv_check_desc;
extern const fpga_k_desc fpga_k_prefill_desc;

#endif
