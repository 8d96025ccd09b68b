/* scheduler/accel.h — the one device interface every backend implements (cpu, cuda, fpga).
 *
 * A device (accel_dev) holds one model's weights, loaded once when it is opened. A sequence
 * (accel_seq) is one request's state on that device: its KV cache for up to `capacity`
 * positions, reserved (and counted against the device's memory) when the sequence is created.
 *
 *   devices_open("cpu" | "cuda:0" | "fpga-emu:1" | "fpga:0", model, opts)  weights -> device
 *                                        (devices/devices.h, the composition root: the one
 *                                        module that knows the backends by name)
 *   accel_seq_new(dev, capacity)         reserve KV; ACCEL_ERR_NOMEM is an admission answer
 *   accel_prefill(dev, req)              append tokens (a whole prompt or a chunk of it):
 *                                        logits, and optionally the quantized KV, layer by layer
 *   accel_kv_import(dev, seq, layer)     fill a sequence from KV another device exported
 *                                        (accel_kv_import_crc: with the producer's CRC)
 *   accel_decode(dev, n, seqs, ids, logits)  one step for n sequences (continuous batching)
 *                                        (accel_decode_argmax: with the greedy tokens picked
 *                                        on the device, only the logits rows wanted moved)
 *   accel_seq_free(dev, seq)             release its memory
 *
 * Threads: a device is driven by one thread at a time (the scheduler's worker for it); calls on
 * one device must not overlap. accel_get_info() may be called from any thread at any time.
 *
 * Errors: functions return ACCEL_OK (0) or a negative ACCEL_ERR_*; accel_strerror() names it.
 * ACCEL_ERR_DEVICE marks the device FAILED (sticky): every later call fails fast, and the
 * scheduler moves the work elsewhere. Only a backend can lift it, when the device is back as a
 * new incarnation with no sequence of the old one (a peer reconnected: accel_info.revivals).
 * Nothing here exits or aborts on a device fault.
 * The ACCEL_ERR_* values lie in -1 .. -99, their own range of the process's one error space
 * (scheduler/sched.h says which module owns which range and names any status). */
#ifndef TANDEM_ACCEL_H
#define TANDEM_ACCEL_H
#include <stddef.h>
#include <stdint.h>
#include "model/ckpt/model.h"
#include "proto/kv.h"
#include "sparse/sparse.h"
#include "sparse/tls.h"

typedef struct accel_dev accel_dev;
typedef struct accel_seq accel_seq;

enum accel_status {
    ACCEL_OK = 0,
    ACCEL_ERR_NOMEM = -1,       /* not enough device memory for this sequence / step */
    ACCEL_ERR_DEVICE = -2,      /* the device faulted; it is now FAILED */
    ACCEL_ERR_INVALID = -3,     /* bad argument (a bug in the caller, or input past a bound) */
    ACCEL_ERR_TIMEOUT = -4,     /* the device did not finish in time */
    ACCEL_ERR_UNSUPPORTED = -5, /* this device cannot do that (model feature, optional entry) */
    ACCEL_ERR_CORRUPT = -6,     /* imported data failed its check */
    ACCEL_ERR_CANCELLED = -7,   /* the request's cancel flag was raised */
    ACCEL_ERR_NOT_FOUND = -8,   /* no such device / backend library */
};
/* The range of accel statuses (a new code takes the next value down, inside it). These values
 * stay where they have always been: every backend returns them, the CUDA plugin is built apart
 * from the binary that loads it, and gpu/gpu_flex.h mirrors three of them as literals. */
#define ACCEL_ERR_RANGE_HI (-1)
#define ACCEL_ERR_RANGE_LO (-99)
#define ACCEL_IS_ERR(st) ((st) <= ACCEL_ERR_RANGE_HI && (st) >= ACCEL_ERR_RANGE_LO)
/* Names an accel status ("unknown device status" for any other value; sched_strerror names
 * the statuses of every module). */
const char *accel_strerror(int status);

enum accel_kind { ACCEL_KIND_CPU, ACCEL_KIND_CUDA, ACCEL_KIND_FPGA };
enum accel_health { ACCEL_HEALTH_OK, ACCEL_HEALTH_DEGRADED, ACCEL_HEALTH_FAILED };
enum { ACCEL_CAP_PREFILL = 1, ACCEL_CAP_DECODE = 2, ACCEL_CAP_KV_EXPORT = 4, ACCEL_CAP_KV_IMPORT = 8,
       ACCEL_CAP_PAGED = 16, /* KV in a pool of fixed-size blocks (see "Paged devices" below) */
       ACCEL_CAP_REMOTE = 32, /* on another node (peer/peer.h): placed after local devices */
       ACCEL_CAP_KV_EXPORT_HELD = 64, /* accel_kv_export: KV already held, out again */
       ACCEL_CAP_DECODE_ARGMAX = 128, /* accel_decode_argmax: greedy tokens picked on the device */
       ACCEL_CAP_LAYER_SPLIT = 256 /* accel_prefill_req.layers: one chunk's layers over several calls */ };

/* What one accel_decode call costs on a device, by batch size (the placement weighs devices by
 * it: scheduler/sched_policy.h). A call of batch[i] sequences holding ctx positions each takes
 * step_s[i] seconds; each position more (or fewer) in the call adds (or saves) s_per_pos
 * seconds (the KV it reads). Between points the step time is linear in the batch; past the last
 * point it follows the last segment. batch[] increases, batch[0] >= 1. n == 0: the device does
 * not say (the placement then ranks it as GLITCHES does). A backend fills it from its own timing
 * model or measurements; the scheduler may replace points with the step times it measures. */
#define ACCEL_CURVE_MAX 12
typedef struct accel_decode_curve {
    int n;
    int batch[ACCEL_CURVE_MAX];
    double step_s[ACCEL_CURVE_MAX];
    double ctx;
    double s_per_pos;
} accel_decode_curve;

/* A device's name: "cpu", "cuda:0", "fpga-emu:1", and another node's lent device "NODE/device"
 * (peer/msg.h: a node name and a device name of up to 63 each, a DNS label's length, and '/') */
#define ACCEL_NAME_MAX 127

typedef struct accel_info {
    char name[ACCEL_NAME_MAX + 1]; /* "cpu", "cuda:0", "fpga:1", "nodeB/fpga-emu:0" */
    char desc[96];            /* human-readable: "NVIDIA H100 80GB HBM3", "U280 (emulated)" */
    enum accel_kind kind;
    unsigned caps;            /* ACCEL_CAP_* */
    enum accel_health health;
    uint64_t mem_total;       /* bytes available for KV caches */
    uint64_t mem_free;        /* of which not reserved by live sequences */
    uint64_t kv_bytes_per_token; /* what one position of one sequence reserves */
    int max_batch;            /* sequences one accel_decode can take (1: not batched) */
    int n_seqs;               /* live sequences (prefix-cache holders not counted) */
    /* paged devices (ACCEL_CAP_PAGED; all 0 elsewhere) */
    int kv_block_tokens;      /* positions per block (a per-device constant) */
    uint64_t kv_block_bytes;  /* one block of one sequence: kv_block_tokens * kv_bytes_per_token */
    int kv_blocks_total;      /* the pool: mem_total / kv_block_bytes */
    int kv_blocks_used;       /* referenced by any sequence, cache holders included */
    int kv_blocks_cached;     /* of which referenced by cache holders only (evictable) */
    int n_holders;            /* prefix-cache holders (accel_seq_hold) */
    /* appended last (the CUDA plugin is built apart: a plugin that does not know it leaves it
     * zeroed by accel_get_info, "does not say") */
    accel_decode_curve decode_curve;
    unsigned revivals;        /* times the device came back after FAILED (a reconnected peer's) */
    /* A device that can keep a sparse-decoded sequence's whole KV in a slower tier (a card's
     * DDR4, fpga/BANKS.md "DDR4") and only a resident cache in mem_total: the slower tier's KV
     * bytes (0: it cannot), and what the cache of one sequence of n positions decoded with a
     * level-1 block budget of b takes of mem_total: n * resident_per_token + (b + 2) *
     * resident_per_block. resident_default_blocks: the block budget of its own sparse default
     * (0: it decodes dense unless a request asks). */
    uint64_t offload_bytes, resident_per_token, resident_per_block;
    int resident_default_blocks;
    /* a device of another node (ACCEL_CAP_REMOTE): the path its KV takes, as measured on the
     * transfers to it — bytes/s of the KV chunks sent (a weighted mean of the last ones: the
     * wire and the node's import together) and one-way seconds (half the fastest heartbeat's
     * round trip); 0: not measured yet. The placement's network term weighs them. */
    double link_bps, link_s;
    /* with offload_bytes: 1 when its sparse-decoded sequences leave mem_total for the slower tier
     * whatever their size, once their prompt is in (a GPU whose decode_sparse says offload=1:
     * the prompt's KV fills the pool while it is prefilled, gpu/tls_off.cu); 0: only those whose
     * whole KV does not fit mem_total do (a card) */
    int offload_any;
    /* with offload_bytes: what one position of capacity takes of it (whole kv_block_tokens
     * at a time: a GPU keeps only the sparse layers' K/V there); 0: kv_bytes_per_token (a card
     * keeps the whole KV there). The scheduler commits offload_bytes across requests by it. */
    uint64_t offload_per_token;
    uint64_t offload_used; /* of offload_bytes, what its sequences hold now (0: does not say) */
    /* of mem_total, what others than this process hold (a lent device's other clients, as its
     * node last reported: peer/remote_live.c); part of what mem_free leaves out. 0: none (every
     * local device) */
    uint64_t mem_outside;
} accel_info;

/* The half-precision format the cuda backend keeps weights and activations in (cuda only; the
 * other backends ignore it). Each is its own build of the plugin, beside the binary:
 *   ACCEL_GPU_HALF_BF16  libtandem_cuda.so      bfloat16: float32's range, 8 mantissa bits
 *   ACCEL_GPU_HALF_F16   libtandem_cuda_f16.so  float16: 11 mantissa bits (3 more), but a range
 *                                               of +-65504: activations past it overflow to inf
 *   ACCEL_GPU_HALF_AUTO  by the checkpoint's projection matrices (layers[0].wq; embed when the
 *                        model has no layers): F16 for float32 and float16, which bf16 would round
 *                        away 3 bits of; BF16 for bfloat16, whose range float16 cannot hold.
 * A checkpoint whose activations overflow fp16 runs with ACCEL_GPU_HALF_BF16. Where AUTO picks
 * fp16 and only the bf16 plugin is installed, the device opens on it with a one-line warning on
 * stderr (serving at bf16's precision beats not serving); an explicit F16 never falls back: the
 * open fails, naming the missing file (devices_cuda_plugin_find, devices/devices.h). */
enum accel_gpu_half { ACCEL_GPU_HALF_AUTO = 0, ACCEL_GPU_HALF_BF16, ACCEL_GPU_HALF_F16 };

typedef struct accel_opts {
    int threads;              /* cpu: worker threads (0: all cores) */
    uint64_t mem_limit;       /* 0: the device's own; else cap the KV budget at this many bytes */
    enum proto_kv_dtype kv_dtype; /* dtype the device exports / imports KV in (default int8) */
    const char *lib_path;     /* cuda: the plugin (NULL: the one gpu_half picks, found beside the
                                 binary or in ../lib/tandem; a path given here wins, whatever
                                 gpu_half says); fpga: libxrt_coreutil.so.2 or emulator.
                                 Read while the device opens; the device keeps no copy of
                                 the pointer */
    const char *xclbin;       /* fpga: bitstream path (NULL: use the loaded one / emulator) */
    int weight_bits;          /* fpga: 8 or 4 */
    int pace;                 /* fpga-emu: pace runs to the timing model in real time */
    unsigned run_timeout_ms;  /* fpga: a run's watchdog (0: $TANDEM_FPGA_TIMEOUT_MS, else 30 s) */
    const char *cache_dir;    /* fpga: weight-image cache (NULL: $TANDEM_CACHE_DIR, else
                                 ~/.cache/tandem) */
    enum accel_gpu_half gpu_half; /* cuda: the bf16 or fp16 build of the plugin (default AUTO);
                                     last, so that a plugin built before it still reads the
                                     fields above where they were */
    const char *gpu_tune;     /* cuda: the engine's settings, "key=value,..." (gpu/tuning.h; the
                                 daemon's gpu_tune key), read at open; NULL: $TANDEM_GPU_TUNE */
    const char *decode_sparse; /* sparse decode of long contexts (the daemon's decode_sparse key):
                                  NULL: $TANDEM_DECODE_SPARSE; "" or "off": dense; "asynctls" or
                                  "asynctls,key=value,...": AsyncTLS two-level selection with
                                  sparse/tls.h's parameters (cpu, cuda, fpga; other devices run dense). Needs
                                  the channel file: opening fails with a message without it */
    const char *sparse_channels; /* that file (NULL: <model dir>/tandem-channels.bin, written by
                                    tandem calibrate-channels) */
} accel_opts;

/* Sink for the quantized KV a prefill produces, one call per layer in layer order, from the
 * device's thread, as soon as that layer's chunk is on the host. The chunk's memory is valid
 * only during the call. A non-zero return aborts the prefill with that status. */
typedef struct accel_kv_sink {
    int (*layer)(void *ctx, const proto_kv_layer *chunk);
    void *ctx;
} accel_kv_sink;

/* A prefill call's sparse attention, settled: the method and its parameters resolved once
 * (request > configuration > default) and checked (sparse_params_check), and this call's chunk
 * found to be sparse by the scheduler (sparse/sparse.h: sparse_plan, sparse_chunk_len). The
 * chunk [seq len, seq len + n) attends sparsely to everything cached before it and to itself;
 * the backend applies the method, nothing more (a device whose kernels do not cover the method
 * or the shape runs the chunk dense and says so in the report). */
typedef struct accel_sparse {
    sparse_params p;
} accel_sparse;

/* What a sparse prefill did, summed over layers and heads. */
typedef struct accel_sparse_report {
    int layers_sparse;      /* layers that took the sparse path (0: the prompt ran dense) */
    int64_t blocks_computed;
    int64_t blocks_causal;
    double density;         /* blocks_computed / blocks_causal (1 when dense) */
} accel_sparse_report;

typedef struct accel_prefill_req {
    accel_seq *seq;
    const int32_t *ids;       /* tokens appended at the sequence's current length */
    int n;
    float *logits;            /* out: (n, vocab) if all_logits, else (vocab) for the last token;
                                 may be NULL (an intermediate chunk needs none) */
    int all_logits;
    const accel_kv_sink *kv;  /* optional: export these tokens' KV */
    const volatile int *cancel; /* optional: polled between layers -> ACCEL_ERR_CANCELLED */
    const accel_sparse *sparse; /* optional: this chunk runs sparse (NULL: dense attention);
                                   a device without the method runs dense and says so in the
                                   report */
    accel_sparse_report *sparse_report; /* optional out: this call's layers */
    /* Layer-split prefill (devices with ACCEL_CAP_LAYER_SPLIT; ACCEL_ERR_UNSUPPORTED elsewhere).
     * layers 0 (or layer0 0 and layers the model's n_layers): a whole call, as above. Else this
     * call runs only layers [layer0, layer0 + layers) of the chunk (0 <= layer0, 1 <= layers,
     * layer0 + layers <= n_layers), so that one chunk's work can be spread over several calls,
     * between other sequences' decode steps, when even the smallest chunk costs more than a
     * time-between-tokens budget:
     *   - layer0 0 starts the chunk (ids at the sequence's length, as a whole call); a later call
     *     continues it: the same seq, n and ids (and sparse, cancel, kv), layer0 the layer the
     *     previous call stopped at (anything else: ACCEL_ERR_INVALID). The device keeps the
     *     chunk's residual stream (n x hidden activations) with the sequence between the calls.
     *   - the call that runs the last layer completes the chunk: it writes logits (as a whole
     *     call: logits/all_logits are read only there) and the sequence's length grows by n.
     *     Until then the length stays where it was and the chunk's positions hold partial KV.
     *   - the result — logits, KV, the decode after it — is bit for bit that of one whole call
     *     (cuda: within its stated tolerance where it documents one), dense and sparse alike
     *     (the sparse index is per layer); kv sees every layer of the chunk once, in layer order,
     *     over the calls; sparse_report covers this call's layers (sum the calls for the chunk).
     *   - a failed call (cancel included) abandons the chunk: its state is freed and the next
     *     call must start again from layer0 0 (the KV written so far lies past the length, as a
     *     failed whole call's does). A whole call, a call from layer0 0, a decode step, an
     *     import, accel_kv_block_load, accel_seq_truncate or accel_seq_free of the sequence
     *     abandon a pending chunk the same way. */
    int layer0;
    int layers;
} accel_prefill_req;

/* Paged devices (ACCEL_CAP_PAGED). The KV of every sequence lives in fixed-size blocks of
 * kv_block_tokens positions taken from one pool per device (kv_blocks_total blocks), through a
 * block table per sequence, with reference counts: accel_seq_fork shares blocks, and a write into
 * a shared block lands in a private copy (copy-on-write). On such a device:
 *   - accel_seq_new / accel_seq_fork reserve no memory: `capacity` is only the most positions
 *     the sequence may hold. Blocks are taken as the sequence grows: accel_prefill, accel_decode
 *     and accel_kv_import take the blocks their new positions need (and the copy of a shared
 *     block they write into) first, and answer ACCEL_ERR_NOMEM with every sequence unchanged
 *     when the pool cannot supply them — the caller frees something (evicts cached prefixes,
 *     preempts a sequence) and calls again.
 *   - mem_free is what a new sequence can take: (total - used + cached) * kv_block_bytes;
 *     cached blocks are given back by freeing the holder sequences that keep them.
 *   - accel_seq_hold marks a sequence as a prefix-cache holder: the blocks only holders
 *     reference count as cached (kv_blocks_cached) rather than in use.
 *   - accel_kv_block_save / accel_kv_block_load move one block's exact bytes (every layer's K
 *     and V as the device stores them) to and from host memory: the host tier. A block saved
 *     and loaded back gives bit-identical results to the block never having left.
 * Devices without ACCEL_CAP_PAGED keep the older contract: a sequence reserves capacity *
 * kv_bytes_per_token when it is created. */

/* Devices are opened by name through devices_open (devices/devices.h); this frees one. */
void accel_free(accel_dev *d);

void accel_get_info(accel_dev *d, accel_info *out);
const model *accel_model(accel_dev *d);

/* Reserves a sequence able to hold `capacity` positions. */
int accel_seq_new(accel_dev *d, int capacity, accel_seq **out);
void accel_seq_free(accel_dev *d, accel_seq *s);
int accel_seq_len(accel_dev *d, const accel_seq *s);
/* Forgets positions >= len (keeps the first len). */
int accel_seq_truncate(accel_dev *d, accel_seq *s, int len);
/* A new sequence of `capacity` positions (n_tokens <= capacity <= the model's context) holding
 * src's first n_tokens positions (0 <= n_tokens <= src's length, no import in progress on src)
 * without recomputing or copying them: the device shares src's KV blocks, and a write of either
 * side into a shared block lands in a copy, so the two never see each other's later tokens (n
 * choices of one prompt, a reused prefix). A paged device takes no memory for it until it
 * grows; elsewhere it reserves as accel_seq_new(capacity) does. Free it with accel_seq_free, in
 * any order with src. Optional entry: ACCEL_ERR_UNSUPPORTED where the device cannot share
 * blocks (ACCEL_ERR_INVALID for bad arguments, ACCEL_ERR_NOMEM). */
int accel_seq_fork(accel_dev *d, accel_seq *src, int n_tokens, int capacity, accel_seq **out);

/* Marks s as a prefix-cache holder (paged devices; ACCEL_ERR_UNSUPPORTED elsewhere). A holder
 * is never prefilled, decoded or imported into again (ACCEL_ERR_INVALID); fork it to reuse it. */
int accel_seq_hold(accel_dev *d, accel_seq *s);
/* Copies block `block` (positions [block * kv_block_tokens, +kv_block_tokens), which must all
 * hold KV) of s into dst: kv_block_bytes bytes, page-locked memory from accel_host_alloc for
 * the fastest copy. Waits until the bytes are in dst. Paged devices only. */
int accel_kv_block_save(accel_dev *d, accel_seq *s, int block, void *dst);
/* Appends one full block of bytes saved by accel_kv_block_save (on this device, or on another
 * of the same kind and model) at the end of s, whose length must be a multiple of
 * kv_block_tokens: its length grows by kv_block_tokens. ACCEL_ERR_NOMEM as for a prefill.
 * The device may read src until its next call returns (cuda queues the copy and overlaps it with
 * the next prefill of s, layer by layer; cpu and fpga copy at once): keep src unchanged until
 * then; accel_host_free of it is such a call. */
int accel_kv_block_load(accel_dev *d, accel_seq *s, const void *src);

/* Exports the KV of positions [pos0, pos0 + n) that s already holds, through sink, exactly as
 * a prefill of those positions exported it (the same dtype, the same bytes: cpu quantizes the
 * float32 rows it keeps, cuda the h16 rows of its cache, at prefill as here): runs of positions,
 * each one chunk per layer in layer order (the runs may be cut elsewhere than the prefill's; a
 * position's bytes do not depend on its run). So a prompt whose prefix came from the prefix cache
 * can still ship its whole KV to a card. Optional (ACCEL_CAP_KV_EXPORT_HELD: cpu, cuda);
 * ACCEL_ERR_UNSUPPORTED elsewhere. */
int accel_kv_export(accel_dev *d, accel_seq *s, int pos0, int n, const accel_kv_sink *sink);

/* AsyncTLS sparse decode of one sequence from its next decode step on (sparse/tls.h; the
 * decision is made once, by the caller: sparse_tls_resolve, request > configuration > default,
 * checked). p NULL: dense. A device keeps its own block_size, channels and dense_layers (its
 * channel file and accel_opts.decode_sparse) and takes the sequence's token_budget,
 * block_budget and dense_below from p. A fork inherits the setting. Optional entry:
 * ACCEL_ERR_UNSUPPORTED where the device cannot (no channel file, no kernels, budgets past its
 * kernels' bounds): the sequence decodes dense — documented, not an error for a request. */
int accel_seq_decode_sparse(accel_dev *d, accel_seq *s, const sparse_tls_params *p);
/* What a sequence's decode steps read since sparse decode was turned on for it (all zero when
 * it never was), summed over steps, layers and KV heads: keys attended and keys the rows held
 * (dense layers and dense rows count every key), and the offload's traffic model — level-1
 * blocks kept that the step before had not kept (what crosses the link) against all blocks kept
 * (a whole-block offload). Optional (ACCEL_ERR_UNSUPPORTED). */
typedef struct accel_decode_stats {
    int64_t keys_read, keys_total;
    int64_t blocks_new, blocks_kept;
    int64_t steps;
    int64_t host_keys; /* of keys_read, read from host memory (a GPU's offloaded sequence) */
    int offloaded;     /* its KV lives in host memory (sparse_tls_params.offload) */
} accel_decode_stats;
int accel_seq_decode_stats(accel_dev *d, accel_seq *s, accel_decode_stats *out);

int accel_prefill(accel_dev *d, const accel_prefill_req *r);
/* One decode step: seqs[i] gets token ids[i] at its next position; logits is (n, vocab). Each
 * sequence at most once per call (ACCEL_ERR_INVALID otherwise). */
int accel_decode(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids, float *logits);
/* accel_decode with the greedy choice made where the logits are. argmax[i] is
 * model_sample_argmax of row i's logits (model/sample/sample.h: NaN never chosen, +inf counted as
 * FLT_MAX, ties to the lowest id, -1 when no logit is finite) — exactly the token the CPU sampler
 * takes from that row at temperature 0 without bias, penalties or logprobs. logits has room for
 * (n, vocab) as for accel_decode; row i is written only where want_logits[i] is non-zero (NULL:
 * every row), the others may be left as they were. A device with ACCEL_CAP_DECODE_ARGMAX picks
 * the tokens itself and moves only the rows wanted (cuda: 4 bytes for a row instead of 4 x vocab
 * over PCIe, which at batch 256 of Llama-3 saves 131 MB a step); on every other device the wrapper
 * runs accel_decode and the argmax on the host, so the contract holds everywhere. Where the step
 * fails, as accel_decode. */
int accel_decode_argmax(accel_dev *d, int n, accel_seq *const *seqs, const int32_t *ids,
                        float *logits, const unsigned char *want_logits, int32_t *argmax);
/* Appends one layer chunk of imported KV. Chunks of a layer arrive in position order; a
 * sequence's length grows when the last layer of a run of positions has arrived.
 * Optional entry: ACCEL_ERR_UNSUPPORTED where the device has none. */
int accel_kv_import(accel_dev *d, accel_seq *s, const proto_kv_layer *chunk);
/* The same for a chunk that came in the KV wire format: payload_crc is the CRC32C of its wire
 * payload (proto/KV_FORMAT.md) as the producer computed it, where the KV was made. A device
 * that verifies what landed in its own memory (fpga: when a run of positions is complete, the
 * card reads every layer of it back from where the decode kernel will read it) checks against
 * this CRC, so corruption anywhere from the producer to the device's memory fails the import
 * with ACCEL_ERR_CORRUPT; plain accel_kv_import makes such a device check against a CRC of the
 * chunk as it received it. Devices without a check of their own import as accel_kv_import. */
int accel_kv_import_crc(accel_dev *d, accel_seq *s, const proto_kv_layer *chunk,
                        uint32_t payload_crc);
/* Runs a small step and waits for the device (asynchronous errors surface here). */
int accel_warmup(accel_dev *d);
/* Host memory for buffers the device fills often (accel_decode's logits): where the device
 * copies into page-locked memory directly (cuda: cudaHostAlloc), such a buffer skips a staging
 * copy on every step; elsewhere plain malloc. NULL when bytes is 0, or out of memory. Free it
 * with accel_host_free on the same device, before accel_free. */
void *accel_host_alloc(accel_dev *d, size_t bytes);
void accel_host_free(accel_dev *d, void *p);

/* The dtype AUTO decides by: layers[0].wq's (the projections hold nearly all the weights),
 * embed's in a model without layers. Pure; any thread. */
enum model_dtype accel_ckpt_dtype(const model *m);
/* AUTO resolved for model m: ACCEL_GPU_HALF_F16 or ACCEL_GPU_HALF_BF16 (h itself when it is not
 * AUTO; BF16 for a NULL model). Pure; any thread. */
enum accel_gpu_half accel_gpu_half_resolve(const model *m, enum accel_gpu_half h);
/* "auto" | "bf16" | "fp16" -> *out: 0, or -1 (out untouched) for anything else. */
int accel_gpu_half_parse(const char *s, enum accel_gpu_half *out);
/* "auto", "bf16", "fp16" (for logs and messages). */
const char *accel_gpu_half_name(enum accel_gpu_half h);

/* Helpers built on the above. */
/* bytes of KV one sequence reserves for `capacity` positions on this device */
uint64_t accel_kv_bytes(accel_dev *d, int capacity);
const char *accel_kind_name(enum accel_kind k);
const char *accel_health_name(enum accel_health h);

#endif
