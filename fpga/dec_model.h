/* fpga/dec_model.h — what the decode and kv_scatter kernels cost in the emulator's timing model,
 * computed from the layout alone (no weights, no run): the same memory commands per channel,
 * compute and stall cycles the kernels report (fpga/kernels/decode.c, kv_scatter.c), priced
 * with the formula of fpga/emu/emu_timing.c. tests/fpga/test_fpga_model.c checks it equals
 * the emulator's run statistics; tools/fpga_decode_bench.c uses it for the 7B/8B shapes that
 * are too large to run through the emulator at every context length.
 *
 * Threads: pure functions. */
#ifndef TANDEM_FPGA_DEC_MODEL_H
#define TANDEM_FPGA_DEC_MODEL_H
#include "fpga/kernels/dec_layout.h"
#include "fpga/xrt/u280.h"
#include "scheduler/accel.h"

typedef struct fpga_dec_cost {
    uint64_t chan_bytes[FPGA_DEC_CH];
    uint32_t chan_cmds[FPGA_DEC_CH];
    uint64_t bytes_read, bytes_written;
    uint64_t compute_cycles, stall_cycles;
    uint64_t mem_ns, compute_ns, stall_ns, overhead_ns, modeled_ns;
    int busiest;
} fpga_dec_cost;

/* One decode run at position pos (positions 0..pos attended) of a slab. */
void fpga_dec_model_step(const fpga_dec_desc *d, uint32_t pos, fpga_dec_cost *out);
/* The same for a paged sequence whose blocks are ids first_id, first_id + 1, ... (the pool's
 * lowest free ids: a sequence that grew alone): its block table read from io, and one burst per
 * run of consecutive ids inside a superblock (dec_layout.h, "KV pages"). */
void fpga_dec_model_step_paged(const fpga_dec_desc *d, uint32_t pos, uint32_t first_id,
                               fpga_dec_cost *out);
/* One run of the batched kernel (fpga/kernels/decode_batch.c) over n sequences: sequence b at
 * position pos[b] through its block table kv[b] (the map with ids and n_ids = its table's used
 * length). The weights once, every sequence's KV, the MACs of all n on the batched image's array
 * (FPGA_DEC_BATCH_MACS_PER_CYCLE), every sequence's special-function passes as stalls. */
void fpga_dec_model_step_batch(const fpga_dec_desc *d, uint32_t n, const uint32_t *pos,
                               const fpga_dec_kvmap *kv, fpga_dec_cost *out);
/* One kv_scatter run: n positions from pos0 of `layer`, striped over the slots with `per`
 * positions each (the host's split: per = ceil(n / slots)). Staging slot j of the run lies in
 * pseudo-channel stage_ch[j]. paged 0: a slab; else a sequence whose block k has id
 * first_id + k (the pool's lowest free ids: a sequence that grew alone), the piece spanning the
 * blocks of pos0 .. pos0 + n - 1 (at most FPGA_DEC_SCATTER_IDS), their table read from slot 0. */
void fpga_dec_model_scatter(const fpga_dec_desc *d, uint32_t layer, uint32_t pos0, uint32_t n,
                            uint32_t per, const int stage_ch[FPGA_DEC_STAGE_SLOTS], int paged,
                            uint32_t first_id, fpga_dec_cost *out);
/* The building blocks (fpga/pf_model.c prices the prefill kernel with them): one memory command
 * of n bytes in channel ch (n 0: none), and the formula of fpga/emu/emu_timing.c over the
 * charges so far (fills mem_ns .. modeled_ns, busiest). */
void fpga_dec_model_charge(fpga_dec_cost *c, int ch, uint64_t n, int write);
void fpga_dec_model_price(fpga_dec_cost *c);
/* The emulator's price of one BO sync (fpga/emu/emu_timing.c). */
uint64_t fpga_dec_model_sync_ns(uint64_t bytes);

/* The HBM-bandwidth floor of a run: every byte it moves at the 460 GB/s peak. */
double fpga_dec_model_floor_ns(const fpga_dec_cost *c);

/* A card's decode cost by batch for accel_info.decode_curve (the batched kernel's runs, host
 * syncs left out): batches 1, 2, 4, ... up to max_batch at ctx positions each (1,024, or half the
 * model's max_pos if that is shorter than 2,048), consecutive block ids as a sequence that grew
 * alone; s_per_pos from one sequence at 2 x ctx. */
void fpga_dec_model_curve(const fpga_dec_desc *d, int max_pos, int max_batch, accel_decode_curve *out);

#endif
