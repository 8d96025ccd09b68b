/* fpga/pf_model.h — what the prefill kernel's runs cost in the emulator's timing model,
 * computed from the layouts alone (fpga/kernels/dec_layout.h, pf_layout.h): the same memory
 * commands per channel, MPU / SFU cycles and stalls that fpga/kernels/prefill.c reports, priced
 * with the formula of fpga/emu/emu_timing.c (fpga_dec_model_price).
 * tests/fpga/test_fpga_prefill_model.c checks it equals the emulator's statistics run for run;
 * tools/fpga_prefill_bench.c prices LLaMA2-7B / Llama-3-8B prompts with it.
 *
 * The ATTN mode (the SIGU and the SAU) depends on the prompt's index, not only on its shape:
 * it is not modeled here (the benchmark prices it from the units' own runs).
 *
 * Threads: pure functions. */
#ifndef TANDEM_FPGA_PF_MODEL_H
#define TANDEM_FPGA_PF_MODEL_H
#include "fpga/dec_model.h"
#include "fpga/kernels/pf_layout.h"

/* One run: mode (FPGA_PF_DENSE, _QKV, _POST or _HEAD, with the workspace flags) over rows
 * r0..r1 of an n-row pass at pos0 (HEAD: row r0). 0, or -1 for ATTN or a mode it does not
 * know. */
int fpga_pf_model_run(const fpga_dec_desc *d, uint32_t mode, uint32_t layer, uint32_t pos0,
                      uint32_t n, uint32_t r0, uint32_t r1, fpga_dec_cost *out);

#endif
