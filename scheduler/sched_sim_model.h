/* scheduler/sched_sim_model.h — timing models of the devices the system simulator drives.
 *
 * Every device call is priced with a roofline-shaped formula whose two rates come from one
 * published or measured calibration point per device (each profile of the catalogue,
 * devices/sim_hw.c, names its source):
 *
 *   prefill of n tokens appended at position pos0 (compute-bound: GEMMs + causal attention;
 *   a short chunk is bound by the pass over the weights and cached KV every call makes)
 *       t = fixed + max(flops(n, pos0) / prefill_flops,
 *                       (weight_bytes + pos0 * kv_bytes_per_token) / decode_bps)
 *       flops = 2 * params * n  +  4 * layers * (heads * head_dim) * n * (pos0 + n / 2)
 *   decode step of `batch` sequences holding sum_ctx positions in all (bandwidth-bound)
 *       t = fixed + max((weight_bytes + sum_ctx * kv_bytes_per_token) / decode_bps,
 *                       2 * params * batch / compute) + (batch - 1) * seq_s
 *       (seq_s: what each further sequence of a batch costs beyond its KV bytes, from a measured
 *       batched step where there is one; 0 otherwise; compute: the profile's decode_ops where
 *       it gives one — a card's MAC array — else the prefill rate)
 *     or, for a profile with a measured batched decode curve (tok/s at batches b_i, context
 *     c each), the curve's step time b / tok_s interpolated linearly in the batch (beyond the
 *     last point: extended by its last segment) plus the KV bytes the step holds beyond
 *     batch x c positions at the profile's curve_kv_bps (measured on batched steps; decode_bps
 *     where it gives none)
 *   KV ship of one layer's chunk from a prefill device to a card (GLITCHES: GPU -> host ->
 *   FPGA over PCIe, "the GPU to FPGA latency is obtained by adding the latency from GPU to CPU
 *   and from CPU to FPGA")
 *       t = per hop: link_s + bytes / link_bps   (a CPU's hop is host memory: free)
 *   between nodes (several nodes, '/' in the spec: peer/, issue 26) a third hop in the middle,
 *   host to host over the network: each node's NIC sends one chunk at a time at net_bps, and a
 *   chunk arrives net_s after it left (defaults: SCHED_SIM_NET_BPS, SCHED_SIM_NET_S); the tokens
 *   of a remote decode reach the client's node net_s after their step
 *
 * The calibration inverts the same formulas: prefill_flops = flops(cal tokens, 0) /
 * (cal prefill time - fixed); decode_bps = bytes(cal context) / (cal decode time - fixed). So
 * the model reproduces its calibration points exactly and scales to other lengths and shapes by
 * FLOPs and bytes. What it leaves out: kernel efficiency changing with the shape, batch-size
 * effects on GEMM efficiency, PCIe contention between cards, host CPU time.
 *
 * Weights and KV per device: GPUs hold fp16/bf16 weights and fp16 KV; a card holds W4A8 (4-bit
 * weights + 5 % quantization metadata: GLITCHES Sec. IV says 4-6 %) or W8A8 weights and int8 KV
 * with one fp16 scale per token and head (proto/kv.h). KV budget = memory - weights - 10 %
 * (activations, workspace).
 *
 * Threads: pure functions and constant tables. */
#ifndef TANDEM_SCHED_SIM_MODEL_H
#define TANDEM_SCHED_SIM_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "scheduler/sched_book.h"

typedef struct sched_sim_shape {
    const char *name;
    double params;       /* weights, all layers + embeddings + head */
    int n_layers, n_heads, n_kv_heads, head_dim;
    int context;         /* the model's context length */
    int vocab;           /* its vocabulary: a logits row is vocab float32 */
} sched_sim_shape;

/* One hardware profile: calibration points and physical facts (the table's rows). */
typedef struct sched_sim_hw {
    const char *name;
    enum accel_kind kind;
    unsigned caps;              /* ACCEL_CAP_* as the real backend reports them */
    int max_batch;              /* sequences per decode call (1: a FlightLLM-style card) */
    const char *cal_shape;      /* model of the calibration points */
    double cal_prefill_tokens, cal_prefill_s; /* a prefill of this many tokens took */
    double cal_decode_ctx, cal_decode_s;      /* one decode step, batch 1, at this context */
    double fixed_s;             /* per call, not scaling with bytes or FLOPs */
    double seq_s;               /* per further sequence of a batched decode step */
    double mem_bytes;           /* device memory */
    int weight_bits, kv_bits;   /* 16/16 (GPU) or 4|8/8 (card) */
    double link_bps, link_s;    /* host link per direction; 0 bps: host memory */
    double price;               /* dollars (cost efficiency) */
    const char *source;
    /* appended (0 where a profile does not say) */
    double power_w;             /* board power at full load (energy: tok/J) */
    double decode_ops;          /* a card's decode compute bound, int8 ops/s (0: prefill rate) */
    /* a measured batched decode curve: tok/s at batch curve_b[i], context curve_ctx each;
     * a step of other batches interpolates the step time linearly in the batch */
    int n_curve;
    double curve_b[8], curve_tps[8], curve_ctx;
    const char *power_source;
    /* the rate a curve's steps read the KV beyond curve_ctx positions per sequence, bytes/s
     * (measured on batched steps; 0: decode_bps, the batch-1 calibration's) */
    double curve_kv_bps;
    /* a layer-split prefill call's own part (ACCEL_CAP_LAYER_SPLIT, accel.h): what a call of
     * some of the layers pays beyond its layers' share of the whole call (sched_sim_prefill_split_s;
     * 0: fixed_s, the call's fixed part, once more) */
    double split_s;
} sched_sim_hw;

/* Sparse prefill on a GPU (issue 22's methods), priced as a factor on a prompt's dense prefill
 * time that depends on its length n (every chunk of the prompt takes the factor):
 *   factor(n) = (linear + r(n) x attention) / (linear + attention)
 * linear and attention the two terms of sched_sim_prefill_flops (pos0 0, n tokens), and r(n) the
 * time of the sparse attention and its index over the dense attention's, from kernels measured
 * at ref_n tokens:
 *   r(n) = min(1, attn_per_density x density(n) + index_share x ref_n / n)
 * (the sparse kernel's time per unit of density; the index is linear in n where attention is
 * quadratic). density(n): Tri-shape's fixed geometry when chunk > 0 — each chunk of `chunk`
 * tokens sees the first `start` and the last `recent` cached tokens and itself causally, the last
 * `tail` tokens run dense — else density_ref at ref_n and above, density_ref x ref_n / n below
 * (budgets counted in tokens). r >= 1 prices the prompt dense (an operator prefills such prompts
 * dense: sparse_dense_below). The same factor on every GPU of every node. The FLOP split
 * gives attention a smaller share of a long prefill than the measured kernels do (at 32K 35 %
 * against 38 %), so the modelled gain is below the measured one (tests/scheduler). */
typedef struct sched_sim_sparse {
    const char *name;
    int start, recent, chunk, tail; /* Tri-shape's geometry (chunk 0: density_ref) */
    double density_ref, ref_n;
    double attn_per_density, index_share;
    const char *source;
    /* appended (0 where a method does not say): chunked prefill (issue 22). block: its block
     * (sparse_block_size: no chunk leaves less than one over, sparse_chunk_len); its chunks come
     * in whole blocks, or in Tri-shape's chunks when chunk > 0 (sparse_resume_align; beside
     * decodes every chunk is one such chunk, as sparse_chunk_len cuts them); call_key_s:
     * seconds every chunk's call pays per cached key before it, all layers — the index scores
     * the chunk's last block against every cached key whatever the chunk's size (a whole
     * prompt, at position 0, pays none of it: its index is index_share's); split_s: a
     * layer-split call's own part (sched_sim_hw.split_s, for this method's calls) */
    int block;
    double call_key_s, split_s;
} sched_sim_sparse;

/* The share of causal attention a Tri-shape-like geometry computes at n tokens, or the
 * density_ref rule; the factor above (1 for sp NULL). */
double sched_sim_sparse_density(const sched_sim_sparse *sp, int n);
double sched_sim_sparse_factor(const sched_sim_sparse *sp, const sched_sim_shape *s, int n);

/* A device as the simulator prices it (derived from a profile and a shape). */
typedef struct sched_sim_dev_model {
    char name[ACCEL_NAME_MAX + 1]; /* as accel_info names it: "fpga:0", a peer's "n1/fpga:0" */
    const sched_sim_hw *hw;
    enum accel_kind kind;
    unsigned caps;
    int max_batch, max_running;
    uint64_t mem_kv, kv_bytes_per_token;
    double params, weight_bytes;
    double prefill_flops, decode_bps, fixed_s, seq_s;
    double split_s;            /* a dense layer-split call's own part (hw split_s, else fixed_s) */
    int n_layers, attn_dim;    /* the layers a layer-split call divides (the shape's) */
    double link_bps, link_s;
    double power_w, decode_ops;
    int node;                  /* 0: the node holding the clients; > 0: another (remote) node */
    const sched_sim_sparse *sparse; /* its prefill's sparse method (NULL: dense) */
    sched_sim_shape shape;     /* the model it runs (the sparse factor's FLOP split) */
} sched_sim_dev_model;

/* The network between nodes when a spec names several and the caller sets none: 100 Gbit/s
 * each way per node (a 100GbE or HDR100 NIC) and 10 us one way (RDMA's few us plus a switch;
 * over TCP it is tens of us: pass --net). */
#define SCHED_SIM_NET_BPS 12.5e9
#define SCHED_SIM_NET_S 10e-6
#define SCHED_SIM_MAX_NODES 8

typedef struct sched_sim_model {
    sched_sim_shape shape;
    sched_sim_dev_model dev[SCHED_BOOK_MAX_DEVICES];
    int n_devs;
    int n_nodes;               /* 1 + the remote nodes */
    double net_bps, net_s;     /* between nodes: NIC bytes/s each way, one-way latency */
    /* what a remote decode step brings back to the clients' node per row: the row's logits
     * (vocab float32: the client's node samples), or 4 bytes where every row is plain greedy
     * (the peer protocol's DECODE_ARGMAX); sched_sim_model_build sets the logits */
    double row_back_bytes;
} sched_sim_model;

/* The hardware profiles a simulation may price: a table its caller owns. The scheduler knows
 * no device by name; the composition root holds tandem's catalogue (devices/sim_hw.h), whose
 * card profiles take the U280's facts from the FPGA backend's own header. */
typedef struct sched_sim_catalog {
    const sched_sim_hw *hw;
    int n;
} sched_sim_catalog;

const sched_sim_shape *sched_sim_shape_find(const char *name);
/* The profile called name in c, or NULL. */
const sched_sim_hw *sched_sim_hw_find(const sched_sim_catalog *c, const char *name);
/* The shapes, for listing: element i, NULL past the end. */
const sched_sim_shape *sched_sim_shape_at(int i);

/* Prices hw running shape s. max_running: decode sequences it may hold (0: max_batch for a
 * card, 256 otherwise). Returns 0, or -1 with a message (the model does not fit its memory, or
 * a calibration point is unusable). */
int sched_sim_dev_init(sched_sim_dev_model *out, const sched_sim_hw *hw,
                       const sched_sim_shape *s, int max_running, int index, char *err,
                       size_t errlen);
/* Replaces a device's calibration with a measured point (e.g. the CUDA backend's bench):
 * prefill of `tokens` tokens in `seconds`, or one batch-1 decode step at context `ctx`. */
void sched_sim_dev_calibrate_prefill(sched_sim_dev_model *d, const sched_sim_shape *s,
                                     double tokens, double seconds);
void sched_sim_dev_calibrate_decode(sched_sim_dev_model *d, const sched_sim_shape *s,
                                    double ctx, double seconds);

/* A node from a spec: '+'-separated terms "[N x]profile" of catalogue c, e.g. "a100+7xu280",
 * "8xa100", "h100+7xu280-tandem"; several nodes separated by '/', the first the one the clients
 * talk to, e.g. "h200-tandem/4xu280-batch/4xu280-batch": the other nodes' devices take decodes
 * and KV only, as a peer's devices do (ACCEL_CAP_REMOTE: placed after local cards), over the
 * network (net_bps, net_s: SCHED_SIM_NET_* until the caller sets others). gpu_max_running: decode
 * sequences per GPU/CPU (1: GLITCHES' latency-sensitive batch of one; 0: 256). Returns 0, or -1
 * with a message. */
int sched_sim_model_build(sched_sim_model *m, const sched_sim_catalog *c, const char *node,
                          const char *shape, int gpu_max_running, char *err, size_t errlen);

/* One host-link hop of a device (0 for host memory), and the network's time on the wire for one
 * message between nodes (without the latency). */
double sched_sim_hop_s(const sched_sim_dev_model *d, double bytes);
double sched_sim_net_wire_s(const sched_sim_model *m, double bytes);
/* What a decode step of b rows on another node's device adds to its own time: the call's round
 * trip, as the daemon makes it (peer/msg.h DECODE: the rows' tokens out, then each row's logits
 * back, row_back_bytes, before the clients' node samples the next tokens): two latencies and the
 * bytes on the wire (16 a row out: token, sequence, position). */
double sched_sim_remote_trip_s(const sched_sim_model *m, int b);

double sched_sim_prefill_flops(const sched_sim_shape *s, double n, double pos0);
/* A prefill call of n tokens at pos0: fixed + max(FLOPs / prefill_flops, (weight_bytes + pos0 x
 * kv_bytes_per_token) / decode_bps) — the FLOPs of the header's formula, and a floor for a
 * short chunk: every call reads all the weights and the cached KV once (a 16-token chunk of the
 * 8B shape on an H200 costs the weights' ~3.5 ms read, not its ~0.1 ms of FLOPs). The
 * calibration points are compute-bound, so they are reproduced as before. */
double sched_sim_prefill_s(const sched_sim_dev_model *d, int n, int pos0);
/* A chunk of n tokens at pos0 of a prompt of n_prompt tokens: sched_sim_prefill_s, its FLOP term
 * times the sparse factor of n_prompt when the device prefills sparse (the memory floor stays),
 * plus the method's index over the pos0 cached keys (call_key_s x pos0). */
double sched_sim_prefill_chunk_s(const sched_sim_dev_model *d, int n, int pos0, int n_prompt);
/* 1 when d prices a prompt of n_prompt tokens sparse (its method, and a factor below 1). */
int sched_sim_prefill_sparse(const sched_sim_dev_model *d, int n_prompt);
/* A layer-split call (ACCEL_CAP_LAYER_SPLIT) of `layers` of the chunk's n_layers:
 *     t = s + (W - s) x layers / n_layers
 * W the whole chunk's call (sched_sim_prefill_chunk_s), s its own part (the sparse method's
 * split_s for a sparse prompt where it gives one, else the device's split_s; at most W): the form of the H200's
 * measured split calls (BENCHMARKS.md, "Where the p99 gaps come from": XAttention's ~3.5 ms per
 * call whatever its layers). layers <= 0 or >= n_layers: the whole call, W. */
double sched_sim_prefill_split_s(const sched_sim_dev_model *d, int n, int pos0, int n_prompt, int layers);
double sched_sim_decode_s(const sched_sim_dev_model *d, int batch, long long sum_ctx);
/* The rate a decode step of d reads KV positions beyond its curve's (or calibration's) own. */
double sched_sim_kv_bps(const sched_sim_dev_model *d);
/* The device's decode cost as accel_info.decode_curve describes one (what the placement weighs,
 * sched_policy.h): sched_sim_decode_s at batches 1, 2, 4, ... up to max_batch (and max_batch
 * itself), SCHED_SIM_CURVE_CTX positions per sequence; s_per_pos the KV bytes of one position
 * at the rate sched_sim_decode_s reads them (sched_sim_kv_bps). */
#define SCHED_SIM_CURVE_CTX 1024
void sched_sim_dev_curve(const sched_sim_dev_model *d, accel_decode_curve *out);
/* One layer's KV chunk of `bytes` from a prefill device to a card. */
double sched_sim_ship_s(const sched_sim_dev_model *from, const sched_sim_dev_model *to,
                        double bytes);

#endif
