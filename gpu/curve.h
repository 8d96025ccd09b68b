/* gpu/curve.h — the CUDA device's decode cost by batch (accel_info.decode_curve, what the
 * placement weighs: scheduler/sched_policy.h), and the H200 measurements it is scaled from. The
 * simulator's h200-tandem profile (devices/sim_hw.c) prices from the same numbers.
 *
 * The reference: tandem's CUDA backend on an NVIDIA H200, Llama-3-8B shape, bf16 (`bench_gpu
 * --batch`):
 *   - one decode step of B sequences of 1,024 positions each, after the batch-256 work of issue 20
 *     (2026-11-28, tests/gpu/logs/2026-11-28-kvdec/run2-ab.log, round 1 "new": `bench_gpu
 *     --decode-ctx 1024,8192 --batch 32,64,128,256 --batch-ctx 1024 --steps 32`): 251.1 / 5,075.2
 *     / 8,452.7 / 12,138.4 / 15,032.1 tok/s at B = 1 / 32 / 64 / 128 / 256 (the 2026-11-26
 *     curve, 250 / 4,959 / 8,093 / 11,621 / 14,547, was the kernels before it);
 *   - the KV a batched step holds beyond those 1,024 positions per sequence is read at 4.4 TB/s
 *     (2026-11-28, tests/gpu/logs/2026-11-28-batch-curve/batch_curve.log: steps at 4K and 8K
 *     minus the same batch at 1K in the same run, over the extra KV bytes: 4.35 / 4.45 / 4.49
 *     TB/s at 4K and B = 32 / 64 / 128, 4.33 / 4.45 at 8K and B = 32 / 64; the batch-1
 *     calibration's 3.63 TB/s counts the weights and the KV together);
 *   - the H200's memory as it reports itself: 3,201 MHz (nvidia-smi's memory clock in
 *     tests/gpu/logs/2026-11-21-h200-*) on a 6,144-bit bus (six 1,024-bit HBM3e stacks), double
 *     data rate: 4.92 TB/s (NVIDIA's datasheet says 4.8).
 *
 * The curve of another device and model (gpu_decode_curve): a decode step reads the model's
 * weights once and each sequence's KV, and its FLOPs (2 per weight per sequence) grow with the
 * same weight bytes; so a device running a model is taken to be the H200 running Llama-3-8B with
 * each step time scaled by the bytes the step reads and by the memory bandwidth:
 *   step(B) = step_ref(B) x (W + B ctx kv) / (W_ref + B ctx kv_ref) x bw_ref / bw
 *   s_per_pos = kv / (4.4 TB/s x bw / bw_ref)
 * W: the bytes one step streams (every projection and the head; not the embedding table, of which
 * a step reads a row per sequence); kv: KV bytes per position; bw: the device's peak memory
 * bandwidth from its memory clock and bus width (gpu_mem_bps). On the H200 with Llama-3-8B it is
 * the measured curve. What it leaves out: a device whose FLOPs-to-bandwidth ratio is not the
 * H200's (an H100 has its FLOPs at 0.68x its bandwidth, so its large batches come out slower here
 * than they are), kernels tuned for other shapes, attention's share of a step.
 *
 * Threads: pure functions (plain C: tested without a GPU). */
#ifndef TANDEM_GPU_CURVE_H
#define TANDEM_GPU_CURVE_H
#include "scheduler/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_REF_N 5
#define GPU_REF_BATCH {1, 32, 64, 128, 256}
#define GPU_REF_TOK_S {251.1, 5075.2, 8452.7, 12138.4, 15032.1}
#define GPU_REF_CTX 1024
#define GPU_REF_KV_BPS 4.4e12
#define GPU_REF_MEM_BPS (2.0 * 3201e6 * 6144 / 8) /* 3,201 MHz x 6,144 bits, DDR */
#define GPU_REF_SOURCE                                                                             \
    "tandem's CUDA backend on an H200, Llama-3-8B shape: batched decode at context 1K "           \
    "2026-11-28 (251.1 / 5,075.2 / 8,452.7 / 12,138.4 / 15,032.1 tok/s at batch 1 / 32 / 64 / "     \
    "128 / 256, tests/gpu/logs/2026-11-28-kvdec); "                                                  \
    "KV beyond 1K read at 4.4 TB/s by batched steps (2026-11-28, "                                 \
    "tests/gpu/logs/2026-11-28-batch-curve)"

/* Llama-3-8B's shape (the reference's): hidden, layers, heads, KV heads, head_dim, intermediate,
 * vocabulary. */
#define GPU_REF_SHAPE 4096, 32, 32, 8, 128, 14336, 128256

/* Bytes of weights one decode step streams: the layers' projections and the output head, at
 * elem_bytes per weight. */
double gpu_curve_weight_bytes(int hidden, int n_layers, int n_heads, int n_kv_heads, int head_dim,
                              int intermediate, int vocab, int elem_bytes);
/* Peak memory bandwidth, bytes/s, of a memory clock (kHz, as cudaDevAttrMemoryClockRate gives
 * it) and a bus width (bits): two transfers per clock. 0 when either is unknown (<= 0). */
double gpu_mem_bps(int mem_clock_khz, int bus_bits);
/* The curve of a device of mem_bps running a model whose step streams weight_bytes and holds
 * kv_bytes_per_token per position, for batches up to max_batch (the reference's batches that
 * fit, and max_batch itself, interpolated, when it falls between them). Returns 0, or -1 with
 * out->n = 0 ("does not say") when an input is unknown (<= 0). */
int gpu_decode_curve(double weight_bytes, double kv_bytes_per_token, double mem_bps,
                     int max_batch, accel_decode_curve *out);

#ifdef __cplusplus
}
#endif

#endif
