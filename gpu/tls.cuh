/* gpu/tls.cuh — AsyncTLS sparse decode's kernels (gpu/tls.cu), as the engine and the test
 * library (gpu/test/tls_test_api.cu) launch them. sparse/tls.h is the reference: the same
 * summaries, the same scores in the same arithmetic order, the same top-k order.
 *
 * Per sequence (gpu_tls_dev, device memory), for positions 0 .. cap-1 and blocks 0 .. nbc-1 of
 * bs positions, per (layer l, KV head g):
 *   mm    (L, n_kv, nbc, 2, hd) h16  the block's channel max, then its min, of K as the cache
 *                                    holds it (h16: the max of h16 values is one of them, exact)
 *   code  (L, n_kv, cap, r / 2)      4-bit labels of the r selected channels (channel 2i in the
 *                                    low nibble), sparse_tls_put's rounding
 *   lab   (L, n_kv, cap) float2      the label's (min, step)
 *   prev  (L, n_kv, words)           the blocks kept at the step before (bit per block): the
 *                                    offload's difference, counted in cnt[2], cnt[3]
 *   cnt   [0] keys attended, [1] keys of the rows, [2] blocks kept that were not kept at the
 *         step before, [3] blocks kept, [4] attended keys the row cache held (an offloaded
 *         sequence's, not read over PCIe) — summed over sparse layers, KV heads and steps
 * An offloaded sequence's row cache (gpu/tls_off.cu; rct NULL: none, or not this step), in device
 * memory, per sparse layer and KV head rcs slots:
 *   rct   (L, n_kv, rcs) int         the position whose K / V row the slot holds (-1: none)
 *   rcr   (L, n_kv, rcs, 2, hd) h16  the slot's K row, then its V row
 * (both offset so that layer l, KV head g is at l * n_kv + g although only the sparse layers
 * have slots).
 * The staggered selection (sparse_tls_params.stagger, sparse/tls_pipe.h), in the summaries'
 * allocation, per (layer, KV head):
 *   sg    (L, n_kv, 2 + kmax) int    [0] |S_{t-1}|, [1] the blocks there were when it was chosen,
 *                                    then S_{t-1} ascending (kmax = GPU_TLS_MAX_CAND / bs)
 *   sa    (L, n_kv, 2, hd) float     the step's aggregated query Q+, then Q-, that level 1 of the
 *                                    next step's set is scored with (gpu_tls_next)
 * A staggered row (stagger 1) takes its candidate blocks from sg (S_{t-1} below the block that
 * was being filled when it was chosen, then that block and every later one) instead of level 1;
 * stagger 2 (the first step, or the first after a gap) runs level 1 now, as the exact form does,
 * and attends its set plus the newest block. Either way the layer saves Q+ / Q- in sa, and one
 * launch after the step's last layer (gpu_tls_next: a CTA per sparse layer, KV head and row)
 * scores level 1 for the next step and writes S_t into sg.
 *
 * One layer of a sparse decode step, T sequences (gpu_tls_attn_layer): one kernel, grid
 * (GPU_TLS_CLUSTER, n_kv, T) in thread-block clusters of GPU_TLS_CLUSTER CTAs of 512 or 256
 * threads, one cluster per (sequence, KV head). The CTA whose range holds the newest key's block
 * records its max / min and label; level 1 scores each CTA's range of blocks ([Q+ Q-] times
 * [M; m], 8 lanes per dot product as sparse_tls.c's dot8) into bscore; the top block_budget
 * blocks are chosen by a radix select, in every CTA from the whole score array (few blocks) or
 * with histograms summed across the cluster (distributed shared memory); every CTA gets the kept
 * blocks' list and their block-table entries; level 2 scores each CTA's range of the candidates
 * from the labels; the top token_budget tokens are chosen over the cluster -> idx (ascending);
 * the kept keys are spread evenly over the CTAs, each attends its share exactly (the group's
 * heads) and the CTAs' partials are merged through distributed shared memory. A dense row (cnt_idx = -n) attends keys 0 .. n-1,
 * an even share per CTA. Batches of 5 to 8 rows (where the clusters of 8 no longer fit at once)
 * take the same kernel in clusters of 2 CTAs of 512 threads (one wave at 8 rows of Llama-3-8B:
 * 128 CTAs); larger batches take the three kernels of gpu/tls_split.cu instead. A staggered
 * row's set (sg) and its blocks' table entries are read before the kernel's PDL wait. */
#ifndef TANDEM_GPU_TLS_CUH
#define TANDEM_GPU_TLS_CUH
#include "gpu/engine.cuh"

#define GPU_TLS_CLUSTER 8 /* CTAs per (sequence, KV head): one thread-block cluster */
#define GPU_TLS_CHUNKS 16 /* the three-kernel form: level-1 CTAs per (sequence, KV head) */
#define GPU_TLS_SPLITS 32 /* ... attention CTAs per (sequence, KV head) */
#define GPU_TLS_MAX_GROUP 16
#define GPU_TLS_PHASES 11 /* trace points of the one-kernel form */
#define GPU_TLS_RC_MAX 4096 /* the row cache's slots per (layer, KV head): token budgets up to it */

struct gpu_tls_dev {
    h16 *mm;
    unsigned char *code;
    float2 *lab;
    unsigned *prev;
    unsigned long long *cnt;
    int on; /* 0: this row attends densely in this step */
    int cap, nbc, words;
    int block_budget, token_budget;
    int *rct;  /* the row cache (above) */
    h16 *rcr;
    int rcs;
    int *sg;     /* the staggered selection's state (above) */
    float *sa;
    int stagger; /* 0: exact selection; 1: staggered; 2: staggered, its state restarts now */
    int kmax;    /* sg's list stride */
};

/* The shapes and the scratch one layer's launch needs. */
struct gpu_tls_cfg {
    int L, n_heads, n_kv, hd, bs, r;
    const unsigned short *ch; /* (L, n_kv, r) device: the channel of each label slot */
    int nb_max;               /* blocks per row bscore holds (<= GPU_TLS_MAX_CAND) */
    float *bscore;            /* (T, n_kv, nb_max) */
    int *idx;                 /* (T, n_kv, GPU_TLS_MAX_TOKENS) */
    int *cnt_idx;             /* (T, n_kv) */
    float *po;                /* the three-kernel form's partials: (T, n_heads, GPU_TLS_SPLITS, hd) */
    float2 *pml;              /* (T, n_heads, GPU_TLS_SPLITS) */
    int *arrive;              /* (T, n_kv), zero between launches */
    int *rslot;               /* (T, n_kv, GPU_TLS_RC_MAX) the three-kernel form's row cache: the
                                 listed key j's slot s (>= 0: its rows are there) or -1 - s (read
                                 them over PCIe and keep them in slot s) */
    int sms;                  /* the device's SMs (which form a launch takes) */
    unsigned long long *trace; /* NULL, or the one-kernel form's phases: the clock (ns) in the
                                  first cluster's first CTA at TLS_PHASES points (tls_kernels.cu) */
};

/* Summaries of positions [from, to) of one sequence, every layer, from its cache: the blocks
 * from floor(from / bs) rebuilt from their first position. Layers from `split` on read their
 * keys through hi (an offloaded sequence's host memory: gpu/tls_off.cu), the others through sq. */
int gpu_tls_rebuild(cudaStream_t s, const gpu_tls_cfg &c, const gpu_seq_dev &sq,
                    const gpu_tls_dev &t, int from, int to, const gpu_seq_dev *hi = nullptr,
                    int split = 1 << 30);
/* One layer for T rows: row i is position pos[i] of seqs[i] (its key already in the cache),
 * queries q (T, n_heads * hd) h16, out the same shape. tls: (T) device. */
int gpu_tls_attn_layer(cudaStream_t s, const gpu_tls_cfg &c, int layer, int T, const h16 *q,
                       const int *pos, const gpu_seq_dev *seqs, const gpu_tls_dev *tls, h16 *out,
                       int pdl = 0, int form = 0);
/* form: 0 the rule (the one-kernel form while its clusters fit on the SMs at once: T x n_kv x
 * GPU_TLS_CLUSTER <= 2 x sms, in CTAs of 512 threads while <= sms, else of 256; then, up to 8
 * rows, the one-kernel form in clusters of 2 CTAs of 512 threads while T x n_kv such clusters fit
 * at once (cudaOccupancyMaxActiveClusters; TANDEM_TLS_CL2=0: never); else the three kernels of
 * gpu/tls_split.cu, whose row cache serves offloaded rows), 1 the one-kernel form (its CTA size
 * by the rule, or TANDEM_TLS_THREADS=256 / 512), 2 the three kernels, 3 the three kernels with
 * the selection's CTAs of 512 threads, 4 / 5 the one-kernel form in CTAs of 256 / 512 threads,
 * 6 the one-kernel form in clusters of 2 CTAs of 512 threads. The same lists and scores either
 * way. sel_threads: the selection's CTA, 1024 or 512 threads; 0:
 * TANDEM_TLS_SEL_THREADS (1024 or 512), else 1024. Two CTAs of 512 fit on an SM, where one of
 * 1024 takes every register, so past the SMs' count of rows x KV heads (18 rows of Llama-3-8B:
 * 144 CTAs on 132 SMs) they would run in one wave instead of two; tested (select == CPU, the
 * engine bit for bit), its speed not measured yet (BENCHMARKS.md), so not the default. */
int gpu_tls_split_layer(cudaStream_t s, const gpu_tls_cfg &c, int layer, int T, const h16 *q,
                        const int *pos, const gpu_seq_dev *seqs, const gpu_tls_dev *tls, h16 *out,
                        int sel_threads = 0);
int gpu_tls_split_init(void);
/* After a step's layers l0 .. l1-1 (the staggered rows): level 1 of every sparse layer among
 * them, per KV head and row, with the query the layer saved in sa, selects the set the next step
 * attends (S_t into sg: sparse_tls_pipe_step's step 3). Rows not staggered are left alone. */
int gpu_tls_next_layers(cudaStream_t s, const gpu_tls_cfg &c, int l0, int l1, int dense_layers,
                        int T, const int *pos, const gpu_tls_dev *tls);
/* pdl: the one-kernel form launched with programmatic dependent launch (engine.cuh's rules:
 * before its wait the kernel reads only the step's rows and requests summaries into L2; it lets
 * the next kernel start at once, which reads the output only after its own wait). */
/* Once per device before the first launch (the selection's shared memory). */
int gpu_tls_kernels_init(void);
/* The pinned host pool an offloaded sequence's sparse layers live in (gpu/tls_off.cu), taken
 * when the engine opens (gpu_tuning.offload_pool_mb, or 3/4 of the host memory available then
 * when decode_sparse's default says offload=1) and mapped into the device's address space: pages
 * of GPU_KV_BLOCK positions, each the K then the V of every sparse layer and KV head (the KV
 * pool's block layout over layers split .. L-1), handed out all or none, so that a sequence that
 * finds too few pages stays in the KV pool, and the scheduler counts the pool's bytes
 * (accel_info.offload_bytes, offload_per_token) across requests. */
struct gpu_tls_hpool {
    char *h;              /* host address */
    h16 *dptr;            /* the device's view of h */
    size_t bytes, page_bytes;
    int npages, nfree;
    int *free_ids;        /* a stack of free pages (lowest on top at first) */
    int registered;       /* the memory's kind (gpu/tls_hmem.cuh): GPU_HMEM_REGISTER (1):
                             mmap'ed (huge pages advised), touched in parallel, then
                             cudaHostRegister'ed; GPU_HMEM_HOSTALLOC (0): one cudaHostAlloc; ... */
    double open_s;        /* seconds its allocation and pinning took */
    void *mu;             /* pthread_mutex_t */
};
/* 0, or ACCEL_ERR_NOMEM: a pool of `bytes` (whole pages) for the engine's shape. */
int gpu_tls_hpool_open(gpu_engine *e, size_t bytes);
void gpu_tls_hpool_close(gpu_tls_hpool *hp);
/* All n pages or none: 0, or ACCEL_ERR_NOMEM. */
int gpu_tls_hpool_take(gpu_tls_hpool *hp, int n, int *ids);
void gpu_tls_hpool_give(gpu_tls_hpool *hp, int n, const int *ids);

/* The engine's AsyncTLS state (gpu/tls.cu). */
struct gpu_tls {
    sparse_tls_params p; /* defaults; block_size, channels, dense_layers for every sequence */
    int on_default;
    gpu_tls_cfg c;       /* shapes and scratch (bscore .. arrive) */
    unsigned short *ch_d;
    gpu_tls_dev *meta_h, *meta_d; /* (GPU_MAX_BATCH) the step's rows */
    gpu_tls_hpool *hp;   /* the offload's host pool (NULL: none: offload requests stay in the
                            KV pool) */
};

/* One sequence's (gpu/tls.cu; the offload's fields: gpu/tls_off.cu). */
struct gpu_tls_kv {
    int on;
    int token_budget, block_budget, dense_below;
    int valid;  /* positions whose summaries are up to date */
    void *mem;  /* the summaries (dev.cap positions; NULL: none yet) */
    gpu_lend lend; /* mem's blocks lent by the KV pool (chunk NULL: mem is a cudaMalloc) */
    gpu_tls_dev dev;
    long long host_read, host_total, steps; /* dense layers and dense rows, counted here */
    /* offload (sparse_tls_params.offload): */
    int off_want;          /* move the KV to host memory at the next sparse step */
    int off;               /* moved: the pool holds none of its blocks */
    int *off_pages, off_np; /* its pages of the host pool (layers split .. L-1), in position
                             * order: page i holds positions [128 i, 128 i + 128) */
    void *off_d;           /* device memory: layers 0 .. split-1, K (layers, n_kv, cap, hd) then
                            * V, then the pages' table (off_np ints) */
    gpu_lend off_lend;     /* off_d's blocks lent by the KV pool (chunk NULL: a cudaMalloc) */
    gpu_seq_dev lo, hi;    /* the two as the kernels see them: lo contiguous (map zero), hi
                            * through the pages' table as a pool sequence's blocks */
    unsigned long long cnt0_off; /* cnt[0] when it moved (the host keys are counted from it) */
    unsigned long long hit0_off; /* cnt[4] then */
    int rc_slots;          /* its row cache's slots per sparse layer and KV head (0: none): in
                            * off_d after the table; rows of positions that a truncation can
                            * rewrite: rc_reset empties it before the next step */
    int rc_reset;
    int *rc_t0;            /* the table's first slot (layer split) */
    h16 *rc_r0;            /* the rows' */
    long long host_keys;   /* keys read from host memory by rows the sparse kernel took dense */
    int stagger;           /* the staggered selection (sparse_tls_params.stagger) */
    int pipe_len;          /* its state follows positions 0 .. pipe_len-1: the step at pos
                            * continues it only when pos == pipe_len (else it restarts) */
};

/* The end of a decode step's layers l0 .. l1-1 that gpu_tls_prepare answered 1 for: the
 * staggered rows' next sets (gpu_tls_next_layers). Graph-capturable. */
int gpu_tls_step_end(gpu_engine *e, int l0, int l1, int T, const int *pos);
/* The side stream's launches of this step (gpu_tls_layer) joined into the compute stream, if
 * any: gpu_tls_step_end's join, and the error path of a step's layers (forward.cu), so that no
 * fork outlives its step or its graph capture. gpu_tls_capture_end: a capture has ended (a
 * failed one's fork is gone with it). */
int gpu_tls_join(gpu_engine *e);
void gpu_tls_capture_end(gpu_engine *e);

/* Moves kv's positions [0, n) out of the pool: layers from gpu_tls_dense_layers on into pages
 * of the host pool (its whole capacity's), which the kernels read in place (mapped), the dense
 * layers into device memory of its own; then releases its pool blocks. ACCEL_ERR_NOMEM (nothing
 * changed) when either memory is short or the engine has no host pool. Its summaries stay as
 * they were (valid up to where they were: the same keys). */
int gpu_tls_offload(gpu_engine *e, gpu_kv *kv, gpu_tls_kv *t, int n);
void gpu_tls_off_free(gpu_engine *e, gpu_tls_kv *t);
/* Device memory of a sequence's AsyncTLS state outside its KV blocks (summaries, an offloaded
 * sequence's dense layers): lent by the KV pool (gpu_pool_lend: it counts against the pool's
 * budget, as KV does) where the pool lends, else cudaMalloc'ed. 0 or ACCEL_ERR_NOMEM. */
int gpu_tls_mem_take(gpu_engine *e, size_t bytes, void **mem, gpu_lend *l);
void gpu_tls_mem_give(gpu_engine *e, void *mem, gpu_lend *l);
/* Before gpu_kv_tls_free: what the sequence holds of the pool and of host memory (kv_pool.cu's
 * gpu_kv_free). */
void gpu_kv_tls_release(gpu_engine *e, gpu_kv *kv);
/* A sequence whose KV was offloaded: 1 and its two views (either may be NULL): lo for layers
 * below gpu_tls_off_split, hi from it on; 0 for a sequence in the pool (kv_pool.cu, forward.cu
 * and kv_xfer.cu ask). */
int gpu_kv_offloaded(const gpu_kv *kv);
int gpu_kv_off_seqs(const gpu_kv *kv, gpu_seq_dev *lo, gpu_seq_dev *hi);
int gpu_tls_off_split(const gpu_engine *e);

/* Bytes of one sequence's summaries for cap positions. */
size_t gpu_tls_seq_bytes(const gpu_tls_cfg &c, int cap);
/* Carves a zeroed allocation of gpu_tls_seq_bytes into t (cap positions). */
void gpu_tls_seq_carve(const gpu_tls_cfg &c, void *mem, int cap, gpu_tls_dev *t);

#endif
