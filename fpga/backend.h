/* fpga/backend.h — the FPGA decode device behind scheduler/accel.h, and what tests and tools
 * may ask it beyond that interface.
 *
 *   fpga-emu[:N]  emulated card N: the emulator library opts->lib_path (required; the
 *                 composition root, devices/, finds build/libxrt_emu.so or the installed one)
 *   fpga[:N]      a real U280 through XRT: libxrt_coreutil.so.2 or opts->lib_path, the xclbin
 *                 opts->xclbin (else the one already loaded on the card)
 * Constructors: fpga_emu_accel_open / fpga_accel_open below, called by devices/ (the one module
 * that opens devices by name), which hands them the float reference the weight image's
 * calibration runs on (fpga/calib.h).
 *
 * Capabilities: DECODE | KV_IMPORT, max_batch 1 (the kernel decodes one sequence per run, as
 * GLITCHES' FlightLLM-based cards do; accel_decode with n > 1 runs them one after another).
 * With FAST-Prefill's kernel in the xclbin (fpga/kernels/prefill.c; the emulator's has it) also
 * PREFILL | KV_EXPORT: accel_prefill runs the prompt through the card's prefill kernel, dense
 * or FlexPrefill-sparse (accel_prefill_req.sparse; the report gives its density), and exports
 * each layer's int8 KV to a sink; a dense card prefill computes exactly what decoding the
 * prompt token by token would (logits and KV, bit for bit). Without the kernel accel_prefill is
 * one decode run per token and cannot export. mem_total is the HBM left for KV after the weight
 * image and the prefill's standing workspace (the KV pool of every channel, fpga/BANKS.md),
 * capped by opts->mem_limit;
 * kv_bytes_per_token = 2 * layers * kv_heads * (head_dim + 2) (int8 + one fp16 scale per head).
 * KV is int8 only (opts->kv_dtype int4 is refused at open).
 *
 * Environment: TANDEM_FPGA_QUANT (settings, fpga/quant.h), TANDEM_CACHE_DIR (image cache,
 * fpga/image_cache.h), TANDEM_FPGA_TIMEOUT_MS (a run's watchdog, default 30000).
 * Health: a run past its watchdog returns ACCEL_ERR_TIMEOUT and marks the device DEGRADED; if
 * it is still running at the next call (an import piece's included), or a run faults, or the
 * card disappears, the call returns ACCEL_ERR_DEVICE and the device is FAILED. Late runs that
 * all land leave it DEGRADED however many: the scheduler counts a device's failures in a row
 * and stops placing work on it (fpga/backend.c fpga_dev_status says why not here). A KV chunk whose
 * values or scales are not what proto/kv.h allows, whose bytes changed between host and HBM (the
 * scatter kernel's CRC32C), or — checked when a run of positions is complete, by kv_check reading
 * it back from the tiles — whose landed bytes do not have the producer's payload CRC
 * (accel_kv_import_crc; plain accel_kv_import: the CRC of the chunk as it arrived) fails its import
 * with ACCEL_ERR_CORRUPT; the sequence then refuses to decode, the device's health is unchanged
 * (the scheduler keeps count). */
#ifndef TANDEM_FPGA_BACKEND_H
#define TANDEM_FPGA_BACKEND_H
#include "fpga/calib.h"
#include "fpga/card.h"
#include "fpga/prefill.h"
#include "fpga/quant.h"
#include "scheduler/accel.h"

/* Open card `index` for m (which must outlive the device) and load its weight image (from the
 * cache, or built: calibrating on ref, which may be NULL when TANDEM_FPGA_QUANT turns
 * calibration off). NULL with a message in err. */
accel_dev *fpga_emu_accel_open(int index, const model *m, const accel_opts *o,
                               const fpga_calib_ref *ref, char *err, size_t errlen);
accel_dev *fpga_accel_open(int index, const model *m, const accel_opts *o,
                           const fpga_calib_ref *ref, char *err, size_t errlen);

/* NULL unless d is an FPGA device. For tests and tools; same thread rules as the device. */
fpga_card *fpga_dev_card(accel_dev *d);
const fpga_quant_opts *fpga_dev_quant(accel_dev *d);
/* 1 when the weight image came from the disk cache, 0 when it was built, -1 when d is not an
 * FPGA device; path gets the cache file (may be ""). */
int fpga_dev_image_cached(accel_dev *d, const char **path);
/* Where a sequence's KV lives: its block table into the pool (fpga/kernels/dec_layout.h, "KV
 * pages"; m->ids points into the sequence, valid until it grows or is freed). 0, or -1 when d
 * is not an FPGA device. */
int fpga_dev_seq_kvmap(accel_dev *d, accel_seq *s, fpga_dec_kvmap *m);
/* What the last card prefill did, and the workspace it used (the standing one, or a sparse
 * call's, freed since but not cleared: tests read its last layer back). Any pointer may be
 * NULL. 0, or -1 when d is not an FPGA device. */
int fpga_dev_last_prefill(accel_dev *d, fpga_pf_result *res, uint64_t *ws_off, uint32_t *ws_rows,
                          uint32_t *ws_flags);
/* The device's next single-sequence decode step attends per (layer, KV head) only the positions
 * `table` lists (fpga_card_select: AsyncTLS's selected tokens; the table stays the caller's until
 * that step returns). 0, or ACCEL_ERR_INVALID (not an FPGA device, or a table the io cannot
 * hold). */
int fpga_dev_select_next(accel_dev *d, const uint32_t *table, uint32_t cap);
/* Tests, with decode_sparse asynctls on: on = 1 makes every later step report its selections and
 * queries into io; table / q (may be NULL) receive the last step's (fpga/tls_card.h). 0, or
 * ACCEL_ERR_INVALID (not an FPGA device with AsyncTLS on). */
int fpga_dev_tls_report(accel_dev *d, int on, uint32_t *table, float *q);
/* Tests: dense passes of at most `rows` rows (1..FPGA_PF_PASS; the standing workspace holds
 * FPGA_PF_PASS) and kernel runs of at most run_rows rows (a multiple of FPGA_PF_CHUNK; 0:
 * FPGA_PF_RUN_ROWS). 0, or -1. */
int fpga_dev_set_pass_rows(accel_dev *d, int rows, int run_rows);

#endif
