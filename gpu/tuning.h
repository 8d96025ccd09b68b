/* gpu/tuning.h — the CUDA engine's settings: one struct, read once when a device opens.
 *
 * Where they come from (gpu_tuning_read): a spec string "key=value,..." — the daemon's
 * `gpu_tune` configuration key, handed over in accel_opts.gpu_tune — or, when the opener passes
 * none (tests, benchmarks, the one-shot commands), the environment variable TANDEM_GPU_TUNE in
 * the same format. Nothing else in gpu/ reads the environment. Tests may also fill the struct
 * directly (gpu_tuning_default, then the fields).
 *
 * Keys (gpu/KERNELS.md says which kernel each one picks and what it measured):
 *   settings an operator may use (deploy/tandem.conf.example, gpu_tune):
 *     chunk=N           tokens per forward pass, GPU_MAX_BATCH..65536 (default 8192): a longer
 *                       prefill runs in passes of N; the engine halves it while its activations
 *                       would take over a quarter of the free device memory
 *     graphs=0|1        decode steps replayed as CUDA graphs (1)
 *     offload_pool_mb=N the pinned host memory AsyncTLS's offload (decode_sparse offload=1)
 *                       keeps sequences in, MiB, taken when the device opens (gpu/tls_off.cu;
 *                       pinning takes seconds per 10 GB); 0 (default): 3/4 of the host memory
 *                       available then when decode_sparse's default says offload=1, else none
 *                       (a sequence asking for offload then stays in device memory)
 *     xattn_fp8=0|1     XAttention's block estimate scored in FP8 e4m3 on Hopper
 *                       (gpu/gpu_xattn_fp8.h; 0, the default: bf16). Faster, but its block sets
 *                       differ from the official bf16/fp32 selection by more than issue 22's
 *                       acceptance rule allows (BENCHMARKS.md, "XAttention's estimate in FP8")
 *   comparisons (tests keep the paths they force correct; benchmarks measure what each piece
 *   buys; every forced path is also a fallback the engine takes on other GPUs or shapes):
 *     attn=auto|mma4|mma8|wgmma   prefill attention: auto = the warp-specialized wgmma kernel on
 *                       Hopper with head_dim 128, else mma.sync with 4 warps
 *     sparse_attn=auto|mma4|mma8  block-sparse (FlexPrefill) attention; auto: as the dense one,
 *                       mma.sync warps by prompt length
 *     gemv=0|1          own GEMV for single-token projections (0: cuBLAS; also unfuses)
 *     fused=0|1         fused single-token QKV and gate/up kernels
 *     pdl=0|1           programmatic dependent launch in the decode chain (Hopper)
 *     decode_attn=one|two   one-kernel decode attention (two: split + merge kernels)
 *     decode_cluster=0|N    cluster form of the decode attention for rows of at most N keys
 *                       (default 2048; 0: off)
 *     decode_mma=0|1    decode attention ranges on the tensor cores
 *     decode_rows=0|1   batches whose rows are one range each (33+ sequences with 8 KV heads):
 *                       the rows form of the decode attention (a deeper ring, no merge)
 *     logits_chunks=N   batched decode (8+ sequences): the lm_head in N column chunks after the
 *                       graph, each chunk's logits copied to the host while the next computes
 *                       (1..8, default 4; 1: the lm_head inside the graph, one copy after it)
 *     prune=0|1         prefill's last layer only for the rows the logits read
 *     argmax=0|1        decode steps that want greedy tokens (accel_decode_argmax): the argmax
 *                       of each row on the device, only the rows asked for copied back (0: the
 *                       device declines, the caller's host takes the argmax of every row)
 *     load_overlap=0|1  host-tier block loads copied layer by layer under the prefill after them
 *                       (0: all copied, and waited for, before it)
 *     gemm_tune=0|1|log|force   decode batches' projections (2..256 rows) on the fastest of
 *                       cuBLASLt's heuristic candidates, timed at open on the model's weights
 *                       (gpu/gemm_tune.cu; 1, the default; 0: cublasGemmEx's own choice; log:
 *                       as 1, each pick's times to stderr; force: every size on its fastest
 *                       candidate even where the default is faster, for the tests)
 *     gemm_small=0|N    projections of 2..N rows (N <= GPU_GEMM_SMALL_MAX) on our own small-T
 *                       tensor-core kernel (gpu/gemm_small.cuh) instead of cuBLAS, the gate/up
 *                       one ending in the SwiGLU; 0: off (default 8)
 *     prefill_split=0|1 a short prefill chunk's keys split over blocks in the warp-specialized
 *                       attention when heads x query tiles would not fill the SMs (0: never)
 *   traces (stderr at exit; the lab's, not for serving):
 *     profile=1         every op timed with events (decode then runs without graphs)
 *     chain_trace=1     where a single-token decode step's time goes (gpu/chain_trace.cu)
 *
 * Threads: pure functions over caller memory; any thread. */
#ifndef TANDEM_GPU_TUNING_H
#define TANDEM_GPU_TUNING_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the most rows gemm_small= may hand the small-T kernel (two 8-row MMA tiles) */
#define GPU_GEMM_SMALL_MAX 16

enum gpu_attn_pick { GPU_ATTN_AUTO = 0, GPU_ATTN_MMA4, GPU_ATTN_MMA8, GPU_ATTN_WGMMA };
/* gemm_tune: off, on, on with each pick written to stderr, every size on its fastest candidate */
enum gpu_gemm_tune_mode { GPU_GEMM_TUNE_OFF = 0, GPU_GEMM_TUNE_ON, GPU_GEMM_TUNE_LOG, GPU_GEMM_TUNE_FORCE };

typedef struct gpu_tuning {
    int chunk;            /* tokens per forward pass */
    int graphs;           /* 1: decode through CUDA graphs */
    int attn;             /* enum gpu_attn_pick: prefill attention */
    int sparse_attn;      /* enum gpu_attn_pick (no WGMMA): block-sparse attention */
    int gemv, fused, pdl; /* 1: on */
    int decode_two;       /* 1: the two-kernel decode attention */
    int decode_cluster;   /* longest row (keys) for the cluster form; 0: off */
    int decode_mma, prune; /* 1: on */
    int decode_rows;      /* 1: on */
    int logits_chunks;    /* lm_head column chunks of a batched step (1: in the graph) */
    int profile, chain_trace; /* 1: on */
    int load_overlap;     /* 1: on */
    int argmax;           /* 1: on */
    int gemm_tune;        /* enum gpu_gemm_tune_mode */
    int gemm_small;       /* most rows of a projection on gpu/gemm_small.cuh (0: off) */
    int offload_pool_mb;  /* AsyncTLS offload's pinned host pool, MiB (0: the default) */
    int prefill_split;    /* 1: on */
    int xattn_fp8;        /* 1: XAttention's estimate in FP8 (gpu/gpu_xattn_fp8.h) */
} gpu_tuning;

/* The defaults: what the engine runs when nobody sets anything. */
void gpu_tuning_default(gpu_tuning *t);

/* Applies spec ("key=value,...", spaces around items allowed; NULL or "": nothing) on top of t.
 * Returns 0, or -1 with a message naming the key in err (t then partly applied). */
int gpu_tuning_parse(gpu_tuning *t, const char *spec, char *err, size_t errlen);

/* Defaults, then spec when not NULL, else $TANDEM_GPU_TUNE. 0, or -1 with a message in err. */
int gpu_tuning_read(gpu_tuning *t, const char *spec, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
