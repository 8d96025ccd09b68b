/* fpga/flex_host.h — host side of the FAST-Prefill kernels (fpga/kernels/flex_sigu.c, flex_sau.c):
 * W8A8 packing of Q/K/V into their HBM block layouts, and one attention layer run on a card
 * (real XRT or the emulator) through the fpga/xrt_load.h wrappers.
 *
 * Quantization: symmetric per (token, head): scale = amax / 127 (float32), q = rint(x / scale)
 * clamped to [-127, 127]; a zero row has scale 0 and quantizes to 0. The dequantized values
 * q * scale are what the CPU reference must be fed to compare block sets
 * (fpga_flex_unpack_*).
 *
 * Ownership: results are malloc'ed into fpga_flex_result and released by
 * fpga_flex_result_free. Threads: one run at a time per device handle.
 * Errors: ACCEL_* statuses (scheduler/accel.h); ACCEL_ERR_INVALID for shapes outside the
 * kernels' bounds (flex_kernel.h), with the XRT message in fpga_xrt_error(). */
#ifndef TANDEM_FPGA_FLEX_HOST_H
#define TANDEM_FPGA_FLEX_HOST_H
#include "fpga/kernels/flex_kernel.h"
#include "fpga/kernels/xattn_kernel.h"
#include "fpga/xrt_load.h"
#include <stddef.h>
#include <stdint.h>

/* Bytes of the packed buffers. */
uint64_t fpga_flex_q_bytes(int n, int n_heads, int d);
uint64_t fpga_flex_kv_bytes(int n, int n_kv_heads, int d);

/* q: (n, n_heads, d) rows `q_stride` floats apart -> out (fpga_flex_q_bytes). */
void fpga_flex_pack_q(const float *q, size_t q_stride, int n, int n_heads, int d, uint8_t *out);
/* k, v: (n, n_kv_heads, d) rows `kv_stride` apart -> out (fpga_flex_kv_bytes). */
void fpga_flex_pack_kv(const float *k, const float *v, size_t kv_stride, int n, int n_kv_heads,
                       int d, uint8_t *out);
/* The dequantized tensors, (n, heads, d) dense. */
void fpga_flex_unpack_q(const uint8_t *packed, int n, int n_heads, int d, float *q);
void fpga_flex_unpack_kv(const uint8_t *packed, int n, int n_kv_heads, int d, float *k, float *v);

typedef struct fpga_flex_opts {
    float gamma, tau;
    int min_blocks, max_blocks; /* budgets in 128-token blocks (max 0: nb) */
    int gqa_interleave;
    int cache_blocks, hot_blocks; /* SAU cache (slots of one KV block) and its hot tier */
    int window;                   /* SAU query blocks per accumulator window */
    int schedule_only;            /* SAU mode 1: statistics without arithmetic, no output */
    /* optional: use this CSR instead of running the SIGU (e.g. the CPU reference's index for
     * lengths where emulating the SIGU would take too long); uint32 offsets, (n_heads, nb + 1) */
    const uint32_t *index_row_ptr, *index_col;
} fpga_flex_opts;

/* Defaults: gamma 0.9, tau 0.1, 8 blocks (1024 tokens) min, no max, a 16 MiB cache (FAST-Prefill's
 * size) in blocks of this head_dim with half of it hot, window 16. */
void fpga_flex_opts_default(fpga_flex_opts *o, int head_dim);

typedef struct fpga_flex_result {
    int n, n_heads, n_blocks;
    uint32_t *row_ptr, *col;      /* the index (SIGU output, or the one given) */
    fpga_flex_head_info *info;    /* (n_heads), zero when the SIGU did not run */
    float *out;                   /* (n, n_heads, d) attention output; NULL in schedule_only */
    fpga_flex_sau_stats sau;
    int sigu_ran;
    fpga_emu_run_stats sigu_run, sau_run; /* emulator timing model (zero on real XRT) */
    uint64_t h2d_bytes, h2d_ns;  /* what the host shipped and the modeled PCIe time */
} fpga_flex_result;

/* Runs the SIGU (unless opts gives an index) and the SAU on packed inputs. */
int fpga_flex_attention(fpga_xrt *x, xrtDeviceHandle dev, const fpga_flex_opts *o,
                        const uint8_t *qpack, const uint8_t *kvpack, int n, int n_heads,
                        int n_kv_heads, int d, fpga_flex_result *res);
void fpga_flex_result_free(fpga_flex_result *res);

/* The XAttention / Tri-shape unit (fpga/kernels/xattn_est.c) as a kernel of its own: the block
 * lists of query blocks [q0, nb) of an n-token sequence from its packed q and kv (every row's:
 * the keys of a chunk are everything before it). ACCEL_ERR_INVALID outside the unit's bounds
 * (fpga_xattn_ok). row_ptr (n_heads, nb + 1) and col are malloc'ed (fpga_xattn_result_free). */
typedef struct fpga_xattn_result {
    int n, n_heads, n_blocks;
    uint32_t *row_ptr, *col;
    fpga_emu_run_stats run; /* emulator timing model (zero on real XRT) */
} fpga_xattn_result;
int fpga_xattn_index(fpga_xrt *x, xrtDeviceHandle dev, const fpga_xattn_params *p,
                     const uint8_t *qpack, const uint8_t *kvpack, int n, int q0, int n_heads,
                     int n_kv_heads, int d, fpga_xattn_result *res);
void fpga_xattn_result_free(fpga_xattn_result *res);

#endif
