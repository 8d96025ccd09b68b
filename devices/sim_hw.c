/* devices/sim_hw.c — the hardware profiles `tandem simulate` can price (devices/sim_hw.h): the
 * devices tandem knows, each with its calibration points and their source. The card profiles
 * take the U280's memory and PCIe facts from the FPGA backend's own header, so that the
 * simulator and the emulator's timing model agree. */
#include "devices/sim_hw.h"
#include "fpga/xrt/u280.h"
#include "fpga/kernels/dec_layout.h"
#include "gpu/curve.h"
#include <string.h>

/* Board power at full load (tok/J in tandem simulate). */
#define H200_W 700.0
#define H200_W_SRC "NVIDIA H200 Tensor Core GPU datasheet: H200 SXM max thermal design power up to 700 W"
#define U280_W 225.0
#define U280_W_SRC                                                                                 \
    "AMD Alveo U280 Data Center Accelerator Card Data Sheet (DS963), card specifications: maximum " \
    "total power 225 W (PCIe slot 75 W + 8-pin AUX); GLITCHES Table I measured 46 W for "         \
    "FlightLLM's design, so 225 W is the card's ceiling, not its draw"
/* The batched card's calibration (tools/fpga_decode_bench --batch, the calibration line):
 * LLaMA2-7B W4A8 g128 at context 1792, one sequence, host syncs included; the fixed serial
 * stalls of a step; what each further sequence adds beyond its KV bytes. */
#define U280B_CAL_S 0.0099936
#define U280B_FIXED_S 0.0002057
#define U280B_SEQ_S 0.000162
#define ALL_CAPS (ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT)
#define CARD_CAPS (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT)
/* a GPU runs some of a chunk's layers per call (gpu/accel.c reports ACCEL_CAP_LAYER_SPLIT, as
 * cpu/backend.c does); the card's backend and a peer's remote device do not */
#define GPU_CAPS (ALL_CAPS | ACCEL_CAP_LAYER_SPLIT)

/* Hardware profiles. GLITCHES' decode latencies are averages over 512 decode steps after a
 * 1536-token prompt: the calibration context is their mean, 1536 + 255.5 ~ 1792. */
static const sched_sim_hw hws[] = {
    {"a100", ACCEL_KIND_CUDA, GPU_CAPS, 256, "llama2-7b", 1536, 0.17585, 1792, 0.02426, 0, 0,
     80e9, 16, 16, 25e9, 10e-6, 17000,
     "GLITCHES Table I (HF transformers FP16, LLaMA2-7B [1536,512]: prefill 175.85 ms, decode "
     "24.26 ms/token), Table II ($17,000); 80 GB and PCIe Gen4 x16 at 25 GB/s assumed",
     .power_w = 256.6, .power_source = "GLITCHES Table I: 256.6 W measured during prefill"},
    {"v100s", ACCEL_KIND_CUDA, GPU_CAPS, 256, "llama2-7b", 1536, 0.39880, 1792, 0.02952, 0, 0,
     32e9, 16, 16, 12e9, 10e-6, 12000,
     "GLITCHES Table I (prefill 398.80 ms, decode 29.52 ms/token), Table II ($12,000); PCIe "
     "Gen3 x16 at 12 GB/s assumed",
     .power_w = 239.8, .power_source = "GLITCHES Table I: 239.8 W measured during prefill"},
    {"h100-hf", ACCEL_KIND_CUDA, GPU_CAPS, 256, "llama3-8b", 4096, 0.124, 4096, 0.050, 0, 0,
     80e9, 16, 16, 55e9, 10e-6, 30000,
     "DESIGN.md's probe of HF transformers bf16 on an H100, Llama-3-8B: prefill 4K 124 ms, "
     "decode 50 ms/token (context taken as 4K); pinned PCIe Gen5 55 GB/s (DESIGN.md); price "
     "$30,000 assumed",
     .power_w = 700, .power_source = "NVIDIA H100 SXM datasheet: max thermal design power up to 700 W"},
    /* seq_s: (7.630 - 4.457) / 31 ms per further sequence at 32 x 1024 tokens, less the 1024
     * positions of KV each adds at the calibrated bandwidth (about 0.044 ms) */
    {"h200-tandem", ACCEL_KIND_CUDA, GPU_CAPS, 256, "llama3-8b", 4096, 0.1026, 1024, 0.004456,
     0, 0.058e-3, 141e9, 16, 16, 55.3e9, 10e-6, 35000,
     "tandem's CUDA backend measured on an H200 (tests/gpu/logs/2026-11-21-h200-final: "
     "Llama-3-8B shape, prefill 4096 tokens 102.6 ms, decode 4.456 ms/token after 1024, batch "
     "32 7.63 ms/step, pinned D2H 55.3 GB/s); " GPU_REF_SOURCE " (gpu/curve.h, issue 25); 141 "
     "GB; price $35,000 assumed",
     .power_w = H200_W, .n_curve = GPU_REF_N, .curve_b = GPU_REF_BATCH,
     .curve_tps = GPU_REF_TOK_S, .curve_ctx = GPU_REF_CTX, .curve_kv_bps = GPU_REF_KV_BPS,
     .power_source = H200_W_SRC},
    {"u280", ACCEL_KIND_FPGA, CARD_CAPS | ACCEL_CAP_PREFILL, 1, "llama2-7b", 1536, 5.0012, 1792,
     0.0215, 0, 0, (double)FPGA_U280_HBM_BYTES, 4, 8, FPGA_U280_PCIE_BPS,
     FPGA_U280_SYNC_OVERHEAD_NS * 1e-9, 8000,
     "GLITCHES Table I (FlightLLM-based W4A8 with prefetching: prefill 5001.20 ms, decode "
     "21.50 ms/token), Table II ($8,000); 8 GiB HBM, PCIe per fpga/xrt/u280.h",
     .power_w = 46.0, .power_source = "GLITCHES Table I: 46.0 W measured (FlightLLM's design)"},
    {"u280-tandem", ACCEL_KIND_FPGA, CARD_CAPS | ACCEL_CAP_PREFILL, 1, "llama2-7b", 1536, 3.720,
     1792, 0.01027,
     FPGA_U280_RUN_OVERHEAD_NS * 1e-9 + 0.546e-3, 0, (double)FPGA_U280_HBM_BYTES, 4, 8,
     FPGA_U280_PCIE_BPS, FPGA_U280_SYNC_OVERHEAD_NS * 1e-9, 8000,
     "tandem's own decode kernel in the emulator's timing model (fpga/dec_model.c on branch "
     "fpga2, tools/fpga_decode_bench: LLaMA2-7B W4A8 g128 at context 1792 = 10.27 ms/token "
     "with host syncs, of which 0.05 ms run overhead + 0.546 ms serial stalls are fixed); "
     "prefill: fpga/kernels/prefill.c's cost model, LLaMA2-7B 1536 tokens dense in 3,720 ms "
     "(fpga/PREFILL.md, tools/fpga_prefill_bench)",
     .power_w = U280_W, .power_source = U280_W_SRC},
    /* the batched decode kernel (fpga/kernels/decode_batch.c) in the timing model
     * (tools/fpga_decode_bench --batch): B = 1 costs what the single kernel costs less the
     * special-function stalls of its 16 lanes (64 here); each further sequence of a step adds
     * its KV bytes (priced by decode_bps, as for every device), its serial special-function
     * passes and its host syncs (seq_s); the MACs of all of them run on the batched image's
     * array (decode_ops) */
    {"u280-batch", ACCEL_KIND_FPGA, CARD_CAPS | ACCEL_CAP_PREFILL, FPGA_DEC_MAX_BATCH,
     "llama2-7b", 1536, 3.720, 1792, U280B_CAL_S, FPGA_U280_RUN_OVERHEAD_NS * 1e-9 + U280B_FIXED_S,
     U280B_SEQ_S, (double)FPGA_U280_HBM_BYTES, 4, 8, FPGA_U280_PCIE_BPS,
     FPGA_U280_SYNC_OVERHEAD_NS * 1e-9, 8000,
     "tandem's batched decode kernel in the emulator's timing model (fpga/dec_model.c "
     "fpga_dec_model_step_batch, tools/fpga_decode_bench --batch: LLaMA2-7B W4A8 g128, context "
     "1792, B = 1 with host syncs; per further sequence the special-function stalls at 64 lanes "
     "and its syncs); MACs: 12,288 int8/cycle at 225 MHz (fpga/kernels/dec_layout.h); prefill "
     "as u280-tandem",
     .power_w = U280_W, .decode_ops = 2.0 * FPGA_DEC_BATCH_MACS_PER_CYCLE * FPGA_U280_KERNEL_HZ,
     .power_source = U280_W_SRC},
};

const sched_sim_catalog *devices_sim_hw(void)
{
    static const sched_sim_catalog c = {hws, (int)(sizeof hws / sizeof hws[0])};
    return &c;
}

/* Sparse prefill on the H200 (BENCHMARKS.md, "The three methods on the H200", 2026-11-28,
 * tests/gpu/logs/2026-11-28-xattn/kernels.md: Llama-3-8B attention shape, structured synthetic
 * Q/K, ms per layer at 32K; the index and the sparse attention over the engine's dense ws kernel
 * on the same rows). */
static const sched_sim_sparse sparse[] = {
    /* Tri-shape (start 128, recent 1920, 1024-token chunks, the last 100 tokens dense): density
     * 0.154, attention 3.04 ms, index 0.81 ms, dense 14.8 ms. Its lists do not depend on the
     * prompt: the density at every length is the geometry's (0.154 / 0.079 / 0.040 measured at
     * 32K / 64K / 128K); end to end 882 / 1,758 / 3,549 ms against dense 1,231 / 3,467 /
     * 10,905 ms (tests/gpu/logs/2026-11-28-xattn/e2e.jsonl) */
    {"trishape", 128, 1920, 1024, 100, 0, 32768, 3.04 / (14.8 * 0.154), 0.81 / 14.8,
     "Tri-shape on tandem's H200 (2026-11-28-xattn kernels.md, 32K: density 0.154, attention "
     "3.04 ms, index 0.81 ms, dense 14.8 ms per layer); density from its geometry at every length",
     .block = 128},
    /* FlexPrefill (gamma 0.9, tau 0.1, min_budget 1024) at the density of the structured
     * synthetic inputs: 0.095, attention 1.60 ms, index 1.69 ms, dense 15.5 ms. Its density
     * depends on the prompt's attention; below 32K it is not measured and is taken to grow as
     * 32K / n (its budgets are counted in tokens) */
    {"flexprefill", 0, 0, 0, 0, 0.095, 32768, 1.60 / (15.5 * 0.095), 1.69 / 15.5,
     "FlexPrefill on tandem's H200 (2026-11-28-xattn kernels.md, 32K structured: density 0.095, "
     "attention 1.60 ms, index 1.69 ms, dense 15.5 ms per layer); density x 32K / n below 32K "
     "(not measured); a chunk's index 0.504 us per cached key and a layer-split call's own "
     "0.5 ms (the 130K traces of tests/gpu/logs/2026-11-29-tbtp99, emu.c.txt)",
     /* chunked (issue 22): whole 128-token blocks; each call's index over the cached keys, F of
      * the fit t = A + B k + E k (p + k/2) + F p to call 2's FlexPrefill chunks on the H200 (a
      * one-block call at 128K: ~65 ms of it, as the ~69 ms of index measured there); a split
      * call's own part as its 1-layer calls showed (1.21x their share) */
     .block = 128, .call_key_s = 5.04e-7, .split_s = 0.5e-3},
};

const sched_sim_sparse *devices_sim_sparse_at(int i)
{
    return i >= 0 && i < (int)(sizeof sparse / sizeof sparse[0]) ? &sparse[i] : NULL;
}

const sched_sim_sparse *devices_sim_sparse(const char *name)
{
    for (int i = 0; devices_sim_sparse_at(i); i++)
        if (!strcmp(sparse[i].name, name)) return &sparse[i];
    return NULL;
}
