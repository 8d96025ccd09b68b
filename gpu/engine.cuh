/* gpu/engine.cuh — the engine's structures, shared by the .cu files of gpu/ (C++ only).
 *
 * Memory plan (all device memory is taken at gpu_engine_new, except the KV pool's memory, mapped
 * as sequences grow (gpu/kv_pool.cu), the pinned host export buffer, grown at the first export that needs
 * it, the import staging buffer, grown at the first import that needs it, and AsyncTLS's
 * per-sequence summaries, cudaMalloc'ed outside the pool's budget, which gpu_tls_open shrinks):
 *   weights    h16, fused per layer: w_qkv = [wq; wk; wv] (one GEMM for Q, K and V) and
 *              w_gu = [w_gate; w_up] (one GEMM for both FFN inputs); norms and biases float32
 *   workspace  activations for up to t_max tokens per forward pass (a longer prefill runs in
 *              chunks of t_max: attention of a chunk reads the KV of the earlier ones), the
 *              per-step metadata, the split-K partials of decode attention, the export ring
 *   KV cache   one pool of blocks of GPU_KV_BLOCK positions, h16, a block table per sequence
 *              (see "paged KV" below): the 128 keys of one head in a block are contiguous, so
 *              attention tiles are plain row blocks
 *   sparse     a sparse prefill (prefill_sparse.cu, gpu_prefill_sparse) takes, for the call only,
 *              the residual stream and Q of the whole prompt and the index workspace
 *              (gpu_sparse_bytes: 3.6 GB for 128K tokens of an 8B model), lent by the KV pool
 *              (whole chunks of free blocks: gpu_pool_lend); NOMEM when the pool has no room
 *
 * Numerics (h16: the 16-bit float of this build of the plugin, bf16 or fp16: gpu/h16.cuh):
 * the residual stream is float32; GEMM inputs are h16 (weights, normalized
 * activations), GEMMs accumulate in float32 and write float32 (Q/K/V, and the o/down
 * projections, which add into the residual through beta = 1) or h16 (gate/up, re-read once by
 * SwiGLU; at 1 and 2..8 rows SwiGLU is fused into the gate/up kernel, decode_fused.cu and
 * gemm_small.cuh, with the same roundings). Attention reads h16 Q/K/V, accumulates in float32 and rounds P to h16 for the PV
 * product (FlashAttention's arithmetic). */
#ifndef TANDEM_GPU_ENGINE_CUH
#define TANDEM_GPU_ENGINE_CUH
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
extern "C" {
#include "gpu/gpu.h"
#include "gpu/tuning.h"
}

#include "gpu/h16.cuh"

/* ---------------------------------------------------------------- error checks
 * Every CUDA / cuBLAS call goes through these: on failure they log the call with file:line and
 * return from the enclosing function (never exit or abort). An allocation failure is NOMEM (an
 * admission answer); anything else is DEVICE (the accel wrapper marks the device FAILED). */
int gpu_cuda_status(cudaError_t err, const char *what, const char *file, int line);
int gpu_cublas_status(cublasStatus_t st, const char *what, const char *file, int line);

#define GPU_CHECK(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return gpu_cuda_status(e_, #call, __FILE__, __LINE__);              \
    } while (0)
#define GPU_CUBLAS(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) return gpu_cublas_status(s_, #call, __FILE__, __LINE__);  \
    } while (0)
/* After a kernel launch: launch-configuration errors show up here, faults at the next sync. */
#define GPU_LAUNCHED() GPU_CHECK(cudaGetLastError())
/* Propagate a status from a helper. */
#define GPU_TRY(expr)                                                                              \
    do {                                                                                           \
        int st_ = (expr);                                                                          \
        if (st_) return st_;                                                                       \
    } while (0)

/* ---------------------------------------------------------------- programmatic dependent launch
 * The decode step is a chain of small kernels, each waiting for the one before. Launched with
 * gpu_launch(..., pdl = 1), a kernel's blocks may start while its predecessor is still finishing
 * (once every block of the predecessor has started and called gpu_pdl_trigger); they do only
 * work on immutable data before gpu_pdl_wait, which returns
 * when the predecessor has completed and its writes are visible. A kernel launched without it,
 * or one whose predecessor is not a kernel, waits as usual and gpu_pdl_wait returns at once.
 * Rules for every kernel that calls these: no global write and no read of a predecessor's output
 * before gpu_pdl_wait, and those outputs are read with coherent loads (__ldca or plain), never
 * __ldg (ld.global.nc wants its data unwritten for the whole life of the kernel, and this one
 * started before the predecessor finished). Hopper's griddepcontrol (PTX 7.8, sm_90). */
__device__ __forceinline__ void gpu_pdl_wait()
{
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void gpu_pdl_trigger()
{
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
/* The GPU's nanosecond clock (the kernels' optional phase traces). */
__device__ __forceinline__ unsigned long long gpu_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
/* Bytes [from, to) from row (16-byte aligned; from, to multiples of 16) requested into L2,
 * without waiting and without registers (the o projection's rows before its PDL wait: gemm.cu;
 * the lab's step kernel: gpu/bench/decode_step.cu). Hopper: one bulk prefetch (the copy engine); before
 * it one prefetch per 128-byte line. */
__device__ __forceinline__ void gpu_l2_prefetch(const void *row, unsigned from, unsigned to)
{
    if (to <= from) return;
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"((const char *)row + from),
                 "r"(to - from)
                 : "memory");
#else
    for (unsigned o = from; o < to; o += 128)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"((const char *)row + o));
#endif
}
/* chain_trace=1 (gpu/tuning.h): the decode chain's kernels stamp, in their first block, when it
 * started (i = 0) and when its gpu_pdl_wait returned (i = 1) into their launch's slot tr
 * (NULL: off); forward.cu hands out the slots and reports the split per op. */
__device__ __forceinline__ void gpu_chain_mark(unsigned long long *tr, int i)
{
    if (tr && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        tr[i] = gpu_globaltimer();
}
/* A mark inside a kernel's first block where a whole block reaches it (any thread may call). */
__device__ __forceinline__ void gpu_chain_mark_any(unsigned long long *tr, int i)
{
    if (tr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) tr[i] = gpu_globaltimer();
}
template <typename... KArgs, typename... Args>
static inline cudaError_t gpu_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t s, int pdl, Args... args)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

/* ---------------------------------------------------------------- model on the device */
struct gpu_dims {
    int H, L, n_heads, n_kv, hd, I, V;
    int qd, kvd, qkv; /* n_heads*hd, n_kv*hd, qd + 2*kvd */
    int hdp;          /* head_dim padded to the attention kernels' tile width (16/32/64/128) */
    int window;       /* sliding window, 0: none */
    float eps;
};

struct gpu_layer_w {
    h16 *w_qkv;  /* (qkv, H) */
    h16 *w_o;    /* (H, qd) */
    h16 *w_gu;   /* (2I, H) */
    h16 *w_down; /* (H, I) */
    float *b_qkv; /* (qkv) or NULL */
    float *attn_norm, *ffn_norm; /* (H) */
};

/* ---------------------------------------------------------------- paged KV (issue 20)
 * The KV of every sequence lives in blocks of GPU_KV_BLOCK positions from one pool per engine
 * (gpu/kv_pool.cu). Block size 128, because every kernel that reads the cache then finds each of
 * its key tiles inside one block, so a tile costs one table lookup and its rows stay one
 * contiguous run of 128 * head_dim h16 per (layer, KV head) (32 KB at head_dim 128: whole DRAM
 * pages, coalesced as the contiguous cache was):
 *   - FlexPrefill's 128-key blocks and the warp-specialized prefill kernel's 128-key tiles are
 *     exactly one block (one TMA box per tile, its coordinate the block id);
 *   - the mma.sync and one-warpgroup prefill kernels' 64-key tiles are half a block;
 *   - the decode attention's ranges start anywhere (keys / splits), so it looks up each key's
 *     block (one L1-resident table read per 16-byte load; its tiles are 8-32 keys).
 * The cost is the partial last block: at most 127 positions per sequence (16 MB on Llama-3-8B).
 * Layout: block-major, one block = (2, n_layers, n_kv, GPU_KV_BLOCK, hd) h16 (K of every layer,
 * then V), blocks at consecutive addresses of one reserved range (mapped as the pool grows). A
 * block is thus one contiguous run of bytes: copy-on-write, kv_block_save and kv_block_load are
 * single copies. Position p of layer l, KV head g of a sequence with table tbl:
 *   k + ((l * n_kv + g) * GPU_KV_BLOCK + row) * hd,  row = tbl[p / 128] * bstride + p % 128
 * with bstride = 2 * n_layers * n_kv * GPU_KV_BLOCK rows (one block) and v = k + n_layers *
 * n_kv * GPU_KV_BLOCK * hd: the contiguous cache's formula with cap = GPU_KV_BLOCK and the
 * position mapped through the table (gpu_kv_row). */
#define GPU_KV_SHIFT 7 /* log2 GPU_KV_BLOCK (gpu/gpu.h) */
static_assert(GPU_KV_BLOCK == 1 << GPU_KV_SHIFT, "the block is a power of two");

/* How keys map to rows: tbl NULL: row = key (a contiguous cache: the op tests' buffers). */
struct gpu_kv_map {
    const int *tbl;    /* block ids, device memory */
    long long bstride; /* rows of head_dim between consecutive block ids */
    int nblocks;       /* block ids in the pool (the TMA map's extent) */
    int pad_;
};
__device__ __forceinline__ long long gpu_kv_row(const gpu_kv_map &m, int key)
{
    return m.tbl ? (long long)m.tbl[key >> GPU_KV_SHIFT] * m.bstride + (key & (GPU_KV_BLOCK - 1))
                 : (long long)key;
}

/* One sequence as the kernels see it (device metadata). */
struct gpu_seq_dev {
    h16 *k, *v; /* layer 0, head 0, position 0 of K and V */
    int cap;     /* positions per (layer, head) row block */
    int pad_;
    gpu_kv_map map; /* positions -> rows (zero: contiguous) */
};

/* One sequence's block table (host, with its device copy). */
struct gpu_kv {
    int cap;     /* positions it may hold */
    int nslots;  /* table entries: ceil(cap / GPU_KV_BLOCK) */
    int n;       /* entries holding a block (positions [0, n * GPU_KV_BLOCK)) */
    int holder;  /* a prefix-cache holder (gpu_kv_hold) */
    int *blk;    /* (nslots) block ids */
    int *tbl_d;  /* (nslots) device copy */
    struct gpu_tls_kv *tls; /* AsyncTLS sparse decode state (gpu/tls.cu); NULL: never asked */
};

/* The pool (gpu/kv_pool.cu): block ids 0..total-1 at base + id * block_bytes. */
struct gpu_kv_pool {
    h16 *base;
    size_t block_bytes;
    int total;          /* ids (kv_budget / block_bytes) */
    int mapped;         /* ids with memory behind them (the range is mapped as the pool grows) */
    int used, cached;   /* ids referenced; of which by holders only */
    int *ref, *live;    /* per id: references, and references by non-holders */
    int *free_ids;      /* a stack of ids free to take */
    int n_free;
    int next_id;        /* ids below it have been handed out before */
    /* the address range (CUDA virtual memory management) and its mapped chunks */
    unsigned long long va, va_bytes, chunk_bytes;
    unsigned long long *chunks; /* allocation handles, (va_bytes / chunk_bytes) */
    int n_chunks;
    int vmm;            /* 0: one cudaMalloc of the whole pool (no VMM entry points) */
    int ipc;            /* block ids per chunk (chunks of whole blocks); 0: chunks are not lent */
    void *mu;           /* pthread_mutex_t: kv_usage may come from any thread */
    int *stage_h;       /* pinned staging of table uploads (reset at each entry) */
    /* stage_n: entries staged since the compute stream was last known done (gpu_finish) */
    int stage_cap, stage_n;
};

/* Per-call metadata: one pinned host block and its device copy, uploaded with one copy. */
struct gpu_meta_layout {
    size_t ids, pos, seq, tbl, rows, seqs, inv, bytes; /* byte offsets */
};

#define GPU_EXPORT_RING 2    /* device slots the export quantizer alternates between */
#define GPU_EXPORT_AHEAD 3   /* the host stays at most this many layers ahead of the copies */
#define GPU_LOGIT_ROWS 256   /* logits computed per lm_head GEMM (all_logits in sub-batches) */
#define GPU_LOGIT_CHUNK_MIN 8 /* decode batches from this size take logits_chunks (forward.cu) */
#define GPU_DECODE_SPLIT_MAX 64
#ifndef GPU_DECODE_CLUSTER /* (overridable at build time, for measurements) */
#define GPU_DECODE_CLUSTER 16 /* ranges per row in the cluster form of the decode attention */
#endif
#define GPU_CHAIN_SLOTS 1024  /* chain trace: launches of a pass traced (the last: the stamps) */
#define GPU_CHAIN_STAMPS 8    /* per slot: start, wait returned, kernel-specific marks */
#define GPU_ATRACE_BLOCKS 1024 /* chain trace: the decode attention's blocks stamped per layer */
#define GPU_ATRACE_STAMPS 8    /* ... start, wait returned, range computed, done; the merging
                                * block's merge: copies issued, weights, first piece, merged */
#define GPU_PROF_EVENTS 8192 /* a 128K sparse prefill marks ~10 ops x 16 chunks x 32 layers */
#define GPU_PROF_CATS 15

struct gpu_engine {
    int index;
    char desc[96];
    const model *m;
    gpu_dims d;
    int sms;
    double mem_bps; /* peak memory bandwidth (gpu_mem_bps of the device's clock and bus) */
    gpu_tuning tune; /* the settings it was opened with (gpu/tuning.h), read once */
    /* what runs, picked at open from the settings and what the device and model have: */
    int sm90;      /* prefill attention on wgmma (this build and GPU have it; head_dim 128, or
                    * attn=wgmma) */
    int fa_warps;  /* warps per block of the mma.sync prefill attention: 4, or 8 (attn=mma8) */
    int sparse_warps; /* the same for its block-sparse form; 0: by prompt length (forward.cu) */
    int sparse_ws;    /* block-sparse attention on the warp-specialized kernel (sm90, head_dim 128) */
    int prune_off; /* prefill's last layer carries every row through attention and MLP (prune=0) */
    int pdl;       /* the decode chain's kernels with programmatic dependent launch (Hopper) */
    int fused;     /* single-token decode through decode_fused.cu */
    int gemv_off;  /* cuBLAS for single-token projections too (gemv=0) */
    int gemv_per_sm; /* resident blocks of the GEMV kernel per SM (gemm.cu, at its first launch) */
    int dec_mma; /* the decode attention's ranges on the tensor cores */
    int dec_rows; /* ... and its rows form for batches of one-range rows (attn_decode.cu) */
    int logits_chunks; /* a batched step's lm_head in this many column chunks after the graph,
                        * each copied to the host on the copy stream as the next computes
                        * (forward.cu gpu_decode; 1: in the graph) */
    cudaEvent_t lg_ev[GPU_LOGIT_CHUNKS_MAX]; /* the chunks' "computed" events */
    int argmax;        /* accel_decode_argmax on the device (argmax=1; forward.cu) */
    int32_t *argmax_d, *argmax_h; /* (GPU_MAX_BATCH) its tokens on the device, pinned on the host */
    int graphs_off; /* graphs=0, profile=1, or a capture failed: decode without CUDA graphs */
    cudaGraphExec_t *dec_graph; /* [3][GPU_MAX_BATCH + 1]: the decode step for n sequences, with
                                 * the split decode attention, with its cluster form, and with
                                 * AsyncTLS's sparse attention (gpu/tls.cu) */
    int dec_cluster;     /* the cluster form of the decode attention runs (Hopper, head_dim 128) */
    int dec_cluster_max; /* ... for steps whose longest row has at most this many keys */
    /* traces (profile=1, chain_trace=1): */
    int prof;      /* time every op (forward.cu; decode without graphs) */
    cudaEvent_t *prof_ev; /* [GPU_PROF_EVENTS] */
    int prof_cat[GPU_PROF_EVENTS], prof_n;
    double prof_ms[2][GPU_PROF_CATS]; /* [prefill, decode][op] */
    long prof_passes[2];
    unsigned long long *ctrace; /* chain trace: GPU_CHAIN_SLOTS x GPU_CHAIN_STAMPS */
    int ctrace_n;               /* slots handed out in this pass */
    unsigned long long *atrace; /* ... and every attention block: L x GPU_ATRACE_BLOCKS x _STAMPS */
    int ctrace_passes;
    cudaEvent_t tev[4];      /* ... and the decode step's phases: start, graph in, graph done, logits out */
    double tstep[4][64];     /* host step, H2D + graph to its end, logits copy, host before the sync */
    int tsteps;
    /* a lab variant of the single-token decode layers (gpu/bench/, built into the lab plugin
     * only: gpu_lab_open below); NULL in the serving plugin */
    int (*lab_decode)(gpu_engine *e, const int *seq_idx, const int *pos, const gpu_seq_dev *seqs);
    void *lab;     /* its state */
    cudaStream_t compute, copy;
    cublasHandle_t blas;
    void *blas_ws;
    size_t blas_ws_bytes;
    struct gpu_gemm_picks *gt; /* the decode batches' cuBLASLt picks (gemm_tune.cu); NULL: off */

    /* weights */
    gpu_layer_w *layers; /* host array of device pointers */
    h16 *embed;         /* (V, H) */
    h16 *lm_head;       /* (V, H), == embed when tied */
    float *norm;         /* (H) */
    float *inv_freq0;    /* host: head_dim/2, the static rope table (dynamic: recomputed per call) */

    /* workspace */
    int t_max;
    float *x;      /* (t_max, H) residual stream */
    h16 *xb;      /* (t_max, H) normalized */
    float *qkv;    /* (t_max, qkv) */
    h16 *q;       /* (t_max, qd) after rope */
    h16 *att;     /* (t_max, qd) attention output */
    h16 *gu;      /* (t_max, 2I) */
    h16 *h;       /* (t_max, I) */
    float2 *rope;  /* (t_max, hd/2) cos, sin */
    h16 *xn;      /* (GPU_LOGIT_ROWS, H) */
    float *logits; /* (GPU_LOGIT_ROWS, V) */
    float *part_o; /* decode split-K partials (slots, hdp) */
    float2 *part_ml; /* (slots) running max (log2 domain) and sum */
    int *part_cnt;   /* (GPU_MAX_BATCH * n_heads) ranges finished per row, zero between steps;
                        NULL: the two-kernel decode attention (decode_attn=two) */
    size_t part_slots;
    gpu_meta_layout ml;
    unsigned char *meta_h, *meta_d;

    /* export */
    size_t exp_slot_bytes;               /* one layer's K+V values and scales for t_max tokens */
    unsigned char *exp_d[GPU_EXPORT_RING];
    unsigned char *exp_h;                /* pinned, n_layers slots */
    size_t exp_h_bytes;
    float *logits_h;      /* pinned staging of the decode step's logits (grown to n rows) */
    size_t logits_h_bytes;
    cudaEvent_t *ev_quant, *ev_copy0, *ev_copy1; /* per layer */
    cudaEvent_t ev_t0, ev_t1;
    gpu_export_stats stats;

    /* import staging */
    unsigned char *imp_d;
    size_t imp_bytes;

    /* host-tier block loads queued by gpu_kv_block_load, copied at the next entry (kv_xfer.cu) */
    struct gpu_kv_load *loads;
    int n_loads, loads_cap;
    int load_next;        /* the overlapping prefill: layers whose copies are queued */
    cudaEvent_t *ev_load; /* per layer (created at the first load) */

    /* sparse prefill: blocks computed per layer (the last entry of its CSR row_ptr), pinned */
    int *nnz_h; /* (n_layers) */

    uint64_t kv_budget, kv_per_token;
    gpu_kv_pool pool;
    struct gpu_tls *tls; /* AsyncTLS sparse decode (gpu/tls.cu); NULL: no channel file */
};

/* ---------------------------------------------------------------- pieces (see each .cu) */
int gpu_weights_upload(gpu_engine *e, char *err, size_t errlen); /* weights.cu */
void gpu_weights_free(gpu_engine *e);

/* gemm.cu: out (T, N) = x (T, K) · W^T (W row-major (N, K)), float32 accumulation.
 * out_f32: float32 output, beta 0 or 1 (1 adds into out: the residual); else h16 output. */
/* The next chain-trace slot (2 stamps) for a launch of the decode chain, NULL when not tracing. */
unsigned long long *gpu_chain_slot(gpu_engine *e);
/* chain_trace.cu: the pass's start (which = 0) and end (1) stamps; the report at engine exit;
 * one decode step's host and event times (h0 at its start, h1 before its sync). */
int gpu_chain_stamp(gpu_engine *e, int which);
void gpu_chain_report(gpu_engine *e);
void gpu_chain_step(gpu_engine *e, const struct timespec *h0, const struct timespec *h1);
/* gemm.cu: out = x · W^T (+ beta out). l2pf: with the single-token GEMV under PDL, bytes of each
 * warp's first row requested into L2 before the wait (gpu_l2_prefetch; the o projection's). */
int gpu_gemm(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
             int out_f32, float beta, int l2pf = 0);
/* gemm.cu: out (T rows of ldc floats, columns 0..N-1) = x · W^T, float32, by cuBLAS (a column
 * range of the lm_head: forward.cu logits_overlapped). */
int gpu_gemm_cols(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, float *out, int ldc);
/* gemm_tune.cu (gemm_tune=1): at open, after the workspace, time cuBLASLt's heuristic candidates
 * for the decode batches' projections; freed with the engine. gpu_gemm_tuned runs one call on
 * its pick: 0 done (or a negative status), 1 not tuned (the caller runs the default). */
int gpu_gemm_tune_open(gpu_engine *e);
void gpu_gemm_tune_free(gpu_engine *e);
int gpu_gemm_tuned(gpu_engine *e, int T, int N, int K, const h16 *W, const h16 *x, void *out,
                   int out_f32, float beta, int ldc);
/* For the tests: heuristic candidate `cand` of this shape (as gpu_gemm_tuned asks for them) run
 * once on the null stream, synchronized; *n_cands their number, *splitk its split of K. */
int gpu_gemm_lt_candidate(int T, int N, int K, int ldc, int out_f32, float beta, const h16 *W,
                          const h16 *x, void *out, void *ws, size_t ws_bytes, int cand, int *n_cands,
                          int *splitk);
/* The o projection's l2pf in the decode chain of short rows: whole rows (gpu_l2_prefetch_end caps
 * it at the row). */
#define GPU_L2PF_O 65536

/* cpu_swiglu's arithmetic: silu(g) * u with silu(g) = g / (1 + expf(-g)), accurate expf and
 * division (no fast-math), no FMA. */
__device__ __forceinline__ float gpu_silu_mul(float g, float u)
{
    return __fmul_rn(g / (1.0f + expf(-g)), u);
}

/* decode_fused.cu: the T = 1 step's RMSNorm + QKV + bias + rope + cache write, and RMSNorm +
 * gate/up + SwiGLU, each one kernel with the unfused kernels' bits (see the file). x is the
 * float32 residual row, norm its RMSNorm weights, rope the token's (cos, sin) row; q (qd) h16;
 * h (I) h16. gpu_fused_ok: the shapes they take (H % 8 == 0, H <= GPU_FUSED_MAX_H). */
#define GPU_FUSED_MAX_H 16384 /* the normalized row is kept in shared memory (2 H bytes) */
int gpu_fused_ok(const gpu_dims *d);
int gpu_qkv_fused(cudaStream_t s, int pdl, int sms, const gpu_dims *d, int layer, const h16 *w,
                  const float *bias, const float *x, const float *norm, const float2 *rope,
                  const int *seq_idx, const int *pos, const gpu_seq_dev *seqs, h16 *q, unsigned long long *tr = nullptr,
                  int balanced = 0);
/* balanced (gpu_qkv_fused): the grid that gives every warp the same number of items (fewer
 * blocks), which leaves room for the split-form decode attention's blocks to start early. */
int gpu_gu_fused(cudaStream_t s, int pdl, int sms, const gpu_dims *d, const h16 *w, const float *x,
                 const float *norm, h16 *h, unsigned long long *tr = nullptr);

/* The lab plugin (gpu/bench/: the serving plugin's objects plus the lab's) defines these; the
 * serving plugin does not, and the engine skips them (weak references, NULL there). gpu_lab_open
 * runs at the end of the engine's open, before the KV budget is taken (it may take device memory,
 * set e->lab_decode and e->lab; a non-zero status fails the open); gpu_lab_free when the engine is
 * freed. e->lab_decode(e, seq_idx, pos, seqs) then runs a single-token decode step's layers (up to
 * the final norm) in place of the chain; seq_idx, pos, seqs: the step's metadata (device). */
extern "C" int gpu_lab_open(gpu_engine *e) __attribute__((weak));
extern "C" void gpu_lab_free(gpu_engine *e) __attribute__((weak));

/* kernels.cu */
int gpu_embed(cudaStream_t s, const h16 *table, const int *ids, int T, int H, float *x);
/* gpu_embed and gpu_rope_table (below) in one launch (the same values). */
int gpu_embed_rope(cudaStream_t s, const h16 *table, const int *ids, int T, int H, float *x,
                   const int *pos, const int *tbl, const float *inv, int half, float2 *rope);
int gpu_rmsnorm(cudaStream_t s, const float *x, const int *rows, const float *w, int T, int H,
                float eps, h16 *out);
int gpu_rope_table(cudaStream_t s, const int *pos, const int *tbl, const float *inv, int T,
                   int half, float2 *out);
int gpu_rope_qkv(cudaStream_t s, const gpu_dims *d, int layer, int T, const float *qkv,
                 const float *bias, const float2 *rope, const int *seq_idx, const int *pos,
                 const gpu_seq_dev *seqs, h16 *q, float *kf, float *vf);
int gpu_swiglu(cudaStream_t s, const h16 *gu, int T, int I, h16 *h);
/* logits.cu: out[r] = model_sample_argmax of row r of x (rows x V floats, row-major), exactly */
int gpu_argmax_rows(cudaStream_t s, const float *x, int rows, int V, int32_t *out);
/* overflow: device flag set to 1 when a finite value rounds to infinity (NULL: not checked) */
int gpu_convert_to_h16(cudaStream_t s, const void *src, int dtype, size_t n, h16 *dst,
                       int *overflow);
int gpu_convert_to_f32(cudaStream_t s, const void *src, int dtype, size_t n, float *dst);

/* attn_prefill.cu: causal attention of T query rows (positions pos0..pos0+T-1) of one sequence
 * against its keys 0..pos0+T-1 in the cache (layer base pointers k, v; cap positions per head). */
int gpu_attn_prefill(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                     const h16 *k, const h16 *v, int cap, h16 *out, int warps,
                     const gpu_kv_map *map = nullptr);
/* A block-sparse pattern (gpu/gpu_flex.h's index, device memory): for head h and query block r
 * of 128 positions, the 128-key blocks col[row_ptr[h * (nb + 1) + r] .. row_ptr[.. + r + 1]),
 * ascending, none above the diagonal block r (which FlexPrefill always keeps). */
struct gpu_block_list {
    const int32_t *row_ptr, *col;
    int nb; /* query blocks per head (at least ceil((pos0 + T) / 128)) */
};
/* The general form: key j of KV head g at k + g * k_head + j * k_tok (elements; v alike); query
 * head h reads KV head h % n_kv when interleave, else h / (n_heads / n_kv); bl NULL: dense
 * causal, else only the listed blocks (then pos0 must be a multiple of 128). */
int gpu_attn_prefill_ex(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                        const h16 *k, const h16 *v, size_t k_tok, size_t k_head, int interleave,
                        const gpu_block_list *bl, h16 *out, int warps,
                        const gpu_kv_map *map = nullptr);
/* attn_prefill_sm90.cu: the same on Hopper's wgmma (head_dim <= 128); only when
 * gpu_attn_sm90_available(device) says this build and GPU have it (1 yes, 0 no, < 0 error).
 * head_dim 128 takes the warp-specialized kernel (attn_prefill_ws.cu, 2 stages, ping-pong),
 * other head_dims the one-warpgroup kernel. _ex picks a variant (tests, benchmarks). */
enum {
    GPU_SM90_AUTO = 0,   /* what gpu_attn_prefill_sm90 does */
    GPU_SM90_ONE_WG = 1, /* one warpgroup, core-matrix layout, cp.async (any head_dim <= 128) */
    GPU_SM90_WS = 2,     /* warp-specialized, 2 stages, ping-pong (head_dim 128) */
    GPU_SM90_WS_NOPP = 3, /* the same without the ping-pong */
    GPU_SM90_WS_3ST = 4, /* 3 stages, ping-pong */
};
/* A short chunk's keys split over blocks (attn_prefill_ws.cu, flash-decoding style): where heads x
 * query tiles would not fill the SMs and the keys are long, each block takes a range of the key
 * tiles of its (head, query tile) and writes its unnormalized O and row max/sum here; a merge
 * kernel writes the output. rows: the workspace's capacity in rows of 128 (o: rows x 128 floats,
 * ml: rows); gpu_attn_split_rows(sms) is the most the automatic choice uses. NULL or rows 0: never
 * split. force > 0: exactly that many splits (tests, benchmarks; ACCEL_ERR_INVALID where the
 * workspace cannot hold them). */
struct gpu_attn_split {
    float *o;
    float2 *ml;
    size_t rows;
    int sms;
    int force;
};
size_t gpu_attn_split_rows(int sms);
/* the splits a head_dim-128 launch of T rows at pos0 would take (1: none; 0: a forced count that
 * does not fit) */
int gpu_attn_split_count(const gpu_attn_split *sp, const gpu_dims *d, int T, int pos0);
/* the engine's: the decode partials' buffers (sized at open for gpu_attn_split_rows too; the
 * same stream, never in use by a decode while a prefill runs), off with gpu_tune prefill_split=0 */
static inline gpu_attn_split gpu_engine_split(const gpu_engine *e)
{
    gpu_attn_split sp = {e->part_o, e->part_ml, 0, e->sms, 0};
    if (e->tune.prefill_split && e->d.hdp == 128) sp.rows = e->part_slots;
    return sp;
}
int gpu_attn_prefill_sm90(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                          const h16 *k, const h16 *v, int cap, h16 *out,
                          const gpu_kv_map *map = nullptr, const gpu_attn_split *sp = nullptr);
int gpu_attn_prefill_sm90_ex(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                             const h16 *k, const h16 *v, int cap, h16 *out, int variant,
                             const gpu_kv_map *map = nullptr, const gpu_attn_split *sp = nullptr);
int gpu_attn_sm90_available(int device);
/* attn_prefill_ws.cu: the warp-specialized kernel (variant: 0 two stages with ping-pong, 1 two
 * stages without, 2 three stages with); usable when head_dim is 128, the pointers 16-byte
 * aligned and the driver gives cuTensorMapEncodeTiled. */
int gpu_attn_ws_usable(const gpu_dims *d, const h16 *q, const h16 *k, const h16 *v, int cap);
int gpu_attn_prefill_ws(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                        const h16 *k, const h16 *v, int cap, h16 *out, int variant,
                        const gpu_kv_map *map = nullptr, const gpu_attn_split *sp = nullptr);
/* Its general form, gpu_attn_prefill_ex's contract (strides, interleave, bl NULL: dense causal,
 * else only the listed blocks, pos0 a multiple of 128): ACCEL_ERR_UNSUPPORTED where the kernel
 * cannot run (head_dim not 128, no tensor-map encoder, bases or strides not 16-byte aligned). */
int gpu_attn_prefill_ws_ex(cudaStream_t s, const gpu_dims *d, int T, int pos0, const h16 *q,
                           const h16 *k, const h16 *v, size_t k_tok, size_t k_head, int interleave,
                           const gpu_block_list *bl, h16 *out, int variant,
                           const gpu_kv_map *map = nullptr, const gpu_attn_split *sp = nullptr);
/* attn_decode.cu: one query row per token t (position pos[t] of sequence seqs[seq_idx[t]]),
 * split-K over its keys 0..pos[t]; part_* hold at least gpu_attn_decode_slots() entries. The
 * launch depends on T only (each token splits its own keys in the kernel), so a captured CUDA
 * graph stays valid as the sequences grow. one_row: every token is the only new row of its
 * sequence in this pass (decode, not a prefill chunk), so with PDL the keys below it may be read
 * before the kernel before has finished. */
int gpu_attn_decode(cudaStream_t s, int pdl, int one_row, int cluster, const gpu_dims *d, int sms,
                    int layer, int T, const h16 *q, const int *seq_idx, const int *pos,
                    const gpu_seq_dev *seqs, float *part_o, float2 *part_ml, int *part_cnt, h16 *out,
                    unsigned long long *tr = nullptr, unsigned long long *btr = nullptr, int mma = 0,
                    int rows = 0);
/* btr: the chain trace's per-block stamps of the one-kernel forms (attn_decode.cuh d2_bmark);
 * mma = 1 (head_dim 128): the one-kernel forms' ranges on the tensor cores (attn_decode.cuh
 * d2_mma_range); rows = 1 (with mma, where each row is one range: the batches of 33+ sequences
 * with 8 KV heads): the rows form, k_decode_rows (attn_decode.cu). */
/* cluster = 1 (where gpu_attn_decode_cluster_ok): the cluster form for short rows — each row's
 * keys in GPU_DECODE_CLUSTER ranges, one thread-block cluster per (token, KV head slice), merged
 * through distributed shared memory instead of global partials (part_* unused); built for
 * latency, it loses to the split form once rows are long (forward.cu picks by context). */
int gpu_attn_decode_cluster_ok(const gpu_dims *d);
/* Whether a decode attention of T tokens with mma = 1 and rows = 1 takes the rows form here. */
int gpu_attn_decode_rows_ok(const gpu_dims *d, int sms, int T);
size_t gpu_attn_decode_slots(const gpu_dims *d, int sms, int n_tokens);

/* kv_quant.cu: x (T, n_kv, hd) float32 -> proto/kv.h bytes and fp16 scales. */
int gpu_kv_quantize(cudaStream_t s, enum proto_kv_dtype t, const float *x, int T, int n_kv, int hd,
                    unsigned char *q, unsigned short *scales);
/* The same from one layer of the cache (cache: its head-0 base, cap positions per head, map the
 * block table): positions pos0 .. pos0 + T - 1, their h16 values widened to float32. */
int gpu_kv_quantize_cache(cudaStream_t s, enum proto_kv_dtype t, const h16 *cache, int cap,
                          const gpu_kv_map *map, int pos0, int T, int n_kv, int hd,
                          unsigned char *q, unsigned short *scales);
/* q/scales (T, n_kv, ...) -> h16 cache rows at positions pos0.. of one layer (k: head 0 base). */
int gpu_kv_dequantize(cudaStream_t s, enum proto_kv_dtype t, const unsigned char *q,
                      const unsigned short *scales, int T, int n_kv, int hd, h16 *cache, int cap,
                      int pos0, const gpu_kv_map *map = nullptr);

/* kv_pool.cu: a buffer lent from the pool for one call (whole chunks of free blocks, counted as
 * used, mapped again at ptr: gpu_pool_lend). NOMEM when the pool has too few free chunks (the
 * caller's admission answer, as for KV); UNSUPPORTED when the pool cannot lend (no VMM, or
 * chunks that are not whole blocks): the caller allocates elsewhere. */
struct gpu_lend {
    void *ptr;
    unsigned long long va, bytes; /* the range: chunks of the pool's chunk_bytes */
    int *chunk;                   /* the pool's chunk indices lent */
    int n;                        /* chunks mapped at va */
};
int gpu_pool_lend(gpu_engine *e, size_t bytes, gpu_lend *l);
void gpu_pool_unlend(gpu_engine *e, gpu_lend *l);
/* kv_pool.cu: the pool (at open, after the KV budget is known; at free) */
int gpu_pool_open(gpu_engine *e);
void gpu_pool_close(gpu_engine *e);
/* The kernels' view of kv (its device table over the pool). */
gpu_seq_dev gpu_kv_seq_dev(const gpu_engine *e, const gpu_kv *kv);
/* Before positions [pos0[i], pos0[i] + n[i]) of kvs[i] (i < count) are written: the blocks they
 * need taken, a shared block among them replaced by a private copy, the device tables updated
 * (all queued on e->compute). All or nothing: ACCEL_ERR_NOMEM with every table unchanged when
 * the pool cannot supply them. Table uploads go through a pinned stage that each entry resets
 * (gpu_kv_stage_reset) before its first reserve. */
int gpu_kv_reserve(gpu_engine *e, int count, gpu_kv *const *kvs, const int *pos0, const int *n);
int gpu_kv_stage_reset(gpu_engine *e);

/* tls.cu: AsyncTLS sparse decode (gpu/gpu.h has the contract). Before a decode step of n
 * sequences: each sequence's mode for the step, its summaries brought up to date (rebuilt from
 * the cache where they lag), the step's metadata uploaded (all queued on e->compute). 1 when
 * some sequence decodes sparse in this step, 0 when none does, or a status. */
int gpu_tls_prepare(gpu_engine *e, int n, gpu_kv *const *kvs, const int *pos);
/* The sparse form of one layer's decode attention for the step gpu_tls_prepare answered 1 for:
 * the newest key's summaries, the level-1 scores, both top-k levels and the attention over the
 * kept tokens into out (T rows of qd, h16). Graph-capturable (launches depend on T only). */
int gpu_tls_layer(gpu_engine *e, int layer, int T, const h16 *q, const int *pos,
                  const gpu_seq_dev *seqs, h16 *out);
/* layers below it stay dense (the engine's default parameters) */
int gpu_tls_dense_layers(const gpu_engine *e);
void gpu_tls_close(gpu_engine *e);
void gpu_kv_tls_free(gpu_kv *kv);
/* a fork inherits src's parameters; truncation forgets summaries past len */
void gpu_kv_tls_fork(gpu_kv *dst, const gpu_kv *src);
void gpu_kv_tls_truncate(gpu_engine *e, gpu_kv *kv, int len);

/* kv_xfer.cu: the KV export of a run of positions of one sequence, layer by layer (forward.cu's
 * header says how the streams and events interleave). Each layer's rows are quantized from the
 * cache (gpu_kv_quantize_cache), so an export at prefill and a later one of the same positions
 * give the same bytes. */
struct gpu_export_run {
    const accel_kv_sink *sink;
    enum proto_kv_dtype dt;
    int T, pos0;
    gpu_seq_dev sq;      /* the sequence's cache */
    size_t vb, sc, used; /* bytes: K (or V) values, K (or V) scales, one layer in all */
    size_t vb1, sc1;     /* the same for one token (rows are token-major: a chunk's offset) */
    int host_ring;       /* 0: a host slot per layer; k: layer l in slot l % k (sparse prefill) */
    unsigned char *dslot[GPU_EXPORT_RING]; /* device slots for T tokens (NULL: e->exp_d) */
    int next;            /* next layer to hand to the sink */
};
void gpu_export_init(gpu_export_run *x, const gpu_engine *e, const gpu_kv *kv,
                     const accel_kv_sink *sink, enum proto_kv_dtype dt, int T, int pos0);
/* Rows c0 .. c0 + T - 1 of the run, layer l (in the cache already), quantized into the layer's
 * device slot (compute stream; the first rows wait for the slot's previous copy). */
int gpu_export_quantize(gpu_engine *e, gpu_export_run *x, int l, int c0, int T);
/* Layer l's device-to-host copy (copy stream) behind its quantization. */
int gpu_export_copy(gpu_engine *e, gpu_export_run *x, int l);
int gpu_export_enqueue(gpu_engine *e, gpu_export_run *x, int l); /* both, all T rows */
/* Hands finished layers (up to `queued`) to the sink; blocks only for layers more than
 * GPU_EXPORT_AHEAD behind, or for all when draining. */
int gpu_export_poll(gpu_engine *e, gpu_export_run *x, int queued, int drain);
int gpu_export_host_grow(gpu_engine *e, size_t bytes); /* the pinned host slots */
/* Waits for both streams; a failure there is a device fault whatever st was. */
int gpu_finish(gpu_engine *e, int st);
/* Host-tier loads (gpu_kv_block_load queues them; see kv_xfer.cu; gpu_kv_loads_settle: gpu.h).
 * gpu_kv_loads_for: 1 when loads are queued and all of them are kv's (a prefill of kv then
 * overlaps them: gpu_kv_loads_layer(e, l) at the head of layer l of its first pass queues that
 * layer's copies and makes the compute stream wait for them; gpu_kv_loads_end after the pass
 * queues what is left and forgets the queue). Between entries the queue holds loads not yet
 * queued on the device at all. */
void gpu_kv_loads_drop(gpu_engine *e, const gpu_kv *kv); /* kv's, forgotten (it is freed) */
int gpu_kv_loads_for(const gpu_engine *e, const gpu_kv *kv);
int gpu_kv_loads_layer(gpu_engine *e, int l);
int gpu_kv_loads_end(gpu_engine *e);
void gpu_kv_loads_free(gpu_engine *e);

/* forward.cu: the profile's report (stderr), called when the engine is freed */
void gpu_prof_report(gpu_engine *e);

/* engine.cu helpers */
size_t gpu_export_slot_bytes(const gpu_dims *d, enum proto_kv_dtype t, int T);

#endif
